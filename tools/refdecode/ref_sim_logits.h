/*
 * ref_sim_logits.h - the reference decoder's own reading of the sim
 * model's logits (docs/DESIGN.md 2.1, lib/model/sim_model.h), written from the
 * definition and never from lib/model/sim_model.c, so that a slip in either
 * shows up as a disagreement in refdecode --check.
 */
#ifndef DYNBATCH_REF_SIM_LOGITS_H
#define DYNBATCH_REF_SIM_LOGITS_H

#include <stddef.h>
#include <stdint.h>

/*
 * The sim's logits after p[0..n) for a vocabulary of vocab tokens and
 * model seed seed: vocab floats into out.  Returns the token the
 * definition gives the top logit (h mod vocab), for the caller to hold
 * against sim_next().
 */
int32_t ref_sim_logits(const int32_t *p, size_t n, uint32_t vocab,
		       uint64_t seed, float *out);

#endif /* DYNBATCH_REF_SIM_LOGITS_H */
