/*
 * main.c - the dynbatch command line (docs/DESIGN.md 4).
 *
 *   dynbatch run [--workers N] [--batch B] [--model SPEC] [--max-context N]
 *                [--step-tokens N]
 *                [--input FILE|-] [--output FILE|-] [options]
 *   dynbatch serve [--listen HOST:PORT] [the same engine options] [options]
 *
 * Exit status: 0 when every request got its result line, 2 for a usage or
 * configuration error, 1 when the engine itself failed.
 *
 * main() parses the options and wires the parts: the engine (with its
 * io_uring loop), then the front end on that loop (jsonl_frontend for run,
 * http_server for serve), plugged in through frontend.h, then runs.
 */
#include <fcntl.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/http/chat_api.h"
#include "engine/engine.h"
#include "server/http/http_server.h"
#include "server/jsonl/jsonl_frontend.h"
#include "util/log.h"
#include "util/parse_num.h"

static void usage(FILE *f)
{
	fprintf(f,
"usage: dynbatch run [options]      decode JSON Lines requests\n"
"       dynbatch serve [options]    serve an OpenAI-style HTTP API\n"
"\n"
"A continuous-batching engine: a coordinator and N worker processes sharing\n"
"unnamed shared memory (each worker writes only its own shard's).\n"
"\n"
"Engine options (run and serve):\n"
"  --workers N        worker processes (default: number of CPUs); 0 runs the\n"
"                     same scheduler in one process, calling the model directly\n"
"  --batch B          total batch slots across all workers (default 64)\n"
"  --model SPEC       sim | sim:key=value,... | llama:CHECKPOINT[,key=value]\n"
"                     | path/to/plugin.so[:args] (default sim). sim keys:\n"
"                     vocab (32000), seed (0), call_us, row_us, token_ns (0),\n"
"                     mode=spin|sleep, crash_token=T, hang_token=T.\n"
"                     llama: a llama2.c checkpoint; key kernel=auto|avx2|portable\n"
"  --max-context N    most tokens in one sequence, prompt included (default:\n"
"                     the model's own limit, e.g. a checkpoint's seq_len,\n"
"                     else 4096; more than the model's is refused)\n"
"  --step-tokens N    stateful models (llama): at most N tokens per step; long\n"
"                     prompts are prefilled in chunks between decode steps\n"
"                     (default 512; 0: no budget, a prompt in one step)\n"
"  --tokenizer PATH   llama2.c tokenizer.bin of exactly the model's vocabulary:\n"
"                     string prompts, \"stop\" strings, results with text\n"
"                     (default: the tokenizer.bin beside a llama checkpoint)\n"
"  --stream           run: a line per step with the request's new text\n"
"                     (\"delta\"), before its result line\n"
"  --default-temperature T  the temperature of a request that sets none\n"
"                     (default 0: greedy; OpenAI's default is 1)\n"
"  --input FILE|-     JSON Lines requests (default -: standard input)\n"
"  --output FILE|-    JSON Lines results (default -: standard output)\n"
"  --max-line BYTES   longest input line; a longer one gets an error result\n"
"                     and is skipped without being buffered (default 1048576)\n"
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
"serve options (POST /v1/completions, /v1/chat/completions, GET /v1/models,\n"
"/health, /metrics;\n"
"SIGTERM drains: no new connections, every accepted request finishes):\n"
"  --listen HOST:PORT address to serve (default 127.0.0.1:8080; port 0 picks\n"
"                     a free one, printed on stderr)\n"
"  --api-key KEY      require 'Authorization: Bearer KEY' on every endpoint\n"
"                     but /health (default: $DYNBATCH_API_KEY, else none)\n"
"  --model-name NAME  the model's name in answers (default: sim, or the\n"
"                     plugin's file name); no control characters\n"
"  --max-connections N  open connections; more get 503 (default 1024)\n"
"  --conn-buffer BYTES  unsent answer bytes per connection before no more\n"
"                     pipelined requests are read from it and its stream\n"
"                     gives up its slot until the client reads (default\n"
"                     65536; also the socket's send buffer)\n"
"  --write-timeout MS no output progress this long cancels the request and\n"
"                     closes the connection (default 30000)\n"
"  --read-timeout MS  a request must arrive whole within this (default 30000)\n"
"  --idle-timeout MS  idle keep-alive connections close (default 60000)\n"
"  --max-body BYTES   larger request bodies get 413 (default 1048576)\n"
"  --max-header-bytes BYTES  request line + headers, else 431 (default 16384)\n"
"  --max-headers N    header fields, else 431 (default 64)\n"
"  --max-answer-bytes BYTES  the most a non-streamed answer may reach (n x\n"
"                     max_tokens with text and logprobs), else 400 (16 MiB)\n"
"  --answer-budget BYTES  all non-streamed answers being built together,\n"
"                     else 429 (256 MiB)\n"
"  --chat-template llama2|chatml  how /v1/chat/completions renders its\n"
"                     messages into a prompt (llama2: Meta's [INST] format;\n"
"                     chatml: <|im_start|>role ...); needs a tokenizer.\n"
"                     Without it that endpoint answers 400\n"
"\n"
"Environment: DYNBATCH_WORKER (worker binary), DYNBATCH_LOG=error|warn|info|debug,\n"
"DYNBATCH_API_KEY (serve)\n");
}

/* A temperature: a finite number >= 0 (as a request's field).  0 or 1. */
static int parse_temperature(const char *s, float *out)
{
	char *end;
	double d;

	errno = 0;
	d = strtod(s, &end);
	if (!*s || *end || errno || !isfinite(d) || d < 0 || d > 1e6)
		return 1;
	*out = (float)d;
	return 0;
}

/* A model name goes into answers and logs: no control characters. */
static bool has_control_char(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return true;
	return false;
}

/* The name answers give the model: "sim", or a plugin's file name. */
static const char *default_model_name(const char *spec, char *buf, size_t len)
{
	const char *base = strrchr(spec, '/');
	size_t n;

	if (!strncmp(spec, "sim", 3) && (spec[3] == '\0' || spec[3] == ':'))
		return "sim";
	base = base ? base + 1 : spec;
	n = strcspn(base, ":");
	if (n > 3 && !strncmp(base + n - 3, ".so", 3))
		n -= 3;
	snprintf(buf, len, "%.*s", (int)n, base);
	return buf;
}

/* Wire the engine and the front end (http: serve), run, tear down.
 * Returns the exit status. */
static int run(const struct engine_config *cfg, const struct http_config *http,
	       const struct jsonl_config *jsonl_cfg)
{
	struct http_server *srv = NULL;
	struct jsonl_frontend *jsonl = NULL;
	struct engine *e;
	char err[256];
	int status;

	e = engine_create(cfg, &status);
	if (!e)
		return status;
	if (jsonl_cfg->default_temperature > 0.0f && !engine_has_logits(e)) {
		fprintf(stderr, "dynbatch: --default-temperature %g: the model "
			"gives tokens, not logits, so it cannot sample\n",
			(double)jsonl_cfg->default_temperature);
		engine_destroy(e);
		return ENGINE_EXIT_USAGE;
	}
	if (http) {
		struct request_limits lim = { .vocab = engine_vocab(e),
					      .max_context = engine_max_context(e),
					      .has_logits = engine_has_logits(e),
					      .tok = engine_tokenizer(e),
					      .default_temperature = http->default_temperature };

		/* checked here, not with the options: a llama checkpoint's
		 * tokenizer.bin beside it is found by engine_create() */
		if (http->chat_template != CHAT_TEMPLATE_NONE && !lim.tok) {
			fprintf(stderr, "dynbatch serve: --chat-template %s needs a "
				"tokenizer to encode messages (--tokenizer PATH, or a "
				"tokenizer.bin beside a llama checkpoint)\n",
				chat_template_name(http->chat_template));
			engine_destroy(e);
			return ENGINE_EXIT_USAGE;
		}
		srv = http_server_create(http, e, engine_io(e), &lim, err, sizeof(err));
		if (!srv) {
			fprintf(stderr, "dynbatch: %s\n", err);
			engine_destroy(e);
			return ENGINE_EXIT_USAGE;
		}
		engine_set_frontend(e, &http_server_ops, srv);
	} else {
		struct jsonl_config j = *jsonl_cfg;

		j.n_slots = cfg->n_slots;
		j.max_context = engine_max_context(e);
		jsonl = jsonl_frontend_create(&j, e, &status);
		if (!jsonl) {
			engine_destroy(e);
			return status;
		}
		engine_set_frontend(e, j.stream ? &jsonl_stream_frontend_ops :
				    &jsonl_frontend_ops, jsonl);
	}
	status = engine_run(e);
	/* the engine first: its io_uring goes, with our operations on it */
	engine_destroy(e);
	http_server_destroy(srv);
	if (jsonl_frontend_destroy(jsonl) && status == ENGINE_EXIT_OK)
		status = ENGINE_EXIT_FAILED;	/* result lines were lost */
	return status;
}

/*
 * Descriptors 0, 1 and 2 open before anything else is: started with one
 * of them closed, the next descriptor we open (an eventfd, say) would take
 * its number, and `--input -` would read our own wake-ups or `--output -`
 * write result lines into it.  A closed one gets /dev/null.
 */
static void std_fds_open(void)
{
	for (int fd = 0; fd <= 2; fd++) {
		if (fcntl(fd, F_GETFD) >= 0)
			continue;
		int null = open("/dev/null", fd ? O_WRONLY : O_RDONLY);

		if (null >= 0 && null != fd) {	/* a lower one was closed too */
			dup2(null, fd);
			close(null);
		}
	}
}

int main(int argc, char **argv)
{
	enum { OPT_WORKERS = 256, OPT_BATCH, OPT_MODEL, OPT_MAX_CONTEXT, OPT_INPUT,
	       OPT_OUTPUT, OPT_STATS, OPT_QUEUE, OPT_STEP_TIMEOUT, OPT_POISON,
	       OPT_POLICY, OPT_SPIN, OPT_PROGRESS, OPT_NO_PROGRESS, OPT_GARBAGE,
	       OPT_WORKER_NICE, OPT_START_TIMEOUT, OPT_LISTEN, OPT_API_KEY,
	       OPT_MODEL_NAME, OPT_MAX_CONN, OPT_CONN_BUFFER, OPT_WRITE_TIMEOUT,
	       OPT_READ_TIMEOUT, OPT_IDLE_TIMEOUT, OPT_MAX_BODY, OPT_MAX_HEADER_BYTES,
	       OPT_MAX_HEADERS, OPT_MAX_LINE, OPT_STEP_TOKENS,
	       OPT_DEFAULT_TEMPERATURE, OPT_TOKENIZER, OPT_STREAM,
	       OPT_MAX_ANSWER, OPT_ANSWER_BUDGET,
	       OPT_CHAT_TEMPLATE };
	static const struct option longopts[] = {
		{ "workers", required_argument, NULL, OPT_WORKERS },
		{ "batch", required_argument, NULL, OPT_BATCH },
		{ "model", required_argument, NULL, OPT_MODEL },
		{ "max-context", required_argument, NULL, OPT_MAX_CONTEXT },
		{ "step-tokens", required_argument, NULL, OPT_STEP_TOKENS },
		{ "default-temperature", required_argument, NULL,
		  OPT_DEFAULT_TEMPERATURE },
		{ "tokenizer", required_argument, NULL, OPT_TOKENIZER },
		{ "max-answer-bytes", required_argument, NULL, OPT_MAX_ANSWER },
		{ "answer-budget", required_argument, NULL, OPT_ANSWER_BUDGET },
		{ "stream", no_argument, NULL, OPT_STREAM },
		{ "input", required_argument, NULL, OPT_INPUT },
		{ "output", required_argument, NULL, OPT_OUTPUT },
		{ "stats", required_argument, NULL, OPT_STATS },
		{ "max-line", required_argument, NULL, OPT_MAX_LINE },
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
		{ "listen", required_argument, NULL, OPT_LISTEN },
		{ "api-key", required_argument, NULL, OPT_API_KEY },
		{ "model-name", required_argument, NULL, OPT_MODEL_NAME },
		{ "max-connections", required_argument, NULL, OPT_MAX_CONN },
		{ "conn-buffer", required_argument, NULL, OPT_CONN_BUFFER },
		{ "write-timeout", required_argument, NULL, OPT_WRITE_TIMEOUT },
		{ "read-timeout", required_argument, NULL, OPT_READ_TIMEOUT },
		{ "idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT },
		{ "max-body", required_argument, NULL, OPT_MAX_BODY },
		{ "max-header-bytes", required_argument, NULL, OPT_MAX_HEADER_BYTES },
		{ "max-headers", required_argument, NULL, OPT_MAX_HEADERS },
		{ "chat-template", required_argument, NULL, OPT_CHAT_TEMPLATE },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct engine_config cfg = {
		.n_workers = ncpu > 0 ? (uint32_t)ncpu : 1,
		.n_slots = 64,
		.model_spec = "sim",
		.step_tokens = ENGINE_DEFAULT_STEP_TOKENS,
		.queue_capacity = 1024,
		.step_timeout_ms = 10000,
		.start_timeout_ms = 60000,
		.spin_us = 20,
		.poison_attempts = 2,
		.worker_nice = 5,
		.progress = -1,
	};
	struct http_config http = {
		.listen = "127.0.0.1:8080",
		.api_key = getenv("DYNBATCH_API_KEY"),
		.max_connections = 1024,
		.conn_buffer = 65536,
		.write_timeout_ms = 30000,
		.read_timeout_ms = 30000,
		.idle_timeout_ms = 60000,
		.limits = { .max_header_bytes = 16384, .max_headers = 64,
			    .max_body = 1u << 20 },
		.max_answer_bytes = 16u << 20,
		.answer_budget = 256u << 20,
	};
	struct jsonl_config jsonl = {
		.input_path = "-",
		.output_path = "-",
		.max_line = 1u << 20,
	};
	char name_buf[128];
	bool serve, serve_opt = false, run_opt = false;
	uint32_t v;
	int c, idx = 0, bad = 0;

	/* Requests with many stop sequences build automata of a few hundred
	 * KiB each; served from mmap they would cost page faults on every
	 * request.  Keep them on the heap (memory is bounded by the queue). */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
	log_set_role("coordinator");
	std_fds_open();
	log_init_from_env();
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		usage(stdout);
		return 0;
	}
	if (argc < 2 || (strcmp(argv[1], "run") && strcmp(argv[1], "serve"))) {
		fprintf(stderr, "dynbatch: expected a command: 'dynbatch run [options]' "
			"or 'dynbatch serve [options]' (see --help)\n");
		return ENGINE_EXIT_USAGE;
	}
	serve = !strcmp(argv[1], "serve");
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
		case OPT_STEP_TOKENS:
			bad = parse_u32(optarg, 0, 1u << 24, &cfg.step_tokens);
			break;
		case OPT_INPUT:
			jsonl.input_path = optarg;
			run_opt = true;
			break;
		case OPT_OUTPUT:
			jsonl.output_path = optarg;
			run_opt = true;
			break;
		case OPT_MAX_ANSWER:
			bad = parse_u64(optarg, 1024, UINT64_MAX / 2,
					&http.max_answer_bytes);
			serve_opt = true;
			break;
		case OPT_ANSWER_BUDGET:
			bad = parse_u64(optarg, 1024, UINT64_MAX / 2,
					&http.answer_budget);
			serve_opt = true;
			break;
		case OPT_TOKENIZER:
			cfg.tokenizer_path = optarg;
			break;
		case OPT_STREAM:
			jsonl.stream = true;
			run_opt = true;
			break;
		case OPT_DEFAULT_TEMPERATURE:
			bad = parse_temperature(optarg, &jsonl.default_temperature);
			http.default_temperature = jsonl.default_temperature;
			break;
		case OPT_MAX_LINE:
			bad = parse_u32(optarg, 1, 1u << 30, &jsonl.max_line);
			run_opt = true;
			break;
		case OPT_LISTEN:
			http.listen = optarg;
			serve_opt = true;
			break;
		case OPT_API_KEY:
			http.api_key = optarg;
			serve_opt = true;
			bad = !*optarg;
			break;
		case OPT_MODEL_NAME:
			http.model_name = optarg;
			serve_opt = true;
			if (*optarg && has_control_char(optarg)) {
				fprintf(stderr, "dynbatch: --model-name must not contain "
					"control characters (tab, newline, ...)\n");
				return ENGINE_EXIT_USAGE;
			}
			bad = !*optarg;
			break;
		case OPT_MAX_CONN:
			bad = parse_u32(optarg, 1, 65536, &http.max_connections);
			serve_opt = true;
			break;
		case OPT_CONN_BUFFER:
			bad = parse_u32(optarg, 4096, 1u << 30, &http.conn_buffer);
			serve_opt = true;
			break;
		case OPT_WRITE_TIMEOUT:
			bad = parse_u32(optarg, 1, 86400000, &http.write_timeout_ms);
			serve_opt = true;
			break;
		case OPT_READ_TIMEOUT:
			bad = parse_u32(optarg, 1, 86400000, &http.read_timeout_ms);
			serve_opt = true;
			break;
		case OPT_IDLE_TIMEOUT:
			bad = parse_u32(optarg, 1, 86400000, &http.idle_timeout_ms);
			serve_opt = true;
			break;
		case OPT_MAX_BODY:
			bad = parse_u32(optarg, 1, 1u << 30, &http.limits.max_body);
			serve_opt = true;
			break;
		case OPT_MAX_HEADER_BYTES:
			bad = parse_u32(optarg, 256, 1u << 20, &http.limits.max_header_bytes);
			serve_opt = true;
			break;
		case OPT_MAX_HEADERS:
			bad = parse_u32(optarg, 4, 10000, &http.limits.max_headers);
			serve_opt = true;
			break;
		case OPT_CHAT_TEMPLATE:
			serve_opt = true;
			if (chat_template_from_name(optarg, &http.chat_template)) {
				fprintf(stderr, "dynbatch: unknown --chat-template '%s' "
					"(known: " CHAT_TEMPLATE_NAMES ")\n", optarg);
				return ENGINE_EXIT_USAGE;
			}
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
	if (serve && run_opt) {
		fprintf(stderr, "dynbatch serve: --input, --output and --max-line are for "
			"'dynbatch run'; requests come over HTTP\n");
		return ENGINE_EXIT_USAGE;
	}
	if (!serve && serve_opt) {
		fprintf(stderr, "dynbatch run: HTTP options are for 'dynbatch serve'\n");
		return ENGINE_EXIT_USAGE;
	}
	if (serve) {
		if (!http.model_name)
			http.model_name = default_model_name(cfg.model_spec, name_buf,
							     sizeof(name_buf));
		/* An empty key would turn authentication off without a word:
		 * refused like --api-key '', so a typo cannot open the server. */
		if (http.api_key && !*http.api_key) {
			fprintf(stderr, "dynbatch serve: DYNBATCH_API_KEY is set but "
				"empty; set a key, or unset it to serve without one\n");
			return ENGINE_EXIT_USAGE;
		}
		cfg.keep_running = true;
		/* a recv and a send may be queued per connection in one round */
		cfg.io_entries = 1024;
	}
	return run(&cfg, serve ? &http : NULL, &jsonl);
}
