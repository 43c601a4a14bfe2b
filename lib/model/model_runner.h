/*
 * model_runner.h - one engine step of a model, for the worker and for the
 * in-process engine (--workers 0): which tokens each row consumes, what
 * the model may take from its own state, and which token each row gets.
 *
 * The caller hands over the rows it wants extended (each with its prefix
 * in place) and gets one outcome per row: a token (greedy: the argmax of
 * the model's logits, the lowest id on ties; or drawn by the row's
 * sampling fields, sampler.h), no token yet (the row
 * consumed a chunk of its prefix: chunked prefill), or a refusal.  A
 * token model (model.h) gives every row a token at every step.
 *
 * For a stateful model the runner keeps, per slot, which request
 * (generation) the model holds state for and how many of its tokens.  It
 * tells the model n_cached = 0 whenever it cannot vouch for that state:
 * a new request in the slot, model_runner_forget_all() (a reset, an
 * isolation run), or a prefix shorter than what was consumed.  A
 * replacement worker starts with a new runner, so with nothing.
 *
 * Step composition is not decided here: each row says how many of its
 * prefix tokens it may consume this step (step_consume), the scheduler's
 * plan under --step-tokens (sched/step_plan.h, docs/DESIGN.md 11.2), and
 * the runner consumes what the row has left up to that.  A row gets a
 * token only once its whole prefix is consumed; a row allowed 0 waits
 * (its result says no token yet, with what the model holds).
 */
#ifndef DYNBATCH_MODEL_RUNNER_H
#define DYNBATCH_MODEL_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "sampling/sampler.h"
#include "spec/spec.h"

struct grammar;
struct grammar_mask_cache;
struct grammar_vocab;
struct model;
struct model_runner;

/* One row the caller wants extended by one token. */
struct runner_row {
	uint32_t slot;		/* [0, n_slots) */
	uint32_t generation;	/* the slot's request (never 0) */
	const int32_t *tokens;	/* the prefix, read-only */
	uint32_t n_tokens;	/* its length */
	/* How the token is picked (sampler.h; validated by the caller).
	 * NULL: greedy, the model's own token (a token model) or the argmax
	 * of its logits, with no logprobs. */
	const struct sampling_params *sampling;
	/* the scheduler's plan: at most this many prefix tokens this step
	 * (STEP_PLAN_ALL = UINT32_MAX: all of them; 0: none) */
	uint32_t step_consume;
	uint32_t k;		/* the request's k-th generated token */
	/* tokens[0 .. n_prompt) is the prompt, the rest generated: the
	 * penalties' history (read only when sampling sets one) */
	uint32_t n_prompt;
	uint32_t choice;	/* of its n choices */
	/* sampling->logprobs: the token's logprob and alternatives go here;
	 * with speculation on (model_runner_set_spec()), an array of
	 * model_runner_max_emit() of them, one per token given */
	struct sampler_result *sampled;
	/* the most tokens the row may be given this step (its limit less
	 * its length); 0 counts as 1.  Speculation never guesses past it. */
	uint32_t room;
	bool no_spec;		/* the request asked for no speculation */
	/* the request's grammar (docs/DESIGN.md 2.8; the same pointer
	 * every step of its generation, living as long): the runner masks
	 * the logits to the tokens it allows next, before every sampling
	 * field (it needs sampling set, and model_runner_set_grammar_vocab());
	 * NULL: unconstrained.  A row with a grammar gets no guesses. */
	const struct grammar *grammar;
	/* a mask cache every row of that grammar shares (grammar_pool.h;
	 * lives as long as the grammar); NULL: the runner keeps one for
	 * the slot's request */
	struct grammar_mask_cache *grammar_cache;
	/* paged runners only: the row's block table (n_blocks entries,
	 * read-only, valid in the call) and the positions [0, kv_cached)
	 * its blocks hold for the request's first step in this runner */
	const uint32_t *blocks;
	uint32_t n_blocks;
	uint32_t kv_cached;
};

/* Refusals the runner itself makes (runner_result.detail), beside the
 * model's enum dynbatch_refusal. */
#define RUNNER_REFUSE_ALL_BANNED 100u	/* every token banned (bias, -inf) */
#define RUNNER_REFUSE_NO_LOGITS 101u	/* a token model without logits()
					 * got a row that samples */
#define RUNNER_REFUSE_SAMPLING 102u	/* the row's sampling fields are
					 * invalid (a worker read garbage) */
#define RUNNER_REFUSE_GRAMMAR_NONE 103u	/* the grammar allows no token */
#define RUNNER_REFUSE_GRAMMAR 104u	/* the grammar could not be
					 * followed (its matcher's bounds,
					 * or an entry a worker read damaged) */

enum runner_outcome {
	RUNNER_TOKEN = 0,	/* token is the next one */
	RUNNER_PREFILL = 1,	/* no token yet; detail = tokens consumed */
	RUNNER_REFUSED = 2,	/* detail = enum dynbatch_refusal */
};

struct runner_result {
	int32_t token;		/* RUNNER_TOKEN: in [0, vocab) */
	uint32_t outcome;	/* enum runner_outcome */
	uint32_t detail;
	/* RUNNER_TOKEN with speculation: the n_more tokens that follow
	 * token, at the next positions, each exactly what the steps after
	 * this one would have given (docs/DESIGN.md 2.7) */
	uint32_t n_more;
	int32_t more[SPEC_MAX_DRAFT];
};

/* What speculation did, summed over a runner's life (model_runner_spec_counts()). */
struct runner_spec_counts {
	uint64_t drafted;	/* tokens guessed */
	uint64_t accepted;	/* guesses the model confirmed */
	uint64_t emitted;	/* tokens given by steps of rows that guessed */
	uint64_t verify_rows;	/* row-steps that checked guesses */
	uint64_t steps;		/* model steps with any guesses in them */
	uint64_t draft_ns;	/* time spent guessing */
	uint64_t verify_ns;	/* time of the model steps that checked some */
};

/*
 * A runner for model m (which it does not own) over slots [0, n_slots)
 * with prefixes of at most max_context tokens.  Binds a stateful model.
 * NULL after writing err.
 */
struct model_runner *model_runner_create(struct model *m, uint32_t n_slots,
					 uint32_t max_context, char *err,
					 size_t err_len);

/*
 * The same for a paged model (model_is_paged()), whose KV lives in pool
 * (which the runner does not own, mapped for this model's bytes per
 * token): binds the model to it.  NULL after writing err.
 */
struct kv_pool;
struct model_runner *model_runner_create_paged(struct model *m, uint32_t n_slots,
					       uint32_t max_context,
					       const struct kv_pool *pool,
					       char *err, size_t err_len);

/*
 * Run one step over rows[0 .. n_rows) (at most one per slot), writing
 * results[i] for each.  0, or a negative errno: the step failed (the
 * model failed, returned a token outside the vocabulary or NaN logits).
 */
/* The vocabulary's bytes for rows with a grammar (v outlives r; NULL:
 * such rows are refused). */
void model_runner_set_grammar_vocab(struct model_runner *r,
				    const struct grammar_vocab *v);

int model_runner_step(struct model_runner *r, uint32_t n_rows,
		      const struct runner_row *rows,
		      struct runner_result *results);

/*
 * The caller now runs exactly the (slot, generation) pairs of rows[0 ..
 * n) (their tokens are not read): drop the state of every other slot
 * (its request ended, or the slot has a new one), giving its memory
 * back.  Nothing to do, and no cost, for a token model.
 */
void model_runner_keep(struct model_runner *r, uint32_t n,
		       const struct runner_row *rows);

/*
 * Turn speculation on (cfg->mode != SPEC_OFF) or off for the steps that
 * follow.  A stateful model verifies a row's guesses in one step when
 * its max_outputs() allows (the guesses are capped to fit); a token
 * model gets each guessed prefix as a row of its own.  Returns how many
 * tokens a row may now be given in one step (1: speculation off).
 */
uint32_t model_runner_set_spec(struct model_runner *r,
			       const struct spec_config *cfg);

/* The most tokens one row may be given in one step (1 + guesses). */
uint32_t model_runner_max_emit(const struct model_runner *r);

/* What speculation has done so far. */
struct runner_spec_counts model_runner_spec_counts(const struct model_runner *r);

/* Drop every slot's state: the caller cannot vouch for any of it. */
void model_runner_forget_all(struct model_runner *r);

/* Free the runner (not the model).  Accepts NULL. */
void model_runner_destroy(struct model_runner *r);

#endif /* DYNBATCH_MODEL_RUNNER_H */
