/*
 * sampler_avx2.c - the sampler's passes over the vocabulary, 8 lanes at a
 * time, for a CPU with AVX2: the table sampler_kernels_avx2
 * (sampler_internal.h), which sampler_create() picks once where the CPU
 * has it.  sampler_portable.c stays for the others and is what this
 * code must agree with, bit for bit: tests/unit/test_sampler.c holds the
 * two together on random rows.  The target is "avx2" without "fma", so
 * no multiply-add can be fused and each lane runs exactly
 * sampler_weight()'s float operations.  sampler.c's NOTES ON THE DESIGN
 * say what each pass is for.  Below it only sampler_cut.c is called
 * (top_k's compaction).
 */
#include <math.h>

#include "sampling/sampler_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define SAMPLER_AVX2 static __attribute__((target("avx2")))
#define SAMPLER_AVX2_INLINE \
	static inline __attribute__((always_inline, target("avx2")))


bool sampler_have_avx2(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2");
}

/* sampler_max_portable() in 8 lanes: four maxima in flight, not one chain. */
SAMPLER_AVX2 float sampler_max_avx2(const float *y, uint32_t n,
					   bool *bad)
{
	const __m256 inf = _mm256_set1_ps(INFINITY);
	__m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
	__m256 b0 = _mm256_setzero_ps(), b1 = b0;
	float m = -INFINITY, lanes[8];
	uint32_t i = 0;
	bool b = false;

	/* NaN or +inf is "not less than +inf" (unordered compares true);
	 * a NaN may spoil the maximum, but then the row fails anyway. */
	for (; i + 32 <= n; i += 32) {
		__m256 v0 = _mm256_loadu_ps(y + i), v1 = _mm256_loadu_ps(y + i + 8);
		__m256 v2 = _mm256_loadu_ps(y + i + 16), v3 = _mm256_loadu_ps(y + i + 24);

		b0 = _mm256_or_ps(b0, _mm256_or_ps(_mm256_cmp_ps(v0, inf, _CMP_NLT_UQ),
						   _mm256_cmp_ps(v1, inf, _CMP_NLT_UQ)));
		b1 = _mm256_or_ps(b1, _mm256_or_ps(_mm256_cmp_ps(v2, inf, _CMP_NLT_UQ),
						   _mm256_cmp_ps(v3, inf, _CMP_NLT_UQ)));
		m0 = _mm256_max_ps(m0, v0);
		m1 = _mm256_max_ps(m1, v1);
		m2 = _mm256_max_ps(m2, v2);
		m3 = _mm256_max_ps(m3, v3);
	}
	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_loadu_ps(y + i);

		b0 = _mm256_or_ps(b0, _mm256_cmp_ps(v, inf, _CMP_NLT_UQ));
		m0 = _mm256_max_ps(m0, v);
	}
	for (; i < n; i++) {
		b |= !(y[i] < INFINITY);
		m = y[i] > m ? y[i] : m;
	}
	_mm256_storeu_ps(lanes, _mm256_max_ps(_mm256_max_ps(m0, m1),
					      _mm256_max_ps(m2, m3)));
	for (int j = 0; j < 8; j++)
		m = lanes[j] > m ? lanes[j] : m;
	*bad = b || _mm256_movemask_ps(_mm256_or_ps(b0, b1));
	return m;
}

/* The first i >= from with y[i] == m (there is one). */
SAMPLER_AVX2 uint32_t sampler_find_avx2(const float *y, uint32_t n,
					       uint32_t from, float m)
{
	const __m256 mv = _mm256_set1_ps(m);
	uint32_t i = from;

	for (; i + 8 <= n; i += 8) {
		int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(y + i),
							    mv, _CMP_EQ_OQ));

		if (mask)
			return i + (uint32_t)__builtin_ctz((unsigned)mask);
	}
	while (y[i] != m)
		i++;
	return i;
}

/*
 * sampler_weight() of 8 tokens: sampler_portable.c's sampler_weight_v4() (the
 * scalar operations with x clamped at SAMPLER_X_MIN, the polynomial
 * times 2^30, and 2^n added to its exponent bits) in 8 lanes.  Few
 * constants: the loop keeps them all in registers.
 */
SAMPLER_AVX2_INLINE __m256 sampler_x_avx2(__m256 y, __m256 max_y,
					    __m256 scale)
{
	return _mm256_mul_ps(_mm256_sub_ps(y, max_y), scale);
}

SAMPLER_AVX2_INLINE __m256i sampler_weight_avx2(__m256 x, __m256 x_min)
{
	const __m256 rounder = _mm256_set1_ps(SAMPLER_ROUNDER);
	__m256 rounded, f, f2, lo, hi, p;

	x = _mm256_max_ps(x, x_min);
	rounded = _mm256_add_ps(x, rounder);
	f = _mm256_sub_ps(x, _mm256_sub_ps(rounded, rounder));
	f2 = _mm256_mul_ps(f, f);
	lo = _mm256_add_ps(_mm256_set1_ps(SAMPLER_LANE_ONE),
			   _mm256_mul_ps(_mm256_set1_ps(SAMPLER_LANE_P1), f));
	hi = _mm256_add_ps(_mm256_set1_ps(SAMPLER_LANE_P2),
			   _mm256_mul_ps(_mm256_set1_ps(SAMPLER_LANE_P3), f));
	hi = _mm256_add_ps(hi, _mm256_mul_ps(_mm256_set1_ps(SAMPLER_LANE_P4), f2));
	p = _mm256_add_ps(lo, _mm256_mul_ps(f2, hi));
	/* rounded's low bits hold n: << 23 drops the rest. */
	return _mm256_cvttps_epi32(_mm256_castsi256_ps(_mm256_add_epi32(
		_mm256_castps_si256(p),
		_mm256_slli_epi32(_mm256_castps_si256(rounded), 23))));
}

/*
 * Exact sums of 8 weight lanes in two accumulators of 4 64-bit lanes:
 * *all adds each pair of weights as one 64-bit number (low + high *
 * 2^32, modulo 2^64), *high adds the high weights alone, so the low
 * weights' sum is all - high * 2^32 (exact modulo 2^64, and it is under
 * 2^64).  Three operations a vector where 32-bit halves take four.
 */
SAMPLER_AVX2_INLINE void lanes8_add(__m256i w, __m256i *all, __m256i *high)
{
	*all = _mm256_add_epi64(*all, w);
	*high = _mm256_add_epi64(*high, _mm256_srli_epi64(w, 32));
}

SAMPLER_AVX2_INLINE uint64_t lanes8_sum(__m256i all, __m256i high)
{
	uint64_t a[4], h[4], sum = 0;

	_mm256_storeu_si256((__m256i *)a, all);
	_mm256_storeu_si256((__m256i *)h, high);
	for (int j = 0; j < 4; j++)
		sum += a[j] - (h[j] << 32) + h[j];
	return sum;
}

/* Append the tokens i + j of the set bits j of mask to the gathered set
 * of *n (sampler_portable.c's sampler_gather_one(): past s->gather_limit the
 * count alone goes on). */
SAMPLER_AVX2_INLINE void sampler_gather_mask(struct sampler *s, uint32_t i,
					       unsigned mask, uint32_t *n)
{
	while (mask) {
		uint32_t id = i + (uint32_t)__builtin_ctz(mask);

		if (*n < s->gather_limit)
			s->by_id[*n] = (struct sampler_cand){ s->w[id], id };
		(*n)++;
		mask &= mask - 1;
	}
}

/*
 * The weights of [i, end) (one block) into s->w; returns their sum, and
 * with gather appends the tokens of W > s->gather_bar to the gathered
 * set (top_k compacting it as it fills, which raises the bar).  Testing
 * the 16 lanes' x against the bar's x (their maximum, the skip below
 * computes anyway) costs one compare; only a pass over it compares the
 * weights themselves.
 */
SAMPLER_AVX2_INLINE uint64_t sampler_weigh_block_avx2(
	struct sampler *s, uint32_t i, uint32_t end, __m256 max_y,
	__m256 scale, bool gather)
{
	const float *y = s->y;
	uint32_t *w_out = s->w;
	const __m256 xmin = _mm256_set1_ps(SAMPLER_X_MIN);
	uint32_t bar = s->gather_bar;
	__m256 x_bar = _mm256_set1_ps(s->gather_x_bar);
	__m256i all = _mm256_setzero_si256(), high = all;
	uint64_t sum = 0;
	float my = _mm256_cvtss_f32(max_y), sc = _mm256_cvtss_f32(scale);
	uint32_t n = s->n_by_id;	/* a local: stores cannot alias it */

	/* Two vectors an iteration: two chains of dependent operations. */
	for (; i + 16 <= end; i += 16) {
		__m256 x0 = sampler_x_avx2(_mm256_loadu_ps(y + i), max_y, scale);
		__m256 x1 = sampler_x_avx2(_mm256_loadu_ps(y + i + 8), max_y, scale);
		__m256 x_top = _mm256_max_ps(x0, x1);
		__m256i w0, w1;

		/*
		 * All 16 far under the maximum (x < SAMPLER_X_MIN, which most
		 * of a real model's vocabulary is): W = 0 without the
		 * polynomial, and none is gathered (bar >= 0).
		 */
		if (!_mm256_movemask_ps(_mm256_cmp_ps(x_top, xmin, _CMP_GE_OQ))) {
			_mm256_storeu_si256((__m256i *)(w_out + i), _mm256_setzero_si256());
			_mm256_storeu_si256((__m256i *)(w_out + i + 8), _mm256_setzero_si256());
			continue;
		}
		w0 = sampler_weight_avx2(x0, xmin);
		w1 = sampler_weight_avx2(x1, xmin);

		_mm256_storeu_si256((__m256i *)(w_out + i), w0);
		_mm256_storeu_si256((__m256i *)(w_out + i + 8), w1);
		/* Two W <= 2^30 add up to at most 2^31: one uint32 lane. */
		lanes8_add(_mm256_add_epi32(w0, w1), &all, &high);
		if (gather && n <= s->gather_limit &&
		    _mm256_movemask_ps(_mm256_cmp_ps(x_top, x_bar, _CMP_GE_OQ))) {
			/* W <= 2^30: signed lanes compare right. */
			const __m256i bv = _mm256_set1_epi32((int32_t)bar);
			unsigned mask = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(
				_mm256_cmpgt_epi32(w0, bv))) |
				(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(
				_mm256_cmpgt_epi32(w1, bv))) << 8;

			if (mask)
				sampler_gather_mask(s, i, mask, &n);
			if (s->gather_k && n >= s->gather_cap) {
				s->n_by_id = n;
				sampler_gather_compact(s);
				n = s->n_by_id;
				bar = s->gather_bar;
				x_bar = _mm256_set1_ps(s->gather_x_bar);
			}
		}
	}
	for (; i < end; i++) {
		w_out[i] = sampler_weight(y[i], my, sc);
		sum += w_out[i];
		if (gather && w_out[i] > bar)
			sampler_gather_mask(s, i, 1, &n);
	}
	s->n_by_id = n;
	return sum + lanes8_sum(all, high);
}

/* sampler_weights_portable() in 8 lanes (the caller resets and ends the gather). */
SAMPLER_AVX2 uint64_t sampler_weights_avx2(struct sampler *s,
						  float max_y, float scale)
{
	const __m256 mv = _mm256_set1_ps(max_y), sv = _mm256_set1_ps(scale);
	bool gather = s->gather_bar < SAMPLER_NO_GATHER;
	uint64_t total = 0;

	for (uint32_t b = 0; b < s->n_blocks; b++) {
		uint32_t i = b * SAMPLER_BLOCK, end = i + SAMPLER_BLOCK;

		end = end < s->vocab ? end : s->vocab;
		/* Two loops, not a test per vector; none once over the cap. */
		if (gather && s->n_by_id <= s->gather_limit)
			s->block_sum[b] = sampler_weigh_block_avx2(s, i, end, mv,
								   sv, true);
		else
			s->block_sum[b] = sampler_weigh_block_avx2(s, i, end, mv,
								   sv, false);
		total += s->block_sum[b];
	}
	return total;
}

/* sampler_block_sums_portable() in 8 lanes. */
SAMPLER_AVX2 uint64_t sampler_block_sums_avx2(struct sampler *s,
						     uint32_t t)
{
	const __m256i tm1 = _mm256_set1_epi32((int32_t)t - 1);
	uint64_t total = 0;

	for (uint32_t b = 0; b < s->n_blocks; b++) {
		uint32_t i = b * SAMPLER_BLOCK, end = i + SAMPLER_BLOCK;
		__m256i all = _mm256_setzero_si256(), high = all;
		uint64_t sum = 0;

		end = end < s->vocab ? end : s->vocab;
		for (; i + 8 <= end; i += 8) {
			__m256i w = _mm256_loadu_si256((const __m256i *)(s->w + i));

			lanes8_add(_mm256_and_si256(w, _mm256_cmpgt_epi32(w, tm1)),
				   &all, &high);
		}
		for (; i < end; i++)
			sum += s->w[i] >= t ? s->w[i] : 0;
		s->block_sum[b] = sum + lanes8_sum(all, high);
		total += s->block_sum[b];
	}
	return total;
}

/* The first i >= from with s->w[i] > bar, or vocab. */
SAMPLER_AVX2 uint32_t sampler_next_above_avx2(const struct sampler *s,
						     uint32_t from, uint32_t bar)
{
	const __m256i bv = _mm256_set1_epi32((int32_t)bar);
	uint32_t i = from;

	for (; i + 16 <= s->vocab; i += 16) {
		__m256i w0 = _mm256_loadu_si256((const __m256i *)(s->w + i));
		__m256i w1 = _mm256_loadu_si256((const __m256i *)(s->w + i + 8));
		unsigned mask = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(
			_mm256_cmpgt_epi32(w0, bv))) |
			(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(
			_mm256_cmpgt_epi32(w1, bv))) << 8;

		if (mask)
			return i + (uint32_t)__builtin_ctz(mask);
	}
	while (i < s->vocab && s->w[i] <= bar)
		i++;
	return i;
}

/*
 * Whether more than cap tokens have W > bar, found by counting 16 at a
 * time and stopping as soon as they are: on a flat row, after a few
 * thousand tokens, where appending them one by one would cost more.
 */
SAMPLER_AVX2 bool sampler_over_cap_avx2(const struct sampler *s,
					       uint32_t bar, uint32_t cap)
{
	const __m256i bv = _mm256_set1_epi32((int32_t)bar);
	uint32_t n = 0, i = 0;

	for (; i + 16 <= s->vocab; i += 16) {
		__m256i w0 = _mm256_loadu_si256((const __m256i *)(s->w + i));
		__m256i w1 = _mm256_loadu_si256((const __m256i *)(s->w + i + 8));
		unsigned mask = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(
			_mm256_cmpgt_epi32(w0, bv))) |
			(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(
			_mm256_cmpgt_epi32(w1, bv))) << 8;

		n += (uint32_t)__builtin_popcount(mask);
		if (n > cap)
			return true;
	}
	for (; i < s->vocab; i++)
		n += s->w[i] > bar;
	return n > cap;
}

/*
 * Put the tokens with W > bar in s->by_id in id order; their count, or
 * cap + 1 as soon as there are more than cap (the rest not gathered).
 */
SAMPLER_AVX2 uint32_t sampler_collect_avx2(struct sampler *s,
						  uint32_t bar, uint32_t cap)
{
	const __m256i bv = _mm256_set1_epi32((int32_t)bar);
	uint32_t n = 0, i = 0;

	for (; i + 8 <= s->vocab; i += 8) {
		if (n > cap)
			return cap + 1;
		unsigned mask = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(
			_mm256_cmpgt_epi32(_mm256_loadu_si256(
				(const __m256i *)(s->w + i)), bv)));

		while (mask) {
			uint32_t id = i + (uint32_t)__builtin_ctz(mask);

			s->by_id[n++] = (struct sampler_cand){ s->w[id], id };
			mask &= mask - 1;
		}
	}
	for (; i < s->vocab && n <= cap; i++)
		if (s->w[i] > bar)
			s->by_id[n++] = (struct sampler_cand){ s->w[i], i };
	return n > cap ? cap + 1 : n;
}

/* The bucket of each of 8 weights (sampler_bucket()): (float)W's bits. */
SAMPLER_AVX2_INLINE __m256i sampler_bucket_avx2(__m256i w)
{
	return _mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(w)),
				 SAMPLER_BUCKET_SHIFT);
}

/*
 * s->hist_mass of the buckets of W >= 1 (top_p needs no counts, and W = 0
 * adds nothing), a chunk of buckets computed 8 at a time before they are
 * used: read back at once, the 32-bit loads of a 256-bit store would
 * wait for it (no store forwarding across those widths on some cores).
 */
SAMPLER_AVX2 void sampler_mass_histogram_avx2(struct sampler *s)
{
	uint32_t b[256];

	memset(&s->hist_mass[SAMPLER_BUCKET_ONE], 0,
	       (SAMPLER_N_BUCKETS - SAMPLER_BUCKET_ONE) * sizeof(s->hist_mass[0]));
	for (uint32_t i = 0; i < s->vocab; i += 256) {
		uint32_t n = s->vocab - i < 256 ? s->vocab - i : 256, j = 0;
		const uint32_t *w = s->w + i;

		for (; j + 8 <= n; j += 8)
			_mm256_storeu_si256((__m256i *)(b + j), sampler_bucket_avx2(
				_mm256_loadu_si256((const __m256i *)(w + j))));
		for (; j < n; j++)
			b[j] = sampler_bucket(w[j]);
		/* W = 0 adds 0 to bucket 0, which is never read. */
		for (j = 0; j < n; j++)
			s->hist_mass[b[j]] += w[j];
	}
}

/* sampler_bracket_pass_portable() in 8 lanes. */
SAMPLER_AVX2 uint64_t sampler_bracket_pass_avx2(struct sampler *s,
						uint32_t b_lo, uint32_t b_hi)
{
	const __m256i hv = _mm256_set1_epi32((int32_t)b_hi);
	const __m256i lm1 = _mm256_set1_epi32((int32_t)b_lo - 1);
	uint64_t total = 0;
	uint32_t n = 0;

	for (uint32_t b = 0; b < s->n_blocks; b++) {
		uint32_t i = b * SAMPLER_BLOCK, end = i + SAMPLER_BLOCK;
		__m256i all = _mm256_setzero_si256(), high = all;
		uint64_t sum = 0;

		end = end < s->vocab ? end : s->vocab;
		for (; i + 8 <= end; i += 8) {
			__m256i w = _mm256_loadu_si256((const __m256i *)(s->w + i));
			__m256i bucket = sampler_bucket_avx2(w);
			__m256i above = _mm256_cmpgt_epi32(bucket, hv);
			unsigned mask = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(
				_mm256_andnot_si256(above, _mm256_cmpgt_epi32(bucket, lm1))));

			lanes8_add(_mm256_and_si256(w, above), &all, &high);
			while (mask) {
				uint32_t id = i + (uint32_t)__builtin_ctz(mask);

				s->by_id[n++] = (struct sampler_cand){ s->w[id], id };
				mask &= mask - 1;
			}
		}
		for (; i < end; i++) {
			uint32_t bucket = sampler_bucket(s->w[i]);

			if (bucket > b_hi)
				sum += s->w[i];
			else if (bucket >= b_lo)
				s->by_id[n++] = (struct sampler_cand){ s->w[i], i };
		}
		s->block_sum[b] = sum + lanes8_sum(all, high);
		total += s->block_sum[b];
	}
	s->n_by_id = n;
	return total;
}

/* Put the weights of the tokens of W > 0 in bucket b in s->scratch, in
 * id order; their count. */
SAMPLER_AVX2 uint32_t sampler_collect_bucket_avx2(struct sampler *s,
							 uint32_t b)
{
	const __m256i bv = _mm256_set1_epi32((int32_t)b);
	uint32_t n = 0, i = 0;

	/* Bucket 0 is W = 0 alone: nothing to gather. */
	if (!b)
		return 0;
	for (; i + 8 <= s->vocab; i += 8) {
		__m256i w = _mm256_loadu_si256((const __m256i *)(s->w + i));
		unsigned mask = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(
			_mm256_cmpeq_epi32(sampler_bucket_avx2(w), bv)));

		while (mask) {
			s->scratch[n++] = s->w[i + (uint32_t)__builtin_ctz(mask)];
			mask &= mask - 1;
		}
	}
	for (; i < s->vocab; i++)
		if (sampler_bucket(s->w[i]) == b)
			s->scratch[n++] = s->w[i];
	return n;
}
const struct sampler_kernels sampler_kernels_avx2 = {
	.isa = SAMPLER_ISA_AVX2,
	.name = "avx2",
	.max = sampler_max_avx2,
	.find = sampler_find_avx2,
	.weights = sampler_weights_avx2,
	.block_sums = sampler_block_sums_avx2,
	.bracket_pass = sampler_bracket_pass_avx2,
	.next_above = sampler_next_above_avx2,
	.over_cap = sampler_over_cap_avx2,
	.collect = sampler_collect_avx2,
	.mass_histogram = sampler_mass_histogram_avx2,
	.collect_bucket = sampler_collect_bucket_avx2,
};
#else
bool sampler_have_avx2(void)
{
	return false;
}
#endif
