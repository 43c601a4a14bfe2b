/*
 * loadgen.c - a load generator and protocol checker for `dynbatch serve`.
 *
 *   loadgen --port P [--host H] [--requests N] [--concurrency C] [--seed S]
 *           [--stream-frac F] [--disconnect-frac F] [--stall N]
 *           [--max-prompt P] [--max-tokens M] [--stop-frac F] [--vocab V]
 *           [--api-key KEY] [--requests-out FILE] [--results-out FILE]
 *           [--duration-s S] [--timeout-s S] [--strict] [--quiet]
 *           [--input FILE]
 *
 * C keep-alive connections, each sending POST /v1/completions one after
 * another until N requests were started (or --duration-s passed).  Every
 * answer is checked on the wire (HTTP framing, chunked encoding, SSE
 * events, the completion JSON, usage); every completed request goes to
 * --requests-out as a docs/DESIGN.md 3.1 input line and its tokens to
 * --results-out as a result line, so `refdecode --check` can verify the
 * tokens themselves.  Key=value figures go to stdout at the end.
 *
 * NOTES ON THE DESIGN
 *
 * One thread, one level-triggered epoll loop, non-blocking sockets: a
 * checker must not itself be the reason a server looks slow or racy, and
 * a single loop makes every timing a plain clock read.  Each connection
 * is a small state machine (enum conn_state); a function that ends a
 * request leaves the connection CS_IDLE and the loop hands it the next.
 *
 * Request n comes from a splitmix64 stream seeded by --seed and n (the
 * seed is printed first, always), so a failing request can be replayed
 * whatever order the connections happened to start them in.  With --input
 * FILE, request n is instead line n of a JSON Lines file (its prompt,
 * max_tokens and other fields as written, the id replaced; no n > 1), so a
 * benchmark can time its own workload (bench/bench_prefix.sh: shared
 * prefixes); --requests is then at most the file's lines.  Random stop tokens
 * almost never fire, so most stops are taken from the request's real
 * future output under sim:vocab=V,seed=0 (as gen_workload does); against
 * another model they simply fire less, which changes no verdict.
 *
 * Disconnects (--disconnect-frac) walk away (a) in the middle of the
 * body, (b) after the whole request but before reading any answer, or
 * (c) after k >= 1 stream events; half leave with RST (SO_LINGER 0), half
 * with FIN.  Stall clients (--stall) are extra connections beyond C, with
 * a tiny receive buffer, that send one long stream and never read: they
 * show whether one slow reader holds back the others.  They are not among
 * the N requests; at the end a drain tells whether the server closed them.
 *
 * Every request ends exactly one way: completed (a checked 200, written
 * out), disconnected (planned), failed (a 500 or a stream error event), or
 * a protocol error (printed with its id, the connection dropped).  A 429
 * is retried on the same id and counted.  A request with no progress for
 * --timeout-s is an error and stops new starts: the server is hung.
 *
 * Exit: 0 no protocol error, 1 protocol errors (or 500s with --strict),
 * 2 usage error.
 */
#include <errno.h>
#include "bench/loadgen/loadgen_internal.h"

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <jansson.h>

#include "util/clock.h"
#include "util/parse_num.h"
#include "model/sim_model.h"
#include "util/strbuf.h"

/* ------------------------------------------------------------------------
 * Connections
 */

static const char *const conn_state_name[] = {
	"idle", "connecting", "sending", "receiving", "backing off",
	"leaving", "stalled", "done",
};

static void conn_watch(struct lg *lg, struct lg_conn *c, uint32_t mask)
{
	struct epoll_event ev = { .events = mask, .data.ptr = c };
	int op = !c->ev_mask ? EPOLL_CTL_ADD : mask ? EPOLL_CTL_MOD :
		 EPOLL_CTL_DEL;

	if (mask == c->ev_mask || c->fd < 0)
		return;
	/* Cannot fail for a valid fd we own, short of ENOMEM. */
	if (epoll_ctl(lg->epfd, op, c->fd, &ev) == 0)
		c->ev_mask = mask;
}

static void conn_close(struct lg_conn *c, bool rst)
{
	struct linger lin = { .l_onoff = 1, .l_linger = 0 };

	if (c->fd < 0)
		return;
	/* Linger 0 makes close() send RST: the rude way to leave. */
	if (rst)
		setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lin, sizeof(lin));
	close(c->fd);		/* also drops it from the epoll set */
	c->fd = -1;
	c->ev_mask = 0;
	strbuf_consume(&c->in, c->in.len);
}

/* Leave a state that counts as busy for good. */
static void conn_retire(struct lg *lg, struct lg_conn *c,
			enum conn_state state)
{
	c->state = state;
	lg->n_busy--;
}

static void conn_free_req(struct lg_conn *c)
{
	json_decref(c->req.json);
	free(c->req.toks.v);
	memset(&c->req, 0, sizeof(c->req));
	c->has_req = false;
	http_reset(&c->resp);
}

/* Forget the request; a normal conn goes CS_IDLE, a stall client done. */
static void conn_end_req(struct lg *lg, struct lg_conn *c)
{
	conn_free_req(c);
	if (c->stall)
		conn_retire(lg, c, CS_DONE);
	else
		c->state = CS_IDLE;
}

static void conn_error(struct lg *lg, struct lg_conn *c, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* A protocol error: print it with the request id, drop the connection. */
static void conn_error(struct lg *lg, struct lg_conn *c, const char *fmt, ...)
{
	va_list ap;

	if (lg->st.protocol_errors++ == LG_MAX_PRINTED)
		fprintf(stderr, "loadgen: more protocol errors, not printed\n");
	if (lg->st.protocol_errors <= LG_MAX_PRINTED) {
		fprintf(stderr, "loadgen: protocol error: %s: ",
			c->has_req ? c->req.id : "(between requests)");
		va_start(ap, fmt);
		vfprintf(stderr, fmt, ap);
		va_end(ap);
		fputc('\n', stderr);
	}
	conn_close(c, false);
	if (c->has_req)
		conn_end_req(lg, c);
}

/* Walk away from the request as planned: it counts as disconnected. */
static void conn_abort(struct lg *lg, struct lg_conn *c)
{
	lg->st.disconnected++;
	conn_close(c, c->req.disc_rst);
	conn_end_req(lg, c);
}

static void conn_connect(struct lg *lg, struct lg_conn *c)
{
	int one = 1, rcvbuf = LG_STALL_RCVBUF;

	c->fd = socket(lg->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK |
		       SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		conn_error(lg, c, "socket: %s", strerror(errno));
		return;
	}
	lg->st.connections++;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* Before connect, so the window the server sees is small too. */
	if (c->stall)
		setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	if (connect(c->fd, (struct sockaddr *)&lg->addr, lg->addrlen) &&
	    errno != EINPROGRESS) {
		conn_error(lg, c, "connect: %s", strerror(errno));
		return;
	}
	c->state = CS_CONNECTING;
	c->progress_ns = clock_now_ns();
	conn_watch(lg, c, EPOLLOUT);
}

/* Lay out the request bytes and send them, connecting first if needed. */
static void conn_send_begin(struct lg *lg, struct lg_conn *c)
{
	struct lg_req *rq = &c->req;
	char *body;
	size_t hlen;
	int rc;

	json_object_set_new(rq->json, "stream", json_boolean(rq->stream));
	if (rq->stream)
		json_object_set_new(rq->json, "stream_options",
				    json_pack("{s:b}", "include_usage", 1));
	body = json_dumps(rq->json, JSON_COMPACT);
	json_object_del(rq->json, "stream");
	json_object_del(rq->json, "stream_options");
	strbuf_consume(&c->out, c->out.len);
	rc = !body || strbuf_printf(&c->out,
		"POST /v1/completions HTTP/1.1\r\nHost: %s:%s\r\n"
		"Content-Type: application/json\r\nContent-Length: %zu\r\n",
		lg->o.host, lg->o.port, strlen(body ? body : ""));
	if (!rc && lg->o.api_key)
		rc = strbuf_printf(&c->out, "Authorization: Bearer %s\r\n",
				   lg->o.api_key);
	hlen = c->out.len + 2;
	if (!rc)
		rc = strbuf_printf(&c->out, "\r\n%s", body);
	free(body);
	if (rc) {
		conn_error(lg, c, "out of memory");
		return;
	}
	/* Plan (a) sends the head and 0..len-1 bytes of the body. */
	if (rq->disc == DISC_PARTIAL)
		rq->disc_pick = hlen + rq->disc_pick % (c->out.len - hlen);
	c->out_off = 0;
	http_reset(&c->resp);
	if (c->fd < 0) {
		conn_connect(lg, c);
		return;
	}
	c->state = CS_SENDING;
	c->progress_ns = clock_now_ns();
	conn_watch(lg, c, EPOLLOUT | EPOLLIN);
}

/* Take the next request, or retire the conn when none is left. */
static void conn_next(struct lg *lg, struct lg_conn *c)
{
	if (lg->st.started >= lg->o.n_requests ||
	    clock_now_ns() >= lg->end_ns) {
		conn_close(c, false);
		conn_retire(lg, c, CS_DONE);
		return;
	}
	if (gen_request(lg, &c->req, false, lg->st.started)) {
		conn_error(lg, c, "out of memory");
		conn_retire(lg, c, CS_DONE);
		return;
	}
	lg->st.started++;
	c->has_req = true;
	conn_send_begin(lg, c);
}

static void conn_on_connect(struct lg *lg, struct lg_conn *c)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
		conn_error(lg, c, "connect: %s", strerror(err ? err : errno));
		return;
	}
	c->state = CS_SENDING;
	c->progress_ns = clock_now_ns();
	conn_watch(lg, c, EPOLLOUT | EPOLLIN);
}

static void conn_write(struct lg *lg, struct lg_conn *c)
{
	struct lg_req *rq = &c->req;
	size_t limit = rq->disc == DISC_PARTIAL ? rq->disc_pick : c->out.len;
	ssize_t n;

	n = send(c->fd, c->out.data + c->out_off, limit - c->out_off,
		 MSG_NOSIGNAL);
	if (n < 0) {
		if (errno != EAGAIN && errno != EINTR)
			conn_error(lg, c, "send: %s", strerror(errno));
		return;
	}
	if (!c->out_off)
		rq->t_start_ns = clock_now_ns();
	c->out_off += (size_t)n;
	c->progress_ns = clock_now_ns();
	if (c->out_off < limit)
		return;
	if (rq->disc == DISC_PARTIAL) {
		conn_abort(lg, c);
	} else if (rq->disc == DISC_BEFORE_ANSWER) {
		/* A moment later, so some are cancelled mid-decode. */
		c->state = CS_ABORT_WAIT;
		c->wake_ns = c->progress_ns + rnd(lg) % LG_ABORT_WAIT_NS;
		conn_watch(lg, c, EPOLLIN);
	} else if (c->stall) {
		/* Never read; unwatched, so its pending data cannot spin us. */
		conn_watch(lg, c, 0);
		conn_retire(lg, c, CS_STALLED);
	} else {
		c->state = CS_RECEIVING;
		conn_watch(lg, c, EPOLLIN);
	}
}

/* ------------------------------------------------------------------------
 * Answers
 */

/* A 200 answer checked in full: count it, time it, write it out. */
static void conn_completed(struct lg *lg, struct lg_conn *c)
{
	struct lg_req *rq = &c->req;
	uint64_t now = clock_now_ns();
	double span_ms = (double)(rq->t_last_tok_ns - rq->t_first_tok_ns) / 1e6;
	size_t i;

	lg->st.completed++;
	lg->st.tokens += rq->toks.n;
	samples_add(&lg->st.latency_ms, (double)(now - rq->t_start_ns) / 1e6);
	if (rq->stream && rq->t_first_ns)
		samples_add(&lg->st.ttft_ms,
			    (double)(rq->t_first_ns - rq->t_start_ns) / 1e6);
	/* Tokens in one event have no spacing to measure. */
	if (rq->stream && rq->toks.n >= 2 && span_ms > 0) {
		samples_add(&lg->st.tpot_ms, span_ms / (double)(rq->toks.n - 1));
		samples_add(&lg->st.rate_tps, (double)rq->toks.n * 1e3 / span_ms);
	}
	if (lg->req_out) {
		json_dumpf(rq->json, lg->req_out, JSON_COMPACT);
		fputc('\n', lg->req_out);
	}
	if (lg->res_out) {
		fprintf(lg->res_out, "{\"id\":\"%s\",\"tokens\":[", rq->id);
		for (i = 0; i < rq->toks.n; i++)
			fprintf(lg->res_out, i ? ",%d" : "%d", rq->toks.v[i]);
		fprintf(lg->res_out, "],\"finish_reason\":\"%s\"}\n", rq->finish);
	}
	conn_end_req(lg, c);
}

/* A 500 (or a stream error event): the engine failed the request. */
static void conn_failed(struct lg *lg, struct lg_conn *c, const char *msg)
{
	lg->st.failed++;
	if (!lg->o.quiet)
		fprintf(stderr, "loadgen: failed: %s: %s\n", c->req.id, msg);
	conn_end_req(lg, c);
}

/* A 429: the same request again after a short, growing backoff. */
static void conn_backoff(struct lg *lg, struct lg_conn *c)
{
	uint32_t k = c->req.n_retries < 5 ? c->req.n_retries : 5;

	lg->st.rejected429++;
	if (!c->resp.has_retry_after) {
		conn_error(lg, c, "429 without a valid Retry-After");
		return;
	}
	if (++c->req.n_retries > LG_MAX_RETRIES) {
		conn_error(lg, c, "still 429 after %d retries", LG_MAX_RETRIES);
		return;
	}
	/* Shorter than Retry-After on purpose: we are here to push. */
	c->wake_ns = clock_now_ns() + ((5ull << k) + rnd_below(lg, 5)) * 1000000;
	c->state = CS_BACKOFF;
	conn_watch(lg, c, EPOLLIN);
}

/* A non-200 answer: 429 retried, 500 failed, anything else an error. */
static void conn_answer_error(struct lg *lg, struct lg_conn *c)
{
	struct http_resp *r = &c->resp;
	json_t *obj = json_loadb(r->body.data ? r->body.data : "",
				 r->body.len, 0, NULL);
	const char *msg = error_message(obj);

	if (!msg || !r->json)
		conn_error(lg, c, "status %d: no application/json error body: '%.60s'",
			   r->status, r->body.data ? r->body.data : "");
	else if (r->status == 429)
		conn_backoff(lg, c);
	else if (r->status == 500)
		conn_failed(lg, c, msg);
	else
		conn_error(lg, c, "status %d: %s", r->status, msg);
	json_decref(obj);
}

/* A 200 answer without streaming: one JSON body. */
static void conn_answer_whole(struct lg *lg, struct lg_conn *c)
{
	struct http_resp *r = &c->resp;
	json_error_t jerr;
	json_t *obj;

	if (!r->json || r->event_stream) {
		conn_error(lg, c, "non-stream answer is not application/json");
		return;
	}
	obj = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0,
			 &jerr);
	if (!obj)
		conn_error(lg, c, "body is not JSON: %s", jerr.text);
	else if (check_completion(lg, r, &c->req, obj, false) < 0)
		conn_error(lg, c, "%s", r->err);
	else
		conn_completed(lg, c);
	json_decref(obj);
}

/* The whole answer is in: judge it, then free or close the connection. */
static void conn_answer(struct lg *lg, struct lg_conn *c)
{
	struct http_resp *r = &c->resp;
	struct lg_req *rq = &c->req;
	bool close_after = r->close || c->state == CS_SENDING;

	/* We never pipeline, so nothing may follow the answer. */
	if (c->in.len) {
		conn_error(lg, c, "%zu bytes after the answer", c->in.len);
		return;
	}
	if (r->status != 200)
		conn_answer_error(lg, c);
	else if (!rq->stream)
		conn_answer_whole(lg, c);
	else if (!r->event_stream || !r->chunked)
		conn_error(lg, c, "stream answer is not chunked text/event-stream");
	else if (rq->errored)
		conn_failed(lg, c, rq->err_msg);
	else if (r->body.len)
		conn_error(lg, c, "stream ends inside an event");
	else if (!rq->final_seen || !rq->done_seen)
		conn_error(lg, c, "stream ended without %s",
			   rq->final_seen ? "[DONE]" : "a finish_reason");
	else
		conn_completed(lg, c);
	/* Half-sent (the server answered early) or told: not reusable. */
	if (close_after)
		conn_close(c, false);
}

/*
 * Check every complete event of a stream so far.  0 go on, -1 the
 * request ended here (error or planned disconnect).
 */
static int conn_events(struct lg *lg, struct lg_conn *c)
{
	struct strbuf *body = &c->resp.body;
	const char *end;
	size_t n;

	while (body->len && (end = memmem(body->data, body->len, "\n\n", 2))) {
		n = (size_t)(end - body->data);
		if (sse_event(lg, c, body->data, n, &lg->sse_data)) {
			conn_error(lg, c, "%s", c->resp.err);
			return -1;
		}
		strbuf_consume(body, n + 2);
		if (c->req.disc == DISC_MID_STREAM && !c->req.final_seen &&
		    c->req.n_events >= c->req.disc_at) {
			conn_abort(lg, c);
			return -1;
		}
	}
	return 0;
}

/* The peer closed or reset: fine between requests, an error inside one. */
static void conn_eof(struct lg *lg, struct lg_conn *c, int err)
{
	if (c->state == CS_BACKOFF) {
		conn_close(c, false);
		return;
	}
	conn_error(lg, c, "connection closed by the server %s while %s%s%s%s",
		   c->resp.phase == HP_HEAD ? "before the answer" :
		   "in the middle of the answer", conn_state_name[c->state],
		   err ? " (" : "", err ? strerror(err) : "", err ? ")" : "");
}

static void conn_read(struct lg *lg, struct lg_conn *c)
{
	char buf[LG_READ_BYTES];
	ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
	int rc;

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		conn_eof(lg, c, n < 0 ? errno : 0);
		return;
	}
	c->progress_ns = clock_now_ns();
	if (c->state == CS_BACKOFF) {
		conn_error(lg, c, "%zd bytes on an idle connection", n);
		return;
	}
	if (strbuf_append(&c->in, buf, (size_t)n)) {
		conn_error(lg, c, "out of memory");
		return;
	}
	rc = http_feed(&c->resp, &c->in);
	if (rc < 0) {
		conn_error(lg, c, "%s", c->resp.err);
		return;
	}
	/* Events are timed as they arrive, not when the answer ends. */
	if (c->resp.status == 200 && c->req.stream && c->resp.event_stream &&
	    conn_events(lg, c))
		return;
	if (rc == 1)
		conn_answer(lg, c);
}

static void conn_on_event(struct lg *lg, struct lg_conn *c, uint32_t ev)
{
	switch (c->state) {
	case CS_CONNECTING:
		conn_on_connect(lg, c);
		break;
	case CS_SENDING:
		/* Read first: an early answer (413, 400) beats our EPIPE. */
		if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))
			conn_read(lg, c);
		if (c->state == CS_SENDING && (ev & EPOLLOUT))
			conn_write(lg, c);
		break;
	case CS_RECEIVING:
	case CS_BACKOFF:
		conn_read(lg, c);
		break;
	case CS_ABORT_WAIT:
		/* Answer bytes or a close: leave now, still unread. */
		conn_abort(lg, c);
		break;
	default:
		break;
	}
	if (c->state == CS_IDLE)
		conn_next(lg, c);
}

/* Wake backoffs and planned aborts; call a conn with no progress hung. */
static void lg_timers(struct lg *lg, uint64_t now)
{
	uint64_t timeout_ns = (uint64_t)(lg->o.timeout_s * 1e9);
	struct lg_conn *c;
	uint32_t i;

	for (i = 0; i < lg->n_conns; i++) {
		c = &lg->conns[i];
		switch (c->state) {
		case CS_BACKOFF:
			if (now >= c->wake_ns)
				conn_send_begin(lg, c);
			break;
		case CS_ABORT_WAIT:
			if (now >= c->wake_ns)
				conn_abort(lg, c);
			break;
		case CS_CONNECTING:
		case CS_SENDING:
		case CS_RECEIVING:
			if (now - c->progress_ns <= timeout_ns)
				break;
			/* A hung server hangs every later request too. */
			lg->end_ns = 0;
			conn_error(lg, c, "no progress for %.1f s while %s; starting no more requests",
				   lg->o.timeout_s, conn_state_name[c->state]);
			break;
		default:
			break;
		}
		if (c->state == CS_IDLE)
			conn_next(lg, c);
	}
}

/* ------------------------------------------------------------------------
 * The run
 */

/*
 * After the run: did the server close each stall client?  Drain what it
 * sent; EOF or RST means closed, EAGAIN means it is still open, unless
 * --stall-wait-s allows waiting for it (a server's write timeout may end
 * just after the other clients do).
 */
static uint32_t lg_stall_check(struct lg *lg)
{
	uint64_t deadline = clock_now_ns() + (uint64_t)(lg->o.stall_wait_s * 1e9);
	char buf[LG_READ_BYTES];
	uint32_t i, n_closed = 0;
	struct lg_conn *c;
	ssize_t n;

	for (i = 0; i < lg->o.n_stall; i++) {
		c = &lg->conns[i];
		if (c->state != CS_STALLED)
			continue;
		for (;;) {
			uint64_t now;
			struct pollfd pfd = { .fd = c->fd, .events = POLLIN };

			do
				n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
			while (n > 0);
			if (n == 0 || (errno != EAGAIN && errno != EINTR))
				break;
			now = clock_now_ns();
			if (now >= deadline)
				break;
			poll(&pfd, 1, (int)((deadline - now) / 1000000) + 1);
		}
		if (n == 0 || (errno != EAGAIN && errno != EINTR))
			n_closed++;
		conn_close(c, false);
		conn_free_req(c);
		c->state = CS_DONE;
	}
	return n_closed;
}

static int lg_run(struct lg *lg)
{
	struct epoll_event evs[LG_MAX_EVENTS];
	uint64_t now, last_tick = 0;
	uint32_t i;
	int n, k;

	lg->t0_ns = clock_now_ns();
	lg->end_ns = lg->o.duration_s > 0 ?
		     lg->t0_ns + (uint64_t)(lg->o.duration_s * 1e9) : UINT64_MAX;
	lg->n_busy = lg->n_conns;
	/* Stall clients first, so they are in place before the load. */
	for (i = 0; i < lg->n_conns; i++) {
		struct lg_conn *c = &lg->conns[i];

		if (!c->stall) {
			conn_next(lg, c);
		} else if (gen_request(lg, &c->req, true, i)) {
			fprintf(stderr, "loadgen: out of memory\n");
			return -ENOMEM;
		} else {
			c->has_req = true;
			conn_send_begin(lg, c);
		}
	}
	while (lg->n_busy) {
		/* 1 ms: timers (backoff, abort, timeout) need no finer. */
		n = epoll_wait(lg->epfd, evs, LG_MAX_EVENTS, 1);
		if (n < 0 && errno != EINTR) {
			fprintf(stderr, "loadgen: epoll_wait: %s\n", strerror(errno));
			return -errno;
		}
		for (k = 0; k < n; k++)
			conn_on_event(lg, evs[k].data.ptr, evs[k].events);
		now = clock_now_ns();
		if (now - last_tick >= LG_TICK_NS) {
			lg_timers(lg, now);
			last_tick = now;
		}
	}
	return 0;
}

static void lg_report(struct lg *lg, double elapsed_s, uint32_t n_closed)
{
	struct lg_stats *s = &lg->st;
	double rps = (double)s->completed / elapsed_s;
	double tps = (double)s->tokens / elapsed_s;

	printf("requests_started=%" PRIu64 "\n", s->started);
	printf("completed=%" PRIu64 "\n", s->completed);
	printf("disconnected=%" PRIu64 "\n", s->disconnected);
	printf("failed=%" PRIu64 "\n", s->failed);
	printf("rejected429=%" PRIu64 "\n", s->rejected429);
	printf("protocol_errors=%" PRIu64 "\n", s->protocol_errors);
	printf("connections=%" PRIu64 "\n", s->connections);
	printf("completion_tokens=%" PRIu64 "\n", s->tokens);
	printf("elapsed_s=%.3f\n", elapsed_s);
	printf("req_per_s=%.1f\n", rps);
	printf("tokens_per_s=%.1f\n", tps);
	printf("ttft_p50_ms=%.3f\n", samples_pct(&s->ttft_ms, 50));
	printf("ttft_p99_ms=%.3f\n", samples_pct(&s->ttft_ms, 99));
	printf("tpot_p50_ms=%.3f\n", samples_pct(&s->tpot_ms, 50));
	printf("tpot_p99_ms=%.3f\n", samples_pct(&s->tpot_ms, 99));
	printf("latency_p50_ms=%.3f\n", samples_pct(&s->latency_ms, 50));
	printf("latency_p99_ms=%.3f\n", samples_pct(&s->latency_ms, 99));
	printf("stream_rate_min_tps=%.1f\n", samples_pct(&s->rate_tps, 0));
	printf("stream_rate_p50_tps=%.1f\n", samples_pct(&s->rate_tps, 50));
	printf("stalled_clients=%u\nstalled_closed=%u\n", lg->o.n_stall,
	       n_closed);
	printf("stalled: %u clients, %u closed by the server\n",
	       lg->o.n_stall, n_closed);
	if (!lg->o.quiet)
		printf("loadgen: %" PRIu64 " started, %" PRIu64 " completed, %" PRIu64 " disconnected, %" PRIu64 " failed, %" PRIu64 " 429s, %" PRIu64 " protocol errors in %.3f s: %.0f req/s, %.0f tokens/s, latency p50 %.2f ms p99 %.2f ms\n",
		       s->started, s->completed, s->disconnected, s->failed,
		       s->rejected429, s->protocol_errors, elapsed_s, rps, tps,
		       samples_pct(&s->latency_ms, 50),
		       samples_pct(&s->latency_ms, 99));
}


static int lg_resolve(struct lg *lg)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai;
	int rc = getaddrinfo(lg->o.host, lg->o.port, &hints, &ai);

	if (rc) {
		fprintf(stderr, "loadgen: --host %s: %s\n", lg->o.host,
			gai_strerror(rc));
		return -EINVAL;
	}
	memcpy(&lg->addr, ai->ai_addr, ai->ai_addrlen);
	lg->addrlen = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

/* Room for every socket: C + stall clients may pass the soft limit. */
static void raise_fd_limit(uint32_t need)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= need + 64u)
		return;
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
}

/* Free what the run left: a timed-out run leaves requests in flight. */
static void lg_destroy(struct lg *lg)
{
	struct lg_conn *c;
	uint32_t i;

	for (i = 0; lg->conns && i < lg->n_conns; i++) {
		c = &lg->conns[i];
		conn_close(c, false);
		conn_free_req(c);
		strbuf_release(&c->out);
		strbuf_release(&c->in);
		strbuf_release(&c->resp.body);
	}
	free(lg->conns);
	for (uint64_t k = 0; k < lg->o.n_lines; k++)
		json_decref(lg->o.lines[k]);
	free(lg->o.lines);
	free(lg->st.ttft_ms.v);
	free(lg->st.tpot_ms.v);
	free(lg->st.latency_ms.v);
	free(lg->st.rate_tps.v);
	strbuf_release(&lg->sse_data);
	if (lg->epfd >= 0)
		close(lg->epfd);
}

static FILE *open_out(const char *path)
{
	FILE *f = path ? fopen(path, "w") : NULL;

	if (path && !f)
		fprintf(stderr, "loadgen: %s: %s\n", path, strerror(errno));
	return f;
}

int main(int argc, char **argv)
{
	struct lg lg = {
		.o = {
			.host = "127.0.0.1", .n_requests = 1000,
			.concurrency = 64, .stream_frac = 0.5, .stop_frac = 0.3,
			.max_prompt = 64, .max_tokens = 64, .vocab = 32000,
			.timeout_s = 60,
		},
	};
	uint32_t n_closed, i;
	double elapsed_s;
	int rc = 2;

	if (parse_opts(argc, argv, &lg.o) || lg_resolve(&lg) ||
	    (lg.o.input && load_input(&lg.o)))
		return 2;
	printf("seed=%" PRIu64 "\n", lg.o.seed);
	fflush(stdout);
	signal(SIGPIPE, SIG_IGN);	/* MSG_NOSIGNAL covers send(); belt */
	lg.n_conns = lg.o.concurrency + lg.o.n_stall;
	raise_fd_limit(lg.n_conns);
	lg.conns = calloc(lg.n_conns, sizeof(*lg.conns));
	for (i = 0; lg.conns && i < lg.n_conns; i++) {
		lg.conns[i].fd = -1;
		lg.conns[i].stall = i < lg.o.n_stall;
	}
	lg.epfd = epoll_create1(EPOLL_CLOEXEC);
	lg.req_out = open_out(lg.o.requests_out);
	lg.res_out = open_out(lg.o.results_out);
	if ((lg.o.requests_out && !lg.req_out) ||
	    (lg.o.results_out && !lg.res_out))
		goto out;	/* a bad path is a usage error: 2 */
	rc = 1;
	if (!lg.conns || lg.epfd < 0) {
		fprintf(stderr, "loadgen: setup: %s\n", strerror(errno));
		goto out;
	}
	if (lg_run(&lg))
		goto out;
	elapsed_s = (double)(clock_now_ns() - lg.t0_ns) / 1e9;
	n_closed = lg_stall_check(&lg);
	lg_report(&lg, elapsed_s, n_closed);
	rc = lg.st.protocol_errors || (lg.o.strict && lg.st.failed);
out:
	/* A truncated results file would make the caller's check lie. */
	if ((lg.req_out && fclose(lg.req_out)) +
	    (lg.res_out && fclose(lg.res_out))) {
		fprintf(stderr, "loadgen: writing the output files failed\n");
		rc = 1;
	}
	lg_destroy(&lg);
	return rc;
}
