/*
 * test_engine_frontend.c - the engine's front-end port (frontend.h),
 * driven by a scripted front end against an independent reference.
 *
 * The engine runs in-process (--workers 0, the sim model) with a small
 * batch, and a test front end plugs in through struct frontend_ops like
 * jsonl_frontend.c and http_server.c do.  It submits random requests from
 * pump() (random prompts, max_tokens 0 included, stop sequences built from
 * the reference's own continuation so that matches, partial matches and
 * near misses all happen), pauses and resumes some of them from pump(),
 * and records every callback.  The reference decodes each request alone
 * with sim_next() and a naive suffix compare for stops (as tools/refdecode
 * does), sharing nothing with the engine but request_parse().  Checked:
 *
 *   - on_finish comes exactly once per request, never from inside
 *     engine_submit(), with the reference's tokens and finish reason;
 *   - on_tokens hands out only final tokens: what was streamed is a prefix
 *     of the answer (a stop that is removed never went out), and for a
 *     request without stops every token but the last went out before the
 *     finish (nothing is held back needlessly);
 *   - max_tokens 0 finishes as length with no tokens, through the same
 *     path; a live id is refused with -EEXIST and is free again after;
 *   - the metrics count prompt tokens and time to first token once per
 *     request, whatever the front end;
 *   - a batch (engine_submit_batch()) is admitted all or none: each
 *     choice is answered once, at its own flat index, with its own
 *     prompt's reference; a refused batch is left untouched.
 *
 * The random tests print their seed; SEED=<n> replays a run.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/engine.h"
#include "engine/frontend.h"
#include "engine/request.h"
#include "model/sim_model.h"
#include "util/strbuf.h"
#include "tests/unit/test_rng.h"
#include "server/request/request_json.h"

#define VOCAB 24u		/* small: stop tokens come up often */
#define MAX_TOKENS 40u
#define N_SLOTS 4u

/* ------------------------------------------------------------------ */
/* Reference                                                           */
/* ------------------------------------------------------------------ */

/* Length of the longest stop sequence that is a suffix of gen[0..n). */
static uint32_t naive_stop(const struct request *req, const int32_t *gen,
			   uint32_t n)
{
	const int32_t *s = req->stop_tokens;
	uint32_t len, best = 0;

	for (uint32_t i = 0; i < req->n_stop_seqs; s += len, i++) {
		len = req->stop_lens[i];
		if (len > best && len <= n &&
		    !memcmp(gen + n - len, s, len * sizeof(*s)))
			best = len;
	}
	return best;
}

struct expect {
	int32_t raw[MAX_TOKENS];	/* generated, stop included */
	uint32_t n_raw;
	uint32_t n_out;			/* the answer's length */
	enum finish_reason reason;
};

static void ref_decode(const struct request *req, struct expect *x)
{
	int32_t seq[64 + MAX_TOKENS];
	uint32_t stop = 0;

	memcpy(seq, req->prompt, req->n_prompt * sizeof(int32_t));
	x->n_raw = 0;
	while (x->n_raw < req->max_tokens && !stop) {
		uint32_t n = req->n_prompt + x->n_raw;

		seq[n] = sim_next(seq, n, VOCAB, 0);
		x->raw[x->n_raw++] = seq[n];
		stop = naive_stop(req, x->raw, x->n_raw);
	}
	x->reason = stop ? FINISH_STOP : FINISH_LENGTH;
	x->n_out = stop && !req->include_stop ? x->n_raw - stop : x->n_raw;
}

/* ------------------------------------------------------------------ */
/* The scripted front end                                              */
/* ------------------------------------------------------------------ */

struct case_req {
	char line[1024];		/* the request as a JSON line */
	bool has_stops;
	bool pause_me;			/* pause it once it has streamed */
	uint32_t handle;
	int paused_rounds;		/* > 0: paused, resume after that many pumps */
	bool paused_once;
	struct expect x;
	/* what the engine told us */
	int32_t streamed[MAX_TOKENS];
	uint32_t n_streamed;
	uint32_t n_finish_calls;
	enum finish_reason reason;
	int32_t answer[MAX_TOKENS];
	uint32_t n_answer;
	uint32_t n_generated;
};

struct fake_fe {
	struct engine *e;
	struct case_req *reqs;
	uint32_t n_reqs;
	uint32_t n_submitted;
	uint32_t n_finished;
	bool in_submit;			/* inside engine_submit() */
	bool callback_in_submit;	/* a callback came from inside it */
	uint64_t prompt_tokens;		/* of submitted requests */
	uint32_t n_with_tokens;		/* submitted with max_tokens > 0 */
};

static void fake_on_tokens(void *ctx, uint64_t cookie, const struct request *req,
			   const int32_t *tokens,
			   const struct sampler_logprob *logprobs, uint32_t n,
			   const char *text, size_t text_len)
{
	struct fake_fe *f = ctx;
	struct case_req *c;

	f->callback_in_submit |= f->in_submit;
	assert_true(cookie < f->n_reqs);
	c = &f->reqs[cookie];
	assert_int_equal(c->n_finish_calls, 0);
	assert_true(n > 0);
	assert_true(c->n_streamed + n <= MAX_TOKENS);
	assert_non_null(req->id);
	memcpy(c->streamed + c->n_streamed, tokens, n * sizeof(int32_t));
	c->n_streamed += n;
}

static void fake_on_finish(void *ctx, uint64_t cookie, const struct frontend_result *r)
{
	struct fake_fe *f = ctx;
	struct case_req *c;

	f->callback_in_submit |= f->in_submit;
	assert_true(cookie < f->n_reqs);
	c = &f->reqs[cookie];
	c->n_finish_calls++;
	c->reason = r->reason;
	assert_true(r->n_tokens <= MAX_TOKENS);
	if (r->n_tokens)
		memcpy(c->answer, r->tokens, r->n_tokens * sizeof(int32_t));
	c->n_answer = r->n_tokens;
	c->n_generated = r->n_generated;
	f->n_finished++;
}

/* Submit what fits; pause and resume the requests picked for it. */
static bool fake_pump(void *ctx)
{
	struct fake_fe *f = ctx;
	struct request_limits lim = { .vocab = VOCAB, .max_context = 4096 };
	bool did = false;

	for (uint32_t i = 0; i < f->n_submitted; i++) {
		struct case_req *c = &f->reqs[i];

		if (c->n_finish_calls)
			continue;
		if (c->pause_me && !c->paused_once && c->n_streamed >= 2) {
			engine_pause(f->e, c->handle);
			c->paused_once = true;
			c->paused_rounds = 3;
			did = true;
		} else if (c->paused_rounds > 0 && --c->paused_rounds == 0) {
			engine_resume(f->e, c->handle);
			did = true;
		}
	}
	while (f->n_submitted < f->n_reqs && engine_has_room(f->e)) {
		struct case_req *c = &f->reqs[f->n_submitted];
		struct request req;
		char err[256];
		int ret;

		assert_int_equal(request_parse(c->line, strlen(c->line), 0, &lim, &req,
					       err, sizeof(err)), 0);
		f->prompt_tokens += req.n_prompt;
		f->n_with_tokens += req.max_tokens > 0;
		f->in_submit = true;
		ret = engine_submit(f->e, &req, f->n_submitted, &c->handle);
		f->in_submit = false;
		assert_int_equal(ret, 0);
		request_release(&req);	/* empty: the engine took it */
		f->n_submitted++;
		did = true;
	}
	return did;
}

static bool fake_on_signal(void *ctx, int signo)
{
	return false;
}

static bool fake_done(void *ctx)
{
	const struct fake_fe *f = ctx;

	return f->n_submitted == f->n_reqs;
}

static const struct frontend_ops fake_ops = {
	.on_tokens = fake_on_tokens,
	.on_finish = fake_on_finish,
	.pump = fake_pump,
	.on_signal = fake_on_signal,
	.done = fake_done,
};

/* ------------------------------------------------------------------ */
/* Building the cases                                                  */
/* ------------------------------------------------------------------ */

static void append_seq(struct strbuf *sb, const int32_t *t, uint32_t n)
{
	assert_int_equal(strbuf_printf(sb, "["), 0);
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(strbuf_printf(sb, "%s%d", i ? "," : "", t[i]), 0);
	assert_int_equal(strbuf_printf(sb, "]"), 0);
}

/*
 * A random request.  Its stops come from its own continuation (decoded
 * first without stops): a sequence that will match, and one that matches
 * all but its last token (a near miss: tokens held back, then released).
 */
static void make_case(struct rng *r, uint32_t i, struct case_req *c)
{
	struct request_limits lim = { .vocab = VOCAB, .max_context = 4096 };
	struct strbuf sb = STRBUF_INIT;
	int32_t prompt[8];
	uint32_t n_prompt = 1 + rng_below(r, 8);
	uint32_t max_tokens = rng_below(r, 8) ? 1 + rng_below(r, MAX_TOKENS) : 0;
	struct request req;
	struct expect free_run;
	char err[256];

	for (uint32_t k = 0; k < n_prompt; k++)
		prompt[k] = (int32_t)rng_below(r, VOCAB);
	assert_int_equal(strbuf_printf(&sb, "{\"id\":\"c%u\",\"prompt\":", i), 0);
	append_seq(&sb, prompt, n_prompt);
	assert_int_equal(strbuf_printf(&sb, ",\"max_tokens\":%u", max_tokens), 0);
	/* the continuation without stops: the line so far, closed */
	assert_int_equal(strbuf_printf(&sb, "}"), 0);
	assert_int_equal(request_parse(sb.data, sb.len, 0, &lim, &req, err,
				       sizeof(err)), 0);
	ref_decode(&req, &free_run);
	request_release(&req);
	sb.len--;
	c->has_stops = free_run.n_raw >= 4 && rng_below(r, 4) != 0;
	if (c->has_stops) {
		uint32_t at = rng_below(r, free_run.n_raw - 2);
		uint32_t len = 2 + rng_below(r, 2);
		int32_t miss[3];

		if (at + len > free_run.n_raw)
			len = free_run.n_raw - at;
		memcpy(miss, free_run.raw + rng_below(r, free_run.n_raw - 2),
		       3 * sizeof(int32_t));
		miss[2] = (miss[2] + 1) % (int32_t)VOCAB;
		assert_int_equal(strbuf_printf(&sb, ",\"stop_sequences\":["), 0);
		append_seq(&sb, miss, 3);
		assert_int_equal(strbuf_printf(&sb, ","), 0);
		if (rng_below(r, 3))
			append_seq(&sb, free_run.raw + at, len);
		else	/* a stop that never comes: everything is held back
			 * while it might, released when it cannot */
			append_seq(&sb, miss, 2);
		assert_int_equal(strbuf_printf(&sb, "],\"include_stop\":%s",
					       rng_below(r, 2) ? "true" : "false"), 0);
	}
	assert_int_equal(strbuf_printf(&sb, "}"), 0);
	assert_true(sb.len < sizeof(c->line));
	memcpy(c->line, sb.data, sb.len + 1);
	strbuf_release(&sb);
	if (request_parse(c->line, strlen(c->line), 0, &lim, &req, err, sizeof(err)))
		fail_msg("%s: %s", c->line, err);
	ref_decode(&req, &c->x);
	request_release(&req);
	c->pause_me = rng_below(r, 4) == 0;
}

static struct engine *make_engine(struct engine_config *cfg)
{
	struct engine *e;
	int status;

	*cfg = (struct engine_config){
		.n_workers = 0, .n_slots = N_SLOTS, .model_spec = "sim:vocab=24",
		.max_context = 4096, .queue_capacity = 8, .step_timeout_ms = 10000,
		.start_timeout_ms = 10000, .poison_attempts = 2, .progress = 0,
	};
	e = engine_create(cfg, &status);
	assert_non_null(e);
	return e;
}

/* The value of metric line "name value" in text, or -1. */
static long long metric(const char *text, const char *name)
{
	const char *p = text;
	size_t n = strlen(name);

	while ((p = strstr(p, name))) {
		if ((p == text || p[-1] == '\n') && p[n] == ' ')
			return strtoll(p + n + 1, NULL, 10);
		p += n;
	}
	return -1;
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */
/* ------------------------------------------------------------------ */

static void test_final_tokens_vs_reference(void **state)
{
	struct rng r = rng_for(1);
	struct engine_config cfg;
	struct engine *e = make_engine(&cfg);
	struct fake_fe f = { .e = e, .n_reqs = 300 };
	struct strbuf metrics = STRBUF_INIT;
	uint32_t n_held_back = 0;

	f.reqs = calloc(f.n_reqs, sizeof(*f.reqs));
	assert_non_null(f.reqs);
	for (uint32_t i = 0; i < f.n_reqs; i++)
		make_case(&r, i, &f.reqs[i]);
	engine_set_frontend(e, &fake_ops, &f);
	assert_int_equal(engine_run(e), ENGINE_EXIT_OK);
	assert_false(f.callback_in_submit);
	assert_int_equal(f.n_finished, f.n_reqs);
	for (uint32_t i = 0; i < f.n_reqs; i++) {
		struct case_req *c = &f.reqs[i];

		if (c->n_finish_calls != 1 || c->reason != c->x.reason ||
		    c->n_answer != c->x.n_out || c->n_generated != c->x.n_raw ||
		    memcmp(c->answer, c->x.raw, c->n_answer * sizeof(int32_t)) ||
		    c->n_streamed > c->n_answer ||
		    memcmp(c->streamed, c->answer, c->n_streamed * sizeof(int32_t)) ||
		    (!c->has_stops && c->x.n_raw &&
		     c->n_streamed != c->x.n_raw - 1))
			fail_msg("request %u (%s): %u finish calls, reason %d (want %d), "
				 "%u tokens (want %u of %u generated), %u streamed "
				 "(SEED=%llu)", i, c->line, c->n_finish_calls, c->reason,
				 c->x.reason, c->n_answer, c->x.n_out, c->x.n_raw,
				 c->n_streamed, test_seed);
		n_held_back += c->has_stops && c->n_streamed + 1 < c->x.n_raw;
	}
	/* the stops did make the engine hold tokens back somewhere */
	assert_true(n_held_back > 0);
	assert_int_equal(engine_metrics(e, &metrics), 0);
	assert_int_equal(metric(metrics.data, "dynbatch_prompt_tokens_total"),
			 (long long)f.prompt_tokens);
	assert_int_equal(metric(metrics.data, "dynbatch_time_to_first_token_seconds_count"),
			 (long long)f.n_with_tokens);
	strbuf_release(&metrics);
	engine_destroy(e);
	free(f.reqs);
}

/* A second front end: submits the same id twice while it is live. */
struct dup_fe {
	struct engine *e;
	int step;
	int ret_dup, ret_again;
	uint32_t n_finished;
	bool in_submit, callback_in_submit;
};

static int dup_submit(struct dup_fe *d, const char *line, uint64_t cookie)
{
	struct request_limits lim = { .vocab = VOCAB, .max_context = 4096 };
	struct request req;
	uint32_t handle;
	int ret;

	assert_int_equal(request_parse(line, strlen(line), 0, &lim, &req, NULL, 0), 0);
	d->in_submit = true;
	ret = engine_submit(d->e, &req, cookie, &handle);
	d->in_submit = false;
	request_release(&req);
	return ret;
}

static bool dup_pump(void *ctx)
{
	struct dup_fe *d = ctx;

	switch (d->step) {
	case 0:
		assert_int_equal(dup_submit(d, "{\"id\":\"a\",\"prompt\":[1],"
					    "\"max_tokens\":5}", 0), 0);
		d->ret_dup = dup_submit(d, "{\"id\":\"a\",\"prompt\":[2],"
					"\"max_tokens\":0}", 1);
		assert_int_equal(dup_submit(d, "{\"id\":\"z\",\"prompt\":[3],"
					    "\"max_tokens\":0}", 2), 0);
		break;
	case 1:
		if (d->n_finished < 2)
			return false;
		/* "a" is done: its id is free again */
		d->ret_again = dup_submit(d, "{\"id\":\"a\",\"prompt\":[2],"
					  "\"max_tokens\":0}", 3);
		break;
	default:
		return false;
	}
	d->step++;
	return true;
}

static void dup_on_finish(void *ctx, uint64_t cookie, const struct frontend_result *r)
{
	struct dup_fe *d = ctx;

	d->callback_in_submit |= d->in_submit;
	if (cookie == 2 || cookie == 3) {	/* max_tokens 0 */
		assert_int_equal(r->reason, FINISH_LENGTH);
		assert_int_equal(r->n_tokens, 0);
		assert_int_equal(r->n_generated, 0);
	} else {
		assert_int_equal(cookie, 0);
		assert_int_equal(r->n_tokens, 5);
	}
	d->n_finished++;
}

static bool dup_done(void *ctx)
{
	return ((struct dup_fe *)ctx)->step == 2;
}

static void test_one_admission_path(void **state)
{
	static const struct frontend_ops ops = {
		.on_finish = dup_on_finish,
		.pump = dup_pump,
		.on_signal = fake_on_signal,
		.done = dup_done,
	};
	struct engine_config cfg;
	struct engine *e = make_engine(&cfg);
	struct dup_fe d = { .e = e };

	engine_set_frontend(e, &ops, &d);
	assert_int_equal(engine_run(e), ENGINE_EXIT_OK);
	assert_int_equal(d.ret_dup, -EEXIST);
	assert_int_equal(d.ret_again, 0);
	assert_int_equal(d.n_finished, 3);
	assert_false(d.callback_in_submit);
	engine_destroy(e);
}

/* ------------------------------------------------------------------ */
/* Batches: engine_submit_batch()                                      */
/* ------------------------------------------------------------------ */

#define N_BATCHES 40u
#define BATCH_MAX 4u

struct batch_case {
	int32_t prompt[BATCH_MAX][8];
	uint32_t n_prompt[BATCH_MAX];
	uint32_t k, n, max_tokens;
	int want_rc;			/* 0, or the refusal it must get */
	bool submitted;
	uint32_t n_finished;
	bool seen[REQUEST_MAX_CHOICES];
};

struct batch_fe {
	struct engine *e;
	struct batch_case cases[N_BATCHES];
	uint32_t next;			/* the next case to submit */
	uint32_t n_answers, n_due;
	bool in_submit, callback_in_submit;
};

/* Case c's prompts as requests (greedy: every choice is its prompt's
 * reference; n given for prompt p, skew: p's n one more). */
static void batch_parse(const struct batch_case *c, uint32_t b,
			struct request *reqs, bool skew)
{
	struct request_limits lim = { .vocab = VOCAB, .max_context = 4096 };
	struct strbuf line = STRBUF_INIT;

	for (uint32_t p = 0; p < c->k; p++) {
		line.len = 0;
		assert_int_equal(strbuf_printf(&line, "{\"id\":\"b%u\",\"max_tokens\":%u,"
					       "\"n\":%u,\"prompt\":[", b,
					       c->max_tokens, c->n + (skew && p == c->k - 1)), 0);
		for (uint32_t i = 0; i < c->n_prompt[p]; i++)
			assert_int_equal(strbuf_printf(&line, "%s%d", i ? "," : "",
						       c->prompt[p][i]), 0);
		assert_int_equal(strbuf_printf(&line, "]}"), 0);
		assert_int_equal(request_parse(line.data, line.len, 0, &lim, &reqs[p],
					       NULL, 0), 0);
	}
	strbuf_release(&line);
}

static bool batch_pump(void *ctx)
{
	struct batch_fe *f = ctx;
	struct request reqs[BATCH_MAX], *ptrs[BATCH_MAX];
	uint32_t handles[REQUEST_MAX_CHOICES];
	struct batch_case *c;
	int ret;

	if (f->next == N_BATCHES)
		return false;
	c = &f->cases[f->next];
	batch_parse(c, f->next, reqs, c->want_rc == -EINVAL);
	for (uint32_t p = 0; p < c->k; p++)
		ptrs[p] = &reqs[p];
	f->in_submit = true;
	ret = engine_submit_batch(f->e, ptrs, c->k, f->next, handles);
	f->in_submit = false;
	if (ret == -EAGAIN && c->want_rc != -EINVAL) {	/* the queue is full: later */
		for (uint32_t p = 0; p < c->k; p++) {
			if (!reqs[p].prompt)
				fail_msg("batch %u: emptied by -EAGAIN (SEED=%llu)",
					 f->next, test_seed);
			request_release(&reqs[p]);
		}
		return false;
	}
	if (ret != c->want_rc)
		fail_msg("batch %u (%u prompts x %u): rc %d, wanted %d (SEED=%llu)",
			 f->next, c->k, c->n, ret, c->want_rc, test_seed);
	/* all or none: a refused batch is left as it was, a taken one
	 * belongs to the engine */
	for (uint32_t p = 0; p < c->k; p++) {
		if (ret ? !reqs[p].prompt || reqs[p].n_prompt != c->n_prompt[p] :
		    reqs[p].prompt || reqs[p].id)
			fail_msg("batch %u prompt %u: %s after rc %d (SEED=%llu)",
				 f->next, p, ret ? "emptied" : "kept", ret, test_seed);
		request_release(&reqs[p]);
	}
	c->submitted = !ret;
	if (!ret)
		f->n_due += c->k * c->n;
	f->next++;
	return true;
}

static void batch_on_finish(void *ctx, uint64_t cookie, const struct frontend_result *r)
{
	struct batch_fe *f = ctx;
	struct batch_case *c = &f->cases[cookie];
	uint32_t p = r->req->prompt_index, at = request_flat_choice(r->req);
	struct request ref = { 0 };
	struct expect x;

	f->callback_in_submit |= f->in_submit;
	if (cookie >= N_BATCHES || !c->submitted || p >= c->k ||
	    r->req->choice >= c->n || r->req->n_choices != c->n || c->seen[at])
		fail_msg("batch %llu: a result for prompt %u choice %u of %u "
			 "(SEED=%llu)", (unsigned long long)cookie, p,
			 r->req->choice, r->req->n_choices, test_seed);
	c->seen[at] = true;
	c->n_finished++;
	f->n_answers++;
	/* its own prompt, and that prompt's reference answer */
	ref.prompt = c->prompt[p];
	ref.n_prompt = c->n_prompt[p];
	ref.max_tokens = c->max_tokens;
	ref_decode(&ref, &x);
	if (r->req->n_prompt != c->n_prompt[p] ||
	    memcmp(r->req->prompt, c->prompt[p], c->n_prompt[p] * sizeof(int32_t)) ||
	    r->reason != x.reason || r->n_tokens != x.n_out ||
	    (x.n_out && memcmp(r->tokens, x.raw, x.n_out * sizeof(int32_t))))
		fail_msg("batch %llu prompt %u choice %u: not its prompt's answer "
			 "(SEED=%llu)", (unsigned long long)cookie, p,
			 r->req->choice, test_seed);
}

static bool batch_done(void *ctx)
{
	struct batch_fe *f = ctx;

	return f->next == N_BATCHES && f->n_answers == f->n_due;
}

/* Random batches, some refused on purpose (more choices than the queue
 * holds, prompts of different n): each choice answered once with its
 * own prompt's reference, a refused batch untouched. */
static void test_batch_admission(void **state)
{
	static const struct frontend_ops ops = {
		.on_finish = batch_on_finish,
		.pump = batch_pump,
		.on_signal = fake_on_signal,
		.done = batch_done,
	};
	struct rng rng = rng_for(3);
	struct engine_config cfg;
	struct engine *e = make_engine(&cfg);
	struct batch_fe *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->e = e;
	for (uint32_t b = 0; b < N_BATCHES; b++) {
		struct batch_case *c = &f->cases[b];
		uint32_t what = rng_below(&rng, 8);

		c->k = 1 + rng_below(&rng, BATCH_MAX);
		c->n = 1 + rng_below(&rng, 3);
		c->max_tokens = rng_below(&rng, 12);
		/* the queue holds 8: more can never be taken */
		c->want_rc = c->k * c->n > cfg.queue_capacity ? -E2BIG : 0;
		if (!c->want_rc && what == 0 && c->k > 1)
			c->want_rc = -EINVAL;
		for (uint32_t p = 0; p < c->k; p++) {
			c->n_prompt[p] = 1 + rng_below(&rng, 8);
			for (uint32_t i = 0; i < c->n_prompt[p]; i++)
				c->prompt[p][i] = (int32_t)rng_below(&rng, VOCAB);
		}
	}
	engine_set_frontend(e, &ops, f);
	assert_int_equal(engine_run(e), ENGINE_EXIT_OK);
	for (uint32_t b = 0; b < N_BATCHES; b++)
		if (f->cases[b].submitted)
			assert_int_equal(f->cases[b].n_finished,
					 f->cases[b].k * f->cases[b].n);
	assert_false(f->callback_in_submit);
	engine_destroy(e);
	free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_final_tokens_vs_reference),
		cmocka_unit_test(test_one_admission_path),
		cmocka_unit_test(test_batch_admission),
	};

	test_seed_init("test_engine_frontend");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
