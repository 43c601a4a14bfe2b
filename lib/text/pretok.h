/*
 * pretok.h - the pre-tokenizers of byte-level BPE vocabularies: how a
 * text is cut into words before BPE merges inside each word.
 *
 * Each kind is one of the regular expressions that llama.cpp and HF
 * tokenizers apply, written out by hand as a scanner (no regex library).
 * As in the regex, the pieces tile the text: each starts where the last
 * ended, at the first alternative that matches there.  \p{L}, \p{N} and
 * \s are the classes of text/unicode.h.  A byte that is not valid UTF-8
 * is a unit of class "other" (neither letter, number nor space), which
 * is how the reference sees U+FFFD; its byte is kept as it is.
 *
 *   PRETOK_LLAMA3 ("llama-bpe", Llama 3):
 *     (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ |
 *     \p{N}{1,3} | ' '?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ |
 *     \s+(?!\S) | \s+
 *   PRETOK_QWEN2 ("qwen2"): the same with \p{N} single digits.
 *   PRETOK_GPT2 ("gpt2"):
 *     's|'t|'re|'ve|'m|'ll|'d | ' '?\p{L}+ | ' '?\p{N}+ |
 *     ' '?[^\s\p{L}\p{N}]+ | \s+(?!\S) | \s+
 *   PRETOK_SMOLLM ("smollm", "starcoder"): \p{N} cut out first, one
 *     digit a piece, then PRETOK_GPT2 on each piece between (llama.cpp
 *     applies the two patterns in turn; HF's Digits(individual_digits)
 *     then ByteLevel).
 *
 * The case-insensitive contractions fold ASCII letters only.
 */
#ifndef DYNBATCH_PRETOK_H
#define DYNBATCH_PRETOK_H

#include <stddef.h>

enum pretok_kind {
	PRETOK_LLAMA3,
	PRETOK_QWEN2,
	PRETOK_GPT2,
	PRETOK_SMOLLM,
};

/* The kind named name (tokenizer.ggml.pre); 0, or -EINVAL for a name we
 * do not know. */
int pretok_from_name(const char *name, enum pretok_kind *out);

/* The end (exclusive, > pos) of the piece that starts at text[pos],
 * pos < len. */
size_t pretok_next(enum pretok_kind kind, const char *text, size_t len,
		   size_t pos);

#endif /* DYNBATCH_PRETOK_H */
