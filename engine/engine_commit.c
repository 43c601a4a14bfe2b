/*
 * engine_commit.c - what a validated token does to its request: kept
 * with its logprobs, fed to the stop matchers and, with a tokenizer, to
 * the request's text; the tokens and text that became final handed to
 * the front end; the request finished when a stop, an end token or
 * max_tokens ends it (docs/DESIGN.md 3.3, 3.6, 7.2).  engine.c applies
 * the rows the scheduler has checked (engine_apply_result()) with
 * engine_commit_token() and engine_refuse().
 */
#include "engine/engine.h"
#include "engine/engine_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "dynbatch/model.h"
#include "model/model_runner.h"
#include "engine/request_text.h"
#include "text/stop_matcher.h"
#include "text/tokenizer.h"

/* ------------------------------------------------------------------------
 * Committed tokens (engine_apply_result() calls these)
 * ---------------------------------------------------------------------- */

/*
 * Hand the front end the request's tokens that became final: those no
 * stop sequence can take back any more (the ones that may still be the
 * start of a stop are held back until the match fails).
 */
static void engine_release_final(struct engine *e, struct live_request *lr,
				 const struct text_push_result *text)
{
	uint32_t final = lr->n_generated - stop_matcher_pending(lr->req.stops,
								lr->matcher_state);
	size_t n_text = text ? text->n_final : 0;
	const int32_t *tokens;

	if (final < lr->n_final)	/* cannot be: final never shrinks */
		final = lr->n_final;
	if (final == lr->n_final && !n_text)
		return;
	tokens = lr->generated ? lr->generated :
		 slot_table_tokens(&e->slots, lr->slot) + lr->req.n_prompt;
	e->fe.ops->on_tokens(e->fe.ctx, lr->cookie, &lr->req, tokens + lr->n_final,
			     lr->logprobs ? lr->logprobs + (size_t)lr->n_final *
			     (1 + lr->req.sampling.top_logprobs) : NULL,
			     final - lr->n_final, n_text ? text->final : NULL,
			     n_text);
	lr->n_final = final;
	lr->text_given += n_text;
}

/*
 * The text side of a committed token (request_text.h): whether a stop
 * string or an end token ended the request (*ended: the reason's
 * stop_len set), and the text that became final (*tr).  0 or -ENOMEM.
 */
static int engine_commit_text(struct engine *e, struct live_request *lr,
			      int32_t token, uint32_t match, bool *ended,
			      struct text_push_result *tr)
{
	uint32_t pending = stop_matcher_pending(lr->req.stops, lr->matcher_state);
	enum request_text_event ev;
	int ret;

	*ended = false;
	/* a matched token stop's tokens stay held: the finish drops them */
	ret = request_text_commit(e->tok, lr, token, pending > match ? pending : match,
				  &ev, tr);
	if (ret || ev == REQUEST_TEXT_MORE)
		return ret;
	*ended = true;
	if (ev == REQUEST_TEXT_STOP) {	/* tokens up to the completing one */
		lr->stop_len = 0;
		return 0;
	}
	lr->stop_len = 1;		/* the end token, left out */
	return request_text_finish(lr, 0, tr) == -ENOMEM ? -ENOMEM : 0;
}

/* Commit one validated token to the request in slot; finish it if done. */
/* Keep the logprobs of the request's newest token (entry n_generated),
 * doubling the rows up to max_tokens as needed.  0 or -ENOMEM. */
static int engine_keep_logprobs(struct live_request *lr, int32_t token,
				const struct shm_logprobs *lp)
{
	uint32_t stride = 1 + lr->req.sampling.top_logprobs;
	struct sampler_logprob *e;

	if (lr->n_generated >= lr->logprobs_cap) {
		uint32_t cap = lr->logprobs_cap * 2;

		if (cap > lr->req.max_tokens || cap < lr->logprobs_cap)
			cap = lr->req.max_tokens;
		e = realloc(lr->logprobs, (size_t)cap * stride * sizeof(*e));
		if (!e)
			return -ENOMEM;
		lr->logprobs = e;
		lr->logprobs_cap = cap;
	}
	e = lr->logprobs + (size_t)lr->n_generated * stride;
	e[0] = (struct sampler_logprob){ token, lp->logprob };
	for (uint32_t j = 0; j + 1 < stride; j++)
		e[1 + j] = j < lp->n_top ? lp->top[j] :
			   (struct sampler_logprob){ -1, 0.0f };
	return 0;
}

void engine_commit_token(struct engine *e, uint32_t slot, int32_t token,
			 const struct shm_logprobs *lp)
{
	uint32_t handle = e->slots.slots[slot].request_handle;
	struct live_request *lr = request_pool_get(&e->pool, handle);
	struct text_push_result tr;	/* set and read only with text */
	uint32_t match = 0;
	bool ended;

	if (!lr || lr->slot != slot || lr->n_generated >= lr->req.max_tokens) {
		engine_fail(e, "slot %u lost its request", slot);
		return;
	}
	/* a worker's token is held to the request's grammar before it
	 * counts (DESIGN 2.8): one the grammar refuses is never answered */
	if (lr->req.grammar) {
		int ret = engine_grammar_check(e, lr, token);

		if (ret) {
			e->stats.grammar_refused++;
			engine_finish(e, handle, FINISH_ERROR, ret == -ENOMEM ?
				      "out of memory" : "the worker gave a token "
				      "the request's grammar does not allow");
			return;
		}
	}
	if (slot_table_commit(&e->slots, slot)) {
		engine_finish(e, handle, FINISH_ERROR, "context limit reached");
		return;
	}
	if (lr->generated)
		lr->generated[lr->n_generated] = token;
	if (lr->logprobs && engine_keep_logprobs(lr, token, lp)) {
		engine_finish(e, handle, FINISH_ERROR, "out of memory for logprobs");
		return;
	}
	if (!lr->n_generated)
		histogram_record(&e->ttft_hist, clock_now_ns() - lr->admitted_ns);
	lr->n_generated++;
	e->stats.n_tokens++;
	if (lr->req.stops)
		lr->matcher_state = stop_matcher_feed(lr->req.stops, lr->matcher_state,
						      token, &match);
	if (lr->has_text) {
		if (engine_commit_text(e, lr, token, match, &ended, &tr)) {
			engine_finish(e, handle, FINISH_ERROR, "out of memory");
			return;
		}
		if (ended) {	/* a stop string or the model's end token */
			engine_finish(e, handle, FINISH_STOP, NULL);
			return;
		}
	}
	if (match) {
		lr->stop_len = match;
		if (lr->has_text)	/* the stop's text goes with its tokens */
			request_text_finish(lr, lr->req.include_stop ? 0 : match, &tr);
		engine_finish(e, handle, FINISH_STOP, NULL);
		return;
	}
	if (lr->n_generated >= lr->req.max_tokens)
		engine_finish(e, handle, FINISH_LENGTH, NULL);
	else if (e->fe.ops->on_tokens)
		engine_release_final(e, lr, lr->has_text ? &tr : NULL);
}

void engine_refuse(struct engine *e, uint32_t slot, uint32_t why)
{
	static const char *const reasons[] = {
		[DYNBATCH_REFUSE_EMPTY_PROMPT] = "the model refused the request: "
			"the prompt is empty, so there is no token to start from",
		[DYNBATCH_REFUSE_CONTEXT] = "the model refused the request: "
			"the sequence is longer than the model can hold",
		[DYNBATCH_REFUSE_TOKEN] = "the model refused the request: "
			"a token it cannot embed",
		[RUNNER_REFUSE_ALL_BANNED] = "no token can be sampled: "
			"logit_bias (or the model) bans every token",
		[RUNNER_REFUSE_NO_LOGITS] = "the model gives no logits: it "
			"cannot sample, apply logit_bias or report logprobs",
		[RUNNER_REFUSE_SAMPLING] = "the worker found the request's "
			"sampling fields damaged",
		[RUNNER_REFUSE_GRAMMAR_NONE] = "no token can be sampled: the "
			"grammar allows none here (or logit_bias bans those it "
			"allows)",
		[RUNNER_REFUSE_GRAMMAR] = "the grammar cannot be followed: its "
			"matcher outgrew its bounds (a grammar too ambiguous), or "
			"the worker found it damaged",
	};
	uint32_t handle = e->slots.slots[slot].request_handle;

	if (!request_pool_get(&e->pool, handle)) {
		engine_fail(e, "slot %u lost its request", slot);
		return;
	}
	engine_finish(e, handle, FINISH_ERROR,
		      why < sizeof(reasons) / sizeof(reasons[0]) && reasons[why] ?
		      reasons[why] : "the model refused the request");
}
