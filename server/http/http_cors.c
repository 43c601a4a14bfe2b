/*
 * http_cors.c - see http_cors.h.
 *
 * The list is --allowed-origins as given (each argument a comma list,
 * http_config.allowed_origins); it is walked per request with an Origin,
 * a few comparisons.  Nothing here allocates but the headers appended.
 */
#include "server/http/http_cors.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

#include <http_parser.h>

/* How long a browser may keep a preflight's answer (seconds). */
#define CORS_MAX_AGE_S 600
/* A longer Access-Control-Request-Headers is answered with the API's. */
#define CORS_MAX_REQ_HEADERS 1024

const char *cors_allow_origin(const struct http_config *cfg,
			      const struct http_message *m, size_t *len)
{
	const char *o = m->origin.len ? m->origin.data : "";

	if (!cfg->n_allowed_origins || !(m->cors_seen & HTTP_SEEN_ORIGIN))
		return NULL;
	for (uint32_t i = 0; i < cfg->n_allowed_origins; i++) {
		const char *at = cfg->allowed_origins[i];

		while (*at) {
			size_t n = strcspn(at, ",");

			if (n == 1 && *at == '*') {
				*len = 1;
				return "*";
			}
			if (n == m->origin.len && !memcmp(at, o, n)) {
				*len = n;
				return at;
			}
			at += n + (at[n] == ',');
		}
	}
	return NULL;
}

bool cors_is_preflight(const struct http_config *cfg,
		       const struct http_message *m)
{
	return cfg->n_allowed_origins && m->method == HTTP_OPTIONS &&
	       (m->cors_seen & HTTP_SEEN_ORIGIN) &&
	       (m->cors_seen & HTTP_SEEN_ACR_METHOD);
}

int cors_put_headers(struct strbuf *out, const char *allow, size_t len)
{
	if (!allow)
		return 0;
	if (strbuf_append(out, "Access-Control-Allow-Origin: ", 29) ||
	    strbuf_append(out, allow, len) ||
	    strbuf_append(out, "\r\nVary: Origin\r\n", 16))
		return -ENOMEM;
	return 0;
}

/* Header names and the commas and spaces between them, nothing else:
 * what is echoed into an answer header must not split it. */
static bool is_token_list(const struct strbuf *s)
{
	if (!s->len || s->len > CORS_MAX_REQ_HEADERS)
		return false;
	for (size_t i = 0; i < s->len; i++) {
		unsigned char c = (unsigned char)s->data[i];

		if (!isalnum(c) && (!c || !strchr("-_, ", c)))
			return false;
	}
	return true;
}

int cors_put_preflight(struct strbuf *out, const struct http_message *m,
		       const char *methods)
{
	bool echo = is_token_list(&m->acr_headers);

	if (strbuf_printf(out, "Access-Control-Allow-Methods: %s\r\n"
			  "Access-Control-Allow-Headers: ", methods) ||
	    (echo ? strbuf_append(out, m->acr_headers.data, m->acr_headers.len) :
	     strbuf_append(out, "Authorization, Content-Type", 27)) ||
	    strbuf_printf(out, "\r\nAccess-Control-Max-Age: %d\r\n", CORS_MAX_AGE_S))
		return -ENOMEM;
	return 0;
}
