/*
 * sampler_kernels.h - the sampler's passes over the vocabulary, one
 * table per instruction set: sampler_portable.c (GCC vector extensions,
 * 4 lanes, any CPU) and sampler_avx2.c (8 lanes).  sampler_create()
 * picks a table once; sampler.c and sampler_select.c then call through
 * s->k, one indirect call a pass, never a test per element.  The passes
 * call only sampler_cut.c below them (top_k's compaction), never back up.
 *
 * Every entry gives the same results to the bit on both tables:
 * tests/unit/test_sampler.c holds each AVX2 pass to its portable twin on
 * random rows.  A new instruction set is one more file and table.
 */
#ifndef DYNBATCH_SAMPLER_KERNELS_H
#define DYNBATCH_SAMPLER_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "sampling/sampler_internal.h"

struct sampler_kernels {
	enum sampler_isa isa;
	const char *name;	/* "portable", "avx2" */
	/*
	 * The largest of y[0 .. n) (-inf when all are); *bad when one is
	 * NaN or +inf (false for -inf, a banned token).
	 */
	float (*max)(const float *y, uint32_t n, bool *bad);
	/* The first i >= from with y[i] == m (there is one). */
	uint32_t (*find)(const float *y, uint32_t n, uint32_t from, float m);
	/*
	 * W of every token of s->y into s->w and each block's sum into
	 * s->block_sum, gathering the tokens of W > s->gather_bar into
	 * s->by_id from s->n_by_id on (the caller resets and ends the
	 * gather: sampler_weights()); returns Z.
	 */
	uint64_t (*weights)(struct sampler *s, float max_y, float scale);
	/* Each block's sum of the W >= t into s->block_sum; their total. */
	uint64_t (*block_sums)(struct sampler *s, uint32_t t);
	/*
	 * For buckets [b_lo, b_hi] (SAMPLER_BUCKET_ONE <= b_lo <= b_hi):
	 * the block sums of the W in buckets above b_hi (their total
	 * returned), and the bracket's tokens into s->by_id in id order
	 * (s->n_by_id of them; no cap).
	 */
	uint64_t (*bracket_pass)(struct sampler *s, uint32_t b_lo,
				 uint32_t b_hi);
	/* The first i >= from with W > bar, or vocab. */
	uint32_t (*next_above)(const struct sampler *s, uint32_t from,
			       uint32_t bar);
	/* Whether more than cap tokens have W > bar. */
	bool (*over_cap)(const struct sampler *s, uint32_t bar, uint32_t cap);
	/*
	 * The tokens of W > bar into s->by_id in id order; their count, or
	 * cap + 1 as soon as there are more than cap.
	 */
	uint32_t (*collect)(struct sampler *s, uint32_t bar, uint32_t cap);
	/* s->hist_mass of the buckets >= SAMPLER_BUCKET_ONE (the others
	 * may be left as they were). */
	void (*mass_histogram)(struct sampler *s);
	/* The weights of the tokens of W > 0 in bucket b into s->scratch,
	 * in id order; their count. */
	uint32_t (*collect_bucket)(struct sampler *s, uint32_t b);
};

extern const struct sampler_kernels sampler_kernels_portable;

/*
 * s->hist_count and s->hist_mass of every bucket (top_k over
 * SAMPLER_TOP_K_GATHER_MAX needs the counts, on either table).
 */
void sampler_histogram(struct sampler *s);

/* Does this CPU run sampler_kernels_avx2 (asked once a sampler)? */
bool sampler_have_avx2(void);

#if defined(__x86_64__) || defined(__i386__)
extern const struct sampler_kernels sampler_kernels_avx2;
#endif

#endif /* DYNBATCH_SAMPLER_KERNELS_H */
