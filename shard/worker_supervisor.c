/*
 * worker_supervisor.c - the workers' lives (docs/DESIGN.md 9); see
 * worker_supervisor.h.  Part of the engine, with engine.c, shard_sched.c
 * and wait_policy.c (struct engine and struct shard in engine_internal.h):
 * a shard's worker is started on a fresh shard object and notification
 * pipe, gets the start timeout until it is ready and then the step
 * timeout; its death shows up on its pidfd, and what it left behind is
 * dropped; the rows of the step it died in are blamed when the death can
 * be theirs (suspects run alone, a poison request is failed); a
 * replacement starts with back-off when starts keep failing; a shard that
 * cannot keep a worker alive, or whose workers keep misbehaving, is lost
 * and its requests move to the other shards; and when every shard is lost
 * the run gives up (engine_give_up()), or a server keeps trying.  The
 * requests themselves, and the loop that calls in here, stay in engine.c.
 */
#include "shard/worker_supervisor.h"
#include "engine/engine_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"
#include "io/io_ring.h"
#include "util/log.h"
#include "util/log_escape.h"
#include "engine/request_pool.h"
#include "sched/shard_sched.h"
#include "ipc/shm_segment.h"
#include "sched/slot_table.h"
#include "shard/worker_pool.h"

#define ENGINE_RESTART_MAX_NS (1000ull * 1000 * 1000)
#define ENGINE_READY_POLL_NS (10ull * 1000 * 1000)

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
	shard_channel_new_epoch(&s->chan);
	s->redispatch = true;
	s->reset = false;
	s->reset_id = 0;
	s->resets_unanswered = 0;
	shard_forget_prefill(e, s);
	s->lockstep = 0;
	s->sent_lockstep = false;
	s->n_draining = 0;
	s->adopted_seen = s->chan.dispatch_pos;
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
		{
			struct sched_request rq;

			engine_sched_request(lr, &rq);
			shard_write_sampling(e, slot, &rq);
		}
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

int shard_start_worker(struct engine *e, struct shard *s)
{
	struct worker_spawn_args a = {
		.worker_path = e->worker_path,
		.shared_fd = e->seg.ro_fd,
		.shard_fd = -1,
		.notify_fd = -1,
		.shard = s->index,
		.model_spec = e->worker_spec,
		.spin_us = e->cfg->spin_us,
		.garbage_every = e->cfg->garbage_every,
		.step_tokens = e->cfg->step_tokens,
		.nice = e->cfg->worker_nice,
		.stderr_null = e->worker_stderr_null,
	};
	int ret;

	/* The old worker is gone: a fresh object, so that nothing it (or a
	 * process it left behind) still maps is the new worker's. */
	ret = shm_shard_renew(&e->seg, s->index, s->chan.dispatch_pos, s->chan.result_pos,
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
	engine_advance(e, s);
	return 0;
}

/*
 * Blame the rows of the dispatch the dead worker was running (the last
 * one it adopted); fail the ones that failed alone too often.
 */
static void shard_blame_step(struct engine *e, struct shard *s, const char *why)
{
	struct shm_channel *ch = shm_channel_at(&e->seg, s->index);
	const struct shm_dispatch_row *rows;
	uint32_t n;

	rows = shard_channel_adopted_rows(&s->chan, ch, &n);
	if (!rows)
		return;
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
	e->stats.n_discarded += shard_channel_drain(&s->chan, e->seg.hdr, ch);
	/* A worker that never got as far as the model cannot blame a request. */
	if (owed && was_ready && blames) {
		char blame[160];

		/* the worker said why, and that is what the request
		 * wants to know, not how we then ended the worker */
		if (s->failed_step)
			snprintf(blame, sizeof(blame), "failed the step: %s",
				 s->failed_status == -EDOM ?
				 "the model's logits were NaN" :
				 strerror(-s->failed_status));
		else
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

void engine_handle_pidfd(struct engine *e, uint32_t index)
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
	    (unsigned long long)s->chan.dispatch_pos, s->n_draining,
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
uint64_t engine_check_workers(struct engine *e, uint64_t now)
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
