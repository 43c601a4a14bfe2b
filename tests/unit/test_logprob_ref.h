/*
 * test_logprob_ref.h - a naive reference for how the OpenAI answers
 * name a logprobs token (server/http/logprob_text.h), written from the
 * rules, not from logprob_text.c: each token's piece decoded again from
 * the tokenizer after the token before it, UTF-8 validity judged by
 * jansson, offsets summed in order.  For test_completion_api.c and
 * test_chat_api.c (header-only, one translation unit each).
 */
#ifndef DYNBATCH_TEST_LOGPROB_REF_H
#define DYNBATCH_TEST_LOGPROB_REF_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "sampling/sampler.h"
#include "text/text_tokenizer.h"
#include "tests/unit/test_rng.h"

/* n random tokens below vocab and their logprob entries of stride (the
 * token, then random alternatives; with drop, the second alternative
 * sometimes -1, which ends the list). */
static inline void ref_random_logprobs(struct rng *rng, uint32_t vocab,
				       int32_t *tokens, uint32_t n,
				       struct sampler_logprob *lp,
				       uint32_t stride, bool drop)
{
	for (uint32_t i = 0; i < n; i++) {
		tokens[i] = (int32_t)rng_below(rng, vocab);
		for (uint32_t j = 0; j < stride; j++) {
			lp[i * stride + j].token = j ? (int32_t)rng_below(rng, vocab) :
						   tokens[i];
			lp[i * stride + j].logprob = -(float)rng_below(rng, 1000) / 64;
		}
		if (drop && stride > 2 && rng_below(rng, 4) == 0)
			lp[i * stride + 2].token = -1;
	}
}

/* A token as the reference expects it. */
struct ref_token {
	const char *bytes;	/* its bytes, n_bytes of them */
	size_t n_bytes;
	char name[512];		/* its JSON string's value */
	size_t name_len;
	uint64_t offset;	/* where it starts in the text */
};

/* Walk state: the token before and the text so far. */
struct ref_walk {
	const struct text_tokenizer *tok;
	bool ignore_eos;
	int32_t prev;
	uint64_t offset;
};

/* token after w (moving w when advance: the chosen token, not an
 * alternative). */
static inline void ref_token_at(struct ref_walk *w, int32_t token,
				bool advance, struct ref_token *out)
{
	bool end = !w->ignore_eos && text_tokenizer_ends(w->tok, token);
	json_t *probe;
	size_t len = 0;
	const char *s;

	s = end ? text_tokenizer_token_text(w->tok, token, &len) :
		  text_tokenizer_piece(w->tok, w->prev, token, &len);
	if (!s)
		s = "", len = 0;
	if (end && len > 64)
		len = 64;
	out->bytes = s;
	out->n_bytes = len;
	out->offset = w->offset;
	probe = json_stringn(s, len);	/* NULL: not valid UTF-8 */
	if (probe && !memchr(s, 0, len)) {
		memcpy(out->name, s, len);
		out->name_len = len;
	} else {
		out->name_len = (size_t)snprintf(out->name, sizeof(out->name),
						 "bytes:");
		for (size_t i = 0; i < len; i++)
			out->name_len += (size_t)snprintf(out->name + out->name_len,
							  sizeof(out->name) - out->name_len,
							  "\\x%02x", (unsigned char)s[i]);
	}
	json_decref(probe);
	if (advance && !end) {
		w->offset += len;
		w->prev = token;
	}
}

/* Whether v is the JSON string of r. */
static inline bool ref_name_is(const json_t *v, const struct ref_token *r)
{
	return json_is_string(v) && json_string_length(v) == r->name_len &&
	       !memcmp(json_string_value(v), r->name, r->name_len);
}

/* Whether v is the bytes list of r. */
static inline bool ref_bytes_are(const json_t *v, const struct ref_token *r)
{
	if (!json_is_array(v) || json_array_size(v) != r->n_bytes)
		return false;
	for (size_t i = 0; i < r->n_bytes; i++)
		if (json_integer_value(json_array_get(v, i)) !=
		    (unsigned char)r->bytes[i])
			return false;
	return true;
}

#endif /* DYNBATCH_TEST_LOGPROB_REF_H */
