/*
 * engine.c - the coordinator's scheduler and event loop; see engine.h.
 *
 * NOTES ON THE DESIGN
 *
 * The engine is three files: this one (requests from admission to
 * their answer, the workers' lives, signals, the loop), shard_sched.c
 * (the shard scheduler: refill, dispatch, commit, run-ahead) and
 * wait_policy.c (spin, doze or sleep when a round made no progress).
 * They share struct engine and struct shard through engine_internal.h.
 *
 * Trust.  Everything the coordinator must trust lives in its private
 * memory: the slot table's private copy, the request pool with every
 * committed token, and for each shard the rows of the last dispatches it
 * sent, by dispatch id.  A result record is read field by field, once,
 * into locals and accepted only if its sequence number and dispatch id
 * (one sent to this worker), row count, each row's slot, generation and
 * position and the token's range all match (shard_poll(), shard_commit()
 * in shard_sched.c); anything else is dropped and
 * the affected rows are extended again.  A row the run-ahead made obsolete
 * (its request ended, a reset sent the worker back) is counted as
 * discarded, anything else as stale: a fault-free run has no stale
 * result.  A sequence number or a dispatch id we did not send makes the
 * whole result garbled (a reset).  Progress is a committed row: a worker
 * whose results commit nothing SHARD_MAX_FRUITLESS times in a row is
 * killed without blame and its requests move to other shards.
 *
 * Faults.  A worker's exit shows up as its pidfd becoming readable on the
 * io_uring loop.  What it left in the result ring is drained as stale, the
 * channel is reset, the shard's token buffers are rewritten from our own
 * copies, and a replacement is started from the committed lengths, with
 * back-off when starts keep failing.
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
#include "engine.h"
#include "engine_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "frontend.h"
#include "io_ring.h"
#include "log.h"
#include "log_escape.h"
#include "log_limit.h"
#include "metrics.h"
#include "model_loader.h"
#include "model_probe.h"
#include "shard_sched.h"
#include "request.h"
#include "request_pool.h"
#include "shm_segment.h"
#include "slot_table.h"
#include "stats.h"
#include "stop_matcher.h"
#include "wait_policy.h"
#include "wait_queue.h"
#include "worker_pool.h"

#define ENGINE_RESTART_MAX_NS (1000ull * 1000 * 1000)
#define ENGINE_PROGRESS_NS (250ull * 1000 * 1000)
#define ENGINE_ABANDON_NS (1000ull * 1000 * 1000)	/* after a 2nd signal */
#define ENGINE_READY_POLL_NS (10ull * 1000 * 1000)








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
static void engine_unresume(struct engine *e, uint32_t handle)
{
	engine_unlist(e->resume, &e->n_resume, handle);
}

/* Leave wherever the request is, freeing its slot (stale results for it
 * are rejected: the slot is no longer ACTIVE, or has a new generation). */
static void engine_unplace(struct engine *e, uint32_t handle,
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
		shard_drop_slot(e, lr->slot);
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
	result = (struct frontend_result){
		.req = &lr->req,
		.reason = reason,
		.error = error,
		.tokens = tokens,
		.n_tokens = n,
		.n_generated = lr->n_generated,
	};
	e->fe.ops->on_finish(e->fe.ctx, lr->cookie, &result);
	/* latency of requests that ran (max_tokens 0 never did) */
	if ((reason == FINISH_STOP || reason == FINISH_LENGTH) && lr->req.max_tokens) {
		stats_record_latency(&e->stats, now - lr->admitted_ns);
		histogram_record(&e->request_hist, now - lr->admitted_ns);
	}
	engine_unplace(e, handle, lr, now);
	request_pool_free(&e->pool, handle);
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
static void engine_finish_all(struct engine *e, enum finish_reason reason,
			      const char *error)
{
	engine_finish_waiting(e, reason, error);
	for (uint32_t h = 0; h < e->pool.capacity; h++)
		if (request_pool_get(&e->pool, h))
			engine_finish(e, h, reason, error);
}

/* ------------------------------------------------------------------------
 * Committed tokens (the scheduler, shard_sched.c, calls these)
 * ---------------------------------------------------------------------- */

/*
 * Hand the front end the request's tokens that became final: those no
 * stop sequence can take back any more (the ones that may still be the
 * start of a stop are held back until the match fails).
 */
static void engine_release_final(struct engine *e, struct live_request *lr)
{
	uint32_t final = lr->n_generated - stop_matcher_pending(lr->req.stops,
								lr->matcher_state);
	const int32_t *tokens;

	if (final <= lr->n_final)
		return;
	tokens = lr->generated ? lr->generated :
		 slot_table_tokens(&e->slots, lr->slot) + lr->req.n_prompt;
	e->fe.ops->on_tokens(e->fe.ctx, lr->cookie, &lr->req, tokens + lr->n_final,
			     final - lr->n_final);
	lr->n_final = final;
}

/* Commit one validated token to the request in slot; finish it if done. */
void engine_commit_token(struct engine *e, uint32_t slot, int32_t token)
{
	uint32_t handle = e->slots.slots[slot].request_handle;
	struct live_request *lr = request_pool_get(&e->pool, handle);
	uint32_t match = 0;

	if (!lr || lr->slot != slot || lr->n_generated >= lr->req.max_tokens) {
		engine_fail(e, "slot %u lost its request", slot);
		return;
	}
	if (slot_table_commit(&e->slots, slot)) {
		engine_finish(e, handle, FINISH_ERROR, "context limit reached");
		return;
	}
	if (lr->generated)
		lr->generated[lr->n_generated] = token;
	if (!lr->n_generated)
		histogram_record(&e->ttft_hist, clock_now_ns() - lr->admitted_ns);
	lr->n_generated++;
	e->stats.n_tokens++;
	if (lr->req.stops) {
		lr->matcher_state = stop_matcher_feed(lr->req.stops, lr->matcher_state,
						      token, &match);
		if (match) {
			lr->stop_len = match;
			engine_finish(e, handle, FINISH_STOP, NULL);
			return;
		}
	}
	if (lr->n_generated >= lr->req.max_tokens)
		engine_finish(e, handle, FINISH_LENGTH, NULL);
	else if (e->fe.ops->on_tokens)
		engine_release_final(e, lr);
}

/* ------------------------------------------------------------------------
 * Workers
 * ---------------------------------------------------------------------- */

/* Back-off before the n-th restart in a row (n >= 1): 5 ms doubling to 1 s. */
static uint64_t restart_backoff_ns(uint32_t n)
{
	uint64_t ns = 5000000ull << (n - 1 < 8 ? n - 1 : 8);

	return ns < ENGINE_RESTART_MAX_NS ? ns : ENGINE_RESTART_MAX_NS;
}

/*
 * Move the shard's active requests to other shards: back to the head of
 * the line (the resume line, ahead of the waiting queue), with the tokens
 * they have, for any live shard to take (the model is a pure function of
 * the prefix, so they go on exactly).  For a shard that cannot keep a
 * worker alive (waiting for it would leave them waiting forever), and
 * after a worker was killed for its own misbehaviour (the next one may be
 * no better).  While draining they are cancelled instead, so that a shard
 * whose workers keep failing cannot hold the drain up.
 */
static void shard_move_requests(struct engine *e, struct shard *s, const char *why)
{
	uint64_t now = clock_now_ns();
	uint32_t moved = 0;

	for (uint32_t i = 0; i < s->n_slots; i++) {
		const struct slot_state *st = &e->slots.slots[s->first_slot + i];
		uint32_t handle = st->request_handle;
		struct live_request *lr;

		if (st->state != SHM_SLOT_ACTIVE ||
		    !(lr = request_pool_get(&e->pool, handle)))
			continue;
		if (e->n_signals) {
			engine_finish(e, handle, FINISH_CANCELLED, e->cfg->keep_running ?
				      "the server is shutting down" : NULL);
			continue;
		}
		engine_unplace(e, handle, lr, now);
		lr->place = LIVE_RESUMING;
		e->resume[e->n_resume++] = handle;	/* room: one per live request */
		e->n_paused++;
		moved++;
	}
	s->n_suspects = 0;
	if (moved)
		LOG(LOG_WARN, "shard %u: %s; its %u requests move to the other "
		    "shards", s->index, why, moved);
}

/*
 * A run that can no longer step stops trying but goes on answering:
 * every request, live or still to be read, gets its error line (the front
 * end's -EIO from engine_submit()), and the run exits 1.
 */
void engine_give_up(struct engine *e, const char *fmt, ...)
{
	char msg[sizeof(e->fail_msg) + 32];
	va_list ap;

	if (e->gave_up)
		return;
	va_start(ap, fmt);
	vsnprintf(e->fail_msg, sizeof(e->fail_msg), fmt, ap);
	va_end(ap);
	LOG(LOG_ERROR, "%s", e->fail_msg);
	snprintf(msg, sizeof(msg), "engine failed: %s", e->fail_msg);
	e->gave_up = e->workers_lost = true;
	engine_finish_all(e, FINISH_ERROR, msg);
}

/* A worker of this shard died before it was ready, or could not be
 * started at all.  When that keeps happening on every shard, give up. */
static void shard_note_failed_start(struct engine *e, struct shard *s,
				    const char *why)
{
	s->n_failed_starts++;
	if (s->n_failed_starts < ENGINE_MAX_FAILED_STARTS)
		return;
	{
		char lost[160];

		snprintf(lost, sizeof(lost), "no worker can be kept alive (last: %s)", why);
		shard_move_requests(e, s, lost);
	}
	for (uint32_t i = 0; i < e->n_shards; i++)
		if (e->shards[i].n_failed_starts < ENGINE_MAX_FAILED_STARTS)
			return;
	if (!e->cfg->keep_running && !e->gave_up) {
		engine_give_up(e, "no worker can be kept alive: %u starts in a row "
			       "failed on every shard (last: %s); check --model and "
			       "the worker's messages above", s->n_failed_starts, why);
		return;
	}
	if (e->gave_up)
		return;
	/* A server stays up (GET /health says 503) and keeps trying, but
	 * nobody should wait on it meanwhile. */
	if (!e->workers_lost) {
		char msg[256];

		LOG(LOG_ERROR, "no worker can be kept alive (last: %s); failing "
		    "requests until one starts", why);
		snprintf(msg, sizeof(msg), "no worker can be kept alive (last: %s)", why);
		e->workers_lost = true;
		engine_finish_all(e, FINISH_ERROR, msg);
	}
}

/*
 * Before a new worker starts on the shard (none runs now), once the shard
 * has a fresh object (shm_shard_renew: an empty channel, zeroed buffers):
 * nothing draining (the old worker writes nothing any more), the shard's
 * token buffers rewritten from our own copies of every active request's
 * prompt and committed tokens (the old worker could write them, so they
 * are not trusted), and a first dispatch with every ACTIVE slot.
 */
static void shard_new_epoch(struct engine *e, struct shard *s)
{
	s->first_pos = s->dispatch_pos;
	s->first_id = s->next_dispatch_id;
	s->issued_id = 0;
	memset(s->n_sent, 0, sizeof(s->n_sent));
	memset(s->sent_id, 0, sizeof(s->sent_id));
	s->redispatch = true;
	s->reset = false;
	s->reset_id = 0;
	s->resets_unanswered = 0;
	s->lockstep = 0;
	s->sent_lockstep = false;
	s->n_draining = 0;
	s->adopted_seen = s->dispatch_pos;
	for (uint32_t i = 0; i < s->n_slots; i++) {
		uint32_t slot = s->first_slot + i;
		const struct slot_state *st = &e->slots.slots[slot];
		const struct live_request *lr;

		e->slot_drain[slot] = 0;
		if (st->state != SHM_SLOT_ACTIVE)
			continue;
		lr = request_pool_get(&e->pool, st->request_handle);
		if (!lr || !lr->generated || st->n_prompt != lr->req.n_prompt ||
		    st->n_tokens != st->n_prompt + lr->n_generated) {
			engine_fail(e, "slot %u does not match its request", slot);
			continue;
		}
		/* the whole prefix: only a buggy worker writes below the
		 * committed length, but then the shard's next worker must
		 * not inherit it */
		if (st->n_prompt)
			memcpy(e->slots.tokens[slot], lr->req.prompt,
			       st->n_prompt * sizeof(int32_t));
		memcpy(e->slots.tokens[slot] + st->n_prompt, lr->generated,
		       lr->n_generated * sizeof(int32_t));
	}
}

/*
 * A fresh notification pipe for the shard's next worker: we keep the read
 * end (blocking, for io_uring), the worker gets the write end
 * (non-blocking: a full pipe means a wake-up is pending anyway).  A new
 * pipe per worker: whatever an old worker left behind holding its write
 * end writes into a pipe nobody reads.  0 or a negative errno.
 */
static int shard_open_notify(struct shard *s, int *write_end)
{
	int fds[2];

	if (pipe2(fds, O_CLOEXEC))
		return -errno;
	if (fcntl(fds[1], F_SETFL, O_NONBLOCK)) {
		int ret = -errno;

		close(fds[0]);
		close(fds[1]);
		return ret;
	}
	if (s->notify_rd >= 0)	/* a read still queued on it ends stale */
		close(s->notify_rd);
	s->notify_rd = fds[0];
	s->notify_epoch++;
	*write_end = fds[1];
	return 0;
}

static void engine_on_worker_notify(struct io_op *op, int32_t res);

/*
 * Read the shard's notification pipe (again).  Each read has an op of its
 * own that remembers the pipe's epoch, so a completion for an older pipe
 * (its worker gone) is told apart.  Such a read ends once every copy of
 * the old write end is closed; a process the old worker left behind may
 * keep one open, so after SHARD_NOTIFY_READS such reads the shard goes
 * without wake-ups (its results are still read on the loop's deadlines).
 */
static void shard_arm_notify(struct engine *e, struct shard *s)
{
	struct notify_read *r = NULL;

	for (uint32_t i = 0; i < SHARD_NOTIFY_READS && !r; i++)
		if (!s->notify_reads[i].inflight)
			r = &s->notify_reads[i];
	if (!r) {
		LOG(LOG_WARN, "shard %u: %u old notification pipes are still held "
		    "open; its worker's wake-ups are not read", s->index,
		    SHARD_NOTIFY_READS);
		return;
	}
	*r = (struct notify_read){ .op = { engine_on_worker_notify, e }, .shard = s,
				   .epoch = s->notify_epoch };
	if (!io_ring_read(&e->io, s->notify_rd, s->notify_buf, sizeof(s->notify_buf),
			  &r->op))
		r->inflight = true;
}

static int shard_start_worker(struct engine *e, struct shard *s)
{
	struct worker_spawn_args a = {
		.worker_path = e->worker_path,
		.shared_fd = e->seg.ro_fd,
		.shard_fd = -1,
		.notify_fd = -1,
		.shard = s->index,
		.model_spec = e->cfg->model_spec,
		.spin_us = e->cfg->spin_us,
		.garbage_every = e->cfg->garbage_every,
		.nice = e->cfg->worker_nice,
		.stderr_null = e->worker_stderr_null,
	};
	int ret;

	/* The old worker is gone: a fresh object, so that nothing it (or a
	 * process it left behind) still maps is the new worker's. */
	ret = shm_shard_renew(&e->seg, s->index, s->dispatch_pos, s->result_pos,
			      &a.shard_fd);
	if (!ret)
		shard_new_epoch(e, s);
	if (!ret)
		ret = shard_open_notify(s, &a.notify_fd);
	if (!ret)
		ret = worker_spawn(&a, &s->pid, &s->pidfd);
	/* the worker has its own copies now */
	if (a.shard_fd >= 0)
		close(a.shard_fd);
	if (a.notify_fd >= 0)
		close(a.notify_fd);
	if (ret) {
		char why[96];

		snprintf(why, sizeof(why), "cannot start a worker: %s", strerror(-ret));
		LOG(LOG_ERROR, "shard %u: %s", s->index, why);
		s->pid = 0;
		shard_note_failed_start(e, s, why);
		return ret;
	}
	s->started_ns = clock_now_ns();
	s->restart_at_ns = 0;
	s->killed_for = NULL;
	s->ready_seen = false;
	s->failed_step = false;
	e->stats.n_worker_starts++;
	io_ring_poll_in(&e->io, s->pidfd, &s->exit_op);
	shard_arm_notify(e, s);
	/* Anything already waiting for this shard goes out now. */
	shard_advance(e, s);
	return 0;
}

/*
 * Blame the rows of the dispatch the dead worker was running (the last
 * one it adopted); fail the ones that failed alone too often.
 */
static void shard_blame_step(struct engine *e, struct shard *s, const char *why)
{
	struct shm_channel *ch = shm_channel_at(&e->seg, s->index);
	uint64_t adopted = atomic_load(&ch->dispatch_adopted);
	uint32_t depth = e->seg.hdr->ring_depth, n;
	const struct shm_dispatch_row *rows;

	/* untrusted: only a position we sent counts */
	if (adopted <= s->first_pos || adopted > s->dispatch_pos)
		return;
	rows = s->sent + ((adopted - 1) & (depth - 1)) * s->n_slots;
	n = s->n_sent[(adopted - 1) & (depth - 1)];
	if (n > 1) {
		for (uint32_t i = 0; i < n; i++) {
			s->suspect_slot[i] = rows[i].slot;
			s->suspect_gen[i] = rows[i].generation;
		}
		s->n_suspects = n;
		LOG(LOG_WARN, "shard %u: isolating the %u requests of the failed step",
		    s->index, n);
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct slot_state *st = &e->slots.slots[rows[i].slot];
		uint32_t handle = st->request_handle;
		struct live_request *lr = request_pool_get(&e->pool, handle);
		char msg[256];

		if (!lr || st->state != SHM_SLOT_ACTIVE ||
		    st->generation != rows[i].generation)
			continue;
		lr->n_failed_alone++;
		if (lr->n_failed_alone < e->cfg->poison_attempts)
			continue;
		snprintf(msg, sizeof(msg), "line %llu: request failed %u model steps "
			 "on its own (last: worker %s); giving up on it",
			 (unsigned long long)lr->req.line_no, lr->n_failed_alone, why);
		LOG(LOG_WARN, "poison request '%s': %s", LOG_STR(lr->req.id), msg);
		e->stats.n_poisoned++;
		shard_clear_suspect(s, rows[i].slot);
		engine_finish(e, handle, FINISH_ERROR, msg);
	}
}

/*
 * May the rows the dead worker ran be blamed for its death?  Only for a
 * death their step can have caused: a model error, a hang past the step
 * timeout inside the model call (decided when we killed it), or a crash
 * inside the model call.  A worker that stalls, exits or crashes
 * anywhere else, was killed for its results, or was ended from outside,
 * says nothing about its requests.
 */
static bool shard_exit_blames(const struct shard *s, const struct shm_channel *ch,
			      int signo)
{
	bool outside = (signo == SIGKILL || signo == SIGTERM || signo == SIGINT) &&
		       !s->killed_for;

	if (s->failed_step)
		return true;
	if (s->killed_for)
		return s->kill_blames;
	/* untrusted, but a worker can always crash inside the model call */
	return !outside && atomic_load(&ch->in_model_call) != 0;
}

/* The shard's worker exited: forget its step, blame, schedule a restart. */
static void shard_on_exit(struct engine *e, struct shard *s, const char *why,
			  int signo)
{
	struct shm_channel *ch = shm_channel_at(&e->seg, s->index);
	bool was_ready = atomic_load(&ch->worker_ready_pid) == s->pid;
	bool blames = shard_exit_blames(s, ch, signo);
	bool owed = shard_owes_results(s);
	uint64_t now = clock_now_ns();

	LOG(e->n_signals ? LOG_INFO : LOG_WARN, "worker %u (pid %d) %s%s", s->index,
	    (int)s->pid, why, s->killed_for ? s->killed_for : "");
	close(s->pidfd);
	s->pid = 0;
	s->pidfd = -1;
	e->stats.n_worker_deaths++;
	/* Whatever it left in the ring we drop: the replacement starts from
	 * the committed prefixes. */
	while (shm_entry_ready(&shm_result_at(e->seg.hdr, ch, s->result_pos)->seq,
			       s->result_pos)) {
		s->result_pos++;
		e->stats.n_discarded++;
	}
	/* the replacement's channel starts zeroed (shard_new_epoch()) */
	memset(s->ring_seq, 0, sizeof(s->ring_seq));
	/* A worker that never got as far as the model cannot blame a request. */
	if (owed && was_ready && blames) {
		char blame[160];

		snprintf(blame, sizeof(blame), "%s%s", why,
			 s->killed_for ? s->killed_for : "");
		shard_blame_step(e, s, blame);
	}
	if (was_ready && s->misbehaved) {	/* the next may be no better */
		shard_move_requests(e, s, "killed for its results, or stalled "
				    "outside the model");
		s->n_bad_lives++;
	}
	s->n_fruitless = 0;
	s->n_life_commits = 0;
	s->kill_blames = false;

	if (!was_ready) {
		shard_note_failed_start(e, s, why);
	} else if (s->misbehaved && s->n_bad_lives >= ENGINE_MAX_FAILED_STARTS) {
		/* Workers that start but never commit a row are as useless as
		 * workers that cannot start: the shard is lost (with one
		 * worker, the run would otherwise go on for ever). */
		s->n_failed_starts = ENGINE_MAX_FAILED_STARTS - 1;
		shard_note_failed_start(e, s, "its workers keep misbehaving");
	} else {
		s->n_failed_starts = 0;
	}
	s->misbehaved = false;
	if (now - s->started_ns < ENGINE_RESTART_MAX_NS)
		s->n_quick_deaths++;
	else
		s->n_quick_deaths = 0;
	s->restart_at_ns = now + (s->n_quick_deaths ? restart_backoff_ns(s->n_quick_deaths) : 0);
}

static void engine_handle_pidfd(struct engine *e, uint32_t index)
{
	struct shard *s;
	char why[96];
	int signo;

	if (index >= e->n_shards)
		return;
	s = &e->shards[index];
	if (s->pid <= 0)
		return;
	if (!worker_reap(s->pid, why, sizeof(why), &signo)) {
		io_ring_poll_in(&e->io, s->pidfd, &s->exit_op);
		return;
	}
	shard_on_exit(e, s, why, signo);
}

/*
 * A worker's notification pipe was readable: the wake-up itself is all it
 * says.  Read it again unless the completion is for an older pipe of the
 * shard, or the worker closed its end (it exited: the pidfd tells).
 */
static void engine_on_worker_notify(struct io_op *op, int32_t res)
{
	struct notify_read *r = io_op_owner(op, struct notify_read, op);
	struct engine *e = op->arg;
	struct shard *s = r->shard;

	r->inflight = false;
	if (r->epoch != s->notify_epoch || s->notify_rd < 0)
		return;
	if (res > 0 || res == -EINTR || res == -EAGAIN)
		shard_arm_notify(e, s);
	else if (res < 0)
		LOG(LOG_WARN, "shard %u: reading the notification pipe: %s",
		    s->index, strerror(-res));
}

/* Time from then to now; 0 when then is later (set during this round). */
static uint64_t since(uint64_t now, uint64_t then)
{
	return now > then ? now - then : 0;
}

/*
 * The shard's worker has committed no row for the step timeout.  If it
 * posted results meanwhile, they were all rejected: it is killed for
 * them.  Otherwise it hangs: the step's rows are blamed only when it hangs
 * inside the model call (in_model_call, read now, when its clock ran
 * out); a worker stuck anywhere else (waiting on a dispatch or for room
 * that it has, after garbling what it sent) says nothing about them.
 */
static void shard_kill_stalled(struct engine *e, struct shard *s)
{
	struct shm_channel *ch = shm_channel_at(&e->seg, s->index);
	bool in_model = atomic_load(&ch->in_model_call) != 0;

	if (s->n_fruitless && s->fruitless_ns > s->progress_ns) {
		LOG(LOG_WARN, "worker %u (pid %d): no result committed a row for "
		    "longer than %llu ms; killing it (no request is blamed)",
		    s->index, (int)s->pid, (unsigned long long)e->cfg->step_timeout_ms);
		e->stats.n_fruitless_kills++;
		shard_kill_misbehaving(s, " for results that commit nothing");
		return;
	}
	LOG(LOG_WARN, "worker %u (pid %d): no result for longer than %llu ms; "
	    "killing it (%u active rows, dispatch %llu of %llu adopted, %u "
	    "draining%s%s, %s)", s->index, (int)s->pid,
	    (unsigned long long)e->cfg->step_timeout_ms, s->n_active,
	    (unsigned long long)atomic_load(&ch->dispatch_adopted),
	    (unsigned long long)s->dispatch_pos, s->n_draining,
	    s->redispatch ? ", rows to send" : "", s->reset ? ", reset to send" : "",
	    in_model ? "inside the model call" : "outside the model call: no blame");
	e->stats.n_hang_kills++;
	if (in_model) {
		s->killed_for = " after the step timeout";
		s->kill_blames = true;
		shard_kill(s);
	} else {
		shard_kill_misbehaving(s, " after the step timeout, outside the model call");
	}
}

/* Start due replacements; kill workers past the start or step timeout.
 * Returns the time of the next such deadline (UINT64_MAX: none). */
static uint64_t engine_check_workers(struct engine *e, uint64_t now)
{
	uint64_t next = UINT64_MAX;
	uint64_t timeout = e->cfg->step_timeout_ms * 1000000ull;
	uint64_t start_timeout = e->cfg->start_timeout_ms * 1000000ull;

	for (uint32_t i = 0; i < e->n_shards && !e->in_process; i++) {
		struct shard *s = &e->shards[i];
		uint64_t due;

		if (s->pid <= 0 && !e->failed && !e->gave_up &&
		    !(e->n_signals && !e->pool.n_live) &&
		    now >= s->restart_at_ns && shard_start_worker(e, s))
			s->restart_at_ns = now + restart_backoff_ns(s->n_failed_starts);
		if (s->pid <= 0) {
			if (!e->failed && !e->gave_up && s->restart_at_ns < next)
				next = s->restart_at_ns;
			continue;
		}
		if (s->killed_for)
			continue;
		if (!s->ready_seen) {
			/* Until it has loaded its model, a worker gets the
			 * start timeout; its step's clock starts when it is
			 * ready. */
			if (atomic_load(&shm_channel_at(&e->seg, i)->worker_ready_pid) ==
			    s->pid) {
				s->ready_seen = true;
				s->progress_ns = now;
				s->n_failed_starts = 0;
				e->workers_lost = false;
				next = now;	/* refill it on the next round */
			} else if (since(now, s->started_ns) >= start_timeout) {
				LOG(LOG_WARN, "worker %u (pid %d) not ready after %llu ms; "
				    "killing it", s->index, (int)s->pid,
				    (unsigned long long)e->cfg->start_timeout_ms);
				s->killed_for = " (not ready by the start timeout)";
				s->kill_blames = false;
				shard_kill(s);
				continue;
			} else {
				due = s->started_ns + start_timeout;
				/* poll for readiness now and then */
				if (due > now + ENGINE_READY_POLL_NS)
					due = now + ENGINE_READY_POLL_NS;
				if (due < next)
					next = due;
				continue;
			}
		}
		if (!shard_owes_results(s))
			continue;
		if (since(now, s->progress_ns) >= timeout) {
			shard_kill_stalled(e, s);
		} else if (s->progress_ns + timeout < next) {
			next = s->progress_ns + timeout;
		}
	}
	return next;
}

/* ------------------------------------------------------------------------
 * Signals, I/O events
 * ---------------------------------------------------------------------- */

/* The front end says (and logs) how the first signal drains. */
static void engine_on_signal(struct engine *e, int signo)
{
	e->n_signals++;
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

/* A worker wrote the eventfd: it only had to wake us; read the next. */
static void engine_on_notify(struct io_op *op, int32_t res)
{
	struct engine *e = op->arg;

	io_ring_read(&e->io, e->notify_fd, &e->notify_buf, sizeof(e->notify_buf),
		     &e->notify_op);
}

/* A worker's pidfd became readable (or the poll failed). */
static void engine_on_exit_poll(struct io_op *op, int32_t res)
{
	struct shard *s = io_op_owner(op, struct shard, exit_op);

	engine_handle_pidfd(op->arg, s->index);
}

/* ------------------------------------------------------------------------
 * The loop
 * ---------------------------------------------------------------------- */

/* Done: nothing live, and the front end has no more input or output. */
static bool engine_done(const struct engine *e)
{
	return e->failed || (!e->pool.n_live && (e->fe.ops->done(e->fe.ctx) ||
		(e->abandon_at_ns && clock_now_ns() >= e->abandon_at_ns)));
}

static void engine_loop(struct engine *e)
{
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
			struct shard *s = &e->shards[i];

			if (e->in_process) {
				progress |= shard_step_in_process(e, s);
				continue;
			}
			progress |= shard_poll(e, s);
			if (s->pid > 0 && (s->redispatch || s->n_active < s->n_slots)) {
				uint64_t sent = s->issued_id;

				shard_advance(e, s);
				progress |= s->issued_id != sent;
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
		if (!progress && !engine_done(e))
			engine_wait(e, deadline);
	}
}

/* ------------------------------------------------------------------------
 * Setup and teardown
 * ---------------------------------------------------------------------- */

static int engine_setup_shards(struct engine *e)
{
	uint32_t n = e->n_shards, b = e->cfg->n_slots;

	e->shards = calloc(n, sizeof(*e->shards));
	if (!e->shards)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		struct shard *s = &e->shards[i];

		s->index = i;
		s->first_slot = (uint32_t)((uint64_t)b * i / n);
		s->n_slots = (uint32_t)((uint64_t)b * (i + 1) / n) - s->first_slot;
		s->next_dispatch_id = 1;
		s->pidfd = -1;
		s->exit_op = (struct io_op){ engine_on_exit_poll, e };
		s->notify_rd = -1;
		s->sent = calloc((size_t)SHM_RING_DEPTH * s->n_slots, sizeof(*s->sent));
		s->seen = calloc(s->n_slots, sizeof(uint32_t));
		s->suspect_slot = calloc(s->n_slots, sizeof(uint32_t));
		s->suspect_gen = calloc(s->n_slots, sizeof(uint32_t));
		if (!s->sent || !s->seen || !s->suspect_slot || !s->suspect_gen)
			return -ENOMEM;
	}
	return 0;
}

static void engine_teardown(struct engine *e)
{
	for (uint32_t i = 0; e->shards && i < e->n_shards; i++) {
		struct shard *s = &e->shards[i];

		if (s->pid > 0)
			worker_kill_wait(s->pid);
		if (s->pidfd >= 0)
			close(s->pidfd);
		if (s->notify_rd >= 0)
			close(s->notify_rd);
		free(s->sent);
		free(s->seen);
		free(s->suspect_slot);
		free(s->suspect_gen);
	}
	free(e->shards);
	free(e->at_once);
	free(e->resume);
	io_ring_exit(&e->io);
	if (e->sig_fd >= 0)
		close(e->sig_fd);
	if (e->notify_fd >= 0)
		close(e->notify_fd);
	request_pool_release(&e->pool);
	wait_queue_release(&e->queue);
	slot_table_release_all(&e->slots);
	shm_segment_destroy(&e->seg);
	free(e->slot_freed_ns);
	free(e->slot_limit);
	free(e->slot_drain);
	free(e->prefixes);
	free(e->lengths);
	free(e->next_tokens);
	free(e->inproc_rows);
	model_close(e->model);
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
		if (e->shards[i].n_active)	/* run-ahead's count of ACTIVE rows */
			engine_fail(e, "internal check failed at exit: shard %u still "
				    "counts %u active slots", i, e->shards[i].n_active);
}

/*
 * Learn the model's vocabulary.  A plugin's code never runs here when
 * workers run it (docs/DESIGN.md 11.1): its vocabulary comes from a
 * sandboxed probe (model_probe.h).  The sim model is our own code and
 * cheap to open; with --workers 0 the coordinator runs the model itself
 * by design, and keeps it open.  Returns an exit status.
 */
static int engine_open_model(struct engine *e)
{
	const char *spec = e->cfg->model_spec;
	char err[1024], esc[LOG_ESCAPE_MAX + 1];
	int ret;

	if (!e->in_process && model_spec_names_plugin(spec)) {
		ret = model_probe_vocab(e->worker_path, spec, e->cfg->start_timeout_ms,
					&e->vocab, err, sizeof(err));
		if (!ret)
			return ENGINE_EXIT_OK;
		fprintf(stderr, "dynbatch: --model %s: %s%s\n",
			log_escape(spec, esc, sizeof(esc)),
			ret > 0 ? "the model cannot be opened: " : "", err);
		return ret > 0 ? ENGINE_EXIT_USAGE : ENGINE_EXIT_FAILED;
	}
	e->model = model_open(spec, err, sizeof(err));
	if (!e->model) {
		fprintf(stderr, "dynbatch: --model: %s\n", err);
		return ENGINE_EXIT_USAGE;
	}
	e->vocab = model_vocab(e->model);
	if (!e->in_process) {	/* the workers run it */
		model_close(e->model);
		e->model = NULL;
	}
	return ENGINE_EXIT_OK;
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
	if (ret != ENGINE_EXIT_OK)
		return ret;
	p = (struct shm_params){ .n_slots = cfg->n_slots, .n_shards = e->n_shards,
				 .max_context = cfg->max_context,
				 .vocab = e->vocab };
	ret = shm_segment_create(&e->seg, &p);
	if (ret) {
		fprintf(stderr, "dynbatch: cannot create the shared segment: %s\n",
			strerror(-ret));
		return ENGINE_EXIT_FAILED;
	}
	if (slot_table_init(&e->slots, &e->seg) ||
	    request_pool_init(&e->pool, cfg->queue_capacity + cfg->n_slots) ||
	    wait_queue_init(&e->queue, cfg->queue_capacity) ||
	    engine_setup_shards(e))
		goto nomem;
	e->slot_freed_ns = calloc(cfg->n_slots, sizeof(uint64_t));
	e->slot_limit = calloc(cfg->n_slots, sizeof(uint32_t));
	e->slot_drain = calloc(cfg->n_slots, sizeof(uint64_t));
	e->prefixes = calloc(cfg->n_slots, sizeof(*e->prefixes));
	e->lengths = calloc(cfg->n_slots, sizeof(*e->lengths));
	e->next_tokens = calloc(cfg->n_slots, sizeof(int32_t));
	e->inproc_rows = calloc(cfg->n_slots, sizeof(*e->inproc_rows));
	e->resume = calloc(e->pool.capacity, sizeof(uint32_t));
	e->at_once = calloc(e->pool.capacity, sizeof(uint32_t));
	if (!e->resume || !e->at_once || !e->slot_freed_ns || !e->slot_drain ||
	    !e->slot_limit ||
	    !e->prefixes || !e->lengths || !e->next_tokens || !e->inproc_rows)
		goto nomem;

	e->notify_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);	/* a closed socket or pipe is an error code */
	e->sig_fd = signalfd(-1, &sigs, SFD_CLOEXEC);
	if (e->notify_fd < 0 || e->sig_fd < 0) {
		fprintf(stderr, "dynbatch: eventfd/signalfd: %s\n", strerror(errno));
		return ENGINE_EXIT_FAILED;
	}
	ret = io_ring_init(&e->io, 64 + 2 * e->n_shards + cfg->io_entries);
	if (ret) {
		fprintf(stderr, "dynbatch: io_uring: %s\n", strerror(-ret));
		return ENGINE_EXIT_FAILED;
	}
	e->sig_op = (struct io_op){ engine_on_signalfd, e };
	e->notify_op = (struct io_op){ engine_on_notify, e };
	io_ring_read(&e->io, e->sig_fd, &e->sig_buf, sizeof(e->sig_buf), &e->sig_op);
	io_ring_read(&e->io, e->notify_fd, &e->notify_buf, sizeof(e->notify_buf),
		     &e->notify_op);
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
	e->sig_fd = e->notify_fd = -1;
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
		shard_start_worker(e, &e->shards[i]);
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

/* ------------------------------------------------------------------------
 * The front ends' side (engine.h, frontend.h)
 * ---------------------------------------------------------------------- */

int engine_submit(struct engine *e, struct request *req, uint64_t cookie,
		  uint32_t *handle)
{
	struct live_request *lr;
	uint32_t h;

	if (e->n_signals || e->failed)
		return -ESHUTDOWN;
	if (e->workers_lost && req->max_tokens)	/* 0 needs no worker */
		return -EIO;
	if (request_pool_find_id(&e->pool, req->id) != REQUEST_NONE)
		return -EEXIST;
	if (wait_queue_full(&e->queue) || request_pool_full(&e->pool))
		return -EAGAIN;
	h = request_pool_alloc(&e->pool);
	lr = request_pool_get(&e->pool, h);
	lr->req = *req;
	memset(req, 0, sizeof(*req));
	lr->cookie = cookie;
	lr->admitted_ns = clock_now_ns();
	request_pool_add_id(&e->pool, h);
	e->n_prompt_tokens += lr->req.n_prompt;
	if (lr->req.max_tokens) {
		wait_queue_push(&e->queue, h);
	} else {
		/* Nothing to generate: answered on the loop's next round,
		 * not from inside this call (frontend.h). */
		lr->place = LIVE_AT_ONCE;
		e->at_once[e->n_at_once++] = h;	/* room: one per live request */
	}
	*handle = h;
	return 0;
}

void engine_cancel(struct engine *e, uint32_t handle)
{
	if (request_pool_get(&e->pool, handle))
		engine_finish(e, handle, FINISH_CANCELLED, "the client went away");
}

/* Keep a copy of the tokens the request has in its slot (in-process,
 * where the slot's copy is the only one).  0 or -ENOMEM. */
static int engine_copy_generated(struct engine *e, struct live_request *lr)
{
	lr->generated = malloc((size_t)lr->req.max_tokens * sizeof(int32_t));
	if (!lr->generated)
		return -ENOMEM;
	memcpy(lr->generated, slot_table_tokens(&e->slots, lr->slot) + lr->req.n_prompt,
	       lr->n_generated * sizeof(int32_t));
	return 0;
}

void engine_pause(struct engine *e, uint32_t handle)
{
	struct live_request *lr = request_pool_get(&e->pool, handle);

	if (!lr)
		return;
	if (lr->place == LIVE_ACTIVE) {
		/* in-process its tokens are only in the slot it gives up */
		if (!lr->generated && engine_copy_generated(e, lr))
			return;		/* no memory: it keeps its slot */
		engine_unplace(e, handle, lr, clock_now_ns());
		e->n_paused++;
	} else if (lr->place == LIVE_RESUMING) {
		engine_unresume(e, handle);
	} else {
		return;		/* waiting: it has produced nothing to hold up */
	}
	lr->place = LIVE_PAUSED;
}

void engine_resume(struct engine *e, uint32_t handle)
{
	struct live_request *lr = request_pool_get(&e->pool, handle);

	if (!lr || lr->place != LIVE_PAUSED)
		return;
	lr->place = LIVE_RESUMING;
	e->resume[e->n_resume++] = handle;	/* room: one per live request */
}

void engine_quiet_workers(struct engine *e)
{
	e->worker_stderr_null = true;
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

	if (e->failed)
		return false;
	if (e->in_process)
		return true;
	for (uint32_t i = 0; i < e->n_shards; i++) {
		if (shard_lost(&e->shards[i]))
			return false;
		ready |= e->shards[i].pid > 0 && e->shards[i].ready_seen;
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
			NULL, st->n_stale);
	ret = ret ? ret : metrics_counter(out, "dynbatch_runahead_rows_discarded_total",
			"Result rows run ahead and made obsolete (request ended, reset).",
			NULL, st->n_discarded);
	ret = ret ? ret : metrics_counter(out, "dynbatch_worker_fruitless_kills_total",
			"Workers killed for results that kept committing nothing.",
			NULL, st->n_fruitless_kills);
	ret = ret ? ret : metrics_counter(out, "dynbatch_worker_restarts_total",
			"Worker processes started to replace one that exited.", NULL,
			st->n_worker_starts > e->n_shards && !e->in_process ?
			st->n_worker_starts - e->n_shards : 0);
	ret = ret ? ret : metrics_counter(out, "dynbatch_worker_deaths_total",
			"Worker processes that exited.", NULL, st->n_worker_deaths);
	ret = ret ? ret : metrics_counter(out, "dynbatch_model_steps_total",
			"Model steps completed.", NULL, st->n_steps);
	ret = ret ? ret : metrics_histogram(out, "dynbatch_step_seconds",
			"Model step latency, dispatch to result.", &e->step_hist);
	ret = ret ? ret : metrics_histogram(out, "dynbatch_request_seconds",
			"Request latency, admission to last token.", &e->request_hist);
	ret = ret ? ret : metrics_histogram(out, "dynbatch_time_to_first_token_seconds",
			"Admission to first generated token.", &e->ttft_hist);
	return ret ? -ENOMEM : 0;
}
