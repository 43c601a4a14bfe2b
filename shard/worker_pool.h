/*
 * worker_pool.h - starting, watching and ending worker processes.
 *
 * A worker is a real separate program (posix_spawn of dynbatch-worker).
 * The child gets an empty signal mask (the coordinator blocks signals for
 * its signalfd), /dev/null on stdin and stdout, the coordinator's stderr
 * (/dev/null too when that is the coordinator's output),
 * and exactly three more descriptors: 3, the shared object read-only; 4,
 * its own shard's object; 5, the write end of its notification pipe.
 * Every other descriptor is closed in the child, whatever its
 * close-on-exec flag says.  The worker itself sets PR_SET_PDEATHSIG and
 * checks that its parent is the coordinator named in the header.
 * The parent opens a pidfd for the child at once (no reaping can race it),
 * which the event loop polls: readable means the worker exited.
 * A probe (worker_spawn_probe) is started the same way with one
 * descriptor, 3, its answer pipe, and a stderr the caller chooses.
 */
#ifndef DYNBATCH_WORKER_POOL_H
#define DYNBATCH_WORKER_POOL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* The descriptors a worker is started with. */
#define WORKER_SHARED_FD 3
#define WORKER_SHARD_FD 4
#define WORKER_NOTIFY_FD 5
/* The one descriptor a probe is started with: its answer pipe. */
#define WORKER_PROBE_FD 3

struct worker_spawn_args {
	const char *worker_path;	/* dynbatch-worker executable */
	int shared_fd;			/* shared object, O_RDONLY: fd 3 */
	int shard_fd;			/* the shard's object: fd 4 */
	int notify_fd;			/* pipe write end: fd 5 */
	uint32_t shard;
	const char *model_spec;
	uint32_t spin_us;
	uint32_t garbage_every;		/* test mode, 0 = off */
	uint32_t nice;			/* worker's nice value (0..19) */
	bool stderr_null;		/* /dev/null on stderr, not ours (our
					 * stderr is our output) */
};

/*
 * Start one worker.  Returns 0 with *pid and *pidfd set, or a negative
 * errno (nothing left running).
 */
int worker_spawn(const struct worker_spawn_args *a, pid_t *pid, int *pidfd);

/*
 * Start a probe (model_probe.h): dynbatch-worker --probe-fd 3 --model
 * SPEC, which loads the model, enters the worker sandbox, writes one line
 * to fd 3 and exits.  It gets /dev/null on stdin and stdout, stderr_fd as
 * its stderr, answer_fd (a pipe's write end) as fd 3 and nothing else.
 * Returns 0 with *pid and *pidfd set, or a negative errno (nothing left
 * running).
 */
int worker_spawn_probe(const char *worker_path, const char *model_spec,
		       int answer_fd, int stderr_fd, pid_t *pid, int *pidfd);

/*
 * Reap pid if it has exited.  Returns 1 with a description of how it
 * ended in why (e.g. "killed by signal 9 (Killed)"), *signo set to the
 * terminating signal (0 for an exit), 0 if it still runs.
 */
int worker_reap(pid_t pid, char *why, size_t why_len, int *signo);

/* SIGKILL and reap (blocking).  For shutdown and failed starts. */
void worker_kill_wait(pid_t pid);

/* Path of dynbatch-worker: $DYNBATCH_WORKER, else beside our own binary.
 * 0, or a negative errno when it is not an executable file (path holds
 * what was tried, or is empty). */
int worker_find_path(char *path, size_t len);

#endif /* DYNBATCH_WORKER_POOL_H */
