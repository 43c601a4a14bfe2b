/*
 * request.c - parse one JSON Lines input line into a struct request, and
 * format a finished request's result line (docs/DESIGN.md 3).
 *
 * NOTES ON THE DESIGN
 *
 * A line of the common shape (id, prompt, max_tokens, the stop fields and
 * include_stop; plain ASCII, valid) is read by request_parse_fast()
 * without jansson; it gives up on anything else, so what follows is the
 * rule for every line.  Both parsers merge and compile the stop fields
 * with the same builder (request_build.h); neither calls the other's
 * code beyond request_parse() trying the fast path first.
 * Parsing is jansson with JSON_REJECT_DUPLICATES: a line that names a field
 * twice is ambiguous, so it is not JSON we accept.  "id" is read first so
 * that every later error can still name the request.  Optional fields that
 * are JSON null mean "not given", as in OpenAI-style servers; any other
 * wrong type is an error.  Integers written as reals (1.0) are type errors,
 * never rounded.  Every check names the field and, inside arrays, the
 * index, so a user can find the bad token in a long line.
 *
 * The four stop fields are merged into one list of sequences, in the order
 * stop_token, stop_token_ids, stop_sequence, stop_sequences (a stop token
 * is a sequence of length one): the fields are walked in that order,
 * validating every token and handing it to the builder, which also
 * bounds the counts.  The context sum is kept in uint64_t so that no
 * input, however long, can wrap it.
 *
 * result_format() runs once per finished request, on the coordinator's
 * output path.  It reserves a worst-case size once (6 bytes per string
 * byte, 11 per token) and then writes numbers and escapes by hand without
 * further checks, so the only failure point leaves the buffer untouched.
 * Strings are escaped as JSON requires; valid UTF-8 is copied as is and
 * any invalid byte (jansson's error text may quote one) becomes U+FFFD, so
 * every line we write is valid JSON.
 */
#include "request.h"
#include "request_fast.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "json_writer.h"
#include "request_build.h"
#include "stop_matcher.h"

/* ------------------------------------------------------------------------
 * Parsing
 */

struct parse_ctx {
	uint64_t line_no;
	const struct request_limits *lim;
	char *err;
	size_t err_len;
};

static int parse_error(const struct parse_ctx *pc, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Write "line N: <fmt>" (just "<fmt>" for line 0: an HTTP body) into
 * pc->err; returns rc. */
static int parse_error(const struct parse_ctx *pc, int rc, const char *fmt, ...)
{
	va_list ap;
	int n = 0;

	if (!pc->err || !pc->err_len)
		return rc;
	if (pc->line_no)
		n = snprintf(pc->err, pc->err_len, "line %llu: ",
			     (unsigned long long)pc->line_no);
	if (n < 0 || (size_t)n >= pc->err_len)
		return rc;
	va_start(ap, fmt);
	vsnprintf(pc->err + n, pc->err_len - (size_t)n, fmt, ap);
	va_end(ap);
	return rc;
}

/* What a JSON value is, for "must be X, not Y" messages. */
static const char *json_kind(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "an object";
	case JSON_ARRAY:
		return "an array";
	case JSON_STRING:
		return "a string";
	case JSON_INTEGER:
		return "an integer";
	case JSON_REAL:
		return "a real number";
	case JSON_TRUE:
	case JSON_FALSE:
		return "a boolean";
	case JSON_NULL:
		return "null";
	}
	return "unknown";
}

/* Optional field: NULL when absent or null. */
static json_t *get_opt(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);

	return json_is_null(v) ? NULL : v;
}

/*
 * Read one token.  name[i][j] labels it in messages (i, j < 0: not
 * used).  0, or -EINVAL with err written.
 */
static int token_get(const struct parse_ctx *pc, const json_t *v,
		     const char *name, long i, long j, int32_t *out)
{
	char label[96];
	json_int_t t = 0;

	if (json_is_integer(v)) {
		t = json_integer_value(v);
		if (t >= 0 && (uint64_t)t < pc->lim->vocab) {
			*out = (int32_t)t;
			return 0;
		}
	}
	if (i < 0)
		snprintf(label, sizeof(label), "%s", name);
	else if (j < 0)
		snprintf(label, sizeof(label), "%s[%ld]", name, i);
	else
		snprintf(label, sizeof(label), "%s[%ld][%ld]", name, i, j);
	if (!json_is_integer(v))
		return parse_error(pc, -EINVAL,
				   "%s: token must be an integer, not %s",
				   label, json_kind(v));
	return parse_error(pc, -EINVAL, "%s: token %lld out of range [0, %u)",
			   label, (long long)t, pc->lim->vocab);
}

/* The builder's error as the line's: 0, or -ENOMEM / -EINVAL with err
 * written. */
static int build_error(const struct parse_ctx *pc, int rc)
{
	if (rc == -ENOMEM)
		return parse_error(pc, -ENOMEM, "out of memory");
	if (rc)
		return parse_error(pc, -EINVAL, "too many stop tokens: more than %u "
				   "in all stop sequences together",
				   REQUEST_MAX_STOP_TOKENS);
	return 0;
}

/* Token t as a stop sequence of its own in field f. */
static int add_alone(const struct parse_ctx *pc, struct stop_builder *b,
		     enum stop_field f, int32_t t)
{
	int rc = stop_builder_push(b, f, t);

	return build_error(pc, rc ? rc : stop_builder_end_seq(b, f));
}

/* One array of tokens as one sequence (stop_sequence, stop_sequences[i]). */
static int stop_seq_walk(const struct parse_ctx *pc, const json_t *arr,
			 const char *name, long i, struct stop_builder *b,
			 enum stop_field f)
{
	size_t j, n = json_array_size(arr);
	int32_t t;
	int rc;

	if (n == 0) {
		if (i < 0)
			return parse_error(pc, -EINVAL, "%s is empty", name);
		return parse_error(pc, -EINVAL, "%s[%ld] is empty", name, i);
	}
	if (n > UINT32_MAX)
		return parse_error(pc, -EINVAL, "%s is too long", name);
	for (j = 0; j < n; j++) {
		if (i < 0)
			rc = token_get(pc, json_array_get(arr, j), name,
				       (long)j, -1, &t);
		else
			rc = token_get(pc, json_array_get(arr, j), name, i,
				       (long)j, &t);
		if (rc)
			return rc;
		rc = build_error(pc, stop_builder_push(b, f, t));
		if (rc)
			return rc;
	}
	return build_error(pc, stop_builder_end_seq(b, f));
}

/*
 * Walk the four stop fields in their fixed order, validating and adding
 * every sequence to b.  0, -EINVAL or -ENOMEM.
 */
static int stops_walk(const struct parse_ctx *pc, json_t *obj,
		      struct stop_builder *b)
{
	json_t *v;
	size_t i;
	int32_t t;
	int rc;

	v = get_opt(obj, "stop_token");
	if (v) {
		rc = token_get(pc, v, "stop_token", -1, -1, &t);
		if (!rc)
			rc = add_alone(pc, b, STOP_FIELD_TOKEN, t);
		if (rc)
			return rc;
	}

	v = get_opt(obj, "stop_token_ids");
	if (v && !json_is_array(v))
		return parse_error(pc, -EINVAL,
				   "field 'stop_token_ids' must be an array of integers, not %s",
				   json_kind(v));
	for (i = 0; i < json_array_size(v); i++) {
		rc = token_get(pc, json_array_get(v, i), "stop_token_ids",
			       (long)i, -1, &t);
		if (!rc)
			rc = add_alone(pc, b, STOP_FIELD_TOKEN_IDS, t);
		if (rc)
			return rc;
	}

	v = get_opt(obj, "stop_sequence");
	if (v && !json_is_array(v))
		return parse_error(pc, -EINVAL,
				   "field 'stop_sequence' must be an array of integers, not %s",
				   json_kind(v));
	if (v) {
		rc = stop_seq_walk(pc, v, "stop_sequence", -1, b,
				   STOP_FIELD_SEQUENCE);
		if (rc)
			return rc;
	}

	v = get_opt(obj, "stop_sequences");
	if (v && !json_is_array(v))
		return parse_error(pc, -EINVAL,
				   "field 'stop_sequences' must be an array of arrays of integers, not %s",
				   json_kind(v));
	for (i = 0; i < json_array_size(v); i++) {
		json_t *s = json_array_get(v, i);

		if (!json_is_array(s))
			return parse_error(pc, -EINVAL,
					   "stop_sequences[%zu] must be an array of integers, not %s",
					   i, json_kind(s));
		rc = stop_seq_walk(pc, s, "stop_sequences", (long)i, b,
				   STOP_FIELD_SEQUENCES);
		if (rc)
			return rc;
	}
	return 0;
}

/* Validate, collect and compile the stop sequences into req. */
static int parse_stops(const struct parse_ctx *pc, json_t *obj,
		       struct request *req)
{
	struct stop_builder b;
	int rc;

	stop_builder_init(&b);
	rc = stops_walk(pc, obj, &b);
	if (rc) {
		stop_builder_release(&b);
		return rc;
	}
	return build_error(pc, stop_builder_finish(&b, req));
}

static int parse_id(const struct parse_ctx *pc, json_t *obj,
		    struct request *req)
{
	json_t *v = json_object_get(obj, "id");

	if (!v && pc->lim->id_optional)
		return 0;
	if (!v)
		return parse_error(pc, -EINVAL, "missing required field 'id'");
	if (!json_is_string(v))
		return parse_error(pc, -EINVAL,
				   "field 'id' must be a string, not %s",
				   json_kind(v));
	req->id = strndup(json_string_value(v), json_string_length(v));
	if (!req->id)
		return parse_error(pc, -ENOMEM, "out of memory");
	return 0;
}

static int parse_prompt(const struct parse_ctx *pc, json_t *obj,
			struct request *req)
{
	json_t *v = json_object_get(obj, "prompt");
	size_t i, n;
	int rc;

	if (!v)
		return parse_error(pc, -EINVAL,
				   "missing required field 'prompt'");
	if (!json_is_array(v))
		return parse_error(pc, -EINVAL,
				   "field 'prompt' must be an array of integers, not %s",
				   json_kind(v));
	n = json_array_size(v);
	if (n > UINT32_MAX)
		return parse_error(pc, -EINVAL,
				   "prompt (%zu tokens) exceeds the context limit %u",
				   n, pc->lim->max_context);
	if (n == 0)
		return 0;
	req->prompt = malloc(n * sizeof(*req->prompt));
	if (!req->prompt)
		return parse_error(pc, -ENOMEM, "out of memory");
	for (i = 0; i < n; i++) {
		rc = token_get(pc, json_array_get(v, i), "prompt", (long)i, -1,
			       &req->prompt[i]);
		if (rc)
			return rc;
	}
	req->n_prompt = (uint32_t)n;
	return 0;
}

static int parse_fields(const struct parse_ctx *pc, json_t *obj,
			struct request *req)
{
	json_int_t max_tokens = REQUEST_DEFAULT_MAX_TOKENS;
	json_t *v;
	int rc;

	rc = parse_id(pc, obj, req);
	if (rc)
		return rc;
	rc = parse_prompt(pc, obj, req);
	if (rc)
		return rc;

	v = get_opt(obj, "max_tokens");
	if (v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return parse_error(pc, -EINVAL,
					   "field 'max_tokens' must be an integer >= 0");
		max_tokens = json_integer_value(v);
	}

	rc = parse_stops(pc, obj, req);
	if (rc)
		return rc;

	v = get_opt(obj, "include_stop");
	if (v) {
		if (!json_is_boolean(v))
			return parse_error(pc, -EINVAL,
					   "field 'include_stop' must be true or false, not %s",
					   json_kind(v));
		req->include_stop = json_is_true(v);
	}

	/* Both terms are < 2^63, so the sum cannot wrap. */
	if ((uint64_t)req->n_prompt + (uint64_t)max_tokens >
	    pc->lim->max_context)
		return parse_error(pc, -EINVAL,
				   "prompt (%u tokens) + max_tokens (%lld) exceeds the context limit %u",
				   req->n_prompt, (long long)max_tokens,
				   pc->lim->max_context);
	req->max_tokens = (uint32_t)max_tokens;
	return 0;
}

static bool is_blank(const char *s, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
			return false;
	return true;
}

int request_parse(const char *line, size_t len, uint64_t line_no,
		  const struct request_limits *lim, struct request *req,
		  char *err, size_t err_len)
{
	struct parse_ctx pc = { line_no, lim, err, err_len };
	json_error_t jerr;
	json_t *obj;
	char *id;
	int rc;

	memset(req, 0, sizeof(*req));
	req->line_no = line_no;
	if (err && err_len)
		err[0] = '\0';

	if (is_blank(line, len))
		return parse_error(&pc, -EINVAL,
				   "empty line is not JSON (expected an object)");
	rc = request_parse_fast(line, len, lim, req);
	if (rc == 1)
		return 0;
	if (rc < 0)
		return parse_error(&pc, -ENOMEM, "out of memory");
	obj = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY,
			 &jerr);
	if (!obj) {
		if (json_error_code(&jerr) == json_error_out_of_memory)
			return parse_error(&pc, -ENOMEM, "out of memory");
		return parse_error(&pc, -EINVAL,
				   "not valid JSON: %s at column %d",
				   jerr.text, jerr.column);
	}
	if (!json_is_object(obj)) {
		rc = parse_error(&pc, -EINVAL,
				 "top-level value is %s, expected an object",
				 json_kind(obj));
		goto out_decref;
	}

	rc = parse_fields(&pc, obj, req);
	if (rc) {
		/* Keep the id so the error result can name the request. */
		id = req->id;
		req->id = NULL;
		request_release(req);
		req->id = id;
		req->line_no = line_no;
	}
out_decref:
	json_decref(obj);
	return rc;
}

void request_release(struct request *req)
{
	free(req->id);
	free(req->prompt);
	stop_matcher_destroy(req->stops);
	free(req->stop_tokens);
	free(req->stop_lens);
	memset(req, 0, sizeof(*req));
}

/* ------------------------------------------------------------------------
 * Formatting (the primitives are in json_writer.h)
 */

int result_format(const struct result *r, struct strbuf *out)
{
	size_t b_id = json_str_bound(r->id);
	size_t b_fr = json_str_bound(r->finish_reason);
	size_t b_err = r->error ? json_str_bound(r->error) : 0;
	size_t need;
	uint32_t i;
	char *p;

	_Static_assert(SIZE_MAX / 4 / JSON_TOKEN_MAX >= UINT32_MAX,
		       "n_tokens * JSON_TOKEN_MAX must not wrap");
	if (b_id == SIZE_MAX || b_fr == SIZE_MAX || b_err == SIZE_MAX)
		return -ENOMEM;
	/* 256 covers the field names and the three numbers. */
	need = 256 + b_id + b_fr + b_err + (size_t)r->n_tokens * JSON_TOKEN_MAX;
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
	p = JSON_PUT_LIT(p, ",\"usage\":{\"prompt_tokens\":");
	p = json_put_u64(p, r->n_prompt);
	p = JSON_PUT_LIT(p, ",\"completion_tokens\":");
	p = json_put_u64(p, r->n_generated);
	p = JSON_PUT_LIT(p, "},\"line\":");
	p = json_put_u64(p, r->line_no);
	if (r->error) {
		p = JSON_PUT_LIT(p, ",\"error\":");
		p = json_put_str(p, r->error);
	}
	p = JSON_PUT_LIT(p, "}\n");
	*p = '\0';
	out->len = (size_t)(p - out->data);
	return 0;
}
