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

struct runner_slot {
	uint32_t generation;	/* the request whose state the model holds */
	uint32_t consumed;	/* tokens of it the model holds (0: none) */
	bool kept;		/* scratch of model_runner_keep() */
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
	uint32_t *mrow_of;	/* row -> its model row, or UINT32_MAX */
	uint32_t *refusals;
	float *logits;		/* n_slots x vocab */
	const int32_t **prefixes;	/* token models */
	uint32_t *lengths;
	int32_t *next_tokens;
	uint32_t *logit_rows;	/* token models: rows that sample */
	struct sampler *sampler;
	bool has_logits;	/* token models: logits() for sampled rows */
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
	r->slots = calloc(n_slots, sizeof(*r->slots));
	r->prefixes = calloc(n_slots, sizeof(*r->prefixes));
	r->lengths = calloc(n_slots, sizeof(*r->lengths));
	r->next_tokens = calloc(n_slots, sizeof(*r->next_tokens));
	r->has_logits = model_has_logits(m);
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
	sampler_destroy(r->sampler);
	free(r);
}

static void runner_drop(struct model_runner *r, uint32_t slot)
{
	/* a paged model keeps nothing per slot: its blocks are the
	 * coordinator's to reuse */
	if (r->slots[slot].consumed && !r->paged)
		model_release(r->model, slot);
	r->slots[slot].consumed = 0;
}

/* A refused row's request ends: whatever the model built for it in the
 * step goes too (a paged model's blocks are the coordinator's). */
static void runner_refused(struct model_runner *r, uint32_t slot)
{
	if (!r->paged)
		model_release(r->model, slot);
	r->slots[slot].consumed = 0;
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
		       const float *logits, struct runner_result *res)
{
	struct sampler_result tmp, *out = row->sampled ? row->sampled : &tmp;
	struct sampling_history hist;
	int ret;

	*res = (struct runner_result){ .token = -1, .outcome = RUNNER_TOKEN };
	if (!row->sampling)
		return runner_argmax(logits, r->vocab, &res->token);
	/* the row's own prefix: its result depends on no other row */
	hist = (struct sampling_history){ row->tokens, row->n_tokens,
					  row->n_prompt };
	ret = sampler_sample_row(r->sampler, logits, row->sampling, &hist,
				 row->k, row->choice, out);
	if (ret == -EDOM)
		return ret;
	if (ret) {
		res->outcome = RUNNER_REFUSED;
		res->detail = ret == -ENOENT ? RUNNER_REFUSE_ALL_BANNED :
			      RUNNER_REFUSE_SAMPLING;
		return 0;
	}
	res->token = out->token;
	return 0;
}

/*
 * A token model: next() for every row (greedy rows take its token), and
 * logits() for the rows that sample, which then draw from them.
 */
static int runner_step_tokens(struct model_runner *r, uint32_t n_rows,
			      const struct runner_row *rows,
			      struct runner_result *results)
{
	uint32_t n_logits = 0;
	int ret;

	for (uint32_t i = 0; i < n_rows; i++) {
		r->prefixes[i] = rows[i].tokens;
		r->lengths[i] = rows[i].n_tokens;
	}
	ret = model_next(r->model, n_rows, r->prefixes, r->lengths, r->next_tokens);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < n_rows; i++) {
		results[i] = (struct runner_result){ .token = r->next_tokens[i],
						     .outcome = RUNNER_TOKEN };
		if (!rows[i].sampling)
			continue;
		if (!r->has_logits) {
			results[i] = (struct runner_result){ .token = -1,
				.outcome = RUNNER_REFUSED,
				.detail = RUNNER_REFUSE_NO_LOGITS };
			continue;
		}
		/* compacted to the front: logits() sees only these rows */
		r->prefixes[n_logits] = rows[i].tokens;
		r->lengths[n_logits] = rows[i].n_tokens;
		r->logit_rows[n_logits++] = i;
	}
	if (!n_logits)
		return 0;
	ret = model_logits(r->model, n_logits, r->prefixes, r->lengths, r->logits);
	if (ret)
		return ret;
	for (uint32_t j = 0; j < n_logits; j++) {
		uint32_t i = r->logit_rows[j];

		ret = runner_pick(r, &rows[i], r->logits + (size_t)j * r->vocab,
				  &results[i]);
		if (ret)
			return ret;
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
	uint32_t n_model = 0, n_out = 0;
	int ret;

	ret = runner_plan_rows(r, n_rows, rows);
	if (ret)
		return ret;
	runner_follow_plan(r, n_rows, rows);
	for (uint32_t i = 0; i < n_rows; i++) {
		const struct runner_plan *p = &r->plan[i];
		bool done = p->consume == p->remaining;

		r->mrow_of[i] = UINT32_MAX;
		if (!p->consume && !(done && rows[i].n_tokens == 0))
			continue;	/* no budget left for it this step */
		r->mrow_of[i] = n_model;
		r->mrows[n_model++] = (struct dynbatch_model_row){
			.slot = rows[i].slot, .generation = rows[i].generation,
			.tokens = rows[i].tokens, .n_tokens = rows[i].n_tokens,
			.n_cached = p->n_cached, .n_consume = p->consume,
			.want_output = done };
	}
	memset(r->refusals, 0, n_model * sizeof(*r->refusals));
	ret = n_model ? runner_call_model(r, n_model, rows) : 0;
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
			if (mr->want_output)
				n_out++;
			continue;
		}
		st->consumed = mr->n_cached + mr->n_consume;
		if (!mr->want_output) {
			results[i] = (struct runner_result){
				.token = -1, .outcome = RUNNER_PREFILL,
				.detail = st->consumed };
			continue;
		}
		ret = runner_pick(r, &rows[i], r->logits + (size_t)n_out++ * r->vocab,
				  &results[i]);
		if (!ret && results[i].outcome == RUNNER_REFUSED)
			runner_refused(r, rows[i].slot);
		if (ret) {
			model_runner_forget_all(r);
			return ret;
		}
	}
	return 0;
}

int model_runner_step(struct model_runner *r, uint32_t n_rows,
		      const struct runner_row *rows,
		      struct runner_result *results)
{
	if (n_rows > r->n_slots)
		return -EINVAL;
	return r->stateful ? runner_step_stateful(r, n_rows, rows, results) :
			     runner_step_tokens(r, n_rows, rows, results);
}
