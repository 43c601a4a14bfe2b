/*
 * runner_grammar.h - the runner's side of structured output (docs/DESIGN.md
 * 2.8): for each slot whose row brings a grammar, a matcher kept in step
 * with the row's generated tokens, and the mask of the token it may take
 * next, which the runner applies to the logits before sampling.
 *
 * Part of the runner (model_runner.c embeds one): the worker and the
 * in-process step both go through it, so a grammar is followed the same
 * way wherever a request runs.
 */
#ifndef DYNBATCH_RUNNER_GRAMMAR_H
#define DYNBATCH_RUNNER_GRAMMAR_H

#include <stdint.h>

#include "grammar/grammar.h"
#include "grammar/grammar_seq.h"
#include "grammar/token_mask.h"

/* A mask cache per constrained slot (grammar_seq.h): a cap, filled as
 * states come (bench-grammar: the tables and automaton of a JSON schema
 * take up to 7 MB at 150K tokens). */
#define RUNNER_GRAMMAR_CACHE_BYTES (16u << 20)

struct runner_grammar {
	const struct grammar_vocab *vocab;	/* the tokens' bytes; NULL:
					 * rows with a grammar are refused */
	uint32_t n_slots;
	size_t words;			/* a mask's words */
	/* per slot, allocated at the first constrained row */
	struct grammar_seq **seq;	/* its matcher (NULL: none) */
	const struct grammar **of;	/* the grammar seq follows */
	uint32_t *generation;		/* the request seq is for */
	uint64_t *masks;		/* its mask for this step */
	/* per slot, this step: its mask, NULL (unconstrained) or
	 * runner_grammar_failed */
	const uint64_t **allowed;
};

/* The mask of a row whose grammar cannot be followed: it is refused. */
extern const uint64_t runner_grammar_failed[1];

void runner_grammar_init(struct runner_grammar *g, uint32_t n_slots,
			 uint32_t vocab);
void runner_grammar_free(struct runner_grammar *g);

/*
 * Slot's mask for a row of generation that brings grammar (NULL: none)
 * over tokens[n_prompt .. n_tokens), the tokens it generated: into
 * g->allowed[slot], and returned.  cache: the grammar's shared mask
 * cache (NULL: the slot's request gets one of its own).
 */
const uint64_t *runner_grammar_row(struct runner_grammar *g, uint32_t slot,
				   uint32_t generation,
				   const struct grammar *grammar,
				   struct grammar_mask_cache *cache,
				   const int32_t *tokens, uint32_t n_tokens,
				   uint32_t n_prompt);

/* Slot's request left the runner. */
void runner_grammar_drop(struct runner_grammar *g, uint32_t slot);

#endif /* DYNBATCH_RUNNER_GRAMMAR_H */
