/*
 * http_reader.c - see http_reader.h.
 *
 * http_parser calls back with pieces of the target, header names and
 * values as they arrive (a name may be split across two reads), so names
 * are accumulated in r->field until the first byte of their value, and
 * only the two headers we act on are kept.  A callback that finds a limit
 * exceeded records the status and returns non-zero, which makes
 * http_parser_execute() stop with a callback error; feed() then reports
 * our status instead of the parser's.  The end of a request pauses the
 * parser, so the bytes of a pipelined request stay with the caller.
 */
#include "http_reader.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

enum { HDR_OTHER, HDR_AUTHORIZATION, HDR_EXPECT };

static struct http_reader *reader_of(http_parser *p)
{
	return (struct http_reader *)p->data;
}

static int reader_error(struct http_reader *r, int status, const char *msg)
{
	r->error_status = status;
	snprintf(r->error, sizeof(r->error), "%s", msg);
	return 1;
}

/* Count header bytes; non-zero (with 431 recorded) past the limit. */
static int count_header_bytes(struct http_reader *r, size_t n)
{
	if (n > r->lim.max_header_bytes - r->header_bytes)
		return reader_error(r, 431, "request headers too large");
	r->header_bytes += (uint32_t)n;
	return 0;
}

static int on_url(http_parser *p, const char *at, size_t n)
{
	struct http_reader *r = reader_of(p);

	if (count_header_bytes(r, n))
		return 1;
	return strbuf_append(&r->msg.target, at, n) ?
	       reader_error(r, 500, "out of memory") : 0;
}

static int on_header_field(http_parser *p, const char *at, size_t n)
{
	struct http_reader *r = reader_of(p);

	if (count_header_bytes(r, n))
		return 1;
	if (r->in_value || !r->field.len) {	/* a new header starts */
		r->in_value = false;
		r->field.len = 0;
		if (++r->n_headers > r->lim.max_headers)
			return reader_error(r, 431, "too many request headers");
	}
	return strbuf_append(&r->field, at, n) ?
	       reader_error(r, 500, "out of memory") : 0;
}

static int on_header_value(http_parser *p, const char *at, size_t n)
{
	struct http_reader *r = reader_of(p);
	struct strbuf *dst = NULL;

	if (count_header_bytes(r, n))
		return 1;
	if (!r->in_value) {			/* first piece of this value */
		const char *name = r->field.len ? r->field.data : "";

		r->in_value = true;
		r->cur_header = !strcasecmp(name, "authorization") ? HDR_AUTHORIZATION :
				!strcasecmp(name, "expect") ? HDR_EXPECT : HDR_OTHER;
		if (r->cur_header == HDR_AUTHORIZATION) {
			if (r->auth_seen)	/* even when the first was empty */
				return reader_error(r, 400, "more than one Authorization header");
			r->auth_seen = true;
		}
	}
	if (r->cur_header == HDR_AUTHORIZATION)
		dst = &r->msg.authorization;
	else if (r->cur_header == HDR_EXPECT)
		dst = &r->expect;
	if (dst && strbuf_append(dst, at, n))
		return reader_error(r, 500, "out of memory");
	return 0;
}

/* "Expect: 100-continue" is the one expectation HTTP/1.1 defines. */
static void note_expect(struct http_reader *r)
{
	static const char want[] = "100-continue";

	if (r->expect.len == sizeof(want) - 1 &&
	    !strncasecmp(r->expect.data, want, sizeof(want) - 1))
		r->msg.expect_continue = true;
}

/*
 * Errors here return -1: to this one callback 1 means "no body follows"
 * and 2 "upgrade", not an error.  http_parser has set p->upgrade by now
 * (Upgrade with "Connection: upgrade", or CONNECT); it would end the
 * message at the headers and leave the rest as another protocol.  An
 * Upgrade is an offer a server may ignore (RFC 9110 7.8; `curl --http2`
 * makes one for h2c), so it is ignored: clearing the flag here makes the
 * parser read the message, body included, as plain HTTP/1.1.  CONNECT asks
 * for a tunnel, which we never give: refused, whatever the pieces the
 * request came in.
 */
static int on_headers_complete(http_parser *p)
{
	struct http_reader *r = reader_of(p);

	r->headers_done = true;
	note_expect(r);
	r->msg.method = p->method;
	r->msg.http_minor = p->http_minor;
	r->msg.keep_alive = http_should_keep_alive(p) != 0;
	if (p->method == HTTP_CONNECT) {
		reader_error(r, 400, "CONNECT is not supported");
		return -1;
	}
	p->upgrade = 0;
	if (p->content_length != ULLONG_MAX && p->content_length > r->lim.max_body) {
		reader_error(r, 413, "request body too large");
		return -1;
	}
	return 0;
}

static int on_body(http_parser *p, const char *at, size_t n)
{
	struct http_reader *r = reader_of(p);

	if (n > r->lim.max_body - r->msg.body.len)
		return reader_error(r, 413, "request body too large");
	return strbuf_append(&r->msg.body, at, n) ?
	       reader_error(r, 500, "out of memory") : 0;
}

static int on_message_complete(http_parser *p)
{
	struct http_reader *r = reader_of(p);

	r->done = true;
	http_parser_pause(p, 1);
	return 0;
}

static const http_parser_settings reader_settings = {
	.on_url = on_url,
	.on_header_field = on_header_field,
	.on_header_value = on_header_value,
	.on_headers_complete = on_headers_complete,
	.on_body = on_body,
	.on_message_complete = on_message_complete,
};

void http_reader_init(struct http_reader *r, const struct http_limits *lim)
{
	memset(r, 0, sizeof(*r));
	r->lim = *lim;
	http_reader_reset(r);
}

void http_reader_reset(struct http_reader *r)
{
	struct http_message *m = &r->msg;

	http_parser_init(&r->parser, HTTP_REQUEST);
	r->parser.data = r;
	m->target.len = m->body.len = m->authorization.len = 0;
	m->method = 0;
	m->http_minor = 0;
	m->keep_alive = false;
	m->expect_continue = false;
	r->field.len = r->expect.len = 0;
	r->header_bytes = r->n_headers = 0;
	r->cur_header = HDR_OTHER;
	r->in_value = r->headers_done = r->headers_reported = r->done = false;
	r->auth_seen = false;
	r->error_status = 0;
	r->error[0] = '\0';
}

void http_reader_release(struct http_reader *r)
{
	strbuf_release(&r->msg.target);
	strbuf_release(&r->msg.body);
	strbuf_release(&r->msg.authorization);
	strbuf_release(&r->field);
	strbuf_release(&r->expect);
}

enum http_read_status http_reader_feed(struct http_reader *r, const char *data,
				       size_t len, size_t *consumed)
{
	enum http_errno err;
	size_t n;

	*consumed = 0;
	if (r->error_status)
		return HTTP_READ_ERROR;
	if (r->done)
		return HTTP_READ_DONE;
	if (!len)
		return HTTP_READ_MORE;
	n = http_parser_execute(&r->parser, &reader_settings, data, len);
	*consumed = n;
	if (r->error_status)
		return HTTP_READ_ERROR;
	err = HTTP_PARSER_ERRNO(&r->parser);
	if (err != HPE_OK && err != HPE_PAUSED) {
		snprintf(r->error, sizeof(r->error), "malformed HTTP request: %s",
			 http_errno_description(err));
		r->error_status = 400;
		return HTTP_READ_ERROR;
	}
	if (r->done)
		return HTTP_READ_DONE;
	if (r->headers_done && !r->headers_reported) {
		r->headers_reported = true;
		return HTTP_READ_HEADERS;
	}
	return HTTP_READ_MORE;
}
