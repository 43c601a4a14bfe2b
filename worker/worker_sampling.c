/*
 * worker_sampling.c - see worker_sampling.h.
 */
#include "worker/worker_sampling.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

int worker_sampling_init(struct worker_sampling *ws, uint32_t n_slots)
{
	ws->n_slots = n_slots;
	ws->slots = calloc(n_slots, sizeof(*ws->slots));
	/* calloc: the pages of slots whose requests never bias stay untouched */
	ws->bias = calloc((size_t)n_slots * SAMPLER_MAX_BIAS, sizeof(*ws->bias));
	if (!ws->slots || !ws->bias) {
		worker_sampling_free(ws);
		return -ENOMEM;
	}
	return 0;
}

void worker_sampling_free(struct worker_sampling *ws)
{
	free(ws->slots);
	free(ws->bias);
	ws->slots = NULL;
	ws->bias = NULL;
}

/* Copy the table's entry for slot into c (bias into bias[]) and check it. */
static void worker_sampling_copy(struct worker_slot_sampling *c,
				 struct sampling_bias *bias,
				 const struct shm_segment *seg, uint32_t slot,
				 uint32_t generation)
{
	const struct shm_slot_sampling *shared = shm_sampling_at(seg, slot);
	struct shm_slot_sampling e;
	char why[160];

	/* one read of shared memory: the fixed fields, then only the bias
	 * entries the request has (most have none) */
	memcpy(&e, shared, offsetof(struct shm_slot_sampling, bias));
	memset(c, 0, sizeof(*c));
	c->generation = generation;
	if (e.generation != generation || e.n_bias > SAMPLER_MAX_BIAS) {
		LOG(LOG_WARN, "slot %u: sampling entry is for generation %u, "
		    "not %u: the row is refused", slot, e.generation, generation);
		return;
	}
	c->needs_logits = e.needs_logits != 0;
	c->n_prompt = e.n_prompt;
	c->choice = e.choice;
	c->no_spec = e.no_spec != 0;
	if (!c->needs_logits) {
		c->valid = true;
		return;
	}
	memcpy(bias, shared->bias, e.n_bias * sizeof(*bias));
	c->params = (struct sampling_params){
		.temperature = e.temperature, .top_p = e.top_p,
		.top_k = e.top_k, .min_p = e.min_p, .seed = e.seed,
		.logprobs = e.logprobs != 0, .top_logprobs = e.top_logprobs,
		.bias = bias, .n_bias = e.n_bias,
		.presence_penalty = e.presence_penalty,
		.frequency_penalty = e.frequency_penalty,
		.repetition_penalty = e.repetition_penalty };
	if (sampling_params_validate(&c->params, seg->hdr->vocab, why, sizeof(why))) {
		LOG(LOG_WARN, "slot %u: sampling entry rejected: %s", slot, why);
		return;
	}
	c->valid = true;
}

const struct worker_slot_sampling *
worker_sampling_load(struct worker_sampling *ws, const struct shm_segment *seg,
		     uint32_t slot, uint32_t local, uint32_t generation)
{
	struct worker_slot_sampling *c = &ws->slots[local];

	worker_sampling_copy(c, ws->bias + (size_t)local * SAMPLER_MAX_BIAS,
			     seg, slot, generation);
	return c;
}
