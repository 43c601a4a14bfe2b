/*
 * ref_text.c - the reference decoder's text rules; see ref_text.h.
 *
 * NOTES ON THE DESIGN
 * Nothing here is incremental: each step decodes all the generated tokens
 * again from the raw pieces (tokenizer_raw_piece(), no decoding rule
 * applied by the library) and searches the whole text for every stop
 * string from its first byte, so the answer follows from the definition
 * alone; the engine's automaton and holdback must agree with it.  The
 * cost is O(n^2) per request in its generated length: fine for tests.
 */
#include "tools/refdecode/ref_text.h"
#include "tools/utf8_strict.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/refdecode/ref_tokenizer.h"
#include "text/text_tokenizer.h"
#include "text/tokenizer.h"

struct ref_text {
	struct tokenizer *tok;		/* owned by tt */
	struct text_tokenizer *tt;	/* what the request parser takes */
	struct ref_tokenizer *enc;
};

struct ref_text *ref_text_load(const char *path, uint32_t vocab, char *err,
			       size_t err_len)
{
	struct ref_text *rt = calloc(1, sizeof(*rt));
	int rc;

	if (!rt) {
		snprintf(err, err_len, "out of memory");
		return NULL;
	}
	rc = tokenizer_load(path, vocab, &rt->tok, err, err_len);
	if (rc) {
		free(rt);
		return NULL;
	}
	if (text_tokenizer_from_llama2c(rt->tok, &rt->tt)) {
		snprintf(err, err_len, "out of memory");
		free(rt);
		return NULL;
	}
	rt->enc = ref_tokenizer_new(rt->tok);
	if (!rt->enc) {
		snprintf(err, err_len, "out of memory");
		ref_text_free(rt);
		return NULL;
	}
	return rt;
}

void ref_text_free(struct ref_text *rt)
{
	if (!rt)
		return;
	ref_tokenizer_free(rt->enc);
	text_tokenizer_free(rt->tt);
	free(rt);
}

const struct text_tokenizer *ref_text_tokenizer(const struct ref_text *rt)
{
	return rt->tt;
}

int ref_text_encode(const struct ref_text *rt, const char *s, size_t len,
		    int32_t **out, uint32_t *n_out)
{
	long n;

	*out = malloc(tokenizer_encode_max(len) * sizeof(**out));
	if (!*out)
		return -ENOMEM;
	n = ref_tokenizer_encode(rt->enc, s, len, true, false, *out);
	if (n < 0) {
		free(*out);
		*out = NULL;
		return -ENOMEM;
	}
	*n_out = (uint32_t)n;
	return 0;
}

/* The value of hex digit c, or -1. */
static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int ref_text_decode(const struct ref_text *rt, int32_t prev,
		    const int32_t *tokens, uint32_t n, struct strbuf *out)
{
	for (uint32_t i = 0; i < n; prev = tokens[i++]) {
		size_t len;
		float score;
		const char *p = tokenizer_raw_piece(rt->tok, tokens[i], &len,
						    &score);
		int hi, lo;

		if (!p)
			return -EINVAL;
		if (len == 6 && memcmp(p, "<0x", 3) == 0 && p[5] == '>' &&
		    (hi = hex_digit(p[3])) >= 0 && (lo = hex_digit(p[4])) >= 0) {
			char byte = (char)(hi * 16 + lo);

			if (strbuf_append(out, &byte, 1))
				return -ENOMEM;
			continue;
		}
		if (prev == 1 && len > 0 && p[0] == ' ') {
			p++;
			len--;
		}
		if (len && strbuf_append(out, p, len))
			return -ENOMEM;
	}
	return 0;
}

/* Where needle first occurs in hay, or -1: a plain double loop. */
static long first_at(const char *hay, size_t n_hay, const char *needle,
		     size_t n_needle)
{
	for (size_t i = 0; i + n_needle <= n_hay; i++) {
		size_t k = 0;

		while (k < n_needle && hay[i + k] == needle[k])
			k++;
		if (k == n_needle)
			return (long)i;
	}
	return -1;
}

int ref_text_step(const struct ref_text *rt, const struct request *req,
		  const int32_t *gen, uint32_t n, enum ref_text_event *ev,
		  struct strbuf *text)
{
	int32_t prev = req->n_prompt ? req->prompt[req->n_prompt - 1] : -1;
	int32_t last = gen[n - 1];
	size_t best_end = 0, best_len = 0;
	long best_at = -1;
	int rc;

	*ev = REF_TEXT_MORE;
	text->len = 0;
	if (!req->ignore_eos && (last == 1 || last == 2)) {
		*ev = REF_TEXT_END;
		return ref_text_decode(rt, prev, gen, n - 1, text);
	}
	rc = ref_text_decode(rt, prev, gen, n, text);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < req->n_stop_strs; i++) {
		size_t len = req->stop_str_lens[i];
		long at = first_at(text->data, text->len, req->stop_strs[i], len);

		if (at < 0)
			continue;
		if (best_at < 0 || (size_t)at + len < best_end ||
		    ((size_t)at + len == best_end && len > best_len)) {
			best_at = at;
			best_end = (size_t)at + len;
			best_len = len;
		}
	}
	if (best_at >= 0) {
		*ev = REF_TEXT_STOP;
		text->len = req->include_stop ? best_end : (size_t)best_at;
	}
	return 0;
}

int ref_text_shown(const char *s, size_t n, struct strbuf *out)
{
	const unsigned char *u = (const unsigned char *)s;

	for (size_t i = 0; i < n;) {
		size_t len = utf8_strict_seq(u + i, n - i);

		if (len ? strbuf_append(out, s + i, len) :
			  strbuf_append(out, "\xEF\xBF\xBD", 3))
			return -ENOMEM;
		i += len ? len : 1;
	}
	return 0;
}
