/*
 * main.c - the dynbatch command line (DESIGN.md 4.1).
 *
 *   dynbatch run [--workers N] [--batch B] [--model SPEC] [--max-context N]
 *                [--input FILE|-] [--output FILE|-] [options]
 *
 * Exit status: 0 when every request got its result line, 2 for a usage or
 * configuration error, 1 when the engine itself failed.
 */
#include <getopt.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "log.h"
#include "parse_num.h"

static void usage(FILE *f)
{
	fprintf(f,
"usage: dynbatch run [options]\n"
"\n"
"Decode JSON Lines requests with a continuous-batching engine: a coordinator\n"
"and N worker processes sharing one POSIX shared-memory segment.\n"
"\n"
"  --workers N        worker processes (default: number of CPUs); 0 runs the\n"
"                     same scheduler in one process, calling the model directly\n"
"  --batch B          total batch slots across all workers (default 64)\n"
"  --model SPEC       sim | sim:key=value,... | path/to/plugin.so[:args]\n"
"                     (default sim). sim keys: vocab (32000), seed (0),\n"
"                     call_us, row_us, token_ns (0), mode=spin|sleep,\n"
"                     crash_token=T, hang_token=T\n"
"  --max-context N    most tokens in one sequence, prompt included (4096)\n"
"  --input FILE|-     JSON Lines requests (default -: standard input)\n"
"  --output FILE|-    JSON Lines results (default -: standard output)\n"
"  --stats FILE       write the end-of-run summary as JSON to FILE\n"
"  --queue N          waiting-queue capacity; input is read only while it has\n"
"                     room (default 1024)\n"
"  --step-timeout MS  a model step running longer kills its worker (10000)\n"
"  --start-timeout MS a worker not ready (attached, model loaded) by then is\n"
"                     killed and counts as a failed start (60000)\n"
"  --poison-attempts N  lone failed steps before a request is failed as\n"
"                     poison (default 2)\n"
"  --policy P         dynamic (default): refill a freed slot before the\n"
"                     shard's next step; static: refill a shard only when\n"
"                     all its slots are free (for comparison)\n"
"  --spin-us N        spin this long waiting before sleeping (default 20)\n"
"  --worker-nice N    workers' nice value, so the coordinator that every\n"
"                     shard waits on wins a busy CPU (default 5)\n"
"  --progress / --no-progress  progress line on stderr (default: if a tty)\n"
"  --garbage-every N  testing: workers garble every Nth result (N >= 2)\n"
"  --help             this text\n"
"\n"
"Environment: DYNBATCH_WORKER (worker binary), DYNBATCH_LOG=error|warn|info|debug\n");
}

int main(int argc, char **argv)
{
	enum { OPT_WORKERS = 256, OPT_BATCH, OPT_MODEL, OPT_MAX_CONTEXT, OPT_INPUT,
	       OPT_OUTPUT, OPT_STATS, OPT_QUEUE, OPT_STEP_TIMEOUT, OPT_POISON,
	       OPT_POLICY, OPT_SPIN, OPT_PROGRESS, OPT_NO_PROGRESS, OPT_GARBAGE,
	       OPT_WORKER_NICE, OPT_START_TIMEOUT };
	static const struct option longopts[] = {
		{ "workers", required_argument, NULL, OPT_WORKERS },
		{ "batch", required_argument, NULL, OPT_BATCH },
		{ "model", required_argument, NULL, OPT_MODEL },
		{ "max-context", required_argument, NULL, OPT_MAX_CONTEXT },
		{ "input", required_argument, NULL, OPT_INPUT },
		{ "output", required_argument, NULL, OPT_OUTPUT },
		{ "stats", required_argument, NULL, OPT_STATS },
		{ "queue", required_argument, NULL, OPT_QUEUE },
		{ "step-timeout", required_argument, NULL, OPT_STEP_TIMEOUT },
		{ "start-timeout", required_argument, NULL, OPT_START_TIMEOUT },
		{ "poison-attempts", required_argument, NULL, OPT_POISON },
		{ "policy", required_argument, NULL, OPT_POLICY },
		{ "spin-us", required_argument, NULL, OPT_SPIN },
		{ "progress", no_argument, NULL, OPT_PROGRESS },
		{ "no-progress", no_argument, NULL, OPT_NO_PROGRESS },
		{ "garbage-every", required_argument, NULL, OPT_GARBAGE },
		{ "worker-nice", required_argument, NULL, OPT_WORKER_NICE },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct engine_config cfg = {
		.n_workers = ncpu > 0 ? (uint32_t)ncpu : 1,
		.n_slots = 64,
		.model_spec = "sim",
		.max_context = 4096,
		.input_path = "-",
		.output_path = "-",
		.queue_capacity = 1024,
		.step_timeout_ms = 10000,
		.start_timeout_ms = 60000,
		.spin_us = 20,
		.poison_attempts = 2,
		.worker_nice = 5,
		.progress = -1,
	};
	uint32_t v;
	int c, idx = 0, bad = 0;

	/* Requests with many stop sequences build automata of a few hundred
	 * KiB each; served from mmap they would cost page faults on every
	 * request.  Keep them on the heap (memory is bounded by the queue). */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
	log_set_role("coordinator");
	log_init_from_env();
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		usage(stdout);
		return 0;
	}
	if (argc < 2 || strcmp(argv[1], "run")) {
		fprintf(stderr, "dynbatch: expected a command: 'dynbatch run [options]' "
			"(see --help)\n");
		return ENGINE_EXIT_USAGE;
	}
	argv++;
	argc--;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, &idx)) != -1) {
		switch (c) {
		case OPT_WORKERS:
			bad = parse_u32(optarg, 0, 1024, &cfg.n_workers);
			break;
		case OPT_BATCH:
			bad = parse_u32(optarg, 1, 65536, &cfg.n_slots);
			break;
		case OPT_MODEL:
			cfg.model_spec = optarg;
			break;
		case OPT_MAX_CONTEXT:
			bad = parse_u32(optarg, 1, 1u << 24, &cfg.max_context);
			break;
		case OPT_INPUT:
			cfg.input_path = optarg;
			break;
		case OPT_OUTPUT:
			cfg.output_path = optarg;
			break;
		case OPT_STATS:
			cfg.stats_path = optarg;
			break;
		case OPT_QUEUE:
			bad = parse_u32(optarg, 1, 1u << 22, &cfg.queue_capacity);
			break;
		case OPT_STEP_TIMEOUT:
			bad = parse_u32(optarg, 1, 86400000, &v);
			cfg.step_timeout_ms = v;
			break;
		case OPT_START_TIMEOUT:
			bad = parse_u32(optarg, 1, 86400000, &v);
			cfg.start_timeout_ms = v;
			break;
		case OPT_POISON:
			bad = parse_u32(optarg, 1, 1000, &cfg.poison_attempts);
			break;
		case OPT_POLICY:
			if (!strcmp(optarg, "static"))
				cfg.policy_static = true;
			else if (strcmp(optarg, "dynamic"))
				bad = -1;
			break;
		case OPT_SPIN:
			bad = parse_u32(optarg, 0, 1000000, &cfg.spin_us);
			break;
		case OPT_PROGRESS:
			cfg.progress = 1;
			break;
		case OPT_NO_PROGRESS:
			cfg.progress = 0;
			break;
		case OPT_WORKER_NICE:
			bad = parse_u32(optarg, 0, 19, &cfg.worker_nice);
			break;
		case OPT_GARBAGE:
			/* 1 would garble every result: no step could ever complete */
			bad = parse_u32(optarg, 0, 1u << 30, &cfg.garbage_every) ||
			      cfg.garbage_every == 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case ':':
			fprintf(stderr, "dynbatch: option %s needs a value\n", argv[optind - 1]);
			return ENGINE_EXIT_USAGE;
		default:
			fprintf(stderr, "dynbatch: unknown option '%s' (see --help)\n",
				argv[optind - 1]);
			return ENGINE_EXIT_USAGE;
		}
		if (bad) {
			fprintf(stderr, "dynbatch: bad value '%s' for --%s (see --help)\n",
				optarg, longopts[idx].name);
			return ENGINE_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "dynbatch: unexpected argument '%s' (see --help)\n",
			argv[optind]);
		return ENGINE_EXIT_USAGE;
	}
	return engine_run(&cfg);
}
