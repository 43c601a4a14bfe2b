/*
 * jsonl_result.c - format a finished request's result line and a streamed
 * step's delta line (jsonl_result.h, docs/DESIGN.md 3).
 *
 * result_format() runs once per finished request, on the coordinator's
 * output path.  It reserves a worst-case size once (6 bytes per string
 * byte, 11 per token) and then writes numbers and escapes by hand without
 * further checks, so the only failure point leaves the buffer untouched.
 * Strings are escaped as JSON requires; valid UTF-8 is copied as is and
 * any invalid byte (jansson's error text may quote one) becomes U+FFFD, so
 * every line we write is valid JSON.
 */
#include "server/jsonl/jsonl_result.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "util/json_writer.h"

/* ------------------------------------------------------------------------
 * Formatting (the primitives are in json_writer.h)
 */

/* Room for one logprob: "%.9g" of a float, with its sign and exponent. */
#define LOGPROB_JSON_MAX 20

/* {"token":T,"logprob":L} */
static char *put_logprob(char *p, const struct sampler_logprob *lp)
{
	p = JSON_PUT_LIT(p, "{\"token\":");
	p = json_put_i32(p, lp->token);
	p = JSON_PUT_LIT(p, ",\"logprob\":");
	/* 9 significant digits name a float exactly: a client can compare
	 * runs bit for bit */
	p += snprintf(p, LOGPROB_JSON_MAX, "%.9g", (double)lp->logprob);
	return JSON_PUT_LIT(p, "}");
}

/* ,"logprobs":[{"token":..,"logprob":..,"top_logprobs":[...]},...] */
static char *put_logprobs(char *p, const struct result *r)
{
	p = JSON_PUT_LIT(p, ",\"logprobs\":[");
	for (uint32_t i = 0; i < r->n_tokens; i++) {
		const struct sampler_logprob *e = r->logprobs +
						  (size_t)i * r->logprob_stride;

		if (i)
			*p++ = ',';
		p = put_logprob(p, e);
		p--;	/* reopen the object for its alternatives */
		p = JSON_PUT_LIT(p, ",\"top_logprobs\":[");
		for (uint32_t j = 1; j < r->logprob_stride && e[j].token >= 0; j++) {
			if (j > 1)
				*p++ = ',';
			p = put_logprob(p, &e[j]);
		}
		p = JSON_PUT_LIT(p, "]}");
	}
	return JSON_PUT_LIT(p, "]");
}

/* The literal bytes around one logprob entry: {"token":  ,"logprob":  }
 * and the comma before it; and around a token's alternatives:
 * ,"top_logprobs":[  ]}  and the comma before the next token. */
#define LOGPROB_ENTRY_LIT (sizeof("{\"token\":,\"logprob\":},") - 1)
#define LOGPROB_TOKEN_LIT (sizeof(",\"top_logprobs\":[]},") - 1)

size_t result_format_bound(const struct result *r)
{
	size_t b_id = json_str_bound(r->id);
	size_t b_fr = json_str_bound(r->finish_reason);
	size_t b_err = r->error ? json_str_bound(r->error) : 0;
	size_t need;

	_Static_assert(SIZE_MAX / 4 / JSON_TOKEN_MAX >= UINT32_MAX,
		       "n_tokens * JSON_TOKEN_MAX must not wrap");
	if (b_id == SIZE_MAX || b_fr == SIZE_MAX || b_err == SIZE_MAX)
		return SIZE_MAX;
	/* 256 covers the field names and the five numbers. */
	need = 256 + b_id + b_fr + b_err + (size_t)r->n_tokens * JSON_TOKEN_MAX;
	if (r->has_text) {
		size_t bt = json_strn_bound(r->text_len);
		size_t bd = json_strn_bound(r->delta_len);

		if (bt == SIZE_MAX || bd == SIZE_MAX)
			return SIZE_MAX;
		need += bt + bd;
	}
	/* Per entry its token, its logprob and the literal around them
	 * (which the bound once left out: an answer of many tokens with 20
	 * alternatives each, with long logprobs, overran it). */
	if (r->logprobs)
		need += (size_t)r->n_tokens * r->logprob_stride *
			(JSON_TOKEN_MAX + LOGPROB_JSON_MAX + LOGPROB_ENTRY_LIT) +
			(size_t)r->n_tokens * LOGPROB_TOKEN_LIT;
	return need;
}

int result_format(const struct result *r, struct strbuf *out)
{
	size_t need = result_format_bound(r);
	uint32_t i;
	char *p;

	if (need == SIZE_MAX)
		return -ENOMEM;
	if (strbuf_reserve(out, need))
		return -ENOMEM;

	p = out->data + out->len;
	p = JSON_PUT_LIT(p, "{\"id\":");
	p = json_put_str(p, r->id);
	p = JSON_PUT_LIT(p, ",\"tokens\":[");
	for (i = 0; i < r->n_tokens; i++) {
		if (i)
			*p++ = ',';
		p = json_put_i32(p, r->tokens[i]);
	}
	p = JSON_PUT_LIT(p, "],\"finish_reason\":");
	p = json_put_str(p, r->finish_reason);
	if (r->has_text) {
		p = JSON_PUT_LIT(p, ",\"text\":");
		p = json_put_strn(p, r->text ? r->text : "", r->text ? r->text_len : 0);
	}
	if (r->has_delta) {
		p = JSON_PUT_LIT(p, ",\"delta\":");
		p = json_put_strn(p, r->delta ? r->delta : "", r->delta ? r->delta_len : 0);
	}
	p = JSON_PUT_LIT(p, ",\"usage\":{\"prompt_tokens\":");
	p = json_put_u64(p, r->n_prompt);
	p = JSON_PUT_LIT(p, ",\"completion_tokens\":");
	p = json_put_u64(p, r->n_generated);
	p = JSON_PUT_LIT(p, "},\"line\":");
	p = json_put_u64(p, r->line_no);
	if (r->n_choices > 1) {
		p = JSON_PUT_LIT(p, ",\"index\":");
		p = json_put_u64(p, r->index);
	}
	if (r->has_seed) {
		p = JSON_PUT_LIT(p, ",\"seed\":");
		p = json_put_u64(p, r->seed);
	}
	if (r->logprobs)
		p = put_logprobs(p, r);
	if (r->error) {
		p = JSON_PUT_LIT(p, ",\"error\":");
		p = json_put_str(p, r->error);
	}
	p = JSON_PUT_LIT(p, "}\n");
	*p = '\0';
	out->len = (size_t)(p - out->data);
	return 0;
}

int result_delta_format(const struct result_delta *d, struct strbuf *out)
{
	size_t b_id = json_str_bound(d->id), b_text = json_strn_bound(d->text_len);
	char *p;

	if (b_id == SIZE_MAX || b_text == SIZE_MAX ||
	    strbuf_reserve(out, 64 + b_id + b_text +
			   (size_t)d->n_tokens * JSON_TOKEN_MAX))
		return -ENOMEM;
	p = out->data + out->len;
	p = JSON_PUT_LIT(p, "{\"id\":");
	p = json_put_str(p, d->id);
	if (d->n_choices > 1) {
		p = JSON_PUT_LIT(p, ",\"index\":");
		p = json_put_u64(p, d->index);
	}
	p = JSON_PUT_LIT(p, ",\"tokens\":[");
	for (uint32_t i = 0; i < d->n_tokens; i++) {
		if (i)
			*p++ = ',';
		p = json_put_i32(p, d->tokens[i]);
	}
	p = JSON_PUT_LIT(p, "],\"delta\":");
	p = json_put_strn(p, d->text ? d->text : "", d->text ? d->text_len : 0);
	p = JSON_PUT_LIT(p, "}\n");
	*p = '\0';
	out->len = (size_t)(p - out->data);
	return 0;
}
