/*
 * engine_grammar.c - the coordinator's side of structured output
 * (docs/DESIGN.md 2.8): what each token spells, from the tokenizer, for
 * the workers (the shared vocabulary table) and for our own check, and
 * that check: every token committed to a request with a grammar must be
 * one its grammar allows, whatever a worker sent.
 */
#include "engine/engine_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/token_mask.h"
#include "ipc/shm_segment.h"
#include "text/text_tokenizer.h"

/* Token t's bytes as a grammar sees them: what it adds to the answer's
 * text, its piece inside a text (the rule that drops a leading space
 * applies only at a text's start or after a control token); nothing for
 * a token that ends the request (the grammar allows those when it is
 * complete). */
static const char *engine_token_bytes(const struct engine *e, uint32_t t,
				      size_t *len)
{
	const char *p = text_tokenizer_ends(e->tok, (int32_t)t) ? NULL :
			text_tokenizer_piece_inside(e->tok, (int32_t)t, len);

	if (!p) {
		*len = 0;
		return "";
	}
	return p;
}

uint64_t engine_grammar_table_bytes(const struct engine *e)
{
	uint64_t total = 0;
	size_t len;

	if (!e->tok || !e->cfg->grammar_max_bytes)
		return 0;
	for (uint32_t t = 0; t < e->vocab; t++) {
		engine_token_bytes(e, t, &len);
		total += len;
	}
	return shm_vocab_table_bytes(e->vocab, total);
}

int engine_setup_grammar(struct engine *e)
{
	const uint8_t **bytes;
	uint32_t *lens;
	struct shm_vocab_table *table = NULL;
	uint8_t *out = NULL;
	size_t len;

	if (!e->seg.hdr->vocab_table_size)
		return 0;
	bytes = malloc((size_t)e->vocab * sizeof(*bytes));
	lens = malloc((size_t)e->vocab * sizeof(*lens));
	if (!bytes || !lens) {
		free(bytes);
		free(lens);
		return -ENOMEM;
	}
	table = shm_vocab_table(&e->seg);
	table->n_tokens = e->vocab;
	/* every token that ends a request may end a sentence: EOS, a
	 * chat's end of turn (<|eot_id|>, <|im_end|>, what a chat model
	 * ends with), llama2.c's BOS (what its stories end with) */
	table->n_ends = 0;
	for (uint32_t t = 0; t < e->vocab && table->n_ends < SHM_VOCAB_MAX_ENDS; t++)
		if (text_tokenizer_ends(e->tok, (int32_t)t))
			table->ends[table->n_ends++] = (int32_t)t;
	out = (uint8_t *)&table->off[e->vocab + 1];
	table->off[0] = 0;
	for (uint32_t t = 0; t < e->vocab; t++) {
		const char *p = engine_token_bytes(e, t, &len);

		memcpy(out + table->off[t], p, len);
		table->off[t + 1] = table->off[t] + (uint32_t)len;
		bytes[t] = out + table->off[t];
		lens[t] = (uint32_t)len;
	}
	e->grammar_vocab = grammar_vocab_create_ends(bytes, lens, e->vocab,
						     table->ends, table->n_ends);
	free(bytes);
	free(lens);
	if (!e->grammar_vocab)
		return -ENOMEM;
	if (e->runner)
		model_runner_set_grammar_vocab(e->runner, e->grammar_vocab);
	return 0;
}

/* --grammar-file's bytes (malloc'd, *len), or NULL with errno set. */
static char *engine_read_grammar_file(const char *path, size_t max, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;

	if (!f)
		return NULL;
	buf = malloc(max + 1);
	if (!buf) {
		fclose(f);
		return NULL;
	}
	*len = fread(buf, 1, max + 1, f);
	if (ferror(f)) {
		free(buf);
		buf = NULL;
		errno = EIO;
	}
	fclose(f);
	return buf;
}

int engine_load_grammar_file(struct engine *e)
{
	const char *path = e->cfg->grammar_file;
	uint32_t max = engine_grammar_max(e);
	struct grammar *g;
	char *src, err[256];
	size_t len;

	if (!path)
		return ENGINE_EXIT_OK;
	if (!max) {
		fprintf(stderr, "dynbatch: --grammar-file needs the model's tokenizer "
			"(--tokenizer) and --grammar-max-bytes above 0\n");
		return ENGINE_EXIT_USAGE;
	}
	src = engine_read_grammar_file(path, max, &len);
	if (!src) {
		fprintf(stderr, "dynbatch: --grammar-file %s: %s\n", path, strerror(errno));
		return ENGINE_EXIT_USAGE;
	}
	if (len > max) {
		fprintf(stderr, "dynbatch: --grammar-file %s: more than "
			"--grammar-max-bytes (%u)\n", path, max);
		free(src);
		return ENGINE_EXIT_USAGE;
	}
	g = grammar_parse(src, len, err, sizeof(err));
	if (!g) {
		fprintf(stderr, "dynbatch: --grammar-file %s: %s\n", path, err);
		free(src);
		return ENGINE_EXIT_USAGE;
	}
	e->default_grammar = request_grammar_new(src, (uint32_t)len, g);
	return e->default_grammar ? ENGINE_EXIT_OK : ENGINE_EXIT_FAILED;
}

struct request_grammar *engine_default_grammar(const struct engine *e)
{
	return e->default_grammar;
}

void engine_grammar_free(struct engine *e)
{
	request_grammar_put(e->default_grammar);
	e->default_grammar = NULL;
	grammar_vocab_destroy(e->grammar_vocab);
	e->grammar_vocab = NULL;
}

uint32_t engine_grammar_max(const struct engine *e)
{
	return e->grammar_vocab ? e->seg.hdr->grammar_slot_bytes ?
	       shm_grammar_source_max(e->seg.hdr) : 0 : 0;
}

int engine_grammar_check(struct engine *e, struct live_request *lr,
			 int32_t token)
{
	if (!lr->req.grammar)
		return 0;
	if (!lr->grammar_check) {
		lr->grammar_check = grammar_matcher_create(lr->req.grammar->compiled);
		if (!lr->grammar_check)
			return -ENOMEM;
	}
	if (token < 0)
		return -ENOENT;
	return grammar_matcher_accept_token(lr->grammar_check, e->grammar_vocab,
					    (uint32_t)token);
}
