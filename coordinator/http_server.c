/*
 * http_server.c - see http_server.h.
 *
 * NOTES ON THE DESIGN
 *
 * Connections.  A fixed table of max_connections entries, each with its
 * own receive buffer, request reader and out_writer (out_writer.h: the
 * answers are appended while the previous bytes are sent).  Every socket
 * operation is an io_uring recv or send carrying one of the entry's two
 * ops (io_op: its callback); an entry is reused only after its socket is
 * closed and no operation on it is in flight, so a completion can never
 * land on the wrong connection.
 * A connection always has a recv queued while it has buffer room, also
 * while its request is running: that is how a reset is seen at once (recv
 * fails) rather than at the next write.  recv returning 0 is a half-close
 * as much as a close, so it is answered (conn_half_closed()); with no recv
 * posted (after it, or with the buffer full of pipelined requests) the
 * timer scan polls a running request's socket for a reset instead.  The
 * kernel writes a posted recv's bytes where it was told to (c->in +
 * in_len) whenever it completes, so parsing only advances in_start, and
 * parsed bytes are moved out of the buffer just before the next recv.
 *
 * Requests.  One request per connection at a time (HTTP/1.1 without
 * pipelined execution: a pipelined request waits in the receive buffer
 * until the answer before it is queued).  A live request carries a cookie
 * (connection index, request serial); the engine's callbacks find the
 * connection through it, and any path that abandons a request bumps the
 * serial first, so a late callback for it finds nothing.
 *
 * Work list.  Events and engine callbacks only mark a connection dirty
 * (and note a pause or a drop it needs: a callback never re-enters the
 * engine, frontend.h); http_server_pump() then carries those out, parses,
 * routes and queues I/O for the dirty ones, so engine calls never nest
 * inside a commit and each round touches only the connections that
 * changed.
 *
 * Streaming.  The engine hands over only final tokens (on_tokens: those
 * no stop sequence can take back); each batch goes out as one
 * Server-Sent Event, in its own HTTP chunk.
 *
 * Backpressure.  What a connection has buffered (including the send in
 * flight) is bounded by conn_buffer.  Past it no further pipelined request
 * is parsed (each answer is appended whole, so the bound is exceeded by
 * one answer at most), and a streamed request is paused: it
 * gives up its slot, keeps its tokens, and resumes from its prefix (the
 * model is stateless) once half the buffer has drained.  The kernel's send
 * buffer is set to the same size so that a client that reads nothing is
 * noticed after a bounded amount of output.  No output progress for
 * write_timeout_ms cancels the request and closes the connection.
 */
#include "http_server.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "completion_api.h"
#include "engine.h"
#include "io_ring.h"
#include "json_writer.h"
#include "log.h"
#include "metrics.h"
#include "out_writer.h"
#include "parse_num.h"
#include "request.h"
#include "request_pool.h"

#define HTTP_IN_SIZE (64u * 1024)	/* receive buffer per connection */
#define HTTP_TICK_NS (5ull * 1000 * 1000)	/* timeout scan period */
#define HTTP_ACCEPT_RETRY_NS (50ull * 1000 * 1000)
#define HTTP_PEER_CHECK_NS (50ull * 1000 * 1000)	/* reset check, no recv posted */
#define HTTP_STATUS_MAX 600

struct conn {
	int fd;				/* -1: the entry is free */
	uint32_t req_serial;		/* bumped per request; in its cookie */
	struct http_reader reader;
	char *in;			/* HTTP_IN_SIZE bytes, in_len used */
	uint32_t in_len;		/* a recv in flight writes from here on */
	uint32_t in_start;		/* bytes before it are parsed; moved out
					 * only while no recv is in flight */
	struct out_writer out;		/* answers: appended to out.fill while
					 * out.write is being sent */
	bool recv_inflight;
	struct io_op recv_op, send_op;	/* arg: the server */
	bool dirty;			/* on the work list */
	bool closing;			/* shut down; freed when no I/O is left */
	bool close_after_send;		/* the answer said Connection: close */
	bool read_eof;			/* the client shut down its sending side:
					 * what it sent is answered, then close */
	/* the request being answered */
	bool busy;			/* the engine has it */
	uint32_t handle;		/* its live request */
	bool stream;
	bool paused;			/* we paused it: output buffer full */
	bool pause_due;			/* engine_pause() it from pump */
	bool drop_due;			/* out of memory in a callback: drop
					 * the connection from pump */
	bool keep_alive;
	bool head_request;		/* HEAD: answered as GET, without the body */
	uint32_t n_sent;		/* tokens streamed so far */
	uint64_t created;		/* Unix seconds, for the answer */
	/* timers */
	uint64_t request_start_ns;	/* first byte of an unfinished request */
	uint64_t idle_since_ns;		/* last answer queued, nothing since */
	uint64_t last_progress_ns;	/* output last moved (or started) */
};

struct http_server {
	const struct http_config *cfg;
	struct engine *e;
	struct io_ring *io;
	struct request_limits lim;
	int listen_fd;
	bool accepting;
	bool accept_inflight;
	struct io_op accept_op;		/* arg: the server */
	uint64_t accept_retry_ns;	/* accept failed: try again then */
	struct conn *conns;
	uint32_t n_conns;
	uint32_t *free_list;
	uint32_t n_free;
	/* connections to look at in pump: a ring of n_conns entries, from
	 * dirty_head to dirty_tail; a connection is in it at most once (its
	 * dirty flag), so it never holds more than n_conns */
	uint32_t *dirty;
	uint32_t dirty_head, dirty_tail;
	uint64_t next_tick_ns;		/* earliest timer found by the last scan */
	uint64_t last_scan_ns;
	bool rescan;			/* a connection changed since that scan */
	uint64_t next_id;		/* generated request ids */
	uint64_t started_s;
	struct strbuf body;		/* scratch: an answer body being built */
	/* for /metrics */
	uint64_t n_accepted;
	uint64_t n_refused;		/* over max_connections */
	uint64_t n_disconnects;		/* requests cancelled: client went away */
	uint64_t n_write_timeouts;
	uint64_t n_pauses;
	uint64_t n_status[HTTP_STATUS_MAX];
};

static const char *status_text(int status)
{
	switch (status) {
	case 100: return "Continue";
	case 200: return "OK";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 409: return "Conflict";
	case 413: return "Content Too Large";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 503: return "Service Unavailable";
	case 505: return "HTTP Version Not Supported";
	default:  return "Error";
	}
}

static uint64_t cookie_of(const struct http_server *srv, const struct conn *c)
{
	return ((uint64_t)c->req_serial << 32) | (uint32_t)(c - srv->conns);
}

/* The connection waiting for the request with this cookie, or NULL. */
static struct conn *conn_of_cookie(struct http_server *srv, uint64_t cookie)
{
	uint32_t index = (uint32_t)cookie;
	struct conn *c;

	if (index >= srv->n_conns)
		return NULL;
	c = &srv->conns[index];
	if (c->fd < 0 || !c->busy || c->req_serial != (uint32_t)(cookie >> 32))
		return NULL;
	return c;
}

static void conn_mark(struct http_server *srv, struct conn *c)
{
	srv->rescan = true;	/* its timers may have changed */
	if (c->dirty)
		return;
	c->dirty = true;
	srv->dirty[srv->dirty_tail++ % srv->n_conns] = (uint32_t)(c - srv->conns);
}

/* Received bytes not parsed yet. */
static uint32_t conn_unparsed(const struct conn *c)
{
	return c->in_len - c->in_start;
}

/* Answer bytes not sent yet (the send in flight included). */
static size_t conn_buffered(const struct conn *c)
{
	return out_writer_pending(&c->out);
}

static void conn_note_output(struct conn *c, size_t before)
{
	if (!before)	/* output starts moving now: its clock starts */
		c->last_progress_ns = clock_now_ns();
}

/* ------------------------------------------------------------------------
 * Closing
 * ---------------------------------------------------------------------- */

static void conn_free(struct http_server *srv, struct conn *c)
{
	close(c->fd);
	c->fd = -1;
	c->in_len = c->in_start = 0;
	http_reader_reset(&c->reader);
	out_writer_release(&c->out);
	c->closing = c->close_after_send = c->busy = c->paused = false;
	c->pause_due = c->drop_due = false;
	c->read_eof = false;
	srv->free_list[srv->n_free++] = (uint32_t)(c - srv->conns);
}

/* Stop all traffic; the entry is freed once no operation is in flight. */
static void conn_close(struct http_server *srv, struct conn *c)
{
	if (!c->closing) {
		c->closing = true;
		shutdown(c->fd, SHUT_RDWR);	/* completes a pending recv */
	}
	if (!c->recv_inflight && !c->out.inflight)
		conn_free(srv, c);
}

/* Forget the connection's request: later callbacks for it find nothing.
 * Returns the handle to cancel, or REQUEST_NONE. */
static uint32_t conn_detach(struct conn *c)
{
	uint32_t handle = c->busy ? c->handle : REQUEST_NONE;

	c->busy = false;
	c->paused = false;
	c->handle = REQUEST_NONE;
	c->req_serial++;
	return handle;
}

/* Give up on the connection: cancel its request, close. */
static void conn_drop(struct http_server *srv, struct conn *c)
{
	uint32_t handle = conn_detach(c);

	if (handle != REQUEST_NONE)
		engine_cancel(srv->e, handle);
	conn_close(srv, c);
}

/* The client closed or reset the connection. */
static void conn_client_gone(struct http_server *srv, struct conn *c)
{
	if (c->busy)
		srv->n_disconnects++;
	conn_drop(srv, c);
}

/* ------------------------------------------------------------------------
 * Answers
 * ---------------------------------------------------------------------- */

/* The request is answered: ready for the next one, or close after it. */
static void conn_request_done(struct http_server *srv, struct conn *c)
{
	if (!c->keep_alive || !srv->accepting)
		c->close_after_send = true;
	c->head_request = false;
	http_reader_reset(&c->reader);
	c->request_start_ns = conn_unparsed(c) ? clock_now_ns() : 0;
	c->idle_since_ns = clock_now_ns();
	conn_mark(srv, c);
}

/* A whole answer with a body: head, srv->body, then the next request. */
static void respond(struct http_server *srv, struct conn *c, int status,
		    const char *content_type, const char *extra_headers)
{
	size_t before = conn_buffered(c);
	bool close = !c->keep_alive || !srv->accepting;

	c->keep_alive = !close;
	if (status >= 0 && status < HTTP_STATUS_MAX)
		srv->n_status[status]++;
	if (strbuf_printf(&c->out.fill, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
			  "Content-Length: %zu\r\n%s%s\r\n", status,
			  status_text(status), content_type, srv->body.len,
			  extra_headers ? extra_headers : "",
			  close ? "Connection: close\r\n" : "") ||
	    (!c->head_request &&
	     strbuf_append(&c->out.fill, srv->body.data, srv->body.len))) {
		LOG(LOG_ERROR, "out of memory answering a request");
		conn_drop(srv, c);
		return;
	}
	srv->body.len = 0;
	conn_note_output(c, before);
	conn_request_done(srv, c);
}

static void respond_error(struct http_server *srv, struct conn *c, int status,
			  const char *message, const char *type,
			  const char *param, const char *extra_headers)
{
	srv->body.len = 0;
	if (api_format_error(&srv->body, message, type, param, NULL)) {
		conn_drop(srv, c);
		return;
	}
	respond(srv, c, status, "application/json", extra_headers);
}

/* Append body as one HTTP chunk. */
static int put_chunk(struct strbuf *out, const struct strbuf *body)
{
	if (!body->len)
		return 0;
	if (strbuf_printf(out, "%zx\r\n", body->len) ||
	    strbuf_append(out, body->data, body->len) ||
	    strbuf_append(out, "\r\n", 2))
		return -1;
	return 0;
}

/* ------------------------------------------------------------------------
 * Routes
 * ---------------------------------------------------------------------- */

static void route_health(struct http_server *srv, struct conn *c)
{
	bool ok = engine_healthy(srv->e) && srv->accepting;

	srv->body.len = 0;
	if (strbuf_printf(&srv->body, "{\"status\":\"%s\"}",
			  ok ? "ok" : srv->accepting ? "no worker" : "draining")) {
		conn_drop(srv, c);
		return;
	}
	respond(srv, c, ok ? 200 : 503, "application/json", NULL);
}

/* Append s as a JSON string (escaped); 0 or -ENOMEM. */
static int append_json_str(struct strbuf *out, const char *s)
{
	size_t bound = json_str_bound(s);
	char *end;

	if (bound == SIZE_MAX || strbuf_reserve(out, bound))
		return -ENOMEM;
	end = json_put_str(out->data + out->len, s);
	out->len = (size_t)(end - out->data);
	out->data[out->len] = '\0';
	return 0;
}

static void route_models(struct http_server *srv, struct conn *c)
{
	srv->body.len = 0;
	if (strbuf_printf(&srv->body, "{\"object\":\"list\",\"data\":[{\"id\":") ||
	    append_json_str(&srv->body, srv->cfg->model_name) ||
	    strbuf_printf(&srv->body, ",\"object\":\"model\",\"created\":%llu,"
			  "\"owned_by\":\"dynbatch\"}]}",
			  (unsigned long long)srv->started_s)) {
		conn_drop(srv, c);
		return;
	}
	respond(srv, c, 200, "application/json", NULL);
}

static void route_metrics(struct http_server *srv, struct conn *c)
{
	srv->body.len = 0;
	if (engine_metrics(srv->e, &srv->body) ||
	    http_server_metrics(srv, &srv->body)) {
		conn_drop(srv, c);
		return;
	}
	respond(srv, c, 200, "text/plain; version=0.0.4; charset=utf-8", NULL);
}

static void route_completions(struct http_server *srv, struct conn *c)
{
	const struct strbuf *body = &c->reader.msg.body;
	struct completion_request cr;
	const char *param;
	char err[512];
	size_t before;
	int ret;

	ret = completion_parse(body->len ? body->data : "", body->len, &srv->lim,
			       &cr, err, sizeof(err), &param);
	if (ret) {
		if (ret == -ENOMEM)
			respond_error(srv, c, 500, "out of memory", "server_error", NULL, NULL);
		else
			respond_error(srv, c, 400, err, "invalid_request_error", param, NULL);
		goto out;
	}
	if (!cr.req.id) {
		if (asprintf(&cr.req.id, COMPLETION_ID_PREFIX "%x-%llu", (unsigned)getpid(),
			     (unsigned long long)++srv->next_id) < 0) {
			cr.req.id = NULL;
			respond_error(srv, c, 500, "out of memory", "server_error", NULL, NULL);
			goto out;
		}
	}
	c->req_serial++;
	ret = engine_submit(srv->e, &cr.req, cookie_of(srv, c), &c->handle);
	switch (ret) {
	case 0:
		break;
	case -EAGAIN:
		respond_error(srv, c, 429, "the waiting queue is full; retry later",
			      "rate_limit_error", NULL, "Retry-After: 1\r\n");
		goto out;
	case -EEXIST:
		snprintf(err, sizeof(err), "a request with id '%.200s' is still running",
			 cr.req.id);
		respond_error(srv, c, 409, err, "invalid_request_error", "id", NULL);
		goto out;
	case -EIO:
		respond_error(srv, c, 503, "no model worker can be kept alive",
			      "server_error", NULL, "Retry-After: 5\r\n");
		goto out;
	case -ESHUTDOWN:
		respond_error(srv, c, 503, "the server is shutting down",
			      "server_error", NULL, NULL);
		goto out;
	default:
		respond_error(srv, c, 500, "out of memory", "server_error", NULL, NULL);
		goto out;
	}
	c->busy = true;
	c->stream = cr.stream;
	c->n_sent = 0;
	c->created = (uint64_t)time(NULL);
	c->request_start_ns = 0;
	if (c->stream) {
		before = conn_buffered(c);
		srv->n_status[200]++;
		/* X-Accel-Buffering: proxies such as nginx pass events at once */
		if (strbuf_printf(&c->out.fill, "HTTP/1.1 200 OK\r\n"
				  "Content-Type: text/event-stream\r\n"
				  "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n"
				  "Transfer-Encoding: chunked\r\n%s\r\n",
				  c->keep_alive ? "" : "Connection: close\r\n")) {
			conn_drop(srv, c);
			goto out;
		}
		conn_note_output(c, before);
		conn_mark(srv, c);
	}
out:
	completion_request_release(&cr);
}

/* Bearer-token check, in time independent of where the key differs. */
static bool authorized(const struct http_server *srv, const struct conn *c)
{
	const struct strbuf *a = &c->reader.msg.authorization;
	const char *key = srv->cfg->api_key;
	size_t n;
	unsigned char diff = 0;

	if (!key)
		return true;
	n = strlen(key);
	if (a->len != 7 + n || strncasecmp(a->data, "Bearer ", 7))
		return false;
	for (size_t i = 0; i < n; i++)
		diff |= (unsigned char)(a->data[7 + i] ^ key[i]);
	return diff == 0;
}

static void route(struct http_server *srv, struct conn *c)
{
	static const struct {
		const char *path;
		unsigned method;
		void (*fn)(struct http_server *, struct conn *);
	} routes[] = {
		{ "/v1/completions", HTTP_POST, route_completions },
		{ "/v1/models", HTTP_GET, route_models },
		{ "/health", HTTP_GET, route_health },
		{ "/metrics", HTTP_GET, route_metrics },
	};
	const struct http_message *m = &c->reader.msg;
	size_t len = strcspn(m->target.len ? m->target.data : "", "?");
	char allow[64];

	c->keep_alive = m->keep_alive;
	/* HEAD is GET without the body (RFC 9110 9.3.2); respond() drops it. */
	c->head_request = m->method == HTTP_HEAD;
	/* Everything but /health needs the key, unknown paths included:
	 * without it a client learns nothing, not even what exists. */
	if (!(len == 7 && !strncmp(m->target.data, "/health", 7)) &&
	    !authorized(srv, c)) {
		respond_error(srv, c, 401, "missing or wrong API key "
			      "(Authorization: Bearer KEY)", "invalid_request_error",
			      NULL, "WWW-Authenticate: Bearer\r\n");
		return;
	}
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		if (strlen(routes[i].path) != len ||
		    strncmp(routes[i].path, m->target.data, len))
			continue;
		if (m->method != routes[i].method &&
		    !(c->head_request && routes[i].method == HTTP_GET)) {
			snprintf(allow, sizeof(allow), "Allow: %s\r\n",
				 routes[i].method == HTTP_GET ? "GET, HEAD" :
				 http_method_str(routes[i].method));
			respond_error(srv, c, 405, "method not allowed",
				      "invalid_request_error", NULL, allow);
			return;
		}
		routes[i].fn(srv, c);
		return;
	}
	respond_error(srv, c, 404, "no such endpoint", "invalid_request_error",
		      NULL, NULL);
}

/*
 * Parse what the connection received; answer or submit whole requests.
 * Answers not yet sent past conn_buffer stop the parsing (the rest stays
 * in c->in, and with it full no recv is posted, so the kernel's window
 * closes on a client that sends without reading); a send that drains them
 * marks the connection and parsing goes on.
 */
static bool conn_process_input(struct http_server *srv, struct conn *c)
{
	bool did = false;

	while (conn_unparsed(c) && !c->busy && !c->closing && !c->close_after_send) {
		size_t used;
		enum http_read_status st;

		if (conn_buffered(c) >= srv->cfg->conn_buffer)
			return did;

		if (!c->request_start_ns)
			c->request_start_ns = clock_now_ns();
		st = http_reader_feed(&c->reader, c->in + c->in_start,
				      conn_unparsed(c), &used);
		c->in_start += (uint32_t)used;
		if (st == HTTP_READ_MORE)
			break;
		did = true;
		if (st == HTTP_READ_HEADERS) {
			if (c->reader.msg.expect_continue &&
			    strbuf_printf(&c->out.fill, "HTTP/1.1 100 Continue\r\n\r\n"))
				conn_drop(srv, c);
			continue;
		}
		if (st == HTTP_READ_ERROR) {
			c->keep_alive = false;
			respond_error(srv, c, c->reader.error_status, c->reader.error,
				      "invalid_request_error", NULL, NULL);
			break;
		}
		route(srv, c);
	}
	/* After a half-close nothing more comes: once every whole request
	 * is answered (a partial one never will be), close. */
	if (c->read_eof && !c->busy && !c->closing)
		c->close_after_send = true;
	return did;
}

/* ------------------------------------------------------------------------
 * I/O
 * ---------------------------------------------------------------------- */

static void conn_arm(struct http_server *srv, struct conn *c)
{
	if (c->closing)
		return;
	out_writer_arm(&c->out, srv->io, c->fd, true, &c->send_op);
	if (!c->out.inflight && c->close_after_send && !conn_buffered(c)) {
		conn_close(srv, c);
		return;
	}
	if (!c->recv_inflight && c->in_start) {	/* room for the next recv */
		memmove(c->in, c->in + c->in_start, conn_unparsed(c));
		c->in_len -= c->in_start;
		c->in_start = 0;
	}
	if (!c->recv_inflight && !c->read_eof && c->in_len < HTTP_IN_SIZE &&
	    !io_ring_recv(srv->io, c->fd, c->in + c->in_len,
			  HTTP_IN_SIZE - c->in_len, &c->recv_op))
		c->recv_inflight = true;
}

static void arm_accept(struct http_server *srv)
{
	if (srv->accepting && !srv->accept_inflight && !srv->accept_retry_ns &&
	    !io_ring_accept(srv->io, srv->listen_fd, &srv->accept_op))
		srv->accept_inflight = true;
}

/* Past --max-connections: a 503 written straight away, then close. */
static void refuse_connection(struct http_server *srv, int fd)
{
	static const char body[] = "{\"error\":{\"message\":\"too many connections\","
		"\"type\":\"server_error\",\"param\":null,\"code\":null}}";
	char msg[512];
	int n = snprintf(msg, sizeof(msg), "HTTP/1.1 503 Service Unavailable\r\n"
			 "Content-Type: application/json\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\nRetry-After: 1\r\n\r\n%s",
			 sizeof(body) - 1, body);

	/* Best effort, non-blocking: the answer fits any socket buffer. */
	if (write(fd, msg, (size_t)n) < 0)
		LOG(LOG_DEBUG, "refused connection: %s", strerror(errno));
	close(fd);
	srv->n_refused++;
	srv->n_status[503]++;
}

/*
 * recv returned 0: the client sent its last byte, which a half-close
 * (shutdown(SHUT_WR)) does as well as a close.  Both are answered (a
 * stream to its end); a client that really closed is told apart when
 * something is sent to it: its socket answers with a reset, which
 * conn_tick() finds.  A stream sends all the time; a plain HTTP/1.1
 * request that runs is sent an interim "100 Continue" now, which every
 * HTTP/1.1 client must accept before the answer (RFC 9110 15.2).
 */
static void conn_half_closed(struct http_server *srv, struct conn *c)
{
	size_t before = conn_buffered(c);

	c->read_eof = true;
	if (c->busy && !c->stream && c->reader.msg.http_minor == 1) {
		if (strbuf_printf(&c->out.fill, "HTTP/1.1 100 Continue\r\n\r\n")) {
			conn_drop(srv, c);
			return;
		}
		conn_note_output(c, before);
	}
	conn_mark(srv, c);
}

static void on_accept(struct http_server *srv, int fd)
{
	int one = 1, sndbuf = (int)srv->cfg->conn_buffer;
	struct conn *c;

	if (!srv->accepting) {
		close(fd);
		return;
	}
	if (!srv->n_free) {
		refuse_connection(srv, fd);
		return;
	}
	c = &srv->conns[srv->free_list[--srv->n_free]];
	if (!c->in && !(c->in = malloc(HTTP_IN_SIZE))) {
		srv->n_free++;
		close(fd);
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	c->fd = fd;
	c->in_len = c->in_start = 0;
	c->read_eof = false;
	c->head_request = false;
	c->busy = false;
	c->handle = REQUEST_NONE;
	c->request_start_ns = 0;
	c->idle_since_ns = clock_now_ns();
	srv->n_accepted++;
	conn_mark(srv, c);
}

/* The accept on the listening socket completed: res is the new socket. */
static void on_accept_done(struct io_op *op, int32_t res)
{
	struct http_server *srv = op->arg;

	srv->accept_inflight = false;
	if (res >= 0) {
		on_accept(srv, res);
	} else if (res != -EINTR && res != -ECONNABORTED && srv->accepting) {
		/* out of descriptors or memory: back off, then retry */
		LOG(LOG_WARN, "accept: %s", strerror(-res));
		srv->accept_retry_ns = clock_now_ns() + HTTP_ACCEPT_RETRY_NS;
	}
	arm_accept(srv);
}

/* A recv on the connection completed. */
static void conn_on_recv(struct io_op *op, int32_t res)
{
	struct http_server *srv = op->arg;
	struct conn *c = io_op_owner(op, struct conn, recv_op);

	if (c->fd < 0)
		return;
	c->recv_inflight = false;
	if (c->closing) {
		conn_close(srv, c);
		return;
	}
	if (res < 0) {	/* reset, or another error */
		conn_client_gone(srv, c);
		return;
	}
	if (res == 0) {	/* a FIN: a half-close until a send says otherwise */
		conn_half_closed(srv, c);
		return;
	}
	c->in_len += (uint32_t)res;
	conn_mark(srv, c);
}

/* A send on the connection completed. */
static void conn_on_send(struct io_op *op, int32_t res)
{
	struct http_server *srv = op->arg;
	struct conn *c = io_op_owner(op, struct conn, send_op);

	if (c->fd < 0)
		return;
	out_writer_done(&c->out, res);	/* drops the bytes sent */
	if (c->closing) {
		conn_close(srv, c);
		return;
	}
	if (res < 0) {
		conn_client_gone(srv, c);
		return;
	}
	c->last_progress_ns = clock_now_ns();
	if (c->paused && conn_buffered(c) <= srv->cfg->conn_buffer / 2) {
		c->paused = false;
		engine_resume(srv->e, c->handle);
	}
	conn_mark(srv, c);
}

/* What an engine callback noted for the connection (callbacks never
 * re-enter the engine).  Returns true if it did anything. */
static bool conn_do_due(struct http_server *srv, struct conn *c)
{
	if (c->drop_due) {
		c->drop_due = false;
		conn_drop(srv, c);
		return true;
	}
	if (c->pause_due) {
		c->pause_due = false;
		if (c->busy && c->paused) {	/* not resumed meanwhile */
			engine_pause(srv->e, c->handle);
			return true;
		}
	}
	return false;
}

static bool http_server_pump(void *ctx)
{
	struct http_server *srv = ctx;
	bool did = false;

	/* A connection marked while we work (its own answer marks it again)
	 * is appended and seen too; it left the ring before, so the ring
	 * holds each connection at most once. */
	while (srv->dirty_head != srv->dirty_tail) {
		struct conn *c = &srv->conns[srv->dirty[srv->dirty_head++ % srv->n_conns]];

		c->dirty = false;
		if (c->fd < 0)
			continue;
		did |= conn_do_due(srv, c);
		if (c->fd < 0 || c->closing)
			continue;
		did |= conn_process_input(srv, c);
		if (c->fd >= 0)
			conn_arm(srv, c);
	}
	arm_accept(srv);
	return did;
}

/* ------------------------------------------------------------------------
 * Engine callbacks
 * ---------------------------------------------------------------------- */

/* A connection a callback cannot serve (out of memory): dropped from
 * pump, where cancelling its request is allowed. */
static void conn_drop_later(struct http_server *srv, struct conn *c)
{
	c->drop_due = true;
	conn_mark(srv, c);
}

/* n more tokens of the request are final: one event. */
static void http_on_tokens(void *ctx, uint64_t cookie, const struct request *req,
			   const int32_t *tokens, uint32_t n)
{
	struct http_server *srv = ctx;
	struct conn *c = conn_of_cookie(srv, cookie);
	struct completion_meta m;
	size_t before;

	if (!c || !c->stream || c->drop_due)
		return;
	m = (struct completion_meta){ req->id, c->created, srv->cfg->model_name };
	srv->body.len = 0;
	before = conn_buffered(c);
	if (completion_format_event(&srv->body, &m, tokens, n, NULL, NULL) ||
	    put_chunk(&c->out.fill, &srv->body)) {
		conn_drop_later(srv, c);
		return;
	}
	c->n_sent += n;
	conn_note_output(c, before);
	conn_mark(srv, c);
	if (!c->paused && conn_buffered(c) >= srv->cfg->conn_buffer) {
		c->paused = true;
		c->pause_due = true;
		srv->n_pauses++;
	}
}

/* The last event of a stream, [DONE] and the end of the chunked body. */
static int stream_finish(struct http_server *srv, struct conn *c,
			 const struct frontend_result *r, const char *error)
{
	struct completion_meta m = { r->req->id, c->created, srv->cfg->model_name };
	struct completion_usage u = { r->req->n_prompt, r->n_generated };
	uint32_t n = r->n_tokens;

	srv->body.len = 0;
	if (r->reason == FINISH_STOP || r->reason == FINISH_LENGTH) {
		uint32_t from = c->n_sent < n ? c->n_sent : n;

		if (completion_format_event(&srv->body, &m,
					    r->tokens ? r->tokens + from : NULL, n - from,
					    finish_reason_names[r->reason], &u))
			return -1;
	} else {
		if (strbuf_append(&srv->body, "data: ", 6) ||
		    api_format_error(&srv->body, error, "server_error", NULL,
				     finish_reason_names[r->reason]) ||
		    strbuf_append(&srv->body, "\n\n", 2))
			return -1;
	}
	if (strbuf_append(&srv->body, "data: [DONE]\n\n", 14) ||
	    put_chunk(&c->out.fill, &srv->body) ||
	    strbuf_append(&c->out.fill, "0\r\n\r\n", 5))
		return -1;
	srv->body.len = 0;
	return 0;
}

/* The request ended: the answer, or the end of its stream. */
static void http_on_finish(void *ctx, uint64_t cookie, const struct frontend_result *r)
{
	struct http_server *srv = ctx;
	struct conn *c = conn_of_cookie(srv, cookie);
	/* The engine cancels requests the server did not give up on only
	 * when it shuts down (a second signal). */
	const char *error = r->error ? r->error :
			    r->reason == FINISH_CANCELLED ? "the server is shutting down" :
			    "request failed";
	struct completion_meta m;
	struct completion_usage u;
	size_t before;

	if (!c)
		return;		/* its client is gone */
	conn_detach(c);
	if (c->drop_due)
		return;		/* pump drops the connection */
	if (c->stream) {
		before = conn_buffered(c);
		if (stream_finish(srv, c, r, error)) {
			conn_drop(srv, c);
			return;
		}
		conn_note_output(c, before);
		conn_request_done(srv, c);
		return;
	}
	switch (r->reason) {
	case FINISH_STOP:
	case FINISH_LENGTH:
		m = (struct completion_meta){ r->req->id, c->created, srv->cfg->model_name };
		u = (struct completion_usage){ r->req->n_prompt, r->n_generated };
		srv->body.len = 0;
		if (completion_format(&srv->body, &m, r->tokens, r->n_tokens,
				      finish_reason_names[r->reason], &u)) {
			conn_drop(srv, c);
			return;
		}
		respond(srv, c, 200, "application/json", NULL);
		break;
	case FINISH_ERROR:
		respond_error(srv, c, 500, error, "server_error", NULL, NULL);
		break;
	default:
		respond_error(srv, c, 503, error, "server_error", NULL, NULL);
		break;
	}
}

/* ------------------------------------------------------------------------
 * Timeouts, draining, metrics
 * ---------------------------------------------------------------------- */

static uint64_t ms_ns(uint32_t ms)
{
	return (uint64_t)ms * 1000000ull;
}

/*
 * True when the client reset the connection.  Only needed while no recv is
 * posted (that would complete with the error): after a half-close, and
 * when the receive buffer is full of pipelined requests, where the reset
 * waits behind bytes nobody reads.  poll() reports it at once, whatever
 * is queued (POLLERR, POLLHUP).
 */
static bool conn_peer_reset(const struct conn *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLRDHUP };

	return poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP));
}

/* Check one connection's timers; returns its next deadline. */
static uint64_t conn_tick(struct http_server *srv, struct conn *c, uint64_t now)
{
	uint64_t due, peer_due = UINT64_MAX;

	if (c->busy && !c->recv_inflight) {
		if (conn_peer_reset(c)) {
			conn_client_gone(srv, c);
			return UINT64_MAX;
		}
		peer_due = now + HTTP_PEER_CHECK_NS;
	}
	if (conn_buffered(c) || c->paused) {
		due = c->last_progress_ns + ms_ns(srv->cfg->write_timeout_ms);
		if (now >= due) {
			LOG(LOG_INFO, "connection %u: no output progress in %u ms; "
			    "cancelling its request", (unsigned)(c - srv->conns),
			    srv->cfg->write_timeout_ms);
			srv->n_write_timeouts++;
			conn_drop(srv, c);
			return UINT64_MAX;
		}
		return due < peer_due ? due : peer_due;
	}
	if (c->busy)
		return peer_due;
	if (c->request_start_ns) {
		due = c->request_start_ns + ms_ns(srv->cfg->read_timeout_ms);
		if (now >= due) {
			c->keep_alive = false;
			respond_error(srv, c, 408, "the request did not arrive in time",
				      "invalid_request_error", NULL, NULL);
			return UINT64_MAX;
		}
		return due;
	}
	due = c->idle_since_ns + ms_ns(srv->cfg->idle_timeout_ms);
	if (now >= due) {
		conn_close(srv, c);
		return UINT64_MAX;
	}
	return due;
}

static uint64_t http_server_tick(void *ctx, uint64_t now)
{
	struct http_server *srv = ctx;
	uint64_t next = UINT64_MAX;

	if (srv->accept_retry_ns && now >= srv->accept_retry_ns) {
		srv->accept_retry_ns = 0;
		arm_accept(srv);
	}
	if (srv->accept_retry_ns)
		next = srv->accept_retry_ns;
	/* Scan when a timer is due, or when connections changed, but at most
	 * once per HTTP_TICK_NS: timeouts are seconds, not nanoseconds. */
	if (now < srv->next_tick_ns && !srv->rescan)
		return srv->next_tick_ns < next ? srv->next_tick_ns : next;
	if (now < srv->last_scan_ns + HTTP_TICK_NS) {
		uint64_t t = srv->last_scan_ns + HTTP_TICK_NS;

		return t < next ? t : next;
	}
	srv->rescan = false;
	srv->last_scan_ns = now;
	srv->next_tick_ns = UINT64_MAX;
	for (uint32_t i = 0; i < srv->n_conns; i++) {
		struct conn *c = &srv->conns[i];
		uint64_t due;

		if (c->fd < 0 || c->closing)
			continue;
		due = conn_tick(srv, c, now);
		if (due < srv->next_tick_ns)
			srv->next_tick_ns = due;
	}
	return srv->next_tick_ns < next ? srv->next_tick_ns : next;
}

/* Draining: close the listening socket, answer new requests 503. */
static void http_server_stop_accepting(struct http_server *srv)
{
	if (!srv->accepting)
		return;
	srv->accepting = false;
	/* A queued accept completes with an error once the socket closes. */
	shutdown(srv->listen_fd, SHUT_RDWR);
	close(srv->listen_fd);
	srv->listen_fd = -1;
	/* Idle keep-alive connections have nothing more coming. */
	for (uint32_t i = 0; i < srv->n_conns; i++) {
		struct conn *c = &srv->conns[i];

		if (c->fd >= 0 && !c->closing && !c->busy && !conn_buffered(c) &&
		    !conn_unparsed(c))
			conn_close(srv, c);
		else if (c->fd >= 0 && !c->busy)
			c->close_after_send = true;
	}
}

/* True when no connection has an answer still to send. */
static bool http_server_flushed(const struct http_server *srv)
{
	for (uint32_t i = 0; i < srv->n_conns; i++) {
		const struct conn *c = &srv->conns[i];

		if (c->fd >= 0 && !c->closing && conn_buffered(c))
			return false;
	}
	return true;
}

/* A server drains everything it accepted: waiting requests were promised
 * an answer too. */
static bool http_on_signal(void *ctx, int signo)
{
	LOG(LOG_WARN, "%s: draining (no new connections; every request "
	    "already accepted finishes); signal again to stop now",
	    strsignal(signo));
	http_server_stop_accepting(ctx);
	return true;
}

/* Drained: no new connections, every answer sent. */
static bool http_done(void *ctx)
{
	const struct http_server *srv = ctx;

	return !srv->accepting && http_server_flushed(srv);
}

const struct frontend_ops http_server_ops = {
	.on_tokens = http_on_tokens,
	.on_finish = http_on_finish,
	.pump = http_server_pump,
	.tick = http_server_tick,
	.on_signal = http_on_signal,
	.done = http_done,
	.before_sleep = NULL,
	.after_sleep = NULL,
};

int http_server_metrics(const struct http_server *srv, struct strbuf *out)
{
	uint32_t n_open = srv->n_conns - srv->n_free;
	char labels[32];
	bool first = true;
	int ret;

	ret = metrics_gauge(out, "dynbatch_http_connections",
			    "Open HTTP connections.", n_open);
	ret = ret ? ret : metrics_counter(out, "dynbatch_http_connections_accepted_total",
			"HTTP connections accepted.", NULL, srv->n_accepted);
	ret = ret ? ret : metrics_counter(out, "dynbatch_http_connections_refused_total",
			"Connections refused past --max-connections.", NULL, srv->n_refused);
	ret = ret ? ret : metrics_counter(out, "dynbatch_http_disconnect_cancels_total",
			"Requests cancelled because their client went away.", NULL,
			srv->n_disconnects);
	ret = ret ? ret : metrics_counter(out, "dynbatch_http_write_timeouts_total",
			"Requests cancelled after --write-timeout without output progress.",
			NULL, srv->n_write_timeouts);
	ret = ret ? ret : metrics_counter(out, "dynbatch_http_pauses_total",
			"Times a request gave up its slot for a slow reader.", NULL,
			srv->n_pauses);
	for (int s = 100; s < HTTP_STATUS_MAX && !ret; s++) {
		if (!srv->n_status[s])
			continue;
		snprintf(labels, sizeof(labels), "code=\"%d\"", s);
		ret = metrics_counter(out, "dynbatch_http_responses_total", first ?
				      "HTTP answers by status code." : NULL, labels,
				      srv->n_status[s]);
		first = false;
	}
	return ret ? -ENOMEM : 0;
}

/* ------------------------------------------------------------------------
 * Setup
 * ---------------------------------------------------------------------- */

/* Bind and listen on "host:port" ("[v6]:port" too).  fd or -1 with err. */
static int listen_on(const char *spec, char *err, size_t err_len, char *shown,
		     size_t shown_len)
{
	char host[256], port[16], hbuf[NI_MAXHOST], pbuf[NI_MAXSERV];
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	const char *colon = strrchr(spec, ':');
	size_t hl;
	uint32_t port_num;
	int fd = -1, one = 1, ret;

	if (!colon || colon == spec || !colon[1] ||
	    (size_t)(colon - spec) >= sizeof(host)) {
		snprintf(err, err_len, "--listen '%s': expected HOST:PORT", spec);
		return -1;
	}
	hl = (size_t)(colon - spec);
	if (spec[0] == '[' && hl >= 2 && spec[hl - 1] == ']') {
		memcpy(host, spec + 1, hl - 2);
		host[hl - 2] = '\0';
	} else {
		memcpy(host, spec, hl);
		host[hl] = '\0';
	}
	/* getaddrinfo() takes "65536" as port 0 and "99999" modulo 65536:
	 * the port is read here, digits only, 0..65535. */
	if (parse_u32(colon + 1, 0, 65535, &port_num)) {
		snprintf(err, err_len, "--listen '%s': the port must be a number "
			 "from 0 to 65535", spec);
		return -1;
	}
	snprintf(port, sizeof(port), "%u", port_num);
	ret = getaddrinfo(host, port, &hints, &res);
	if (ret) {
		snprintf(err, err_len, "--listen '%s': %s", spec, gai_strerror(ret));
		return -1;
	}
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 1024) ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl)) {
		snprintf(err, err_len, "--listen '%s': %s", spec, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(res);
		return -1;
	}
	freeaddrinfo(res);
	if (getnameinfo((struct sockaddr *)&ss, sl, hbuf, sizeof(hbuf), pbuf,
			sizeof(pbuf), NI_NUMERICHOST | NI_NUMERICSERV))
		snprintf(shown, shown_len, "%s", spec);
	else
		snprintf(shown, shown_len, strchr(hbuf, ':') ? "[%s]:%s" : "%s:%s",
			 hbuf, pbuf);
	return fd;
}

struct http_server *http_server_create(const struct http_config *cfg,
				       struct engine *e, struct io_ring *io,
				       const struct request_limits *lim,
				       char *err, size_t err_len)
{
	struct http_server *srv = calloc(1, sizeof(*srv));
	char shown[300];
	uint32_t n = cfg->max_connections;

	if (!srv) {
		snprintf(err, err_len, "out of memory");
		return NULL;
	}
	srv->cfg = cfg;
	srv->e = e;
	srv->io = io;
	srv->listen_fd = -1;
	srv->lim = *lim;
	srv->lim.id_optional = true;
	srv->conns = calloc(n, sizeof(*srv->conns));
	srv->free_list = calloc(n, sizeof(uint32_t));
	srv->dirty = calloc(n, sizeof(uint32_t));
	if (!srv->conns || !srv->free_list || !srv->dirty) {
		snprintf(err, err_len, "out of memory");
		http_server_destroy(srv);
		return NULL;
	}
	srv->n_conns = n;
	srv->accept_op = (struct io_op){ on_accept_done, srv };
	for (uint32_t i = 0; i < n; i++) {
		srv->conns[n - 1 - i].recv_op = (struct io_op){ conn_on_recv, srv };
		srv->conns[n - 1 - i].send_op = (struct io_op){ conn_on_send, srv };
		srv->conns[n - 1 - i].fd = -1;
		http_reader_init(&srv->conns[n - 1 - i].reader, &cfg->limits);
		srv->free_list[srv->n_free++] = n - 1 - i;
	}
	srv->listen_fd = listen_on(cfg->listen, err, err_len, shown, sizeof(shown));
	if (srv->listen_fd < 0) {
		http_server_destroy(srv);
		return NULL;
	}
	srv->started_s = (uint64_t)time(NULL);
	srv->accepting = true;
	fprintf(stderr, "dynbatch serve: listening on http://%s (model %s)\n",
		shown, cfg->model_name);
	arm_accept(srv);
	return srv;
}

void http_server_destroy(struct http_server *srv)
{
	if (!srv)
		return;
	for (uint32_t i = 0; srv->conns && i < srv->n_conns; i++) {
		struct conn *c = &srv->conns[i];

		if (c->fd >= 0)
			close(c->fd);
		http_reader_release(&c->reader);
		out_writer_release(&c->out);
		free(c->in);
	}
	if (srv->listen_fd >= 0)
		close(srv->listen_fd);
	strbuf_release(&srv->body);
	free(srv->conns);
	free(srv->free_list);
	free(srv->dirty);
	free(srv);
}
