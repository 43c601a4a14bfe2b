/*
 * ref_bpe.h - naive reference encoders for the GGUF tokenizers
 * (lib/text/gguf_tokenizer.c), written from the textbook definitions on
 * strings, with linear searches and no hash or heap: slow and obvious.
 * tests/unit/test_gguf_tokenizer.c holds the fast merges to them on
 * random vocabularies.  They read the same tokenizer_vocab_spec.
 */
#ifndef DYNBATCH_REF_BPE_H
#define DYNBATCH_REF_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text/gguf_vocab_spec.h"

/*
 * Byte-level BPE of one word: the word's bytes become their GPT-2
 * byte-to-unicode characters; while some adjacent pair is a merge
 * "left right", the one of lowest rank (index in spec->merges; leftmost
 * on ties) is merged; each symbol is then its token (lowest id).  With
 * whole_word, a word whose characters are a token as a whole is that
 * token.  out must hold len ids; returns the count, -1 out of memory.
 */
long ref_bpe_word(const struct tokenizer_vocab_spec *spec, const char *word,
		  size_t len, bool whole_word, int32_t *out);

/*
 * SentencePiece BPE of one piece of text: spaces become U+2581, one is
 * put in front when prefix; the text's code points (an invalid byte
 * alone) merge, always the adjacent pair whose concatenation is the
 * token of highest score (leftmost on ties), a text token (not control,
 * byte or unknown); a symbol that is no token
 * is its bytes' <0xXX> tokens.  out must hold 3 * len + 3 ids; returns
 * the count, -1 out of memory.
 */
long ref_spm_text(const struct tokenizer_vocab_spec *spec, const char *text,
		  size_t len, bool prefix, int32_t *out);

#endif /* DYNBATCH_REF_BPE_H */
