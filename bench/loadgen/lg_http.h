/*
 * lg_http.h - bin/loadgen's HTTP/1.1 response parser: raw bytes in, the
 * status, the headers loadgen checks and the de-chunked body out, with
 * why an answer is malformed (a protocol error the load generator
 * counts).  Part of bench/loadgen.c, its own concern.
 */
#ifndef DYNBATCH_LG_HTTP_H
#define DYNBATCH_LG_HTTP_H

#include <stdbool.h>
#include <stdint.h>

#include "util/strbuf.h"

/* HTTP/1.1 response parser: consumes raw bytes, yields the body. */
enum http_phase {
	HP_HEAD,
	HP_BODY,		/* Content-Length bytes */
	HP_CHUNK_SIZE,
	HP_CHUNK_DATA,
	HP_CHUNK_END,		/* the CRLF after a chunk's data */
	HP_TRAILER,
	HP_DONE,
};

struct http_resp {
	enum http_phase phase;
	int status;
	bool chunked;
	bool close;		/* the server will close after this answer */
	bool event_stream;	/* Content-Type: text/event-stream */
	bool json;		/* Content-Type: application/json */
	bool has_retry_after;
	uint64_t left;		/* bytes due in the body or chunk */
	struct strbuf body;	/* de-chunked body not yet consumed */
	char err[200];		/* why the answer is wrong */
};

/*
 * Consume what it can of in.  1 the answer is complete, 0 more bytes
 * needed, -1 malformed (r->err says why).
 */
int http_feed(struct http_resp *r, struct strbuf *in);

/* Record why the answer is wrong in r->err; returns -1 for the caller
 * to pass on. */
int resp_fail(struct http_resp *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Ready r for the next answer on the connection (keeps its buffer). */
void http_reset(struct http_resp *r);

#endif /* DYNBATCH_LG_HTTP_H */
