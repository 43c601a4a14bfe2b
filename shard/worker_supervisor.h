/*
 * worker_supervisor.h - the workers' lives (docs/DESIGN.md 9): starting a
 * shard's worker, its start and step timeouts, its death, blame and
 * restarts, lost shards.
 *
 * The supervisor owns each shard's worker process (pid, pidfd,
 * notification pipe, deadlines, restart back-off, why it was killed, its
 * misbehaviour record) and nothing of the requests: what a worker's life
 * means for them (rows to blame, requests to move, a shard lost, every
 * shard lost) comes back as a struct worker_event for the engine to
 * apply.  It reads the shard's channel (shard_channel.h) for what it
 * sent, and calls nothing in sched/ or engine/.
 *
 * Everything here runs on the coordinator's loop thread.
 */
#ifndef DYNBATCH_WORKER_SUPERVISOR_H
#define DYNBATCH_WORKER_SUPERVISOR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "io/io_ring.h"
#include "ipc/shm_segment.h"
#include "shard/shard_channel.h"

#define WORKER_MAX_FAILED_STARTS 8	/* per shard, then it is lost */

/*
 * Progress is a committed row, not a result.  A worker whose results keep
 * committing nothing (wrong generations, no rows, ids or sequence numbers
 * we never sent, a flood of copies) is killed after this many in a row,
 * and no request is blamed: its rows go to other shards.  An honest
 * worker's longest such run is what it ran ahead when every row it held
 * ended or was reset: a ring it had posted, plus the steps it ran until
 * it adopted the next dispatch (under another ring), so four rings leave
 * a wide margin and still end a misbehaving worker within milliseconds
 * of fast steps.  A slow one that posts such results is ended by the step
 * timeout instead, also without blame (worker_sup_check()).
 */
#define WORKER_MAX_FRUITLESS (4u * SHM_RING_DEPTH)

/* Most reads of a shard's notification pipes in flight at once: the
 * current pipe's, and older pipes' that something still holds open. */
#define WORKER_NOTIFY_READS 4u

struct shard_worker;
struct worker_sup;

/* One queued read of a notification pipe (worker_arm_notify()). */
struct notify_read {
	struct io_op op;		/* arg: the supervisor */
	struct shard_worker *w;
	uint32_t epoch;			/* the pipe it reads (w's epoch then) */
	bool inflight;			/* queued, completion not yet seen */
};

/* One shard's worker process, private to the supervisor. */
struct shard_worker {
	uint32_t index;			/* the shard */
	struct shard_channel *chan;	/* the shard's rings (the scheduler's) */
	pid_t pid;			/* 0 when none runs */
	int pidfd;
	/* read end of the current worker's notification pipe (-1: none);
	 * the worker writes a byte to wake us */
	int notify_rd;
	uint32_t notify_epoch;		/* which pipe is the current one */
	uint8_t notify_buf[64];		/* what is read is never looked at */
	/* the reads queued on the pipes; one of an older pipe ends when
	 * every copy of that pipe's write end is closed */
	struct notify_read notify_reads[WORKER_NOTIFY_READS];
	struct io_op exit_op;		/* poll of pidfd: the engine's callback
					 * (worker_sup_reap()) */
	const char *killed_for;		/* why we SIGKILLed it, or NULL */
	bool ready_seen;		/* it announced worker_ready_pid */
	bool failed_step;		/* its model returned an error */
	int32_t failed_status;		/* that error, as the worker said */
	uint64_t started_ns;
	uint64_t restart_at_ns;		/* when dead: start a new one then */
	uint64_t progress_ns;		/* last committed row, or dispatch
					 * with rows: the step timeout's clock */
	uint32_t n_failed_starts;	/* consecutive deaths before ready */
	uint32_t n_quick_deaths;	/* consecutive deaths soon after start */
	/* misbehaviour of the current worker (cleared when it exits) */
	uint32_t n_fruitless;		/* results in a row that committed no
					 * row (WORKER_MAX_FRUITLESS) */
	uint64_t fruitless_ns;		/* when the last of them was read */
	uint32_t n_bad_lives;		/* workers in a row killed for their
					 * results or a stall outside the model,
					 * none with WORKER_MAX_FRUITLESS results
					 * that committed rows: at
					 * WORKER_MAX_FAILED_STARTS the shard
					 * is lost */
	uint32_t n_life_commits;	/* results of the current worker that
					 * committed rows (up to the bound) */
	bool kill_blames;		/* killed_for: blame the rows it ran */
	bool misbehaved;		/* killed for its results, or stalled
					 * outside the model: no blame, its
					 * rows move to other shards */
};

/* How to start workers (the engine's configuration, as plain data). */
struct worker_sup_config {
	const char *worker_path;	/* dynbatch-worker */
	const char *model_spec;		/* --model for workers */
	uint32_t spin_us;
	uint32_t garbage_every;
	uint32_t nice;
	uint64_t step_timeout_ms;
	uint64_t start_timeout_ms;
};

struct worker_sup {
	struct worker_sup_config cfg;
	struct io_ring *io;		/* pidfd polls, notification reads */
	struct shm_segment *seg;
	struct shard_worker *w;		/* n_shards */
	uint32_t n_shards;
	bool stderr_null;		/* workers get /dev/null on stderr */
	bool stopping;			/* a signal came: exits are expected
					 * (logged as info, not warnings) */
	/* counts for the engine's stats */
	uint64_t n_worker_starts;
	uint64_t n_worker_deaths;
	uint64_t n_hang_kills;
	uint64_t n_fruitless_kills;
};

/*
 * What a worker's start or death means for the shard's requests, for the
 * engine to apply in this order: blame, move, lost.
 */
struct worker_event {
	/* the rows of the dispatch it died running, to blame (n_blame > 0) */
	const struct shm_dispatch_row *blame_rows;
	uint32_t n_blame;
	char blame[160];		/* how it died, for the poison message */
	bool move;			/* killed for its results: its requests
					 * move to other shards */
	uint32_t n_discarded;		/* result entries it left, dropped */
	bool lost;			/* the shard cannot keep a worker alive */
	char lost_why[160];		/* "no worker can be kept alive (last: ...)" */
	bool all_lost;			/* and neither can any other shard */
	char why[96];			/* the last failure */
	uint32_t n_failed_starts;	/* of this shard, in a row */
};

/* Inputs of worker_sup_check() the supervisor does not own. */
struct worker_check {
	bool may_start;			/* start due replacements */
	bool may_plan;			/* report restart deadlines */
	bool owes;			/* the worker has rows it owes results for */
	/* for the stall message only */
	uint32_t n_active;
	uint32_t n_draining;
	bool redispatch;
	bool reset;
};

/* 0 or -ENOMEM; n_shards workers, none started.  Each shard's channel and
 * exit_op (the engine's callback) are set by the caller. */
int worker_sup_init(struct worker_sup *sup, const struct worker_sup_config *cfg,
		    struct io_ring *io, struct shm_segment *seg, uint32_t n_shards);
/* SIGKILL and reap what runs, close what is open.  Accepts a zeroed sup. */
void worker_sup_destroy(struct worker_sup *sup);

/*
 * Starting shard index's worker (none runs), in two steps around the
 * engine's own new epoch: worker_sup_renew() gives the shard a fresh
 * object (its fd in *shard_fd); worker_sup_spawn(), given renew's result,
 * starts the worker on it with a fresh notification pipe and watches its
 * pidfd.  0, or a negative errno with *ev saying what the failed start
 * means (a failed start counts towards losing the shard).
 */
int worker_sup_renew(struct worker_sup *sup, uint32_t index, int *shard_fd);
int worker_sup_spawn(struct worker_sup *sup, uint32_t index, int renewed,
		     int shard_fd, struct worker_event *ev);

/* Shard index's pidfd became readable.  owed: its worker owed results.
 * Returns true with *ev filled when the worker exited (it is reaped, a
 * restart is scheduled), false when it still runs (polled again). */
bool worker_sup_reap(struct worker_sup *sup, uint32_t index, bool owed,
		     struct worker_event *ev);

/* Is a replacement due for shard index now (none runs)? */
bool worker_sup_start_due(const struct worker_sup *sup, uint32_t index,
			  uint64_t now);
/* A start failed: retry after the back-off. */
void worker_sup_retry_later(struct worker_sup *sup, uint32_t index, uint64_t now);

/*
 * Timeouts of shard index: readiness (true in *became_ready when it just
 * became ready), the start and step timeouts (killing the worker), and
 * the next such deadline folded into *next.
 */
void worker_sup_check(struct worker_sup *sup, uint32_t index, uint64_t now,
		      const struct worker_check *wc, bool *became_ready,
		      uint64_t *next);

/* ---- for the scheduler ---- */

/* SIGKILL the shard's worker, if any; its exit arrives on the pidfd. */
void worker_sup_kill(struct worker_sup *sup, uint32_t index);
/* SIGKILL it for what it did, not for its requests: nobody is blamed and
 * its rows move to other shards when it exits. */
void worker_sup_kill_misbehaving(struct worker_sup *sup, uint32_t index,
				 const char *why);
/* Its model failed a step (status, a negative errno): kill it; its rows
 * are blamed. */
void worker_sup_kill_failed_step(struct worker_sup *sup, uint32_t index,
				 int32_t status);
/* A result committed nothing.  True when that was one too many in a row
 * (WORKER_MAX_FRUITLESS) and the worker is being killed for it. */
bool worker_sup_note_fruitless(struct worker_sup *sup, uint32_t index, uint64_t now);
/* A result committed rows (commits) or only got prefill further: the
 * step timeout's clock starts again. */
void worker_sup_note_progress(struct worker_sup *sup, uint32_t index,
			      uint64_t now, bool commits);
/* A dispatch with rows went out: the worker owes results from now. */
static inline void worker_sup_note_dispatch(struct worker_sup *sup, uint32_t index,
					    uint64_t now)
{
	sup->w[index].progress_ns = now;
}

static inline bool worker_sup_running(const struct worker_sup *sup, uint32_t index)
{
	return sup->w[index].pid > 0;
}

/* Does the shard take requests?  Its worker said it is ready. */
static inline bool worker_sup_ready(const struct worker_sup *sup, uint32_t index)
{
	return sup->w[index].ready_seen;
}

/* Its worker was killed for its results: they are not read any more. */
static inline bool worker_sup_misbehaved(const struct worker_sup *sup, uint32_t index)
{
	return sup->w[index].misbehaved;
}

/* Has the shard failed so many starts in a row that it takes no work
 * until a worker of it is ready again (which resets the count)? */
static inline bool worker_sup_lost(const struct worker_sup *sup, uint32_t index)
{
	return sup->w[index].n_failed_starts >= WORKER_MAX_FAILED_STARTS;
}

static inline uint64_t worker_sup_progress_ns(const struct worker_sup *sup,
					      uint32_t index)
{
	return sup->w[index].progress_ns;
}

#endif
