/*
 * tenant_http.h - the tenant limits (tenant_table.h) on the HTTP side:
 * a generation request's reservation at admission, its answer when
 * refused (400, or 429 with Retry-After and OpenAI's x-ratelimit-*
 * headers), and its refund when the request ends however it ends.
 */
#ifndef DYNBATCH_TENANT_HTTP_H
#define DYNBATCH_TENANT_HTTP_H

#include <stdbool.h>

#include "server/http/http_conn.h"

/* Reserve the tokens of the n_reqs prompts of a request (a batch's;
 * each prompt + max_tokens x n, n being best_of's candidates where it
 * has them) from c's tenant and put every prompt in the tenant's class
 * of the waiting queue: true when admitted (or no --tenants), else the
 * refusal has been answered. */
bool tenant_http_admit(struct http_server *srv, struct conn *c,
		       struct request **reqs, uint32_t n_reqs);
/* The request was never submitted: all it reserved goes back. */
void tenant_http_unreserve(struct conn *c);
/* c's request ended (answered, failed, cancelled, its client gone, or
 * never submitted): refund what it reserved and did not use.  A no-op
 * when it holds nothing; safe to call twice. */
void tenant_http_release(struct conn *c);

#endif /* DYNBATCH_TENANT_HTTP_H */
