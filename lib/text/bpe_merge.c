/*
 * bpe_merge.c - byte-level BPE inside one word (gguf_tokenizer.h,
 * "gpt2"): the word's bytes start as their byte-level tokens and the
 * adjacent pair of lowest merge rank merges until no pair has a rank.
 *
 * The symbols are a doubly linked list over arrays indexed by byte
 * position (a merged symbol keeps its left index, so index order is text
 * order) and every adjacent pair that has a merge is a candidate in a
 * min-heap on (rank, left index): its top is the pair the textbook loop
 * would merge.  A merge changes only its two neighbour pairs, so it
 * pushes at most two candidates: O(n log n).  A stale candidate is
 * recognised when popped: it is current iff both symbols still hold the
 * ids it recorded and the right one is still the left one's next (a
 * symbol's text only grows, so an id never comes back to it).
 * The loop itself is merge_heap_run() (merge_heap.h).
 */
#include "text/gguf_tokenizer_impl.h"

#include <errno.h>
#include <string.h>

struct bpe_ctx {
	const struct gguf_tokenizer *t;
	struct gguf_scratch *s;
};

/* Offer the pair (a, b) as a candidate when it is a merge. */
static int push_pair(void *ctx, int32_t a, int32_t b)
{
	struct bpe_ctx *x = ctx;
	struct gguf_scratch *s = x->s;
	const struct gguf_merge_slot *m = gguf_vocab_merge(x->t, s->id[a], s->id[b]);
	struct merge_cand c;

	if (!m)
		return 0;
	c.key = (uint64_t)m->rank << 32 | (uint32_t)a;
	c.right = b;
	c.check_left = s->id[a];
	c.check_right = s->id[b];
	c.result = m->result;
	return merge_heap_push(&s->heap, c);
}

/* With ignore_merges: the word as one token, or -1 (-2: no memory). */
static int32_t whole_word(const struct gguf_tokenizer *t, const char *word,
			  size_t len, struct gguf_scratch *s)
{
	size_t n = 0;

	if (len > t->longest_token)
		return -1;	/* each byte is at least one byte of text */
	if (gguf_scratch_reserve(s, 0, 2 * len))
		return -2;
	for (size_t i = 0; i < len; i++) {
		unsigned char b = (unsigned char)word[i];

		memcpy(s->buf + n, t->bl_text[b], t->bl_len[b]);
		n += t->bl_len[b];
	}
	return gguf_vocab_lookup2(t, s->buf, n, "", 0);
}

int gguf_bpe_word(const struct gguf_tokenizer *t, const char *word,
		  size_t len, struct gguf_scratch *s, struct gguf_emit *e)
{
	struct bpe_ctx ctx = { t, s };
	int32_t i;

	if (t->ignore_merges) {
		int32_t id = whole_word(t, word, len, s);

		if (id == -2)
			return -ENOMEM;
		if (id >= 0) {
			gguf_emit_token(e, id);
			return 0;
		}
	}
	if (gguf_scratch_reserve(s, len, 0))
		return -ENOMEM;
	for (i = 0; i < (int32_t)len; i++) {
		s->id[i] = t->byte_token[(unsigned char)word[i]];
		s->prev[i] = i - 1;
		s->next[i] = i + 1 < (int32_t)len ? i + 1 : -1;
	}
	s->heap.n = 0;
	for (i = 0; i + 1 < (int32_t)len; i++)
		if (push_pair(&ctx, i, i + 1))
			return -ENOMEM;
	if (merge_heap_run(&s->heap, s->id, s->prev, s->next, false, push_pair,
			   &ctx))
		return -ENOMEM;
	for (i = 0; i >= 0 && len; i = s->next[i])
		gguf_emit_token(e, s->id[i]);
	return 0;
}
