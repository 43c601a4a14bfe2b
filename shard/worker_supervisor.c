/*
 * worker_supervisor.c - the workers' lives (docs/DESIGN.md 9); see
 * worker_supervisor.h.
 *
 * A shard's worker is started on a fresh shard object and notification
 * pipe, gets the start timeout until it is ready and then the step
 * timeout; its death shows up on its pidfd, and what it left behind is
 * dropped; the rows of the step it died in are reported for blame when
 * the death can be theirs; a replacement starts with back-off when starts
 * keep failing; a shard that cannot keep a worker alive, or whose workers
 * keep misbehaving, is reported lost.  What that means for the requests
 * (isolating suspects, failing a poison request, moving requests to other
 * shards, giving up) the engine decides from the struct worker_event it
 * gets back: nothing here calls sched/ or engine/.
 */
#include "shard/worker_supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"
#include "shard/worker_pool.h"

#define WORKER_RESTART_MAX_NS (1000ull * 1000 * 1000)
#define WORKER_READY_POLL_NS (10ull * 1000 * 1000)

/* Back-off before the n-th restart in a row (n >= 1): 5 ms doubling to 1 s. */
static uint64_t restart_backoff_ns(uint32_t n)
{
	uint64_t ns = 5000000ull << (n - 1 < 8 ? n - 1 : 8);

	return ns < WORKER_RESTART_MAX_NS ? ns : WORKER_RESTART_MAX_NS;
}

int worker_sup_init(struct worker_sup *sup, const struct worker_sup_config *cfg,
		    struct io_ring *io, struct shm_segment *seg, uint32_t n_shards)
{
	*sup = (struct worker_sup){ .cfg = *cfg, .io = io, .seg = seg,
				    .n_shards = n_shards };
	sup->w = calloc(n_shards, sizeof(*sup->w));
	if (!sup->w)
		return -ENOMEM;
	for (uint32_t i = 0; i < n_shards; i++) {
		sup->w[i].index = i;
		sup->w[i].pidfd = -1;
		sup->w[i].notify_rd = -1;
	}
	return 0;
}

void worker_sup_destroy(struct worker_sup *sup)
{
	for (uint32_t i = 0; sup->w && i < sup->n_shards; i++) {
		struct shard_worker *w = &sup->w[i];

		if (w->pid > 0)
			worker_kill_wait(w->pid);
		if (w->pidfd >= 0)
			close(w->pidfd);
		if (w->notify_rd >= 0)
			close(w->notify_rd);
	}
	free(sup->w);
	sup->w = NULL;
}

/* ------------------------------------------------------------------------
 * Starting a worker
 * ---------------------------------------------------------------------- */

/* A worker of this shard died before it was ready, or could not be
 * started at all.  When that keeps happening, the shard is lost; when
 * every shard is, ev says so too. */
static void worker_note_failed_start(struct worker_sup *sup, struct shard_worker *w,
				     const char *why, struct worker_event *ev)
{
	w->n_failed_starts++;
	if (w->n_failed_starts < WORKER_MAX_FAILED_STARTS)
		return;
	ev->lost = true;
	snprintf(ev->lost_why, sizeof(ev->lost_why),
		 "no worker can be kept alive (last: %s)", why);
	snprintf(ev->why, sizeof(ev->why), "%s", why);
	ev->n_failed_starts = w->n_failed_starts;
	ev->all_lost = true;
	for (uint32_t i = 0; i < sup->n_shards; i++)
		if (sup->w[i].n_failed_starts < WORKER_MAX_FAILED_STARTS)
			ev->all_lost = false;
}

/*
 * A fresh notification pipe for the shard's next worker: we keep the read
 * end (blocking, for io_uring), the worker gets the write end
 * (non-blocking: a full pipe means a wake-up is pending anyway).  A new
 * pipe per worker: whatever an old worker left behind holding its write
 * end writes into a pipe nobody reads.  0 or a negative errno.
 */
static int worker_open_notify(struct shard_worker *w, int *write_end)
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
	if (w->notify_rd >= 0)	/* a read still queued on it ends stale */
		close(w->notify_rd);
	w->notify_rd = fds[0];
	w->notify_epoch++;
	*write_end = fds[1];
	return 0;
}

static void worker_on_notify(struct io_op *op, int32_t res);

/*
 * Read the shard's notification pipe (again).  Each read has an op of its
 * own that remembers the pipe's epoch, so a completion for an older pipe
 * (its worker gone) is told apart.  Such a read ends once every copy of
 * the old write end is closed; a process the old worker left behind may
 * keep one open, so after WORKER_NOTIFY_READS such reads the shard goes
 * without wake-ups (its results are still read on the loop's deadlines).
 */
static void worker_arm_notify(struct worker_sup *sup, struct shard_worker *w)
{
	struct notify_read *r = NULL;

	for (uint32_t i = 0; i < WORKER_NOTIFY_READS && !r; i++)
		if (!w->notify_reads[i].inflight)
			r = &w->notify_reads[i];
	if (!r) {
		LOG(LOG_WARN, "shard %u: %u old notification pipes are still held "
		    "open; its worker's wake-ups are not read", w->index,
		    WORKER_NOTIFY_READS);
		return;
	}
	*r = (struct notify_read){ .op = { worker_on_notify, sup }, .w = w,
				   .epoch = w->notify_epoch };
	if (!io_ring_read(sup->io, w->notify_rd, w->notify_buf, sizeof(w->notify_buf),
			  &r->op))
		r->inflight = true;
}

/*
 * A worker's notification pipe was readable: the wake-up itself is all it
 * says.  Read it again unless the completion is for an older pipe of the
 * shard, or the worker closed its end (it exited: the pidfd tells).
 */
static void worker_on_notify(struct io_op *op, int32_t res)
{
	struct notify_read *r = io_op_owner(op, struct notify_read, op);
	struct worker_sup *sup = op->arg;
	struct shard_worker *w = r->w;

	r->inflight = false;
	if (r->epoch != w->notify_epoch || w->notify_rd < 0)
		return;
	if (res > 0 || res == -EINTR || res == -EAGAIN)
		worker_arm_notify(sup, w);
	else if (res < 0)
		LOG(LOG_WARN, "shard %u: reading the notification pipe: %s",
		    w->index, strerror(-res));
}

/* The old worker is gone: a fresh object, so that nothing it (or a
 * process it left behind) still maps is the new worker's. */
int worker_sup_renew(struct worker_sup *sup, uint32_t index, int *shard_fd)
{
	const struct shard_channel *c = sup->w[index].chan;

	*shard_fd = -1;
	return shm_shard_renew(sup->seg, index, c->dispatch_pos, c->result_pos,
			       shard_fd);
}

int worker_sup_spawn(struct worker_sup *sup, uint32_t index, int renewed,
		     int shard_fd, struct worker_event *ev)
{
	struct shard_worker *w = &sup->w[index];
	struct worker_spawn_args a = {
		.worker_path = sup->cfg.worker_path,
		.shared_fd = sup->seg->ro_fd,
		.shard_fd = shard_fd,
		.notify_fd = -1,
		.shard = index,
		.model_spec = sup->cfg.model_spec,
		.spin_us = sup->cfg.spin_us,
		.garbage_every = sup->cfg.garbage_every,
		.nice = sup->cfg.nice,
		.stderr_null = sup->stderr_null,
	};
	int ret = renewed;

	*ev = (struct worker_event){ 0 };
	if (!ret)
		ret = worker_open_notify(w, &a.notify_fd);
	if (!ret)
		ret = worker_spawn(&a, &w->pid, &w->pidfd);
	/* the worker has its own copies now */
	if (a.shard_fd >= 0)
		close(a.shard_fd);
	if (a.notify_fd >= 0)
		close(a.notify_fd);
	if (ret) {
		char why[96];

		snprintf(why, sizeof(why), "cannot start a worker: %s", strerror(-ret));
		LOG(LOG_ERROR, "shard %u: %s", index, why);
		w->pid = 0;
		worker_note_failed_start(sup, w, why, ev);
		return ret;
	}
	w->started_ns = clock_now_ns();
	w->restart_at_ns = 0;
	w->killed_for = NULL;
	w->ready_seen = false;
	w->failed_step = false;
	sup->n_worker_starts++;
	io_ring_poll_in(sup->io, w->pidfd, &w->exit_op);
	worker_arm_notify(sup, w);
	return 0;
}

/* ------------------------------------------------------------------------
 * Death
 * ---------------------------------------------------------------------- */

/*
 * May the rows the dead worker ran be blamed for its death?  Only for a
 * death their step can have caused: a model error, a hang past the step
 * timeout inside the model call (decided when we killed it), or a crash
 * inside the model call.  A worker that stalls, exits or crashes
 * anywhere else, was killed for its results, or was ended from outside,
 * says nothing about its requests.
 */
static bool worker_exit_blames(const struct shard_worker *w,
			       const struct shm_channel *ch, int signo)
{
	bool outside = (signo == SIGKILL || signo == SIGTERM || signo == SIGINT) &&
		       !w->killed_for;

	if (w->failed_step)
		return true;
	if (w->killed_for)
		return w->kill_blames;
	/* untrusted, but a worker can always crash inside the model call */
	return !outside && atomic_load(&ch->in_model_call) != 0;
}

/* The shard's worker exited: forget its step, blame, schedule a restart. */
static void worker_on_exit(struct worker_sup *sup, struct shard_worker *w,
			   bool owed, const char *why, int signo,
			   struct worker_event *ev)
{
	struct shm_channel *ch = shm_channel_at(sup->seg, w->index);
	bool was_ready = atomic_load(&ch->worker_ready_pid) == w->pid;
	bool blames = worker_exit_blames(w, ch, signo);
	uint64_t now = clock_now_ns();

	LOG(sup->stopping ? LOG_INFO : LOG_WARN, "worker %u (pid %d) %s%s",
	    w->index, (int)w->pid, why,
	    w->killed_for ? w->killed_for : "");
	close(w->pidfd);
	w->pid = 0;
	w->pidfd = -1;
	sup->n_worker_deaths++;
	/* Whatever it left in the ring we drop: the replacement starts from
	 * the committed prefixes. */
	ev->n_discarded = shard_channel_drain(w->chan, sup->seg->hdr, ch);
	/* A worker that never got as far as the model cannot blame a request. */
	if (owed && was_ready && blames) {
		/* the worker said why, and that is what the request
		 * wants to know, not how we then ended the worker */
		if (w->failed_step)
			snprintf(ev->blame, sizeof(ev->blame), "failed the step: %s",
				 w->failed_status == -EDOM ?
				 "the model's logits were NaN" :
				 strerror(-w->failed_status));
		else
			snprintf(ev->blame, sizeof(ev->blame), "%s%s", why,
				 w->killed_for ? w->killed_for : "");
		ev->blame_rows = shard_channel_adopted_rows(w->chan, ch, &ev->n_blame);
		if (!ev->blame_rows)
			ev->n_blame = 0;
	}
	if (was_ready && w->misbehaved) {	/* the next may be no better */
		ev->move = true;
		w->n_bad_lives++;
	}
	w->n_fruitless = 0;
	w->n_life_commits = 0;
	w->kill_blames = false;

	if (!was_ready) {
		worker_note_failed_start(sup, w, why, ev);
	} else if (w->misbehaved && w->n_bad_lives >= WORKER_MAX_FAILED_STARTS) {
		/* Workers that start but never commit a row are as useless as
		 * workers that cannot start: the shard is lost (with one
		 * worker, the run would otherwise go on for ever). */
		w->n_failed_starts = WORKER_MAX_FAILED_STARTS - 1;
		worker_note_failed_start(sup, w, "its workers keep misbehaving", ev);
	} else {
		w->n_failed_starts = 0;
	}
	w->misbehaved = false;
	if (now - w->started_ns < WORKER_RESTART_MAX_NS)
		w->n_quick_deaths++;
	else
		w->n_quick_deaths = 0;
	w->restart_at_ns = now + (w->n_quick_deaths ? restart_backoff_ns(w->n_quick_deaths) : 0);
}

bool worker_sup_reap(struct worker_sup *sup, uint32_t index, bool owed,
		     struct worker_event *ev)
{
	struct shard_worker *w;
	char why[96];
	int signo;

	*ev = (struct worker_event){ 0 };
	if (index >= sup->n_shards)
		return false;
	w = &sup->w[index];
	if (w->pid <= 0)
		return false;
	if (!worker_reap(w->pid, why, sizeof(why), &signo)) {
		io_ring_poll_in(sup->io, w->pidfd, &w->exit_op);
		return false;
	}
	worker_on_exit(sup, w, owed, why, signo, ev);
	return true;
}

/* ------------------------------------------------------------------------
 * Kills, for the scheduler
 * ---------------------------------------------------------------------- */

void worker_sup_kill(struct worker_sup *sup, uint32_t index)
{
	if (sup->w[index].pid > 0)
		kill(sup->w[index].pid, SIGKILL);
}

void worker_sup_kill_misbehaving(struct worker_sup *sup, uint32_t index,
				 const char *why)
{
	struct shard_worker *w = &sup->w[index];

	w->killed_for = why;
	w->kill_blames = false;
	w->misbehaved = true;
	worker_sup_kill(sup, index);
}

void worker_sup_kill_failed_step(struct worker_sup *sup, uint32_t index,
				 int32_t status)
{
	sup->w[index].failed_step = true;
	sup->w[index].failed_status = status;
	worker_sup_kill(sup, index);
}

bool worker_sup_note_fruitless(struct worker_sup *sup, uint32_t index, uint64_t now)
{
	struct shard_worker *w = &sup->w[index];

	w->fruitless_ns = now;
	if (++w->n_fruitless < WORKER_MAX_FRUITLESS)
		return false;
	LOG(LOG_WARN, "worker %u (pid %d): %u results in a row committed nothing; "
	    "killing it (no request is blamed)", w->index, (int)w->pid, w->n_fruitless);
	sup->n_fruitless_kills++;
	worker_sup_kill_misbehaving(sup, index, " for results that commit nothing");
	return true;
}

void worker_sup_note_progress(struct worker_sup *sup, uint32_t index,
			      uint64_t now, bool commits)
{
	struct shard_worker *w = &sup->w[index];

	w->progress_ns = now;
	w->n_fruitless = 0;
	/* a worker that does real work clears its shard's record; one
	 * honest result per life does not (a flood that starts with one
	 * would run for ever) */
	if (commits && w->n_life_commits < WORKER_MAX_FRUITLESS &&
	    ++w->n_life_commits == WORKER_MAX_FRUITLESS)
		w->n_bad_lives = 0;
}

/* ------------------------------------------------------------------------
 * Deadlines
 * ---------------------------------------------------------------------- */

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
static void worker_kill_stalled(struct worker_sup *sup, struct shard_worker *w,
				const struct worker_check *wc)
{
	struct shm_channel *ch = shm_channel_at(sup->seg, w->index);
	bool in_model = atomic_load(&ch->in_model_call) != 0;

	if (w->n_fruitless && w->fruitless_ns > w->progress_ns) {
		LOG(LOG_WARN, "worker %u (pid %d): no result committed a row for "
		    "longer than %llu ms; killing it (no request is blamed)",
		    w->index, (int)w->pid, (unsigned long long)sup->cfg.step_timeout_ms);
		sup->n_fruitless_kills++;
		worker_sup_kill_misbehaving(sup, w->index, " for results that commit nothing");
		return;
	}
	LOG(LOG_WARN, "worker %u (pid %d): no result for longer than %llu ms; "
	    "killing it (%u active rows, dispatch %llu of %llu adopted, %u "
	    "draining%s%s, %s)", w->index, (int)w->pid,
	    (unsigned long long)sup->cfg.step_timeout_ms, wc->n_active,
	    (unsigned long long)atomic_load(&ch->dispatch_adopted),
	    (unsigned long long)w->chan->dispatch_pos, wc->n_draining,
	    wc->redispatch ? ", rows to send" : "", wc->reset ? ", reset to send" : "",
	    in_model ? "inside the model call" : "outside the model call: no blame");
	sup->n_hang_kills++;
	if (in_model) {
		w->killed_for = " after the step timeout";
		w->kill_blames = true;
		worker_sup_kill(sup, w->index);
	} else {
		worker_sup_kill_misbehaving(sup, w->index,
					    " after the step timeout, outside the model call");
	}
}

bool worker_sup_start_due(const struct worker_sup *sup, uint32_t index,
			  uint64_t now)
{
	const struct shard_worker *w = &sup->w[index];

	return w->pid <= 0 && now >= w->restart_at_ns;
}

void worker_sup_retry_later(struct worker_sup *sup, uint32_t index, uint64_t now)
{
	sup->w[index].restart_at_ns = now + restart_backoff_ns(sup->w[index].n_failed_starts);
}

void worker_sup_check(struct worker_sup *sup, uint32_t index, uint64_t now,
		      const struct worker_check *wc, bool *became_ready,
		      uint64_t *next)
{
	struct shard_worker *w = &sup->w[index];
	uint64_t timeout = sup->cfg.step_timeout_ms * 1000000ull;
	uint64_t start_timeout = sup->cfg.start_timeout_ms * 1000000ull;
	uint64_t due;

	*became_ready = false;
	if (w->pid <= 0) {
		if (wc->may_plan && w->restart_at_ns < *next)
			*next = w->restart_at_ns;
		return;
	}
	if (w->killed_for)
		return;
	if (!w->ready_seen) {
		/* Until it has loaded its model, a worker gets the start
		 * timeout; its step's clock starts when it is ready. */
		if (atomic_load(&shm_channel_at(sup->seg, index)->worker_ready_pid) ==
		    w->pid) {
			w->ready_seen = true;
			w->progress_ns = now;
			w->n_failed_starts = 0;
			*became_ready = true;
			*next = now;	/* refill it on the next round */
		} else if (since(now, w->started_ns) >= start_timeout) {
			LOG(LOG_WARN, "worker %u (pid %d) not ready after %llu ms; "
			    "killing it", w->index, (int)w->pid,
			    (unsigned long long)sup->cfg.start_timeout_ms);
			w->killed_for = " (not ready by the start timeout)";
			w->kill_blames = false;
			worker_sup_kill(sup, index);
			return;
		} else {
			due = w->started_ns + start_timeout;
			/* poll for readiness now and then */
			if (due > now + WORKER_READY_POLL_NS)
				due = now + WORKER_READY_POLL_NS;
			if (due < *next)
				*next = due;
			return;
		}
	}
	if (!wc->owes)
		return;
	if (since(now, w->progress_ns) >= timeout) {
		worker_kill_stalled(sup, w, wc);
	} else if (w->progress_ns + timeout < *next) {
		*next = w->progress_ns + timeout;
	}
}
