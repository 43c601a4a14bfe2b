/*
 * worker_pool.c - see worker_pool.h.
 */
#include "shard/worker_pool.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/fault_sim.h"

extern char **environ;

/* What one child is started with. */
struct spawn_plan {
	const char *path;	/* the executable */
	char *const *argv;
	int *src;		/* src[i] becomes WORKER_SHARED_FD + i */
	unsigned n_src;		/* at most SPAWN_MAX_FDS */
	int stderr_src;		/* becomes its stderr; -1: ours */
	bool stderr_null;	/* /dev/null on its stderr (stderr_src -1) */
};

#define SPAWN_MAX_FDS 4

/*
 * Put the descriptors the child gets in place (src[i] becomes
 * WORKER_SHARED_FD + i, stderr_src stderr) and close every other one
 * above stderr, whatever its close-on-exec flag.  Every source must lie
 * above the targets (spawn_lift_fds), so that no dup2 overwrites a source
 * still to be moved; dup2 leaves the targets without close-on-exec.  0 or
 * an error number.
 */
static int spawn_pass_fds(posix_spawn_file_actions_t *actions,
			  const int *src, unsigned n, int stderr_src)
{
	int ret = 0;

	if (stderr_src >= 0)
		ret = posix_spawn_file_actions_adddup2(actions, stderr_src,
						       STDERR_FILENO);
	for (unsigned i = 0; i < n && !ret; i++)
		ret = posix_spawn_file_actions_adddup2(actions, src[i],
						       WORKER_SHARED_FD + (int)i);
	if (!ret)
		ret = posix_spawn_file_actions_addclosefrom_np(actions,
							       WORKER_SHARED_FD + (int)n);
	return ret;
}

/*
 * A source below the first descriptor the child does not get
 * (WORKER_SHARED_FD + n_targets: the targets, or 0..2 when the
 * coordinator was started with a standard descriptor closed) is
 * duplicated above it, close-on-exec; lifted[i] gets the duplicate to
 * close after the spawn (or -1).  A source of -1 stays.  0 or a negative
 * errno.
 */
static int spawn_lift_fds(int *src, int *lifted, unsigned n, unsigned n_targets)
{
	const int floor = WORKER_SHARED_FD + (int)n_targets;

	for (unsigned i = 0; i < n; i++)
		lifted[i] = -1;
	for (unsigned i = 0; i < n; i++) {
		if (src[i] < 0 || src[i] >= floor)
			continue;
		lifted[i] = fcntl(src[i], F_DUPFD_CLOEXEC, floor);
		if (lifted[i] < 0)
			return -errno;
		src[i] = lifted[i];
	}
	return 0;
}

/*
 * posix_spawn, not fork: glibc spawns with vfork semantics (the child
 * shares our memory until it execs), so starting a worker copies no page
 * tables and leaves no copy-on-write faults behind in the coordinator.
 * On the small VMs this runs on a fork of the coordinator cost 2-3 ms,
 * most of it those faults, and the start of 16 workers ran serially.
 * What the child of a fork did by hand is here the spawn's attributes:
 * an empty signal mask (the coordinator blocks signals for its
 * signalfd), SIGPIPE back to its default, /dev/null on stdin and stdout,
 * and exactly the descriptors of the plan (closefrom: a descriptor
 * someone opened without close-on-exec, our output say, never reaches a
 * child).  The child sets PR_SET_PDEATHSIG itself; a worker also checks
 * its parent is the coordinator named in the header, which covers a
 * coordinator that died first.  Then a pidfd for the child at once (no
 * reaping can race it).  0 with *pid and *pidfd set, or a negative errno
 * (nothing left running).
 */
static int spawn_child(const struct spawn_plan *p, pid_t *pid, int *pidfd)
{
	/* the plan's sources, then stderr_src: all lifted above the targets */
	int src[SPAWN_MAX_FDS + 1], lifted[SPAWN_MAX_FDS + 1];
	const unsigned n_src = p->n_src + 1;
	posix_spawn_file_actions_t actions;
	posix_spawnattr_t attr;
	sigset_t none, pipe_only;
	pid_t child;
	int ret, fd;

	if (p->n_src > SPAWN_MAX_FDS)
		return -EINVAL;
	memcpy(src, p->src, p->n_src * sizeof(src[0]));
	src[p->n_src] = p->stderr_src;
	sigemptyset(&none);
	sigemptyset(&pipe_only);
	sigaddset(&pipe_only, SIGPIPE);
	ret = spawn_lift_fds(src, lifted, n_src, p->n_src);
	if (ret)
		goto out_lifted;
	ret = -ENOMEM;
	if (posix_spawn_file_actions_init(&actions))
		goto out_lifted;
	if (posix_spawnattr_init(&attr)) {
		posix_spawn_file_actions_destroy(&actions);
		goto out_lifted;
	}
	/* first the descriptors, while every source is still open */
	ret = spawn_pass_fds(&actions, src, p->n_src, src[p->n_src]);
	if (!ret)
		ret = posix_spawn_file_actions_addopen(&actions, STDIN_FILENO,
						       "/dev/null", O_RDONLY, 0);
	if (!ret)
		ret = posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO,
						       "/dev/null", O_WRONLY, 0);
	if (!ret && p->stderr_src < 0 && p->stderr_null)
		ret = posix_spawn_file_actions_addopen(&actions, STDERR_FILENO,
						       "/dev/null", O_WRONLY, 0);
	if (!ret)
		ret = posix_spawnattr_setsigmask(&attr, &none);
	if (!ret)
		ret = posix_spawnattr_setsigdefault(&attr, &pipe_only);
	if (!ret)
		ret = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK |
						      POSIX_SPAWN_SETSIGDEF);
	if (!ret)	/* returns the error number itself, not -1 and errno */
		ret = posix_spawn(&child, p->path, &actions, &attr, p->argv,
				  environ);
	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&actions);
	ret = -ret;
out_lifted:
	for (unsigned i = 0; i < n_src; i++)
		if (lifted[i] >= 0)
			close(lifted[i]);
	if (ret)
		return ret;
	fd = (int)syscall(SYS_pidfd_open, child, 0);
	if (fd < 0) {
		int err = -errno;

		worker_kill_wait(child);
		return err;
	}
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	*pid = child;
	*pidfd = fd;
	return 0;
}

int worker_spawn(const struct worker_spawn_args *a, pid_t *pid, int *pidfd)
{
	char shard[16], shared_arg[16], shard_arg[16], notify_arg[16];
	char spin[16], garbage[16], nice[16];
	char *const argv[] = {
		"dynbatch-worker", "--shared-fd", shared_arg, "--shard-fd", shard_arg,
		"--shard", shard, "--model", (char *)a->model_spec,
		"--notify-fd", notify_arg, "--spin-us", spin,
		"--garbage-every", garbage, "--nice", nice, NULL,
	};
	int src[] = { a->shared_fd, a->shard_fd, a->notify_fd };
	const struct spawn_plan plan = {
		.path = a->worker_path, .argv = argv, .src = src,
		.n_src = sizeof(src) / sizeof(src[0]), .stderr_src = -1,
		.stderr_null = a->stderr_null,
	};

	snprintf(shard, sizeof(shard), "%u", a->shard);
	snprintf(shared_arg, sizeof(shared_arg), "%d", WORKER_SHARED_FD);
	snprintf(shard_arg, sizeof(shard_arg), "%d", WORKER_SHARD_FD);
	snprintf(notify_arg, sizeof(notify_arg), "%d", WORKER_NOTIFY_FD);
	snprintf(spin, sizeof(spin), "%u", a->spin_us);
	snprintf(garbage, sizeof(garbage), "%u", a->garbage_every);
	snprintf(nice, sizeof(nice), "%u", a->nice);
	if (fault_sim("spawn"))
		return -EAGAIN;
	return spawn_child(&plan, pid, pidfd);
}

int worker_spawn_probe(const char *worker_path, const char *model_spec,
		       int answer_fd, int stderr_fd, pid_t *pid, int *pidfd)
{
	char answer_arg[16];
	char *const argv[] = {
		"dynbatch-worker", "--probe-fd", answer_arg,
		"--model", (char *)model_spec, NULL,
	};
	int src[] = { answer_fd };
	const struct spawn_plan plan = {
		.path = worker_path, .argv = argv, .src = src, .n_src = 1,
		.stderr_src = stderr_fd,
	};

	snprintf(answer_arg, sizeof(answer_arg), "%d", WORKER_PROBE_FD);
	if (fault_sim("spawn_probe"))
		return -EAGAIN;
	return spawn_child(&plan, pid, pidfd);
}

int worker_reap(pid_t pid, char *why, size_t why_len, int *signo)
{
	int status;
	pid_t r = waitpid(pid, &status, WNOHANG);

	if (r != pid)
		return 0;
	*signo = 0;
	if (WIFSIGNALED(status)) {
		*signo = WTERMSIG(status);
		snprintf(why, why_len, "killed by signal %d (%s)", *signo,
			 strsignal(*signo));
	} else if (WIFEXITED(status)) {
		snprintf(why, why_len, "exited with status %d", WEXITSTATUS(status));
	} else {
		snprintf(why, why_len, "ended");
	}
	return 1;
}

void worker_kill_wait(pid_t pid)
{
	if (pid <= 0)
		return;
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

/* 0 when path is a regular file we may execute, else a negative errno
 * (access() alone lets a directory through: its X bit means search). */
static int worker_check_executable(const char *path)
{
	struct stat st;

	if (access(path, X_OK) || stat(path, &st))
		return -errno;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	return S_ISREG(st.st_mode) ? 0 : -EACCES;
}

int worker_find_path(char *path, size_t len)
{
	const char *env = getenv("DYNBATCH_WORKER");
	char self[PATH_MAX];
	ssize_t n;
	char *slash;

	path[0] = '\0';
	if (env && *env) {	/* checked now: a typo fails the run at once */
		if ((size_t)snprintf(path, len, "%s", env) >= len)
			return -ENAMETOOLONG;
		return worker_check_executable(path);
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n < 0)
		return -errno;
	self[n] = '\0';
	slash = strrchr(self, '/');
	if (!slash)
		return -ENOENT;
	*slash = '\0';
	if ((size_t)snprintf(path, len, "%s/dynbatch-worker", self) >= len)
		return -ENAMETOOLONG;
	return worker_check_executable(path);
}
