/*
 * http_config.h - what `dynbatch serve` is configured with (server/options.c
 * fills it): one header of its own so that the server's public API
 * (http_server.h) and the connection API the routes use (http_conn.h) both
 * take it without including each other.
 */
#ifndef DYNBATCH_HTTP_CONFIG_H
#define DYNBATCH_HTTP_CONFIG_H

#include <stdint.h>

#include "server/http/chat_api.h"
#include "server/http/http_reader.h"

struct http_route_table;
struct tenant_table;

struct http_config {
	const char *listen;		/* "host:port"; port 0 picks one */
	const char *api_key;		/* NULL: no Authorization needed */
	/* --tenants: each key is a tenant's, with its limits (instead of
	 * api_key); NULL: none.  The server's loop owns its state. */
	struct tenant_table *tenants;
	const char *model_name;		/* in answers and GET /v1/models */
	/* what a request's "model" may name besides model_name: each a
	 * comma list (--served-model-name); another name is a 404 */
	const char *const *served_names;
	uint32_t n_served_names;
	/* --allowed-origins, each a comma list ("*": any); none: no CORS
	 * (http_cors.h) */
	const char *const *allowed_origins;
	uint32_t n_allowed_origins;
	uint32_t max_connections;	/* more are answered 503 and closed */
	uint32_t conn_buffer;		/* unsent answer bytes per connection
					 * before it stops reading requests and
					 * its stream pauses (also its SO_SNDBUF) */
	uint32_t write_timeout_ms;	/* no output progress this long: cancel */
	uint32_t read_timeout_ms;	/* a request must arrive whole in this */
	uint32_t idle_timeout_ms;	/* idle keep-alive connections close */
	struct http_limits limits;	/* header bytes, header count, body */
	float default_temperature;	/* of a request that sets none */
	/* A non-streamed answer is built whole (all its choices, their text
	 * and logprobs): the most one may reach (else 400), and the most all
	 * live ones together may (else 429), by answer_bound() */
	uint64_t max_answer_bytes;
	uint64_t answer_budget;
	const char *chat_template;	/* --chat-template NAME, or NULL */
	struct chat_config chat;	/* how /v1/chat/completions renders,
					 * from it at start (chat_setup.h) */
	const struct http_route_table *routes; /* what each path gets
					 * (http_conn.h; the API's: http_routes.h) */
};

#endif /* DYNBATCH_HTTP_CONFIG_H */
