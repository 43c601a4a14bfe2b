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
 * sampler_cut() (sampler_cut.c) finds the value where the mass (top_p)
 * or the count (top_k) from the top reaches a target.  The passes over
 * the vocabulary go through s->k (sampler_internal.h).  A flat row, where top_p keeps
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
 * Gather the tokens of W >= min_w and W > 0 into s->by_id in id order;
 * their count, or SAMPLER_NOT_GATHERED when there are more than cap.
 */
uint32_t sampler_gather_above(struct sampler *s, uint32_t min_w,
			      uint32_t cap)
{
	uint32_t n, bar = min_w ? min_w - 1 : 0;

	/* Counting first: on a flat row appending would be the cost. */
	if (cap < s->vocab && s->k->over_cap(s, bar, cap))
		return SAMPLER_NOT_GATHERED;
	n = s->k->collect(s, bar, cap);
	return n > cap ? SAMPLER_NOT_GATHERED : n;
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
uint32_t sampler_top_p_histogram(struct sampler *s, uint64_t target)
{
	uint64_t cum = 0;
	uint32_t b = SAMPLER_N_BUCKETS, n;

	s->k->mass_histogram(s);
	/* The mass of W >= 1 is Z >= target: the walk ends at or above
	 * SAMPLER_BUCKET_ONE, the buckets every table's histogram fills. */
	while (b-- > 1 && cum + s->hist_mass[b] < target)
		cum += s->hist_mass[b];
	n = s->k->collect_bucket(s, b);
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
	above = s->k->bracket_pass(s, b_lo, b_hi);
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
void sampler_gather_plan(struct sampler *s, const struct sampling_params *p)
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
 * top_k's threshold from the pass's gathering: the k-th largest of the
 * gathered (which hold every W >= it), with the gathered cut to W >= it.
 * Fewer than k tokens of W > 0: every one is kept.
 */
uint32_t sampler_top_k_gathered(struct sampler *s, uint32_t k)
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

