/*
 * sampler.c - the engine's sampler: one row of logits to one token, by
 * the semantics stated in sampler.h, without sorting the vocabulary.
 *
 * NOTES ON THE DESIGN
 * A row costs a few linear passes: check + max, bias (a copy only when
 * biased), and when sampling one pass computing the weights W with exact
 * sums per block of 1024 tokens (of all W, or with min_p alone of the W
 * the draw keeps); the draw skips whole blocks by their sums and walks
 * one.
 * The passes run in vector lanes: AVX2 (8 lanes, intrinsics under
 * target("avx2") without FMA, chosen at run time by sampler_create())
 * where the CPU has it, else GCC vector extensions (4 lanes, the x86-64
 * baseline) and scalar code.  Both compute sampler_weight()'s float
 * operations lane by lane, so every path gives the same bits; the AVX2
 * weights rewrite two steps into equivalents of fewer operations and
 * skip 16 tokens at once when all are under SAMPLER_X_MIN (see
 * sampler_weight_avx2() in sampler_avx2.c).  tests/test_sampler.c holds
 * each AVX2 kernel to its portable twin on random rows.  On the machines measured the
 * weights' pass is bound by the vector units, not by memory: the
 * polynomial is most of a row's cost (tools/bench_sampler.c).
 * top_k <= 1024 finds the k-th largest W with a min-heap (one compare per
 * token that beats the heap's least; the rest are skipped 16 at a time),
 * then gathers the tokens >= it.  top_p alone gathers the tokens of
 * W >= (Z - target) / vocab, which must hold the cut (the rest weigh
 * less than Z - target), or when those are over 4096 (a flat
 * distribution; the gather stops there) finds the cut with the histogram
 * below and sorts one bucket.  Larger top_k uses the histogram too.  The
 * gathered tokens are sorted by decreasing W (a radix sort when many),
 * the cuts made on them exactly as the definition says; a kept set of at
 * most 256 tokens is taken in id order from the gathered tokens (kept in
 * id order too), a larger one is drawn from by block sums of W >= t.
 * The histogram buckets W by the float bits of (float)W >> 20 (monotone
 * in W: 1/8 octave buckets) with a count and an exact mass per bucket
 * (top_p's AVX2 path needs the masses alone); walking it from the top
 * gives the bucket that holds the k-th largest W or where the mass
 * reaches the top_p target.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "philox.h"
#include "sampler.h"
#include "sampler_internal.h"

/* ------------------------------------------------------------------ */
/* Parameters                                                          */
/* ------------------------------------------------------------------ */

int sampling_params_validate(const struct sampling_params *p, uint32_t vocab,
			     char *err, size_t err_len)
{
#define BAD(...) do { snprintf(err, err_len, __VA_ARGS__); return -EINVAL; } while (0)
	if (!(p->temperature >= 0.0f) || isinf(p->temperature))
		BAD("temperature %g: must be a finite number >= 0", p->temperature);
	if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
		BAD("top_p %g: must be in (0, 1]", p->top_p);
	if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
		BAD("min_p %g: must be in [0, 1]", p->min_p);
	if (p->top_logprobs > SAMPLER_MAX_LOGPROBS)
		BAD("top_logprobs %u: at most %d", p->top_logprobs,
		    SAMPLER_MAX_LOGPROBS);
	if (p->top_logprobs && !p->logprobs)
		BAD("top_logprobs %u needs logprobs", p->top_logprobs);
	if (p->n_bias > SAMPLER_MAX_BIAS)
		BAD("logit_bias has %u entries: at most %d", p->n_bias,
		    SAMPLER_MAX_BIAS);
	if (p->n_bias && !p->bias)
		BAD("logit_bias: %u entries but no array", p->n_bias);
	for (uint32_t i = 0; i < p->n_bias; i++) {
		const struct sampling_bias *b = &p->bias[i];

		if (b->token < 0 || (uint32_t)b->token >= vocab)
			BAD("logit_bias token %d: outside the vocabulary [0, %u)",
			    b->token, vocab);
		if (!(b->bias >= -SAMPLER_BIAS_LIMIT && b->bias <= SAMPLER_BIAS_LIMIT))
			BAD("logit_bias for token %d is %g: must be in [-100, 100]",
			    b->token, b->bias);
		/* At most 300 entries: the quadratic check costs nothing. */
		for (uint32_t j = 0; j < i; j++)
			if (p->bias[j].token == b->token)
				BAD("logit_bias token %d appears twice", b->token);
	}
	return 0;
#undef BAD
}

const char *sampler_strerror(int err)
{
	switch (err) {
	case 0:
		return "no error";
	case -EDOM:
		return "the model produced a NaN or +inf logit";
	case -ENOENT:
		return "every token is banned (logit_bias -100 or -inf logits)";
	case -EINVAL:
		return "invalid sampling parameters";
	default:
		return "sampling failed";
	}
}

/* ------------------------------------------------------------------ */
/* Lifetime                                                            */
/* ------------------------------------------------------------------ */

struct sampler *sampler_create(uint32_t vocab)
{
	struct sampler *s;

	if (!vocab)
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->vocab = vocab;
	s->avx2 = sampler_have_avx2();
	s->n_blocks = (vocab + SAMPLER_BLOCK - 1) / SAMPLER_BLOCK;
	s->y_copy = malloc(sizeof(*s->y_copy) * vocab);
	s->block_sum = malloc(sizeof(*s->block_sum) * s->n_blocks);
	s->w = malloc(sizeof(*s->w) * vocab);
	s->cand = malloc(sizeof(*s->cand) * vocab);
	s->kept = malloc(sizeof(*s->kept) * vocab);
	s->by_id = malloc(sizeof(*s->by_id) * vocab);
	if (!s->y_copy || !s->block_sum || !s->w || !s->cand || !s->kept ||
	    !s->by_id) {
		sampler_destroy(s);
		return NULL;
	}
	return s;
}

void sampler_destroy(struct sampler *s)
{
	if (!s)
		return;
	free(s->y_copy);
	free(s->block_sum);
	free(s->w);
	free(s->cand);
	free(s->kept);
	free(s->by_id);
	free(s);
}

/* ------------------------------------------------------------------ */
/* Bias, max, weights                                                  */
/* ------------------------------------------------------------------ */

static inline v4f v4f_load(const float *p)
{
	v4f v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* a where mask (all ones), else b. */
static inline v4f v4f_select(v4i mask, v4f a, v4f b)
{
	return (v4f)((mask & (v4i)a) | (~mask & (v4i)b));
}

static float v4f_hmax(v4f v, float m)
{
	for (int j = 0; j < LANES; j++)
		m = v[j] > m ? v[j] : m;
	return m;
}

/*
 * The largest of y[0 .. n) (-inf when all are); *bad when one is NaN or
 * +inf (false for -inf, a banned token).
 */
static float sampler_max(const float *y, uint32_t n, bool *bad)
{
	v4f mv = { -INFINITY, -INFINITY, -INFINITY, -INFINITY };
	const v4f inf = { INFINITY, INFINITY, INFINITY, INFINITY };
	v4i ok = { -1, -1, -1, -1 };
	float m = -INFINITY;
	uint32_t i = 0;

	*bad = false;
	for (; i + LANES <= n; i += LANES) {
		v4f v = v4f_load(y + i);

		ok &= v < inf;
		mv = v4f_select(v > mv, v, mv);
	}
	for (; i < n; i++) {
		*bad |= !(y[i] < INFINITY);
		m = y[i] > m ? y[i] : m;
	}
	for (int j = 0; j < LANES; j++)
		*bad |= !ok[j];
	return v4f_hmax(mv, m);
}

static float sampler_row_max(const struct sampler *s, const float *y,
			     bool *bad)
{
#ifdef SAMPLER_AVX2
	if (s->avx2)
		return sampler_max_avx2(y, s->vocab, bad);
#endif
	return sampler_max(y, s->vocab, bad);
}

/*
 * Point s->y at the biased logits (the row itself when there is no bias)
 * and set *max_y = max y; -EDOM on a NaN or +inf logit, -EINVAL on a bias
 * token out of range, -ENOENT when all are banned.
 */
static int sampler_bias(struct sampler *s, const float *logits,
			const struct sampling_params *p, float *max_y)
{
	bool bad;
	float m = sampler_row_max(s, logits, &bad);

	if (bad)
		return -EDOM;
	s->y = logits;
	if (p->n_bias) {
		memcpy(s->y_copy, logits, sizeof(*logits) * s->vocab);
		for (uint32_t i = 0; i < p->n_bias; i++) {
			const struct sampling_bias *b = &p->bias[i];
			float *y = &s->y_copy[b->token];

			if (b->token < 0 || (uint32_t)b->token >= s->vocab)
				return -EINVAL;
			/* |bias| <= 100 cannot overflow a finite float. */
			*y = b->bias == SAMPLER_BIAS_BAN ? -INFINITY : *y + b->bias;
		}
		s->y = s->y_copy;
		m = sampler_row_max(s, s->y, &bad);
	}
	if (m == -INFINITY)
		return -ENOENT;
	*max_y = m;
	return 0;
}

/* The lowest id whose y is max_y. */
static uint32_t sampler_argmax(const struct sampler *s, float max_y)
{
	uint32_t i = 0;

#ifdef SAMPLER_AVX2
	if (s->avx2)
		return sampler_find_avx2(s->y, s->vocab, 0, max_y);
#endif
	while (s->y[i] != max_y)
		i++;
	return i;
}

/*
 * sampler_weight() of four tokens at once: the same operations, with x
 * clamped at -64 where the scalar version returns early (a lane under
 * SAMPLER_X_MIN has n <= -31, so p(f) (under 1.42) times 2^(30 + n) (at
 * most 1/2) truncates to 0 all the same, while -64 keeps every step
 * finite), and 2^(30 + n) applied by adding n + 30 to p's exponent bits
 * (the same value as the scalar product: both are exact).
 */
static inline v4i sampler_weight_v4(v4f y, float max_y, float scale)
{
	const v4f floor = { -64.0f, -64.0f, -64.0f, -64.0f };
	v4f x = (y - max_y) * scale;
	v4f rounded, n, f, f2, lo, hi, p;

	x = v4f_select(x > floor, x, floor);
	rounded = x + SAMPLER_ROUNDER;
	n = rounded - SAMPLER_ROUNDER;
	f = x - n;
	f2 = f * f;
	lo = 1.0f + SAMPLER_P1 * f;
	hi = (SAMPLER_P2 + SAMPLER_P3 * f) + SAMPLER_P4 * f2;
	p = lo + f2 * hi;
	/* rounded's low bits hold n: (n + 30) << 23 drops the rest. */
	return __builtin_convertvector((v4f)((v4i)p + (((v4i)rounded + 30) << 23)),
				       v4i);
}

/*
 * Sum the lanes of hi/lo accumulators: W <= 2^30 is split into its top
 * 15 bits and its low 15, so a uint32 lane takes 2^17 additions of either
 * (a block gives each lane SAMPLER_BLOCK / LANES) and the sum is exact.
 */
static uint64_t lanes_sum(v4i hi, v4i lo)
{
	uint64_t sum = 0;

	for (int j = 0; j < LANES; j++)
		sum += ((uint64_t)(uint32_t)hi[j] << 15) + (uint32_t)lo[j];
	return sum;
}

/* Add w's halves to the lane accumulators. */
static inline void lanes_add(v4i w, v4i *hi, v4i *lo)
{
	const v4i low15 = { 0x7fff, 0x7fff, 0x7fff, 0x7fff };

	*hi += w >> 15;
	*lo += w & low15;
}

/*
 * The weights of one block [i, end), and their sum; *above = the sum of
 * those >= t, summed apart only when t > 1 (with_above, a constant where
 * this is inlined, so the loop without costs nothing for it).
 */
static inline __attribute__((always_inline)) uint64_t
sampler_weigh_block_lanes(struct sampler *s, uint32_t i, uint32_t end,
			  float max_y, float scale, uint32_t t,
			  uint64_t *above, bool with_above)
{
	const float *y = s->y;
	uint32_t *w_out = s->w;
	const int32_t ti = (int32_t)t;
	const v4i tv = { ti, ti, ti, ti };
	v4i hi = { 0 }, lo = { 0 }, ahi = { 0 }, alo = { 0 };
	uint64_t sum = 0, sum_above = 0;

	/* Two vectors an iteration: the polynomial is a chain of
	 * dependent operations, and two chains keep the core busier. */
	for (; i + 2 * LANES <= end; i += 2 * LANES) {
		v4i w0 = sampler_weight_v4(v4f_load(y + i), max_y, scale);
		v4i w1 = sampler_weight_v4(v4f_load(y + i + LANES), max_y, scale);

		memcpy(w_out + i, &w0, sizeof(w0));
		memcpy(w_out + i + LANES, &w1, sizeof(w1));
		lanes_add(w0, &hi, &lo);
		lanes_add(w1, &hi, &lo);
		/* W <= 2^30: signed lanes compare right. */
		if (with_above) {
			lanes_add(w0 & (w0 >= tv), &ahi, &alo);
			lanes_add(w1 & (w1 >= tv), &ahi, &alo);
		}
	}
	for (; i < end; i++) {
		w_out[i] = sampler_weight(y[i], max_y, scale);
		sum += w_out[i];
		sum_above += w_out[i] >= t ? w_out[i] : 0;
	}
	sum += lanes_sum(hi, lo);
	*above = with_above ? sum_above + lanes_sum(ahi, alo) : sum;
	return sum;
}

static uint64_t sampler_weigh_block(struct sampler *s, uint32_t i,
				    uint32_t end, float max_y, float scale,
				    uint32_t t, uint64_t *above)
{
	if (t > 1)
		return sampler_weigh_block_lanes(s, i, end, max_y, scale, t,
						 above, true);
	return sampler_weigh_block_lanes(s, i, end, max_y, scale, t, above,
					 false);
}

/* The sum of the weights >= t in one block [i, end). */
static uint64_t sampler_block_above(const struct sampler *s, uint32_t i,
				    uint32_t end, uint32_t t)
{
	v4i tv = { (int32_t)t, (int32_t)t, (int32_t)t, (int32_t)t };
	v4i hi = { 0 }, lo = { 0 };
	uint64_t sum = 0;

	for (; i + LANES <= end; i += LANES) {
		v4i w;

		memcpy(&w, s->w + i, sizeof(w));
		/* W <= 2^30: signed lanes compare right. */
		lanes_add(w & (w >= tv), &hi, &lo);
	}
	for (; i < end; i++)
		sum += s->w[i] >= t ? s->w[i] : 0;
	return sum + lanes_sum(hi, lo);
}

/*
 * W for every token, and per block the sum of the weights >= t (t <= 1:
 * of all of them).  Returns Z, the sum of all the weights.
 */
static uint64_t sampler_weights(struct sampler *s, float max_y, float scale,
				uint32_t t)
{
	uint64_t total = 0;

#ifdef SAMPLER_AVX2
	if (s->avx2)
		return sampler_weights_avx2(s, max_y, scale, t);
#endif
	for (uint32_t b = 0; b < s->n_blocks; b++) {
		uint32_t i = b * SAMPLER_BLOCK, end = i + SAMPLER_BLOCK;

		end = end < s->vocab ? end : s->vocab;
		total += sampler_weigh_block(s, i, end, max_y, scale, t,
					     &s->block_sum[b]);
	}
	return total;
}

/*
 * The block sums of the weights >= t (already computed); returns their
 * total.
 */
static uint64_t sampler_block_sums(struct sampler *s, uint32_t t)
{
	uint64_t total = 0;

#ifdef SAMPLER_AVX2
	if (s->avx2)
		return sampler_block_sums_avx2(s, t);
#endif
	for (uint32_t b = 0; b < s->n_blocks; b++) {
		uint32_t i = b * SAMPLER_BLOCK, end = i + SAMPLER_BLOCK;

		end = end < s->vocab ? end : s->vocab;
		s->block_sum[b] = sampler_block_above(s, i, end, t);
		total += s->block_sum[b];
	}
	return total;
}

/* The first i >= from with W > bar, or vocab. */
static uint32_t sampler_next_above(const struct sampler *s, uint32_t from,
				   uint32_t bar)
{
	uint32_t i = from;

#ifdef SAMPLER_AVX2
	if (s->avx2)
		return sampler_next_above_avx2(s, from, bar);
#endif
	while (i < s->vocab && s->w[i] <= bar)
		i++;
	return i;
}

/* ------------------------------------------------------------------ */
/* The kept set                                                        */
/* ------------------------------------------------------------------ */

static void sampler_histogram(struct sampler *s)
{
	memset(s->hist_count, 0, sizeof(s->hist_count));
	memset(s->hist_mass, 0, sizeof(s->hist_mass));
	for (uint32_t i = 0; i < s->vocab; i++) {
		uint32_t b = sampler_bucket(s->w[i]);

		s->hist_count[b]++;
		s->hist_mass[b] += s->w[i];
	}
}

static int cand_by_w_desc(const void *a, const void *b)
{
	const struct sampler_cand *x = a, *y = b;

	if (x->w != y->w)
		return x->w > y->w ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/*
 * Sort cand[0 .. n), gathered in id order, by decreasing W and then id:
 * qsort for a few, else a stable LSD radix sort on 2^30 - W (three passes
 * of 11 bits; stability keeps equal weights in id order), using
 * s->kept as the second buffer.  O(n): a kept set of thousands of tokens
 * (top_p on a flat distribution) costs a few passes, not n log n calls.
 */
static void sampler_sort_cand(struct sampler *s, uint32_t n)
{
	struct sampler_cand *src = s->cand, *dst = s->kept, *tmp;
	uint32_t count[1u << 11];

	if (n < 256) {
		qsort(s->cand, n, sizeof(*s->cand), cand_by_w_desc);
		return;
	}
	for (uint32_t shift = 0; shift < 33; shift += 11) {
		uint32_t sum = 0;

		memset(count, 0, sizeof(count));
		for (uint32_t i = 0; i < n; i++)
			count[((SAMPLER_WEIGHT_ONE - src[i].w) >> shift) & 0x7ff]++;
		for (uint32_t d = 0; d < (1u << 11); d++) {
			uint32_t c = count[d];

			count[d] = sum;
			sum += c;
		}
		for (uint32_t i = 0; i < n; i++)
			dst[count[((SAMPLER_WEIGHT_ONE - src[i].w) >> shift) & 0x7ff]++] =
				src[i];
		tmp = src;
		src = dst;
		dst = tmp;
	}
	/* Three passes: the result is in s->kept. */
	memcpy(s->cand, src, sizeof(*s->cand) * n);
}

/* Gather the tokens with W > 0 in bucket >= lowest, by decreasing W. */
static uint32_t sampler_gather(struct sampler *s, uint32_t lowest)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->vocab; i++)
		if (s->w[i] && sampler_bucket(s->w[i]) >= lowest)
			s->cand[n++] = (struct sampler_cand){ s->w[i], i };
	memcpy(s->by_id, s->cand, sizeof(*s->by_id) * n);
	sampler_sort_cand(s, n);
	return n;
}

/*
 * Whether more than cap tokens have W > bar: counted in vector lanes,
 * stopping once past cap (see sampler_over_cap_avx2()).
 */
static bool sampler_over_cap(const struct sampler *s, uint32_t bar,
			     uint32_t cap)
{
	const int32_t b = (int32_t)bar;	/* W <= 2^30: signed compares */
	const v4i bv = { b, b, b, b };
	uint32_t n = 0, i = 0;

#ifdef SAMPLER_AVX2
	if (s->avx2)
		return sampler_over_cap_avx2(s, bar, cap);
#endif
	while (i + 256 <= s->vocab) {
		v4i count = { 0 };

		for (uint32_t end = i + 256; i < end; i += LANES) {
			v4i w;

			memcpy(&w, s->w + i, sizeof(w));
			count -= w > bv;	/* true is -1 */
		}
		for (int j = 0; j < LANES; j++)
			n += (uint32_t)count[j];
		if (n > cap)
			return true;
	}
	for (; i < s->vocab; i++)
		n += s->w[i] > bar;
	return n > cap;
}

/*
 * Gather the tokens with W >= min_w and W > 0, by decreasing W (and keep
 * them in id order in s->by_id); SAMPLER_NOT_GATHERED when there are more
 * than cap of them.
 */
static uint32_t sampler_gather_above(struct sampler *s, uint32_t min_w,
				     uint32_t cap)
{
	uint32_t n = 0, bar = min_w ? min_w - 1 : 0;

	/* Counting first: on a flat row appending would be the cost. */
	if (cap < s->vocab && sampler_over_cap(s, bar, cap))
		return SAMPLER_NOT_GATHERED;
#ifdef SAMPLER_AVX2
	if (s->avx2)
		n = sampler_collect_avx2(s, bar, cap);
	else
#endif
	for (uint32_t i = 0; i < s->vocab && n <= cap; i++)
		if (s->w[i] > bar)
			s->cand[n++] = (struct sampler_cand){ s->w[i], i };
	if (n > cap)
		return SAMPLER_NOT_GATHERED;
	memcpy(s->by_id, s->cand, sizeof(*s->by_id) * n);
	sampler_sort_cand(s, n);
	return n;
}

static void heap_sift_down(uint32_t *heap, uint32_t n, uint32_t i)
{
	for (;;) {
		uint32_t l = 2 * i + 1, m = i, tmp;

		if (l < n && heap[l] < heap[m])
			m = l;
		if (l + 1 < n && heap[l + 1] < heap[m])
			m = l + 1;
		if (m == i)
			return;
		tmp = heap[i];
		heap[i] = heap[m];
		heap[m] = tmp;
		i = m;
	}
}

/*
 * The k-th largest W counting multiplicity (k < vocab), by a min-heap of
 * the k largest seen: one compare per token once the heap is full.
 */
static uint32_t sampler_kth_largest(struct sampler *s, uint32_t k)
{
	uint32_t *heap = (uint32_t *)s->kept;	/* free until the draw */

	memcpy(heap, s->w, sizeof(*heap) * k);
	for (uint32_t i = k / 2; i-- > 0;)
		heap_sift_down(heap, k, i);
	/* Skip to the next W above the heap's least: rare once it is full
	 * of large weights, and found 8 lanes at a time with AVX2. */
	for (uint32_t i = sampler_next_above(s, k, heap[0]); i < s->vocab;
	     i = sampler_next_above(s, i + 1, heap[0])) {
		heap[0] = s->w[i];
		heap_sift_down(heap, k, 0);
	}
	return heap[0];
}

/* The highest bucket b with at least k tokens in buckets >= b. */
static uint32_t sampler_bucket_of_kth(const struct sampler *s, uint32_t k)
{
	uint32_t n = 0;

	for (uint32_t b = SAMPLER_N_BUCKETS; b-- > 0;) {
		n += s->hist_count[b];
		if (n >= k)
			return b;
	}
	return 0;
}

/*
 * The top_p threshold over all tokens (top_k off) by the histogram: the
 * exact bucket masses name the bucket where the running mass from the
 * top reaches target, and only that bucket's tokens are sorted.
 */
static uint32_t sampler_top_p_histogram(struct sampler *s, uint64_t target)
{
	uint64_t cum = 0;
	uint32_t b = SAMPLER_N_BUCKETS, n = 0;

#ifdef SAMPLER_AVX2
	if (s->avx2)
		sampler_mass_histogram_avx2(s);
	else
#endif
		sampler_histogram(s);
	/* The mass of W >= 1 is Z >= target: the walk ends at or above
	 * SAMPLER_BUCKET_ONE, the buckets the AVX2 histogram fills. */
	while (b-- > 1 && cum + s->hist_mass[b] < target)
		cum += s->hist_mass[b];
#ifdef SAMPLER_AVX2
	if (s->avx2)
		n = sampler_collect_bucket_avx2(s, b);
	else
#endif
	for (uint32_t i = 0; i < s->vocab; i++)
		if (s->w[i] && sampler_bucket(s->w[i]) == b)
			s->cand[n++] = (struct sampler_cand){ s->w[i], i };
	sampler_sort_cand(s, n);
	for (uint32_t j = 0; j < n; j++) {
		cum += s->cand[j].w;
		if (cum >= target)
			return s->cand[j].w;
	}
	return 1;	/* unreachable: the bucket masses are exact */
}

/*
 * The threshold t of {W > 0, W >= t} for top_k then top_p (min_p is the
 * caller's).  The gathered tokens, *n_cand of them by decreasing W, then
 * hold the whole kept set, or *n_cand is SAMPLER_NOT_GATHERED.  z_sum is
 * Z.
 */
static uint32_t sampler_select(struct sampler *s, const struct sampling_params *p,
			       uint64_t z_sum, uint32_t *n_cand)
{
	bool top_k = p->top_k && p->top_k < s->vocab;
	uint32_t n, n1, t = 0;
	uint64_t z1 = z_sum;

	if (top_k && p->top_k <= SAMPLER_HEAP_MAX) {
		n = sampler_gather_above(s, sampler_kth_largest(s, p->top_k),
					 s->vocab);
	} else if (top_k) {
		sampler_histogram(s);
		n = sampler_gather(s, sampler_bucket_of_kth(s, p->top_k));
	} else {
		/*
		 * The tokens of W < c weigh less than c * vocab <= Z - target,
		 * so those of W >= c weigh more than target: the cut lies
		 * among them, a prefix of the order by decreasing W.  When
		 * that bound leaves too many, the histogram finds the cut.
		 */
		uint64_t target = sampler_top_p_target(p->top_p, z_sum);
		uint32_t c = (uint32_t)((z_sum - target) / s->vocab);

		n = sampler_gather_above(s, c, SAMPLER_GATHER_MAX);
		if (n == SAMPLER_NOT_GATHERED) {
			*n_cand = SAMPLER_NOT_GATHERED;
			return sampler_top_p_histogram(s, target);
		}
	}
	n1 = n;
	/* n < top_k: fewer tokens of weight > 0 than k, all gathered. */
	if (top_k && n >= p->top_k) {
		t = s->cand[p->top_k - 1].w;
		n1 = p->top_k;
		while (n1 < n && s->cand[n1].w == t)
			n1++;
		z1 = 0;
		for (uint32_t j = 0; j < n1; j++)
			z1 += s->cand[j].w;
	}
	if (p->top_p < 1.0f) {
		uint64_t target = sampler_top_p_target(p->top_p, z1), cum = 0;

		/* Exact sums: the target is always reached within K1. */
		for (uint32_t j = 0; j < n1; j++) {
			cum += s->cand[j].w;
			if (cum >= target) {
				t = s->cand[j].w > t ? s->cand[j].w : t;
				break;
			}
		}
	}
	*n_cand = n;
	return t;
}

/* ------------------------------------------------------------------ */
/* The draw                                                            */
/* ------------------------------------------------------------------ */

/* Inverse CDF over the n kept tokens (sorted by id). */
static uint32_t sampler_draw_kept(const struct sampler *s, uint32_t n,
				  uint64_t r53)
{
	uint64_t kept_sum = 0, target, acc = 0;

	for (uint32_t i = 0; i < n; i++)
		kept_sum += s->kept[i].w;
	target = sampler_draw_target(r53, kept_sum);
	for (uint32_t i = 0; i < n; i++) {
		acc += s->kept[i].w;
		if (acc > target)
			return s->kept[i].id;
	}
	return s->kept[n - 1].id;	/* unreachable: target < kept_sum */
}

/*
 * Inverse CDF over every token with W > 0 and W >= t in id order, whose
 * block sums are in s->block_sum and total kept_sum: skip whole blocks
 * by their sums, then walk one block.  The same token as one walk over
 * the vocabulary, since every sum is exact.
 */
static uint32_t sampler_draw_blocks(const struct sampler *s, uint32_t t,
				    uint64_t kept_sum, uint64_t r53)
{
	uint64_t target = sampler_draw_target(r53, kept_sum), acc = 0;
	uint32_t b = 0, i, end;

	while (b + 1 < s->n_blocks && acc + s->block_sum[b] <= target)
		acc += s->block_sum[b++];
	end = (b + 1) * SAMPLER_BLOCK;
	end = end < s->vocab ? end : s->vocab;
	/* W = 0 adds nothing and so is never where acc passes target. */
	for (i = b * SAMPLER_BLOCK; i < end; i++) {
		if (s->w[i] < t)
			continue;
		acc += s->w[i];
		if (acc > target)
			return i;
	}
	return end - 1;	/* unreachable: target < kept_sum */
}

/* Whether top_k or top_p cuts (else min_p alone, if anything). */
static bool sampler_selects(const struct sampler *s,
			    const struct sampling_params *p)
{
	return (p->top_k && p->top_k < s->vocab) || p->top_p < 1.0f;
}

/*
 * The drawn token.  The weights are in s->w, and when top_k and top_p are
 * off the block sums are of the weights >= the min_p threshold.
 */
static uint32_t sampler_draw(struct sampler *s, const struct sampling_params *p,
			     uint64_t z_sum, uint64_t r53)
{
	bool select = sampler_selects(s, p);
	uint32_t t_min = sampler_min_p_threshold(p->min_p);
	uint32_t n_cand = 0, n_kept = 0, t = 0;

	if (!select) {
		/* The weights' pass summed the blocks above min_p already. */
		uint64_t kept_sum = z_sum;

		if (t_min > 1) {
			kept_sum = 0;
			for (uint32_t b = 0; b < s->n_blocks; b++)
				kept_sum += s->block_sum[b];
		}
		return sampler_draw_blocks(s, t_min, kept_sum, r53);
	}
	t = sampler_select(s, p, z_sum, &n_cand);
	if (t_min > t)
		t = t_min;
	/* The kept set is a prefix of the gathered tokens. */
	while (n_cand != SAMPLER_NOT_GATHERED && n_kept < n_cand &&
	       s->cand[n_kept].w >= t)
		n_kept++;
	/* Many: one vector pass of block sums beats sorting them by id. */
	if (n_cand == SAMPLER_NOT_GATHERED || n_kept > 256)
		return sampler_draw_blocks(s, t, sampler_block_sums(s, t), r53);
	/* In id order: the gathered tokens of W >= t, which are the kept. */
	n_kept = 0;
	for (uint32_t j = 0; j < n_cand; j++)
		if (s->by_id[j].w >= t)
			s->kept[n_kept++] = s->by_id[j];
	return sampler_draw_kept(s, n_kept, r53);
}

/* ------------------------------------------------------------------ */
/* Logprobs                                                            */
/* ------------------------------------------------------------------ */

/* Insert token id of weight w into top[0 .. *n), by decreasing weight. */
static void top_insert(struct sampler_cand *top, uint32_t *n, uint32_t cap,
		       uint32_t id, uint32_t w)
{
	uint32_t j;

	/* Ids come in increasing order: an equal weight never enters. */
	if (*n == cap && w <= top[cap - 1].w)
		return;
	j = *n < cap ? (*n)++ : cap - 1;
	while (j > 0 && top[j - 1].w < w) {
		top[j] = top[j - 1];
		j--;
	}
	top[j] = (struct sampler_cand){ w, id };
}

static float sampler_logprob(uint32_t w, double log_z)
{
	return (float)(log((double)w) - log_z);
}

/* The logprobs from the weights in s->w, whose sum is z_sum. */
static void sampler_logprobs(const struct sampler *s,
			     const struct sampling_params *p, uint64_t z_sum,
			     uint32_t chosen, struct sampler_result *out)
{
	struct sampler_cand top[SAMPLER_MAX_LOGPROBS];
	uint32_t cap = p->top_logprobs, n = 0;
	double log_z = log((double)z_sum);

	out->logprob = sampler_logprob(s->w[chosen], log_z);
	if (!cap)
		return;
	/* One compare per token, rarely true: half the weights may be 0 in
	 * random order, which would make "W != 0" a coin-toss branch. */
	for (uint32_t i = sampler_next_above(s, 0, 0), bar = 0; i < s->vocab;
	     i = sampler_next_above(s, i + 1, bar)) {
		top_insert(top, &n, cap, i, s->w[i]);
		bar = n == cap ? top[cap - 1].w : 0;
	}
	for (uint32_t j = 0; j < n; j++)
		out->top[j] = (struct sampler_logprob){
			(int32_t)top[j].id, sampler_logprob(top[j].w, log_z) };
	out->n_top = n;
}

int sampler_sample(struct sampler *s, const float *logits,
		   const struct sampling_params *p, uint32_t k, uint32_t choice,
		   struct sampler_result *out)
{
	uint64_t z_sum = 0;
	uint32_t chosen;
	float max_y;
	int ret;

	memset(out, 0, sizeof(*out));
	ret = sampler_bias(s, logits, p, &max_y);
	if (ret)
		return ret;
	if (p->temperature > 0.0f) {
		/* min_p alone: the block sums of the draw come with W. */
		uint32_t t = sampler_selects(s, p) ? 0 :
			     sampler_min_p_threshold(p->min_p);

		z_sum = sampler_weights(s, max_y,
					sampler_weight_scale(p->temperature),
					t);
		chosen = sampler_draw(s, p, z_sum,
				      philox_bits53(p->seed, k, choice));
	} else {
		chosen = sampler_argmax(s, max_y);
		/* Logprobs at temperature 1. */
		if (p->logprobs)
			z_sum = sampler_weights(s, max_y, sampler_weight_scale(1.0f), 0);
	}
	out->token = (int32_t)chosen;
	if (p->logprobs)
		sampler_logprobs(s, p, z_sum, chosen, out);
	return 0;
}
