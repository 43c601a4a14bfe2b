/*
 * text_tokenizer.h - the tokenizer the engine serves with: llama2.c's
 * (tokenizer.h, a tokenizer.bin) or the one a GGUF file describes
 * (gguf_tokenizer.h), behind one narrow interface, so that the engine
 * and the front ends never ask which (docs/DESIGN.md 2.6.1).
 *
 * What differs, and how each call hides it:
 *   - Special ids.  llama2.c's are fixed (BOS 1, EOS 2, no EOT); a GGUF
 *     vocabulary names its own.  text_tokenizer_ends() is the one answer
 *     to "does this token end a request": BOS, EOS, EOT, and for a GGUF
 *     vocabulary the control tokens that llama.cpp also ends on whatever
 *     the file's ids say (TEXT_TOKENIZER_END_NAMES below: a Qwen file
 *     whose EOS is <|im_end|> still ends at <|endoftext|>).
 *   - Special tokens in text.  llama2.c's encoder has none: "</s>" is four
 *     characters.  A GGUF tokenizer cuts control and user-defined tokens
 *     out of the text (parse_special), as llama.cpp's server does for
 *     prompts and rendered chat templates, so "<|im_start|>" written in
 *     a prompt is that token.  text_tokenizer_parses_special() says
 *     which, for a chat template that must put BOS and EOS in.
 *   - BOS/EOS on encode.  add_special asks for what the vocabulary adds
 *     to a whole prompt: llama2.c always BOS; a GGUF file its add_bos and
 *     add_eos flags (absent: BOS for "llama", none for "gpt2").
 *   - Decoding.  A piece after its predecessor; control tokens decode to
 *     nothing (they are not text the user asked for).
 *
 * A tokenizer is read-only once made: any number of threads may use it.
 */
#ifndef DYNBATCH_TEXT_TOKENIZER_H
#define DYNBATCH_TEXT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tokenizer;
struct gguf_tokenizer;
struct text_tokenizer;

/* Control tokens that end a request by their text, as llama.cpp's
 * end-of-generation set does (llama-vocab.cpp), comma-separated. */
#define TEXT_TOKENIZER_END_NAMES \
	"<|eot_id|>, <|eom_id|>, <|im_end|>, <|endoftext|>, <|end|>, " \
	"<end_of_turn>, <|end_of_text|>"

/* Wrap llama2.c's tokenizer t (now owned: freed with the wrapper).
 * 0, or -ENOMEM (t is freed). */
int text_tokenizer_from_llama2c(struct tokenizer *t, struct text_tokenizer **out);

/* Wrap a GGUF file's tokenizer g (owned as above).  0, or -ENOMEM. */
int text_tokenizer_from_gguf(struct gguf_tokenizer *g,
			     struct text_tokenizer **out);

/* Accepts NULL. */
void text_tokenizer_free(struct text_tokenizer *t);

uint32_t text_tokenizer_vocab_size(const struct text_tokenizer *t);
/* -1 where the vocabulary has none. */
int32_t text_tokenizer_bos(const struct text_tokenizer *t);
int32_t text_tokenizer_eos(const struct text_tokenizer *t);
/* Whether token ends a request (see above); false out of range. */
bool text_tokenizer_ends(const struct text_tokenizer *t, int32_t token);
/* Whether encode() turns special tokens' text into the tokens. */
bool text_tokenizer_parses_special(const struct text_tokenizer *t);
/* Whether encode() with add_special puts BOS first. */
bool text_tokenizer_adds_bos(const struct text_tokenizer *t);
/* The text a chat template writes for token id (its bos_token and
 * eos_token): a GGUF vocabulary's token text, control tokens included;
 * NULL (and *len 0) for -1 or an id out of range. */
const char *text_tokenizer_token_text(const struct text_tokenizer *t,
				      int32_t id, size_t *len);
/* The longest decoded piece in bytes: a token adds at most this to an
 * answer, and no token stands for more of a prompt's text. */
uint32_t text_tokenizer_longest_piece(const struct text_tokenizer *t);

/* A bound on encode()'s output for len bytes, for both kinds. */
static inline size_t text_tokenizer_encode_max(size_t len)
{
	return 2 * len + 3;
}

/*
 * Encode text[0..len) into out[0..cap), with add_special as above.
 * Returns 0 with *n_out tokens; -ENOSPC when more than cap are needed
 * (*n_out the number needed); -E2BIG for a text past the kind's limit;
 * -ENOMEM.
 */
int text_tokenizer_encode(const struct text_tokenizer *t, const char *text,
			  size_t len, bool add_special, int32_t *out,
			  size_t cap, size_t *n_out);

/*
 * The bytes token decodes to after prev_token (-1: none); *len is set,
 * the bytes are NUL-terminated past it and live as long as t.  NULL for
 * a token out of range.
 */
const char *text_tokenizer_piece(const struct text_tokenizer *t,
				 int32_t prev_token, int32_t token, size_t *len);

/* The bytes token adds inside a text, after an ordinary token (what a
 * grammar matches: docs/DESIGN.md 2.8); as text_tokenizer_piece(). */
const char *text_tokenizer_piece_inside(const struct text_tokenizer *t,
					int32_t token, size_t *len);

#endif /* DYNBATCH_TEXT_TOKENIZER_H */
