/*
 * worker_args.c - dynbatch-worker's command line; see worker_args.h.
 */
#include "worker/worker_args.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util/parse_num.h"

int worker_args_parse(int argc, char **argv, struct worker_args *a, char *err,
		      size_t err_len)
{
	static const struct option longopts[] = {
		{ "shared-fd", required_argument, NULL, 's' },
		{ "shard-fd", required_argument, NULL, 'f' },
		{ "shard", required_argument, NULL, 'k' },
		{ "model", required_argument, NULL, 'm' },
		{ "notify-fd", required_argument, NULL, 'n' },
		{ "spin-us", required_argument, NULL, 'p' },
		{ "garbage-every", required_argument, NULL, 'g' },
		{ "nice", required_argument, NULL, 'i' },
		{ "probe-fd", required_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	/* the most each option may say, in the order of longopts */
	static const uint64_t max[] = { 1u << 20, 1u << 20, 1u << 16, 0, 1u << 20,
					1000000, 1u << 30, 19, 1u << 20 };
	int c, idx = 0;
	uint64_t v;

	memset(a, 0, sizeof(*a));
	a->opt.shared_fd = a->opt.shard_fd = a->opt.notify_fd = -1;
	a->opt.spin_ns = 20000;
	a->probe_fd = a->nice = -1;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, &idx)) != -1) {
		if (c == 'h') {
			a->help = true;
			return 0;
		}
		if (c == '?' || c == ':') {
			snprintf(err, err_len, "unknown option or missing value: %s",
				 argv[optind - 1]);
			return -EINVAL;
		}
		if (c == 'm') {
			a->opt.model_spec = optarg;
			continue;
		}
		if (parse_u64(optarg, 0, max[idx], &v)) {
			snprintf(err, err_len, "bad value '%s' for --%s", optarg,
				 longopts[idx].name);
			return -EINVAL;
		}
		switch (c) {
		case 's': a->opt.shared_fd = (int)v; break;
		case 'f': a->opt.shard_fd = (int)v; break;
		case 'k': a->opt.shard = (uint32_t)v; break;
		case 'n': a->opt.notify_fd = (int)v; break;
		case 'p': a->opt.spin_ns = v * 1000; break;
		case 'g': a->opt.garbage_every = (uint32_t)v; break;
		case 'i': a->nice = (int)v; break;
		case 'P': a->probe_fd = (int)v; break;
		}
	}
	if (!a->opt.model_spec) {
		snprintf(err, err_len, "--model is missing");
		return -EINVAL;
	}
	if (a->probe_fd < 0 && (a->opt.shared_fd < 0 || a->opt.shard_fd < 0 ||
				a->opt.notify_fd < 0)) {
		snprintf(err, err_len, "--shared-fd, --shard-fd and --notify-fd "
			 "are needed to serve a shard");
		return -EINVAL;
	}
	return 0;
}
