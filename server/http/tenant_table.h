/*
 * tenant_table.h - the tenants of `dynbatch serve --tenants FILE`: API
 * keys mapped to tenants, each with a token bucket, a request bucket and
 * a concurrency cap; admission reserves, the end of a request refunds.
 *
 * The file, strict (an unknown key, a duplicate name or API key, a value
 * out of range or of another type is an error naming it and the file):
 *   {"tenants": [{"name": "a", "api_keys": ["ka"],
 *     "tokens_per_minute": 60000, "burst_tokens": 8000,
 *     "requests_per_minute": 600, "max_concurrent": 8}]}
 * requests_per_minute and max_concurrent may be left out (no limit).
 *
 * Every function taking now_ns is a pure function of the table and that
 * clock (token_bucket.h), so tests drive time.  Single-threaded: the
 * server's loop owns the table.
 */
#ifndef DYNBATCH_TENANT_TABLE_H
#define DYNBATCH_TENANT_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/wait_queue.h"
#include "server/http/token_bucket.h"
#include "util/strbuf.h"

#define TENANT_NAME_MAX 64
/* one waiting-queue class each (wait_queue.h) */
#define TENANT_MAX (WAIT_QUEUE_CLASSES - 1)
#define TENANT_KEYS_MAX 256

/* Why an admission was refused (or TENANT_OK). */
enum tenant_verdict {
	TENANT_OK,
	TENANT_NEVER_FITS,		/* reservation > burst_tokens: 400 */
	TENANT_TOKENS,			/* the token bucket has too few now */
	TENANT_REQUESTS,		/* requests_per_minute spent */
	TENANT_CONCURRENCY,		/* max_concurrent in flight */
	TENANT_N_VERDICTS
};

struct tenant {
	char name[TENANT_NAME_MAX + 1];
	char **api_keys;
	uint32_t n_keys;
	uint64_t tokens_per_minute, burst_tokens;
	uint64_t requests_per_minute;	/* 0: no limit */
	uint32_t max_concurrent;	/* 0: no limit */
	struct token_bucket tokens;
	struct token_bucket requests;	/* capacity: a minute's requests */
	uint32_t n_inflight;
	/* for /metrics */
	uint64_t n_admitted;
	uint64_t n_refused[TENANT_N_VERDICTS];
	uint64_t tokens_reserved, tokens_refunded;
};

struct tenant_table {
	struct tenant *tenants;
	uint32_t n_tenants;
};

/* What a client is told of its limits (OpenAI's x-ratelimit-* headers). */
struct tenant_status {
	uint64_t limit_tokens, remaining_tokens, reset_tokens_ns;
	uint64_t limit_requests, remaining_requests, reset_requests_ns;
	uint64_t retry_after_ns;	/* until this request could be admitted */
};

/* Parse a tenants file's text; `where` names it in errors.  NULL with
 * err set on any error (nothing half-built is left). */
struct tenant_table *tenant_table_parse(const char *text, size_t len,
					const char *where, uint64_t now_ns,
					char *err, size_t errlen);
/* Read and parse the file at path. */
struct tenant_table *tenant_table_load(const char *path, uint64_t now_ns,
				       char *err, size_t errlen);
/* Accepts NULL. */
void tenant_table_destroy(struct tenant_table *t);
/* The tenant owning the API key (len bytes), or NULL.  Every key of the
 * table is compared, each in time independent of where it differs. */
struct tenant *tenant_table_find(const struct tenant_table *t,
				 const char *key, size_t len);

/* Admit a request reserving `reserve` tokens at now_ns: TENANT_OK (the
 * tokens and a request are taken, one more in flight) or why not
 * (nothing taken; the refusal is counted). */
enum tenant_verdict tenant_admit(struct tenant *t, uint64_t reserve,
				 uint64_t now_ns);
/* A request admitted with `reserved` tokens ended having used `used`:
 * the rest goes back (never more than reserved), one fewer in flight. */
void tenant_release(struct tenant *t, uint64_t reserved, uint64_t used,
		    uint64_t now_ns);
/* The limits as a client sees them at now_ns, and how long until a
 * request of `reserve` tokens would pass all three. */
void tenant_status(struct tenant *t, uint64_t reserve, uint64_t now_ns,
		   struct tenant_status *st);
/* The tenants' Prometheus lines; 0 or -ENOMEM. */
int tenant_table_metrics(const struct tenant_table *t, struct strbuf *out);

#endif /* DYNBATCH_TENANT_TABLE_H */
