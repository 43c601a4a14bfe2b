/*
 * tokenizer.h - llama2.c's tokenizer: its tokenizer.bin file, its encoder
 * (text to token ids) and its decoder (token ids to bytes).
 *
 * FILE FORMAT (llama2.c's tokenizer.bin, little-endian; the file holds no
 * token count, the reader is told the model's vocab_size):
 *
 *     int32 max_token_length
 *     vocab_size times: float32 score, int32 length, length bytes (the piece)
 *
 * Ids 0..2 are <unk>, <s> (BOS) and </s> (EOS); ids 3..258 must be the
 * byte pieces "<0x00>".."<0xFF>" (byte fallback emits byte + 3), so
 * vocab_size >= 259.  A piece is a byte string of its stated length (it
 * may hold any byte; llama2.c would cut it at a NUL, a file we never see).
 *
 * The loader refuses, naming the file, the token index and the byte
 * offset: a file shorter than its header; max_token_length <= 0 or over
 * TOKENIZER_MAX_TOKEN_LENGTH; a token cut off inside its score/length or
 * piece ("truncated"); a negative length, a length over max_token_length
 * or past the end of the file; a non-finite score; a file that ends
 * cleanly after fewer than vocab_size tokens (its vocabulary is smaller
 * than the model's); bytes left after vocab_size tokens (its vocabulary
 * is bigger than the model's: llama2.c silently ignores them, but then
 * the merges that use the missing tokens are lost and the text encodes
 * differently from how the model was trained, so we refuse); ids 3..258
 * that are not the byte pieces.  Duplicate pieces are accepted; looking a
 * string up finds the lowest id holding it.
 *
 * ENCODING (llama2.c's encode(), token for token; tests/unit/test_tokenizer.c
 * holds the fast encoder to a naive one written like llama2.c's loop):
 *  1. BOS (1) first when asked.
 *  2. When the text is not empty, the dummy prefix: the token of " " (the
 *     byte token <0x20> if the vocabulary has no " "; llama2.c would emit
 *     -1 there).  An empty text gets no dummy prefix.
 *  3. The text is cut into groups as llama2.c does: each group is one byte
 *     plus up to 3 following continuation bytes (10xxxxxx); for valid
 *     UTF-8 a group is a code point.  A group that is a vocabulary piece
 *     becomes that token, otherwise each of its bytes becomes the byte
 *     token byte + 3 (byte fallback; invalid UTF-8 always ends here since
 *     no piece holds it in practice).  A NUL byte is a byte like any other
 *     (llama2.c's text would end there).
 *  4. Merging: while some adjacent pair of tokens (BOS included, as in
 *     llama2.c) has a concatenation of pieces that is a vocabulary piece
 *     with score > -1e10 (llama2.c's starting best_score), the pair with
 *     the highest score is replaced by that token; on equal scores the
 *     leftmost pair.  A byte token's piece is its text "<0xNN>", so byte
 *     fallback tokens never merge with text in practice.
 *  5. EOS (2) last when asked.
 *
 * DECODING (llama2.c's decode()): a token's piece, except that a piece
 * that is exactly "<0x" two hex digits ">" is that one raw byte, and a
 * piece after BOS (prev_token == 1) loses one leading space.  So for any
 * byte string s (valid UTF-8 or not) and a vocabulary that has " " and
 * only honest pieces (made by tools/make_tokenizer), decoding
 * encode(s, bos=true) gives back exactly s, and encode(s, bos=false) gives
 * " " s (" " only for non-empty s).
 *
 * A loaded tokenizer is read-only: encode and decode may run in any
 * number of threads at once.
 */
#ifndef DYNBATCH_TOKENIZER_H
#define DYNBATCH_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TOKENIZER_UNK 0
#define TOKENIZER_BOS 1
#define TOKENIZER_EOS 2
/* First byte token: byte b is token b + TOKENIZER_BYTE0. */
#define TOKENIZER_BYTE0 3
/* The smallest vocabulary: <unk>, <s>, </s> and the 256 byte tokens. */
#define TOKENIZER_MIN_VOCAB 259u
/* The largest vocabulary accepted (token ids fit an int32_t). */
#define TOKENIZER_MAX_VOCAB (1u << 24)
/* The largest max_token_length accepted (llama 2's file says 27). */
#define TOKENIZER_MAX_TOKEN_LENGTH (1 << 16)
/* The longest text encode() takes, in bytes. */
#define TOKENIZER_MAX_TEXT ((size_t)INT32_MAX - 8)

struct tokenizer;

/*
 * Load a tokenizer.bin of exactly vocab_size tokens from path.  The file
 * is opened with O_NONBLOCK and must be a regular file (a FIFO is refused
 * rather than waited on).  Returns 0 and *out, or a negative errno after
 * writing a message that names the file to err: -EINVAL for a bad file,
 * -ENOMEM, or the open/read error.
 */
int tokenizer_load(const char *path, uint32_t vocab_size,
		   struct tokenizer **out, char *err, size_t err_len);

/* The same from size bytes in memory (copied); name is for messages. */
int tokenizer_load_mem(const void *data, size_t size, uint32_t vocab_size,
		       const char *name, struct tokenizer **out, char *err,
		       size_t err_len);

void tokenizer_free(struct tokenizer *t);

uint32_t tokenizer_vocab_size(const struct tokenizer *t);
/* The file's max_token_length. */
int32_t tokenizer_max_token_length(const struct tokenizer *t);
/* The longest piece's bytes, decoded (a byte piece is one byte; never
 * more than max_token_length, which a file may state far too large): no
 * token stands for more text, so a text of L bytes needs at least
 * L / longest tokens, and a token adds at most this to an answer. */
uint32_t tokenizer_longest_piece(const struct tokenizer *t);
static inline int32_t tokenizer_bos(const struct tokenizer *t)
{
	(void)t;
	return TOKENIZER_BOS;
}
static inline int32_t tokenizer_eos(const struct tokenizer *t)
{
	(void)t;
	return TOKENIZER_EOS;
}

/* The raw piece of token (no decoding rule) and its score; NULL for an
 * id out of range.  The piece is NUL-terminated past *len. */
const char *tokenizer_raw_piece(const struct tokenizer *t, int32_t token,
				size_t *len, float *score);

/* The id of the piece s[0..len) (lowest id on duplicates), or -1. */
int32_t tokenizer_lookup(const struct tokenizer *t, const char *s,
			 size_t len);

/* A bound on encode()'s output for len bytes of text: BOS, dummy prefix,
 * one token per byte, EOS. */
static inline size_t tokenizer_encode_max(size_t len)
{
	return len + 3;
}

/*
 * Encode text[0..len) (see ENCODING above) into out[0..cap).  Returns 0
 * with *n_out tokens; -ENOSPC when more than cap are needed (*n_out is
 * the number needed, out is unspecified: tokenizer_encode_max(len)
 * always suffices); -E2BIG for len over TOKENIZER_MAX_TEXT; -ENOMEM.
 * O(n log n) in the text's length; allocates 16 bytes per text byte plus
 * a heap for the longest run of symbols a merge may span (a word, with
 * a SentencePiece-style vocabulary), freed before returning.
 */
int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len,
		     bool bos, bool eos, int32_t *out, size_t cap,
		     size_t *n_out);

/*
 * The bytes token decodes to after prev_token (-1: none), per DECODING
 * above; *len is set, the bytes are NUL-terminated past it.  NULL for a
 * token out of range.
 */
const char *tokenizer_piece(const struct tokenizer *t, int32_t prev_token,
			    int32_t token, size_t *len);

/*
 * Decode tokens[0..n) into out[0..cap): the concatenated pieces, each
 * after its predecessor (the first after prev_token, -1 for none).  BOS
 * and EOS give no bytes (they still count as the predecessor).  Returns 0
 * with *n_out bytes (not NUL-terminated); -ENOSPC when more than cap are
 * needed (*n_out is the number needed, out holds a prefix); -EINVAL for a
 * token out of range (*n_out is its index).
 */
int tokenizer_decode(const struct tokenizer *t, int32_t prev_token,
		     const int32_t *tokens, size_t n, char *out, size_t cap,
		     size_t *n_out);

#endif /* DYNBATCH_TOKENIZER_H */
