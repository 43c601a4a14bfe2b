/*
 * ref_sampler.h - a naive sampler for the reference decoder, written
 * apart from the engine's (lib/sampling/sampler.c) and never linked into it.
 *
 * Same semantics (stated in lib/sampling/sampler.h) and the same Philox draw
 * (lib/sampling/philox.h: the RNG is the contract), but the kept set comes from
 * the definition read literally: a full stable sort of the vocabulary by
 * (probability, id), plain loops over a mask.  The engine must agree with
 * it token for token and logprob for logprob.
 */
#ifndef DYNBATCH_REF_SAMPLER_H
#define DYNBATCH_REF_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "sampling/sampler.h"

/*
 * Sample from logits[0 .. vocab) as sampler_sample() does.  Returns 0,
 * -EDOM (NaN or +inf logit), -ENOENT (every token banned), -EINVAL (a
 * bias token out of range) or -ENOMEM.
 */
int ref_sample(const float *logits, uint32_t vocab,
	       const struct sampling_params *p, uint32_t k, uint32_t choice,
	       struct sampler_result *out);

/*
 * ref_sample() with the penalties over the history h (NULL: none), as
 * sampler_sample_row() does; -EINVAL for a history token out of range.
 */
int ref_sample_hist(const float *logits, uint32_t vocab,
		    const struct sampling_params *p,
		    const struct sampling_history *h, uint32_t k,
		    uint32_t choice, struct sampler_result *out);

/*
 * The reference's steps one at a time, for tests that hold the engine's
 * draws to the definition (test_sampler's chi-square test): a row's
 * buffers, each vocab long, owned by the caller.
 */
struct ref_row {
	uint32_t vocab;
	float *y;	/* biased logits */
	uint32_t *w;	/* weights */
	bool *keep;
	uint32_t *order;	/* ids by decreasing weight, ties by id */
	uint32_t *tmp;
};

/* Weights at temperature t and the order by them; returns Z. */
uint64_t ref_weigh(struct ref_row *r, float max_y, float temperature);
/* Apply top_k, top_p and min_p to r->keep, in that order. */
void ref_cut(struct ref_row *r, const struct sampling_params *p);
/* The kept token the 53-bit uniform r53 draws. */
uint32_t ref_draw(const struct ref_row *r, uint64_t r53);

#endif /* DYNBATCH_REF_SAMPLER_H */
