/*
 * http_reader.h - reads HTTP/1.1 requests off a connection's byte stream.
 *
 * The framing is Node's http_parser (Debian libhttp-parser-dev), never our
 * own: this file only collects what the server needs (method, target,
 * the Authorization and Expect headers, keep-alive, the body) and enforces
 * the limits that keep one client from holding unbounded memory: total
 * header bytes, header count and body size.  It also refuses what RFC 9112
 * lets a server refuse and http_parser lets through, as two parsers that
 * disagree on such a request is how requests are smuggled past a proxy:
 * whitespace before a header's colon or at the start of a header line
 * (obs-fold), a Transfer-Encoding other than a single "chunked" (or any in
 * HTTP/1.0), and HTTP versions other than 1.0 and 1.1 (505).  No I/O
 * happens here, so the reader is unit-tested and fuzzed on plain byte
 * strings.
 *
 * One message at a time: the reader stops at the end of a request (bytes
 * of a pipelined next request stay unconsumed) until http_reader_reset().
 */
#ifndef DYNBATCH_HTTP_READER_H
#define DYNBATCH_HTTP_READER_H

#include <http_parser.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/strbuf.h"

struct http_limits {
	uint32_t max_header_bytes;	/* request line + header fields, total */
	uint32_t max_headers;		/* header fields */
	uint32_t max_body;		/* body bytes */
};

/* What the server looks at in one request. */
#define HTTP_SEEN_ORIGIN 1u
#define HTTP_SEEN_ACR_METHOD 2u
#define HTTP_SEEN_ACR_HEADERS 4u

struct http_message {
	unsigned method;		/* enum http_method */
	struct strbuf target;		/* request target ("/v1/completions?x") */
	struct strbuf body;
	struct strbuf authorization;	/* Authorization value, if sent */
	/* CORS: Origin, Access-Control-Request-Method and -Headers values
	 * (several fields of one: comma-joined); cors_seen bit 0, 1, 2 says
	 * which were sent (an empty one too) */
	struct strbuf origin;
	struct strbuf acr_method;
	struct strbuf acr_headers;
	unsigned cors_seen;		/* HTTP_SEEN_* */
	unsigned http_minor;		/* HTTP/1.x: 0 or 1 */
	bool keep_alive;		/* the client allows another request */
	bool expect_continue;		/* "Expect: 100-continue" was sent */
};

enum http_read_status {
	HTTP_READ_MORE,		/* the request is not complete yet */
	HTTP_READ_HEADERS,	/* headers complete, body still coming */
	HTTP_READ_DONE,		/* a complete request is in msg */
	HTTP_READ_ERROR,	/* bad or over-limit: answer error_status, close */
};

/* Where the raw scan of a request's header section is (http_reader.c). */
enum http_head_scan {
	HEAD_SCAN_START,	/* empty lines before the request line */
	HEAD_SCAN_REQUEST_LINE,
	HEAD_SCAN_LINE_START,	/* first byte of a header line, or the end */
	HEAD_SCAN_NAME,
	HEAD_SCAN_VALUE,
	HEAD_SCAN_DONE,		/* the body (or the trailers) follows */
};

struct http_reader {
	http_parser parser;
	struct http_limits lim;
	struct http_message msg;
	enum http_head_scan scan;
	bool scan_cr;			/* a CR was scanned: LF must follow */
	uint32_t header_bytes;		/* every byte of the head, whitespace
					 * included (then the trailers' fields),
					 * against lim.max_header_bytes */
	uint32_t n_headers;
	int cur_header;			/* which header the value being read is */
	struct strbuf field;		/* the field name being read */
	struct strbuf expect;		/* the Expect value, if sent */
	struct strbuf transfer_encoding;	/* its values, comma-joined */
	bool te_seen;			/* a Transfer-Encoding field, even empty */
	bool in_value;			/* field name complete, value being read */
	bool auth_seen;			/* an Authorization field, even empty */
	bool headers_done;
	bool headers_reported;		/* HTTP_READ_HEADERS returned once */
	bool done;
	int error_status;		/* 400, 413, 431, ... when status is ERROR */
	char error[128];		/* what is wrong, for the error body */
};

void http_reader_init(struct http_reader *r, const struct http_limits *lim);
/* Forget the current message; ready for the next one on the connection. */
void http_reader_reset(struct http_reader *r);
void http_reader_release(struct http_reader *r);

/*
 * Feed len bytes.  *consumed is how many were used: all of them, except
 * after the end of a request (DONE) or an error.  HTTP_READ_HEADERS is
 * returned once per request, when the headers are complete and a body is
 * still expected (the moment to answer "100 Continue" or reject early).
 */
enum http_read_status http_reader_feed(struct http_reader *r, const char *data,
				       size_t len, size_t *consumed);

#endif /* DYNBATCH_HTTP_READER_H */
