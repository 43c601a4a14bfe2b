/*
 * gguf_tokenizer_impl.h - the inside of struct gguf_tokenizer, shared by
 * the files that build it (gguf_vocab.c), merge with it (bpe_merge.c,
 * spm_merge.c) and drive it (gguf_tokenizer.c).  Not for other callers.
 *
 * Invariants once built: every token's text lives in blob (NUL after
 * each); piece[] holds the decoded bytes of each token the same way;
 * the token hash finds the lowest id of each distinct non-empty text;
 * the merge hash maps a (left id, right id) pair to its lowest rank and
 * the id of the concatenation, which is a token; byte_token[b] is a
 * token (gpt2: byte b's byte-level character; llama: <0xBB>).
 */
#ifndef DYNBATCH_GGUF_TOKENIZER_IMPL_H
#define DYNBATCH_GGUF_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text/gguf_vocab_spec.h"
#include "text/merge_heap.h"
#include "text/pretok.h"

enum gguf_model {
	GGUF_MODEL_SPM,		/* "llama" */
	GGUF_MODEL_BPE,		/* "gpt2" */
};

struct gguf_merge_slot {
	int32_t left;		/* -1: empty */
	int32_t right;
	int32_t result;
	uint32_t rank;
};

struct gguf_tokenizer {
	enum gguf_model model;
	enum pretok_kind pre;
	bool ignore_merges;	/* a whole word that is a token is taken */
	uint32_t n_tokens;
	char *blob;		/* token texts, each NUL-terminated */
	uint64_t *off;		/* token i's text is blob + off[i] */
	uint32_t *len;
	float *score;
	uint8_t *type;		/* enum gguf_token_type, 0 mapped to 1 */
	char *pblob;		/* decoded pieces, each NUL-terminated */
	uint64_t *poff;
	uint32_t *plen;
	uint32_t longest_piece;
	uint32_t longest_token;	/* bytes of the longest token text */
	int32_t *tok_hash;	/* ids, -1 empty */
	uint64_t tok_mask;
	struct gguf_merge_slot *merge_hash;
	uint64_t merge_mask;
	int32_t byte_token[256];
	char bl_text[256][2];	/* gpt2: byte b's byte-level character */
	uint8_t bl_len[256];
	int32_t *specials;	/* control and user-defined ids, longest first */
	uint32_t n_specials;
	int32_t bos, eos, eot, unk, pad;
	bool add_bos, add_eos, add_space_prefix;
};

/* Where encode() writes: out[0..cap), n counts every token. */
struct gguf_emit {
	int32_t *out;
	size_t cap;
	size_t n;
};

static inline void gguf_emit_token(struct gguf_emit *e, int32_t id)
{
	if (e->n < e->cap)
		e->out[e->n] = id;
	e->n++;
}

/* Per-encode working memory, grown as words need and reused. */
struct gguf_scratch {
	int32_t *id;		/* a symbol's token (bpe) or byte start (spm) */
	int32_t *size;		/* spm: a symbol's bytes, 0 once merged away */
	int32_t *prev;
	int32_t *next;
	size_t cap;		/* symbols the four arrays hold */
	char *buf;		/* text prepared for a merge */
	size_t buf_cap;
	struct merge_heap heap;
};

/* Make room for n symbols and a buffer of buf_len bytes: 0 or -ENOMEM. */
int gguf_scratch_reserve(struct gguf_scratch *s, size_t n, size_t buf_len);
void gguf_scratch_release(struct gguf_scratch *s);

/* The lowest id whose text is a[0..la) b[0..lb), or -1. */
int32_t gguf_vocab_lookup2(const struct gguf_tokenizer *t, const char *a,
			   size_t la, const char *b, size_t lb);

/* The merge slot of (left, right), or NULL when they do not merge. */
const struct gguf_merge_slot *gguf_vocab_merge(const struct gguf_tokenizer *t,
					       int32_t left, int32_t right);

/* Build/free the vocabulary part of t (gguf_vocab.c). */
int gguf_vocab_build(struct gguf_tokenizer *t,
		     const struct tokenizer_vocab_spec *spec, char *err,
		     size_t err_len);
void gguf_vocab_release(struct gguf_tokenizer *t);

/* Encode one word (gpt2) / one piece of text (llama) into e: 0 or -ENOMEM. */
int gguf_bpe_word(const struct gguf_tokenizer *t, const char *word,
		  size_t len, struct gguf_scratch *s, struct gguf_emit *e);
int gguf_spm_text(const struct gguf_tokenizer *t, const char *text,
		  size_t len, struct gguf_scratch *s, struct gguf_emit *e);

#endif /* DYNBATCH_GGUF_TOKENIZER_IMPL_H */
