/*
 * tokenizer_train.h - train a small BPE vocabulary on a text and lay it
 * out as llama2.c's tokenizer.bin (tokenizer.h), so that tests and tools
 * make their own tokenizer instead of downloading one
 * (tools/make_tokenizer, tests/unit/test_tokenizer.c).
 *
 * THE VOCABULARY (exactly vocab_size tokens, ids in this order):
 *   0 "<unk>", 1 "<s>", 2 "</s>", 3..258 the byte pieces
 *   "<0x00>".."<0xFF>", all with score -1e10 (llama's file has 0; see
 *   tokenizer_train.c for why);
 *   the merged pieces in the order they were learned, the r-th (from 0)
 *   with score -r, so llama2.c's highest-score-first merging applies them
 *   in training order;
 *   the alphabet: single code points, scores below every merge (a single
 *   code point is never a merge result, so its score is never read);
 *   padding "<extra_N>" with score -1e10 when the text has no pair left
 *   to merge before vocab_size is reached (never produced by encoding:
 *   merges need a score above -1e10 and no group is that long).
 *
 * TRAINING, like SentencePiece's BPE on llama's settings: each line of
 * the text ('\n' is never part of a piece: newlines encode as the byte
 * token <0x0A>, as in llama's vocabulary) gets the dummy prefix " " and is
 * cut into words, each starting at a space (" the", " ", " cat").  The
 * alphabet is " " plus every valid UTF-8 code point seen at least twice,
 * most frequent first, as many as fit; a code point seen once, or not
 * fitting, is left to byte fallback, so a tokenizer made from the built-in
 * corpus splits rare characters (an emoji, a CJK character) into byte
 * tokens while common ones (€) are one token or part of longer pieces.
 * Then, until the vocabulary is full: count every adjacent pair of
 * symbols over the words (weighted by how often each word occurs), merge
 * the most frequent pair (ties: the lower pair of symbol ids) everywhere
 * left to right, and add the concatenation as a token unless it is one
 * already.  Merges never cross a word boundary or a code point left to
 * byte fallback.  Pieces always hold whole code points: llama2.c's encoder
 * starts from whole code points and its byte tokens' pieces are the text
 * "<0xNN>", so a piece with part of a character could never be produced.
 *
 * Deterministic: the same text and vocab_size give the same bytes.
 * Each merge rescans the words: O(merges x word symbols), fine for the
 * corpora of tests (a few hundred KB, a few thousand tokens).
 */
#ifndef DYNBATCH_TOKENIZER_TRAIN_H
#define DYNBATCH_TOKENIZER_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "util/strbuf.h"

struct tokenizer_train_stats {
	uint32_t alphabet;	/* single code point tokens */
	uint32_t merges;	/* merged tokens */
	uint32_t padding;	/* "<extra_N>" tokens */
	int32_t max_token_length;
};

/* A few KB of text with English words, €, emoji and CJK (some of them
 * only once, so they stay byte fallback): the default corpus. */
extern const char tokenizer_builtin_corpus[];

/*
 * Train on text[0..len) and append the tokenizer.bin bytes of exactly
 * vocab_size tokens to out.  Returns 0 (stats filled when not NULL),
 * -EINVAL after writing err (vocab_size below 260 or over
 * TOKENIZER_MAX_VOCAB), or -ENOMEM.
 */
int tokenizer_train(const char *text, size_t len, uint32_t vocab_size,
		    struct strbuf *out, struct tokenizer_train_stats *stats,
		    char *err, size_t err_len);

#endif /* DYNBATCH_TOKENIZER_TRAIN_H */
