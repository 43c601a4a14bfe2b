/*
 * frontend.h - the port through which a front end plugs into the engine.
 *
 * The engine (engine.h) schedules requests and knows no protocol.  A
 * front end (jsonl_frontend.h for `dynbatch run`, http_server.h for
 * `dynbatch serve`) turns its input into requests and hands each to
 * engine_submit() with a cookie of its own choosing; the engine calls it
 * back through one table of functions, naming the request by that cookie:
 *
 *   front end                          engine
 *   ---------                          ------
 *   pump()          <- each round --   engine_loop
 *     engine_submit(req, cookie) -->   waiting queue -> slot -> worker
 *   on_tokens(cookie, new final)  <--  commit (tokens no stop can take back)
 *   on_finish(cookie, result)     <--  engine_finish (exactly once per
 *                                      submitted request)
 *   tick(now)       <- each round --   timers; returns its next deadline
 *   on_signal(signo) <- SIGINT/TERM -  the first one: drain how?
 *   done()          <- each round --   may the loop end (nothing live)?
 *
 * Rules.  on_tokens, on_finish, on_signal, done, before_sleep and
 * after_sleep run inside the engine (in the middle of a commit, a finish
 * or a signal), so they never re-enter it: no engine_submit,
 * engine_cancel, engine_pause or engine_resume.  They may call the
 * engine's read-only queries (engine_has_room, engine_n_waiting,
 * engine_vocab, engine_healthy, engine_metrics), engine_note_answered()
 * and engine_fail_frontend(), which only records the failure.  What such
 * a callback wants done to the engine (pause a request whose client reads
 * slowly, cancel one whose client is gone) it notes and does from pump().
 * pump() and tick(), and the front end's own io_uring completions
 * (io_op), run at the top level of the loop, where every engine call is
 * allowed.
 *
 * A cookie means nothing to the engine; it is stored with the request and
 * handed back.  A front end that abandons a request (its client went away)
 * calls engine_cancel() at the top level; the on_finish() for it comes
 * from inside that call, like the last call for any request.  So a cookie
 * that names something already gone must be recognised and ignored by the
 * front end (http_server.c keeps a serial number in it, bumped before it
 * cancels).
 */
#ifndef DYNBATCH_FRONTEND_H
#define DYNBATCH_FRONTEND_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/request.h"
#include "engine/stats.h"

/* How a request ended, as on_finish() hands it over. */
struct frontend_result {
	const struct request *req;	/* as submitted (id, line_no, n_prompt);
					 * valid during the call only */
	enum finish_reason reason;
	const char *error;		/* why (error, cancelled), or NULL */
	const int32_t *tokens;		/* the answer: every generated token,
					 * a matched stop removed unless
					 * include_stop; NULL when none */
	uint32_t n_tokens;
	uint32_t n_generated;		/* tokens generated, a matched stop
					 * included (usage) */
	/* req->sampling.logprobs: per token of tokens[], 1 +
	 * req->sampling.top_logprobs entries (request.h's struct result);
	 * else NULL */
	const struct sampler_logprob *logprobs;
	bool has_seed;			/* it sampled: seed is the one used */
	uint64_t seed;
	/* With a tokenizer: the answer's text (a matched stop string or end
	 * token removed, docs/DESIGN.md 3.6), text_len bytes, valid during
	 * the call only */
	bool has_text;
	const char *text;
	size_t text_len;
	/* what on_tokens already handed out: tokens[0 .. n_given) and
	 * text[0 .. text_given); a stream sends the rest */
	uint32_t n_given;
	size_t text_given;
};

struct frontend_ops {
	/*
	 * n new tokens of request req (as submitted; valid during the call
	 * only) became final: no stop sequence can
	 * take them back any more (tokens that might still be the start of
	 * a stop are held back until the match fails).  tokens[0..n) follow
	 * the ones of the previous call; they are valid during the call only.
	 * Not called for the step that finishes the request (on_finish has
	 * the rest).  May be NULL: the engine then skips the work.
	 */
	void (*on_tokens)(void *ctx, uint64_t cookie, const struct request *req,
			  const int32_t *tokens,
			  const struct sampler_logprob *logprobs, uint32_t n,
			  const char *text, size_t text_len);
	/* The request ended; the last call for its cookie.  Required. */
	void (*on_finish)(void *ctx, uint64_t cookie,
			  const struct frontend_result *r);
	/*
	 * Once or twice per loop round, at the top level of the loop: take
	 * input, submit requests, queue I/O, and carry out what callbacks
	 * noted (pause, cancel).  Returns true if it did anything (the loop
	 * then does not sleep).  Required.
	 */
	bool (*pump)(void *ctx);
	/* Enforce the front end's timers; returns the next time it needs a
	 * look (UINT64_MAX: none).  May be NULL. */
	uint64_t (*tick)(void *ctx, uint64_t now_ns);
	/*
	 * The first SIGINT or SIGTERM: take no new requests.  Returns true if
	 * every request already submitted still finishes (serve drains), false
	 * if the ones still waiting for a slot are cancelled (run).  From the
	 * second signal on the engine cancels every request (error NULL) and
	 * does not call this.  Required.
	 */
	bool (*on_signal)(void *ctx, int signo);
	/* No request live: may the loop end?  True once no input can come
	 * any more and every answer is written.  Required. */
	bool (*done)(void *ctx);
	/*
	 * The loop is about to sleep in io_uring: a front end with work that
	 * arrives off the loop (a parser thread) arranges to be woken through
	 * an operation on the ring, or returns true when that work is ready
	 * already (then the loop does not sleep).  after_sleep() withdraws
	 * the arrangement.  Both may be NULL.
	 */
	bool (*before_sleep)(void *ctx);
	void (*after_sleep)(void *ctx);
};

/* A front end as the engine holds it. */
struct frontend {
	const struct frontend_ops *ops;
	void *ctx;			/* the front end's own state */
};

#endif /* DYNBATCH_FRONTEND_H */
