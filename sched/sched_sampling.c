/*
 * sched_sampling.c - what a slot's worker reads of its request, written
 * when the slot takes it (shard_write_sampling(), shard_sched.h): the
 * sampling entry (docs/DESIGN.md 2.4) and the grammar entry (2.8) in the
 * shard's object.  In-process, the runner reads the request itself.
 */
#include "sched/shard_sched.h"

#include <string.h>

#include "ipc/shm_segment.h"

void shard_write_sampling(struct sched *sc, uint32_t slot,
			  const struct sched_request *rq)
{
	struct shm_slot_sampling *t;
	const struct sampling_params *p = rq->sampling;

	sc->slot_logprobs[slot] = p->logprobs;
	sc->slot_top_logprobs[slot] = p->top_logprobs;
	if (sc->in_process) {	/* the runner reads the fields itself */
		sc->slot_rq[slot] = *rq;
		return;
	}
	t = shm_sampling_at(sc->seg, slot);
	/* field by field, and only the bias entries there are: a struct
	 * assignment would write all 300 for every request (and the worker's
	 * core would pull them over) */
	t->generation = sc->slots->slots[slot].generation;
	t->needs_logits = rq->needs_logits;
	t->n_prompt = rq->n_prompt;
	t->choice = rq->choice;
	t->no_spec = rq->no_spec;
	t->seed = p->seed;
	t->temperature = p->temperature;
	t->top_p = p->top_p;
	t->min_p = p->min_p;
	t->top_k = p->top_k;
	t->logprobs = p->logprobs;
	t->top_logprobs = p->top_logprobs;
	t->n_bias = p->n_bias;
	t->presence_penalty = p->presence_penalty;
	t->frequency_penalty = p->frequency_penalty;
	t->repetition_penalty = p->repetition_penalty;
	if (p->n_bias)
		memcpy(t->bias, p->bias, p->n_bias * sizeof(t->bias[0]));
	if (sc->seg->hdr->grammar_slot_bytes) {
		struct shm_slot_grammar *g = shm_grammar_at(sc->seg, slot);

		g->generation = t->generation;
		g->len = rq->grammar ? rq->grammar_len : 0;	/* fits: admission */
		if (rq->grammar)
			memcpy(g->source, rq->grammar_source, rq->grammar_len);
	}
}
