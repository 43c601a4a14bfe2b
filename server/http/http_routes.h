/*
 * http_routes.h - the OpenAI-style API's route table for `dynbatch serve`:
 * POST /v1/completions, POST /v1/chat/completions, GET /v1/models,
 * GET /health (no key needed), GET /metrics.  main() hands it to the
 * server in http_config.routes; the table's shape is http_conn.h's.
 */
#ifndef DYNBATCH_HTTP_ROUTES_H
#define DYNBATCH_HTTP_ROUTES_H

#include "server/http/http_conn.h"

extern const struct http_route_table http_api_routes;

#endif /* DYNBATCH_HTTP_ROUTES_H */
