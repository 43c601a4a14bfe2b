/*
 * worker_args.h - the command line of dynbatch-worker, as the coordinator
 * builds it (shard/worker_pool.c), parsed in one place for the
 * worker and for the test tools that stand in for it
 * (tests/plugins/hostile_worker.c).
 *
 *   --shared-fd FD --shard-fd FD --shard K --model SPEC --notify-fd FD
 *   [--spin-us N] [--garbage-every N] [--nice N]     serve a shard
 *   --probe-fd FD --model SPEC                       a vocabulary probe
 */
#ifndef DYNBATCH_WORKER_ARGS_H
#define DYNBATCH_WORKER_ARGS_H

#include <stdbool.h>
#include <stddef.h>

#include "worker/worker_loop.h"

struct worker_args {
	struct worker_options opt;	/* all but before_serving and
					 * result_hook, which are the caller's */
	int probe_fd;			/* --probe-fd, or -1: serve a shard */
	int nice;			/* --nice 0..19, or -1 */
	bool help;			/* --help: nothing else was checked */
};

/*
 * Parse argv into *a.  Returns 0, or -EINVAL with the reason (a bad
 * value, an unknown option, a missing one) in err.
 */
int worker_args_parse(int argc, char **argv, struct worker_args *a, char *err,
		      size_t err_len);

#endif /* DYNBATCH_WORKER_ARGS_H */
