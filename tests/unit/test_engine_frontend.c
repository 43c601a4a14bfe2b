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
 *     request, whatever the front end.
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_final_tokens_vs_reference),
		cmocka_unit_test(test_one_admission_path),
	};

	test_seed_init("test_engine_frontend");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
