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
#include "server/http/http_reader.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

enum { HDR_OTHER, HDR_AUTHORIZATION, HDR_EXPECT, HDR_TRANSFER_ENCODING,
       HDR_ORIGIN, HDR_ACR_METHOD, HDR_ACR_HEADERS };

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

/*
 * Count the bytes of trailer fields (the head's are counted by scan_head(),
 * all of them); non-zero (with 431 recorded) past the limit.
 */
static int count_trailer_bytes(struct http_reader *r, size_t n)
{
	if (!r->headers_done)
		return 0;
	if (n > r->lim.max_header_bytes - r->header_bytes)
		return reader_error(r, 431, "request headers too large");
	r->header_bytes += (uint32_t)n;
	return 0;
}

static int on_url(http_parser *p, const char *at, size_t n)
{
	struct http_reader *r = reader_of(p);

	return strbuf_append(&r->msg.target, at, n) ?
	       reader_error(r, 500, "out of memory") : 0;
}

static int on_header_field(http_parser *p, const char *at, size_t n)
{
	struct http_reader *r = reader_of(p);

	if (count_trailer_bytes(r, n))
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

/* Which field the name just read is; a trailer's is none we act on. */
static int header_kind(const struct http_reader *r)
{
	const char *name = r->field.len ? r->field.data : "";

	if (r->headers_done)
		return HDR_OTHER;
	return !strcasecmp(name, "authorization") ? HDR_AUTHORIZATION :
	       !strcasecmp(name, "expect") ? HDR_EXPECT :
	       !strcasecmp(name, "transfer-encoding") ? HDR_TRANSFER_ENCODING :
	       !strcasecmp(name, "origin") ? HDR_ORIGIN :
	       !strcasecmp(name, "access-control-request-method") ? HDR_ACR_METHOD :
	       !strcasecmp(name, "access-control-request-headers") ? HDR_ACR_HEADERS :
	       HDR_OTHER;
}

static int on_header_value(http_parser *p, const char *at, size_t n)
{
	struct http_reader *r = reader_of(p);
	struct strbuf *dst = NULL;

	if (count_trailer_bytes(r, n))
		return 1;
	if (!r->in_value) {			/* first piece of this value */
		r->in_value = true;
		r->cur_header = header_kind(r);
		if (r->cur_header == HDR_AUTHORIZATION) {
			if (r->auth_seen)	/* even when the first was empty */
				return reader_error(r, 400, "more than one Authorization header");
			r->auth_seen = true;
		}
		/* Two fields are one comma-joined list (RFC 9110 5.3). */
		if (r->cur_header == HDR_TRANSFER_ENCODING && r->te_seen &&
		    strbuf_append(&r->transfer_encoding, ",", 1))
			return reader_error(r, 500, "out of memory");
		r->te_seen |= r->cur_header == HDR_TRANSFER_ENCODING;
		/* CORS (http_cors.h): a second field joins the first with a
		 * comma, which then matches no origin and no method */
		dst = r->cur_header == HDR_ORIGIN ? &r->msg.origin :
		      r->cur_header == HDR_ACR_METHOD ? &r->msg.acr_method :
		      r->cur_header == HDR_ACR_HEADERS ? &r->msg.acr_headers : NULL;
		if (dst && dst->len && strbuf_append(dst, ",", 1))
			return reader_error(r, 500, "out of memory");
		if (dst)
			r->msg.cors_seen |= 1u << (r->cur_header - HDR_ORIGIN);
		dst = NULL;
	}
	if (r->cur_header == HDR_AUTHORIZATION)
		dst = &r->msg.authorization;
	else if (r->cur_header == HDR_EXPECT)
		dst = &r->expect;
	else if (r->cur_header == HDR_TRANSFER_ENCODING)
		dst = &r->transfer_encoding;
	else if (r->cur_header == HDR_ORIGIN)
		dst = &r->msg.origin;
	else if (r->cur_header == HDR_ACR_METHOD)
		dst = &r->msg.acr_method;
	else if (r->cur_header == HDR_ACR_HEADERS)
		dst = &r->msg.acr_headers;
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

/* The one transfer coding we take: exactly "chunked", OWS around it. */
static bool te_is_chunked(const struct strbuf *te)
{
	static const char want[] = "chunked";
	const char *v = te->len ? te->data : "";
	size_t n = te->len;

	while (n && (*v == ' ' || *v == '\t')) {
		v++;
		n--;
	}
	while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
		n--;
	return n == sizeof(want) - 1 && !strncasecmp(v, want, n);
}

/*
 * What http_parser lets through and we refuse, now that the head is read:
 * HTTP versions other than 1.0 and 1.1 (505), and a Transfer-Encoding that
 * is not a single "chunked" (gzip, "gzip, chunked", two fields) or that
 * comes in HTTP/1.0, which has none (RFC 9112 6.1): a proxy in front could
 * frame such a body otherwise.  0, or -1 with the error recorded.
 */
static int check_head(struct http_reader *r, const http_parser *p)
{
	if (p->http_major != 1 || p->http_minor > 1) {
		reader_error(r, 505, "HTTP version not supported: this server "
			     "speaks HTTP/1.1 and HTTP/1.0");
		return -1;
	}
	if (r->te_seen && p->http_minor == 0) {
		reader_error(r, 400, "malformed HTTP request: Transfer-Encoding "
			     "in an HTTP/1.0 request");
		return -1;
	}
	if (r->te_seen && !te_is_chunked(&r->transfer_encoding)) {
		reader_error(r, 400, "malformed HTTP request: the only "
			     "Transfer-Encoding supported is chunked");
		return -1;
	}
	return 0;
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
	r->field.len = 0;	/* a trailer's name starts afresh */
	r->in_value = false;
	note_expect(r);
	r->msg.method = p->method;
	r->msg.http_minor = p->http_minor;
	r->msg.keep_alive = http_should_keep_alive(p) != 0;
	if (check_head(r, p))
		return -1;
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
	m->origin.len = m->acr_method.len = m->acr_headers.len = 0;
	m->cors_seen = 0;
	m->method = 0;
	m->http_minor = 0;
	m->keep_alive = false;
	m->expect_continue = false;
	r->field.len = r->expect.len = r->transfer_encoding.len = 0;
	r->te_seen = false;
	r->scan = HEAD_SCAN_START;
	r->scan_cr = false;
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
	strbuf_release(&r->msg.origin);
	strbuf_release(&r->msg.acr_method);
	strbuf_release(&r->msg.acr_headers);
	strbuf_release(&r->field);
	strbuf_release(&r->expect);
	strbuf_release(&r->transfer_encoding);
}

/*
 * Scan the head (leading empty lines, request line, header lines, the
 * empty line) byte by byte before http_parser reads it, for what it lets
 * pass: a header line that starts with whitespace (obs-fold, or whitespace
 * before the first field), whitespace between a name and its colon, and a
 * bare CR (RFC 9112 5.1, 5.2, 2.2 let a server reject each).  Every byte
 * counts against max_header_bytes, whitespace and empty lines included,
 * so padding cannot get around it.  Lines end at LF or CR LF, as
 * http_parser ends them once bare CRs are refused (it takes a lone CR for
 * an LF), so the two agree on where the head ends, however the bytes are
 * split.  Returns the bytes scanned: len, or fewer with an error recorded.
 */
static size_t scan_head(struct http_reader *r, const char *data, size_t len)
{
	size_t i;

	for (i = 0; i < len && r->scan != HEAD_SCAN_DONE; i++) {
		char ch = data[i];

		if (r->header_bytes >= r->lim.max_header_bytes) {
			reader_error(r, 431, "request headers too large");
			return i;
		}
		r->header_bytes++;
		if (r->scan_cr && ch != '\n') {
			reader_error(r, 400, "malformed HTTP request: a CR not "
				     "followed by LF in the request head");
			return i;
		}
		r->scan_cr = ch == '\r';
		if (ch == '\r')
			continue;
		switch (r->scan) {
		case HEAD_SCAN_START:
			if (ch != '\n')
				r->scan = HEAD_SCAN_REQUEST_LINE;
			break;
		case HEAD_SCAN_REQUEST_LINE:
		case HEAD_SCAN_VALUE:
			if (ch == '\n')
				r->scan = HEAD_SCAN_LINE_START;
			break;
		case HEAD_SCAN_LINE_START:
			if (ch == ' ' || ch == '\t') {
				reader_error(r, 400, "malformed HTTP request: a header "
					     "line starts with whitespace (obs-fold)");
				return i;
			}
			r->scan = ch == '\n' ? HEAD_SCAN_DONE :
				  ch == ':' ? HEAD_SCAN_VALUE : HEAD_SCAN_NAME;
			break;
		case HEAD_SCAN_NAME:
			if (ch == ' ' || ch == '\t') {
				reader_error(r, 400, "malformed HTTP request: whitespace "
					     "between a header name and its colon");
				return i;
			}
			if (ch == ':')
				r->scan = HEAD_SCAN_VALUE;
			else if (ch == '\n')	/* no colon: http_parser says so */
				r->scan = HEAD_SCAN_LINE_START;
			break;
		case HEAD_SCAN_DONE:
			break;
		}
	}
	return i;
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
	n = scan_head(r, data, len);
	if (r->error_status) {
		*consumed = n;
		return HTTP_READ_ERROR;
	}
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
