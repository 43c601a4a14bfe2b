/*
 * lg_opts.c - loadgen's command line (loadgen_internal.h).
 */
#include "bench/loadgen/loadgen_internal.h"

/* ------------------------------------------------------------------------
 * Command line and setup
 */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: loadgen --port P [options]\n"
		"  --host H             server address (default 127.0.0.1)\n"
		"  --requests N         requests to start (default 1000)\n"
		"  --concurrency C      connections (default 64)\n"
		"  --seed S             request seed (default: from the clock; printed)\n"
		"  --stream-frac F      fraction of streaming requests (0.5)\n"
		"  --disconnect-frac F  fraction the client walks away from (0)\n"
		"  --stall N            extra clients that stream and never read (0)\n"
		"  --max-prompt P       longest prompt (64)\n"
		"  --max-tokens M       largest max_tokens (64)\n"
		"  --stop-frac F        fraction of requests with stops (0.3)\n"
		"  --vocab V            the server's sim vocabulary (32000)\n"
		"  --api-key KEY        send Authorization: Bearer KEY\n"
		"  --requests-out FILE  completed requests as JSON Lines input\n"
		"  --results-out FILE   their results, for refdecode --check\n"
		"  --duration-s S       stop starting requests after S seconds\n"
		"  --timeout-s S        no progress this long is an error (60)\n"
		"  --stall-wait-s S     wait up to S s for the server to close each\n"
		"                       stall client after the run (0: look once)\n"
		"  --strict             a 500 is an error too\n"
		"  --input FILE         requests from a JSON Lines file (line n is\n"
		"                       request n; --requests at most its lines)\n"
		"  --quiet              no per-failure lines, no human summary\n"
		"Exit: 0 ok, 1 protocol errors, 2 usage error.\n");
}

static int bad_opt(const char *name, const char *val, const char *want)
{
	fprintf(stderr, "loadgen: --%s: want %s, got '%s'\n", name, want, val);
	return -EINVAL;
}

/* A decimal fraction or duration in [lo, hi]. */
static int parse_real(const char *s, double lo, double hi, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(s, &end);
	return (errno || end == s || *end || !(*out >= lo && *out <= hi)) ?
	       -EINVAL : 0;
}

int parse_opts(int argc, char **argv, struct lg_opts *o)
{
	static const struct option longopts[] = {
		{ "port", required_argument, NULL, 'P' },
		{ "host", required_argument, NULL, 'H' },
		{ "requests", required_argument, NULL, 'n' },
		{ "concurrency", required_argument, NULL, 'c' },
		{ "seed", required_argument, NULL, 's' },
		{ "stream-frac", required_argument, NULL, 'S' },
		{ "disconnect-frac", required_argument, NULL, 'D' },
		{ "stall", required_argument, NULL, 'l' },
		{ "max-prompt", required_argument, NULL, 'p' },
		{ "max-tokens", required_argument, NULL, 'm' },
		{ "stop-frac", required_argument, NULL, 'f' },
		{ "vocab", required_argument, NULL, 'v' },
		{ "api-key", required_argument, NULL, 'k' },
		{ "requests-out", required_argument, NULL, 'R' },
		{ "results-out", required_argument, NULL, 'O' },
		{ "duration-s", required_argument, NULL, 'd' },
		{ "timeout-s", required_argument, NULL, 't' },
		{ "stall-wait-s", required_argument, NULL, 'W' },
		{ "strict", no_argument, NULL, 'x' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "input", required_argument, NULL, 'I' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool has_seed = false;
	uint32_t port;
	int c, li = 0, rc = 0;

	opterr = 0;	/* one message of our own, naming the option */
	while (!rc && (c = getopt_long(argc, argv, ":", longopts, &li)) != -1) {
		const char *name = longopts[li].name;

		switch (c) {
		case 'P':
			o->port = optarg;
			if (parse_u32(optarg, 1, 65535, &port))
				rc = bad_opt(name, optarg, "a port in [1, 65535]");
			break;
		case 'H': o->host = optarg; break;
		case 'k': o->api_key = optarg; break;
		case 'R': o->requests_out = optarg; break;
		case 'O': o->results_out = optarg; break;
		case 'x': o->strict = true; break;
		case 'q': o->quiet = true; break;
		case 'I': o->input = optarg; break;
#define U64(ch, field, lo, hi, want)					\
		case ch:						\
			if (parse_u64(optarg, lo, hi, &o->field))	\
				rc = bad_opt(name, optarg, want);	\
			break;
#define U32(ch, field, lo, hi, want)					\
		case ch:						\
			if (parse_u32(optarg, lo, hi, &o->field))	\
				rc = bad_opt(name, optarg, want);	\
			break;
#define REAL(ch, field, lo, hi, want)					\
		case ch:						\
			if (parse_real(optarg, lo, hi, &o->field))	\
				rc = bad_opt(name, optarg, want);	\
			break;
		U64('n', n_requests, 0, UINT64_MAX, "a count")
		U64('s', seed, 0, UINT64_MAX, "an unsigned 64-bit integer")
		U32('c', concurrency, 1, 100000, "an integer in [1, 100000]")
		U32('l', n_stall, 0, 100000, "an integer in [0, 100000]")
		U32('p', max_prompt, 0, 1u << 20, "an integer in [0, 1048576]")
		U32('m', max_tokens, 1, 1u << 20, "an integer in [1, 1048576]")
		U32('v', vocab, 1, INT32_MAX, "an integer in [1, 2147483647]")
		REAL('S', stream_frac, 0, 1, "a fraction in [0, 1]")
		REAL('D', disconnect_frac, 0, 1, "a fraction in [0, 1]")
		REAL('f', stop_frac, 0, 1, "a fraction in [0, 1]")
		REAL('d', duration_s, 1e-3, 1e7, "seconds > 0")
		REAL('t', timeout_s, 1e-3, 1e7, "seconds > 0")
		REAL('W', stall_wait_s, 0, 1e7, "seconds >= 0")
#undef U64
#undef U32
#undef REAL
		case 'h':
			usage(stdout);
			exit(0);
		case ':':
			fprintf(stderr, "loadgen: %s needs a value\n",
				argv[optind - 1]);
			return -EINVAL;
		default:
			fprintf(stderr, "loadgen: unknown option '%s' (see --help)\n",
				argv[optind - 1]);
			return -EINVAL;
		}
		if (c == 's')
			has_seed = true;
	}
	if (!rc && optind < argc) {
		fprintf(stderr, "loadgen: unexpected argument '%s'\n",
			argv[optind]);
		rc = -EINVAL;
	}
	if (!rc && !o->port) {
		fprintf(stderr, "loadgen: --port is required\n");
		rc = -EINVAL;
	}
	/* Different runs differ unless told; the seed is printed to replay. */
	if (!has_seed)
		o->seed = clock_now_ns() ^ ((uint64_t)time(NULL) << 20) ^
			  (uint64_t)getpid();
	return rc;
}

/* Resolve --host/--port once, blocking: before any load. */
