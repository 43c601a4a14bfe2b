/*
 * http_models.h - the model names `dynbatch serve` answers to, and the
 * /v1/models routes (http_models.c).  Used by http_routes.c's table and
 * by its completion routes, which check a request's "model".
 */
#ifndef DYNBATCH_HTTP_MODELS_H
#define DYNBATCH_HTTP_MODELS_H

#include <stdbool.h>
#include <stddef.h>

#include "server/http/http_config.h"

struct http_server;
struct conn;

/* Whether name (len bytes, not NUL-terminated) is one of the served
 * names. */
bool http_model_served(const struct http_config *cfg, const char *name,
		       size_t len);

/* OpenAI's 404 for a model not served, naming the one that is. */
void http_respond_no_model(struct http_server *srv, struct conn *c,
			   const char *name, size_t len);

/* GET /v1/models: every served name once, in order. */
void http_route_models(struct http_server *srv, struct conn *c);

/* GET /v1/models/{id}: the model, 404 for a name not served, 400 for a
 * bad percent escape in the id. */
void http_route_model(struct http_server *srv, struct conn *c);

#endif /* DYNBATCH_HTTP_MODELS_H */
