/*
 * worker_sampling.c - see worker_sampling.h.
 */
#include "worker/worker_sampling.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "model/runner_grammar.h"
#include "util/log.h"

/* Let go of a slot's grammar (its generation is over); the pool keeps
 * it a while for the next request that brings the same one. */
static void worker_grammar_drop(struct worker_sampling *ws,
				struct worker_slot_sampling *c)
{
	grammar_pool_put(ws->pool, c->grammar);
	c->grammar = NULL;
}

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
	for (uint32_t i = 0; ws->slots && i < ws->n_slots; i++)
		worker_grammar_drop(ws, &ws->slots[i]);
	grammar_pool_destroy(ws->pool);
	ws->pool = NULL;
	grammar_vocab_destroy(ws->vocab);
	ws->vocab = NULL;
	free(ws->slots);
	free(ws->bias);
	ws->slots = NULL;
	ws->bias = NULL;
}

/*
 * The vocabulary from the shared table (the coordinator's tokenizer):
 * checked, since a bad table must refuse rows, not crash us.  NULL when
 * it is missing, damaged or memory ran out (logged).
 */
static struct grammar_vocab *worker_vocab_load(const struct shm_segment *seg)
{
	const struct shm_header *hdr = seg->hdr;
	const struct shm_vocab_table *t;
	const uint8_t **bytes = NULL;
	const uint8_t *base;
	uint32_t *lens = NULL, n;
	struct grammar_vocab *v = NULL;
	uint64_t room;

	if (!hdr->vocab_table_size) {
		LOG(LOG_WARN, "a grammar, but no vocabulary table");
		return NULL;
	}
	t = shm_vocab_table(seg);
	n = t->n_tokens;
	if (n != hdr->vocab || shm_vocab_table_bytes(n, 0) > hdr->vocab_table_size ||
	    t->n_ends > SHM_VOCAB_MAX_ENDS) {
		LOG(LOG_WARN, "vocabulary table: %u tokens (want %u), %u ends",
		    n, hdr->vocab, t->n_ends);
		return NULL;
	}
	base = (const uint8_t *)&t->off[n + 1];
	room = hdr->vocab_table_size - shm_vocab_table_bytes(n, 0);
	bytes = malloc((n ? n : 1) * sizeof(*bytes));
	lens = malloc((n ? n : 1) * sizeof(*lens));
	if (!bytes || !lens)
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		if (t->off[i] > t->off[i + 1] || t->off[i + 1] > room) {
			LOG(LOG_WARN, "vocabulary table: token %u's bytes out of "
			    "range", i);
			goto out;
		}
		bytes[i] = base + t->off[i];
		lens[i] = t->off[i + 1] - t->off[i];
	}
	/* ends out of range are left out by the vocabulary itself */
	v = grammar_vocab_create_ends(bytes, lens, n, t->ends, t->n_ends);
out:
	free(bytes);
	free(lens);
	return v;
}

/*
 * The slot's grammar, when its entry is for this generation and holds
 * one: our own copy of the source, compiled, with a matcher at the
 * start of the row's generated tokens.
 */
static void worker_grammar_load(struct worker_sampling *ws,
				struct worker_slot_sampling *c,
				const struct shm_segment *seg, uint32_t slot)
{
	const struct shm_slot_grammar *e;
	uint32_t gen, len;
	char *src, err[160];

	if (!seg->hdr->grammar_slot_bytes)
		return;
	e = shm_grammar_at(seg, slot);
	gen = e->generation;
	len = e->len;
	if (gen != c->generation || !len)
		return;
	c->grammar_bad = true;
	if (len > shm_grammar_source_max(seg->hdr) || !c->needs_logits) {
		LOG(LOG_WARN, "slot %u: grammar entry damaged (%u bytes)", slot, len);
		return;
	}
	if (!ws->vocab && !ws->vocab_failed) {
		ws->vocab = worker_vocab_load(seg);
		ws->pool = ws->vocab ? grammar_pool_create(seg->hdr->vocab,
					RUNNER_GRAMMAR_CACHE_BYTES,
					WORKER_GRAMMARS_IDLE) : NULL;
		ws->vocab_failed = !ws->pool;
	}
	if (!ws->pool)
		return;
	src = malloc(len);
	if (!src)
		return;
	memcpy(src, e->source, len);	/* one read: compile our copy */
	c->grammar = grammar_pool_get(ws->pool, src, len, err, sizeof(err));
	free(src);
	if (!c->grammar) {
		LOG(LOG_WARN, "slot %u: grammar refused: %s", slot, err);
		return;
	}
	c->grammar_bad = false;
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

	worker_grammar_drop(ws, c);
	worker_sampling_copy(c, ws->bias + (size_t)local * SAMPLER_MAX_BIAS,
			     seg, slot, generation);
	if (c->valid)
		worker_grammar_load(ws, c, seg, slot);
	return c;
}
