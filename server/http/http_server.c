/*
 * http_server.c - see http_server.h.
 *
 * The connection side of the HTTP front end: accepting, recv and send
 * (through out_writer), timers, half-close and reset detection,
 * backpressure, draining, the work list, and the frontend_ops table
 * (pump, tick, on_signal, done), the lookup of each whole request in the
 * route table the server is given (API key, 404, 405) and the answers'
 * framing (respond(), respond_error()).  What a request gets (the
 * handlers, the engine callbacks on_tokens and on_finish) is the table's:
 * http_routes.c for the API; what a route may use of this side is
 * http_conn.h.  The notes below cover both files.
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
#include "server/http/http_server.h"
#include "server/http/chat_tools.h"
#include "server/http/http_cors.h"
#include "server/http/http_conn.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "engine/engine.h"
#include "io/io_ring.h"
#include "util/log.h"
#include "engine/metrics.h"
#include "io/out_writer.h"
#include "util/parse_num.h"
#include "engine/request.h"
#include "engine/request_pool.h"
#include "server/request/request_json.h"
#include "server/http/completion_api.h"
#include "server/http/tenant_http.h"
#include "server/http/tenant_table.h"

#define HTTP_IN_SIZE (64u * 1024)	/* receive buffer per connection */
#define HTTP_TICK_NS (5ull * 1000 * 1000)	/* timeout scan period */
#define HTTP_ACCEPT_RETRY_NS (50ull * 1000 * 1000)
#define HTTP_PEER_CHECK_NS (50ull * 1000 * 1000)	/* reset check, no recv posted */

/* ------------------------------------------------------------------------
 * Answers and routing
 * ---------------------------------------------------------------------- */

/* The request is answered: ready for the next one, or close after it. */
void conn_request_done(struct http_server *srv, struct conn *c)
{
	if (!c->keep_alive || !srv->accepting)
		c->close_after_send = true;
	c->head_request = false;
	c->cors_allow = NULL;
	http_reader_reset(&c->reader);
	c->request_start_ns = conn_unparsed(c) ? clock_now_ns() : 0;
	c->idle_since_ns = clock_now_ns();
	conn_mark(srv, c);
}

int conn_put_cors(const struct conn *c, struct strbuf *out)
{
	return cors_put_headers(out, c->cors_allow, c->cors_allow_len);
}

/* A whole answer with a body: head, srv->body, then the next request. */
void respond(struct http_server *srv, struct conn *c, int status,
	     const char *content_type, const char *extra_headers)
{
	size_t before = conn_buffered(c);
	bool close = !c->keep_alive || !srv->accepting;

	c->keep_alive = !close;
	if (status >= 0 && status < HTTP_STATUS_MAX)
		srv->n_status[status]++;
	/* 204 has no body, so no Content-Type or Content-Length either
	 * (RFC 9110 8.6) */
	if (strbuf_printf(&c->out.fill, "HTTP/1.1 %d %s\r\n", status,
			  http_status_text(status)) ||
	    (status != 204 &&
	     strbuf_printf(&c->out.fill, "Content-Type: %s\r\nContent-Length: %zu\r\n",
			   content_type, srv->body.len)) ||
	    conn_put_cors(c, &c->out.fill) ||
	    strbuf_printf(&c->out.fill, "%s%s\r\n", extra_headers ? extra_headers : "",
			  close ? "Connection: close\r\n" : "") ||
	    (!c->head_request &&
	     strbuf_append(&c->out.fill, srv->body.data, srv->body.len))) {
		LOG(LOG_ERROR, "out of memory answering a request");
		conn_drop(srv, c);
		return;
	}
	srv->body.len = 0;
	if (srv->body.cap > HTTP_KEEP_BUFFER)	/* a large answer's scratch */
		strbuf_release(&srv->body);
	conn_note_output(c, before);
	conn_request_done(srv, c);
}

void respond_error(struct http_server *srv, struct conn *c, int status,
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

/* Free what a non-streaming answer of n > 1 choices kept. */
void conn_choices_free(struct conn_choices *ch)
{
	for (uint32_t i = 0; ch->kept && i < ch->n; i++) {
		free(ch->kept[i].tokens);
		free(ch->kept[i].logprobs);
		free(ch->kept[i].text);
	}
	free(ch->kept);
	ch->kept = NULL;
	for (uint32_t i = 0; i < REQUEST_MAX_CHOICES; i++) {
		free(ch->echo[i]);
		ch->echo[i] = NULL;
		ch->echo_len[i] = 0;
	}
	for (uint32_t i = 0; ch->tool_held && i < ch->n; i++)
		strbuf_release(&ch->tool_held[i]);
	free(ch->tool_held);
	ch->tool_held = NULL;
	chat_tools_free(ch->tools);
	ch->tools = NULL;
}

/* Bearer-token check, in time independent of where the key differs.
 * With --tenants the key names c's tenant (none: refused). */
static bool authorized(const struct http_server *srv, struct conn *c)
{
	const struct strbuf *a = &c->reader.msg.authorization;
	const char *key = srv->cfg->api_key;
	size_t n;
	unsigned char diff = 0;

	if (srv->cfg->tenants) {
		c->tenant = a->len > 7 && !strncasecmp(a->data, "Bearer ", 7) ?
			tenant_table_find(srv->cfg->tenants, a->data + 7, a->len - 7) :
			NULL;
		return c->tenant != NULL;
	}
	if (!key)
		return true;
	n = strlen(key);
	if (a->len != 7 + n || strncasecmp(a->data, "Bearer ", 7))
		return false;
	for (size_t i = 0; i < n; i++)
		diff |= (unsigned char)(a->data[7 + i] ^ key[i]);
	return diff == 0;
}

/* A CORS preflight (http_cors.h): 204 for a listed origin and a known
 * path, before the key is checked; 403 for an origin not listed. */
static void preflight(struct http_server *srv, struct conn *c,
		      const struct http_route *r)
{
	struct strbuf headers = STRBUF_INIT;
	char allow[64];

	if (!c->cors_allow) {
		respond_error(srv, c, 403, "this origin may not call the API "
			      "(--allowed-origins)", "invalid_request_error",
			      NULL, NULL);
		return;
	}
	if (!r) {
		respond_error(srv, c, 404, "no such endpoint",
			      "invalid_request_error", NULL, NULL);
		return;
	}
	http_route_allow(r, allow, sizeof(allow));
	if (cors_put_preflight(&headers, &c->reader.msg, allow)) {
		strbuf_release(&headers);
		conn_drop(srv, c);
		return;
	}
	srv->body.len = 0;
	respond(srv, c, 204, "", headers.data);
	strbuf_release(&headers);
}

/*
 * Look c's whole request up in the server's route table: 401 without the
 * key (unless the route is open), 404 for no route, 405 for a method it
 * does not answer (with Allow), else its handler answers.
 */
static void route_request(struct http_server *srv, struct conn *c)
{
	const struct http_route_table *t = srv->cfg->routes;
	const struct http_message *m = &c->reader.msg;
	size_t len = strcspn(m->target.len ? m->target.data : "", "?");
	const struct http_route *r = NULL;
	char allow[64], header[80];

	c->keep_alive = m->keep_alive;
	/* HEAD is GET without the body (RFC 9110 9.3.2); respond() drops it. */
	c->head_request = m->method == HTTP_HEAD;
	c->cors_allow = cors_allow_origin(srv->cfg, m, &c->cors_allow_len);
	for (size_t i = 0; i < t->n_routes && !r; i++) {
		size_t n = strlen(t->routes[i].path);

		if ((n == len || (t->routes[i].prefix && n < len)) &&
		    !strncmp(t->routes[i].path, m->target.data, n))
			r = &t->routes[i];
	}
	if (cors_is_preflight(srv->cfg, m)) {
		preflight(srv, c, r);
		return;
	}
	if (!(r && r->open) && !authorized(srv, c)) {
		respond_error(srv, c, 401, "missing or wrong API key "
			      "(Authorization: Bearer KEY)", "invalid_request_error",
			      NULL, "WWW-Authenticate: Bearer\r\n");
		return;
	}
	if (!r) {
		respond_error(srv, c, 404, "no such endpoint",
			      "invalid_request_error", NULL, NULL);
		return;
	}
	if (!(r->methods & HTTP_ROUTE_METHOD(m->method)) &&
	    !(c->head_request && (r->methods & HTTP_ROUTE_METHOD(HTTP_GET)))) {
		http_route_allow(r, allow, sizeof(allow));
		snprintf(header, sizeof(header), "Allow: %s\r\n", allow);
		respond_error(srv, c, 405, "method not allowed",
			      "invalid_request_error", NULL, header);
		return;
	}
	r->handler(srv, c);
}

/* ------------------------------------------------------------------------
 * Closing
 * ---------------------------------------------------------------------- */

/* Give back what the connection's non-streamed answer reserved. */
void conn_release_answer(struct http_server *srv, struct conn *c)
{
	srv->answer_reserved -= c->answer_reserved;
	c->answer_reserved = 0;
}

static void conn_free(struct http_server *srv, struct conn *c)
{
	close(c->fd);
	c->fd = -1;
	c->in_len = c->in_start = 0;
	http_reader_reset(&c->reader);
	out_writer_release(&c->out);
	tenant_http_release(c);	/* a no-op once detached */
	conn_choices_free(&c->ch);
	conn_release_answer(srv, c);
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
uint32_t conn_detach(struct http_server *srv, struct conn *c)
{
	uint32_t handle = c->busy ? c->handle : REQUEST_NONE;

	tenant_http_release(c);	/* before the choices' counts go */
	c->busy = false;
	c->paused = false;
	c->handle = REQUEST_NONE;
	c->req_serial++;
	conn_choices_free(&c->ch);
	return handle;
}

/* Give up on the connection: cancel its request, close. */
void conn_drop(struct http_server *srv, struct conn *c)
{
	uint32_t handle = conn_detach(srv, c);

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
		route_request(srv, c);
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
	if (!c->busy && !conn_buffered(c)) {
		/* a whole answer is out: its reservation and the memory it
		 * took come back (a buffer grown for a large answer is not
		 * kept for a connection's lifetime) */
		conn_release_answer(srv, c);
		out_writer_trim(&c->out, HTTP_KEEP_BUFFER);
	}
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

/* The engine's callbacks go to the route table's (http_conn.h). */
static void http_on_tokens(void *ctx, uint64_t cookie, const struct request *req,
			   const int32_t *tokens,
			   const struct sampler_logprob *logprobs, uint32_t n,
			   const char *text, size_t text_len)
{
	const struct http_server *srv = ctx;

	srv->cfg->routes->on_tokens(ctx, cookie, req, tokens, logprobs, n, text,
				    text_len);
}

static void http_on_finish(void *ctx, uint64_t cookie,
			   const struct frontend_result *r)
{
	const struct http_server *srv = ctx;

	srv->cfg->routes->on_finish(ctx, cookie, r);
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
