/*
 * http_server.h - `dynbatch serve`: an OpenAI-style HTTP/1.1 front end on
 * the coordinator's own io_uring loop.
 *
 * The engine (engine.h) stays the only scheduler; this module plugs into
 * it through frontend.h, turning HTTP requests into engine_submit() calls
 * and the engine's callbacks into answers:
 *
 *   accept -> recv -> http_reader -> route -> completion_parse
 *          -> engine_submit ...... engine steps ......
 *          -> on_tokens (stream: one SSE event per batch of final tokens)
 *          -> on_finish (the answer, or the last event)
 *          -> send -> keep-alive or close
 *
 * A client that disconnects has its request cancelled (engine_cancel); one
 * that half-closes is answered, then closed.  A client that stops reading
 * fills its connection's bounded output buffer; no further pipelined
 * request is read, a streamed request gives up its slot (engine_pause)
 * until the buffer drains, and after write_timeout_ms without progress it
 * is cancelled.
 * The first signal drains: no new connections, every accepted request
 * finishes.
 */
#ifndef DYNBATCH_HTTP_SERVER_H
#define DYNBATCH_HTTP_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/frontend.h"
#include "server/http/http_config.h"
#include "engine/stats.h"

struct engine;
struct http_route_table;
struct io_ring;
struct request_limits;
struct strbuf;


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
/* Close every connection (their requests are the engine's to release).
 * Call after engine_destroy() (no operation of ours is in flight then).
 * Accepts NULL. */
void http_server_destroy(struct http_server *srv);

/* The table to hand engine_set_frontend() with the server. */
extern const struct frontend_ops http_server_ops;

/* The server's own metrics (connections, answers by status). */
int http_server_metrics(const struct http_server *srv, struct strbuf *out);

#endif /* DYNBATCH_HTTP_SERVER_H */
