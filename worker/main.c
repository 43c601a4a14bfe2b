/*
 * main.c - dynbatch-worker: one model process of a dynbatch engine.
 *
 * Started by the coordinator (posix_spawn), never by hand:
 *   dynbatch-worker --shared-fd FD --shard-fd FD --shard K --model SPEC
 *                   --notify-fd FD [--spin-us N] [--garbage-every N]
 *                   [--nice N]
 * The descriptors are the ones shard/worker_pool.c passes: the
 * shared object (read-only), the shard's object and the write end of the
 * notification pipe.
 * Once attached and with its model loaded, it serves inside a seccomp
 * sandbox (sandbox.h; DYNBATCH_NO_SANDBOX=1 in the environment: none).
 *
 * Or, as a probe (engine/model_probe.h), so that a plugin's code
 * never runs in the coordinator:
 *   dynbatch-worker --probe-fd FD --model SPEC
 * loads the model exactly as a worker does, enters the same sandbox and
 * writes one line to FD, "vocab N" or "error TEXT", then exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/log.h"
#include "model/model_loader.h"
#include "worker/sandbox.h"
#include "worker/worker_args.h"
#include "worker/worker_loop.h"

/*
 * Give up every capability, for good (a no-op for an ordinary user).  A
 * worker needs none: it maps the descriptors it was given, lowers its own
 * priority and runs the model.  no_new_privs and an empty bounding set
 * first, so that a worker of root cannot get them back by exec'ing
 * anything; then the capabilities it has (raw capset: libcap is not worth
 * a dependency for one call).
 */
static void worker_drop_capabilities(void)
{
	struct __user_cap_header_struct hdr = {
		.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct none[2];

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		LOG(LOG_WARN, "no_new_privs: %s", strerror(errno));
	for (int cap = 0; prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++)
		prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);	/* EPERM: not root */
	memset(none, 0, sizeof(none));
	if (syscall(SYS_capset, &hdr, none))
		LOG(LOG_WARN, "capset: %s", strerror(errno));
}

static void usage(FILE *f)
{
	fprintf(f, "usage: dynbatch-worker --shared-fd FD --shard-fd FD --shard K "
		   "--model SPEC --notify-fd FD [--spin-us N] [--garbage-every N] "
		   "[--nice N]\n"
		   "       dynbatch-worker --probe-fd FD --model SPEC\n"
		   "Started by 'dynbatch run'; not meant to be run by hand.\n");
}

/*
 * worker_options.before_serving: with the model loaded, give up what a
 * step does not need (sandbox.h) unless DYNBATCH_NO_SANDBOX=1.  Writes
 * stay possible on stderr (log lines) and the notification descriptor.
 */
static int worker_enter_sandbox(const struct worker_options *opt, char *err,
				size_t err_len)
{
	const int write_fds[] = { STDERR_FILENO, opt->notify_fd };

	if (worker_sandbox_disabled()) {
		LOG(LOG_INFO, "no sandbox (%s=1)", WORKER_SANDBOX_OFF_ENV);
		return 0;
	}
	return worker_sandbox_enter(write_fds, sizeof(write_fds) / sizeof(write_fds[0]),
				    err, err_len);
}

/*
 * Write the probe's answer line to fd: "PREFIX TEXT\n", TEXT on one line
 * (a plugin's reason may hold a newline), in one write() so the reader
 * sees it whole (PIPE_BUF).  0 or -1.
 */
static int probe_answer(int fd, const char *prefix, const char *text)
{
	char line[512];
	int n = snprintf(line, sizeof(line) - 1, "%s %s", prefix, text);

	if (n < 0)
		return -1;
	if ((size_t)n > sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	for (int i = 0; i < n; i++)
		if (line[i] == '\n' || line[i] == '\r')
			line[i] = ' ';
	line[n++] = '\n';
	return write(fd, line, (size_t)n) == n ? 0 : -1;
}

/*
 * The probe: open the model as a worker would (model_open() runs the
 * plugin's constructors, create() and vocab()), enter the worker's
 * sandbox, answer, close the model.  Returns the exit status: 0 when the
 * model opened, 1 when it did not (the answer says why), 2 when no answer
 * could be written.
 */
static int worker_probe(int answer_fd, const char *spec)
{
	const int write_fds[] = { STDERR_FILENO, answer_fd };
	char err[256], why[256], num[48];
	struct model *m;
	int ret;

	if (fcntl(answer_fd, F_GETFD) < 0) {
		LOG(LOG_ERROR, "--probe-fd %d: %s", answer_fd, strerror(errno));
		return 2;
	}
	m = model_open(spec, err, sizeof(err));
	ret = m ? 0 : 1;
	/* refused or not, whatever the plugin left running (a thread) is
	 * filtered before we answer; a worker would not serve unfiltered */
	if (worker_sandbox_disabled()) {
		LOG(LOG_INFO, "no sandbox (%s=1)", WORKER_SANDBOX_OFF_ENV);
	} else if (worker_sandbox_enter(write_fds, sizeof(write_fds) /
					sizeof(write_fds[0]), why, sizeof(why)) && !ret) {
		snprintf(err, sizeof(err), "%s", why);
		ret = 1;
	}
	if (ret) {
		ret = probe_answer(answer_fd, "error", err) ? 2 : 1;
	} else {
		snprintf(num, sizeof(num), "%u context %u logits %d kv %llu",
			 model_vocab(m), model_max_context(m),
			 model_has_logits(m) ? 1 : 0,
			 model_is_paged(m) ? (unsigned long long)
			 model_kv_bytes_per_token(m) : 0ull);
		ret = probe_answer(answer_fd, "vocab", num) ? 2 : 0;
	}
	model_close(m);
	return ret;
}

int main(int argc, char **argv)
{
	struct worker_args a;
	char role[32], err[160];

	/* Die with the coordinator.  SIGINT from a terminal goes to the
	 * whole process group: the coordinator drains and ends us itself. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* Before any plugin code runs: another worker (same user) must not
	 * ptrace us or open our descriptors and memory through /proc, and a
	 * worker started by root keeps none of root's capabilities (which
	 * would let it do exactly that to the coordinator). */
	log_init_from_env();
	prctl(PR_SET_DUMPABLE, 0);
	worker_drop_capabilities();
	signal(SIGINT, SIG_IGN);
	if (worker_args_parse(argc, argv, &a, err, sizeof(err))) {
		fprintf(stderr, "dynbatch-worker: %s\n", err);
		usage(stderr);
		return 2;
	}
	if (a.help) {
		usage(stdout);
		return 0;
	}
	if (a.nice >= 0) {
		/* Below the coordinator: every shard waits on its latency, so
		 * on a busy machine it must win the CPU. */
		errno = 0;
		if (nice(a.nice) < 0 && errno)
			LOG(LOG_WARN, "nice(%d): %s", a.nice, strerror(errno));
	}
	if (a.probe_fd >= 0) {
		log_set_role("probe");
		return worker_probe(a.probe_fd, a.opt.model_spec);
	}
	a.opt.before_serving = worker_enter_sandbox;
	snprintf(role, sizeof(role), "worker %u", a.opt.shard);
	log_set_role(role);
	return worker_run(&a.opt);
}
