/*
 * llama_shape.h - the llama shape options of the tools that write models
 * (bin/make_checkpoint, bin/make_gguf): the --shape presets, --dim ...
 * --seq-len, and the rules a shape must meet (the checkpoint reader's).
 *
 * Header-only, since each tool is one .c file (the Makefile's
 * tool_rule); both include it once.
 */
#ifndef DYNBATCH_TOOLS_LLAMA_SHAPE_H
#define DYNBATCH_TOOLS_LLAMA_SHAPE_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util/parse_num.h"

struct shape {
	uint32_t dim, hidden, layers, heads, kv_heads, vocab, seq_len;
};

/* The getopt_long entries of the shape options. */
#define SHAPE_OPTIONS \
	{ "shape", required_argument, NULL, 'S' }, \
	{ "dim", required_argument, NULL, 'd' }, \
	{ "hidden", required_argument, NULL, 'h' }, \
	{ "layers", required_argument, NULL, 'l' }, \
	{ "heads", required_argument, NULL, 'n' }, \
	{ "kv-heads", required_argument, NULL, 'k' }, \
	{ "vocab", required_argument, NULL, 'v' }, \
	{ "seq-len", required_argument, NULL, 's' }

static const char *const shape_names[] = { "--dim", "--hidden", "--layers",
	"--heads", "--kv-heads", "--vocab", "--seq-len" };

/*
 * Option c with its argument arg if it is a shape option: 1 taken, 0 not
 * a shape option, -1 a bad value (printed, as prog).
 */
static inline int shape_option(struct shape *s, int c, const char *arg,
			       const char *prog)
{
	static const struct shape s15 = { 288, 768, 6, 6, 6, 32000, 256 };
	static const struct shape s110 = { 768, 2048, 12, 12, 12, 32000, 1024 };
	static const char letters[] = "dhlnkvs";	/* struct shape's order */
	const char *at = c ? strchr(letters, c) : NULL;

	if (c == 'S') {
		if (strcmp(arg, "stories15M") == 0)
			*s = s15;
		else if (strcmp(arg, "stories110M") == 0)
			*s = s110;
		else {
			fprintf(stderr, "%s: unknown --shape '%s' (stories15M or stories110M)\n",
				prog, arg);
			return -1;
		}
		return 1;
	}
	if (!at)
		return 0;
	if (parse_u32(arg, 1, INT32_MAX, &s->dim + (at - letters))) {
		fprintf(stderr, "%s: bad %s '%s' (1 to %d)\n", prog,
			shape_names[at - letters], arg, INT32_MAX);
		return -1;
	}
	return 1;
}

/* The same rules as the checkpoint reader; 0 or prints why and returns -1. */
static inline int shape_check(const struct shape *s, const char *prog)
{
	const uint32_t *v = &s->dim;

	for (int i = 0; i < 7; i++) {
		if (v[i] == 0) {
			fprintf(stderr, "%s: %s is missing or 0\n", prog,
				shape_names[i]);
			return -1;
		}
	}
	if (s->dim % s->heads || (s->dim / s->heads) % 2 ||
	    s->heads % s->kv_heads) {
		fprintf(stderr,
			"%s: need --heads dividing --dim with an even head size, and --kv-heads dividing --heads\n",
			prog);
		return -1;
	}
	return 0;
}

#endif /* DYNBATCH_TOOLS_LLAMA_SHAPE_H */
