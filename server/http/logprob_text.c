/*
 * logprob_text.c - see logprob_text.h.
 */
#include "server/http/logprob_text.h"

#include <string.h>

#include "text/text_tokenizer.h"
#include "util/json_writer.h"

void logprob_token_of(const struct logprob_ctx *cx, int32_t prev,
		      int32_t token, struct logprob_token *t)
{
	*t = (struct logprob_token){ .s = "", .len = 0, .is_text = false };
	if (!cx->tok)
		return;
	if (!cx->ignore_eos && text_tokenizer_ends(cx->tok, token)) {
		/* the engine pushes no text for it (request_text.c) */
		t->s = text_tokenizer_token_text(cx->tok, token, &t->len);
		if (!t->s)
			t->s = "";
		if (t->len > LOGPROB_NAME_MAX)
			t->len = LOGPROB_NAME_MAX;
		return;
	}
	t->s = text_tokenizer_piece(cx->tok, prev, token, &t->len);
	if (!t->s) {	/* out of the vocabulary: nothing (cannot be sampled) */
		t->s = "";
		t->len = 0;
		return;
	}
	t->is_text = true;
}

size_t logprob_entry_bound(const struct text_tokenizer *tok)
{
	size_t m = LOGPROB_NAME_MAX;

	if (tok && text_tokenizer_longest_piece(tok) > m)
		m = text_tokenizer_longest_piece(tok);
	/* the name: escaped (json_strn_bound) or "bytes:" and 5 per byte
	 * (\\xNN), less than 6; the bytes: "255," per byte and brackets;
	 * "token_id:N" and null fit the slack */
	return 8 + json_strn_bound(m) + 4 * m + 2 + 2 * JSON_U64_MAX;
}

char *logprob_put_name(char *p, const struct logprob_ctx *cx, int32_t token,
		       const struct logprob_token *t)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)t->s;

	if (!cx->tok) {
		p = JSON_PUT_LIT(p, "\"token_id:");
		p = json_put_i32(p, token);
		*p++ = '"';
		return p;
	}
	/* a NUL is no text either: many JSON readers (jansson) refuse it
	 * in an object key, which top_logprobs' names are */
	if (json_utf8_valid(t->s, t->len) && !memchr(t->s, '\0', t->len))
		return json_put_strn(p, t->s, t->len);
	/* OpenAI's form for bytes that are no text on their own */
	p = JSON_PUT_LIT(p, "\"bytes:");
	for (size_t i = 0; i < t->len; i++) {
		p = JSON_PUT_LIT(p, "\\\\x");
		*p++ = hex[s[i] >> 4];
		*p++ = hex[s[i] & 15];
	}
	*p++ = '"';
	return p;
}

char *logprob_put_bytes(char *p, const struct logprob_ctx *cx,
			const struct logprob_token *t)
{
	const unsigned char *s = (const unsigned char *)t->s;

	if (!cx->tok)
		return JSON_PUT_LIT(p, "null");
	*p++ = '[';
	for (size_t i = 0; i < t->len; i++) {
		if (i)
			*p++ = ',';
		p = json_put_u64(p, s[i]);
	}
	*p++ = ']';
	return p;
}

void logprob_ctx_advance(struct logprob_ctx *cx, const int32_t *tokens,
			 uint32_t n)
{
	struct logprob_token t;

	for (uint32_t i = 0; i < n; i++) {
		logprob_token_of(cx, cx->prev_token, tokens[i], &t);
		if (t.is_text) {
			cx->text_offset += t.len;
			/* request_text.c moves its previous token past text
			 * tokens only: an end token decodes nothing */
			cx->prev_token = tokens[i];
		}
	}
}
