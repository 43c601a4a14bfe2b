/*
 * runner_grammar.c - see runner_grammar.h.
 */
#include "model/runner_grammar.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

const uint64_t runner_grammar_failed[1];

void runner_grammar_init(struct runner_grammar *g, uint32_t n_slots,
			 uint32_t vocab)
{
	memset(g, 0, sizeof(*g));
	g->n_slots = n_slots;
	g->words = grammar_mask_words(vocab);
}

void runner_grammar_free(struct runner_grammar *g)
{
	for (uint32_t s = 0; g->seq && s < g->n_slots; s++)
		grammar_seq_destroy(g->seq[s]);
	free(g->seq);
	free(g->of);
	free(g->generation);
	free(g->masks);
	free(g->allowed);
	memset(g, 0, sizeof(*g));
}

void runner_grammar_drop(struct runner_grammar *g, uint32_t slot)
{
	if (g->seq && g->seq[slot]) {
		grammar_seq_destroy(g->seq[slot]);
		g->seq[slot] = NULL;
	}
}

/* The per-slot arrays, at the first constrained row.  0 or -ENOMEM. */
static int runner_grammar_alloc(struct runner_grammar *g)
{
	if (g->seq)
		return 0;
	g->seq = calloc(g->n_slots, sizeof(*g->seq));
	g->of = calloc(g->n_slots, sizeof(*g->of));
	g->generation = calloc(g->n_slots, sizeof(*g->generation));
	/* calloc: only a constrained slot's pages are touched */
	g->masks = calloc((size_t)g->n_slots * g->words, sizeof(*g->masks));
	if (!g->seq || !g->of || !g->generation || !g->masks) {
		free(g->seq);
		free(g->of);
		free(g->generation);
		free(g->masks);
		g->seq = NULL;
		return -ENOMEM;
	}
	return 0;
}

const uint64_t *runner_grammar_row(struct runner_grammar *g, uint32_t slot,
				   uint32_t generation,
				   const struct grammar *grammar,
				   struct grammar_mask_cache *cache,
				   const int32_t *tokens, uint32_t n_tokens,
				   uint32_t n_prompt)
{
	uint64_t *mask;
	int ret = -EINVAL;	/* a row shorter than its prompt */

	if (!grammar) {	/* and a matcher left from an earlier request goes */
		if (g->allowed)
			g->allowed[slot] = NULL;
		runner_grammar_drop(g, slot);
		return NULL;
	}
	if (!g->allowed) {
		g->allowed = calloc(g->n_slots, sizeof(*g->allowed));
		if (!g->allowed)
			return runner_grammar_failed;	/* cannot even note it */
	}
	g->allowed[slot] = runner_grammar_failed;
	if (!g->vocab) {
		LOG(LOG_WARN, "slot %u: a grammar, but no vocabulary", slot);
		return runner_grammar_failed;
	}
	if (runner_grammar_alloc(g))
		return runner_grammar_failed;
	/* a new request (or another grammar) starts from the root */
	if (g->seq[slot] && (g->generation[slot] != generation ||
			     g->of[slot] != grammar))
		runner_grammar_drop(g, slot);
	if (!g->seq[slot]) {
		g->seq[slot] = cache ? grammar_seq_create_shared(grammar, g->vocab, cache) :
			       grammar_seq_create(grammar, g->vocab,
						  RUNNER_GRAMMAR_CACHE_BYTES);
		if (!g->seq[slot])
			return runner_grammar_failed;
		g->generation[slot] = generation;
		g->of[slot] = grammar;
	}
	mask = g->masks + (size_t)slot * g->words;
	if (n_tokens >= n_prompt)
		ret = grammar_seq_sync(g->seq[slot], tokens + n_prompt,
				       n_tokens - n_prompt);
	if (!ret)
		ret = grammar_seq_mask(g->seq[slot], mask);
	if (ret) {
		LOG(LOG_WARN, "slot %u: the grammar cannot follow the row (%s)",
		    slot, strerror(-ret));
		return runner_grammar_failed;
	}
	g->allowed[slot] = mask;
	return mask;
}
