/*
 * http_models.c - the served model names (--model's name, then each
 * --served-model-name list) and the routes that show them: GET
 * /v1/models and /v1/models/{id}, and OpenAI's 404 for a request
 * naming a model not served (http_models.h).
 */
#include "server/http/http_models.h"

#include "server/http/http_conn.h"
#include "server/http/http_server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "util/json_writer.h"

/* ------------------------------------------------------------------------
 * Model names: model_name, then each --served-model-name list's names
 * ---------------------------------------------------------------------- */

struct name_iter {
	uint32_t list;		/* 0: model_name; i > 0: served_names[i - 1] */
	const char *at;		/* the rest of the current list */
};

/* The next served name (s, len); false after the last.  A name given
 * twice comes twice. */
static bool name_next(const struct http_config *cfg, struct name_iter *it,
		      const char **s, size_t *len)
{
	while (!it->at || !*it->at) {
		if (it->list > cfg->n_served_names)
			return false;
		it->at = it->list ? cfg->served_names[it->list - 1] : cfg->model_name;
		it->list++;
	}
	*s = it->at;
	*len = strcspn(it->at, it->list == 1 ? "" : ",");
	it->at += *len;
	if (*it->at == ',')
		it->at++;
	return true;
}

/* Whether name (len bytes) is served; with first, only its first
 * coming counts (for listing each name once). */
static bool name_served(const struct http_config *cfg, const char *name,
			size_t len, const char *first)
{
	struct name_iter it = { 0 };
	const char *s;
	size_t n;

	while (name_next(cfg, &it, &s, &n))
		if (n == len && !memcmp(s, name, n))
			return !first || s == first;
	return false;
}

/* {"id":NAME,"object":"model",...} */
static int put_model(struct http_server *srv, const char *name, size_t len)
{
	size_t bound = json_strn_bound(len);
	char *end;

	if (bound == SIZE_MAX || strbuf_reserve(&srv->body, bound + 8))
		return -ENOMEM;
	end = JSON_PUT_LIT(srv->body.data + srv->body.len, "{\"id\":");
	end = json_put_strn(end, name, len);
	srv->body.len = (size_t)(end - srv->body.data);
	return strbuf_printf(&srv->body, ",\"object\":\"model\",\"created\":%llu,"
			     "\"owned_by\":\"dynbatch\"}",
			     (unsigned long long)srv->started_s);
}

void http_route_models(struct http_server *srv, struct conn *c)
{
	struct name_iter it = { 0 };
	const char *s;
	size_t n;
	bool first = true;

	srv->body.len = 0;
	if (strbuf_printf(&srv->body, "{\"object\":\"list\",\"data\":[")) {
		conn_drop(srv, c);
		return;
	}
	while (name_next(srv->cfg, &it, &s, &n)) {
		if (!name_served(srv->cfg, s, n, s))
			continue;	/* listed already */
		if ((!first && strbuf_append(&srv->body, ",", 1)) ||
		    put_model(srv, s, n)) {
			conn_drop(srv, c);
			return;
		}
		first = false;
	}
	if (strbuf_append(&srv->body, "]}", 2)) {
		conn_drop(srv, c);
		return;
	}
	respond(srv, c, 200, "application/json", NULL);
}

void http_respond_no_model(struct http_server *srv, struct conn *c,
			   const char *name, size_t len)
{
	char err[320];

	snprintf(err, sizeof(err), "the model '%.*s' does not exist: this "
		 "server serves '%s' (GET /v1/models lists its names)",
		 (int)(len > 200 ? 200 : len), name, srv->cfg->model_name);
	respond_error(srv, c, 404, err, "invalid_request_error", "model",
		      NULL);
}

static int hex_val(char ch)
{
	return ch >= '0' && ch <= '9' ? ch - '0' :
	       ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 :
	       ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

/*
 * Percent-decode s[0..len) (RFC 3986: "%2F" is '/') into out, which
 * holds len bytes (decoding never grows).  The decoded length, or -1
 * with *bad the offset of a '%' not followed by two hex digits.  '+'
 * stays '+': it means a space only in form bodies.
 */
static ssize_t percent_decode(const char *s, size_t len, char *out, size_t *bad)
{
	size_t n = 0;

	for (size_t i = 0; i < len; i++) {
		int hi, lo;

		if (s[i] != '%') {
			out[n++] = s[i];
			continue;
		}
		hi = i + 1 < len ? hex_val(s[i + 1]) : -1;
		lo = i + 2 < len ? hex_val(s[i + 2]) : -1;
		if (hi < 0 || lo < 0) {
			*bad = i;
			return -1;
		}
		out[n++] = (char)(hi << 4 | lo);
		i += 2;
	}
	return (ssize_t)n;
}

/* GET /v1/models/{id}: the model, or 404 for a name not served.  The
 * id is percent-decoded (a name with '/' comes as %2F); a bad escape
 * is a 400 naming where, as it is no name at all. */
void http_route_model(struct http_server *srv, struct conn *c)
{
	const struct strbuf *t = &c->reader.msg.target;
	size_t from = strlen("/v1/models/");
	size_t len = strcspn(t->data + from, "?"), bad = 0;
	char *name, err[160];
	ssize_t n;

	name = malloc(len + 1);
	if (!name) {
		respond_error(srv, c, 500, "out of memory", "server_error", NULL, NULL);
		return;
	}
	n = percent_decode(t->data + from, len, name, &bad);
	if (n < 0) {
		snprintf(err, sizeof(err), "the model id in the path has a bad "
			 "percent escape at its byte %zu: '%%' must be followed by "
			 "two hex digits", bad);
		respond_error(srv, c, 400, err, "invalid_request_error", "model", NULL);
		goto out;
	}
	if (!name_served(srv->cfg, name, (size_t)n, NULL)) {
		http_respond_no_model(srv, c, name, (size_t)n);
		goto out;
	}
	srv->body.len = 0;
	if (put_model(srv, name, (size_t)n)) {
		conn_drop(srv, c);
		goto out;
	}
	respond(srv, c, 200, "application/json", NULL);
out:
	free(name);
}

bool http_model_served(const struct http_config *cfg, const char *name,
		       size_t len)
{
	return name_served(cfg, name, len, NULL);
}
