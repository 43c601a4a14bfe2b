/*
 * tenant_http.c - see tenant_http.h.
 */
#include "server/http/tenant_http.h"

#include <stdio.h>

#include "server/http/tenant_table.h"
#include "util/clock.h"

/* A duration as OpenAI writes its x-ratelimit-reset-* ("20ms", "1.5s",
 * "6m0s"), rounded up to the millisecond. */
static void put_duration(char *buf, size_t len, uint64_t ns)
{
	uint64_t ms = (ns + 999999) / 1000000;

	if (ms < 1000)
		snprintf(buf, len, "%llums", (unsigned long long)ms);
	else if (ms < 60000)
		snprintf(buf, len, "%llu.%03llus", (unsigned long long)(ms / 1000),
			 (unsigned long long)(ms % 1000));
	else
		snprintf(buf, len, "%llum%llu.%03llus", (unsigned long long)(ms / 60000),
			 (unsigned long long)(ms % 60000 / 1000),
			 (unsigned long long)(ms % 1000));
}

/* OpenAI's x-ratelimit-* headers for what t's buckets say now (st),
 * into buf (NUL-terminated, possibly cut short at len). */
static void put_rate_headers(char *buf, size_t len, const struct tenant *t,
			     const struct tenant_status *st)
{
	char reset_t[32], reset_r[32];
	int n;

	put_duration(reset_t, sizeof(reset_t), st->reset_tokens_ns);
	put_duration(reset_r, sizeof(reset_r), st->reset_requests_ns);
	n = snprintf(buf, len, "x-ratelimit-limit-tokens: %llu\r\n"
		     "x-ratelimit-remaining-tokens: %llu\r\n"
		     "x-ratelimit-reset-tokens: %s\r\n",
		     (unsigned long long)st->limit_tokens,
		     (unsigned long long)st->remaining_tokens, reset_t);
	if (t->requests_per_minute && n > 0 && (size_t)n < len)
		snprintf(buf + n, len - (size_t)n,
			 "x-ratelimit-limit-requests: %llu\r\n"
			 "x-ratelimit-remaining-requests: %llu\r\n"
			 "x-ratelimit-reset-requests: %s\r\n",
			 (unsigned long long)st->limit_requests,
			 (unsigned long long)st->remaining_requests, reset_r);
}

/* 429 with what the tenant's buckets say now. */
static void refuse(struct http_server *srv, struct conn *c, struct tenant *t,
		   enum tenant_verdict v, uint64_t reserve, uint64_t now_ns)
{
	struct tenant_status st;
	char headers[512], msg[256];
	int n;

	tenant_status(t, reserve, now_ns, &st);
	/* whole seconds, rounded up: a client waiting this long gets in */
	n = snprintf(headers, sizeof(headers), "Retry-After: %llu\r\n",
		     (unsigned long long)((st.retry_after_ns + 999999999) / 1000000000));
	if (n > 0 && (size_t)n < sizeof(headers))
		put_rate_headers(headers + n, sizeof(headers) - (size_t)n, t, &st);
	if (v == TENANT_TOKENS)
		snprintf(msg, sizeof(msg), "tenant '%s': %llu tokens reserved "
			 "(prompt + max_tokens x n), %llu left of tokens_per_minute "
			 "%llu; retry later", t->name, (unsigned long long)reserve,
			 (unsigned long long)st.remaining_tokens,
			 (unsigned long long)st.limit_tokens);
	else if (v == TENANT_REQUESTS)
		snprintf(msg, sizeof(msg), "tenant '%s': requests_per_minute %llu "
			 "reached; retry later", t->name,
			 (unsigned long long)t->requests_per_minute);
	else
		snprintf(msg, sizeof(msg), "tenant '%s': max_concurrent %u requests "
			 "in flight; retry later", t->name, t->max_concurrent);
	respond_error(srv, c, 429, msg, "rate_limit_error", NULL, headers);
}

bool tenant_http_admit(struct http_server *srv, struct conn *c,
		       struct request **reqs, uint32_t n_reqs)
{
	struct tenant *t = c->tenant;
	const struct request *req = reqs[0];
	uint64_t n_prompt = 0, reserve;
	uint64_t now_ns = clock_now_ns();
	enum tenant_verdict v;
	char msg[320];

	c->rate_headers[0] = '\0';
	if (!t)
		return true;
	/* a batch's prompts share max_tokens and n: each its own prompt */
	for (uint32_t i = 0; i < n_reqs; i++)
		n_prompt += reqs[i]->n_prompt;
	reserve = n_prompt + (uint64_t)req->max_tokens * req->n_choices * n_reqs;
	v = tenant_admit(t, reserve, now_ns);
	if (v == TENANT_OK) {
		struct tenant_status st;

		/* its answer says what is left, as OpenAI's do */
		tenant_status(t, 0, now_ns, &st);
		put_rate_headers(c->rate_headers, sizeof(c->rate_headers), t, &st);
		c->tenant_held = t;
		c->tenant_reserved = reserve;
		c->tenant_prompt = n_prompt;
		c->tenant_streamed = 0;
		for (uint32_t i = 0; i < n_reqs; i++)
			reqs[i]->queue_class =
				(uint32_t)(t - srv->cfg->tenants->tenants) + 1;
		return true;
	}
	if (v == TENANT_NEVER_FITS) {
		snprintf(msg, sizeof(msg), "this request reserves %llu tokens "
			 "(%llu prompt + max_tokens %u x n %u (best_of where "
			 "given) x %u prompts), more than tenant '%s''s "
			 "burst_tokens %llu: it can never be admitted; lower "
			 "max_tokens or n", (unsigned long long)reserve,
			 (unsigned long long)n_prompt, req->max_tokens,
			 req->n_choices, n_reqs, t->name,
			 (unsigned long long)t->burst_tokens);
		respond_error(srv, c, 400, msg, "invalid_request_error",
			      "max_tokens", NULL);
		return false;
	}
	refuse(srv, c, t, v, reserve, now_ns);
	return false;
}

static void release(struct conn *c, uint64_t used)
{
	if (!c->tenant_held)
		return;
	tenant_release(c->tenant_held, c->tenant_reserved, used, clock_now_ns());
	c->tenant_held = NULL;
	c->tenant_reserved = 0;
}

void tenant_http_unreserve(struct conn *c)
{
	release(c, 0);
}

/* Used: the prompt and the larger of what the ended choices generated
 * and what was streamed (a stream's live choices, when its client went
 * away); a non-streamed choice cut off unseen counts as unused.  Never
 * more than reserved goes back (tenant_release()). */
void tenant_http_release(struct conn *c)
{
	uint64_t gen = c->ch.n_generated > c->tenant_streamed ?
		       c->ch.n_generated : c->tenant_streamed;

	release(c, (uint64_t)c->tenant_prompt + gen);
}
