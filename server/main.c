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
 * main() parses the options through the table (options.h) and wires the parts: the engine (with its
 * io_uring loop), then the front end on that loop (jsonl_frontend for run,
 * http_server for serve), plugged in through frontend.h, then runs.
 */
#include <fcntl.h>
#include <errno.h>
#include <stdbool.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/http/chat_api.h"
#include "server/http/chat_setup.h"
#include "server/http/tenant_table.h"
#include "text/chat_template.h"
#include "engine/engine.h"
#include "server/http/http_routes.h"
#include "server/http/http_server.h"
#include "server/jsonl/jsonl_frontend.h"
#include "server/options.h"
#include "util/clock.h"
#include "util/log.h"
#include "server/request/request_json.h"

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
static int run(const struct engine_config *cfg, struct http_config *http,
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
					      .grammar_max = engine_grammar_max(e),
					      .default_grammar = engine_default_grammar(e),
					      .default_temperature = http->default_temperature };

		/* decided here, not with the options: the tokenizer (a
		 * tokenizer.bin beside a llama checkpoint, a GGUF file's own)
		 * and the file's template are known once engine_create() ran */
		if (chat_config_resolve(http->chat_template, lim.tok,
					engine_chat_template(e), &http->chat, err,
					sizeof(err))) {
			fprintf(stderr, "dynbatch serve: %s\n", err);
			engine_destroy(e);
			return ENGINE_EXIT_USAGE;
		}
		if (http->chat.family >= 0)
			fprintf(stderr, "dynbatch serve: chat template: %s (%s)\n",
				chat_family_name(http->chat.family),
				http->chat_template ? "--chat-template" :
						      "the model file's");
		else if (http->chat.refusal[0] && engine_chat_template(e))
			fprintf(stderr, "dynbatch serve: /v1/chat/completions "
				"will answer 400: %s\n", http->chat.refusal);
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

/*
 * The parsed options into the engine's and the front ends' configurations
 * (the table's fields by name: options.h).
 */
static void options_wire(const struct server_options *o, bool serve,
			 struct engine_config *cfg, struct http_config *http,
			 struct jsonl_config *jsonl)
{
	*cfg = (struct engine_config){
		.n_workers = o->workers,
		.n_slots = o->batch,
		.model_spec = o->model,
		.tokenizer_path = o->tokenizer,
		.max_context = o->max_context,
		.step_tokens = o->step_tokens,
		.spec = { .mode = !strcmp(o->speculate, "ngram") ? SPEC_NGRAM : SPEC_OFF,
			  .max_draft = o->draft_tokens, .ngram_min = SPEC_NGRAM_MIN,
			  .ngram_max = SPEC_NGRAM_MAX },
		.grammar_max_bytes = o->grammar_max_bytes,
		.grammar_file = o->grammar_file,
		.block_tokens = o->block_tokens,
		.kv_memory = o->kv_memory,
		.prefix_cache = !strcmp(o->prefix_cache, "on"),
		.stats_path = o->stats,
		.queue_capacity = o->queue,
		.step_timeout_ms = o->step_timeout_ms,
		.start_timeout_ms = o->start_timeout_ms,
		.policy_static = !strcmp(o->policy, "static"),
		.spin_us = o->spin_us,
		.garbage_every = o->garbage_every,
		.poison_attempts = o->poison_attempts,
		.worker_nice = o->worker_nice,
		.progress = o->progress,
	};
	*http = (struct http_config){
		.listen = o->listen,
		.api_key = o->api_key,
		.model_name = o->model_name,
		.served_names = o->served_model_names.v,
		.n_served_names = o->served_model_names.n,
		.allowed_origins = o->allowed_origins.v,
		.n_allowed_origins = o->allowed_origins.n,
		.max_connections = o->max_connections,
		.conn_buffer = o->conn_buffer,
		.write_timeout_ms = o->write_timeout_ms,
		.read_timeout_ms = o->read_timeout_ms,
		.idle_timeout_ms = o->idle_timeout_ms,
		.limits = { .max_header_bytes = o->max_header_bytes,
			    .max_headers = o->max_headers,
			    .max_body = o->max_body },
		.default_temperature = o->default_temperature,
		.max_answer_bytes = o->max_answer_bytes,
		.answer_budget = o->answer_budget,
		.routes = &http_api_routes,
	};
	http->chat_template = o->chat_template;
	*jsonl = (struct jsonl_config){
		.input_path = o->input,
		.output_path = o->output,
		.max_line = o->max_line,
		.default_temperature = o->default_temperature,
		.stream = o->stream,
	};
	if (serve) {
		cfg->keep_running = true;
		/* a recv and a send may be queued per connection in one round */
		cfg->io_entries = 1024;
	}
}

int main(int argc, char **argv)
{
	struct server_options o;
	struct engine_config cfg;
	struct http_config http;
	struct jsonl_config jsonl;
	char name_buf[256];
	bool serve;
	int rc;

	/* Requests with many stop sequences build automata of a few hundred
	 * KiB each; served from mmap they would cost page faults on every
	 * request.  Keep them on the heap (memory is bounded by the queue). */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
	log_set_role("coordinator");
	std_fds_open();
	log_init_from_env();
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		options_print_usage(stdout);
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "--help-markdown")) {
		options_print_markdown(stdout);
		return 0;
	}
	if (argc < 2 || (strcmp(argv[1], "run") && strcmp(argv[1], "serve"))) {
		fprintf(stderr, "dynbatch: expected a command: 'dynbatch run [options]' "
			"or 'dynbatch serve [options]' (see --help)\n");
		return ENGINE_EXIT_USAGE;
	}
	serve = !strcmp(argv[1], "serve");
	options_init(&o);
	rc = options_parse(argc - 1, argv + 1, &o);
	if (rc)
		return rc > 0 ? ENGINE_EXIT_OK : ENGINE_EXIT_USAGE;
	if (serve && (o.modes_given & OPTION_RUN)) {
		fprintf(stderr, "dynbatch serve: --input, --output and --max-line are for "
			"'dynbatch run'; requests come over HTTP\n");
		return ENGINE_EXIT_USAGE;
	}
	if (!serve && (o.modes_given & OPTION_SERVE)) {
		fprintf(stderr, "dynbatch run: HTTP options are for 'dynbatch serve'\n");
		return ENGINE_EXIT_USAGE;
	}
	/* DESIGN 2.10: groups of P workers; the groups are not built yet */
	if (o.tensor_parallel > 1) {
		if (o.workers == 0 || o.workers % o.tensor_parallel) {
			fprintf(stderr, "dynbatch: --tensor-parallel %u needs --workers "
				"a multiple of %u (got %u)\n", o.tensor_parallel,
				o.tensor_parallel, o.workers);
			return ENGINE_EXIT_USAGE;
		}
		fprintf(stderr, "dynbatch: --tensor-parallel %u: worker groups "
			"are not built yet (issue 28); only 1 runs\n",
			o.tensor_parallel);
		return ENGINE_EXIT_USAGE;
	}
	options_wire(&o, serve, &cfg, &http, &jsonl);
	if (serve) {
		if (!http.model_name && http.n_served_names) {
			/* the first of the served names is the one answers give */
			size_t n = strcspn(http.served_names[0], ",");

			if (n >= sizeof(name_buf)) {
				fprintf(stderr, "dynbatch serve: --served-model-name: a "
					"name of %zu bytes; at most %zu\n", n,
					sizeof(name_buf) - 1);
				return ENGINE_EXIT_USAGE;
			}
			memcpy(name_buf, http.served_names[0], n);
			name_buf[n] = '\0';
			http.model_name = name_buf;
		}
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
		if (o.tenants && http.api_key) {
			fprintf(stderr, "dynbatch serve: --tenants names the API "
				"keys; leave out --api-key and DYNBATCH_API_KEY\n");
			return ENGINE_EXIT_USAGE;
		}
		if (o.tenants) {
			char err[512];

			http.tenants = tenant_table_load(o.tenants, clock_now_ns(),
							 err, sizeof(err));
			if (!http.tenants) {
				fprintf(stderr, "dynbatch serve: --tenants %s\n", err);
				return ENGINE_EXIT_USAGE;
			}
		}
	}
	rc = run(&cfg, serve ? &http : NULL, &jsonl);
	tenant_table_destroy(http.tenants);
	return rc;
}
