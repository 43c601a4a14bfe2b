/*
 * tenant_table.c - see tenant_table.h.  Parsing (jansson, strict), key
 * lookup, admission and refund, and the per-tenant metrics.
 */
#include "server/http/tenant_table.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Parsing
 * ---------------------------------------------------------------------- */

#define TENANT_FILE_MAX (16u << 20)	/* a tenants file is small */

/* An integer member in [min, max]; absent is 0 when optional.  0 or -1
 * with err set. */
static int get_u64(json_t *obj, const char *key, uint64_t min, uint64_t max,
		   bool optional, uint64_t *out, const char *where,
		   const char *name, char *err, size_t errlen)
{
	json_t *v = json_object_get(obj, key);
	json_int_t x;

	*out = 0;
	if (!v && optional)
		return 0;
	if (!v) {
		snprintf(err, errlen, "%s: tenant '%s': \"%s\" is missing",
			 where, name, key);
		return -1;
	}
	x = json_is_integer(v) ? json_integer_value(v) : -1;
	if (!json_is_integer(v) || x < 0 || (uint64_t)x < min || (uint64_t)x > max) {
		snprintf(err, errlen, "%s: tenant '%s': \"%s\" must be an integer "
			 "in [%llu, %llu]", where, name, key,
			 (unsigned long long)min, (unsigned long long)max);
		return -1;
	}
	*out = (uint64_t)x;
	return 0;
}

/* A name goes into metrics labels and logs: letters, digits, "_.-". */
static bool name_ok(const char *s)
{
	size_t n = strlen(s);

	if (!n || n > TENANT_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || strchr("_.-", s[i])))
			return false;
	return true;
}

/* A key travels in an Authorization header: visible ASCII, no space. */
static bool key_ok(const char *s, size_t n)
{
	if (!n || n > 1024)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
			return false;
	return true;
}

static const char *const tenant_keys[] = {
	"name", "api_keys", "tokens_per_minute", "burst_tokens",
	"requests_per_minute", "max_concurrent",
};

static int parse_keys(struct tenant *t, json_t *keys, const char *where,
		      char *err, size_t errlen)
{
	size_t n = json_is_array(keys) ? json_array_size(keys) : 0;

	if (!n || n > TENANT_KEYS_MAX) {
		snprintf(err, errlen, "%s: tenant '%s': \"api_keys\" must be an "
			 "array of 1 to %u strings", where, t->name, TENANT_KEYS_MAX);
		return -1;
	}
	if (!(t->api_keys = calloc(n, sizeof(char *)))) {
		snprintf(err, errlen, "%s: out of memory", where);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *k = json_array_get(keys, i);

		if (!json_is_string(k) || !key_ok(json_string_value(k),
						  json_string_length(k))) {
			snprintf(err, errlen, "%s: tenant '%s': api_keys[%zu] must "
				 "be a string of 1 to 1024 visible ASCII characters",
				 where, t->name, i);
			return -1;
		}
		if (!(t->api_keys[i] = strdup(json_string_value(k)))) {
			snprintf(err, errlen, "%s: out of memory", where);
			return -1;
		}
		t->n_keys++;
	}
	return 0;
}

static int parse_tenant(struct tenant *t, json_t *o, size_t index,
			const char *where, uint64_t now_ns, char *err,
			size_t errlen)
{
	const char *key;
	json_t *v, *name;
	uint64_t u;

	if (!json_is_object(o)) {
		snprintf(err, errlen, "%s: tenants[%zu] must be an object", where, index);
		return -1;
	}
	json_object_foreach(o, key, v) {
		size_t i;

		for (i = 0; i < sizeof(tenant_keys) / sizeof(tenant_keys[0]); i++)
			if (!strcmp(key, tenant_keys[i]))
				break;
		if (i == sizeof(tenant_keys) / sizeof(tenant_keys[0])) {
			snprintf(err, errlen, "%s: tenants[%zu]: unknown key \"%.64s\"",
				 where, index, key);
			return -1;
		}
	}
	name = json_object_get(o, "name");
	if (!json_is_string(name) || !name_ok(json_string_value(name))) {
		snprintf(err, errlen, "%s: tenants[%zu]: \"name\" must be 1 to %d "
			 "letters, digits or _.-", where, index, TENANT_NAME_MAX);
		return -1;
	}
	strcpy(t->name, json_string_value(name));
	if (parse_keys(t, json_object_get(o, "api_keys"), where, err, errlen) ||
	    get_u64(o, "tokens_per_minute", 1, TOKEN_BUCKET_MAX, false,
		    &t->tokens_per_minute, where, t->name, err, errlen) ||
	    get_u64(o, "burst_tokens", 1, TOKEN_BUCKET_MAX, false,
		    &t->burst_tokens, where, t->name, err, errlen) ||
	    get_u64(o, "requests_per_minute", 1, TOKEN_BUCKET_MAX, true,
		    &t->requests_per_minute, where, t->name, err, errlen) ||
	    get_u64(o, "max_concurrent", 1, 1u << 20, true, &u, where,
		    t->name, err, errlen))
		return -1;
	t->max_concurrent = (uint32_t)u;
	token_bucket_init(&t->tokens, t->tokens_per_minute, t->burst_tokens, now_ns);
	token_bucket_init(&t->requests, t->requests_per_minute ?
			  t->requests_per_minute : 1, t->requests_per_minute ?
			  t->requests_per_minute : 1, now_ns);
	return 0;
}

/* Names and keys unique across the table (O(n^2): the table is small
 * and read once). */
static int check_unique(const struct tenant_table *tt, const char *where,
			char *err, size_t errlen)
{
	for (uint32_t i = 0; i < tt->n_tenants; i++) {
		const struct tenant *a = &tt->tenants[i];

		for (uint32_t j = 0; j < i; j++)
			if (!strcmp(a->name, tt->tenants[j].name)) {
				snprintf(err, errlen, "%s: tenant name '%s' is given "
					 "twice", where, a->name);
				return -1;
			}
		for (uint32_t k = 0; k < a->n_keys; k++)
			for (uint32_t j = 0; j <= i; j++) {
				const struct tenant *b = &tt->tenants[j];

				for (uint32_t l = 0; l < (j == i ? k : b->n_keys); l++)
					if (!strcmp(a->api_keys[k], b->api_keys[l])) {
						snprintf(err, errlen, "%s: an API key of "
							 "tenant '%s' is also one of "
							 "tenant '%s'", where, a->name,
							 b->name);
						return -1;
					}
			}
	}
	return 0;
}

struct tenant_table *tenant_table_parse(const char *text, size_t len,
					const char *where, uint64_t now_ns,
					char *err, size_t errlen)
{
	struct tenant_table *tt;
	json_error_t jerr;
	json_t *root, *list, *v;
	const char *key;
	size_t n;

	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		snprintf(err, errlen, "%s: line %d column %d: %s", where,
			 jerr.line, jerr.column, jerr.text);
		return NULL;
	}
	tt = calloc(1, sizeof(*tt));
	if (!tt) {
		snprintf(err, errlen, "%s: out of memory", where);
		goto out_root;
	}
	if (!json_is_object(root)) {
		snprintf(err, errlen, "%s: must be an object {\"tenants\": [...]}", where);
		goto out_table;
	}
	json_object_foreach(root, key, v)
		if (strcmp(key, "tenants")) {
			snprintf(err, errlen, "%s: unknown key \"%.64s\" (only "
				 "\"tenants\")", where, key);
			goto out_table;
		}
	list = json_object_get(root, "tenants");
	n = json_is_array(list) ? json_array_size(list) : 0;
	if (!n || n > TENANT_MAX) {
		snprintf(err, errlen, "%s: \"tenants\" must be an array of 1 to %u "
			 "tenants", where, TENANT_MAX);
		goto out_table;
	}
	if (!(tt->tenants = calloc(n, sizeof(*tt->tenants)))) {
		snprintf(err, errlen, "%s: out of memory", where);
		goto out_table;
	}
	for (size_t i = 0; i < n; i++) {
		tt->n_tenants++;	/* destroy frees what it got so far */
		if (parse_tenant(&tt->tenants[i], json_array_get(list, i), i,
				 where, now_ns, err, errlen))
			goto out_table;
	}
	if (check_unique(tt, where, err, errlen))
		goto out_table;
	json_decref(root);
	return tt;
out_table:
	tenant_table_destroy(tt);
out_root:
	json_decref(root);
	return NULL;
}

struct tenant_table *tenant_table_load(const char *path, uint64_t now_ns,
				       char *err, size_t errlen)
{
	struct tenant_table *tt = NULL;
	FILE *f = fopen(path, "rb");
	char *buf;
	size_t n;

	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return NULL;
	}
	buf = malloc(TENANT_FILE_MAX + 1);
	if (!buf) {
		snprintf(err, errlen, "%s: out of memory", path);
		goto out_close;
	}
	n = fread(buf, 1, TENANT_FILE_MAX + 1, f);
	if (ferror(f))
		snprintf(err, errlen, "%s: read error", path);
	else if (n > TENANT_FILE_MAX)
		snprintf(err, errlen, "%s: more than %u bytes", path, TENANT_FILE_MAX);
	else
		tt = tenant_table_parse(buf, n, path, now_ns, err, errlen);
	free(buf);
out_close:
	fclose(f);
	return tt;
}

void tenant_table_destroy(struct tenant_table *tt)
{
	if (!tt)
		return;
	for (uint32_t i = 0; i < tt->n_tenants; i++) {
		for (uint32_t k = 0; k < tt->tenants[i].n_keys; k++)
			free(tt->tenants[i].api_keys[k]);
		free(tt->tenants[i].api_keys);
	}
	free(tt->tenants);
	free(tt);
}

struct tenant *tenant_table_find(const struct tenant_table *tt,
				 const char *key, size_t len)
{
	struct tenant *found = NULL;

	for (uint32_t i = 0; i < tt->n_tenants; i++)
		for (uint32_t k = 0; k < tt->tenants[i].n_keys; k++) {
			const char *s = tt->tenants[i].api_keys[k];
			unsigned char diff = strlen(s) != len;

			for (size_t j = 0; !diff && j < len; j++)
				diff |= (unsigned char)(s[j] ^ key[j]);
			if (!diff)
				found = &tt->tenants[i];
		}
	return found;
}

/* ------------------------------------------------------------------------
 * Admission and refund
 * ---------------------------------------------------------------------- */

/* What refused it, checking all three before taking anything. */
static enum tenant_verdict verdict(struct tenant *t, uint64_t reserve,
				   uint64_t now_ns)
{
	if (reserve > t->burst_tokens)
		return TENANT_NEVER_FITS;
	if (t->max_concurrent && t->n_inflight >= t->max_concurrent)
		return TENANT_CONCURRENCY;
	if (t->requests_per_minute &&
	    token_bucket_available(&t->requests, now_ns) < 1)
		return TENANT_REQUESTS;
	if (token_bucket_available(&t->tokens, now_ns) < reserve)
		return TENANT_TOKENS;
	return TENANT_OK;
}

enum tenant_verdict tenant_admit(struct tenant *t, uint64_t reserve,
				 uint64_t now_ns)
{
	enum tenant_verdict v = verdict(t, reserve, now_ns);

	if (v != TENANT_OK) {
		t->n_refused[v]++;
		return v;
	}
	if (t->requests_per_minute)
		token_bucket_take(&t->requests, 1, now_ns);
	token_bucket_take(&t->tokens, reserve, now_ns);
	t->n_inflight++;
	t->n_admitted++;
	t->tokens_reserved += reserve;
	return TENANT_OK;
}

void tenant_release(struct tenant *t, uint64_t reserved, uint64_t used,
		    uint64_t now_ns)
{
	uint64_t back = used < reserved ? reserved - used : 0;

	token_bucket_give(&t->tokens, back, now_ns);
	t->tokens_refunded += back;
	if (t->n_inflight)
		t->n_inflight--;
}

void tenant_status(struct tenant *t, uint64_t reserve, uint64_t now_ns,
		   struct tenant_status *st)
{
	uint64_t wait;

	st->limit_tokens = t->tokens_per_minute;
	st->remaining_tokens = token_bucket_available(&t->tokens, now_ns);
	st->reset_tokens_ns = token_bucket_wait_ns(&t->tokens, t->burst_tokens, now_ns);
	st->limit_requests = t->requests_per_minute;
	st->remaining_requests = t->requests_per_minute ?
		token_bucket_available(&t->requests, now_ns) : 0;
	st->reset_requests_ns = t->requests_per_minute ?
		token_bucket_wait_ns(&t->requests, t->requests_per_minute, now_ns) : 0;
	wait = token_bucket_wait_ns(&t->tokens, reserve, now_ns);
	if (t->requests_per_minute) {
		uint64_t w = token_bucket_wait_ns(&t->requests, 1, now_ns);

		wait = w > wait ? w : wait;
	}
	/* a concurrency slot frees when a request ends: no clock says when */
	if (t->max_concurrent && t->n_inflight >= t->max_concurrent && wait < 1000000000ull)
		wait = 1000000000ull;
	st->retry_after_ns = wait;
}

/* ------------------------------------------------------------------------
 * Metrics
 * ---------------------------------------------------------------------- */

static const char *const verdict_names[TENANT_N_VERDICTS] = {
	[TENANT_NEVER_FITS] = "never_fits", [TENANT_TOKENS] = "tokens",
	[TENANT_REQUESTS] = "requests", [TENANT_CONCURRENCY] = "concurrency",
};

/* One metric's HELP and TYPE, then its value per tenant. */
static int put_metric(const struct tenant_table *tt, struct strbuf *out,
		      const char *name, const char *type, const char *help,
		      size_t offset)
{
	if (strbuf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type))
		return -ENOMEM;
	for (uint32_t i = 0; i < tt->n_tenants; i++) {
		const char *base = (const char *)&tt->tenants[i];
		uint64_t v = !strcmp(type, "gauge") ?
			*(const uint32_t *)(base + offset) :
			*(const uint64_t *)(base + offset);

		if (strbuf_printf(out, "%s{tenant=\"%s\"} %llu\n", name,
				  tt->tenants[i].name, (unsigned long long)v))
			return -ENOMEM;
	}
	return 0;
}

int tenant_table_metrics(const struct tenant_table *tt, struct strbuf *out)
{
	int ret;

	if (!tt)
		return 0;
	ret = put_metric(tt, out, "dynbatch_tenant_admitted_total", "counter",
			 "Requests admitted, by tenant.",
			 offsetof(struct tenant, n_admitted));
	ret = ret ? ret : put_metric(tt, out, "dynbatch_tenant_tokens_reserved_total",
			 "counter", "Tokens reserved at admission, by tenant.",
			 offsetof(struct tenant, tokens_reserved));
	ret = ret ? ret : put_metric(tt, out, "dynbatch_tenant_tokens_refunded_total",
			 "counter", "Reserved tokens given back unused, by tenant.",
			 offsetof(struct tenant, tokens_refunded));
	ret = ret ? ret : put_metric(tt, out, "dynbatch_tenant_in_flight", "gauge",
			 "Admitted requests not yet ended, by tenant.",
			 offsetof(struct tenant, n_inflight));
	if (ret || strbuf_printf(out, "# HELP dynbatch_tenant_refused_total "
				 "Requests refused, by tenant and reason.\n"
				 "# TYPE dynbatch_tenant_refused_total counter\n"))
		return -ENOMEM;
	for (uint32_t i = 0; i < tt->n_tenants; i++)
		for (int v = TENANT_NEVER_FITS; v < TENANT_N_VERDICTS; v++)
			if (strbuf_printf(out, "dynbatch_tenant_refused_total{tenant="
					  "\"%s\",reason=\"%s\"} %llu\n",
					  tt->tenants[i].name, verdict_names[v],
					  (unsigned long long)tt->tenants[i].n_refused[v]))
				return -ENOMEM;
	return 0;
}
