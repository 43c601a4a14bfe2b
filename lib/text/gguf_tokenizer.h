/*
 * gguf_tokenizer.h - the tokenizers a GGUF file describes: SentencePiece
 * BPE ("llama") and byte-level BPE ("gpt2"), built from plain arrays as
 * the file's tokenizer.ggml.* keys hold them.
 *
 * This is a type of its own, not a second constructor of struct
 * tokenizer (tokenizer.h): llama2.c's tokenizer has fixed ids (BOS 1,
 * byte b at b + 3) and one merge rule, while a GGUF vocabulary names its
 * special ids, its token types and its model, and those shape every
 * call.  The API mirrors tokenizer.h (encode into a caller's array,
 * -ENOSPC with the count needed, pieces after a predecessor).  It takes
 * arrays, not a file, so it does not depend on the GGUF reader.
 *
 * ENCODING (as llama.cpp's llama_tokenize; checked id for id against the
 * real Llama 3, Qwen 3 and Llama 2 tokenizers by make test-tokenizers):
 *  1. BOS first when add_special and the spec's add_bos.
 *  2. Special tokens are cut out of the text first, as whole strings:
 *     user-defined tokens always, control tokens only when parse_special.
 *     Longer tokens are cut first (then the lower id); each cut splits
 *     the text around it and later, shorter tokens look only in the
 *     pieces left.
 *  3. Each remaining piece of text is encoded by the model:
 *     "llama": spaces become U+2581, one U+2581 is put in front when
 *       add_space_prefix; the units (code points, an invalid byte alone)
 *       merge pairwise, always the adjacent pair whose concatenation is
 *       the token of highest score (leftmost on ties; normal,
 *       user-defined and unused tokens only); a unit left that
 *       is no token becomes its bytes' <0xXX> tokens (byte fallback).
 *     "gpt2": the pre-tokenizer (pretok.h) cuts the text into words;
 *       each word's bytes become the GPT-2 byte-to-unicode characters'
 *       tokens and merge by rank, the lowest rank first (leftmost on
 *       ties); with "llama-bpe" a word that is a token as a whole is
 *       that token (Llama 3's ignore_merges).
 *  4. EOS last when add_special and the spec's add_eos.
 *
 * DECODING: a token's piece is its bytes: "gpt2" maps the byte-level
 * characters back to bytes; "llama" turns U+2581 into a space and a
 * <0xXX> token into its byte, the unknown token into U+2585 (as
 * llama.cpp), and with add_space_prefix a normal piece after no token,
 * a control or a user-defined token loses one leading space.  Control
 * tokens give their text only when render_special, else nothing.  So
 * decode(encode(s)) == s for any bytes s with parse_special false (and
 * with parse_special true when decoding with render_special).
 *
 * A built tokenizer is read-only: any number of threads may use it.
 */
#ifndef DYNBATCH_GGUF_TOKENIZER_H
#define DYNBATCH_GGUF_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text/gguf_vocab_spec.h"

struct gguf_tokenizer;

/*
 * Build a tokenizer from spec.  Returns 0 and *out, or -EINVAL after
 * writing to err what is wrong and where (the token or merge index):
 * an unknown model or pre-tokenizer name, a token type outside 0..6, a
 * non-finite score, a special id past the vocabulary, add_bos/add_eos
 * without the id, a llama vocabulary without scores, without the 256
 * byte tokens <0x00>..<0xFF> or without U+2581 (the space), a byte-type token that is not <0xXX>, a
 * gpt2 vocabulary missing a byte-level character, a merge without a
 * space, naming a missing token or making a string that is no token;
 * or -ENOMEM.
 */
int gguf_tokenizer_create(const struct tokenizer_vocab_spec *spec,
			  struct gguf_tokenizer **out, char *err,
			  size_t err_len);

void gguf_tokenizer_free(struct gguf_tokenizer *t);

uint32_t gguf_tokenizer_vocab_size(const struct gguf_tokenizer *t);
int32_t gguf_tokenizer_bos(const struct gguf_tokenizer *t);
int32_t gguf_tokenizer_eos(const struct gguf_tokenizer *t);
int32_t gguf_tokenizer_eot(const struct gguf_tokenizer *t);
/* The token's type (enum gguf_token_type), -1 for an id out of range. */
int gguf_tokenizer_token_type(const struct gguf_tokenizer *t, int32_t token);
/* Whether encode() with add_special puts BOS first (the file's add_bos). */
bool gguf_tokenizer_adds_bos(const struct gguf_tokenizer *t);
/* The longest decoded piece in bytes. */
uint32_t gguf_tokenizer_longest_piece(const struct gguf_tokenizer *t);

/* The id of the token whose text is s[0..len) (lowest id), or -1. */
int32_t gguf_tokenizer_lookup(const struct gguf_tokenizer *t, const char *s,
			      size_t len);

/* A bound on encode()'s output for len bytes: every byte one token,
 * plus (llama, add_space_prefix) one U+2581 before each piece of text
 * between special tokens, at most one a byte (a special token is at
 * least a byte), plus BOS and EOS. */
static inline size_t gguf_tokenizer_encode_max(size_t len)
{
	return 2 * len + 3;
}

/*
 * Encode text[0..len) (ENCODING above) into out[0..cap).  Returns 0 with
 * *n_out tokens; -ENOSPC when more than cap are needed (*n_out is the
 * number needed, out holds a prefix); -E2BIG for len over
 * GGUF_TOKENIZER_MAX_TEXT; -ENOMEM.  Allocates O(len) scratch, freed
 * before returning; O(len log len) plus a scan of the text per special
 * token.
 */
int gguf_tokenizer_encode(const struct gguf_tokenizer *t, const char *text,
			  size_t len, bool add_special, bool parse_special,
			  int32_t *out, size_t cap, size_t *n_out);

/* A prev_token that stands for some ordinary token: the piece as it
 * reads inside a text (no leading space dropped). */
#define GGUF_PREV_ORDINARY (-2)

/*
 * The bytes token decodes to after prev_token (-1: none;
 * GGUF_PREV_ORDINARY), per DECODING above; *len is set and the bytes are
 * NUL-terminated past it.  NULL for a token out of range.
 */
const char *gguf_tokenizer_piece(const struct gguf_tokenizer *t,
				 int32_t prev_token, int32_t token,
				 bool render_special, size_t *len);

/*
 * Decode tokens[0..n) into out[0..cap), the first after prev_token.
 * Returns 0 with *n_out bytes (not NUL-terminated); -ENOSPC when more
 * than cap are needed (*n_out is the number needed, out holds a prefix);
 * -EINVAL for a token out of range (*n_out is its index).
 */
int gguf_tokenizer_decode(const struct gguf_tokenizer *t, int32_t prev_token,
			  const int32_t *tokens, size_t n, bool render_special,
			  char *out, size_t cap, size_t *n_out);

#endif /* DYNBATCH_GGUF_TOKENIZER_H */
