/*
 * http_cors.h - cross-origin requests (CORS), on only with
 * --allowed-origins LIST: which origins a browser page may call the API
 * from, and the headers that tell the browser so.
 *
 * Off (no list): no CORS header is ever sent and OPTIONS is a 405, as for
 * any method a route does not answer.  On: a request whose Origin is
 * listed ("*" in the list: any origin) gets Access-Control-Allow-Origin
 * (the origin itself, or "*") and Vary: Origin on every answer, streams
 * and errors included; a preflight (OPTIONS with Origin and
 * Access-Control-Request-Method) of a known path is answered 204 with the
 * route's methods and the requested headers, before the API key is
 * checked (a browser sends no credentials with it); a preflight from an
 * origin not listed is a 403.  Origins are compared byte for byte, as
 * browsers send them (scheme://host[:port]).
 */
#ifndef DYNBATCH_HTTP_CORS_H
#define DYNBATCH_HTTP_CORS_H

#include <stdbool.h>
#include <stddef.h>

#include "server/http/http_config.h"
#include "server/http/http_reader.h"
#include "util/strbuf.h"

/*
 * What Access-Control-Allow-Origin says to a request from m's Origin:
 * the listed origin (into cfg's list, *len bytes) or "*", NULL when CORS
 * is off, the request has no Origin, or it is not listed.
 */
const char *cors_allow_origin(const struct http_config *cfg,
			      const struct http_message *m, size_t *len);

/* Whether m is a preflight (OPTIONS, Origin, Access-Control-Request-
 * Method) that CORS answers (it is on). */
bool cors_is_preflight(const struct http_config *cfg,
		       const struct http_message *m);

/* Append the headers every answer carries for allow (NULL: none).
 * 0 or -ENOMEM. */
int cors_put_headers(struct strbuf *out, const char *allow, size_t len);

/*
 * Append a preflight's own headers: the methods (a route's Allow list),
 * the request headers it asked for (only token characters, else the
 * API's own, Authorization and Content-Type), and how long a browser may
 * keep the answer.  0 or -ENOMEM.
 */
int cors_put_preflight(struct strbuf *out, const struct http_message *m,
		       const char *methods);

#endif /* DYNBATCH_HTTP_CORS_H */
