/*
 * lg_http.c - bin/loadgen's HTTP/1.1 response parser (lg_http.h): the
 * status line and headers, Content-Length and chunked bodies, trailers.
 */
#include "bench/loadgen/lg_http.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/parse_num.h"

#define LG_MAX_HEAD 16384		/* a longer response head is garbage */

int resp_fail(struct http_resp *r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->err, sizeof(r->err), fmt, ap);
	va_end(ap);
	return -1;
}

static bool span_is(const char *s, size_t n, const char *lit)
{
	return n == strlen(lit) && strncasecmp(s, lit, n) == 0;
}

static bool span_starts(const char *s, size_t n, const char *lit)
{
	return n >= strlen(lit) && strncasecmp(s, lit, strlen(lit)) == 0;
}

/* One "Name: value" line of the head. */
static int http_header(struct http_resp *r, const char *s, size_t n,
		       bool *has_len, uint64_t *len)
{
	const char *colon = memchr(s, ':', n), *v;
	size_t nlen, vlen;
	uint64_t x;

	if (!colon)
		return resp_fail(r, "header line without ':'");
	nlen = (size_t)(colon - s);
	v = colon + 1;
	vlen = n - nlen - 1;
	while (vlen && (*v == ' ' || *v == '\t'))
		v++, vlen--;
	while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
		vlen--;
	if (span_is(s, nlen, "content-length")) {
		if (parse_u64_n(v, vlen, 0, 1ull << 40, len) ||
		    *has_len)
			return resp_fail(r, "bad or repeated Content-Length");
		*has_len = true;
	} else if (span_is(s, nlen, "transfer-encoding")) {
		if (!span_is(v, vlen, "chunked"))
			return resp_fail(r, "Transfer-Encoding '%.*s'",
					 (int)vlen, v);
		r->chunked = true;
	} else if (span_is(s, nlen, "connection")) {
		if (span_is(v, vlen, "close"))
			r->close = true;
	} else if (span_is(s, nlen, "content-type")) {
		r->event_stream = span_starts(v, vlen, "text/event-stream");
		r->json = span_starts(v, vlen, "application/json");
	} else if (span_is(s, nlen, "retry-after")) {
		r->has_retry_after = !parse_u64_n(v, vlen, 0, UINT32_MAX, &x);
	}
	return 0;
}

/* Parse the head s[0..n) (without the blank line); set up the body. */
static int http_head(struct http_resp *r, const char *s, size_t n)
{
	const char *end = s + n, *eol;
	bool has_len = false;
	uint64_t len = 0;

	if (n < 12 || memcmp(s, "HTTP/1.", 7) || s[8] != ' ' ||
	    s[9] < '1' || s[9] > '5' || s[10] < '0' || s[10] > '9' ||
	    s[11] < '0' || s[11] > '9')
		return resp_fail(r, "bad status line '%.40s'", s);
	r->status = (s[9] - '0') * 100 + (s[10] - '0') * 10 + (s[11] - '0');
	r->close = s[7] == '0';	/* HTTP/1.0 closes unless told otherwise */
	for (s = memchr(s, '\n', n); s && s + 1 < end; s = eol) {
		s++;
		eol = memchr(s, '\n', (size_t)(end - s));
		if (!eol)
			eol = end;
		if (http_header(r, s, (size_t)(eol - s) -
				(eol > s && eol[-1] == '\r'), &has_len, &len))
			return -1;
	}
	if (r->chunked) {
		r->phase = HP_CHUNK_SIZE;
	} else if (has_len) {
		r->left = len;
		r->phase = len ? HP_BODY : HP_DONE;
	} else {
		/* Read-until-close would hide a truncated answer. */
		return resp_fail(r, "status %d with neither Content-Length nor chunked",
				 r->status);
	}
	return 0;
}

/*
 * The CRLF-terminated line at the start of in: 1 (its length, CRLF not
 * counted, in *n), 0 more bytes needed, -1 it ends in a bare LF.
 */
static int take_line(const struct strbuf *in, size_t *n)
{
	const char *nl = in->len ? memchr(in->data, '\n', in->len) : NULL;

	if (!nl)
		return 0;
	if (nl == in->data || nl[-1] != '\r')
		return -1;
	*n = (size_t)(nl - in->data) - 1;
	return 1;
}

/* Move up to r->left body bytes from in to the body. */
static int http_take_body(struct http_resp *r, struct strbuf *in)
{
	size_t n = in->len < r->left ? in->len : (size_t)r->left;

	if (strbuf_append(&r->body, in->data, n))
		return resp_fail(r, "out of memory");
	strbuf_consume(in, n);
	r->left -= n;
	return 0;
}

/*
 * Consume what it can of in.  1 the answer is complete, 0 more bytes
 * needed, -1 framing error (r->err says which).
 */
int http_feed(struct http_resp *r, struct strbuf *in)
{
	const char *s = in->data, *hend;
	size_t n = 0, digits;
	int got;

	while (r->phase != HP_DONE && in->len) {
		switch (r->phase) {
		case HP_HEAD:
			hend = memmem(in->data, in->len, "\r\n\r\n", 4);
			if (!hend)
				return in->len > LG_MAX_HEAD ?
				       resp_fail(r, "response head too long") : 0;
			if (http_head(r, in->data, (size_t)(hend - in->data)))
				return -1;
			strbuf_consume(in, (size_t)(hend - in->data) + 4);
			break;
		case HP_BODY:
		case HP_CHUNK_DATA:
			if (http_take_body(r, in))
				return -1;
			if (!r->left)
				r->phase = r->phase == HP_BODY ? HP_DONE : HP_CHUNK_END;
			break;
		case HP_CHUNK_SIZE:
		case HP_TRAILER:
			got = take_line(in, &n);
			if (got < 0)
				return resp_fail(r, "bare LF in chunked framing");
			if (!got)
				return in->len > 1024 ?
				       resp_fail(r, "chunk line too long") : 0;
			s = in->data;
			/* The size, then maybe ";ext", which we ignore. */
			digits = strspn(s, "0123456789abcdefABCDEF");
			if (r->phase == HP_TRAILER) {
				r->phase = n ? HP_TRAILER : HP_DONE;
			} else if (!digits || digits > 12 ||
				   (digits < n && s[digits] != ';')) {
				return resp_fail(r, "bad chunk size line '%.*s'",
						 (int)(n < 40 ? n : 40), s);
			} else {
				r->left = strtoull(s, NULL, 16);
				r->phase = r->left ? HP_CHUNK_DATA : HP_TRAILER;
			}
			strbuf_consume(in, n + 2);
			break;
		case HP_CHUNK_END:
			if (in->len < 2)
				return 0;
			if (memcmp(in->data, "\r\n", 2))
				return resp_fail(r, "chunk data not followed by CRLF");
			strbuf_consume(in, 2);
			r->phase = HP_CHUNK_SIZE;
			break;
		case HP_DONE:
			break;
		}
	}
	return r->phase == HP_DONE;
}

void http_reset(struct http_resp *r)
{
	struct strbuf body = r->body;

	strbuf_consume(&body, body.len);
	memset(r, 0, sizeof(*r));
	r->body = body;		/* keep the allocation for the next answer */
}

