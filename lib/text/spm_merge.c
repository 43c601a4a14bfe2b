/*
 * spm_merge.c - SentencePiece BPE over one piece of text (gguf_tokenizer.h,
 * "llama"), as llama.cpp's SPM tokenizer: the text's units (code points,
 * an invalid byte alone) merge pairwise, always the adjacent pair whose
 * concatenation is the token of highest score, leftmost on ties (normal,
 * user-defined and unused tokens only, as SentencePiece); a unit
 * no merge reached that is no token becomes its bytes' <0xXX> tokens.
 *
 * Symbols are byte ranges of the text in a doubly linked list (a merged
 * symbol keeps its left index); candidates sit in a min-heap keyed by
 * the score's order code, complemented so the highest score is the top,
 * then the left index.  A candidate records both symbols' sizes and is
 * current iff they are unchanged and still neighbours (sizes only grow).
 * The loop itself is merge_heap_run() (merge_heap.h).
 */
#include "text/gguf_tokenizer_impl.h"

#include <errno.h>
#include <string.h>

#include "text/unicode.h"

/* An unsigned code that orders as the float does (finite floats). */
static uint32_t float_order(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

static bool spm_mergeable(uint8_t type)
{
	return type == GGUF_TOKEN_NORMAL || type == GGUF_TOKEN_USER_DEFINED ||
	       type == GGUF_TOKEN_UNUSED;
}

struct spm_ctx {
	const struct gguf_tokenizer *t;
	const char *text;
	struct gguf_scratch *s;
};

/* Offer the pair (a, b) when their concatenation is a text token. */
static int push_pair(void *ctx, int32_t a, int32_t b)
{
	struct spm_ctx *x = ctx;
	struct gguf_scratch *s = x->s;
	struct merge_cand c;
	int32_t id;

	id = gguf_vocab_lookup2(x->t, x->text + s->id[a], (size_t)s->size[a],
				x->text + s->id[b], (size_t)s->size[b]);
	/* SentencePiece merges into text pieces only: never into a byte,
	 * control or unknown token that happens to spell the same. */
	if (id < 0 || !spm_mergeable(x->t->type[id]))
		return 0;
	c.key = (uint64_t)(~float_order(x->t->score[id])) << 32 | (uint32_t)a;
	c.right = b;
	c.check_left = s->size[a];
	c.check_right = s->size[b];
	c.result = id;
	return merge_heap_push(&s->heap, c);
}

static void emit_symbol(const struct gguf_tokenizer *t, const char *p,
			size_t n, struct gguf_emit *e)
{
	int32_t id = gguf_vocab_lookup2(t, p, n, "", 0);

	if (id >= 0) {
		gguf_emit_token(e, id);
		return;
	}
	for (size_t k = 0; k < n; k++)
		gguf_emit_token(e, t->byte_token[(unsigned char)p[k]]);
}

int gguf_spm_text(const struct gguf_tokenizer *t, const char *text,
		  size_t len, struct gguf_scratch *s, struct gguf_emit *e)
{
	struct spm_ctx ctx = { t, text, s };
	int32_t n = 0, i;
	size_t pos = 0, step;

	if (len == 0)
		return 0;
	if (gguf_scratch_reserve(s, len, 0))
		return -ENOMEM;
	while (pos < len) {
		unicode_decode(text + pos, len - pos, &step);
		s->id[n] = (int32_t)pos;
		s->size[n] = (int32_t)step;
		s->prev[n] = n - 1;
		s->next[n] = n + 1;
		pos += step;
		n++;
	}
	s->next[n - 1] = -1;
	s->heap.n = 0;
	for (i = 0; i + 1 < n; i++)
		if (push_pair(&ctx, i, i + 1))
			return -ENOMEM;
	/* A symbol's size is what a candidate checks: it only grows. */
	if (merge_heap_run(&s->heap, s->size, s->prev, s->next, true, push_pair,
			   &ctx))
		return -ENOMEM;
	for (i = 0; i >= 0; i = s->next[i])
		emit_symbol(t, text + s->id[i], (size_t)s->size[i], e);
	return 0;
}
