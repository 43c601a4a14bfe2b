/*
 * model_runner.c - one engine step of a model; see model_runner.h.
 *
 * NOTES ON THE DESIGN
 *
 * The runner is the only place that decides what a stateful model may
 * take from its own state, so every rule of docs/DESIGN.md 2.2 is here:
 * the state of a slot is vouched for only while the same request
 * (generation) keeps the slot, nothing said to forget it, and the prefix
 * is at least as long as what the model consumed.  The worker's prefix
 * never changes below what the model consumed while these hold: tokens
 * are only appended, by the worker itself, and a reset (which rewinds a
 * row to the coordinator's committed length) comes with forget_all().
 *
 * A row whose whole prefix is consumed but that still wants a token (a
 * step that failed after the model consumed, say) re-consumes its last
 * token: the model overwrites that position with the same state.
 *
 * The logits are one row of vocab floats per output row, preallocated
 * for every slot (calloc: pages are touched only as rows use them).
 */
#include "model/model_runner.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dynbatch/model.h"
#include "model/kv_pool.h"
#include "model/model_loader.h"
#include "model/runner_grammar.h"
#include "spec/spec.h"
#include "util/clock.h"

struct runner_slot {
	uint32_t generation;	/* the request whose state the model holds */
	uint32_t consumed;	/* tokens of it the model holds (0: none) */
	bool kept;		/* scratch of model_runner_keep() */
	uint32_t pace_generation;	/* the request pace is about */
	struct spec_pace pace;	/* its guesses' record (spec.h) */
};

/* What one row does in the step being planned. */
struct runner_plan {
	uint32_t n_cached;
	uint32_t remaining;	/* tokens left to consume after n_cached */
	uint32_t consume;	/* tokens consumed in this step */
};

struct model_runner {
	struct model *model;
	bool stateful;
	uint32_t n_slots;
	uint32_t max_context;
	uint32_t vocab;
	struct runner_slot *slots;
	/* per-step scratch, n_slots entries each */
	struct runner_plan *plan;
	struct dynbatch_model_row *mrows;
	struct dynbatch_paged_row *prows;	/* paged: the same with tables */
	bool paged;
	uint32_t block_tokens;	/* paged: positions per block */
	uint32_t *mrow_of;	/* row -> its model row, or UINT32_MAX */
	uint32_t *refusals;
	float *logits;		/* n_slots x vocab */
	const int32_t **prefixes;	/* token models */
	uint32_t *lengths;
	int32_t *next_tokens;
	uint32_t *logit_rows;	/* token models: rows that sample */
	struct sampler *sampler;
	bool has_logits;	/* token models: logits() for sampled rows */
	/* speculation (model_runner_set_spec(); docs/DESIGN.md 2.7) */
	struct spec_config spec;
	uint32_t max_emit;	/* 1 + the most guesses a row makes */
	uint32_t *n_draft;	/* per step row: its guesses this step */
	int32_t *drafts;	/* per step row: SPEC_MAX_DRAFT guesses */
	int32_t *seq;		/* per step row: prefix + guesses, for the
				 * model (max_context + SPEC_MAX_DRAFT) */
	struct runner_spec_counts counts;
	struct runner_grammar grammar;	/* rows with a grammar (DESIGN 2.8) */
};

static struct model_runner *runner_create(struct model *m, uint32_t n_slots,
					  uint32_t max_context,
					  const struct kv_pool *pool,
					  char *err, size_t err_len)
{
	struct model_runner *r = calloc(1, sizeof(*r));
	int ret;

	if (!r)
		goto oom;
	r->model = m;
	r->stateful = model_is_stateful(m);
	r->n_slots = n_slots;
	r->max_context = max_context;
	r->vocab = model_vocab(m);
	runner_grammar_init(&r->grammar, n_slots, r->vocab);
	r->slots = calloc(n_slots, sizeof(*r->slots));
	r->prefixes = calloc(n_slots, sizeof(*r->prefixes));
	r->lengths = calloc(n_slots, sizeof(*r->lengths));
	r->next_tokens = calloc(n_slots, sizeof(*r->next_tokens));
	r->has_logits = model_has_logits(m);
	r->max_emit = 1;
	r->sampler = sampler_create(r->vocab);
	if (!r->slots || !r->prefixes || !r->lengths || !r->next_tokens ||
	    !r->sampler)
		goto oom;
	if (!r->stateful) {
		if (!r->has_logits)
			return r;
		/* rows that sample: their logits (pages touched as used) */
		r->logit_rows = calloc(n_slots, sizeof(*r->logit_rows));
		r->logits = calloc((size_t)n_slots * r->vocab, sizeof(*r->logits));
		if (!r->logit_rows || !r->logits)
			goto oom;
		return r;
	}
	r->plan = calloc(n_slots, sizeof(*r->plan));
	r->mrows = calloc(n_slots, sizeof(*r->mrows));
	r->mrow_of = calloc(n_slots, sizeof(*r->mrow_of));
	r->refusals = calloc(n_slots, sizeof(*r->refusals));
	r->logits = calloc((size_t)n_slots * r->vocab, sizeof(*r->logits));
	if (!r->plan || !r->mrows || !r->mrow_of || !r->refusals ||
	    !r->logits)
		goto oom;
	if (pool) {
		r->paged = true;
		r->block_tokens = pool->block_tokens;
		r->prows = calloc(n_slots, sizeof(*r->prows));
		if (!r->prows)
			goto oom;
		ret = model_bind_paged(m, pool->base, pool->n_blocks,
				       pool->block_tokens, max_context, n_slots,
				       err, err_len);
	} else {
		ret = model_bind(m, n_slots, max_context, err, err_len);
	}
	if (ret) {
		model_runner_destroy(r);
		return NULL;
	}
	return r;
oom:
	snprintf(err, err_len, "out of memory for the model runner (%u slots)",
		 n_slots);
	model_runner_destroy(r);
	return NULL;
}

struct model_runner *model_runner_create(struct model *m, uint32_t n_slots,
					 uint32_t max_context, char *err,
					 size_t err_len)
{
	return runner_create(m, n_slots, max_context, NULL, err, err_len);
}

struct model_runner *model_runner_create_paged(struct model *m, uint32_t n_slots,
					       uint32_t max_context,
					       const struct kv_pool *pool,
					       char *err, size_t err_len)
{
	if (!model_is_paged(m) || !pool || !pool->base) {
		snprintf(err, err_len, "the model is not paged, or no KV pool");
		return NULL;
	}
	return runner_create(m, n_slots, max_context, pool, err, err_len);
}

void model_runner_destroy(struct model_runner *r)
{
	if (!r)
		return;
	free(r->slots);
	free(r->plan);
	free(r->mrows);
	free(r->prows);
	free(r->mrow_of);
	free(r->refusals);
	free(r->logits);
	free(r->prefixes);
	free(r->lengths);
	free(r->next_tokens);
	free(r->logit_rows);
	free(r->n_draft);
	free(r->drafts);
	free(r->seq);
	sampler_destroy(r->sampler);
	runner_grammar_free(&r->grammar);
	free(r);
}

/* calloc'd scratch resized to n elements of size sz (old contents not
 * kept).  0 or -ENOMEM, with *p left as it was. */
static int runner_resize(void *p, size_t n, size_t sz)
{
	void **pp = p, *q = calloc(n, sz);

	if (!q)
		return -ENOMEM;
	free(*pp);
	*pp = q;
	return 0;
}

uint32_t model_runner_set_spec(struct model_runner *r,
			       const struct spec_config *cfg)
{
	uint32_t k = cfg->mode == SPEC_OFF ? 0 : cfg->max_draft;
	size_t n = r->n_slots, emit;

	if (k > SPEC_MAX_DRAFT)
		k = SPEC_MAX_DRAFT;
	/* a stateful model verifies a row's guesses in its own step */
	if (r->stateful && k + 1 > model_max_outputs(r->model))
		k = model_max_outputs(r->model) - 1;
	/* a token model without logits() cannot check a sampled guess, but
	 * greedy rows still can: its next() gives every entry a token */
	emit = (size_t)k + 1;
	if (emit > r->max_emit) {
		/* the buffers that hold a step's outputs grow with it */
		if (runner_resize(&r->logits, n * emit * r->vocab, sizeof(float)) ||
		    runner_resize(&r->prefixes, n * emit, sizeof(*r->prefixes)) ||
		    runner_resize(&r->lengths, n * emit, sizeof(*r->lengths)) ||
		    runner_resize(&r->next_tokens, n * emit, sizeof(*r->next_tokens)) ||
		    (r->logit_rows &&
		     runner_resize(&r->logit_rows, n * emit, sizeof(*r->logit_rows))) ||
		    runner_resize(&r->n_draft, n, sizeof(*r->n_draft)) ||
		    runner_resize(&r->drafts, n * SPEC_MAX_DRAFT, sizeof(*r->drafts)) ||
		    runner_resize(&r->seq, n * ((size_t)r->max_context + SPEC_MAX_DRAFT),
				  sizeof(*r->seq)))
			k = 0;	/* out of memory: run without, as before */
		else
			r->max_emit = (uint32_t)emit;
	}
	if (k + 1 > r->max_emit)
		k = r->max_emit - 1;
	r->spec = *cfg;
	r->spec.max_draft = k;
	if (!k)
		r->spec.mode = SPEC_OFF;
	return k + 1;
}

uint32_t model_runner_max_emit(const struct model_runner *r)
{
	return r->spec.mode == SPEC_OFF ? 1 : r->spec.max_draft + 1;
}

struct runner_spec_counts model_runner_spec_counts(const struct model_runner *r)
{
	return r->counts;
}

static void runner_drop(struct model_runner *r, uint32_t slot)
{
	/* a paged model keeps nothing per slot: its blocks are the
	 * coordinator's to reuse */
	if (r->slots[slot].consumed && !r->paged)
		model_release(r->model, slot);
	r->slots[slot].consumed = 0;
	runner_grammar_drop(&r->grammar, slot);
}

/* A refused row's request ends: whatever the model built for it in the
 * step goes too (a paged model's blocks are the coordinator's). */
static void runner_refused(struct model_runner *r, uint32_t slot)
{
	if (!r->paged)
		model_release(r->model, slot);
	r->slots[slot].consumed = 0;
	runner_grammar_drop(&r->grammar, slot);
}

void model_runner_forget_all(struct model_runner *r)
{
	if (!r->stateful)
		return;
	for (uint32_t s = 0; s < r->n_slots; s++)
		runner_drop(r, s);
}

void model_runner_keep(struct model_runner *r, uint32_t n,
		       const struct runner_row *rows)
{
	if (!r->stateful)
		return;
	for (uint32_t i = 0; i < n; i++)
		if (rows[i].slot < r->n_slots &&
		    r->slots[rows[i].slot].generation == rows[i].generation)
			r->slots[rows[i].slot].kept = true;
	for (uint32_t s = 0; s < r->n_slots; s++) {
		if (!r->slots[s].kept)
			runner_drop(r, s);
		r->slots[s].kept = false;
	}
}

/* Set the logits of the tokens allowed[] leaves out to -inf; how many
 * tokens it allows. */
static uint32_t runner_mask(float *logits, const uint64_t *allowed,
			    uint32_t vocab)
{
	uint32_t n = 0;

	for (uint32_t t = 0; t < vocab; t++) {
		if (allowed[t / 64] >> (t % 64) & 1)
			n++;
		else
			logits[t] = -INFINITY;
	}
	return n;
}

/* The greedy choice: the largest logit, the lowest id on ties.  -EDOM
 * for a NaN (a model that computed garbage fails the step). */
static int runner_argmax(const float *logits, uint32_t vocab, int32_t *token)
{
	uint32_t best = 0;

	for (uint32_t t = 0; t < vocab; t++) {
		if (isnan(logits[t]))
			return -EDOM;
		if (logits[t] > logits[best])
			best = t;
	}
	*token = (int32_t)best;
	return 0;
}

/*
 * The token of a row that has its logits: greedy (no sampling fields)
 * the argmax, else the sampler's draw.  0 with results[i] set (a row
 * whose every token is banned is refused), or -EDOM for NaN or +inf
 * logits: the step fails.
 */
static int runner_pick(struct model_runner *r, const struct runner_row *row,
		       float *logits, uint32_t j, const int32_t *tokens,
		       struct runner_result *res)
{
	struct sampler_result tmp, *out = row->sampled ? row->sampled + j : &tmp;
	struct sampling_history hist;
	const uint64_t *allowed;
	int ret;

	*res = (struct runner_result){ .token = -1, .outcome = RUNNER_TOKEN };
	/* a grammar's mask comes first, then every sampling field (DESIGN
	 * 2.8); in place: the buffer is ours, and this row's alone */
	allowed = r->grammar.allowed && row->grammar ?
		  r->grammar.allowed[row->slot] : NULL;
	if (allowed == runner_grammar_failed ||
	    (allowed && !runner_mask(logits, allowed, r->vocab))) {
		res->outcome = RUNNER_REFUSED;
		res->detail = allowed == runner_grammar_failed ?
			      RUNNER_REFUSE_GRAMMAR : RUNNER_REFUSE_GRAMMAR_NONE;
		return 0;
	}
	if (!row->sampling)
		return runner_argmax(logits, r->vocab, &res->token);
	/* the row's own prefix (with the j guesses before position j):
	 * its result depends on no other row; position j past the row's
	 * next is the draw of its k + j-th token */
	hist = (struct sampling_history){ tokens, row->n_tokens + j,
					  row->n_prompt };
	ret = sampler_sample_row(r->sampler, logits, row->sampling, &hist,
				 row->k + j, row->choice, out);
	if (ret == -EDOM)
		return ret;
	if (ret) {
		res->outcome = RUNNER_REFUSED;
		res->detail = ret != -ENOENT ? RUNNER_REFUSE_SAMPLING :
			      allowed ? RUNNER_REFUSE_GRAMMAR_NONE :
			      RUNNER_REFUSE_ALL_BANNED;
		return 0;
	}
	res->token = out->token;
	return 0;
}

/*
 * The guesses row i makes this step (speculation on, the row's next
 * token due): at most what its pace allows, what its room and the
 * context leave after the token it is owed, and cap (what its block
 * table holds, for a paged row).  They go to r->drafts, and the prefix
 * with them to r->seq, which the model reads instead of the prefix.
 */
static uint32_t runner_propose(struct model_runner *r, uint32_t i,
			       const struct runner_row *row, uint64_t cap)
{
	struct runner_slot *st = &r->slots[row->slot];
	uint32_t room = row->room ? row->room : 1, a;
	int32_t *d, *seq;
	uint64_t t0;

	/* a grammar's mask is for the row's next position only */
	if (r->spec.mode == SPEC_OFF || row->no_spec || row->grammar ||
	    !row->n_tokens)
		return 0;
	if (st->pace_generation != row->generation) {
		st->pace = (struct spec_pace){ 0 };
		st->pace_generation = row->generation;
	}
	if (cap > room - 1)
		cap = room - 1;
	if (cap > r->max_context - row->n_tokens)
		cap = r->max_context - row->n_tokens;
	if (!cap)
		return 0;
	a = spec_pace_allow(&st->pace, r->spec.max_draft);
	if (a > cap)
		a = (uint32_t)cap;
	if (!a)
		return 0;
	d = r->drafts + (size_t)i * SPEC_MAX_DRAFT;	/* NULL when spec is off */
	t0 = clock_now_ns();
	a = spec_ngram_propose(row->tokens, row->n_tokens, r->spec.ngram_min,
			       r->spec.ngram_max, a, d);
	r->counts.draft_ns += clock_now_ns() - t0;
	if (!a)
		return 0;
	seq = r->seq + (size_t)i * (r->max_context + SPEC_MAX_DRAFT);
	memcpy(seq, row->tokens, (size_t)row->n_tokens * sizeof(*seq));
	memcpy(seq + row->n_tokens, d, (size_t)a * sizeof(*seq));
	return a;
}

/*
 * The accept rule "exact" (docs/DESIGN.md 2.7) for a row that guessed
 * d[0 .. a): the token of each position is picked exactly as decoding
 * without guesses picks it (the argmax, or the draw of the same (seed,
 * k + j, choice)), from logits row j (or, for a token model's greedy
 * row, taken from tokens[j]); seq is the row's prefix followed by the
 * guesses (the history its penalties count); a guess is taken iff it
 * equals that pick;
 * the first that differs is replaced by the pick, and a row whose every
 * guess holds gets the pick after them as well.  A refusal at a later
 * position ends the run before it (the next step meets it at its own
 * position).  *matched: the guesses taken.  0, or -EDOM (NaN logits).
 */
static int runner_accept(struct model_runner *r, const struct runner_row *row,
			 uint32_t a, const int32_t *d, const int32_t *seq,
			 float *logits, const int32_t *tokens,
			 struct runner_result *res, uint32_t *matched)
{
	struct runner_result one;
	int ret;

	*matched = 0;
	for (uint32_t j = 0; j <= a; j++) {
		if (logits) {
			ret = runner_pick(r, row, logits + (size_t)j * r->vocab, j,
					  seq, &one);
			if (ret)
				return ret;
		} else {
			one = (struct runner_result){ .token = tokens[j],
						      .outcome = RUNNER_TOKEN };
		}
		if (one.outcome != RUNNER_TOKEN) {
			if (!j)
				*res = one;
			return 0;
		}
		if (!j)
			*res = one;
		else
			res->more[res->n_more++] = one.token;
		if (j == a || one.token != d[j])
			break;
		(*matched)++;
	}
	return 0;
}

/* Row i's tokens as the model reads them: the prefix, with its a
 * guesses after it in r->seq when it made any. */
static const int32_t *runner_seq(const struct model_runner *r, uint32_t i,
				 const struct runner_row *row, uint32_t a)
{
	return a ? r->seq + (size_t)i * (r->max_context + SPEC_MAX_DRAFT) :
		   row->tokens;
}

/* Count a row's verified guesses and let them set its pace. */
static void runner_spec_note(struct model_runner *r, const struct runner_row *row,
			     uint32_t a, uint32_t matched,
			     const struct runner_result *res)
{
	if (!a)
		return;
	r->counts.drafted += a;
	r->counts.accepted += matched;
	r->counts.emitted += res->outcome == RUNNER_TOKEN ? 1 + res->n_more : 0;
	r->counts.verify_rows++;
	spec_pace_update(&r->slots[row->slot].pace, r->spec.max_draft, a, matched);
}

/*
 * A token model: next() for every row (greedy rows take its token), and
 * logits() for the rows that sample, which then draw from them.
 */
static int runner_step_tokens(struct model_runner *r, uint32_t n_rows,
			      const struct runner_row *rows,
			      struct runner_result *results)
{
	uint32_t n_entries = 0, n_logits = 0, matched;
	uint64_t t0;
	int ret;

	/* each row, then each of its guessed prefixes, as an entry */
	for (uint32_t i = 0; i < n_rows; i++) {
		uint32_t a = rows[i].slot < r->n_slots &&
			     rows[i].n_tokens <= r->max_context ?
			     runner_propose(r, i, &rows[i], SPEC_MAX_DRAFT) : 0;
		const int32_t *seq = runner_seq(r, i, &rows[i], a);

		if (r->n_draft)
			r->n_draft[i] = a;
		for (uint32_t j = 0; j <= a; j++) {
			r->prefixes[n_entries] = seq;
			r->lengths[n_entries++] = rows[i].n_tokens + j;
		}
	}
	t0 = clock_now_ns();
	ret = model_next(r->model, n_entries, r->prefixes, r->lengths, r->next_tokens);
	if (n_entries > n_rows) {	/* some row guessed */
		r->counts.verify_ns += clock_now_ns() - t0;
		r->counts.steps++;
	}
	if (ret)
		return ret;
	for (uint32_t i = 0, e = 0; i < n_rows; i++) {
		uint32_t a = r->n_draft ? r->n_draft[i] : 0;
		const int32_t *d = r->drafts ? r->drafts + (size_t)i * SPEC_MAX_DRAFT : NULL;

		if (!rows[i].sampling) {
			runner_accept(r, &rows[i], a, d, NULL, NULL,
				      r->next_tokens + e, &results[i], &matched);
			runner_spec_note(r, &rows[i], a, matched, &results[i]);
			e += a + 1;
			continue;
		}
		e += a + 1;
		if (!r->has_logits) {
			results[i] = (struct runner_result){ .token = -1,
				.outcome = RUNNER_REFUSED,
				.detail = RUNNER_REFUSE_NO_LOGITS };
			continue;
		}
	}
	/* the rows that sample: their entries compacted to the front, for
	 * logits() to see only these */
	for (uint32_t i = 0; i < n_rows; i++) {
		uint32_t a = r->n_draft ? r->n_draft[i] : 0;
		const int32_t *seq = runner_seq(r, i, &rows[i], a);

		if (!rows[i].sampling || !r->has_logits)
			continue;
		for (uint32_t j = 0; j <= a; j++) {
			r->prefixes[n_logits] = seq;
			r->lengths[n_logits++] = rows[i].n_tokens + j;
		}
	}
	if (!n_logits)
		return 0;
	ret = model_logits(r->model, n_logits, r->prefixes, r->lengths, r->logits);
	if (ret)
		return ret;
	for (uint32_t i = 0, base = 0; i < n_rows; i++) {
		uint32_t a = r->n_draft ? r->n_draft[i] : 0;
		const int32_t *d = r->drafts ? r->drafts + (size_t)i * SPEC_MAX_DRAFT : NULL;

		if (!rows[i].sampling || !r->has_logits)
			continue;
		ret = runner_accept(r, &rows[i], a, d, runner_seq(r, i, &rows[i], a),
				    r->logits + (size_t)base * r->vocab, NULL,
				    &results[i], &matched);
		if (ret)
			return ret;
		runner_spec_note(r, &rows[i], a, matched, &results[i]);
		base += a + 1;
	}
	return 0;
}

/*
 * Plan each row: what the model may take from its state (n_cached) and
 * what is left to consume.  A new request in a slot, or a prefix shorter
 * than what the model consumed, voids the slot's state.
 */
static int runner_plan_rows(struct model_runner *r, uint32_t n_rows,
			    const struct runner_row *rows)
{
	for (uint32_t i = 0; i < n_rows; i++) {
		const struct runner_row *row = &rows[i];
		struct runner_plan *p = &r->plan[i];
		struct runner_slot *st;

		if (row->slot >= r->n_slots || row->n_tokens > r->max_context)
			return -EINVAL;
		st = &r->slots[row->slot];
		if (st->generation != row->generation) {
			runner_drop(r, row->slot);
			st->generation = row->generation;
			/* paged: what the coordinator vouches its blocks hold
			 * (a prefix hit, a fork), never all of the prefix: the
			 * last token's logits are computed */
			if (r->paged)
				st->consumed = row->kv_cached < row->n_tokens ?
					       row->kv_cached : 0;
		}
		if (st->consumed > row->n_tokens)
			runner_drop(r, row->slot);
		p->n_cached = st->consumed;
		if (p->n_cached && p->n_cached == row->n_tokens)
			p->n_cached--;	/* see NOTES: re-consume the last one */
		p->remaining = row->n_tokens - p->n_cached;
		p->consume = 0;
	}
	return 0;
}

/* Follow the scheduler's plan: each row consumes what it has left, at
 * most its step_consume (sched/step_plan.h decides it). */
static void runner_follow_plan(struct model_runner *r, uint32_t n_rows,
			       const struct runner_row *rows)
{
	for (uint32_t i = 0; i < n_rows; i++) {
		struct runner_plan *p = &r->plan[i];

		p->consume = p->remaining < rows[i].step_consume ? p->remaining :
			     rows[i].step_consume;
	}
}

/* The model's step over r->mrows[0 .. n_model): paged, each with its
 * row's block table. */
static int runner_call_model(struct model_runner *r, uint32_t n_model,
			     const struct runner_row *rows)
{
	if (!r->paged)
		return model_step(r->model, n_model, r->mrows, r->logits,
				  r->refusals);
	for (uint32_t i = 0, k = 0; k < n_model; i++) {
		if (r->mrow_of[i] == UINT32_MAX)
			continue;
		r->prows[k] = (struct dynbatch_paged_row){
			.row = r->mrows[k], .blocks = rows[i].blocks,
			.n_blocks = rows[i].n_blocks };
		k++;
	}
	return model_step_paged(r->model, n_model, r->prows, r->logits,
				r->refusals);
}

static int runner_step_stateful(struct model_runner *r, uint32_t n_rows,
				const struct runner_row *rows,
				struct runner_result *results)
{
	uint32_t n_model = 0, n_out = 0, a, matched;
	bool guessed = false;
	uint64_t t0;
	int ret;

	ret = runner_plan_rows(r, n_rows, rows);
	if (ret)
		return ret;
	runner_follow_plan(r, n_rows, rows);
	for (uint32_t i = 0; i < n_rows; i++) {
		const struct runner_plan *p = &r->plan[i];
		bool done = p->consume == p->remaining;
		uint64_t held = (uint64_t)rows[i].n_blocks * r->block_tokens;

		a = 0;
		r->mrow_of[i] = UINT32_MAX;
		if (r->n_draft)
			r->n_draft[i] = 0;
		if (!p->consume && !(done && rows[i].n_tokens == 0))
			continue;	/* no budget left for it this step */
		/* only a decoding row guesses (its prefix all consumed but
		 * the last token); a paged one within its table */
		if (done && p->remaining == 1)
			a = runner_propose(r, i, &rows[i], !r->paged ? SPEC_MAX_DRAFT :
					   held > rows[i].n_tokens ?
					   held - rows[i].n_tokens : 0);
		if (r->n_draft)
			r->n_draft[i] = a;
		guessed |= a > 0;
		r->mrow_of[i] = n_model;
		r->mrows[n_model++] = (struct dynbatch_model_row){
			.slot = rows[i].slot, .generation = rows[i].generation,
			.tokens = a ? r->seq + (size_t)i * (r->max_context + SPEC_MAX_DRAFT) :
				      rows[i].tokens,
			.n_tokens = rows[i].n_tokens + a,
			.n_cached = p->n_cached, .n_consume = p->consume + a,
			.want_output = done ? 1 + a : 0 };
	}
	memset(r->refusals, 0, n_model * sizeof(*r->refusals));
	t0 = guessed ? clock_now_ns() : 0;
	ret = n_model ? runner_call_model(r, n_model, rows) : 0;
	if (guessed) {
		r->counts.verify_ns += clock_now_ns() - t0;
		r->counts.steps++;
	}
	if (ret) {	/* the model's state of these rows is unknown now */
		model_runner_forget_all(r);
		return ret;
	}
	for (uint32_t i = 0; i < n_rows; i++) {
		uint32_t k = r->mrow_of[i];
		struct runner_slot *st = &r->slots[rows[i].slot];
		const struct dynbatch_model_row *mr;

		if (k == UINT32_MAX) {
			results[i] = (struct runner_result){
				.token = -1, .outcome = RUNNER_PREFILL,
				.detail = st->consumed };
			continue;
		}
		mr = &r->mrows[k];
		if (r->refusals[k]) {
			/* the engine ends the request: nothing to keep */
			results[i] = (struct runner_result){
				.token = -1, .outcome = RUNNER_REFUSED,
				.detail = r->refusals[k] };
			runner_refused(r, rows[i].slot);
			n_out += mr->want_output;
			continue;
		}
		st->consumed = mr->n_cached + mr->n_consume;
		if (!mr->want_output) {
			results[i] = (struct runner_result){
				.token = -1, .outcome = RUNNER_PREFILL,
				.detail = st->consumed };
			continue;
		}
		a = r->n_draft ? r->n_draft[i] : 0;
		ret = runner_accept(r, &rows[i], a,
				    a ? r->drafts + (size_t)i * SPEC_MAX_DRAFT : NULL,
				    mr->tokens, r->logits + (size_t)n_out * r->vocab,
				    NULL, &results[i], &matched);
		n_out += mr->want_output;
		if (ret) {
			model_runner_forget_all(r);
			return ret;
		}
		/* rolled back: the state after the guesses not taken is
		 * never vouched for, so the next step overwrites it */
		if (a)
			st->consumed = rows[i].n_tokens + matched;
		runner_spec_note(r, &rows[i], a, matched, &results[i]);
		if (results[i].outcome == RUNNER_REFUSED)
			runner_refused(r, rows[i].slot);
	}
	return 0;
}

void model_runner_set_grammar_vocab(struct model_runner *r,
				    const struct grammar_vocab *v)
{
	r->grammar.vocab = v;
}

int model_runner_step(struct model_runner *r, uint32_t n_rows,
		      const struct runner_row *rows,
		      struct runner_result *results)
{
	if (n_rows > r->n_slots)
		return -EINVAL;
	for (uint32_t i = 0; i < n_rows; i++)
		if (rows[i].grammar || r->grammar.allowed)
			runner_grammar_row(&r->grammar, rows[i].slot,
					   rows[i].generation, rows[i].grammar,
					   rows[i].grammar_cache, rows[i].tokens,
					   rows[i].n_tokens, rows[i].n_prompt);
	return r->stateful ? runner_step_stateful(r, n_rows, rows, results) :
			     runner_step_tokens(r, n_rows, rows, results);
}
