/*
 * http_conn.h - the connection API of the HTTP front end: what a route
 * (http_routes.c) may use of the connection side (http_server.c).
 *
 * A route is one row of a struct http_route_table (method set, path,
 * handler); the server is given the table (http_config.routes) and looks
 * each whole request up in it: the API key, 404 and 405 are decided
 * there, from the table, and a handler is called only for a request it
 * may answer.  A handler answers with respond() / respond_error(), or
 * submits to the engine and answers from the table's on_tokens /
 * on_finish callbacks, which the server's frontend_ops forward to.  It
 * may read and set the fields of struct conn and struct http_server
 * below, and call the conn_*() functions here; nothing in http_server.c
 * calls a route by name (STYLE.md "Boundaries between parts": data flows
 * down, server -> table).
 */
#ifndef DYNBATCH_HTTP_CONN_H
#define DYNBATCH_HTTP_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/clock.h"
#include "engine/frontend.h"
#include "server/http/http_reader.h"
#include "server/http/http_config.h"
#include "io/io_ring.h"
#include "io/out_writer.h"
#include "engine/request.h"
#include "server/http/logprob_text.h"
#include "engine/request_pool.h"
#include "util/strbuf.h"
#include "server/request/request_json.h"

struct chat_tool_set;

struct tenant;

#define HTTP_STATUS_MAX 600
/* A connection's output buffers, and the answer scratch, keep at most
 * this much memory once what they held has been sent. */
#define HTTP_KEEP_BUFFER (256u << 10)

/* A finished choice, kept until the request's last one ends. */
struct http_choice {
	int32_t *tokens;		/* malloc'd */
	uint32_t n_tokens;
	struct sampler_logprob *logprobs; /* malloc'd, or NULL */
	char *text;			/* malloc'd, or NULL */
	size_t text_len;
	enum finish_reason reason;
};

/*
 * The choices of a connection's request ("n"): each is a live request of
 * the engine (engine_submit), answered on its own; the connection's
 * answer is complete when the last one ends.  conn.handle is one of the
 * live ones (pause, resume and cancel reach them all through it).
 */
struct conn_choices {
	uint32_t n;			/* the request's choices, all prompts' */
	uint32_t n_done;		/* choices that ended */
	uint32_t handles[REQUEST_MAX_CHOICES];	/* REQUEST_NONE once ended */
	uint32_t n_generated;		/* usage: all choices together */
	struct http_choice *kept;	/* not streaming, n > 1: n entries */
	bool failed;			/* a choice ended otherwise than stop
					 * or length: the answer is an error */
	enum finish_reason fail_reason;
	char fail_msg[256];
	/* per choice, where its logprobs' next tokens start (a stream's
	 * events go on from the last one's end) */
	struct logprob_ctx lp[REQUEST_MAX_CHOICES];
	/* a batch's prompts: n is n_prompts x per, prompt-major
	 * (request_flat_choice()); per is each prompt's n, or best_of */
	uint32_t n_prompts;
	uint32_t per;
	uint32_t n_prompt_tokens;	/* usage: every prompt once */
	/* best_of: the n of each prompt's per candidates answered (0: all
	 * are); hide_logprobs: their logprobs were not asked for */
	uint32_t n_best;
	bool hide_logprobs;
	/* completions' "echo": prompt i's text before each of its choices'
	 * (malloc'd, echo_len[i] bytes); NULL: none */
	char *echo[REQUEST_MAX_CHOICES];
	size_t echo_len[REQUEST_MAX_CHOICES];
	/* chat's function tools (chat_tools.h), NULL: none; and per choice
	 * of a stream, the text held back because it may be a tool call
	 * (n entries, malloc'd with the tools) */
	struct chat_tool_set *tools;
	struct strbuf *tool_held;
};


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
	bool chat;			/* /v1/chat/completions: chat shapes */
	bool include_usage;		/* a stream's last event: the usage */
	bool paused;			/* we paused it: output buffer full */
	bool pause_due;			/* engine_pause() it from pump */
	bool drop_due;			/* out of memory in a callback: drop
					 * the connection from pump */
	bool keep_alive;
	bool head_request;		/* HEAD: answered as GET, without the body */
	/* the request's Access-Control-Allow-Origin (http_cors.h), NULL:
	 * none; points into the config, lives as long as the server */
	const char *cors_allow;
	size_t cors_allow_len;
	struct conn_choices ch;		/* its n choices */
	/* --tenants: whose key the last request gave (NULL: none); the
	 * tenant the live request reserved from and how much (NULL: it
	 * holds nothing; tenant_http.h) */
	struct tenant *tenant;
	struct tenant *tenant_held;
	uint64_t tenant_reserved;
	uint64_t tenant_prompt;
	uint64_t tenant_streamed;	/* tokens seen of its live choices */
	char rate_headers[384];		/* its tenant's x-ratelimit-* at
					 * admission, for the 200 answer
					 * ("": no --tenants) */
	uint64_t answer_reserved;	/* bytes of srv->answer_reserved its
					 * non-streamed answer holds, until it
					 * has been sent */
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
	/* bytes the live non-streamed answers may grow to, reserved at
	 * admission (answer_bound()); at most cfg->answer_budget */
	uint64_t answer_reserved;
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

static inline void conn_mark(struct http_server *srv, struct conn *c)
{
	srv->rescan = true;	/* its timers may have changed */
	if (c->dirty)
		return;
	c->dirty = true;
	srv->dirty[srv->dirty_tail++ % srv->n_conns] = (uint32_t)(c - srv->conns);
}

/* Received bytes not parsed yet. */
static inline uint32_t conn_unparsed(const struct conn *c)
{
	return c->in_len - c->in_start;
}

/* Answer bytes not sent yet (the send in flight included). */
static inline size_t conn_buffered(const struct conn *c)
{
	return out_writer_pending(&c->out);
}

static inline void conn_note_output(struct conn *c, size_t before)
{
	if (!before)	/* output starts moving now: its clock starts */
		c->last_progress_ns = clock_now_ns();
}

/* ------------------------------------------------------------------------
 * The route table
 * ---------------------------------------------------------------------- */

/* A method in struct http_route's set (http_parser's enum http_method). */
#define HTTP_ROUTE_METHOD(m) (1u << (m))

struct http_route {
	const char *path;		/* matched exactly (prefix: as a prefix
					 * of a longer path); a query is ignored */
	unsigned methods;		/* HTTP_ROUTE_METHOD()s it answers; GET
					 * answers HEAD too, without the body */
	bool open;			/* answered without the API key */
	void (*handler)(struct http_server *srv, struct conn *c);
	bool prefix;			/* path ends in '/': it and what follows */
};

struct http_route_table {
	const struct http_route *routes;
	size_t n_routes;
	/* the engine's callbacks (frontend.h) for what the handlers
	 * submitted; the server's frontend_ops forward to these */
	void (*on_tokens)(void *ctx, uint64_t cookie, const struct request *req,
			  const int32_t *tokens,
			  const struct sampler_logprob *logprobs, uint32_t n,
			  const char *text, size_t text_len);
	void (*on_finish)(void *ctx, uint64_t cookie,
			  const struct frontend_result *r);
};

/* ------------------------------------------------------------------------
 * Connection functions (http_server.c)
 * ---------------------------------------------------------------------- */

/* Forget the connection's request: later callbacks for it find nothing.
 * Returns the handle to cancel, or REQUEST_NONE. */
uint32_t conn_detach(struct http_server *srv, struct conn *c);
/* Give back what the connection's non-streamed answer reserved. */
void conn_release_answer(struct http_server *srv, struct conn *c);
/* Give up on the connection: cancel its request, close. */
void conn_drop(struct http_server *srv, struct conn *c);
/* Free what a non-streaming answer of n > 1 choices kept. */
void conn_choices_free(struct conn_choices *ch);
/* The request is answered: ready for the next one, or close after it. */
void conn_request_done(struct http_server *srv, struct conn *c);
/* A whole answer with srv->body as its body, then the next request. */
void respond(struct http_server *srv, struct conn *c, int status,
	     const char *content_type, const char *extra_headers);
/* An error answer in the API's shape (api_format_error()). */
void respond_error(struct http_server *srv, struct conn *c, int status,
		   const char *message, const char *type,
		   const char *param, const char *extra_headers);
/* Append the CORS headers c's answers carry (none when CORS is off or
 * its origin is not listed).  0 or -ENOMEM. */
int conn_put_cors(const struct conn *c, struct strbuf *out);
/* The status line's reason phrase. */
const char *http_status_text(int status);

/* The methods route r answers, as an Allow header's value ("GET, HEAD,
 * POST"), into buf (len bytes, truncated to fit). */
void http_route_allow(const struct http_route *r, char *buf, size_t len);

#endif /* DYNBATCH_HTTP_CONN_H */
