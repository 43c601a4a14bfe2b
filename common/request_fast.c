/*
 * request_fast.c - see request_fast.h.
 *
 * A scanner over [p, end) that never reads past end (lines are not
 * NUL-terminated) and gives up (returns false up the chain) at the first
 * byte that is not the common shape.  JSON whitespace is space, tab, CR
 * and LF, as in RFC 8259.
 */
#include "request_fast.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* More digits than this may overflow or be "too big" for jansson: its call. */
#define FAST_MAX_DIGITS 10

enum { SEEN_ID = 1, SEEN_PROMPT = 2, SEEN_MAX_TOKENS = 4 };

struct scan {
	const char *p;
	const char *end;
};

static void skip_ws(struct scan *s)
{
	while (s->p < s->end &&
	       (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
		s->p++;
}

/* Consume c (after whitespace) if it is next. */
static bool eat(struct scan *s, char c)
{
	skip_ws(s);
	if (s->p < s->end && *s->p == c) {
		s->p++;
		return true;
	}
	return false;
}

/*
 * A string of printable ASCII without escapes: its bytes are its value.
 * Anything else (an escape, a control byte, UTF-8) is jansson's to decode
 * and validate.
 */
static bool scan_plain_string(struct scan *s, const char **str, size_t *len)
{
	const char *begin;

	if (!eat(s, '"'))
		return false;
	begin = s->p;
	for (; s->p < s->end; s->p++) {
		unsigned char c = (unsigned char)*s->p;

		if (c == '"') {
			*str = begin;
			*len = (size_t)(s->p - begin);
			s->p++;
			return true;
		}
		if (c < 0x20 || c >= 0x80 || c == '\\')
			return false;
	}
	return false;
}

/*
 * A non-negative JSON integer below limit: digits only, no leading zero
 * (invalid JSON), no fraction or exponent (jansson reads those as reals,
 * which are not integers), no sign.
 */
static bool scan_uint_below(struct scan *s, uint64_t limit, uint64_t *out)
{
	const char *begin;
	uint64_t v = 0;

	skip_ws(s);
	begin = s->p;
	while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
		if (s->p - begin == FAST_MAX_DIGITS)
			return false;
		v = v * 10 + (uint64_t)(*s->p - '0');
		s->p++;
	}
	if (s->p == begin || (*begin == '0' && s->p - begin > 1))
		return false;
	if (s->p < s->end && (*s->p == '.' || *s->p == 'e' || *s->p == 'E'))
		return false;
	if (v >= limit)
		return false;
	*out = v;
	return true;
}

static bool key_is(const char *key, size_t len, const char *name)
{
	return strlen(name) == len && memcmp(key, name, len) == 0;
}

/* The prompt array, after its key.  1, 0 (not the common shape), -ENOMEM. */
static int scan_prompt(struct scan *s, const struct request_limits *lim,
		       int32_t **prompt, uint32_t *n)
{
	uint32_t cap = 0;

	if (!eat(s, '['))
		return 0;
	if (eat(s, ']'))
		return 1;
	do {
		uint64_t t;

		if (!scan_uint_below(s, lim->vocab, &t) || *n == lim->max_context)
			return 0;
		if (*n == cap) {
			int32_t *grown;

			cap = cap ? 2 * cap : 16;
			grown = realloc(*prompt, (size_t)cap * sizeof(**prompt));
			if (!grown)
				return -ENOMEM;
			*prompt = grown;
		}
		(*prompt)[(*n)++] = (int32_t)t;
	} while (eat(s, ','));
	return eat(s, ']') ? 1 : 0;
}

int request_parse_fast(const char *line, size_t len,
		       const struct request_limits *lim, struct request *req)
{
	struct scan s = { line, line + len };
	const char *id = NULL;
	size_t id_len = 0;
	int32_t *prompt = NULL;
	uint32_t n_prompt = 0;
	uint64_t max_tokens = REQUEST_DEFAULT_MAX_TOKENS;
	unsigned seen = 0;
	int rc = 0;

	if (!eat(&s, '{'))
		return 0;
	do {
		const char *key;
		size_t key_len;
		unsigned field;

		if (!scan_plain_string(&s, &key, &key_len) || !eat(&s, ':'))
			goto give_up;
		if (key_is(key, key_len, "id"))
			field = SEEN_ID;
		else if (key_is(key, key_len, "prompt"))
			field = SEEN_PROMPT;
		else if (key_is(key, key_len, "max_tokens"))
			field = SEEN_MAX_TOKENS;
		else
			goto give_up;	/* stops, include_stop, unknown fields */
		if (seen & field)
			goto give_up;	/* a duplicate key: jansson's error */
		seen |= field;
		if (field == SEEN_ID) {
			if (!scan_plain_string(&s, &id, &id_len))
				goto give_up;
		} else if (field == SEEN_PROMPT) {
			rc = scan_prompt(&s, lim, &prompt, &n_prompt);
			if (rc != 1)
				goto give_up;
			rc = 0;
		} else if (!scan_uint_below(&s, (uint64_t)lim->max_context + 1,
					    &max_tokens)) {
			goto give_up;
		}
	} while (eat(&s, ','));
	if (!eat(&s, '}'))
		goto give_up;
	skip_ws(&s);
	if (s.p != s.end || !(seen & SEEN_PROMPT) ||
	    (!(seen & SEEN_ID) && !lim->id_optional) ||
	    n_prompt + max_tokens > lim->max_context)
		goto give_up;
	if (seen & SEEN_ID) {
		req->id = strndup(id, id_len);
		if (!req->id) {
			rc = -ENOMEM;
			goto give_up;
		}
	}
	req->prompt = prompt;
	req->n_prompt = n_prompt;
	req->max_tokens = (uint32_t)max_tokens;
	return 1;

give_up:
	free(prompt);
	return rc;
}
