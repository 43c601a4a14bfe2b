/*
 * main.c - dynbatch-worker: one model process of a dynbatch engine.
 *
 * Started by the coordinator (posix_spawn), never by hand:
 *   dynbatch-worker --shm NAME --shard K --model SPEC --notify-fd FD
 *                   [--spin-us N] [--garbage-every N] [--nice N]
 * Once attached and with its model loaded, it serves inside a seccomp
 * sandbox (sandbox.h; DYNBATCH_NO_SANDBOX=1 in the environment: none).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "log.h"
#include "parse_num.h"
#include "sandbox.h"
#include "worker_loop.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: dynbatch-worker --shm NAME --shard K --model SPEC "
		   "--notify-fd FD [--spin-us N] [--garbage-every N] [--nice N]\n"
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

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "shm", required_argument, NULL, 's' },
		{ "shard", required_argument, NULL, 'k' },
		{ "model", required_argument, NULL, 'm' },
		{ "notify-fd", required_argument, NULL, 'n' },
		{ "spin-us", required_argument, NULL, 'p' },
		{ "garbage-every", required_argument, NULL, 'g' },
		{ "nice", required_argument, NULL, 'i' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct worker_options opt = {
		.notify_fd = -1,
		.spin_ns = 20000,
		.before_serving = worker_enter_sandbox,
	};
	uint64_t v;
	char role[32];
	int c, idx = 0;

	/* Die with the coordinator.  SIGINT from a terminal goes to the
	 * whole process group: the coordinator drains and ends us itself. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	signal(SIGINT, SIG_IGN);
	log_init_from_env();
	while ((c = getopt_long(argc, argv, "h", longopts, &idx)) != -1) {
		switch (c) {
		case 's': opt.shm_name = optarg; break;
		case 'm': opt.model_spec = optarg; break;
		case 'k':
			if (parse_u64(optarg, 0, 1u << 16, &v))
				goto bad;
			opt.shard = (uint32_t)v;
			break;
		case 'n':
			if (parse_u64(optarg, 0, 1u << 20, &v))
				goto bad;
			opt.notify_fd = (int)v;
			break;
		case 'p':
			if (parse_u64(optarg, 0, 1000000, &v))
				goto bad;
			opt.spin_ns = v * 1000;
			break;
		case 'g':
			if (parse_u64(optarg, 0, 1u << 30, &v))
				goto bad;
			opt.garbage_every = (uint32_t)v;
			break;
		case 'i':
			if (parse_u64(optarg, 0, 19, &v))
				goto bad;
			/* Below the coordinator: every shard waits on its
			 * latency, so on a busy machine it must win the CPU. */
			errno = 0;
			if (nice((int)v) < 0 && errno)
				LOG(LOG_WARN, "nice(%d): %s", (int)v, strerror(errno));
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!opt.shm_name || !opt.model_spec || opt.notify_fd < 0) {
		usage(stderr);
		return 2;
	}
	snprintf(role, sizeof(role), "worker %u", opt.shard);
	log_set_role(role);
	return worker_run(&opt);
bad:
	fprintf(stderr, "dynbatch-worker: bad value '%s' for --%s\n", optarg,
		longopts[idx].name);
	return 2;
}
