/*
 * options.h - the command line's one option table (docs/DESIGN.md 4).
 *
 * Every option of `dynbatch run` and `dynbatch serve` is one row of
 * options_table: its name, the kind of value it takes and the range
 * accepted, its default, the commands it applies to and its help text.
 * The parser, `--help` and `--help-markdown` (the options section of
 * docs/usage.md, which tests/unit/test_options.c holds equal to it) are
 * all made from that table, so a default is written once.
 *
 * The parser fills a struct server_options, a plain record of what the
 * user asked; main() wires it into the engine's and the front ends'
 * configurations.  This file knows neither: it is below both.
 */
#ifndef DYNBATCH_OPTIONS_H
#define DYNBATCH_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The commands an option applies to (a bit set). */
#define OPTION_RUN 1u
#define OPTION_SERVE 2u
#define OPTION_BOTH (OPTION_RUN | OPTION_SERVE)

enum option_kind {
	OPTION_FLAG,	/* no value: the bool is set */
	OPTION_TOGGLE,	/* --NAME / --no-NAME: the int becomes 1 / 0 */
	OPTION_U32,	/* a decimal in [min, max] into a uint32_t */
	OPTION_U64,	/* a decimal in [min, max] into a uint64_t */
	OPTION_SIZE,	/* bytes, K/M/G/T suffix allowed (parse_size()),
			 * in [min, max] or 0 when zero_ok, into a uint64_t */
	OPTION_FLOAT,	/* a finite decimal in [0, max] into a float */
	OPTION_STRING,	/* the argument itself, a const char * */
	OPTION_ENUM,	/* one of choices; the table's own string is kept */
	OPTION_LIST,	/* repeatable, each a comma list of non-empty names:
			 * every argument appended to a struct option_list */
	OPTION_HELP,	/* --help: print the usage text, exit 0 */
};

/* An OPTION_LIST's arguments as given (argv's strings, each a comma
 * list): at most OPTION_LIST_MAX of them. */
#define OPTION_LIST_MAX 16
struct option_list {
	const char *v[OPTION_LIST_MAX];
	uint32_t n;
};

/* What the user asked: filled from the table's defaults, then argv. */
struct server_options {
	/* run and serve: the engine */
	uint32_t workers;		/* --workers; 0: in-process */
	uint32_t batch;			/* --batch: slots across workers */
	uint32_t tensor_parallel;	/* --tensor-parallel: group size */
	const char *model;		/* --model SPEC */
	uint32_t max_context;		/* --max-context; 0: the model's */
	uint32_t step_tokens;		/* --step-tokens; 0: no budget */
	const char *speculate;		/* --speculate: "off" or "ngram" */
	uint32_t draft_tokens;		/* --draft-tokens: most guesses a step */
	uint32_t grammar_max_bytes;	/* --grammar-max-bytes; 0: none */
	const char *grammar_file;	/* --grammar-file; NULL: none */
	uint32_t block_tokens;		/* --block-tokens */
	uint64_t kv_memory;		/* --kv-memory; 0: the default */
	const char *prefix_cache;	/* --prefix-cache on|off */
	const char *tokenizer;		/* --tokenizer; NULL: beside llama */
	float default_temperature;	/* --default-temperature */
	const char *stats;		/* --stats FILE; NULL: none */
	uint32_t queue;			/* --queue: waiting-queue capacity */
	uint64_t step_timeout_ms;	/* --step-timeout */
	uint64_t start_timeout_ms;	/* --start-timeout */
	uint32_t poison_attempts;	/* --poison-attempts */
	const char *policy;		/* --policy: "dynamic" or "static" */
	uint32_t spin_us;		/* --spin-us */
	uint32_t worker_nice;		/* --worker-nice, 0..19 */
	int progress;			/* --progress 1, --no-progress 0,
					 * -1: when stderr is a tty */
	uint32_t garbage_every;		/* --garbage-every (testing); 0: off */
	/* run: the JSON Lines front end */
	bool stream;			/* --stream: delta lines */
	const char *input;		/* --input FILE, "-": stdin */
	const char *output;		/* --output FILE, "-": stdout */
	uint32_t max_line;		/* --max-line BYTES */
	/* serve: the HTTP front end */
	const char *listen;		/* --listen HOST:PORT */
	const char *api_key;		/* --api-key; NULL: none */
	const char *tenants;		/* --tenants FILE; NULL: none */
	const char *model_name;		/* --model-name; NULL: from --model */
	struct option_list served_model_names; /* --served-model-name */
	struct option_list allowed_origins;	/* --allowed-origins */
	uint32_t max_connections;	/* --max-connections */
	uint32_t conn_buffer;		/* --conn-buffer BYTES */
	uint32_t write_timeout_ms;	/* --write-timeout */
	uint32_t read_timeout_ms;	/* --read-timeout */
	uint32_t idle_timeout_ms;	/* --idle-timeout */
	uint32_t max_body;		/* --max-body BYTES */
	uint32_t max_header_bytes;	/* --max-header-bytes */
	uint32_t max_headers;		/* --max-headers */
	uint64_t max_answer_bytes;	/* --max-answer-bytes */
	uint64_t answer_budget;		/* --answer-budget */
	const char *chat_template;	/* --chat-template; NULL: none */
	/* what the command line gave */
	unsigned modes_given;		/* OPTION_RUN: a run-only option was
					 * given, OPTION_SERVE: a serve-only one */
};

/* One row of the table. */
struct option_spec {
	const char *name;		/* given as --name (getopt_long) */
	const char *arg;		/* the value's name in help ("N");
					 * NULL for FLAG, TOGGLE and HELP */
	enum option_kind kind;
	unsigned modes;			/* OPTION_RUN, OPTION_SERVE or both */
	uint64_t min, max;		/* U32, U64: accepted range; FLOAT: max */
	bool zero_ok;			/* U32: 0 (off) is accepted below min */
	bool nonempty;			/* STRING: '' is a bad value */
	bool no_control;		/* STRING: no control characters */
	bool say_known;			/* ENUM: an unknown value's message
					 * lists the choices (else: bad value) */
	const char *const *choices;	/* ENUM: the names, NULL-terminated */
	/* The default, written once: as an argument parsed like the user's
	 * (NULL: none, the field stays 0 or NULL) */
	const char *def;
	/* How help and docs word the default when def is not the whole
	 * story ("number of CPUs"); NULL: def itself, or none */
	const char *def_doc;
	size_t offset;			/* the field in struct server_options */
	const char *help;		/* one paragraph, the default not in it */
};

extern const struct option_spec options_table[];
extern const size_t options_count;

/* The row named name, or NULL. */
const struct option_spec *options_find(const char *name);

/* Every field to its table default (then the computed ones: workers
 * from the CPU count, api_key from $DYNBATCH_API_KEY, progress -1). */
void options_init(struct server_options *o);

/*
 * Parse argv[1..argc) (the options after the command word, argv[0]) into
 * o, which options_init() prepared.  Returns 0, 1 when --help was given
 * (the usage text is on stdout), or -EINVAL after writing on stderr the
 * message that names the option and what is wrong.  The command's mode
 * rules (run-only options for serve, ...) are the caller's: modes_given
 * tells.
 */
int options_parse(int argc, char **argv, struct server_options *o);

/* The usage text (--help), made from the table. */
void options_print_usage(FILE *f);

/* The table as Markdown (docs/usage.md's options section). */
void options_print_markdown(FILE *f);

#endif /* DYNBATCH_OPTIONS_H */
