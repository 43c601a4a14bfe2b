/*
 * logprob_text.h - how a token of a logprobs entry is named in the
 * OpenAI answers: its text as the serving tokenizer decodes it, its
 * UTF-8 bytes, and where it starts in the choice's text (completions'
 * text_offset).  Shared by completion_api.c and chat_api.c; no I/O.
 *
 * A token's text is text_tokenizer_piece() after the token before it
 * (the prompt's last token for the first one), exactly what the engine
 * appends to the answer's text, so the text offsets add up to the text.
 *   - A piece that is valid UTF-8 is the token's string as is.
 *   - One that is not (a byte-fallback piece, half a character), or
 *     that holds a NUL byte (which JSON readers such as jansson refuse
 *     in the object keys of completions' top_logprobs), is
 *     written as OpenAI writes such tokens, "bytes:\xe2\x80" (a
 *     backslash, x and two hex digits per byte, plain ASCII); its bytes
 *     are in "bytes" all the same.  (vLLM prints U+FFFD instead.)
 *   - An end token (text_tokenizer_ends(), unless ignore_eos) adds no
 *     text: its string is its vocabulary name ("</s>", "<|im_end|>",
 *     at most LOGPROB_NAME_MAX bytes), its bytes that name's, and it
 *     moves no offset.
 *   - Without a tokenizer a token is "token_id:N" (vLLM's
 *     return_tokens_as_token_ids form) and its bytes null.
 */
#ifndef DYNBATCH_LOGPROB_TEXT_H
#define DYNBATCH_LOGPROB_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct text_tokenizer;

/* The longest end token name written (longer ones are cut there). */
#define LOGPROB_NAME_MAX 64u

/* Where a run of listed tokens starts. */
struct logprob_ctx {
	const struct text_tokenizer *tok;	/* NULL: "token_id:N" names */
	int32_t prev_token;	/* the token before the first listed; -1 none */
	uint64_t text_offset;	/* bytes of the choice's text before it */
	bool ignore_eos;	/* the request's: an end token is text */
};

/* One token's text: len bytes at s (not NUL-terminated); is_text: it
 * is part of the answer's text (moves the offset by len). */
struct logprob_token {
	const char *s;
	size_t len;
	bool is_text;
};

/* The text of token after prev (see above).  With no tokenizer, or a
 * token out of the vocabulary, len is 0 and is_text false. */
void logprob_token_of(const struct logprob_ctx *cx, int32_t prev,
		      int32_t token, struct logprob_token *t);

/* The most bytes logprob_put_name() and logprob_put_bytes() write
 * together for one token with tokenizer tok (NULL too), and a number. */
size_t logprob_entry_bound(const struct text_tokenizer *tok);

/* The token's JSON string (see above). */
char *logprob_put_name(char *p, const struct logprob_ctx *cx, int32_t token,
		       const struct logprob_token *t);
/* [b0,b1,..] (its UTF-8 bytes), or null without a tokenizer. */
char *logprob_put_bytes(char *p, const struct logprob_ctx *cx,
			const struct logprob_token *t);

/* Move cx past tokens[0..n) (the next run starts after them). */
void logprob_ctx_advance(struct logprob_ctx *cx, const int32_t *tokens,
			 uint32_t n);

#endif /* DYNBATCH_LOGPROB_TEXT_H */
