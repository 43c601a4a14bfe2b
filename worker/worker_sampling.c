/*
 * worker_sampling.c - see worker_sampling.h.
 */
#include "worker_sampling.h"

#include <string.h>

#include "log.h"

/* Copy the table's entry into c and check it. */
static void worker_sampling_load(struct worker_slot_sampling *c,
				 const struct shm_segment *seg, uint32_t slot,
				 uint32_t generation)
{
	const struct shm_slot_sampling *shared = shm_sampling_at(seg, slot);
	struct shm_slot_sampling e;
	char why[160];

	memcpy(&e, shared, sizeof(e));	/* one read of shared memory */
	memset(c, 0, offsetof(struct worker_slot_sampling, bias));
	c->generation = generation;
	if (e.generation != generation || e.n_bias > SAMPLER_MAX_BIAS) {
		LOG(LOG_WARN, "slot %u: sampling entry is for generation %u, "
		    "not %u: the row is refused", slot, e.generation, generation);
		return;
	}
	c->needs_logits = e.needs_logits != 0;
	c->n_prompt = e.n_prompt;
	c->choice = e.choice;
	memcpy(c->bias, e.bias, e.n_bias * sizeof(c->bias[0]));
	c->params = (struct sampling_params){
		.temperature = e.temperature, .top_p = e.top_p,
		.top_k = e.top_k, .min_p = e.min_p, .seed = e.seed,
		.logprobs = e.logprobs != 0, .top_logprobs = e.top_logprobs,
		.bias = c->bias, .n_bias = e.n_bias };
	if (c->needs_logits &&
	    sampling_params_validate(&c->params, seg->hdr->vocab, why, sizeof(why))) {
		LOG(LOG_WARN, "slot %u: sampling entry rejected: %s", slot, why);
		return;
	}
	c->valid = true;
}

const struct worker_slot_sampling *
worker_sampling_get(struct worker_slot_sampling *cache, const struct shm_segment *seg,
		    uint32_t slot, uint32_t local, uint32_t generation)
{
	struct worker_slot_sampling *c = &cache[local];

	if (c->generation != generation)
		worker_sampling_load(c, seg, slot, generation);
	return c;
}
