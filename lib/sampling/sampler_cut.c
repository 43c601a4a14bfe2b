/*
 * sampler_cut.c - cuts among weights already gathered: the value where
 * the mass (top_p) or the count (top_k) from the top reaches a target,
 * found by selection, never a sort; and top_k's compaction of its
 * buffer, which the weights' pass (either table of sampler_internal.h)
 * runs as the buffer fills.  The bottom layer of the sampler: it calls
 * nothing of the files above it (sampler_internal.h).
 */
#include <stdlib.h>

#include "sampling/sampler_internal.h"

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
static inline __attribute__((always_inline)) uint32_t
sampler_cut_in(uint32_t *w, uint32_t n, uint64_t target, bool by_mass,
	       int rounds)
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

uint32_t sampler_cut_rounds(uint32_t *w, uint32_t n, uint64_t target,
			    bool by_mass, int rounds)
{
	return sampler_cut_in(w, n, target, by_mass, rounds);
}

/* Its own copy with the rounds a constant, as the selection runs it. */
uint32_t sampler_cut(uint32_t *w, uint32_t n, uint64_t target, bool by_mass)
{
	return sampler_cut_in(w, n, target, by_mass, 64);
}

/*
 * Cut the gathered tokens (more than k, holding every W >= their k-th
 * largest) to the W >= that k-th largest, ties included, in their order;
 * returns it.
 */
uint32_t sampler_keep_k_largest(struct sampler *s, uint32_t k)
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
