/*
 * worker_pool.c - see worker_pool.h.
 */
#include "worker_pool.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fault_sim.h"

#define WORKER_NOTIFY_FD 3

/* In the child between fork and exec: only async-signal-safe calls. */
static void worker_child(const struct worker_spawn_args *a, pid_t parent)
{
	char shard[16], fd[16], spin[16], garbage[16], nice[16];
	sigset_t none;
	int devnull;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	/* dup2() onto itself keeps close-on-exec: clear it by hand then. */
	if (a->notify_fd == WORKER_NOTIFY_FD ?
	    fcntl(WORKER_NOTIFY_FD, F_SETFD, 0) < 0 :
	    dup2(a->notify_fd, WORKER_NOTIFY_FD) < 0)
		_exit(127);
	devnull = open("/dev/null", O_RDWR);
	if (devnull >= 0) {
		dup2(devnull, STDIN_FILENO);
		dup2(devnull, STDOUT_FILENO);
		if (devnull > WORKER_NOTIFY_FD)
			close(devnull);
	}
	snprintf(shard, sizeof(shard), "%u", a->shard);
	snprintf(fd, sizeof(fd), "%d", WORKER_NOTIFY_FD);
	snprintf(spin, sizeof(spin), "%u", a->spin_us);
	snprintf(garbage, sizeof(garbage), "%u", a->garbage_every);
	snprintf(nice, sizeof(nice), "%u", a->nice);
	execl(a->worker_path, "dynbatch-worker", "--shm", a->shm_name, "--shard",
	      shard, "--model", a->model_spec, "--notify-fd", fd, "--spin-us",
	      spin, "--garbage-every", garbage, "--nice", nice, (char *)NULL);
	_exit(127);
}

int worker_spawn(const struct worker_spawn_args *a, pid_t *pid, int *pidfd)
{
	pid_t parent = getpid();
	pid_t child;
	int fd;

	child = fault_sim("fork") ? (errno = EAGAIN, -1) : fork();
	if (child < 0)
		return -errno;
	if (child == 0)
		worker_child(a, parent);
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

int worker_find_path(char *path, size_t len)
{
	const char *env = getenv("DYNBATCH_WORKER");
	char self[PATH_MAX];
	ssize_t n;
	char *slash;

	if (env && *env) {
		snprintf(path, len, "%s", env);
		return 0;
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
	return access(path, X_OK) ? -errno : 0;
}
