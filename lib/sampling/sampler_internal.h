/*
 * sampler_internal.h - what lib/sampling/sampler.c, its kept-set selection
 * (lib/sampling/sampler_select.c) and its AVX2 kernels (lib/sampling/sampler_avx2.c)
 * share: the sampler's state, its constants and the entry points between
 * them.  Private to those files and to tests/unit/test_sampler.c, which holds
 * each kernel to its portable twin.
 */
#ifndef DYNBATCH_SAMPLER_INTERNAL_H
#define DYNBATCH_SAMPLER_INTERNAL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "sampling/sampler.h"

#define SAMPLER_BUCKET_SHIFT 20
/* Buckets of (float)W for W in [0, 2^30]: 2^30 is 0x4E800000. */
#define SAMPLER_N_BUCKETS ((0x4E800000u >> SAMPLER_BUCKET_SHIFT) + 1)
/* The bucket of W = 1 (1.0f is 0x3F800000): W >= 1 lies at or above. */
#define SAMPLER_BUCKET_ONE (0x3F800000u >> SAMPLER_BUCKET_SHIFT)

/* Four lanes: one SSE register on plain x86-64 (the build's baseline). */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
#define LANES 4

/*
 * The lanes' form of sampler_weight()'s polynomial: every coefficient
 * (the leading 1 too) times 2^30, so p comes out as p(f) * 2^30, to the
 * bit (a power of two commutes with every rounding at these magnitudes),
 * and only 2^n is left to add to its exponent bits.
 */
#define SAMPLER_LANE_ONE 0x1p30f
#define SAMPLER_LANE_P1 (SAMPLER_P1 * 0x1p30f)
#define SAMPLER_LANE_P2 (SAMPLER_P2 * 0x1p30f)
#define SAMPLER_LANE_P3 (SAMPLER_P3 * 0x1p30f)
#define SAMPLER_LANE_P4 (SAMPLER_P4 * 0x1p30f)

struct sampler_cand {
	uint32_t w;
	uint32_t id;
};

/* Past this many candidates top_p uses the histogram instead. */
#define SAMPLER_GATHER_MAX 4096u
/* The weights' pass gathers at most this many (a model-like row has a
 * few hundred; a flat row, where the pass stops gathering, thousands). */
#define SAMPLER_PASS_GATHER_MAX 1024u
#define SAMPLER_NOT_GATHERED UINT32_MAX
/* A gather bar no weight is over (W <= 2^30): gather nothing. */
#define SAMPLER_NO_GATHER SAMPLER_WEIGHT_ONE

/* Up to this top_k the weights' pass gathers it; above, the histogram. */
#define SAMPLER_TOP_K_GATHER_MAX 1024u

/* Tokens per block of the draw's block sums (a multiple of LANES). */
#define SAMPLER_BLOCK 1024u

/* The histogram bucket of a weight: 1/8 octaves of W, 0 for W = 0. */
static inline uint32_t sampler_bucket(uint32_t w)
{
	float f = (float)w;
	uint32_t bits;

	memcpy(&bits, &f, sizeof(bits));
	return bits >> SAMPLER_BUCKET_SHIFT;
}

struct sampler {
	uint32_t vocab;
	bool avx2;			/* the AVX2 kernels (same bits, 8 lanes) */
	uint32_t n_blocks;		/* ceil(vocab / SAMPLER_BLOCK) */
	const float *y;			/* this row's biased logits */
	float *y_copy;			/* where they are when biased */
	uint64_t *block_sum;		/* sum of the weights drawn from, per block */
	uint32_t *w;			/* the weights W */
	struct sampler_cand *by_id;	/* the gathered tokens, by id */
	uint32_t n_by_id;		/* how many, or SAMPLER_NOT_GATHERED */
	/* What the weights' pass gathers (sampler_gather_plan()): */
	uint32_t gather_bar;		/* W > this (rising for top_k); set by
					 * sampler_set_gather_bar() */
	float gather_x_bar;		/* no x under this has W > gather_bar */
	uint32_t gather_k;		/* top_k's k, or 0: a fixed bar */
	uint32_t gather_limit;		/* past this many, none is stored */
	uint32_t gather_cap;		/* top_k compacts at this many */
	uint32_t sums_t;		/* block_sum[] sums the W >= this, */
	uint64_t sums_total;		/* and adds up to this */
	uint32_t *scratch;		/* weights being cut; top_k's heap */
	uint32_t hist_count[SAMPLER_N_BUCKETS];
	uint64_t hist_mass[SAMPLER_N_BUCKETS];
};

/*
 * Set the gather bar, and the x under which no W is over it (the AVX2
 * pass tests 16 lanes' x against it before any weight): W <= 2^(30 + x)
 * (1 + 3e-6), so W > bar needs x > log2(bar) - 30 less a hair; a bit more
 * is left for the float roundings.  Once a row or a compaction, not per
 * block.
 */
static inline void sampler_set_gather_bar(struct sampler *s, uint32_t bar)
{
	s->gather_bar = bar;
	s->gather_x_bar = bar ? (float)(log2((double)bar) - 30.0 - 1e-3) :
		-INFINITY;
}

/* sampler_select.c: what the weights' pass gathers for p (or nothing),
 * top_k's buffer cut to its k largest when full, and the threshold t of
 * the kept set (W >= t) of top_k and top_p, given Z. */
void sampler_gather_plan(struct sampler *s, const struct sampling_params *p);
void sampler_gather_none(struct sampler *s);
void sampler_gather_compact(struct sampler *s);
uint32_t sampler_select(struct sampler *s, const struct sampling_params *p,
			uint64_t z_sum);

/* Does this CPU run the AVX2 kernels (asked once, by sampler_create())? */
bool sampler_have_avx2(void);

#if defined(__x86_64__) || defined(__i386__)
#define SAMPLER_AVX2 __attribute__((target("avx2")))

/* The AVX2 twins of sampler.c's passes (sampler_avx2.c says how each
 * keeps the portable code's bits). */
SAMPLER_AVX2 float sampler_max_avx2(const float *y, uint32_t n, bool *bad);
SAMPLER_AVX2 uint32_t sampler_find_avx2(const float *y, uint32_t n,
					uint32_t from, float m);
SAMPLER_AVX2 uint64_t sampler_weights_avx2(struct sampler *s, float max_y,
					   float scale);
SAMPLER_AVX2 uint64_t sampler_block_sums_avx2(struct sampler *s, uint32_t t);
SAMPLER_AVX2 uint64_t sampler_bracket_pass_avx2(struct sampler *s,
						uint32_t b_lo, uint32_t b_hi);
SAMPLER_AVX2 uint32_t sampler_next_above_avx2(const struct sampler *s,
					      uint32_t from, uint32_t bar);
SAMPLER_AVX2 bool sampler_over_cap_avx2(const struct sampler *s, uint32_t bar,
					uint32_t cap);
SAMPLER_AVX2 uint32_t sampler_collect_avx2(struct sampler *s, uint32_t bar,
					   uint32_t cap);
SAMPLER_AVX2 void sampler_mass_histogram_avx2(struct sampler *s);
SAMPLER_AVX2 uint32_t sampler_collect_bucket_avx2(struct sampler *s,
						  uint32_t b);
#endif

#endif /* DYNBATCH_SAMPLER_INTERNAL_H */
