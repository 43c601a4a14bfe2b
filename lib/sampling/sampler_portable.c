/*
 * sampler_portable.c - the sampler's passes over the vocabulary in GCC
 * vector extensions (4 lanes: one SSE register, the x86-64 baseline)
 * and scalar code, for any CPU: the table sampler_kernels_portable
 * (sampler_internal.h).  sampler_avx2.c is its 8-lane twin and must give
 * the same bits; sampler.c's NOTES ON THE DESIGN say what each pass is
 * for.
 */
#include <math.h>
#include <string.h>

#include "sampling/sampler_internal.h"

/* ------------------------------------------------------------------ */
/* Max and find                                                        */
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
static float sampler_max_portable(const float *y, uint32_t n, bool *bad)
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

/* The first i >= from with y[i] == m (there is one). */
static uint32_t sampler_find_portable(const float *y, uint32_t n,
				      uint32_t from, float m)
{
	uint32_t i = from;

	(void)n;
	while (y[i] != m)
		i++;
	return i;
}

/* ------------------------------------------------------------------ */
/* Weights and block sums                                              */
/* ------------------------------------------------------------------ */

/*
 * sampler_weight() of four tokens at once: the same operations, with x
 * clamped at SAMPLER_X_MIN where the scalar version returns early (x =
 * -31 gives p(0) * 2^-1, which truncates to 0 as every x under it
 * does), the polynomial times 2^30 (SAMPLER_LANE_P1..), and 2^n applied
 * by adding n to the exponent bits: the same value as the scalar
 * product, both being exact.
 */
static inline v4i sampler_weight_v4(v4f y, float max_y, float scale)
{
	const v4f floor = { SAMPLER_X_MIN, SAMPLER_X_MIN, SAMPLER_X_MIN,
			    SAMPLER_X_MIN };
	v4f x = (y - max_y) * scale;
	v4f rounded, n, f, f2, lo, hi, p;

	x = v4f_select(x > floor, x, floor);
	rounded = x + SAMPLER_ROUNDER;
	n = rounded - SAMPLER_ROUNDER;
	f = x - n;
	f2 = f * f;
	lo = SAMPLER_LANE_ONE + SAMPLER_LANE_P1 * f;
	hi = (SAMPLER_LANE_P2 + SAMPLER_LANE_P3 * f) + SAMPLER_LANE_P4 * f2;
	p = lo + f2 * hi;
	/* rounded's low bits hold n: << 23 drops the rest. */
	return __builtin_convertvector((v4f)((v4i)p + ((v4i)rounded << 23)), v4i);
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
 * Append token id of weight w to the gathered set while it holds under
 * s->gather_limit tokens; past that (a fixed bar: a flat row) the count
 * alone grows.
 */
static inline void sampler_gather_one(struct sampler *s, uint32_t id,
				      uint32_t w)
{
	if (s->n_by_id < s->gather_limit)
		s->by_id[s->n_by_id] = (struct sampler_cand){ w, id };
	s->n_by_id++;
}

/*
 * The weights of one block [i, end), and their sum; with gather (a
 * constant where this is inlined, so the loop without costs nothing for
 * it) also the tokens of W > s->gather_bar into the gathered set, the
 * bar rising as top_k's buffer fills (sampler_gather_compact()).
 */
static inline __attribute__((always_inline)) uint64_t
sampler_weigh_block_lanes(struct sampler *s, uint32_t i, uint32_t end,
			  float max_y, float scale, bool gather)
{
	const float *y = s->y;
	uint32_t *w_out = s->w;
	uint32_t bar = s->gather_bar;
	v4i hi = { 0 }, lo = { 0 };
	uint64_t sum = 0;

	/* Two vectors an iteration: the polynomial is a chain of
	 * dependent operations, and two chains keep the core busier. */
	for (; i + 2 * LANES <= end; i += 2 * LANES) {
		v4i w0 = sampler_weight_v4(v4f_load(y + i), max_y, scale);
		v4i w1 = sampler_weight_v4(v4f_load(y + i + LANES), max_y, scale);

		memcpy(w_out + i, &w0, sizeof(w0));
		memcpy(w_out + i + LANES, &w1, sizeof(w1));
		lanes_add(w0, &hi, &lo);
		lanes_add(w1, &hi, &lo);
		if (gather && s->n_by_id <= s->gather_limit) {
			/* W <= 2^30: signed compares are right. */
			const v4i bv = { (int32_t)bar, (int32_t)bar, (int32_t)bar,
					 (int32_t)bar };
			v4i over = (w0 > bv) | (w1 > bv);

			if (over[0] | over[1] | over[2] | over[3])
				for (uint32_t j = i; j < i + 2 * LANES; j++)
					if (w_out[j] > bar)
						sampler_gather_one(s, j, w_out[j]);
			if (s->gather_k && s->n_by_id >= s->gather_cap) {
				sampler_gather_compact(s);
				bar = s->gather_bar;
			}
		}
	}
	for (; i < end; i++) {
		w_out[i] = sampler_weight(y[i], max_y, scale);
		sum += w_out[i];
		if (gather && w_out[i] > bar)
			sampler_gather_one(s, i, w_out[i]);
	}
	return sum + lanes_sum(hi, lo);
}

/* The weights' pass, block by block (the caller resets and ends the
 * gather: sampler.c's sampler_weights()). */
static uint64_t sampler_weights_portable(struct sampler *s, float max_y,
					 float scale)
{
	bool gather = s->gather_bar < SAMPLER_NO_GATHER;
	uint64_t total = 0;

	for (uint32_t b = 0; b < s->n_blocks; b++) {
		uint32_t i = b * SAMPLER_BLOCK, end = i + SAMPLER_BLOCK;

		end = end < s->vocab ? end : s->vocab;
		s->block_sum[b] = gather && s->n_by_id <= s->gather_limit ?
			sampler_weigh_block_lanes(s, i, end, max_y, scale, true) :
			sampler_weigh_block_lanes(s, i, end, max_y, scale, false);
		total += s->block_sum[b];
	}
	return total;
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

static uint64_t sampler_block_sums_portable(struct sampler *s, uint32_t t)
{
	uint64_t total = 0;

	for (uint32_t b = 0; b < s->n_blocks; b++) {
		uint32_t i = b * SAMPLER_BLOCK, end = i + SAMPLER_BLOCK;

		end = end < s->vocab ? end : s->vocab;
		s->block_sum[b] = sampler_block_above(s, i, end, t);
		total += s->block_sum[b];
	}
	return total;
}

/* ------------------------------------------------------------------ */
/* Finding and gathering weights                                       */
/* ------------------------------------------------------------------ */

static uint32_t sampler_next_above_portable(const struct sampler *s,
					    uint32_t from, uint32_t bar)
{
	uint32_t i = from;

	while (i < s->vocab && s->w[i] <= bar)
		i++;
	return i;
}

/*
 * Whether more than cap tokens have W > bar: counted in vector lanes,
 * stopping once past cap (as sampler_avx2.c's twin does).
 */
static bool sampler_over_cap_portable(const struct sampler *s, uint32_t bar,
				      uint32_t cap)
{
	const int32_t b = (int32_t)bar;	/* W <= 2^30: signed compares */
	const v4i bv = { b, b, b, b };
	uint32_t n = 0, i = 0;

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

static uint32_t sampler_collect_portable(struct sampler *s, uint32_t bar,
					 uint32_t cap)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->vocab && n <= cap; i++)
		if (s->w[i] > bar)
			s->by_id[n++] = (struct sampler_cand){ s->w[i], i };
	return n;
}

/* ------------------------------------------------------------------ */
/* Buckets                                                             */
/* ------------------------------------------------------------------ */

/*
 * One pass for a bracket of buckets [b_lo, b_hi] (SAMPLER_BUCKET_ONE <=
 * b_lo <= b_hi): the block sums of the W in buckets above b_hi (their
 * total returned; s->sums_* are left to the caller), and the tokens of
 * the bracket gathered into s->by_id in id order (s->n_by_id of them; no
 * cap).  Buckets are monotone in W, so "above" is W >= some t_hi and
 * the bracket t_lo <= W < t_hi.
 */
static uint64_t sampler_bracket_pass_portable(struct sampler *s,
					      uint32_t b_lo, uint32_t b_hi)
{
	uint64_t total = 0;

	s->n_by_id = 0;
	for (uint32_t b = 0; b < s->n_blocks; b++) {
		uint32_t i = b * SAMPLER_BLOCK, end = i + SAMPLER_BLOCK;
		uint64_t sum = 0;

		end = end < s->vocab ? end : s->vocab;
		for (; i < end; i++) {
			uint32_t bucket = sampler_bucket(s->w[i]);

			if (bucket > b_hi)
				sum += s->w[i];
			else if (bucket >= b_lo)
				s->by_id[s->n_by_id++] =
					(struct sampler_cand){ s->w[i], i };
		}
		s->block_sum[b] = sum;
		total += sum;
	}
	return total;
}

void sampler_histogram(struct sampler *s)
{
	memset(s->hist_count, 0, sizeof(s->hist_count));
	memset(s->hist_mass, 0, sizeof(s->hist_mass));
	for (uint32_t i = 0; i < s->vocab; i++) {
		uint32_t b = sampler_bucket(s->w[i]);

		s->hist_count[b]++;
		s->hist_mass[b] += s->w[i];
	}
}

static uint32_t sampler_collect_bucket_portable(struct sampler *s, uint32_t b)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->vocab; i++)
		if (s->w[i] && sampler_bucket(s->w[i]) == b)
			s->scratch[n++] = s->w[i];
	return n;
}

/* ------------------------------------------------------------------ */
/* The table                                                           */
/* ------------------------------------------------------------------ */

const struct sampler_kernels sampler_kernels_portable = {
	.isa = SAMPLER_ISA_PORTABLE,
	.name = "portable",
	.max = sampler_max_portable,
	.find = sampler_find_portable,
	.weights = sampler_weights_portable,
	.block_sums = sampler_block_sums_portable,
	.bracket_pass = sampler_bracket_pass_portable,
	.next_above = sampler_next_above_portable,
	.over_cap = sampler_over_cap_portable,
	.collect = sampler_collect_portable,
	.mass_histogram = sampler_histogram,	/* the counts too */
	.collect_bucket = sampler_collect_bucket_portable,
};
