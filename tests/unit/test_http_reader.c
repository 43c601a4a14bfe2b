/*
 * test_http_reader.c - cmocka tests of the HTTP/1.1 request reader
 * (server/http/http_reader.c).
 *
 * Each rule gets its own case: what a request reads as (method, target,
 * body, Authorization, keep-alive, 100-continue), where the reader stops
 * (end of a request, so a pipelined one stays with the caller) and which
 * status each limit or malformation answers.  Every stream is read by
 * read_stream(), which behaves as the server will: bytes arrive in pieces,
 * each DONE is followed by http_reader_reset() and the rest is fed again.
 * Reading the same stream in one piece, byte by byte and in random pieces
 * must give the same messages; a randomized test also builds random valid
 * pipelined requests with a model of what each should read as.  Seeds are
 * printed and SEED= replays them (test_rng.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/http/http_reader.h"
#include "util/strbuf.h"
#include "tests/unit/test_rng.h"

static const struct http_limits lim_default = {
	.max_header_bytes = 8192,
	.max_headers = 64,
	.max_body = 1 << 20,
};

/* ------------------------------------------------------------------------
 * Reading a stream the way the server does
 */

#define MAX_MSGS 32

/* One request as read: a copy of r->msg at DONE. */
struct msg_copy {
	unsigned method;
	struct strbuf target;
	struct strbuf body;
	struct strbuf auth;
	bool keep_alive;
	bool expect_continue;
	unsigned n_headers_status;	/* HTTP_READ_HEADERS returns for it */
};

struct outcome {
	struct msg_copy msgs[MAX_MSGS];
	size_t n_msgs;
	bool error;		/* the stream ended in HTTP_READ_ERROR */
	int error_status;
	char error_msg[128];
	size_t used;		/* bytes consumed in all */
};

enum piece_mode { PIECE_ALL, PIECE_BYTE, PIECE_SMALL, PIECE_RANDOM };

/* How many more bytes arrive (at least one, at most left). */
static size_t next_piece(enum piece_mode mode, struct rng *rng, size_t left)
{
	size_t n;

	switch (mode) {
	case PIECE_ALL:
		n = left;
		break;
	case PIECE_BYTE:
		n = 1;
		break;
	case PIECE_SMALL:
		n = 1 + rng_below(rng, 8);
		break;
	default:
		n = 1 + rng_below(rng, (uint32_t)(left < 256 ? left : 256));
		break;
	}
	return n < left ? n : left;
}

static void sb_copy(struct strbuf *dst, const struct strbuf *src)
{
	dst->len = 0;
	if (src->len)
		assert_int_equal(strbuf_append(dst, src->data, src->len), 0);
}

static void copy_msg(struct msg_copy *c, const struct http_message *m,
		     unsigned n_headers_status)
{
	c->method = m->method;
	sb_copy(&c->target, &m->target);
	sb_copy(&c->body, &m->body);
	sb_copy(&c->auth, &m->authorization);
	c->keep_alive = m->keep_alive;
	c->expect_continue = m->expect_continue;
	c->n_headers_status = n_headers_status;
}

static void outcome_release(struct outcome *o)
{
	for (size_t i = 0; i < MAX_MSGS; i++) {
		strbuf_release(&o->msgs[i].target);
		strbuf_release(&o->msgs[i].body);
		strbuf_release(&o->msgs[i].auth);
	}
	memset(o, 0, sizeof(*o));
}

/*
 * Read data[0..len) with lim, the bytes arriving in pieces chosen by mode,
 * until the end or an error.  MORE and HEADERS must consume all they are
 * given; DONE is followed by a reset and the unconsumed rest is fed again.
 */
static void read_stream(const char *data, size_t len,
			const struct http_limits *lim, enum piece_mode mode,
			struct rng *rng, struct outcome *out)
{
	struct http_reader r;
	size_t off = 0, avail = 0, used;
	unsigned n_hdr = 0;
	enum http_read_status st;

	memset(out, 0, sizeof(*out));
	http_reader_init(&r, lim);
	while (avail < len && !out->error) {
		avail += next_piece(mode, rng, len - avail);
		for (;;) {
			used = SIZE_MAX;
			st = http_reader_feed(&r, data + off, avail - off, &used);
			assert_true(used <= avail - off);
			off += used;
			if (st == HTTP_READ_DONE) {
				assert_true(out->n_msgs < MAX_MSGS);
				assert_true(n_hdr <= 1);
				copy_msg(&out->msgs[out->n_msgs++], &r.msg, n_hdr);
				n_hdr = 0;
				http_reader_reset(&r);
				continue;
			}
			if (st == HTTP_READ_ERROR) {
				out->error = true;
				out->error_status = r.error_status;
				snprintf(out->error_msg, sizeof(out->error_msg),
					 "%s", r.error);
				assert_true(r.error_status >= 400);
				assert_true(r.error[0] != '\0');
				break;
			}
			assert_true(st == HTTP_READ_MORE || st == HTTP_READ_HEADERS);
			assert_int_equal(off, avail);
			n_hdr += st == HTTP_READ_HEADERS;
			break;
		}
	}
	out->used = off;
	http_reader_release(&r);
}

static void read_str(const char *s, const struct http_limits *lim,
		     struct outcome *out)
{
	read_stream(s, strlen(s), lim, PIECE_ALL, NULL, out);
}

static bool sb_equal(const struct strbuf *a, const struct strbuf *b)
{
	return a->len == b->len && (!a->len || !memcmp(a->data, b->data, a->len));
}

static bool sb_is(const struct strbuf *a, const char *s)
{
	size_t n = strlen(s);

	return a->len == n && (!n || !memcmp(a->data, s, n));
}

/* Same messages, same verdict; the HEADERS count depends on the pieces. */
static bool outcome_equal(const struct outcome *a, const struct outcome *b)
{
	if (a->n_msgs != b->n_msgs || a->error != b->error ||
	    a->error_status != b->error_status)
		return false;
	if (!a->error && a->used != b->used)
		return false;
	for (size_t i = 0; i < a->n_msgs; i++) {
		const struct msg_copy *x = &a->msgs[i], *y = &b->msgs[i];

		if (x->method != y->method || !sb_equal(&x->target, &y->target) ||
		    !sb_equal(&x->body, &y->body) || !sb_equal(&x->auth, &y->auth) ||
		    x->keep_alive != y->keep_alive ||
		    x->expect_continue != y->expect_continue)
			return false;
	}
	return true;
}

static void print_outcome(const char *name, const struct outcome *o)
{
	print_message("%s: %zu messages, used %zu, error %d (%d %s)\n", name,
		      o->n_msgs, o->used, o->error, o->error_status, o->error_msg);
	for (size_t i = 0; i < o->n_msgs; i++)
		print_message("  [%zu] method %u target '%.*s' body %zu bytes "
			      "auth '%.*s' keep_alive %d expect %d\n", i,
			      o->msgs[i].method, (int)o->msgs[i].target.len,
			      o->msgs[i].target.data ? o->msgs[i].target.data : "",
			      o->msgs[i].body.len, (int)o->msgs[i].auth.len,
			      o->msgs[i].auth.data ? o->msgs[i].auth.data : "",
			      o->msgs[i].keep_alive, o->msgs[i].expect_continue);
}

/* One request that must read as DONE, all bytes used, no pipelined rest. */
static void read_one(const char *s, const struct http_limits *lim,
		     struct outcome *out)
{
	read_str(s, lim, out);
	if (out->error || out->n_msgs != 1)
		print_outcome("read_one", out);
	assert_false(out->error);
	assert_int_equal(out->n_msgs, 1);
	assert_int_equal(out->used, strlen(s));
}

/* A stream that must end in an error with this status. */
static void expect_error(const char *s, const struct http_limits *lim,
			 int status)
{
	struct outcome o;

	read_str(s, lim, &o);
	if (!o.error || o.error_status != status) {
		print_outcome("expect_error", &o);
		fail_msg("wanted status %d for '%s'", status, s);
	}
	outcome_release(&o);
}

/* ------------------------------------------------------------------------
 * Plain requests
 */

static void test_simple_get(void **state)
{
	static const char req[] =
		"GET /health HTTP/1.1\r\nHost: localhost:8000\r\n"
		"User-Agent: test\r\nAccept: */*\r\n\r\n";
	struct http_reader r;
	size_t used;

	http_reader_init(&r, &lim_default);
	assert_int_equal(http_reader_feed(&r, req, strlen(req), &used),
			 HTTP_READ_DONE);
	assert_int_equal(used, strlen(req));
	assert_int_equal(r.msg.method, HTTP_GET);
	assert_true(sb_is(&r.msg.target, "/health"));
	assert_int_equal(r.msg.body.len, 0);
	assert_int_equal(r.msg.authorization.len, 0);
	assert_true(r.msg.keep_alive);
	assert_false(r.msg.expect_continue);
	assert_int_equal(r.error_status, 0);

	/* Until reset, DONE again and nothing more is taken. */
	assert_int_equal(http_reader_feed(&r, "GET", 3, &used), HTTP_READ_DONE);
	assert_int_equal(used, 0);

	/* An empty feed is no progress. */
	http_reader_reset(&r);
	assert_int_equal(http_reader_feed(&r, "", 0, &used), HTTP_READ_MORE);
	assert_int_equal(used, 0);
	assert_int_equal(r.msg.target.len, 0);
	http_reader_release(&r);
	http_reader_release(&r);	/* twice is fine */
}

static void test_post_content_length(void **state)
{
	static const char body[] = "{\"prompt\":[1,2,3],\"max_tokens\":4}";
	char req[512];
	struct outcome o;

	snprintf(req, sizeof(req),
		 "POST /v1/completions?x=1 HTTP/1.1\r\nHost: h\r\n"
		 "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
		 strlen(body), body);
	read_one(req, &lim_default, &o);
	assert_int_equal(o.msgs[0].method, HTTP_POST);
	assert_true(sb_is(&o.msgs[0].target, "/v1/completions?x=1"));
	assert_true(sb_is(&o.msgs[0].body, body));
	assert_true(o.msgs[0].keep_alive);
	outcome_release(&o);

	/* Content-Length: 0 is a complete request at the end of the headers. */
	read_one("POST /v1/completions HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
		 &lim_default, &o);
	assert_int_equal(o.msgs[0].body.len, 0);
	assert_int_equal(o.msgs[0].n_headers_status, 0);
	outcome_release(&o);
}

/* A body with every byte value, NUL and CR LF included, comes through. */
static void test_binary_body(void **state)
{
	static const char head[] = "PUT /x HTTP/1.1\r\nContent-Length: 256\r\n\r\n";
	char req[sizeof(head) - 1 + 256];
	struct outcome o;

	memcpy(req, head, sizeof(head) - 1);
	for (int i = 0; i < 256; i++)
		req[sizeof(head) - 1 + i] = (char)i;
	read_stream(req, sizeof(req), &lim_default, PIECE_ALL, NULL, &o);
	assert_false(o.error);
	assert_int_equal(o.n_msgs, 1);
	assert_int_equal(o.msgs[0].method, HTTP_PUT);
	assert_int_equal(o.msgs[0].body.len, 256);
	assert_memory_equal(o.msgs[0].body.data, req + sizeof(head) - 1, 256);
	outcome_release(&o);
}

static void test_chunked(void **state)
{
	struct outcome o;

	/* Chunk sizes in either case, an extension, a trailer. */
	read_one("POST /v1/completions HTTP/1.1\r\nHost: h\r\n"
		 "Transfer-Encoding: chunked\r\n\r\n"
		 "5\r\n{\"pro\r\n"
		 "a;name=value\r\nmpt\":[1,2]\r\n"
		 "B\r\n,\"stream\":1\r\n"
		 "1\r\n}\r\n"
		 "0\r\nX-Trailer: t\r\n\r\n", &lim_default, &o);
	assert_true(sb_is(&o.msgs[0].body, "{\"prompt\":[1,2],\"stream\":1}"));
	assert_int_equal(o.msgs[0].method, HTTP_POST);
	outcome_release(&o);

	/* An empty chunked body. */
	read_one("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		 &lim_default, &o);
	assert_int_equal(o.msgs[0].body.len, 0);
	outcome_release(&o);

	/* A bad chunk size. */
	expect_error("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
		     "zz\r\nabc\r\n0\r\n\r\n", &lim_default, 400);
}

/* ------------------------------------------------------------------------
 * Pieces: one at a time, byte by byte, random splits
 */

static const char *const split_streams[] = {
	"POST /v1/completions HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer k-1\r\n"
	"Content-Length: 27\r\n\r\n{\"prompt\":[1],\"stream\":true}",
	"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
	"expect: 100-continue\r\n\r\n"
	"3\r\nabc\r\n10;x=y\r\n0123456789abcdef\r\n0\r\nX-T: 1\r\n\r\n",
	/* Pipelined: a GET, a POST, a chunked POST with Connection: close. */
	"GET /health HTTP/1.1\r\nHost: h\r\n\r\n"
	"POST /a HTTP/1.1\r\nContent-Length: 5\r\nAUTHORIZATION: Basic eDp5\r\n\r\nhello"
	"POST /b HTTP/1.1\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
	"2\r\nhi\r\n0\r\n\r\n",
	/* Version 1.0, an empty header value, bare LF line ends. */
	"GET /old HTTP/1.0\nX-Lf: a\nX-Empty:\r\n\r\n"
	"GET /ka HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
	/* Errors: over max_body (after a complete request), malformed. */
	"GET / HTTP/1.1\r\n\r\nPOST / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\nxx",
	"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nHost x\r\n\r\n",
	"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc",
};

#define SPLIT_ROUNDS 300

static void test_splits_agree(void **state)
{
	struct http_limits lim = lim_default;
	struct rng rng = rng_for(1);
	struct outcome whole, parts;

	lim.max_body = 4096;
	for (size_t i = 0; i < sizeof(split_streams) / sizeof(split_streams[0]); i++) {
		const char *s = split_streams[i];

		read_str(s, &lim, &whole);
		read_stream(s, strlen(s), &lim, PIECE_BYTE, &rng, &parts);
		if (!outcome_equal(&whole, &parts)) {
			print_outcome("whole", &whole);
			print_outcome("bytes", &parts);
			fail_msg("stream %zu: byte by byte differs", i);
		}
		outcome_release(&parts);
		for (int round = 0; round < SPLIT_ROUNDS; round++) {
			enum piece_mode mode = round & 1 ? PIECE_SMALL : PIECE_RANDOM;

			read_stream(s, strlen(s), &lim, mode, &rng, &parts);
			if (!outcome_equal(&whole, &parts)) {
				print_outcome("whole", &whole);
				print_outcome("pieces", &parts);
				fail_msg("stream %zu round %d differs (SEED=%llu)",
					 i, round, test_seed);
			}
			outcome_release(&parts);
		}
		outcome_release(&whole);
	}
}

/* What the fixed streams above read as. */
static void test_split_streams_content(void **state)
{
	struct http_limits lim = lim_default;
	struct outcome o;

	lim.max_body = 4096;
	read_str(split_streams[1], &lim, &o);
	assert_int_equal(o.n_msgs, 1);
	assert_true(sb_is(&o.msgs[0].body, "abc0123456789abcdef"));
	assert_true(o.msgs[0].expect_continue);
	outcome_release(&o);

	read_str(split_streams[2], &lim, &o);
	assert_false(o.error);
	assert_int_equal(o.n_msgs, 3);
	assert_true(sb_is(&o.msgs[0].target, "/health"));
	assert_int_equal(o.msgs[0].method, HTTP_GET);
	assert_true(sb_is(&o.msgs[1].body, "hello"));
	assert_true(sb_is(&o.msgs[1].auth, "Basic eDp5"));
	assert_true(o.msgs[1].keep_alive);
	assert_true(sb_is(&o.msgs[2].body, "hi"));
	assert_int_equal(o.msgs[2].auth.len, 0);	/* not carried over */
	assert_false(o.msgs[2].keep_alive);
	outcome_release(&o);

	read_str(split_streams[3], &lim, &o);
	assert_int_equal(o.n_msgs, 2);
	assert_false(o.msgs[0].keep_alive);
	assert_true(o.msgs[1].keep_alive);
	outcome_release(&o);

	read_str(split_streams[4], &lim, &o);
	assert_int_equal(o.n_msgs, 1);
	assert_true(o.error);
	assert_int_equal(o.error_status, 413);
	outcome_release(&o);

	read_str(split_streams[5], &lim, &o);
	assert_int_equal(o.n_msgs, 1);
	assert_int_equal(o.error_status, 400);
	outcome_release(&o);

	/* Content-Length with chunked is how requests are smuggled. */
	read_str(split_streams[6], &lim, &o);
	assert_int_equal(o.n_msgs, 0);
	assert_int_equal(o.error_status, 400);
	outcome_release(&o);
}

/* ------------------------------------------------------------------------
 * Pipelining and keep-alive
 */

static void test_pipelined(void **state)
{
	static const char two[] =
		"POST /first HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
		"GET /second HTTP/1.1\r\nAuthorization: Bearer s\r\n\r\n";
	static const size_t first_len = sizeof("POST /first HTTP/1.1\r\n"
					       "Content-Length: 3\r\n\r\nabc") - 1;
	struct http_reader r;
	size_t used;

	http_reader_init(&r, &lim_default);
	assert_int_equal(http_reader_feed(&r, two, sizeof(two) - 1, &used),
			 HTTP_READ_DONE);
	assert_int_equal(used, first_len);
	assert_true(used < sizeof(two) - 1);
	assert_true(sb_is(&r.msg.target, "/first"));
	assert_true(sb_is(&r.msg.body, "abc"));
	assert_int_equal(r.msg.authorization.len, 0);

	http_reader_reset(&r);
	assert_int_equal(r.msg.target.len, 0);
	assert_int_equal(r.msg.body.len, 0);
	assert_int_equal(http_reader_feed(&r, two + used, sizeof(two) - 1 - used,
					  &used), HTTP_READ_DONE);
	assert_int_equal(used, sizeof(two) - 1 - first_len);
	assert_int_equal(r.msg.method, HTTP_GET);
	assert_true(sb_is(&r.msg.target, "/second"));
	assert_int_equal(r.msg.body.len, 0);
	assert_true(sb_is(&r.msg.authorization, "Bearer s"));
	http_reader_release(&r);
}

static void test_keep_alive(void **state)
{
	static const struct {
		const char *req;
		bool keep_alive;
	} cases[] = {
		{ "GET / HTTP/1.1\r\n\r\n", true },
		{ "GET / HTTP/1.1\r\nConnection: keep-alive\r\n\r\n", true },
		{ "GET / HTTP/1.1\r\nConnection: close\r\n\r\n", false },
		{ "GET / HTTP/1.1\r\nconnection: CLOSE\r\n\r\n", false },
		{ "GET / HTTP/1.0\r\n\r\n", false },
		{ "GET / HTTP/1.0\r\nHost: h\r\n\r\n", false },
		{ "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true },
		{ "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true },
	};
	struct outcome o;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		read_one(cases[i].req, &lim_default, &o);
		if (o.msgs[0].keep_alive != cases[i].keep_alive)
			fail_msg("'%s': keep_alive %d", cases[i].req,
				 o.msgs[0].keep_alive);
		outcome_release(&o);
	}
}

/* ------------------------------------------------------------------------
 * Limits
 */

static void test_header_bytes_limit(void **state)
{
	struct http_limits lim = lim_default;
	struct strbuf req = STRBUF_INIT;
	struct outcome o;

	lim.max_header_bytes = 256;
	/* One long value. */
	assert_int_equal(strbuf_printf(&req, "GET / HTTP/1.1\r\nX-Long: %0300d\r\n\r\n",
				       7), 0);
	expect_error(req.data, &lim, 431);
	/* Under a larger limit the same request is fine. */
	lim.max_header_bytes = 4096;
	read_one(req.data, &lim, &o);
	outcome_release(&o);

	/* Many short headers add up. */
	lim.max_header_bytes = 256;
	req.len = 0;
	assert_int_equal(strbuf_printf(&req, "GET / HTTP/1.1\r\n"), 0);
	for (int i = 0; i < 30; i++)
		assert_int_equal(strbuf_printf(&req, "X-H%02d: value\r\n", i), 0);
	assert_int_equal(strbuf_printf(&req, "\r\n"), 0);
	expect_error(req.data, &lim, 431);

	/* A long target counts too. */
	req.len = 0;
	assert_int_equal(strbuf_printf(&req, "GET /%0400d HTTP/1.1\r\n\r\n", 1), 0);
	expect_error(req.data, &lim, 431);

	/* Fed byte by byte: 431 all the same. */
	read_stream(req.data, req.len, &lim, PIECE_BYTE, NULL, &o);
	assert_true(o.error);
	assert_int_equal(o.error_status, 431);
	outcome_release(&o);
	strbuf_release(&req);
}

static void test_header_count_limit(void **state)
{
	struct http_limits lim = lim_default;
	struct outcome o;

	lim.max_headers = 3;
	read_one("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", &lim, &o);
	outcome_release(&o);
	expect_error("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n",
		     &lim, 431);
	/* A name split across feeds is one header. */
	read_stream("GET / HTTP/1.1\r\nAaaaaa: 1\r\nBbbbbb: 2\r\nCccccc: 3\r\n\r\n",
		    strlen("GET / HTTP/1.1\r\nAaaaaa: 1\r\nBbbbbb: 2\r\nCccccc: 3\r\n\r\n"),
		    &lim, PIECE_BYTE, NULL, &o);
	assert_false(o.error);
	assert_int_equal(o.n_msgs, 1);
	outcome_release(&o);
}

static void test_content_length_over(void **state)
{
	static const char head[] =
		"POST /v1/completions HTTP/1.1\r\nContent-Length: 11\r\n\r\n";
	struct http_limits lim = lim_default;
	struct http_reader r;
	struct outcome o;
	size_t used;

	lim.max_body = 10;
	/* Rejected on the headers alone: no body byte has been sent. */
	http_reader_init(&r, &lim);
	assert_int_equal(http_reader_feed(&r, head, sizeof(head) - 1, &used),
			 HTTP_READ_ERROR);
	assert_int_equal(r.error_status, 413);
	assert_non_null(strstr(r.error, "too large"));
	/* The error sticks until reset. */
	assert_int_equal(http_reader_feed(&r, "0123456789a", 11, &used),
			 HTTP_READ_ERROR);
	assert_int_equal(used, 0);
	http_reader_reset(&r);
	assert_int_equal(http_reader_feed(&r, "GET / HTTP/1.1\r\n\r\n", 18, &used),
			 HTTP_READ_DONE);
	assert_int_equal(used, 18);
	http_reader_release(&r);

	/* Exactly max_body is fine. */
	read_one("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789",
		 &lim, &o);
	assert_int_equal(o.msgs[0].body.len, 10);
	outcome_release(&o);

	/* A Content-Length too large for any integer. */
	expect_error("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
		     &lim, 400);
}

static void test_chunked_over(void **state)
{
	static const char req[] =
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
		"6\r\n012345\r\n5\r\n6789a\r\n0\r\n\r\n";
	static const char upto[] =	/* up to the chunk that goes over */
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
		"6\r\n012345\r\n5\r\n6789a";
	struct http_limits lim = lim_default;
	struct http_reader r;
	struct outcome o;
	size_t used;

	lim.max_body = 10;
	expect_error(req, &lim, 413);

	/* Reported as the body goes over, not at its end. */
	http_reader_init(&r, &lim);
	assert_int_equal(http_reader_feed(&r, upto, sizeof(upto) - 1, &used),
			 HTTP_READ_ERROR);
	assert_int_equal(r.error_status, 413);
	http_reader_release(&r);

	/* Byte by byte too. */
	read_stream(req, sizeof(req) - 1, &lim, PIECE_BYTE, NULL, &o);
	assert_true(o.error);
	assert_int_equal(o.error_status, 413);
	outcome_release(&o);

	/* Exactly max_body in chunks is fine. */
	read_one("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
		 "5\r\n01234\r\n5\r\n56789\r\n0\r\n\r\n", &lim, &o);
	assert_true(sb_is(&o.msgs[0].body, "0123456789"));
	outcome_release(&o);
}

/* ------------------------------------------------------------------------
 * Malformed requests
 */

static void test_malformed(void **state)
{
	static const char *const bad[] = {
		"HELLO\r\n\r\n",
		"GET\r\n\r\n",
		"BREW /pot HTTP/1.1\r\n\r\n",
		"GET /a b HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.x\r\n\r\n",
		"GET / FTP/1.1\r\n\r\n",
		"\x01GET / HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost x\r\n\r\n",
		"GET / HTTP/1.1\r\n: empty-name\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
	};
	struct outcome o;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		read_str(bad[i], &lim_default, &o);
		if (!o.error || o.error_status != 400 || o.n_msgs) {
			print_outcome("malformed", &o);
			fail_msg("'%s' should be 400", bad[i]);
		}
		assert_non_null(strstr(o.error_msg, "malformed HTTP request"));
		outcome_release(&o);
	}
}

/* ------------------------------------------------------------------------
 * Strictness (RFC 9112): what http_parser lets through and we refuse
 */

static const struct {
	const char *req;
	int status;
} strict_cases[] = {
	/* whitespace between a name and its colon (5.1) */
	{ "GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400 },
	{ "GET / HTTP/1.1\r\nHost\t: h\r\n\r\n", 400 },
	{ "POST / HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n", 400 },
	{ "POST / HTTP/1.1\r\nContent-Length : 3\r\n\r\nabc", 400 },
	{ "GET / HTTP/1.1\r\nAuthorization : Bearer k\r\n\r\n", 400 },
	/* obs-fold, and whitespace before the first field (5.2, 2.2) */
	{ "GET / HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n", 400 },
	{ "GET / HTTP/1.1\r\nX-A: a\r\n\tb\r\n\r\n", 400 },
	{ "GET / HTTP/1.1\r\n X-A: a\r\n\r\n", 400 },
	{ "GET / HTTP/1.1\nX-A: a\n b\n\n", 400 },
	{ "POST / HTTP/1.1\r\nTransfer-Encoding: gzip,\r\n chunked\r\n\r\n0\r\n\r\n", 400 },
	/* Transfer-Encoding other than one "chunked" (6.1) */
	{ "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nabc", 400 },
	{ "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 400 },
	{ "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", 400 },
	{ "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
	  "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400 },
	{ "POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n", 400 },
	{ "POST / HTTP/1.1\r\nTransfer-Encoding: chunkedx\r\n\r\n0\r\n\r\n", 400 },
	{ "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400 },
	/* a bare CR (2.2), which http_parser takes for an LF */
	{ "GET / HTTP/1.1\r\nHost: \r\r\r\r", 400 },
	{ "GET / HTTP/1.1\rHost: h\r\n\r\n", 400 },
	{ "GET / HTTP/1.1\r\nX-A: a\rb\r\n\r\n", 400 },
	{ "\rGET / HTTP/1.1\r\n\r\n", 400 },
	/* versions other than 1.0 and 1.1 */
	{ "GET / HTTP/2.0\r\n\r\n", 505 },
	{ "GET / HTTP/0.9\r\n\r\n", 505 },
	{ "GET / HTTP/1.2\r\n\r\n", 505 },
	{ "GET / HTTP/3.0\r\nHost: h\r\n\r\n", 505 },
	{ "POST / HTTP/1.9\r\nContent-Length: 1\r\n\r\nx", 505 },
};

static void test_strict_refusals(void **state)
{
	struct rng rng = rng_for(4);
	struct outcome o;

	for (size_t i = 0; i < sizeof(strict_cases) / sizeof(strict_cases[0]); i++) {
		const char *req = strict_cases[i].req;

		for (int mode = PIECE_ALL; mode <= PIECE_RANDOM; mode++) {
			read_stream(req, strlen(req), &lim_default,
				    (enum piece_mode)mode, &rng, &o);
			if (!o.error || o.error_status != strict_cases[i].status ||
			    o.n_msgs) {
				print_outcome("strict", &o);
				fail_msg("'%s' (mode %d): wanted %d", req, mode,
					 strict_cases[i].status);
			}
			outcome_release(&o);
		}
		/* Behind a good request: that one is read, then the error. */
		{
			struct strbuf two = STRBUF_INIT;

			assert_int_equal(strbuf_printf(&two, "GET /ok HTTP/1.1\r\n\r\n%s",
						       req), 0);
			read_str(two.data, &lim_default, &o);
			assert_int_equal(o.n_msgs, 1);
			assert_true(o.error);
			assert_int_equal(o.error_status, strict_cases[i].status);
			outcome_release(&o);
			strbuf_release(&two);
		}
	}
}

/* Their neighbours that are fine. */
static void test_strict_accepts(void **state)
{
	static const char *const fine[] = {
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\ntransfer-encoding: Chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: \t chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost:h\r\nX-Sp:   lots   of   space   \r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
		"GET / HTTP/1.1\nHost: h\n\n",
		"\r\nGET / HTTP/1.1\r\n\r\n",
		"HEAD /health HTTP/1.1\r\n\r\n",
	};
	struct outcome o;

	for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++) {
		read_one(fine[i], &lim_default, &o);
		outcome_release(&o);
	}
	read_one("HEAD /health HTTP/1.1\r\n\r\n", &lim_default, &o);
	assert_int_equal(o.msgs[0].method, HTTP_HEAD);
	outcome_release(&o);
}

/*
 * Every byte of the head counts against max_header_bytes, whitespace and
 * empty lines included: a head of exactly the limit is read, one byte more
 * is 431, however the bytes are spent.
 */
static void test_whitespace_counts(void **state)
{
	static const char *const pads[] = { " ", "\t", "\r\n", "a" };
	struct http_limits lim = lim_default;
	struct strbuf req = STRBUF_INIT;
	struct outcome o;

	lim.max_header_bytes = 256;
	for (size_t p = 0; p < sizeof(pads) / sizeof(pads[0]); p++) {
		for (size_t extra = 0; extra <= 1; extra++) {
			size_t head;

			req.len = 0;
			/* padding in a value (OWS before it), or empty lines first */
			if (!strcmp(pads[p], "\r\n")) {
				for (size_t i = 0; i < (256 - 18) / 2; i++)
					assert_int_equal(strbuf_printf(&req, "\r\n"), 0);
				assert_int_equal(strbuf_printf(&req, "GET / HTTP/1.1\r\n\r\n"), 0);
			} else {
				assert_int_equal(strbuf_printf(&req, "GET / HTTP/1.1\r\nX:"), 0);
				while (req.len < 256 - 5)
					assert_int_equal(strbuf_printf(&req, "%s", pads[p]), 0);
				assert_int_equal(strbuf_printf(&req, "b\r\n\r\n"), 0);
			}
			head = req.len;
			assert_int_equal(head, 256);
			if (extra) {	/* one more byte in front */
				memmove(req.data + 1, req.data, req.len);
				req.data[0] = '\n';
				req.len++;
				req.data[req.len] = '\0';
				expect_error(req.data, &lim, 431);
			} else {
				read_one(req.data, &lim, &o);
				outcome_release(&o);
			}
		}
	}
	strbuf_release(&req);
}

/* Trailers count against the same limit and set no header we act on. */
static void test_trailers(void **state)
{
	struct http_limits lim = lim_default;
	struct strbuf req = STRBUF_INIT;
	struct outcome o;

	read_one("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
		 "1\r\nx\r\n0\r\nAuthorization: Bearer late\r\n"
		 "Expect: 100-continue\r\nTransfer-Encoding: gzip\r\n\r\n",
		 &lim_default, &o);
	assert_int_equal(o.msgs[0].auth.len, 0);
	assert_false(o.msgs[0].expect_continue);
	assert_true(sb_is(&o.msgs[0].body, "x"));
	outcome_release(&o);

	lim.max_header_bytes = 256;
	assert_int_equal(strbuf_printf(&req, "POST / HTTP/1.1\r\nTransfer-Encoding: "
				       "chunked\r\n\r\n0\r\nX-T: %0300d\r\n\r\n", 1), 0);
	expect_error(req.data, &lim, 431);
	strbuf_release(&req);
}

/* ------------------------------------------------------------------------
 * Expect: 100-continue
 */

static void test_expect_continue(void **state)
{
	static const char head[] =
		"POST /v1/completions HTTP/1.1\r\nHost: h\r\n"
		"Expect: 100-continue\r\nContent-Length: 10\r\n\r\n";
	struct strbuf req = STRBUF_INIT;
	struct http_reader r;
	struct outcome o;
	size_t used;

	http_reader_init(&r, &lim_default);
	/* The headers without their last byte: nothing to report yet. */
	assert_int_equal(http_reader_feed(&r, head, sizeof(head) - 2, &used),
			 HTTP_READ_MORE);
	assert_int_equal(used, sizeof(head) - 2);
	assert_int_equal(http_reader_feed(&r, head + sizeof(head) - 2, 1, &used),
			 HTTP_READ_HEADERS);
	assert_int_equal(used, 1);
	assert_true(r.msg.expect_continue);
	assert_int_equal(r.msg.method, HTTP_POST);
	assert_true(sb_is(&r.msg.target, "/v1/completions"));
	/* Once per request: the body's pieces are MORE, then DONE. */
	assert_int_equal(http_reader_feed(&r, "", 0, &used), HTTP_READ_MORE);
	assert_int_equal(http_reader_feed(&r, "01234", 5, &used), HTTP_READ_MORE);
	assert_int_equal(http_reader_feed(&r, "56789", 5, &used), HTTP_READ_DONE);
	assert_true(sb_is(&r.msg.body, "0123456789"));
	assert_true(r.msg.expect_continue);

	/* The next request starts without it. */
	http_reader_reset(&r);
	assert_false(r.msg.expect_continue);
	assert_int_equal(http_reader_feed(&r, "POST / HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
					  38, &used), HTTP_READ_HEADERS);
	assert_false(r.msg.expect_continue);
	assert_int_equal(http_reader_feed(&r, "x", 1, &used), HTTP_READ_DONE);
	http_reader_release(&r);

	/* Headers and body in one piece: DONE straight away, flag still set. */
	read_one("POST / HTTP/1.1\r\nexpect: 100-CONTINUE\r\nContent-Length: 1\r\n\r\nx",
		 &lim_default, &o);
	assert_true(o.msgs[0].expect_continue);
	assert_int_equal(o.msgs[0].n_headers_status, 0);
	outcome_release(&o);

	/* Byte by byte: HEADERS exactly once. */
	req.len = 0;
	assert_int_equal(strbuf_printf(&req, "%s0123456789", head), 0);
	read_stream(req.data, req.len, &lim_default, PIECE_BYTE, NULL, &o);
	assert_int_equal(o.n_msgs, 1);
	assert_int_equal(o.msgs[0].n_headers_status, 1);
	assert_true(o.msgs[0].expect_continue);
	outcome_release(&o);
	strbuf_release(&req);

	/* Other expectations are not 100-continue. */
	read_one("POST / HTTP/1.1\r\nExpect: 100-continue-please\r\n"
		 "Content-Length: 1\r\n\r\nx", &lim_default, &o);
	assert_false(o.msgs[0].expect_continue);
	outcome_release(&o);
	read_one("POST / HTTP/1.1\r\nX-Expect: 100-continue\r\n"
		 "Content-Length: 1\r\n\r\nx", &lim_default, &o);
	assert_false(o.msgs[0].expect_continue);
	outcome_release(&o);
}

/* HEADERS counts per message when the body arrives later, byte by byte. */
static void test_headers_once_per_message(void **state)
{
	static const char two[] =
		"POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
		"POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n";
	struct outcome o;

	read_stream(two, sizeof(two) - 1, &lim_default, PIECE_BYTE, NULL, &o);
	assert_int_equal(o.n_msgs, 2);
	assert_int_equal(o.msgs[0].n_headers_status, 1);
	assert_int_equal(o.msgs[1].n_headers_status, 1);
	outcome_release(&o);
}

/* ------------------------------------------------------------------------
 * Authorization
 */

static void test_authorization(void **state)
{
	static const char *const names[] = {
		"Authorization", "authorization", "AUTHORIZATION", "aUtHoRiZaTiOn",
	};
	struct strbuf req = STRBUF_INIT;
	struct outcome o;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		req.len = 0;
		assert_int_equal(strbuf_printf(&req, "GET /v1/models HTTP/1.1\r\n"
					       "Host: h\r\n%s: Bearer sk-%zu\r\n"
					       "X-Other: o\r\n\r\n", names[i], i), 0);
		read_stream(req.data, req.len, &lim_default, PIECE_BYTE, NULL, &o);
		assert_int_equal(o.n_msgs, 1);
		assert_int_equal(o.msgs[0].auth.len, strlen("Bearer sk-0"));
		assert_memory_equal(o.msgs[0].auth.data, "Bearer sk-", 10);
		assert_int_equal(o.msgs[0].auth.data[10], '0' + (int)i);
		outcome_release(&o);
	}
	strbuf_release(&req);

	/* Names that only start or end like it are other headers. */
	read_one("GET / HTTP/1.1\r\nAuthorization-X: a\r\nX-Authorization: b\r\n"
		 "Proxy-Authorization: c\r\n\r\n", &lim_default, &o);
	assert_int_equal(o.msgs[0].auth.len, 0);
	outcome_release(&o);
}

static void test_two_authorization(void **state)
{
	expect_error("GET / HTTP/1.1\r\nAuthorization: Bearer a\r\n"
		     "Authorization: Bearer b\r\n\r\n", &lim_default, 400);
	expect_error("GET / HTTP/1.1\r\nauthorization: Bearer a\r\nHost: h\r\n"
		     "AUTHORIZATION: Bearer a\r\n\r\n", &lim_default, 400);
	/* An empty first one is still a first one. */
	expect_error("GET / HTTP/1.1\r\nAuthorization:\r\n"
		     "Authorization: Bearer b\r\n\r\n", &lim_default, 400);
	expect_error("GET / HTTP/1.1\r\nAuthorization: Bearer b\r\n"
		     "Authorization:\r\n\r\n", &lim_default, 400);
}

/* ------------------------------------------------------------------------
 * Upgrade and CONNECT: not supported, whatever the pieces.
 */

/*
 * An Upgrade offer is ignored (the request is read as plain HTTP/1.1, body
 * and pipelined successor included), whatever the pieces it comes in;
 * CONNECT, a tunnel request, is refused.
 */
static void test_upgrade_ignored_connect_refused(void **state)
{
	static const char upgrades[] =
		"GET /a HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"
		"POST /b HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
		"Content-Length: 3\r\n\r\nabc"
		"GET /c HTTP/1.1\r\n\r\n";
	static const char connect[] =
		"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n";
	struct rng rng = rng_for(2);
	struct outcome o;

	for (int mode = PIECE_ALL; mode <= PIECE_RANDOM; mode++) {
		read_stream(upgrades, strlen(upgrades), &lim_default,
			    (enum piece_mode)mode, &rng, &o);
		if (o.error || o.n_msgs != 3 ||
		    strcmp(o.msgs[0].target.data, "/a") ||
		    strcmp(o.msgs[1].target.data, "/b") ||
		    o.msgs[1].body.len != 3 || memcmp(o.msgs[1].body.data, "abc", 3) ||
		    strcmp(o.msgs[2].target.data, "/c")) {
			print_outcome("upgrade", &o);
			fail_msg("mode %d: upgrade offers not read as plain requests", mode);
		}
		outcome_release(&o);
		read_stream(connect, strlen(connect), &lim_default,
			    (enum piece_mode)mode, &rng, &o);
		if (!o.error || o.error_status != 400 || o.n_msgs) {
			print_outcome("connect", &o);
			fail_msg("mode %d: CONNECT not refused", mode);
		}
		outcome_release(&o);
	}
}

/* ------------------------------------------------------------------------
 * Random valid requests against a model
 */

#define RAND_ROUNDS 300
#define RAND_MAX_MSGS 6

static void rand_chars(struct rng *rng, struct strbuf *sb, const char *set,
		       size_t n)
{
	size_t n_set = strlen(set);

	for (size_t i = 0; i < n; i++) {
		char c = set[rng_below(rng, (uint32_t)n_set)];

		assert_int_equal(strbuf_append(sb, &c, 1), 0);
	}
}

static void rand_case(struct rng *rng, struct strbuf *sb, const char *s)
{
	for (; *s; s++) {
		char c = *s;

		if (c >= 'a' && c <= 'z' && rng_below(rng, 2))
			c = (char)(c - 'a' + 'A');
		else if (c >= 'A' && c <= 'Z' && rng_below(rng, 2))
			c = (char)(c - 'A' + 'a');
		assert_int_equal(strbuf_append(sb, &c, 1), 0);
	}
}

/* Append one random valid request to sb and what it must read as to m. */
static void rand_request(struct rng *rng, struct strbuf *sb, struct msg_copy *m)
{
	static const char path_chars[] =
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~/?=&%";
	static const char tok_chars[] = "abcdefghijklmnopqrstuvwxyz0123456789-";
	static const char val_chars[] =
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
		" !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
	bool http10 = rng_below(rng, 5) == 0;
	bool post = rng_below(rng, 3) != 0;
	bool chunked = post && !http10 && rng_below(rng, 2);
	unsigned conn = rng_below(rng, 3);	/* none, close, keep-alive */
	size_t body_len = post ? rng_below(rng, 300) : 0;
	char *body = malloc(body_len + 1);
	unsigned n_extra = rng_below(rng, 6);
	uint32_t auth_at = rng_below(rng, 2) ? rng_below(rng, n_extra + 1) : UINT32_MAX;

	assert_non_null(body);
	memset(m, 0, sizeof(*m));
	m->method = post ? HTTP_POST : HTTP_GET;
	assert_int_equal(strbuf_append(&m->target, "/", 1), 0);
	rand_chars(rng, &m->target, path_chars, rng_below(rng, 40));
	assert_int_equal(strbuf_printf(sb, "%s %.*s HTTP/1.%c\r\nHost: h\r\n",
				       post ? "POST" : "GET", (int)m->target.len,
				       m->target.data, http10 ? '0' : '1'), 0);
	for (unsigned i = 0; i <= n_extra; i++) {
		if (i == auth_at) {
			rand_case(rng, sb, "Authorization");
			assert_int_equal(strbuf_printf(sb, ":%s", rng_below(rng, 2) ?
						       " " : ""), 0);
			assert_int_equal(strbuf_printf(&m->auth, "Bearer "), 0);
			rand_chars(rng, &m->auth, tok_chars, 1 + rng_below(rng, 40));
			assert_int_equal(strbuf_append(sb, m->auth.data, m->auth.len), 0);
			assert_int_equal(strbuf_printf(sb, "\r\n"), 0);
		}
		if (i == n_extra)
			break;
		assert_int_equal(strbuf_printf(sb, "X-"), 0);
		rand_chars(rng, sb, tok_chars, 1 + rng_below(rng, 12));
		assert_int_equal(strbuf_printf(sb, ": x"), 0);
		rand_chars(rng, sb, val_chars, rng_below(rng, 60));
		assert_int_equal(strbuf_printf(sb, "y\r\n"), 0);
	}
	if (conn == 1)
		rand_case(rng, sb, "Connection: close\r\n");
	else if (conn == 2)
		rand_case(rng, sb, "Connection: keep-alive\r\n");
	m->keep_alive = http10 ? conn == 2 : conn != 1;
	if (post && rng_below(rng, 4) == 0) {
		rand_case(rng, sb, "Expect: 100-continue\r\n");
		m->expect_continue = true;
	}

	for (size_t i = 0; i < body_len; i++)
		body[i] = (char)rng_below(rng, 256);
	if (body_len)
		assert_int_equal(strbuf_append(&m->body, body, body_len), 0);
	if (chunked) {
		size_t off = 0;

		rand_case(rng, sb, "Transfer-Encoding: chunked\r\n\r\n");
		while (off < body_len) {
			size_t n = 1 + rng_below(rng, (uint32_t)(body_len - off));

			assert_int_equal(strbuf_printf(sb, rng_below(rng, 2) ?
						       "%zx" : "%zX", n), 0);
			if (rng_below(rng, 4) == 0)
				assert_int_equal(strbuf_printf(sb, ";ext=1"), 0);
			assert_int_equal(strbuf_printf(sb, "\r\n"), 0);
			assert_int_equal(strbuf_append(sb, body + off, n), 0);
			assert_int_equal(strbuf_printf(sb, "\r\n"), 0);
			off += n;
		}
		assert_int_equal(strbuf_printf(sb, "0\r\n%s\r\n", rng_below(rng, 3) ?
					       "" : "X-Trailer: t\r\n"), 0);
	} else {
		if (post)
			assert_int_equal(strbuf_printf(sb, "Content-Length: %zu\r\n",
						       body_len), 0);
		assert_int_equal(strbuf_printf(sb, "\r\n"), 0);
		assert_int_equal(strbuf_append(sb, body, body_len), 0);
	}
	free(body);
}

static void test_random_vs_model(void **state)
{
	struct rng rng = rng_for(3);
	struct http_limits lim = { .max_header_bytes = 1 << 16,
				   .max_headers = 64, .max_body = 1 << 16 };
	struct outcome want, got;
	struct strbuf sb = STRBUF_INIT;

	for (int round = 0; round < RAND_ROUNDS; round++) {
		size_t n = 1 + rng_below(&rng, RAND_MAX_MSGS);

		memset(&want, 0, sizeof(want));
		sb.len = 0;
		for (size_t i = 0; i < n; i++)
			rand_request(&rng, &sb, &want.msgs[i]);
		want.n_msgs = n;
		want.used = sb.len;
		read_stream(sb.data, sb.len, &lim,
			    (enum piece_mode)rng_below(&rng, 4), &rng, &got);
		if (!outcome_equal(&want, &got)) {
			print_outcome("model", &want);
			print_outcome("read", &got);
			print_message("stream:\n%.*s\n", (int)sb.len, sb.data);
			fail_msg("round %d differs (SEED=%llu)", round, test_seed);
		}
		outcome_release(&want);
		outcome_release(&got);
	}
	strbuf_release(&sb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_simple_get),
		cmocka_unit_test(test_post_content_length),
		cmocka_unit_test(test_binary_body),
		cmocka_unit_test(test_chunked),
		cmocka_unit_test(test_splits_agree),
		cmocka_unit_test(test_split_streams_content),
		cmocka_unit_test(test_pipelined),
		cmocka_unit_test(test_keep_alive),
		cmocka_unit_test(test_header_bytes_limit),
		cmocka_unit_test(test_header_count_limit),
		cmocka_unit_test(test_content_length_over),
		cmocka_unit_test(test_chunked_over),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_strict_refusals),
		cmocka_unit_test(test_strict_accepts),
		cmocka_unit_test(test_whitespace_counts),
		cmocka_unit_test(test_trailers),
		cmocka_unit_test(test_expect_continue),
		cmocka_unit_test(test_headers_once_per_message),
		cmocka_unit_test(test_authorization),
		cmocka_unit_test(test_two_authorization),
		cmocka_unit_test(test_upgrade_ignored_connect_refused),
		cmocka_unit_test(test_random_vs_model),
	};

	test_seed_init("http_reader");
	return cmocka_run_group_tests_name("http_reader", tests, NULL, NULL);
}
