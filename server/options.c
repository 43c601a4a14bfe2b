/*
 * options.c - the option table, its parser, --help and --help-markdown
 * (options.h, docs/DESIGN.md 4).
 */
#include "server/options.h"

#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/parse_num.h"

#define FIELD(f) offsetof(struct server_options, f)

static const char *const policy_choices[] = { "dynamic", "static", NULL };
static const char *const on_off_choices[] = { "on", "off", NULL };
static const char *const speculate_choices[] = { "off", "ngram", NULL };
/* chat_setup.h's names, CHAT_SETUP_NAMES (test_options.c holds them
 * equal): chat_api.c's built-in two, then text/chat_template.h's families */
static const char *const chat_template_choices[] = {
	"llama2", "chatml", "mistral-v1", "mixtral", "llama3", "qwen2",
	"qwen2.5", "qwen3", "smollm", "zephyr", NULL };

/* ------------------------------------------------------------------------
 * The table, in the order --help lists it
 * ---------------------------------------------------------------------- */

const struct option_spec options_table[] = {
	{ .name = "workers", .arg = "N", .kind = OPTION_U32, .modes = OPTION_BOTH,
	  .min = 0, .max = 1024, .def_doc = "number of CPUs",
	  .offset = FIELD(workers),
	  .help = "worker processes; 0 runs the same scheduler in one process, "
		  "calling the model directly" },
	{ .name = "tensor-parallel", .arg = "P", .kind = OPTION_U32,
	  .modes = OPTION_BOTH, .min = 1, .max = 64, .def = "1",
	  .offset = FIELD(tensor_parallel),
	  .help = "workers per tensor-parallel group (DESIGN 2.10); --workers "
		  "must be a multiple. Only 1 is built yet: P > 1 is refused" },
	{ .name = "batch", .arg = "B", .kind = OPTION_U32, .modes = OPTION_BOTH,
	  .min = 1, .max = 65536, .def = "64", .offset = FIELD(batch),
	  .help = "total batch slots across all workers" },
	{ .name = "model", .arg = "SPEC", .kind = OPTION_STRING, .modes = OPTION_BOTH,
	  .def = "sim", .offset = FIELD(model),
	  .help = "sim | sim:key=value,... | llama:CHECKPOINT[,key=value] | "
		  "path/to/plugin.so[:args]. sim keys: vocab (32000), seed (0), "
		  "call_us, row_us, token_ns (0), mode=spin|sleep, crash_token=T, "
		  "hang_token=T. llama: a llama2.c checkpoint; key "
		  "kernel=auto|avx2|portable" },
	{ .name = "max-context", .arg = "N", .kind = OPTION_U32, .modes = OPTION_BOTH,
	  .min = 1, .max = 1u << 24,
	  /* engine_set_max_context(): ENGINE_DEFAULT_MAX_CONTEXT (test_options.c) */
	  .def_doc = "the model's own limit (a checkpoint's seq_len), else 4096",
	  .offset = FIELD(max_context),
	  .help = "most tokens in one sequence, prompt included; more than the "
		  "model's own limit is refused" },
	{ .name = "step-tokens", .arg = "N", .kind = OPTION_U32, .modes = OPTION_BOTH,
	  .min = 0, .max = 1u << 24,
	  .def = "512",		/* ENGINE_DEFAULT_STEP_TOKENS (test_options.c) */
	  .offset = FIELD(step_tokens),
	  .help = "stateful models (llama): at most N tokens per step; long "
		  "prompts are prefilled in chunks between decode steps (0: no "
		  "budget, a prompt in one step)" },
	{ .name = "speculate", .arg = "MODE", .kind = OPTION_ENUM, .modes = OPTION_BOTH,
	  .choices = speculate_choices, .def = "off", .offset = FIELD(speculate),
	  .help = "speculative decoding. ngram: each row guesses its next tokens "
		  "from its own earlier text (prompt lookup) and the model checks "
		  "the guesses in one step; the output is the same as with off, "
		  "bit for bit, for greedy and seeded requests alike" },
	{ .name = "draft-tokens", .arg = "K", .kind = OPTION_U32, .modes = OPTION_BOTH,
	  .min = 1, .max = 8,	/* SPEC_MAX_DRAFT */
	  .def = "4", .offset = FIELD(draft_tokens),
	  .help = "--speculate: the most tokens a row guesses in one step; each "
		  "row adapts its own count to how its guesses fare" },
	{ .name = "grammar-max-bytes", .arg = "N", .kind = OPTION_U32,
	  .modes = OPTION_BOTH, .min = 0, .max = 1u << 24,	/* SHM_MAX_GRAMMAR */
	  .def = "65536", .offset = FIELD(grammar_max_bytes),
	  .help = "the longest grammar a request may bring (its \"grammar\" "
		  "field's GBNF, or what its response_format compiles to); each "
		  "batch slot reserves this much shared memory; 0 refuses "
		  "grammars.  Grammars need the model's tokenizer" },
	{ .name = "grammar-file", .arg = "FILE", .kind = OPTION_STRING,
	  .modes = OPTION_BOTH, .def_doc = "none", .offset = FIELD(grammar_file),
	  .help = "a GBNF grammar (llama.cpp's syntax) for every request that "
		  "brings no \"grammar\" or response_format of its own; refused "
		  "at start (exit 2) with its line and column when it does not "
		  "compile" },
	{ .name = "block-tokens", .arg = "N", .kind = OPTION_U32, .modes = OPTION_BOTH,
	  .min = 1, .max = 1u << 16,
	  .def = "16",		/* ENGINE_DEFAULT_BLOCK_TOKENS (test_options.c) */
	  .offset = FIELD(block_tokens),
	  .help = "paged models (llama, simkv): positions per KV block" },
	{ .name = "kv-memory", .arg = "SIZE", .kind = OPTION_SIZE, .modes = OPTION_BOTH,
	  .min = 1, .max = 1ull << 50,
	  .def_doc = "the batch at full context, at most half the machine's memory",
	  .offset = FIELD(kv_memory),
	  .help = "paged models: KV cache bytes of all shards together (K, M, G "
		  "suffixes), split evenly into one block pool per shard; the run "
		  "prints what it chose" },
	{ .name = "prefix-cache", .arg = "on|off", .kind = OPTION_ENUM,
	  .modes = OPTION_BOTH, .choices = on_off_choices, .def = "on",
	  .offset = FIELD(prefix_cache),
	  .help = "paged models: reuse the KV blocks of earlier requests' "
		  "prompts (output is the same either way, bit for bit)" },
	{ .name = "tokenizer", .arg = "PATH", .kind = OPTION_STRING,
	  .modes = OPTION_BOTH, .def_doc = "the tokenizer.bin beside a llama checkpoint",
	  .offset = FIELD(tokenizer),
	  .help = "llama2.c tokenizer.bin of exactly the model's vocabulary: "
		  "string prompts, \"stop\" strings, results with text" },
	{ .name = "default-temperature", .arg = "T", .kind = OPTION_FLOAT,
	  .modes = OPTION_BOTH, .max = 1000000, .def = "0",
	  .offset = FIELD(default_temperature),
	  .help = "the temperature of a request that sets none (0: greedy; "
		  "OpenAI's default is 1)" },
	{ .name = "stats", .arg = "FILE", .kind = OPTION_STRING, .modes = OPTION_BOTH,
	  .def_doc = "none", .offset = FIELD(stats),
	  .help = "write the end-of-run summary as JSON to FILE" },
	{ .name = "queue", .arg = "N", .kind = OPTION_U32, .modes = OPTION_BOTH,
	  .min = 1, .max = 1u << 22, .def = "1024", .offset = FIELD(queue),
	  .help = "waiting-queue capacity; input is read only while it has room" },
	{ .name = "step-timeout", .arg = "MS", .kind = OPTION_U64,
	  .modes = OPTION_BOTH, .min = 1, .max = 86400000, .def = "10000",
	  .offset = FIELD(step_timeout_ms),
	  .help = "a model step running longer kills its worker" },
	{ .name = "start-timeout", .arg = "MS", .kind = OPTION_U64,
	  .modes = OPTION_BOTH, .min = 1, .max = 86400000, .def = "60000",
	  .offset = FIELD(start_timeout_ms),
	  .help = "a worker not ready (attached, model loaded) by then is "
		  "killed and counts as a failed start" },
	{ .name = "poison-attempts", .arg = "N", .kind = OPTION_U32,
	  .modes = OPTION_BOTH, .min = 1, .max = 1000, .def = "2",
	  .offset = FIELD(poison_attempts),
	  .help = "lone failed steps before a request is failed as poison" },
	{ .name = "policy", .arg = "P", .kind = OPTION_ENUM, .modes = OPTION_BOTH,
	  .choices = policy_choices, .def = "dynamic", .offset = FIELD(policy),
	  .help = "dynamic: refill a freed slot before the shard's next step; "
		  "static: refill a shard only when all its slots are free (for "
		  "comparison)" },
	{ .name = "spin-us", .arg = "N", .kind = OPTION_U32, .modes = OPTION_BOTH,
	  .min = 0, .max = 1000000, .def = "20", .offset = FIELD(spin_us),
	  .help = "spin this long waiting before sleeping" },
	{ .name = "worker-nice", .arg = "N", .kind = OPTION_U32, .modes = OPTION_BOTH,
	  .min = 0, .max = 19, .def = "5", .offset = FIELD(worker_nice),
	  .help = "workers' nice value, so the coordinator that every shard "
		  "waits on wins a busy CPU" },
	{ .name = "progress", .kind = OPTION_TOGGLE, .modes = OPTION_BOTH,
	  .def_doc = "if stderr is a tty", .offset = FIELD(progress),
	  .help = "progress line on stderr" },
	{ .name = "garbage-every", .arg = "N", .kind = OPTION_U32,
	  .modes = OPTION_BOTH, .min = 2, .max = 1u << 30, .zero_ok = true,
	  .def = "0", .offset = FIELD(garbage_every),
	  /* 1 would garble every result: no step could ever complete */
	  .help = "testing: workers garble every Nth result (0: none)" },
	{ .name = "help", .kind = OPTION_HELP, .modes = OPTION_BOTH,
	  .help = "this text" },

	{ .name = "stream", .kind = OPTION_FLAG, .modes = OPTION_RUN,
	  .def_doc = "off", .offset = FIELD(stream),
	  .help = "a line per step with the request's new text (\"delta\"), "
		  "before its result line" },
	{ .name = "input", .arg = "FILE|-", .kind = OPTION_STRING, .modes = OPTION_RUN,
	  .def = "-", .offset = FIELD(input),
	  .help = "JSON Lines requests (-: standard input)" },
	{ .name = "output", .arg = "FILE|-", .kind = OPTION_STRING,
	  .modes = OPTION_RUN, .def = "-", .offset = FIELD(output),
	  .help = "JSON Lines results (-: standard output)" },
	{ .name = "max-line", .arg = "BYTES", .kind = OPTION_U32, .modes = OPTION_RUN,
	  .min = 1, .max = 1u << 30, .def = "1048576", .offset = FIELD(max_line),
	  .help = "longest input line; a longer one gets an error result and is "
		  "skipped without being buffered" },

	{ .name = "listen", .arg = "HOST:PORT", .kind = OPTION_STRING,
	  .modes = OPTION_SERVE, .def = "127.0.0.1:8080", .offset = FIELD(listen),
	  .help = "address to serve (port 0 picks a free one, printed on stderr)" },
	{ .name = "api-key", .arg = "KEY", .kind = OPTION_STRING,
	  .modes = OPTION_SERVE, .nonempty = true,
	  .def_doc = "$DYNBATCH_API_KEY, else none", .offset = FIELD(api_key),
	  .help = "require 'Authorization: Bearer KEY' on every endpoint but "
		  "/health" },
	{ .name = "tenants", .arg = "FILE", .kind = OPTION_STRING,
	  .modes = OPTION_SERVE, .nonempty = true, .def_doc = "none",
	  .offset = FIELD(tenants),
	  .help = "JSON file of tenants, each with API keys, tokens_per_minute, "
		  "burst_tokens, requests_per_minute and max_concurrent "
		  "(docs/usage.md); a key of no tenant gets 401, a request over "
		  "its tenant's limits 429 (400 if it could never fit); instead "
		  "of --api-key" },
	{ .name = "model-name", .arg = "NAME", .kind = OPTION_STRING,
	  .modes = OPTION_SERVE, .nonempty = true, .no_control = true,
	  .def_doc = "sim, or the plugin's file name", .offset = FIELD(model_name),
	  .help = "the model's name in answers; no control characters" },
	{ .name = "served-model-name", .arg = "NAME[,NAME...]", .kind = OPTION_LIST,
	  .modes = OPTION_SERVE, .no_control = true,
	  .def_doc = "the --model-name", .offset = FIELD(served_model_names),
	  .help = "the names a request's \"model\" may give (repeatable, or a "
		  "comma list; another name gets 404, no name is fine); the first "
		  "is the name in answers unless --model-name is given" },
	{ .name = "allowed-origins", .arg = "ORIGIN[,ORIGIN...]", .kind = OPTION_LIST,
	  .modes = OPTION_SERVE, .no_control = true,
	  .def_doc = "none: no CORS headers, OPTIONS is 405",
	  .offset = FIELD(allowed_origins),
	  .help = "CORS: browser pages of these origins (scheme://host[:port], "
		  "byte for byte; * any) may call the API: their preflight "
		  "OPTIONS gets 204 and every answer Access-Control-Allow-Origin; "
		  "another origin's preflight gets 403 (repeatable, or a comma "
		  "list)" },
	{ .name = "max-connections", .arg = "N", .kind = OPTION_U32,
	  .modes = OPTION_SERVE, .min = 1, .max = 65536, .def = "1024",
	  .offset = FIELD(max_connections),
	  .help = "open connections; more get 503" },
	{ .name = "conn-buffer", .arg = "BYTES", .kind = OPTION_U32,
	  .modes = OPTION_SERVE, .min = 4096, .max = 1u << 30, .def = "65536",
	  .offset = FIELD(conn_buffer),
	  .help = "unsent answer bytes per connection before no more pipelined "
		  "requests are read from it and its stream gives up its slot "
		  "until the client reads (also the socket's send buffer)" },
	{ .name = "write-timeout", .arg = "MS", .kind = OPTION_U32,
	  .modes = OPTION_SERVE, .min = 1, .max = 86400000, .def = "30000",
	  .offset = FIELD(write_timeout_ms),
	  .help = "no output progress this long cancels the request and closes "
		  "the connection" },
	{ .name = "read-timeout", .arg = "MS", .kind = OPTION_U32,
	  .modes = OPTION_SERVE, .min = 1, .max = 86400000, .def = "30000",
	  .offset = FIELD(read_timeout_ms),
	  .help = "a request must arrive whole within this" },
	{ .name = "idle-timeout", .arg = "MS", .kind = OPTION_U32,
	  .modes = OPTION_SERVE, .min = 1, .max = 86400000, .def = "60000",
	  .offset = FIELD(idle_timeout_ms),
	  .help = "idle keep-alive connections close" },
	{ .name = "max-body", .arg = "BYTES", .kind = OPTION_U32,
	  .modes = OPTION_SERVE, .min = 1, .max = 1u << 30, .def = "1048576",
	  .offset = FIELD(max_body),
	  .help = "larger request bodies get 413" },
	{ .name = "max-header-bytes", .arg = "BYTES", .kind = OPTION_U32,
	  .modes = OPTION_SERVE, .min = 256, .max = 1u << 20, .def = "16384",
	  .offset = FIELD(max_header_bytes),
	  .help = "request line + headers, else 431" },
	{ .name = "max-headers", .arg = "N", .kind = OPTION_U32,
	  .modes = OPTION_SERVE, .min = 4, .max = 10000, .def = "64",
	  .offset = FIELD(max_headers),
	  .help = "header fields, else 431" },
	{ .name = "max-answer-bytes", .arg = "BYTES", .kind = OPTION_U64,
	  .modes = OPTION_SERVE, .min = 1024, .max = UINT64_MAX / 2,
	  .def = "16777216", .offset = FIELD(max_answer_bytes),
	  .help = "the most a non-streamed answer may reach (n x max_tokens with "
		  "text and logprobs), else 400" },
	{ .name = "answer-budget", .arg = "BYTES", .kind = OPTION_U64,
	  .modes = OPTION_SERVE, .min = 1024, .max = UINT64_MAX / 2,
	  .def = "268435456", .offset = FIELD(answer_budget),
	  .help = "all non-streamed answers being built together, else 429" },
	{ .name = "chat-template", .arg = "NAME", .kind = OPTION_ENUM,
	  .modes = OPTION_SERVE, .choices = chat_template_choices,
	  .say_known = true, .def_doc = "none", .offset = FIELD(chat_template),
	  .help = "how /v1/chat/completions renders its messages into a prompt "
		  "(llama2: Meta's [INST] format; chatml: <|im_start|>role ...; "
		  "the others, with a GGUF file's tokenizer, the template "
		  "families of docs/usage.md); needs a tokenizer. Default: the "
		  "GGUF file's own template, if dynbatch knows it; else that "
		  "endpoint answers 400" },
};

const size_t options_count = sizeof(options_table) / sizeof(options_table[0]);

const struct option_spec *options_find(const char *name)
{
	for (size_t i = 0; i < options_count; i++)
		if (!strcmp(options_table[i].name, name))
			return &options_table[i];
	return NULL;
}

/* ------------------------------------------------------------------------
 * Parsing one value
 * ---------------------------------------------------------------------- */

/* A temperature: a finite number in [0, max] (as a request's field). */
static int parse_float(const char *s, double max, float *out)
{
	char *end;
	double d;

	errno = 0;
	d = strtod(s, &end);
	if (!*s || *end || errno || !isfinite(d) || d < 0 || d > max)
		return -EINVAL;
	*out = (float)d;
	return 0;
}

/* An option's name goes into answers and logs: no control characters. */
static bool has_control_char(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return true;
	return false;
}

/*
 * Store arg (NULL for FLAG, HELP) as s's value in o.  0, or -EINVAL after
 * the message on stderr.  off: TOGGLE's --no- form.
 */
static int option_set(const struct option_spec *s, const char *arg, bool off,
		      struct server_options *o)
{
	char *field = (char *)o + s->offset;
	uint64_t v;
	uint32_t v32;
	int bad = 0;

	switch (s->kind) {
	case OPTION_FLAG:
		*(bool *)field = true;
		return 0;
	case OPTION_TOGGLE:
		*(int *)field = off ? 0 : 1;
		return 0;
	case OPTION_U32:
		bad = parse_u32(arg, s->zero_ok ? 0 : (uint32_t)s->min,
				(uint32_t)s->max, &v32);
		if (!bad && s->zero_ok && v32 && v32 < s->min)
			bad = -EINVAL;
		if (!bad)
			*(uint32_t *)field = v32;
		break;
	case OPTION_U64:
		bad = parse_u64(arg, s->min, s->max, &v);
		if (!bad)
			*(uint64_t *)field = v;
		break;
	case OPTION_SIZE:
		bad = parse_size(arg, s->min, s->max, &v);
		if (!bad)
			*(uint64_t *)field = v;
		break;
	case OPTION_FLOAT:
		bad = parse_float(arg, (double)s->max, (float *)field);
		break;
	case OPTION_STRING:
		if (s->no_control && *arg && has_control_char(arg)) {
			fprintf(stderr, "dynbatch: --%s must not contain control "
				"characters (tab, newline, ...)\n", s->name);
			return -EINVAL;
		}
		*(const char **)field = arg;
		bad = s->nonempty && !*arg;
		break;
	case OPTION_LIST:
		if (s->no_control && has_control_char(arg)) {
			fprintf(stderr, "dynbatch: --%s must not contain control "
				"characters (tab, newline, ...)\n", s->name);
			return -EINVAL;
		}
		if (((struct option_list *)field)->n == OPTION_LIST_MAX) {
			fprintf(stderr, "dynbatch: --%s given more than %u times\n",
				s->name, OPTION_LIST_MAX);
			return -EINVAL;
		}
		/* no empty name: not empty, no ",,", none at either end */
		bad = !*arg || *arg == ',' || arg[strlen(arg) - 1] == ',' ||
		      strstr(arg, ",,");
		if (!bad) {
			struct option_list *l = (struct option_list *)field;

			l->v[l->n++] = arg;
		}
		break;
	case OPTION_ENUM:
		bad = -EINVAL;
		for (size_t i = 0; s->choices[i]; i++)
			if (!strcmp(arg, s->choices[i])) {
				*(const char **)field = s->choices[i];
				bad = 0;
			}
		if (bad && s->say_known) {
			fprintf(stderr, "dynbatch: unknown --%s '%s' (known: ",
				s->name, arg);
			for (size_t i = 0; s->choices[i]; i++)
				fprintf(stderr, "%s%s", i ? "|" : "", s->choices[i]);
			fprintf(stderr, ")\n");
			return -EINVAL;
		}
		break;
	case OPTION_HELP:
		return 0;
	}
	if (bad) {
		fprintf(stderr, "dynbatch: bad value '%s' for --%s (see --help)\n",
			arg, s->name);
		return -EINVAL;
	}
	return 0;
}

void options_init(struct server_options *o)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

	memset(o, 0, sizeof(*o));
	for (size_t i = 0; i < options_count; i++) {
		const struct option_spec *s = &options_table[i];
		int rc;

		if (!s->def)
			continue;
		rc = option_set(s, s->def, false, o);
		assert(rc == 0);	/* test_options.c parses every default */
		(void)rc;
	}
	/* the defaults the table words but cannot hold as an argument */
	o->workers = ncpu > 0 ? (uint32_t)ncpu : 1;
	o->api_key = getenv("DYNBATCH_API_KEY");
	o->progress = -1;
}

/* ------------------------------------------------------------------------
 * The command line
 * ---------------------------------------------------------------------- */

#define N_ROWS (sizeof(options_table) / sizeof(options_table[0]))
/* getopt_long's val for row i, and for its --no- form */
#define VAL_ROW 256
#define VAL_NO (VAL_ROW + (int)N_ROWS)

int options_parse(int argc, char **argv, struct server_options *o)
{
	struct option longopts[2 * N_ROWS + 1];
	char no_names[N_ROWS][64];
	size_t n = 0;
	int c;

	for (size_t i = 0; i < N_ROWS; i++) {
		const struct option_spec *s = &options_table[i];

		longopts[n++] = (struct option){ s->name,
			s->arg ? required_argument : no_argument, NULL,
			VAL_ROW + (int)i };
		if (s->kind == OPTION_TOGGLE) {
			snprintf(no_names[i], sizeof(no_names[i]), "no-%s", s->name);
			longopts[n++] = (struct option){ no_names[i], no_argument,
							 NULL, VAL_NO + (int)i };
		}
	}
	longopts[n] = (struct option){ NULL, 0, NULL, 0 };
	opterr = 0;
	optind = 0;		/* glibc: start afresh (tests parse twice) */
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		const struct option_spec *s;
		bool off = false;

		if (c == 'h') {
			options_print_usage(stdout);
			return 1;
		}
		if (c == ':') {
			fprintf(stderr, "dynbatch: option %s needs a value\n",
				argv[optind - 1]);
			return -EINVAL;
		}
		if (c < VAL_ROW || c >= VAL_NO + (int)N_ROWS) {
			fprintf(stderr, "dynbatch: unknown option '%s' (see --help)\n",
				argv[optind - 1]);
			return -EINVAL;
		}
		if (c >= VAL_NO) {
			off = true;
			c -= (int)N_ROWS;
		}
		s = &options_table[c - VAL_ROW];
		if (s->kind == OPTION_HELP) {
			options_print_usage(stdout);
			return 1;
		}
		if (s->modes != OPTION_BOTH)
			o->modes_given |= s->modes;
		if (option_set(s, optarg, off, o))
			return -EINVAL;
	}
	if (optind < argc) {
		fprintf(stderr, "dynbatch: unexpected argument '%s' (see --help)\n",
			argv[optind]);
		return -EINVAL;
	}
	return 0;
}

/* ------------------------------------------------------------------------
 * --help
 * ---------------------------------------------------------------------- */

#define HELP_COLUMN 21		/* where the help text starts */
#define HELP_WIDTH 79		/* the longest line */

/* "--name ARG", "--name, --no-name" into buf. */
static void option_lead(const struct option_spec *s, char *buf, size_t len)
{
	if (s->kind == OPTION_TOGGLE)
		snprintf(buf, len, "--%s, --no-%s", s->name, s->name);
	else if (s->arg)
		snprintf(buf, len, "--%s %s", s->name, s->arg);
	else
		snprintf(buf, len, "--%s", s->name);
}

/* The default as help and docs word it, or NULL. */
static const char *option_default(const struct option_spec *s)
{
	return s->def_doc ? s->def_doc : s->def;
}

/* Print text's words wrapped at HELP_WIDTH, the first from column col. */
static void print_wrapped(FILE *f, const char *text, size_t col)
{
	bool line_start = true;	/* no word on this line yet */
	const char *p = text;

	while (*p) {
		size_t w = strcspn(p, " ");

		if (!line_start && col + 1 + w > HELP_WIDTH) {
			fprintf(f, "\n%*s", HELP_COLUMN, "");
			col = HELP_COLUMN;
			line_start = true;
		}
		if (!line_start) {
			fputc(' ', f);
			col++;
		}
		fprintf(f, "%.*s", (int)w, p);
		col += w;
		line_start = false;
		p += w;
		while (*p == ' ')
			p++;
	}
	fputc('\n', f);
}

static void print_option(FILE *f, const struct option_spec *s)
{
	char lead[64], text[1024];
	const char *def = option_default(s);
	int n;

	option_lead(s, lead, sizeof(lead));
	n = fprintf(f, "  %s", lead);
	if (n < HELP_COLUMN)	/* the text in its column, else 2 spaces on */
		n += fprintf(f, "%*s", HELP_COLUMN - n, "");
	else
		n += fprintf(f, "  ");
	snprintf(text, sizeof(text), !def ? "%s" : s->def_doc ? "%s (default: %s)" :
		 "%s (default %s)", s->help, def);
	print_wrapped(f, text, (size_t)n);
}

static void print_section(FILE *f, unsigned modes)
{
	for (size_t i = 0; i < N_ROWS; i++)
		if (options_table[i].modes == modes)
			print_option(f, &options_table[i]);
}

void options_print_usage(FILE *f)
{
	fprintf(f,
"usage: dynbatch run [options]      decode JSON Lines requests\n"
"       dynbatch serve [options]    serve an OpenAI-style HTTP API\n"
"       dynbatch --help-markdown    the options as a Markdown table\n"
"\n"
"A continuous-batching engine: a coordinator and N worker processes sharing\n"
"unnamed shared memory (each worker writes only its own shard's).\n"
"\n"
"Engine options (run and serve):\n");
	print_section(f, OPTION_BOTH);
	fprintf(f, "\nrun options:\n");
	print_section(f, OPTION_RUN);
	fprintf(f,
"\n"
"serve options (POST /v1/completions, /v1/chat/completions, GET /v1/models,\n"
"/health, /metrics;\n"
"SIGTERM drains: no new connections, every accepted request finishes):\n");
	print_section(f, OPTION_SERVE);
	fprintf(f,
"\n"
"Environment: DYNBATCH_WORKER (worker binary), DYNBATCH_LOG=error|warn|info|debug,\n"
"DYNBATCH_API_KEY (serve)\n");
}

/* ------------------------------------------------------------------------
 * --help-markdown
 * ---------------------------------------------------------------------- */

/* s in a table cell: '|' escaped. */
static void md_cell(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '|')
			fputc('\\', f);
		fputc(*s, f);
	}
}

/* What values the option accepts, for the table's column. */
static void md_accepts(FILE *f, const struct option_spec *s)
{
	switch (s->kind) {
	case OPTION_U32:
	case OPTION_U64:
		if (s->zero_ok)
			fprintf(f, "0 or ");
		fprintf(f, "%llu..%llu", (unsigned long long)s->min,
			(unsigned long long)s->max);
		break;
	case OPTION_FLOAT:
		fprintf(f, "0..%llu", (unsigned long long)s->max);
		break;
	case OPTION_SIZE:
		fprintf(f, "bytes, K/M/G/T suffix");
		break;
	case OPTION_ENUM:
		for (size_t i = 0; s->choices[i]; i++)
			fprintf(f, "%s`%s`", i ? ", " : "", s->choices[i]);
		break;
	case OPTION_STRING:
		if (s->nonempty)
			fprintf(f, s->no_control ? "not empty, no control characters" :
				"not empty");
		break;
	case OPTION_LIST:
		fprintf(f, "names, comma-separated; repeatable (at most %u times)",
			OPTION_LIST_MAX);
		break;
	case OPTION_FLAG:
	case OPTION_TOGGLE:
	case OPTION_HELP:
		break;
	}
}

void options_print_markdown(FILE *f)
{
	char lead[64];

	fprintf(f, "| option | for | default | accepts | meaning |\n");
	fprintf(f, "| --- | --- | --- | --- | --- |\n");
	for (size_t i = 0; i < N_ROWS; i++) {
		const struct option_spec *s = &options_table[i];
		const char *def = option_default(s);

		option_lead(s, lead, sizeof(lead));
		fprintf(f, "| `");
		md_cell(f, lead);
		fprintf(f, "` | %s | ", s->modes == OPTION_BOTH ? "run, serve" :
			s->modes == OPTION_RUN ? "run" : "serve");
		if (def && !s->def_doc) {
			fputc('`', f);
			md_cell(f, def);
			fputc('`', f);
		} else if (def) {
			md_cell(f, def);
		}
		fprintf(f, " | ");
		md_accepts(f, s);
		fprintf(f, " | ");
		md_cell(f, s->help);
		fprintf(f, " |\n");
	}
}
