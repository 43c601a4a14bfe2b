/*
 * gguf_tokenizer.c - the driver of gguf_tokenizer.h: cuts the special
 * tokens out of a text, hands each remaining piece to its model (the
 * pre-tokenizer and bpe_merge.c for "gpt2", the space escaping and
 * spm_merge.c for "llama"), and decodes.
 *
 * The special-token cut is llama.cpp's: the text is a list of fragments,
 * raw or a token; each special token in turn (longest first) splits
 * every raw fragment at its occurrences, left to right and without
 * overlap.  A token found inside what a longer token took is not found
 * again, and two tokens of equal length go by id.
 */
#include "text/gguf_tokenizer.h"
#include "text/gguf_tokenizer_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* U+2581, what SentencePiece writes for a space. */
#define SPM_SPACE "\xE2\x96\x81"

int gguf_tokenizer_create(const struct tokenizer_vocab_spec *spec,
			  struct gguf_tokenizer **out, char *err,
			  size_t err_len)
{
	struct gguf_tokenizer *t = calloc(1, sizeof(*t));
	int rc;

	if (err && err_len)
		err[0] = '\0';
	if (!t)
		return -ENOMEM;
	rc = gguf_vocab_build(t, spec, err, err_len);
	if (rc) {
		if (rc == -ENOMEM && err && err_len && !err[0])
			snprintf(err, err_len, "out of memory building the vocabulary");
		gguf_tokenizer_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

void gguf_tokenizer_free(struct gguf_tokenizer *t)
{
	if (!t)
		return;
	gguf_vocab_release(t);
	free(t);
}

uint32_t gguf_tokenizer_vocab_size(const struct gguf_tokenizer *t)
{
	return t->n_tokens;
}

int32_t gguf_tokenizer_bos(const struct gguf_tokenizer *t)
{
	return t->bos;
}

int32_t gguf_tokenizer_eos(const struct gguf_tokenizer *t)
{
	return t->eos;
}

int32_t gguf_tokenizer_eot(const struct gguf_tokenizer *t)
{
	return t->eot;
}

int gguf_tokenizer_token_type(const struct gguf_tokenizer *t, int32_t token)
{
	if (token < 0 || (uint32_t)token >= t->n_tokens)
		return -1;
	return t->type[token];
}

bool gguf_tokenizer_adds_bos(const struct gguf_tokenizer *t)
{
	return t->add_bos;
}

uint32_t gguf_tokenizer_longest_piece(const struct gguf_tokenizer *t)
{
	return t->longest_piece;
}

int32_t gguf_tokenizer_lookup(const struct gguf_tokenizer *t, const char *s,
			      size_t len)
{
	return gguf_vocab_lookup2(t, s, len, "", 0);
}

/* ------------------------------------------------------------------ */
/* Scratch                                                             */
/* ------------------------------------------------------------------ */

int gguf_scratch_reserve(struct gguf_scratch *s, size_t n, size_t buf_len)
{
	if (n > s->cap) {
		size_t cap = n < 256 ? 256 : n;
		int32_t *id = realloc(s->id, cap * sizeof(*id));

		if (id)
			s->id = id;
		int32_t *size = realloc(s->size, cap * sizeof(*size));

		if (size)
			s->size = size;
		int32_t *prev = realloc(s->prev, cap * sizeof(*prev));

		if (prev)
			s->prev = prev;
		int32_t *next = realloc(s->next, cap * sizeof(*next));

		if (next)
			s->next = next;
		if (!id || !size || !prev || !next)
			return -ENOMEM;
		s->cap = cap;
	}
	if (buf_len > s->buf_cap) {
		size_t cap = buf_len < 1024 ? 1024 : buf_len;
		char *buf = realloc(s->buf, cap);

		if (!buf)
			return -ENOMEM;
		s->buf = buf;
		s->buf_cap = cap;
	}
	return 0;
}

void gguf_scratch_release(struct gguf_scratch *s)
{
	free(s->id);
	free(s->size);
	free(s->prev);
	free(s->next);
	free(s->buf);
	free(s->heap.a);
}

/* ------------------------------------------------------------------ */
/* Special tokens                                                      */
/* ------------------------------------------------------------------ */

struct frag {
	size_t start;
	size_t len;
	int32_t token;		/* -1: raw text */
};

struct frag_list {
	struct frag *a;
	size_t n;
	size_t cap;
};

static int frag_push(struct frag_list *l, size_t start, size_t len,
		     int32_t token)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		struct frag *a = realloc(l->a, cap * sizeof(*a));

		if (!a)
			return -ENOMEM;
		l->a = a;
		l->cap = cap;
	}
	l->a[l->n++] = (struct frag){ start, len, token };
	return 0;
}

/* Does token id occur in some raw fragment of l? */
static bool occurs(const struct gguf_tokenizer *t, const char *text,
		   const struct frag_list *l, int32_t id)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->a[i].token < 0 && l->a[i].len >= t->len[id] &&
		    memmem(text + l->a[i].start, l->a[i].len,
			   t->blob + t->off[id], t->len[id]))
			return true;
	return false;
}

/* Split every raw fragment of *l at the occurrences of id, into *tmp,
 * then swap the two lists. */
static int split_at(const struct gguf_tokenizer *t, const char *text,
		    struct frag_list *l, struct frag_list *tmp, int32_t id)
{
	const char *tok = t->blob + t->off[id];
	size_t tl = t->len[id];

	tmp->n = 0;
	for (size_t i = 0; i < l->n; i++) {
		struct frag f = l->a[i];
		size_t pos = f.start, end = f.start + f.len;
		const char *hit;

		if (f.token >= 0) {
			if (frag_push(tmp, f.start, f.len, f.token))
				return -ENOMEM;
			continue;
		}
		while (end - pos >= tl &&
		       (hit = memmem(text + pos, end - pos, tok, tl))) {
			size_t at = (size_t)(hit - text);

			if ((at > pos && frag_push(tmp, pos, at - pos, -1)) ||
			    frag_push(tmp, at, tl, id))
				return -ENOMEM;
			pos = at + tl;
		}
		if (pos < end && frag_push(tmp, pos, end - pos, -1))
			return -ENOMEM;
	}
	struct frag_list swap = *l;

	*l = *tmp;
	*tmp = swap;
	return 0;
}

static int cut_specials(const struct gguf_tokenizer *t, const char *text,
			size_t len, bool parse_special, struct frag_list *l)
{
	struct frag_list tmp = { 0 };
	int rc = 0;

	if (len && frag_push(l, 0, len, -1))
		return -ENOMEM;
	for (uint32_t k = 0; k < t->n_specials && rc == 0; k++) {
		int32_t id = t->specials[k];

		if (t->type[id] == GGUF_TOKEN_CONTROL && !parse_special)
			continue;
		if (occurs(t, text, l, id))
			rc = split_at(t, text, l, &tmp, id);
	}
	free(tmp.a);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Encoding                                                            */
/* ------------------------------------------------------------------ */

/* "llama": spaces escaped, the prefix, then the merges. */
static int encode_spm(const struct gguf_tokenizer *t, const char *text,
		      size_t len, struct gguf_scratch *s, struct gguf_emit *e)
{
	size_t n = 0;

	if (gguf_scratch_reserve(s, 0, 3 * len + 3))
		return -ENOMEM;
	if (t->add_space_prefix) {
		memcpy(s->buf, SPM_SPACE, 3);
		n = 3;
	}
	for (size_t i = 0; i < len; i++) {
		if (text[i] == ' ') {
			memcpy(s->buf + n, SPM_SPACE, 3);
			n += 3;
		} else {
			s->buf[n++] = text[i];
		}
	}
	return gguf_spm_text(t, s->buf, n, s, e);
}

/* "gpt2": the pre-tokenizer's words, each merged on its own. */
static int encode_bpe(const struct gguf_tokenizer *t, const char *text,
		      size_t len, struct gguf_scratch *s, struct gguf_emit *e)
{
	size_t pos = 0;

	while (pos < len) {
		size_t end = pretok_next(t->pre, text, len, pos);

		if (gguf_bpe_word(t, text + pos, end - pos, s, e))
			return -ENOMEM;
		pos = end;
	}
	return 0;
}

int gguf_tokenizer_encode(const struct gguf_tokenizer *t, const char *text,
			  size_t len, bool add_special, bool parse_special,
			  int32_t *out, size_t cap, size_t *n_out)
{
	struct gguf_emit e = { out, cap, 0 };
	struct gguf_scratch s = { 0 };
	struct frag_list l = { 0 };
	int rc = 0;

	*n_out = 0;
	if (len > GGUF_TOKENIZER_MAX_TEXT)
		return -E2BIG;
	if (add_special && t->add_bos)
		gguf_emit_token(&e, t->bos);
	rc = cut_specials(t, text, len, parse_special, &l);
	for (size_t i = 0; i < l.n && rc == 0; i++) {
		struct frag f = l.a[i];

		if (f.token >= 0)
			gguf_emit_token(&e, f.token);
		else if (t->model == GGUF_MODEL_SPM)
			rc = encode_spm(t, text + f.start, f.len, &s, &e);
		else
			rc = encode_bpe(t, text + f.start, f.len, &s, &e);
	}
	free(l.a);
	gguf_scratch_release(&s);
	if (rc)
		return rc;
	if (add_special && t->add_eos)
		gguf_emit_token(&e, t->eos);
	*n_out = e.n;
	return e.n > cap ? -ENOSPC : 0;
}

/* ------------------------------------------------------------------ */
/* Decoding                                                            */
/* ------------------------------------------------------------------ */

/* Does a llama piece after prev lose its leading space? */
static bool strips_space(const struct gguf_tokenizer *t, int32_t prev,
			 int32_t token)
{
	if (!t->add_space_prefix || t->type[token] != GGUF_TOKEN_NORMAL)
		return false;
	if (prev == GGUF_PREV_ORDINARY)
		return false;
	if (prev < 0 || (uint32_t)prev >= t->n_tokens)
		return true;
	return t->type[prev] == GGUF_TOKEN_CONTROL ||
	       t->type[prev] == GGUF_TOKEN_USER_DEFINED;
}

const char *gguf_tokenizer_piece(const struct gguf_tokenizer *t,
				 int32_t prev_token, int32_t token,
				 bool render_special, size_t *len)
{
	const char *p;

	if (token < 0 || (uint32_t)token >= t->n_tokens)
		return NULL;
	p = t->pblob + t->poff[token];
	*len = t->plen[token];
	if (t->type[token] == GGUF_TOKEN_CONTROL && !render_special) {
		*len = 0;
		return p + t->plen[token];	/* its NUL */
	}
	if (*len && p[0] == ' ' && strips_space(t, prev_token, token)) {
		p++;
		(*len)--;
	}
	return p;
}

int gguf_tokenizer_decode(const struct gguf_tokenizer *t, int32_t prev_token,
			  const int32_t *tokens, size_t n, bool render_special,
			  char *out, size_t cap, size_t *n_out)
{
	size_t used = 0;

	for (size_t i = 0; i < n; i++) {
		size_t len;
		const char *p = gguf_tokenizer_piece(t, prev_token, tokens[i],
						     render_special, &len);

		if (!p) {
			*n_out = i;
			return -EINVAL;
		}
		if (used < cap)
			memcpy(out + used, p, len < cap - used ? len : cap - used);
		used += len;
		prev_token = tokens[i];
	}
	*n_out = used;
	return used > cap ? -ENOSPC : 0;
}
