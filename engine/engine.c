/*
 * engine.c - the coordinator's engine: requests' places and answers and the
 * event loop that applies what the scheduler and the supervisor return;
 * see engine.h.
 *
 * NOTES ON THE DESIGN
 *
 * The engine is these files: this one (a request's place and its
 * answer, signals, the loop, setup, and applying what the layers below
 * return), engine_admit.c (admission, choices, cancel, pause, resume),
 * engine_commit.c (what a committed token does to its request),
 * engine_refill.c (which waiting request takes a free slot) and
 * engine_model.c (the model and tokenizer at start), sharing struct
 * engine through engine_internal.h.  Data flows one way: the engine calls
 * the scheduler (sched/shard_sched.c: refill slots, dispatch, checked
 * rows as actions; sched/wait_policy.c: spin, doze or sleep), the shard
 * channel (shard/shard_channel.c: the rings and the result check) and
 * the supervisor (shard/worker_supervisor.c: the workers' lives, whose
 * deaths come back as a struct worker_event), and applies what they
 * return; none of them calls back up.
 *
 * Trust.  Everything the coordinator must trust lives in its private
 * memory: the slot table's private copy, the request pool with every
 * committed token, and for each shard the rows of the last dispatches it
 * sent, by dispatch id.  A result record is read field by field, once,
 * into locals and accepted only if its sequence number and dispatch id
 * (one sent to this worker), row count, each row's slot, generation and
 * position and the token's range all match (shard_channel_check(), then
 * shard_result_next() in shard_sched.c); anything else is dropped and
 * the affected rows are extended again.  A row the run-ahead made obsolete
 * (its request ended, a reset sent the worker back) is counted as
 * discarded, anything else as stale: a fault-free run has no stale
 * result.  A sequence number or a dispatch id we did not send makes the
 * whole result garbled (a reset).  Progress is a committed row: a worker
 * whose results commit nothing WORKER_MAX_FRUITLESS times in a row is
 * killed without blame and its requests move to other shards.
 *
 * Faults (worker_supervisor.c).  A worker's exit shows up as its pidfd
 * becoming readable on the io_uring loop.  What it left in the result
 * ring is drained as stale, the channel is reset, the shard's token
 * buffers are rewritten from our own copies, and a replacement is started
 * from the committed lengths, with back-off when starts keep failing.
 * A death the request can be blamed for (a model error, or a crash or a
 * hang past --step-timeout inside the model call, as the worker reports
 * in in_model_call) puts every row of the dispatch the worker had adopted
 * under
 * suspicion: the shard then runs its suspects one per step, so a request
 * that kills the worker when alone is identified; after poison_attempts
 * such lone failures it is failed with an error result, and everyone else
 * continues with exactly the tokens a fault-free run gives (the model is a
 * pure function of the prefix).  A SIGKILL or SIGTERM we did not send is
 * an outside event (an operator, the OOM killer, the fault injector): the
 * rows are sent again, nobody is blamed.
 *
 * Front ends.  The engine knows no protocol: requests come from a front
 * end (frontend.h) through engine_submit(), the one admission path, and
 * go back through its on_tokens/on_finish callbacks, named by the cookie
 * the front end gave.  Decisions about requests are made here, once, for
 * every front end: which tokens are final (the stop holdback,
 * engine_release_final()), max_tokens 0 (answered on the next round
 * without a slot, engine_finish_at_once()), duplicate ids, and the
 * metrics (prompt tokens, time to first token).  A callback never
 * re-enters the engine, so a commit or a finish cannot nest another.
 */
#include "engine/engine.h"
#include "engine/engine_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/clock.h"
#include "engine/frontend.h"
#include "io/io_ring.h"
#include "util/log.h"
#include "util/log_escape.h"
#include "util/log_limit.h"
#include "util/parse_num.h"
#include "engine/metrics.h"
#include "model/model_loader.h"
#include "model/model_runner.h"
#include "dynbatch/model.h"
#include "sched/shard_sched.h"
#include "engine/request.h"
#include "engine/request_pool.h"
#include "ipc/shm_segment.h"
#include "sched/slot_table.h"
#include "engine/stats.h"
#include "engine/request_text.h"
#include "text/text_tokenizer.h"
#include "sched/wait_policy.h"
#include "engine/wait_queue.h"
#include "text/stop_matcher.h"
#include "shard/worker_pool.h"
#include "shard/worker_supervisor.h"

#define ENGINE_PROGRESS_NS (250ull * 1000 * 1000)
#define ENGINE_ABANDON_NS (1000ull * 1000 * 1000)	/* after a 2nd signal */






void engine_fail(struct engine *e, const char *fmt, ...)
{
	va_list ap;

	if (e->failed)
		return;
	e->failed = true;
	va_start(ap, fmt);
	vsnprintf(e->fail_msg, sizeof(e->fail_msg), fmt, ap);
	va_end(ap);
	LOG(LOG_ERROR, "%s", e->fail_msg);
}

/* ------------------------------------------------------------------------
 * Results
 * ---------------------------------------------------------------------- */

/* Take handle out of the list it is in (its place is RESUMING or
 * AT_ONCE). */
static void engine_unlist(uint32_t *list, uint32_t *n, uint32_t handle)
{
	for (uint32_t i = 0; i < *n; i++) {
		if (list[i] != handle)
			continue;
		(*n)--;
		memmove(list + i, list + i + 1, (*n - i) * sizeof(uint32_t));
		return;
	}
}

/* Take handle out of the resume line (it is RESUMING). */
void engine_unresume(struct engine *e, uint32_t handle)
{
	engine_unlist(e->resume, &e->n_resume, handle);
}

/* Leave wherever the request is, freeing its slot (stale results for it
 * are rejected: the slot is no longer ACTIVE, or has a new generation). */
void engine_unplace(struct engine *e, uint32_t handle,
		    struct live_request *lr, uint64_t now)
{
	switch (lr->place) {
	case LIVE_QUEUED:	/* a client gave up waiting: O(queue) */
		wait_queue_remove(&e->queue, handle);
		break;
	case LIVE_UNPLACED:
		break;
	case LIVE_AT_ONCE:
		engine_unlist(e->at_once, &e->n_at_once, handle);
		break;
	case LIVE_ACTIVE:
		shard_drop_slot(&e->sched, lr->slot);
		slot_table_release(&e->slots, lr->slot);
		e->slot_freed_ns[lr->slot] = now;
		lr->slot = REQUEST_NONE;
		break;
	case LIVE_RESUMING:
		engine_unresume(e, handle);
		/* fall through */
	case LIVE_PAUSED:
		e->n_paused--;
		break;
	}
}

/* Free the ended choice handle, taking it out of its ring of choices;
 * if it held the request's id, a live choice takes the id over. */
static void engine_leave_ring(struct engine *e, uint32_t handle,
			      struct live_request *lr)
{
	uint32_t next = lr->next_choice, prev = handle;
	bool held = lr->id_held;

	while (request_pool_get(&e->pool, prev)->next_choice != handle)
		prev = request_pool_get(&e->pool, prev)->next_choice;
	request_pool_get(&e->pool, prev)->next_choice = next;
	request_pool_free(&e->pool, handle);	/* drops the id if held */
	if (held && next != handle) {
		request_pool_get(&e->pool, next)->id_held = true;
		request_pool_add_id(&e->pool, next);
	}
}

/*
 * Answer live request handle (the front end's on_finish) and release it
 * and whatever place it holds.  The only way a live request ends, so each
 * gets exactly one answer.
 */
void engine_finish(struct engine *e, uint32_t handle,
			  enum finish_reason reason, const char *error)
{
	struct live_request *lr = request_pool_get(&e->pool, handle);
	uint64_t now = clock_now_ns();
	const int32_t *tokens = NULL;
	struct frontend_result result;
	const char *text = NULL;
	size_t text_len = 0;
	uint32_t n = 0;

	if (!lr)
		return;
	/* With workers every committed token is kept beside the request (a
	 * worker writes the slot's copy, so that one is not trusted); the
	 * in-process engine of run mode reads its own slot. */
	if (lr->generated)
		tokens = lr->generated;
	else if (lr->slot != REQUEST_NONE)
		tokens = slot_table_tokens(&e->slots, lr->slot) + lr->req.n_prompt;
	if (tokens) {
		n = lr->n_generated;
		if (reason == FINISH_STOP && !lr->req.include_stop)
			n -= lr->stop_len;
	}
	e->stats.n_finished[reason]++;
	if (lr->has_text && !text_stream_done(&lr->text)) {
		struct text_push_result tr;

		request_text_finish(lr, 0, &tr);	/* what is held is final */
	}
	if (lr->has_text)
		text = request_text_get(lr, &text_len);
	result = (struct frontend_result){
		.req = &lr->req,
		.reason = reason,
		.error = error,
		.tokens = tokens,
		.n_tokens = n,
		.n_generated = lr->n_generated,
		.logprobs = lr->logprobs,
		.has_seed = lr->req.sampling.temperature > 0.0f,
		.seed = lr->req.sampling.seed,
		.has_text = lr->has_text,
		.text = text,
		.text_len = text_len,
		.n_given = lr->n_final,
		.text_given = lr->text_given < text_len ? lr->text_given : text_len,
	};
	e->fe.ops->on_finish(e->fe.ctx, lr->cookie, &result);
	/* latency of requests that ran (max_tokens 0 never did) */
	if ((reason == FINISH_STOP || reason == FINISH_LENGTH) && lr->req.max_tokens) {
		stats_record_latency(&e->stats, now - lr->admitted_ns);
		histogram_record(&e->request_hist, now - lr->admitted_ns);
	}
	engine_unplace(e, handle, lr, now);
	engine_leave_ring(e, handle, lr);
}

/* Answer the requests that have nothing to generate (max_tokens 0), in
 * the order they came.  Returns true if there were any. */
static bool engine_finish_at_once(struct engine *e)
{
	uint32_t n = e->n_at_once;

	/* on_finish never re-enters the engine: the list stays as it is */
	for (uint32_t i = 0; i < n; i++) {
		struct live_request *lr = request_pool_get(&e->pool, e->at_once[i]);

		if (lr)
			lr->place = LIVE_UNPLACED;
		engine_finish(e, e->at_once[i], FINISH_LENGTH, NULL);
	}
	e->n_at_once = 0;
	return n > 0;
}

/* Finish every request in the waiting queue, oldest first (popping each
 * keeps this linear: a request finished in place is searched for). */
static void engine_finish_waiting(struct engine *e, enum finish_reason reason,
				  const char *error)
{
	uint32_t handle;

	while (!wait_queue_pop(&e->queue, &handle)) {
		struct live_request *lr = request_pool_get(&e->pool, handle);

		if (lr)
			lr->place = LIVE_UNPLACED;
		engine_finish(e, handle, reason, error);
	}
}

/* Finish every live request (waiting, active or paused) with reason. */
void engine_finish_all(struct engine *e, enum finish_reason reason,
			const char *error)
{
	engine_finish_waiting(e, reason, error);
	for (uint32_t h = 0; h < e->pool.capacity; h++)
		if (request_pool_get(&e->pool, h))
			engine_finish(e, h, reason, error);
}

/* ------------------------------------------------------------------------
 * Signals, I/O events
 * ---------------------------------------------------------------------- */

/* The front end says (and logs) how the first signal drains. */
static void engine_on_signal(struct engine *e, int signo)
{
	e->n_signals++;
	e->sup.stopping = true;		/* workers' exits are expected now */
	if (e->n_signals == 1) {
		if (!e->fe.ops->on_signal(e->fe.ctx, signo))
			engine_finish_waiting(e, FINISH_CANCELLED, NULL);
		return;
	}
	LOG(LOG_WARN, "%s again: cancelling every request", strsignal(signo));
	engine_finish_all(e, FINISH_CANCELLED, NULL);
	/* From now on the front end gets ENGINE_ABANDON_NS to write what it
	 * holds: an output nobody reads must not keep us for ever. */
	if (!e->abandon_at_ns)
		e->abandon_at_ns = clock_now_ns() + ENGINE_ABANDON_NS;
}

static void engine_on_signalfd(struct io_op *op, int32_t res)
{
	struct engine *e = op->arg;

	if (res == (int32_t)sizeof(e->sig_buf))
		engine_on_signal(e, (int)e->sig_buf.ssi_signo);
	io_ring_read(&e->io, e->sig_fd, &e->sig_buf, sizeof(e->sig_buf), &e->sig_op);
}

/* ------------------------------------------------------------------------
 * Applying results (the scheduler returns data; placing: engine_refill.c)
 * ---------------------------------------------------------------------- */

/* One round for a shard with a worker, after its results were read:
 * refill its reusable free slots and publish its rows if they changed. */
void engine_advance(struct engine *e, struct shard *s)
{
	shard_note_adopted(&e->sched, s);
	if (!engine_preempt(e, s)) {
		engine_fair_preempt(e, s);
		engine_refill(e, s);
	}
	shard_dispatch(&e->sched, s);
}

/* Apply each checked row of a result, one at a time: the scheduler checks
 * the next row against the slot as this one left it.  The one commit path
 * of worker results and in-process steps. */
static void engine_apply_result(struct engine *e, struct shard *s,
				struct shard_result *r)
{
	struct shard_action a;

	while (shard_result_next(&e->sched, s, r, &a)) {
		if (a.kind == SHARD_ACT_REFUSE)
			engine_refuse(e, a.slot, a.why);
		else
			engine_commit_token(e, a.slot, a.token, a.lp);
	}
	shard_result_end(&e->sched, s, r);
}

/* Read and apply the shard's results.  True when any was read. */
static bool engine_poll_shard(struct engine *e, struct shard *s)
{
	struct shard_result r;
	struct shard_poll p;

	if (!shard_poll_begin(&e->sched, s, &p))
		return false;
	while (shard_poll_next(&e->sched, s, &p, &r)) {
		engine_apply_result(e, s, &r);
		shard_poll_after(&e->sched, s, &p, &r);
		if (r.timed)
			histogram_record(&e->step_hist, r.took_ns);
	}
	return shard_poll_end(&e->sched, s, &p);
}

/* --workers 0: refill the shard, run one step on its rows right here
 * and apply it.  True when a step ran. */
static bool engine_step_in_process(struct engine *e, struct shard *s)
{
	struct shard_result r = { 0 };
	int ret;

	bool preempted = engine_preempt(e, s);

	if (!preempted) {
		engine_fair_preempt(e, s);
		engine_refill(e, s);
	}
	ret = shard_step_in_process(&e->sched, s, &r);
	if (r.timed)
		histogram_record(&e->step_hist, r.took_ns);
	if (ret < 0) {	/* no worker to isolate the request in: give up */
		engine_give_up(e, "model failed: %s", strerror(-ret));
		return false;
	}
	if (!ret)
		return preempted;	/* its blocks are back: try again */
	engine_apply_result(e, s, &r);
	return true;
}

/* ------------------------------------------------------------------------
 * The loop
 * ---------------------------------------------------------------------- */

/* The counts the supervisor keeps, into the stats the engine prints. */
static void engine_sync_stats(struct engine *e)
{
	e->stats.n_worker_starts = e->sup.n_worker_starts;
	e->stats.n_worker_deaths = e->sup.n_worker_deaths;
	e->stats.n_hang_kills = e->sup.n_hang_kills;
	e->stats.n_fruitless_kills = e->sup.n_fruitless_kills;
	e->stats.n_stale = e->sched.counts.n_stale;
	e->stats.n_discarded = e->sched.counts.n_discarded;
	e->stats.n_steps = e->sched.counts.n_steps;
	e->stats.n_step_rows = e->sched.counts.n_step_rows;
	e->stats.n_step_capacity = e->sched.counts.n_step_capacity;
	e->stats.model_ns = e->sched.counts.model_ns;
	e->stats.step_ns = e->sched.counts.step_ns;
	e->stats.n_dozes = e->sched.counts.n_dozes;
	e->stats.spec = (struct stats_spec){
		.on = e->spec_emit > 1,
		.drafted = e->sched.counts.spec.drafted,
		.accepted = e->sched.counts.spec.accepted,
		.emitted = e->sched.counts.spec.emitted,
		.verify_rows = e->sched.counts.spec.rows,
		.target_steps = e->sched.counts.spec.steps,
		.draft_ns = e->sched.counts.spec.draft_ns,
		.verify_ns = e->sched.counts.spec.verify_ns };
	engine_sync_kv_stats(e);
}

/* Done: nothing live, and the front end has no more input or output. */
static bool engine_done(const struct engine *e)
{
	return e->failed || (!e->pool.n_live && (e->fe.ops->done(e->fe.ctx) ||
		(e->abandon_at_ns && clock_now_ns() >= e->abandon_at_ns)));
}

static void engine_loop(struct engine *e)
{
	struct sched_waiter waiter = { .io = &e->io, .spin_us = e->cfg->spin_us,
				       .before_sleep = e->fe.ops->before_sleep,
				       .after_sleep = e->fe.ops->after_sleep,
				       .ctx = e->fe.ctx };

	while (!engine_done(e)) {
		bool progress = false;
		uint64_t now, deadline;
		int ret;

		while ((ret = io_ring_dispatch(&e->io)) > 0)
			progress = true;
		if (ret < 0)
			engine_fail(e, "io_uring: %s", strerror(-ret));
		if (e->failed)
			break;
		progress |= e->fe.ops->pump(e->fe.ctx);
		progress |= engine_finish_at_once(e);
		for (uint32_t i = 0; i < e->n_shards; i++) {
			struct shard *s = &e->sched.shards[i];

			if (e->in_process) {
				progress |= engine_step_in_process(e, s);
				continue;
			}
			progress |= engine_poll_shard(e, s);
			if (worker_sup_running(&e->sup, i) &&
			    (s->redispatch || s->n_active < s->n_slots ||
			     sched_kv_starved(&e->sched.kv, s->index) ||
			     engine_fair_due(e))) {
				uint64_t sent = s->chan.issued_id;

				engine_advance(e, s);
				progress |= s->chan.issued_id != sent;
			}
		}
		now = clock_now_ns();
		deadline = engine_check_workers(e, now);
		if (e->fe.ops->tick) {
			uint64_t t = e->fe.ops->tick(e->fe.ctx, now);

			if (t < deadline)
				deadline = t;
		}
		if (e->progress_on && now - e->last_progress_ns >= ENGINE_PROGRESS_NS) {
			engine_sync_stats(e);
			stats_print_progress(&e->stats, now, wait_queue_len(&e->queue),
					     e->slots.n_busy, stderr);
			e->last_progress_ns = now;
		}
		if (e->abandon_at_ns && e->abandon_at_ns < deadline)
			deadline = e->abandon_at_ns;
		if (e->progress_on && now + ENGINE_PROGRESS_NS < deadline)
			deadline = now + ENGINE_PROGRESS_NS;
		progress |= e->fe.ops->pump(e->fe.ctx);
		if (io_ring_submit(&e->io))
			engine_fail(e, "io_uring submit failed");
		if (!progress && !engine_done(e) &&
		    (ret = sched_wait(&e->sched, &waiter, deadline)))
			engine_fail(e, "io_uring wait: %s", strerror(-ret));
	}
}

/* ------------------------------------------------------------------------
 * Setup and teardown
 * ---------------------------------------------------------------------- */

static int engine_setup_shards(struct engine *e)
{
	struct worker_sup_config wc = {
		.worker_path = e->worker_path,
		.model_spec = e->worker_spec,
		.spin_us = e->cfg->spin_us,
		.garbage_every = e->cfg->garbage_every,
		.nice = e->cfg->worker_nice,
		.step_timeout_ms = e->cfg->step_timeout_ms,
		.start_timeout_ms = e->cfg->start_timeout_ms,
	};

	if (worker_sup_init(&e->sup, &wc, &e->io, &e->seg, e->n_shards) ||
	    sched_init(&e->sched, &e->seg, &e->slots, &e->sup, e->n_shards,
		       e->cfg->n_slots, e->cfg->step_tokens))
		return -ENOMEM;
	e->sched.vocab = e->vocab;
	e->sched.in_process = e->in_process;
	e->sched.policy_static = e->cfg->policy_static;
	e->sched.step_timeout_ms = e->cfg->step_timeout_ms;
	for (uint32_t i = 0; i < e->n_shards; i++) {
		e->sup.w[i].chan = &e->sched.shards[i].chan;
		e->sup.w[i].exit_op = (struct io_op){ engine_on_exit_poll, e };
	}
	return 0;
}

static void engine_teardown(struct engine *e)
{
	sched_destroy(&e->sched);
	worker_sup_destroy(&e->sup);
	free(e->at_once);
	free(e->resume);
	io_ring_exit(&e->io);
	if (e->sig_fd >= 0)
		close(e->sig_fd);
	request_pool_release(&e->pool);
	wait_queue_release(&e->queue);
	slot_table_release_all(&e->slots);
	shm_segment_destroy(&e->seg);
	free(e->slot_freed_ns);
	free(e->worker_spec);
	model_runner_destroy(e->runner);
	engine_grammar_free(e);
	kv_pool_unmap(&e->kv_pool);
	model_close(e->model);
	text_tokenizer_free(e->tok);
	free(e->chat_template);
	engine_fair_free(e);
}

/* After a failure: every live request gets an error answer (the front
 * end writes what it still holds when it is destroyed). */
static void engine_fail_all(struct engine *e)
{
	char msg[320];

	snprintf(msg, sizeof(msg), "engine failed: %s", e->fail_msg);
	engine_finish_all(e, FINISH_ERROR, msg);
}

/* Print the summary and write --stats.  0, or -1 when the stats file
 * could not be written (the run then fails: its caller asked for it). */
static int engine_finish_stats(struct engine *e)
{
	struct rusage ru;
	int ret;

	e->stats.end_ns = clock_now_ns();
	engine_sync_stats(e);
	if (!getrusage(RUSAGE_SELF, &ru)) {
		e->stats.cpu_user_us = (uint64_t)ru.ru_utime.tv_sec * 1000000 +
				       (uint64_t)ru.ru_utime.tv_usec;
		e->stats.cpu_sys_us = (uint64_t)ru.ru_stime.tv_sec * 1000000 +
				      (uint64_t)ru.ru_stime.tv_usec;
		e->stats.max_rss_kb = (uint64_t)ru.ru_maxrss;
	}
	if (e->progress_on)
		fprintf(stderr, "\r\033[K");
	stats_print_summary(&e->stats, stderr);
	if (!e->cfg->stats_path)
		return 0;
	ret = stats_write_json(&e->stats, e->cfg->stats_path);
	if (!ret)
		return 0;
	fprintf(stderr, "dynbatch: --stats %s: cannot write the summary: %s\n",
		e->cfg->stats_path, strerror(-ret));
	return -1;
}

/* After a clean run every slot is free and every structure consistent;
 * anything else is a leak or a bookkeeping bug, and fails the run. */
static void engine_check_invariants(struct engine *e)
{
	if (slot_table_check(&e->slots) || request_pool_check(&e->pool) ||
	    wait_queue_check(&e->queue))
		engine_fail(e, "internal check failed at exit: slot table, request "
			    "pool or waiting queue inconsistent");
	else if (e->pool.n_live || e->slots.n_busy || wait_queue_len(&e->queue) ||
		 e->n_paused || e->n_resume)
		engine_fail(e, "internal check failed at exit: %u live requests, %u "
			    "busy slots, %u waiting, %u paused", e->pool.n_live,
			    e->slots.n_busy, wait_queue_len(&e->queue), e->n_paused);
	for (uint32_t i = 0; i < e->n_shards && !e->failed; i++)
		if (e->sched.shards[i].n_active)	/* run-ahead's count of ACTIVE rows */
			engine_fail(e, "internal check failed at exit: shard %u still "
				    "counts %u active slots", i, e->sched.shards[i].n_active);
}

/* Everything up to the first worker start.  Returns an exit status. */
static int engine_setup(struct engine *e)
{
	const struct engine_config *cfg = e->cfg;
	struct shm_params p;
	sigset_t sigs;
	int ret;

	e->in_process = cfg->n_workers == 0;
	e->n_shards = e->in_process ? 1 :
		      (cfg->n_workers < cfg->n_slots ? cfg->n_workers : cfg->n_slots);
	if (!e->in_process && cfg->n_workers > cfg->n_slots)
		LOG(LOG_INFO, "%u workers for %u slots: starting %u", cfg->n_workers,
		    cfg->n_slots, e->n_shards);
	if (!e->in_process && (ret = worker_find_path(e->worker_path,
						      sizeof(e->worker_path)))) {
		fprintf(stderr, "dynbatch: cannot find dynbatch-worker%s%s: %s "
			"(set DYNBATCH_WORKER to its path)\n",
			e->worker_path[0] ? " at " : "", e->worker_path,
			strerror(-ret));
		return ENGINE_EXIT_FAILED;
	}
	/* Workers run untrusted plugins as the same user: none may ptrace
	 * us, or open our descriptors (the output, other workers' pipes) or
	 * memory through /proc.  Before the probe: it runs a plugin too. */
	prctl(PR_SET_DUMPABLE, 0);
	ret = engine_open_model(e);
	if (ret == ENGINE_EXIT_OK)
		ret = engine_size_kv(e);
	if (ret != ENGINE_EXIT_OK)
		return ret;
	p = (struct shm_params){ .n_slots = cfg->n_slots, .n_shards = e->n_shards,
				 .max_context = e->max_context,
				 .vocab = e->vocab,
				 .kv_block_tokens = engine_block_tokens(e),
				 .kv_blocks = e->kv_blocks,
				 .emit_per_row = e->spec_emit,
				 .grammar_source_max = engine_grammar_table_bytes(e) ?
						       cfg->grammar_max_bytes : 0,
				 .vocab_table_bytes = engine_grammar_table_bytes(e) };
	ret = shm_segment_create(&e->seg, &p);
	if (ret) {
		fprintf(stderr, "dynbatch: cannot create the shared segment: %s\n",
			strerror(-ret));
		return ENGINE_EXIT_FAILED;
	}
	if (slot_table_init(&e->slots, &e->seg) ||
	    request_pool_init(&e->pool, cfg->queue_capacity + cfg->n_slots) ||
	    wait_queue_init(&e->queue, cfg->queue_capacity) ||
	    engine_setup_shards(e) || engine_setup_kv(e))
		goto nomem;
	e->slot_freed_ns = calloc(cfg->n_slots, sizeof(uint64_t));
	e->resume = calloc(e->pool.capacity, sizeof(uint32_t));
	e->at_once = calloc(e->pool.capacity, sizeof(uint32_t));
	if (!e->resume || !e->at_once || !e->slot_freed_ns)
		goto nomem;
	/* seeds the engine picks: a new sequence every run */
	if (getrandom(&e->seed_state, sizeof(e->seed_state), 0) !=
	    sizeof(e->seed_state))
		e->seed_state = clock_now_ns() ^ ((uint64_t)getpid() << 32);
	if (e->in_process) {
		char err[256];

		if (!e->kv_bytes_per_token) {
			e->runner = model_runner_create(e->model, cfg->n_slots,
							e->max_context, err,
							sizeof(err));
		} else if (!(ret = kv_pool_map(&e->kv_pool, e->kv_blocks,
					       engine_block_tokens(e),
					       e->kv_bytes_per_token, err,
					       sizeof(err)))) {
			e->runner = model_runner_create_paged(e->model, cfg->n_slots,
							      e->max_context,
							      &e->kv_pool, err,
							      sizeof(err));
		}
		e->sched.runner = e->runner;
		if (!e->runner) {
			fprintf(stderr, "dynbatch: --model: %s\n", err);
			return ret ? ENGINE_EXIT_FAILED : ENGINE_EXIT_USAGE;
		}
		if (e->spec_emit > 1) {
			struct spec_config sc = cfg->spec;

			sc.max_draft = e->spec_emit - 1;
			model_runner_set_spec(e->runner, &sc);
		}
	}

	if (engine_setup_grammar(e))
		goto nomem;
	ret = engine_load_grammar_file(e);
	if (ret != ENGINE_EXIT_OK)
		return ret;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);	/* a closed socket or pipe is an error code */
	e->sig_fd = signalfd(-1, &sigs, SFD_CLOEXEC);
	if (e->sig_fd < 0) {
		fprintf(stderr, "dynbatch: signalfd: %s\n", strerror(errno));
		return ENGINE_EXIT_FAILED;
	}
	ret = io_ring_init(&e->io, 64 + 2 * e->n_shards + cfg->io_entries);
	if (ret) {
		fprintf(stderr, "dynbatch: io_uring: %s\n", strerror(-ret));
		return ENGINE_EXIT_FAILED;
	}
	e->sig_op = (struct io_op){ engine_on_signalfd, e };
	io_ring_read(&e->io, e->sig_fd, &e->sig_buf, sizeof(e->sig_buf), &e->sig_op);
	e->progress_on = cfg->progress > 0 || (cfg->progress < 0 && isatty(STDERR_FILENO));
	return ENGINE_EXIT_OK;
nomem:
	fprintf(stderr, "dynbatch: out of memory\n");
	return ENGINE_EXIT_FAILED;
}

struct engine *engine_create(const struct engine_config *cfg, int *status)
{
	struct engine *e = calloc(1, sizeof(*e));

	if (!e) {
		fprintf(stderr, "dynbatch: out of memory\n");
		*status = ENGINE_EXIT_FAILED;
		return NULL;
	}
	e->cfg = cfg;
	e->sig_fd = -1;
	e->stats.start_ns = clock_now_ns();
	*status = engine_setup(e);
	if (*status != ENGINE_EXIT_OK) {
		engine_destroy(e);
		return NULL;
	}
	return e;
}

struct io_ring *engine_io(struct engine *e)
{
	return &e->io;
}

void engine_set_frontend(struct engine *e, const struct frontend_ops *ops,
			 void *ctx)
{
	e->fe = (struct frontend){ ops, ctx };
}

int engine_run(struct engine *e)
{
	int status = ENGINE_EXIT_OK;

	for (uint32_t i = 0; i < e->n_shards && !e->in_process; i++)
		engine_start_worker(e, &e->sched.shards[i]);
	engine_loop(e);
	if (!e->failed)
		engine_check_invariants(e);
	if (e->failed) {
		engine_fail_all(e);
		fprintf(stderr, "dynbatch: %s\n", e->fail_msg);
		status = ENGINE_EXIT_FAILED;
	} else if (e->gave_up) {
		fprintf(stderr, "dynbatch: %s\n", e->fail_msg);
		status = ENGINE_EXIT_FAILED;
	}
	if (engine_finish_stats(e))
		status = ENGINE_EXIT_FAILED;
	return status;
}

void engine_destroy(struct engine *e)
{
	if (!e)
		return;
	engine_teardown(e);
	free(e);
}

void engine_quiet_workers(struct engine *e)
{
	e->sup.stderr_null = true;
}

bool engine_has_room(const struct engine *e)
{
	/* With workers lost, engine_submit() answers -EIO at once: room. */
	return !e->n_signals && !e->failed &&
	       !wait_queue_full(&e->queue) && !request_pool_full(&e->pool);
}

uint32_t engine_n_waiting(const struct engine *e)
{
	return wait_queue_len(&e->queue);
}

uint32_t engine_max_context(const struct engine *e)
{
	return e->max_context;
}

const struct text_tokenizer *engine_tokenizer(const struct engine *e)
{
	return e->tok;
}

const char *engine_chat_template(const struct engine *e)
{
	return e->chat_template;
}

bool engine_has_logits(const struct engine *e)
{
	return e->has_logits;
}

uint32_t engine_vocab(const struct engine *e)
{
	return e->vocab;
}

void engine_note_answered(struct engine *e, enum finish_reason reason)
{
	e->stats.n_finished[reason]++;
}

void engine_fail_frontend(struct engine *e, const char *fmt, ...)
{
	char msg[sizeof(e->fail_msg)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	engine_fail(e, "%s", msg);
}

/* Healthy: a worker is ready, and no shard has given up (a shard that
 * cannot keep a worker alive serves nothing: somebody must look). */
bool engine_healthy(const struct engine *e)
{
	bool ready = false;

	/* gave_up: the in-process engine's model failed, so every request
	 * from now on gets 503: a load balancer must hear it too */
	if (e->failed || e->gave_up)
		return false;
	if (e->in_process)
		return true;
	for (uint32_t i = 0; i < e->n_shards; i++) {
		if (worker_sup_lost(&e->sup, i))
			return false;
		ready |= worker_sup_running(&e->sup, i) && worker_sup_ready(&e->sup, i);
	}
	return ready;
}

/* Counted, not derived from n_busy: /metrics shows busy + free = batch
 * as a check, not as arithmetic. */
static uint32_t engine_count_free_slots(const struct engine *e)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < e->slots.n_slots; i++)
		n += e->slots.slots[i].state == SHM_SLOT_FREE;
	return n;
}

int engine_metrics(const struct engine *e, struct strbuf *out)
{
	const struct engine_stats *st = &e->stats;
	char labels[64];
	int ret = 0;

	for (int r = 0; r < FINISH_N && !ret; r++) {
		snprintf(labels, sizeof(labels), "finish_reason=\"%s\"",
			 finish_reason_names[r]);
		ret = metrics_counter(out, "dynbatch_requests_total", r ? NULL :
				      "Finished requests by finish reason.", labels,
				      st->n_finished[r]);
	}
	ret = ret ? ret : metrics_counter(out, "dynbatch_generation_tokens_total",
			"Tokens generated (committed).", NULL, st->n_tokens);
	ret = ret ? ret : metrics_counter(out, "dynbatch_prompt_tokens_total",
			"Prompt tokens of admitted requests.", NULL, e->n_prompt_tokens);
	ret = ret ? ret : metrics_gauge(out, "dynbatch_queue_depth",
			"Requests in the waiting queue.", wait_queue_len(&e->queue));
	ret = ret ? ret : metrics_gauge(out, "dynbatch_slots_busy",
			"Batch slots holding a request.", e->slots.n_busy);
	ret = ret ? ret : metrics_gauge(out, "dynbatch_slots_free",
			"Batch slots free, counted slot by slot.", engine_count_free_slots(e));
	ret = ret ? ret : metrics_gauge(out, "dynbatch_slots_total",
			"Batch slots (--batch).", e->slots.n_slots);
	ret = ret ? ret : metrics_gauge(out, "dynbatch_requests_live",
			"Requests admitted and not finished.", e->pool.n_live);
	ret = ret ? ret : metrics_gauge(out, "dynbatch_requests_paused",
			"Requests parked while their client reads slowly.", e->n_paused);
	ret = ret ? ret : metrics_counter(out, "dynbatch_stale_results_rejected_total",
			"Worker results rejected as invalid (garbled, out of range).",
			NULL, e->sched.counts.n_stale);
	ret = ret ? ret : metrics_counter(out, "dynbatch_runahead_rows_discarded_total",
			"Result rows run ahead and made obsolete (request ended, reset).",
			NULL, e->sched.counts.n_discarded);
	ret = ret ? ret : metrics_counter(out, "dynbatch_worker_fruitless_kills_total",
			"Workers killed for results that kept committing nothing.",
			NULL, e->sup.n_fruitless_kills);
	ret = ret ? ret : metrics_counter(out, "dynbatch_worker_restarts_total",
			"Worker processes started to replace one that exited.", NULL,
			e->sup.n_worker_starts > e->n_shards && !e->in_process ?
			e->sup.n_worker_starts - e->n_shards : 0);
	ret = ret ? ret : metrics_counter(out, "dynbatch_worker_deaths_total",
			"Worker processes that exited.", NULL, e->sup.n_worker_deaths);
	ret = ret ? ret : metrics_counter(out, "dynbatch_model_steps_total",
			"Model steps completed.", NULL, e->sched.counts.n_steps);
	ret = ret ? ret : engine_kv_metrics(e, out);
	if (wait_queue_classed(&e->queue))	/* tenants: engine_fair.c */
		ret = ret ? ret : metrics_counter(out, "dynbatch_tenant_preemptions_total",
				"Requests that gave their slot to a tenant under its share.",
				NULL, e->n_fair_preemptions);
	ret = ret ? ret : metrics_histogram(out, "dynbatch_step_seconds",
			"Model step latency, dispatch to result.", &e->step_hist);
	ret = ret ? ret : metrics_histogram(out, "dynbatch_request_seconds",
			"Request latency, admission to last token.", &e->request_hist);
	ret = ret ? ret : metrics_histogram(out, "dynbatch_time_to_first_token_seconds",
			"Admission to first generated token.", &e->ttft_hist);
	return ret ? -ENOMEM : 0;
}
