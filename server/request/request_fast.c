/*
 * request_fast.c - see request_fast.h.
 *
 * A scanner over [p, end) that never reads past end (lines are not
 * NUL-terminated) and gives up (returns false up the chain) at the first
 * byte that is not the common shape.  JSON whitespace is space, tab, CR
 * and LF, as in RFC 8259.  The stop fields go to the same builder as
 * jansson's path (request_build.h), which joins them in request_json.h's
 * order whatever the key order, and compiles them.  Nothing is written
 * into the request until the whole line has been read, so giving up
 * frees only what this file allocated, and calls nothing of request_json.c.
 */
#include "server/request/request_fast.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/request/request_build.h"

/* More digits than this may overflow or be "too big" for jansson: its call. */
#define FAST_MAX_DIGITS 10

/* The fields, as bits of what a line has had; the four stop fields in the
 * order their sequences are listed (request_json.h). */
enum {
	SEEN_ID = 1, SEEN_PROMPT = 2, SEEN_MAX_TOKENS = 4, SEEN_INCLUDE_STOP = 8,
	SEEN_STOP_TOKEN = 16, SEEN_STOP_TOKEN_IDS = 32, SEEN_STOP_SEQUENCE = 64,
	SEEN_STOP_SEQUENCES = 128,
};

static const struct {
	const char *name;
	unsigned bit;
	enum stop_field stop;	/* for the stop fields */
} fields[] = {
	{ "id", SEEN_ID, 0 },
	{ "prompt", SEEN_PROMPT, 0 },
	{ "max_tokens", SEEN_MAX_TOKENS, 0 },
	{ "include_stop", SEEN_INCLUDE_STOP, 0 },
	{ "stop_token", SEEN_STOP_TOKEN, STOP_FIELD_TOKEN },
	{ "stop_token_ids", SEEN_STOP_TOKEN_IDS, STOP_FIELD_TOKEN_IDS },
	{ "stop_sequence", SEEN_STOP_SEQUENCE, STOP_FIELD_SEQUENCE },
	{ "stop_sequences", SEEN_STOP_SEQUENCES, STOP_FIELD_SEQUENCES },
};
#define N_FIELDS (sizeof(fields) / sizeof(fields[0]))

struct scan {
	const char *p;
	const char *end;
};

/* A growing array of tokens (the prompt). */
struct u32_list {
	uint32_t *v;
	uint32_t n, cap;
};

static int list_push(struct u32_list *l, uint32_t x)
{
	if (l->n == l->cap) {
		uint32_t cap = l->cap ? 2 * l->cap : 16;
		uint32_t *grown = realloc(l->v, (size_t)cap * sizeof(*grown));

		if (!grown)
			return -ENOMEM;
		l->v = grown;
		l->cap = cap;
	}
	l->v[l->n++] = x;
	return 0;
}

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

/*
 * An array of tokens (each below lim->vocab), appended to out; at most max
 * of them in out.  1, 0 (not the common shape), -ENOMEM.
 */
static int scan_tokens(struct scan *s, const struct request_limits *lim,
		       struct u32_list *out, uint32_t max)
{
	if (!eat(s, '['))
		return 0;
	if (eat(s, ']'))
		return 1;
	do {
		uint64_t t;

		if (!scan_uint_below(s, lim->vocab, &t) || out->n == max)
			return 0;
		if (list_push(out, (uint32_t)t))
			return -ENOMEM;
	} while (eat(s, ','));
	return eat(s, ']') ? 1 : 0;
}

/* The builder's answer as ours: 1 on 0, -ENOMEM, else 0 (too big:
 * jansson's error to write). */
static int built(int rc)
{
	return rc == -ENOMEM ? -ENOMEM : rc ? 0 : 1;
}

/*
 * An array of tokens into field f of b: each a sequence of its own
 * (alone: stop_token_ids), or all one sequence, which may not be empty.
 * 1, 0 (not the common shape), -ENOMEM.
 */
static int scan_stop_array(struct scan *s, const struct request_limits *lim,
			   struct stop_builder *b, enum stop_field f, bool alone)
{
	int rc;

	if (!eat(s, '['))
		return 0;
	if (eat(s, ']'))
		return alone;	/* an empty sequence: jansson's error */
	do {
		uint64_t t;

		if (!scan_uint_below(s, lim->vocab, &t))
			return 0;
		rc = stop_builder_push(b, f, (int32_t)t);
		if (!rc && alone)
			rc = stop_builder_end_seq(b, f);
		if (rc)
			return built(rc);
	} while (eat(s, ','));
	if (!eat(s, ']'))
		return 0;
	return alone ? 1 : built(stop_builder_end_seq(b, f));
}

/*
 * The value of stop field f into b: stop_token one token, stop_token_ids
 * an array of them (each a sequence of one), stop_sequence one sequence,
 * stop_sequences an array of them.  1, 0, -ENOMEM.
 */
static int scan_stop_field(struct scan *s, const struct request_limits *lim,
			   enum stop_field f, struct stop_builder *b)
{
	uint64_t t;
	int rc;

	switch (f) {
	case STOP_FIELD_TOKEN:
		if (!scan_uint_below(s, lim->vocab, &t))
			return 0;
		rc = stop_builder_push(b, f, (int32_t)t);
		return built(rc ? rc : stop_builder_end_seq(b, f));
	case STOP_FIELD_TOKEN_IDS:
		return scan_stop_array(s, lim, b, f, true);
	case STOP_FIELD_SEQUENCE:
		return scan_stop_array(s, lim, b, f, false);
	default:	/* STOP_FIELD_SEQUENCES */
		if (!eat(s, '['))
			return 0;
		if (eat(s, ']'))
			return 1;
		do {
			rc = scan_stop_array(s, lim, b, f, false);
			if (rc != 1)
				return rc;
		} while (eat(s, ','));
		return eat(s, ']') ? 1 : 0;
	}
}

/* true or false, as include_stop. */
static bool scan_bool(struct scan *s, bool *out)
{
	skip_ws(s);
	if (s->end - s->p >= 4 && memcmp(s->p, "true", 4) == 0) {
		s->p += 4;
		*out = true;
		return true;
	}
	if (s->end - s->p >= 5 && memcmp(s->p, "false", 5) == 0) {
		s->p += 5;
		*out = false;
		return true;
	}
	return false;
}

int request_parse_fast(const char *line, size_t len,
		       const struct request_limits *lim, struct request *req)
{
	struct scan s = { line, line + len };
	struct stop_builder stops;
	struct u32_list prompt = { 0 };
	const char *id = NULL;
	char *id_copy = NULL;
	size_t id_len = 0;
	uint64_t max_tokens = REQUEST_DEFAULT_MAX_TOKENS;
	bool include_stop = false;
	unsigned seen = 0;
	int rc = 0;

	if (!eat(&s, '{'))
		return 0;
	stop_builder_init(&stops);
	do {
		const char *key;
		size_t key_len, f = 0;
		unsigned bit;

		if (!scan_plain_string(&s, &key, &key_len) || !eat(&s, ':'))
			goto give_up;
		while (f < N_FIELDS && !key_is(key, key_len, fields[f].name))
			f++;
		if (f == N_FIELDS)
			goto give_up;	/* an unknown field: jansson's error */
		bit = fields[f].bit;
		if (seen & bit)
			goto give_up;	/* a duplicate key: jansson's error */
		seen |= bit;
		if (bit == SEEN_ID) {
			if (!scan_plain_string(&s, &id, &id_len))
				goto give_up;
		} else if (bit == SEEN_PROMPT) {
			rc = scan_tokens(&s, lim, &prompt, lim->max_context);
		} else if (bit == SEEN_MAX_TOKENS) {
			if (!scan_uint_below(&s, (uint64_t)lim->max_context + 1,
					     &max_tokens))
				goto give_up;
		} else if (bit == SEEN_INCLUDE_STOP) {
			if (!scan_bool(&s, &include_stop))
				goto give_up;
		} else {	/* the stop fields, from SEEN_STOP_TOKEN up */
			rc = scan_stop_field(&s, lim, fields[f].stop, &stops);
		}
		if (rc < 0)
			goto give_up;
		if (bit == SEEN_PROMPT || bit >= SEEN_STOP_TOKEN) {
			if (rc != 1)
				goto give_up;
			rc = 0;
		}
	} while (eat(&s, ','));
	if (!eat(&s, '}'))
		goto give_up;
	skip_ws(&s);
	if (s.p != s.end || !(seen & SEEN_PROMPT) ||
	    (!(seen & SEEN_ID) && !lim->id_optional) ||
	    prompt.n + max_tokens > lim->max_context)
		goto give_up;
	if (seen & SEEN_ID) {
		id_copy = strndup(id, id_len);
		if (!id_copy) {
			rc = -ENOMEM;
			goto give_up;
		}
	}
	rc = stop_builder_finish(&stops, req);	/* releases the builder */
	if (rc) {
		rc = rc == -ENOMEM ? -ENOMEM : 0;	/* too big: jansson's */
		goto give_up;
	}
	req->id = id_copy;
	/* tokens are below vocab <= INT32_MAX: the same bits */
	req->prompt = (int32_t *)prompt.v;
	req->n_prompt = prompt.n;
	req->max_tokens = (uint32_t)max_tokens;
	req->include_stop = include_stop;
	return 1;

give_up:
	/* req is untouched (still zeroed for jansson); only -ENOMEM gets
	 * here with rc != 0 */
	free(id_copy);
	free(prompt.v);
	stop_builder_release(&stops);
	return rc;
}
