/*
 * sampler_select.c - the sampler's kept set: which tokens top_k, top_p
 * and min_p keep, found without sorting the vocabulary (sampler.h states
 * what they keep; sampler.c computes the weights and draws).
 *
 * NOTES ON THE DESIGN
 * The weights' pass gathers, in id order, the tokens the cut-offs can
 * only keep (sampler_gather_plan()): for top_k every token that can be
 * among the k largest, under a bar that rises as its buffer fills; for
 * top_p alone a bound under which the cut cannot lie, known before Z is;
 * for min_p alone its threshold.  Cuts are selections, never sorts:
 * sampler_cut() finds the value where the mass (top_p) or the count
 * (top_k) from the top reaches a target.  A flat row, where top_p keeps
 * thousands, brackets its cut from a sample and checks the bracket with
 * one exact pass (sampler_top_p_bracket()); a miss, and top_k over 1024,
 * use the histogram: W bucketed by the float bits of (float)W >> 20
 * (monotone in W: 1/8 octaves) with a count and an exact mass per
 * bucket, walked from the top to the bucket that holds the k-th largest
 * or where the mass reaches the top_p target.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampling/sampler.h"
#include "sampling/sampler_internal.h"

/*
 * One pass for a bracket of buckets [b_lo, b_hi] (SAMPLER_BUCKET_ONE <=
 * b_lo <= b_hi): the block sums of the W in buckets above b_hi (their
 * total returned; s->sums_* are left to the caller), and the tokens of
 * the bracket gathered into s->by_id in id order (s->n_by_id of them; no
 * cap).  Buckets are monotone in W, so "above" is W >= some t_hi and
 * the bracket t_lo <= W < t_hi.
 */
static uint64_t sampler_bracket_pass(struct sampler *s, uint32_t b_lo,
				     uint32_t b_hi)
{
	uint64_t total = 0;

#ifdef SAMPLER_AVX2
	if (s->avx2)
		return sampler_bracket_pass_avx2(s, b_lo, b_hi);
#endif
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

static int u32_desc(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x > y ? -1 : x < y;
}

/*
 * The cut: the largest v among w[0 .. n) such that the w >= v reach
 * target, in mass (by_mass) or in number.  For top_p that is the W of
 * the token where the running mass by decreasing W first reaches the
 * target (every token tied with it included), for top_k the k-th largest
 * W.  The sum (or n) must reach target > 0.  w is scratch: reordered.
 *
 * A selection, not a sort: each round sums what is over and equal to a
 * median of three, then keeps only the side the cut is on, both passes
 * without a branch on the data (candidates come in random order, where
 * a branch per element would be mispredicted half the time); linear on
 * average.  Rows made to defeat the pivots end in a sort of what is left
 * after `rounds` (64) rounds, so no row costs more than n log n.
 */
static uint32_t sampler_cut_rounds(uint32_t *w, uint32_t n, uint64_t target,
				   bool by_mass, int rounds)
{
	uint64_t above = 0;	/* what the w beyond [lo, hi) add, all > them */
	uint32_t lo = 0, hi = n;

	for (int round = 0; round < rounds; round++) {
		uint32_t a = w[lo], b = w[lo + (hi - lo) / 2], c = w[hi - 1];
		uint32_t pivot = a < b ? (b < c ? b : a < c ? c : a) :
					 (a < c ? a : b < c ? c : b);
		uint64_t sum_gt = 0, sum_eq = 0;
		uint32_t j = lo;

		for (uint32_t i = lo; i < hi; i++) {
			uint64_t v = by_mass ? w[i] : 1;

			sum_gt += v * (w[i] > pivot);
			sum_eq += v * (w[i] == pivot);
		}
		if (above + sum_gt >= target) {
			/* The cut is over the pivot: keep those, in place. */
			for (uint32_t i = lo; i < hi; i++) {
				w[j] = w[i];
				j += w[i] > pivot;
			}
			hi = j;
		} else if (above + sum_gt + sum_eq >= target) {
			return pivot;
		} else {
			above += sum_gt + sum_eq;
			for (uint32_t i = lo; i < hi; i++) {
				w[j] = w[i];
				j += w[i] < pivot;
			}
			hi = j;
		}
	}
	qsort(w + lo, hi - lo, sizeof(*w), u32_desc);
	for (uint32_t i = lo; i < hi; i++) {
		above += by_mass ? w[i] : 1;
		if (above >= target)
			return w[i];
	}
	return w[hi - 1];	/* unreachable: the sum reaches target */
}

static uint32_t sampler_cut(uint32_t *w, uint32_t n, uint64_t target,
			    bool by_mass)
{
	return sampler_cut_rounds(w, n, target, by_mass, 64);
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
 * Gather the tokens of W >= min_w and W > 0 into s->by_id in id order;
 * their count, or SAMPLER_NOT_GATHERED when there are more than cap.
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
			s->by_id[n++] = (struct sampler_cand){ s->w[i], i };
	return n > cap ? SAMPLER_NOT_GATHERED : n;
}

/* Copy the weights >= t of the gathered tokens into s->scratch; the
 * count, and their sum in *sum. */
static uint32_t sampler_gathered_weights(struct sampler *s, uint32_t t,
					 uint64_t *sum)
{
	uint32_t n = 0;

	*sum = 0;
	for (uint32_t j = 0; j < s->n_by_id; j++)
		if (s->by_id[j].w >= t) {
			s->scratch[n++] = s->by_id[j].w;
			*sum += s->by_id[j].w;
		}
	return n;
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
 * top_k's threshold t_k for a k over SAMPLER_TOP_K_GATHER_MAX (the weights' pass
 * gathers for smaller ones), with every token of W >= t_k and W > 0
 * gathered: the histogram names the bucket the k-th largest W is in,
 * that bucket and those above are gathered and the cut by number finds
 * it among them.
 */
static uint32_t sampler_top_k(struct sampler *s, uint32_t k)
{
	uint32_t lowest, n = 0;
	uint64_t unused;

	sampler_histogram(s);
	lowest = sampler_bucket_of_kth(s, k);
	for (uint32_t i = 0; i < s->vocab; i++)
		if (s->w[i] && sampler_bucket(s->w[i]) >= lowest)
			s->by_id[n++] = (struct sampler_cand){ s->w[i], i };
	s->n_by_id = n;
	/* Fewer than k tokens of W > 0: every one is kept. */
	if (n < k)
		return 1;
	n = sampler_gathered_weights(s, 0, &unused);
	return sampler_cut(s->scratch, n, k, false);
}

/*
 * The top_p threshold over all tokens (top_k off) by the histogram: the
 * exact bucket masses name the bucket where the running mass from the
 * top reaches target, and the cut is found among that bucket's weights.
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
			s->scratch[n++] = s->w[i];
	return sampler_cut(s->scratch, n, target - cum, true);
}

/*
 * The top_p threshold over all tokens (top_k off) of a flat row, where
 * thousands are kept, with one pass over W instead of the histogram's.
 * Every 16th token's weight, bucketed, estimates the bucket the cut lies
 * in: by the mass under it, Z - target (made of many small weights,
 * which a sample estimates well, where the mass above hangs on a few
 * large ones), give or take SAMPLER_BRACKET_SLACK of it.  One pass then
 * sums the W of the buckets above that bracket exactly (per block) and
 * gathers the bracket's tokens.  When those sums show the cut inside the
 * bracket (above < target <= above + bracket: the sample may err, the
 * sums cannot), the bracket's own bucket masses name the cut's bucket,
 * the cut is found among that bucket's weights, and the block sums are
 * made those of W >= t for the draw; else false, and the full histogram
 * decides.
 */
#define SAMPLER_BRACKET_SLACK 0.1

static bool sampler_top_p_bracket(struct sampler *s, uint64_t z_sum,
				  uint64_t target, uint32_t *t)
{
	uint64_t *mass = s->hist_mass, z_sample = 0, above, bracket = 0, cum;
	uint32_t b, b_lo = 0, b_hi = SAMPLER_N_BUCKETS - 1, n = 0;
	double under, cum_s = 0;

	if (s->vocab < 64 * 16)
		return false;
	memset(&mass[SAMPLER_BUCKET_ONE], 0,
	       (SAMPLER_N_BUCKETS - SAMPLER_BUCKET_ONE) * sizeof(*mass));
	for (uint32_t i = 0; i + 16 <= s->vocab; i += 16) {
		/* A varying offset in each 16: no stride lines up with W. */
		uint32_t w = s->w[i + ((i >> 4) * 5 & 15)];

		/* W = 0 adds 0 to bucket 0, which is never read. */
		mass[sampler_bucket(w)] += w;
		z_sample += w;
	}
	/* The sample's share of the mass under the cut. */
	under = (double)(z_sum - target) * (double)(s->vocab / 16) /
		(double)s->vocab;
	for (b = SAMPLER_BUCKET_ONE; b < SAMPLER_N_BUCKETS; b++) {
		cum_s += (double)mass[b];
		if (!b_lo && cum_s > (1 - SAMPLER_BRACKET_SLACK) * under)
			b_lo = b;
		if (cum_s > (1 + SAMPLER_BRACKET_SLACK) * under) {
			b_hi = b;
			break;
		}
	}
	if (!b_lo || !z_sample)
		return false;
	above = sampler_bracket_pass(s, b_lo, b_hi);
	memset(&mass[b_lo], 0, (b_hi - b_lo + 1) * sizeof(*mass));
	for (uint32_t j = 0; j < s->n_by_id; j++) {
		mass[sampler_bucket(s->by_id[j].w)] += s->by_id[j].w;
		bracket += s->by_id[j].w;
	}
	if (!(above < target && target <= above + bracket)) {
		s->n_by_id = SAMPLER_NOT_GATHERED;
		s->sums_t = SAMPLER_WEIGHT_ONE + 1;	/* sums of no use */
		return false;
	}
	/* The cut's bucket: the bracket's masses from the top. */
	cum = above;
	for (b = b_hi; cum + mass[b] < target; b--)
		cum += mass[b];
	for (uint32_t j = 0; j < s->n_by_id; j++)
		if (sampler_bucket(s->by_id[j].w) == b)
			s->scratch[n++] = s->by_id[j].w;
	*t = sampler_cut(s->scratch, n, target - cum, true);
	/* The block sums of W >= t: those above the bracket, and its own. */
	for (uint32_t j = 0; j < s->n_by_id; j++) {
		const struct sampler_cand *c = &s->by_id[j];

		if (c->w >= *t) {
			s->block_sum[c->id / SAMPLER_BLOCK] += c->w;
			above += c->w;
		}
	}
	s->n_by_id = SAMPLER_NOT_GATHERED;	/* not the kept set */
	s->sums_t = *t;
	s->sums_total = above;
	return true;
}

/*
 * What the weights' pass gathers for p: s->gather_bar (W > it), and for
 * top_k up to SAMPLER_TOP_K_GATHER_MAX s->gather_k.
 *  - top_k: every token that can be among the k largest.  The bar starts
 *    at 0 and rises to the k-th largest gathered so far each time the
 *    buffer holds 4k (sampler_gather_compact()): on average the pass
 *    keeps a few k of a vocabulary in any order, with no heap.
 *  - top_p alone (or with a larger top_k): every W >= c = (Z - target) /
 *    vocab, where the cut lies, and c is at least c0 below whatever Z is
 *    (Z >= 2^30, the maximum's weight, and Z - target >= (1 - top_p) Z -
 *    2); sampler_select() checks c against the bar all the same.  Within
 *    a top_k's K1 the same bound holds with z1 for Z, |K1| for vocab.
 *  - min_p alone: its threshold, which is the kept set.
 * A fixed bar may leave thousands on a flat row: the pass stops
 * gathering past SAMPLER_PASS_GATHER_MAX.
 */
void sampler_gather_plan(struct sampler *s,
				const struct sampling_params *p)
{
	uint32_t t_min = sampler_min_p_threshold(p->min_p);
	bool top_k = p->top_k && p->top_k < s->vocab;

	sampler_gather_none(s);
	if (top_k && p->top_k <= SAMPLER_TOP_K_GATHER_MAX) {
		s->gather_k = p->top_k;
		sampler_set_gather_bar(s, 0);
		s->gather_limit = s->vocab;	/* never full: it compacts */
		s->gather_cap = 4 * p->top_k;
	} else if (p->top_p < 1.0f) {
		double c0 = ((1.0 - (double)p->top_p) * SAMPLER_WEIGHT_ONE - 2.0) /
			    s->vocab;

		sampler_set_gather_bar(s, c0 >= 1.0 ? (uint32_t)c0 - 1 : 0);
	} else if (!top_k && t_min > 1) {
		sampler_set_gather_bar(s, t_min - 1);
	}
}

/* No gathering (the logprobs of a greedy row). */
void sampler_gather_none(struct sampler *s)
{
	s->gather_k = 0;
	s->gather_limit = SAMPLER_PASS_GATHER_MAX;
	sampler_set_gather_bar(s, SAMPLER_NO_GATHER);
}

/*
 * Cut the gathered tokens (more than k, holding every W >= their k-th
 * largest) to the W >= that k-th largest, ties included, in their order;
 * returns it.
 */
static uint32_t sampler_keep_k_largest(struct sampler *s, uint32_t k)
{
	uint32_t kept = 0, t;
	uint64_t unused;

	t = sampler_cut(s->scratch, sampler_gathered_weights(s, 0, &unused), k,
			false);
	for (uint32_t j = 0; j < s->n_by_id; j++)
		if (s->by_id[j].w >= t)
			s->by_id[kept++] = s->by_id[j];
	s->n_by_id = kept;
	return t;
}

/*
 * top_k's buffer is full (s->n_by_id >= s->gather_cap): keep the tokens
 * of W >= the k-th largest gathered and raise the bar to just under it.
 * Ties may keep it full: the cap then doubles, so a row of equal weights
 * costs linear time too.
 */
void sampler_gather_compact(struct sampler *s)
{
	/* Every gathered W is over the bar: the cut is >= 1. */
	sampler_set_gather_bar(s, sampler_keep_k_largest(s, s->gather_k) - 1);
	if (s->n_by_id * 2 > s->gather_cap)
		s->gather_cap = s->n_by_id * 2;
}

/*
 * top_k's threshold from the pass's gathering: the k-th largest of the
 * gathered (which hold every W >= it), with the gathered cut to W >= it.
 * Fewer than k tokens of W > 0: every one is kept.
 */
static uint32_t sampler_top_k_gathered(struct sampler *s, uint32_t k)
{
	return s->n_by_id < k ? 1 : sampler_keep_k_largest(s, k);
}

/*
 * The threshold t of top_k and top_p: the kept set is the tokens of
 * W >= t (and W > 0).  When the tokens holding the kept set are gathered
 * (s->n_by_id is not SAMPLER_NOT_GATHERED) the draw walks those alone.
 * z_sum is Z.
 */
uint32_t sampler_select(struct sampler *s, const struct sampling_params *p,
			       uint64_t z_sum)
{
	uint64_t target, kept;
	uint32_t t, c, n;

	if (p->top_k && p->top_k < s->vocab) {
		/* The pass gathered a prefix of the order by W: when it holds
		 * k tokens, the k-th largest is among them. */
		if (s->gather_k == p->top_k) {
			t = sampler_top_k_gathered(s, p->top_k);
		} else if (s->n_by_id != SAMPLER_NOT_GATHERED &&
			   s->n_by_id >= p->top_k) {
			n = sampler_gathered_weights(s, 0, &kept);
			t = sampler_cut(s->scratch, n, p->top_k, false);
		} else {
			t = sampler_top_k(s, p->top_k);
		}
		if (p->top_p < 1.0f) {
			/* top_p on K1 renormalised: its own target. */
			n = sampler_gathered_weights(s, t, &kept);
			c = sampler_cut(s->scratch, n,
					sampler_top_p_target(p->top_p, kept), true);
			t = c > t ? c : t;
		}
		return t;
	}
	/*
	 * top_p alone.  The tokens of W < c weigh less than c * vocab <=
	 * Z - target, so those of W >= c weigh more than target: the cut
	 * lies among them, a prefix of the order by decreasing W.
	 */
	target = sampler_top_p_target(p->top_p, z_sum);
	c = (uint32_t)((z_sum - target) / s->vocab);
	if (s->n_by_id == SAMPLER_NOT_GATHERED || s->gather_bar >= c)
		s->n_by_id = sampler_gather_above(s, c, SAMPLER_GATHER_MAX);
	if (s->n_by_id == SAMPLER_NOT_GATHERED) {
		if (sampler_top_p_bracket(s, z_sum, target, &t))
			return t;
		return sampler_top_p_histogram(s, target);
	}
	n = sampler_gathered_weights(s, c, &kept);
	return sampler_cut(s->scratch, n, target, true);
}

