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

#endif /* DYNBATCH_REF_SAMPLER_H */
