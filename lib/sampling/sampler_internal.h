/*
 * sampler_internal.h - what the sampler's files share: its state, its
 * constants and the entry points between them.  Private to
 * lib/sampling/ and to the tests and benchmarks that hold its paths to
 * each other (tests/unit/test_sampler.c, tests/fuzz/fuzz_sampler.c).
 *
 * The files form layers, each calling only those below it
 * (docs/DESIGN.md 2.4):
 *
 *   sampler.c           a row: bias, weights, draw, logprobs
 *   sampler_select.c    the kept set of top_k, top_p and min_p
 *   sampler_portable.c, sampler_avx2.c
 *                       the passes over the vocabulary, one table of
 *                       them per instruction set (struct sampler_kernels
 *                       below),
 *                       chosen once by sampler_create()
 *   sampler_cut.c       cuts among gathered weights, top_k's compaction
 *                       (which the weights' pass runs as it gathers)
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

struct sampler_kernels;

struct sampler {
	uint32_t vocab;
	const struct sampler_kernels *k;	/* its passes: portable or
						 * AVX2 (same bits) */
	uint32_t n_blocks;		/* ceil(vocab / SAMPLER_BLOCK) */
	const float *y;			/* this row's biased logits */
	float *y_copy;			/* where they are when biased or
					 * penalized */
	/* per token: generated count, SAMPLER_SEEN when in the history
	 * (penalties only; all zero between rows) */
	uint32_t *pen_count;
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

/* ---- sampler.c */

/*
 * W for every token, and per block their sum in s->block_sum, through
 * s->k; gathers what sampler_gather_plan() set (sampler.c says what).
 * Returns Z, the sum of all W.
 */
uint64_t sampler_weights(struct sampler *s, float max_y, float scale);

/* The block sums of the weights >= t (already computed); their total. */
uint64_t sampler_block_sums(struct sampler *s, uint32_t t);

/* The largest of the row y; *bad when one is NaN or +inf. */
float sampler_row_max(const struct sampler *s, const float *y, bool *bad);

/* The lowest id whose y is max_y. */
uint32_t sampler_argmax(const struct sampler *s, float max_y);

/* ---- sampler_select.c: what the weights' pass gathers for p (or
 * nothing), and the threshold t of the kept set (W >= t) of top_k and
 * top_p, given Z. */
void sampler_gather_plan(struct sampler *s, const struct sampling_params *p);
void sampler_gather_none(struct sampler *s);
uint32_t sampler_select(struct sampler *s, const struct sampling_params *p,
			uint64_t z_sum);
/* Its steps, which the tests hold to each other on both paths: */
uint32_t sampler_top_k_gathered(struct sampler *s, uint32_t k);
uint32_t sampler_top_p_histogram(struct sampler *s, uint64_t target);
uint32_t sampler_gather_above(struct sampler *s, uint32_t min_w,
			      uint32_t cap);

/* ---- sampler_cut.c */

/*
 * The largest v among w[0 .. n) such that the w >= v reach target, in
 * mass (by_mass) or in number; w is scratch, reordered.  sampler_cut()
 * is sampler_cut_rounds() with 64 rounds before its fallback sort.
 */
uint32_t sampler_cut_rounds(uint32_t *w, uint32_t n, uint64_t target,
			    bool by_mass, int rounds);
uint32_t sampler_cut(uint32_t *w, uint32_t n, uint64_t target, bool by_mass);

/* Copy the weights >= t of the gathered tokens into s->scratch; the
 * count, and their sum in *sum.  Inline: a loop its callers run once a
 * row, which the compiler folds into them. */
static inline uint32_t sampler_gathered_weights(struct sampler *s,
						 uint32_t t, uint64_t *sum)
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

/* Cut the gathered tokens to the W >= their k-th largest; returns it. */
uint32_t sampler_keep_k_largest(struct sampler *s, uint32_t k);

/* top_k's buffer is full: keep its k largest and raise the bar (the
 * weights' pass calls it, on either path). */
void sampler_gather_compact(struct sampler *s);

/* ---- The passes' tables -------------------------------------------
 *
 * The sampler's passes over the vocabulary, one
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

#endif /* DYNBATCH_SAMPLER_INTERNAL_H */
