/*
 * text_tokenizer.c - see text_tokenizer.h: a kind tag and a switch per
 * call, no table of function pointers (two kinds, both ours).
 */
#include "text/text_tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "text/gguf_tokenizer.h"
#include "text/tokenizer.h"

/* BOS, EOS, EOT and the named end tokens: a vocabulary with more than
 * this many distinct ones keeps the first (the named list is 7). */
#define END_IDS_MAX 12u

struct text_tokenizer {
	struct tokenizer *llama2c;	/* one of the two, owned */
	struct gguf_tokenizer *gguf;
	uint32_t n_ends;
	int32_t ends[END_IDS_MAX];	/* ids that end a request */
};

static void add_end(struct text_tokenizer *t, int32_t id)
{
	if (id < 0 || t->n_ends == END_IDS_MAX)
		return;
	for (uint32_t i = 0; i < t->n_ends; i++)
		if (t->ends[i] == id)
			return;
	t->ends[t->n_ends++] = id;
}

/* A wrapper of one kind (the other NULL), owning it; NULL (it freed)
 * without memory. */
static struct text_tokenizer *wrap(struct tokenizer *llama2c,
				   struct gguf_tokenizer *gguf)
{
	struct text_tokenizer *t = calloc(1, sizeof(*t));

	if (!t) {
		tokenizer_free(llama2c);
		gguf_tokenizer_free(gguf);
		return NULL;
	}
	t->llama2c = llama2c;
	t->gguf = gguf;
	return t;
}

int text_tokenizer_from_llama2c(struct tokenizer *tok, struct text_tokenizer **out)
{
	struct text_tokenizer *t = *out = wrap(tok, NULL);

	if (!t)
		return -ENOMEM;
	add_end(t, tokenizer_eos(tok));
	add_end(t, tokenizer_bos(tok));
	return 0;
}

int text_tokenizer_from_gguf(struct gguf_tokenizer *g, struct text_tokenizer **out)
{
	/* the same names as TEXT_TOKENIZER_END_NAMES, one per entry */
	static const char *const names[] = {
		"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|endoftext|>",
		"<|end|>", "<end_of_turn>", "<|end_of_text|>",
	};
	struct text_tokenizer *t = *out = wrap(NULL, g);

	if (!t)
		return -ENOMEM;
	add_end(t, gguf_tokenizer_eos(g));
	add_end(t, gguf_tokenizer_eot(g));
	add_end(t, gguf_tokenizer_bos(g));
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		add_end(t, gguf_tokenizer_lookup(g, names[i], strlen(names[i])));
	return 0;
}

void text_tokenizer_free(struct text_tokenizer *t)
{
	if (!t)
		return;
	tokenizer_free(t->llama2c);
	gguf_tokenizer_free(t->gguf);
	free(t);
}

uint32_t text_tokenizer_vocab_size(const struct text_tokenizer *t)
{
	return t->gguf ? gguf_tokenizer_vocab_size(t->gguf) :
	       tokenizer_vocab_size(t->llama2c);
}

int32_t text_tokenizer_bos(const struct text_tokenizer *t)
{
	return t->gguf ? gguf_tokenizer_bos(t->gguf) : tokenizer_bos(t->llama2c);
}

int32_t text_tokenizer_eos(const struct text_tokenizer *t)
{
	return t->gguf ? gguf_tokenizer_eos(t->gguf) : tokenizer_eos(t->llama2c);
}

bool text_tokenizer_ends(const struct text_tokenizer *t, int32_t token)
{
	for (uint32_t i = 0; i < t->n_ends; i++)
		if (t->ends[i] == token)
			return true;
	return false;
}

bool text_tokenizer_parses_special(const struct text_tokenizer *t)
{
	return t->gguf != NULL;
}

bool text_tokenizer_adds_bos(const struct text_tokenizer *t)
{
	return t->gguf ? gguf_tokenizer_adds_bos(t->gguf) : true;
}

const char *text_tokenizer_token_text(const struct text_tokenizer *t,
				      int32_t id, size_t *len)
{
	const char *p = NULL;
	float score;

	*len = 0;
	if (id < 0 || (uint32_t)id >= text_tokenizer_vocab_size(t))
		return NULL;
	p = t->gguf ? gguf_tokenizer_piece(t->gguf, -1, id, true, len) :
		      tokenizer_raw_piece(t->llama2c, id, len, &score);
	return p;
}

uint32_t text_tokenizer_longest_piece(const struct text_tokenizer *t)
{
	return t->gguf ? gguf_tokenizer_longest_piece(t->gguf) :
	       tokenizer_longest_piece(t->llama2c);
}

int text_tokenizer_encode(const struct text_tokenizer *t, const char *text,
			  size_t len, bool add_special, int32_t *out,
			  size_t cap, size_t *n_out)
{
	if (t->gguf)
		return gguf_tokenizer_encode(t->gguf, text, len, add_special, true,
					     out, cap, n_out);
	return tokenizer_encode(t->llama2c, text, len, add_special, false, out,
				cap, n_out);
}

const char *text_tokenizer_piece(const struct text_tokenizer *t,
				 int32_t prev_token, int32_t token, size_t *len)
{
	if (t->gguf)
		return gguf_tokenizer_piece(t->gguf, prev_token, token, false, len);
	return tokenizer_piece(t->llama2c, prev_token, token, len);
}

const char *text_tokenizer_piece_inside(const struct text_tokenizer *t,
					int32_t token, size_t *len)
{
	/* llama2.c drops a leading space only after BOS, so "no token"
	 * reads as inside a text there */
	return t->gguf ? gguf_tokenizer_piece(t->gguf, GGUF_PREV_ORDINARY, token,
					      false, len) :
	       tokenizer_piece(t->llama2c, -1, token, len);
}
