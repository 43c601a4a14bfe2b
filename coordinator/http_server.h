/*
 * http_server.h - `dynbatch serve`: an OpenAI-style HTTP/1.1 front end on
 * the coordinator's own io_uring loop.
 *
 * The engine (engine.h) stays the only scheduler; this module turns HTTP
 * requests into engine_submit() calls and engine callbacks into answers:
 *
 *   accept -> recv -> http_reader -> route -> completion_parse
 *          -> engine_submit ...... engine steps ......
 *          -> http_server_on_tokens (stream: one SSE event per step)
 *          -> http_server_on_finish (the answer, or the last event)
 *          -> send -> keep-alive or close
 *
 * A client that disconnects has its request cancelled (engine_cancel); one
 * that half-closes is answered, then closed.  A client that stops reading
 * fills its connection's bounded output buffer; no further pipelined
 * request is read, a streamed request gives up its slot (engine_pause)
 * until the buffer drains, and after write_timeout_ms without progress it
 * is cancelled.
 */
#ifndef DYNBATCH_HTTP_SERVER_H
#define DYNBATCH_HTTP_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "http_reader.h"
#include "stats.h"

struct engine;
struct io_event;
struct io_ring;
struct live_request;
struct request_limits;
struct strbuf;

struct http_config {
	const char *listen;		/* "host:port"; port 0 picks one */
	const char *api_key;		/* NULL: no Authorization needed */
	const char *model_name;		/* in answers and GET /v1/models */
	uint32_t max_connections;	/* more are answered 503 and closed */
	uint32_t conn_buffer;		/* unsent answer bytes per connection
					 * before it stops reading requests and
					 * its stream pauses (also its SO_SNDBUF) */
	uint32_t write_timeout_ms;	/* no output progress this long: cancel */
	uint32_t read_timeout_ms;	/* a request must arrive whole in this */
	uint32_t idle_timeout_ms;	/* idle keep-alive connections close */
	struct http_limits limits;	/* header bytes, header count, body */
};

struct http_server;

/*
 * Bind and listen (the address is printed on stderr) and queue the first
 * accept on io.  Bodies are checked against lim (vocab, context).  NULL on
 * failure, with err saying why.
 */
struct http_server *http_server_create(const struct http_config *cfg,
				       struct engine *e, struct io_ring *io,
				       const struct request_limits *lim,
				       char *err, size_t err_len);
/* Close every connection (their requests are the engine's to release). */
void http_server_destroy(struct http_server *srv);

/* An accept, recv or send completed. */
void http_server_on_event(struct http_server *srv, const struct io_event *ev);
/* Per loop round: parse what arrived and answer or submit it, queue due
 * recvs and sends.  Returns true if it submitted or answered anything. */
bool http_server_pump(struct http_server *srv);
/* Enforce the timeouts; returns the next time this needs a look. */
uint64_t http_server_tick(struct http_server *srv, uint64_t now_ns);
/* Draining: close the listening socket, answer new requests 503. */
void http_server_stop_accepting(struct http_server *srv);
/* True when no connection has an answer still to send. */
bool http_server_flushed(const struct http_server *srv);

/* Engine callbacks.  New tokens were committed to lr (still running). */
void http_server_on_tokens(struct http_server *srv, const struct live_request *lr);
/* lr is finishing: n_tokens of tokens are its answer (stop removed). */
void http_server_on_finish(struct http_server *srv, const struct live_request *lr,
			   enum finish_reason reason, const char *error,
			   const int32_t *tokens, uint32_t n_tokens);

/* The server's own metrics (connections, answers by status). */
int http_server_metrics(const struct http_server *srv, struct strbuf *out);

#endif /* DYNBATCH_HTTP_SERVER_H */
