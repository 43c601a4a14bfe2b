/*
 * worker_sampling.h - the worker's private copy of each slot's sampling
 * fields (docs/DESIGN.md 2.4).
 *
 * The coordinator writes a slot's fields (struct shm_slot_sampling) into
 * the shard object before the dispatch that brings the slot's request.
 * That memory is writable by this process, model plugin included, so the
 * worker copies an entry once per request (generation), checks it like a
 * request's fields (sampling_params_validate()), and from then on reads
 * only its copy: a stray write to the table cannot change a request
 * half-way through, and a step never reads a half-written entry.
 */
#ifndef DYNBATCH_WORKER_SAMPLING_H
#define DYNBATCH_WORKER_SAMPLING_H

#include <stdbool.h>
#include <stdint.h>

#include "grammar/grammar.h"
#include "grammar/grammar_pool.h"
#include "grammar/token_mask.h"

/* Grammars kept compiled, with their warm mask caches, when no slot
 * holds them (grammar_pool.h). */
#define WORKER_GRAMMARS_IDLE 8
#include "sampling/sampler.h"
#include "ipc/shm_segment.h"

/*
 * One slot's fields, as the worker uses them: small, since every row of
 * every step looks its slot's up (a greedy row reads only generation and
 * needs_logits); the bias entries, rare, live apart (struct
 * worker_sampling).
 */
struct worker_slot_sampling {
	uint32_t generation;	/* the request they are for (0: none yet) */
	bool valid;		/* the entry matched and passed the checks */
	bool needs_logits;	/* false: greedy, no logprobs */
	uint32_t n_prompt;	/* the k-th generated token sits at n_prompt + k */
	uint32_t choice;
	bool no_spec;		/* the request asked for no speculation */
	struct sampling_params params;	/* bias points into the slot's
					 * entries of worker_sampling.bias */
	/* the request's grammar (docs/DESIGN.md 2.8), compiled from our
	 * copy of the slot's entry (the runner follows it along the row);
	 * NULL: unconstrained */
	const struct grammar_pool_entry *grammar;
	bool grammar_bad;		/* the entry could not be compiled (or
					 * the vocabulary table is damaged):
					 * the row is refused */
};

/* Every slot of the shard. */
struct worker_sampling {
	struct worker_slot_sampling *slots;	/* shard_capacity */
	struct sampling_bias *bias;	/* shard_capacity x SAMPLER_MAX_BIAS,
					 * touched only by requests with bias */
	uint32_t n_slots;
	/* the vocabulary's bytes for grammar masks, built from the shared
	 * table on the first constrained request */
	struct grammar_vocab *vocab;
	struct grammar_pool *pool;	/* the compiled grammars, by source */
	bool vocab_failed;		/* the table was damaged or missing */
};

/* 0 or -ENOMEM (nothing allocated). */
int worker_sampling_init(struct worker_sampling *ws, uint32_t n_slots);
void worker_sampling_free(struct worker_sampling *ws);

/*
 * The fields of slot (local index local in the shard) for generation,
 * copied from the shard's table on the first call for that generation.
 * Never NULL; ->valid false when the table held another generation or
 * values that fail the checks (the row is then refused).  A slot whose
 * request has a grammar gets ->grammar (or ->grammar_bad).
 */
const struct worker_slot_sampling *
worker_sampling_load(struct worker_sampling *ws, const struct shm_segment *seg,
		     uint32_t slot, uint32_t local, uint32_t generation);

/* Inline: every row of every step asks, and nearly always hits. */
static inline const struct worker_slot_sampling *
worker_sampling_get(struct worker_sampling *ws, const struct shm_segment *seg,
		    uint32_t slot, uint32_t local, uint32_t generation)
{
	const struct worker_slot_sampling *c = &ws->slots[local];

	return c->generation == generation ? c :
	       worker_sampling_load(ws, seg, slot, local, generation);
}

#endif /* DYNBATCH_WORKER_SAMPLING_H */
