/*
 * request_json.c - parse a request's JSON (a JSON Lines input line, an HTTP
 * body) into a struct request (docs/DESIGN.md 3).
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
 */
#include "server/request/request_json.h"
#include "server/request/request_fast.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "sampling/sampler.h"
#include "server/request/request_build.h"
#include "server/request/request_fields.h"
#include "server/request/request_grammar.h"
#include "text/stop_matcher.h"
#include "text/text_stop.h"
#include "text/text_tokenizer.h"

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
				   label, request_json_kind(v));
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
				   request_json_kind(v));
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
				   request_json_kind(v));
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
				   request_json_kind(v));
	for (i = 0; i < json_array_size(v); i++) {
		json_t *s = json_array_get(v, i);

		if (!json_is_array(s))
			return parse_error(pc, -EINVAL,
					   "stop_sequences[%zu] must be an array of integers, not %s",
					   i, request_json_kind(s));
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
				   request_json_kind(v));
	if (strlen(json_string_value(v)) != json_string_length(v))
		return parse_error(pc, -EINVAL,
				   "field 'id' must not contain a NUL character");
	req->id = strndup(json_string_value(v), json_string_length(v));
	if (!req->id)
		return parse_error(pc, -ENOMEM, "out of memory");
	return 0;
}

/* A string prompt: encoded by the tokenizer, BOS first. */
static int parse_text_prompt(const struct parse_ctx *pc, const json_t *v,
			     struct request *req)
{
	size_t len = json_string_length(v), n = 0;
	int32_t *shrunk;
	int rc;

	if (!pc->lim->tok)
		return parse_error(pc, -EINVAL, "field 'prompt' is a string, but "
				   "this server has no tokenizer (--tokenizer): "
				   "send token ids");
	/* no token holds more than the longest piece (+1: the dummy-prefix
	 * space may join a piece): a longer text cannot fit, and is refused
	 * before it costs an encode */
	if (len / (text_tokenizer_longest_piece(pc->lim->tok) + 1) >
	    pc->lim->max_context)
		return parse_error(pc, -EINVAL, "prompt (%zu bytes) exceeds the "
				   "context limit %u", len, pc->lim->max_context);
	req->prompt = malloc(text_tokenizer_encode_max(len) * sizeof(*req->prompt));
	if (!req->prompt)
		return parse_error(pc, -ENOMEM, "out of memory");
	rc = text_tokenizer_encode(pc->lim->tok, json_string_value(v), len,
				   true, req->prompt,
				   text_tokenizer_encode_max(len), &n);
	if (rc == -ENOMEM)
		return parse_error(pc, -ENOMEM, "out of memory");
	if (rc)
		return parse_error(pc, -EINVAL, "prompt: cannot encode: %s",
				   strerror(-rc));
	if (n > pc->lim->max_context)
		return parse_error(pc, -EINVAL, "prompt (%zu tokens) exceeds the "
				   "context limit %u", n, pc->lim->max_context);
	req->n_prompt = (uint32_t)n;
	/* the bound was a token per byte: keep only what the prompt holds */
	shrunk = realloc(req->prompt, (n ? n : 1) * sizeof(*req->prompt));
	if (shrunk)
		req->prompt = shrunk;
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
	if (json_is_string(v))
		return parse_text_prompt(pc, v, req);
	if (!json_is_array(v))
		return parse_error(pc, -EINVAL,
				   "field 'prompt' must be a string or an array of "
				   "integers, not %s", request_json_kind(v));
	n = json_array_size(v);
	/* a list of prompts: OpenAI's batch, which a line cannot answer
	 * (its result has one list of tokens per choice) */
	if (pc->lim->api == REQUEST_API_JSONL &&
	    (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0))))
		return parse_error(pc, -EINVAL, "field 'prompt' is a list of "
				   "prompts: a `run` line has one prompt (send a "
				   "line per prompt; batches are /v1/completions')");
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

/* A JSON number (integer or real) as a finite float in *out; 1 when it
 * is one, 0 when v is of another type or out of float's range. */
static int number_get(const json_t *v, float *out)
{
	double d;

	if (!json_is_number(v))
		return 0;
	d = json_number_value(v);
	if (!isfinite(d) || fabs(d) > 3.4e38)
		return 0;
	*out = (float)d;
	return 1;
}

/* An optional number field into *out.  0, or -EINVAL with err written. */
static int parse_float_field(const struct parse_ctx *pc, json_t *obj,
			     const char *key, float *out, bool *given)
{
	json_t *v = get_opt(obj, key);

	if (given)
		*given = v != NULL;
	if (!v)
		return 0;
	if (!number_get(v, out))
		return parse_error(pc, -EINVAL, "field '%s' must be a finite "
				   "number, not %s", key, request_json_kind(v));
	return 0;
}

/*
 * "logit_bias": {"<token id>": bias, ...}, OpenAI's shape: keys are token
 * ids written in decimal.  Checked for form here; ranges (vocabulary,
 * [-100, 100], the count) by sampling_params_validate().
 */
static int parse_logit_bias(const struct parse_ctx *pc, json_t *obj,
			    struct request *req)
{
	json_t *v = get_opt(obj, "logit_bias"), *bias;
	struct sampling_bias *out;
	const char *key;
	size_t n, i = 0;

	if (!v)
		return 0;
	if (!json_is_object(v))
		return parse_error(pc, -EINVAL, "field 'logit_bias' must be an "
				   "object of token id -> bias, not %s", request_json_kind(v));
	n = json_object_size(v);
	if (n > SAMPLER_MAX_BIAS)
		return parse_error(pc, -EINVAL, "field 'logit_bias' has %zu "
				   "entries: at most %u", n, SAMPLER_MAX_BIAS);
	if (!n)
		return 0;
	out = calloc(n, sizeof(*out));
	if (!out)
		return parse_error(pc, -ENOMEM, "out of memory");
	req->sampling.bias = out;
	json_object_foreach(v, key, bias) {
		char *end;
		unsigned long long t;

		errno = 0;
		t = strtoull(key, &end, 10);
		if (!*key || *end || key[0] == '-' || key[0] == '+' ||
		    key[0] == ' ' || errno || t >= pc->lim->vocab)
			return parse_error(pc, -EINVAL, "logit_bias: key '%.40s' "
					   "is not a token id in [0, %u)", key,
					   pc->lim->vocab);
		out[i].token = (int32_t)t;
		if (!number_get(bias, &out[i].bias))
			return parse_error(pc, -EINVAL, "logit_bias[%s]: the bias "
					   "must be a finite number, not %s", key,
					   request_json_kind(bias));
		i++;
	}
	req->sampling.n_bias = (uint32_t)i;
	return 0;
}

/*
 * "logprobs": true/false (chat's form, with "top_logprobs": N) or an
 * integer N >= 0 (the completions form: the chosen token's logprob and
 * the N most likely alternatives).
 */
static int parse_logprobs(const struct parse_ctx *pc, json_t *obj,
			  struct request *req)
{
	json_t *v = get_opt(obj, "logprobs"), *top = get_opt(obj, "top_logprobs");
	struct sampling_params *sp = &req->sampling;

	if (v && json_is_boolean(v)) {
		sp->logprobs = json_is_true(v);
	} else if (v && json_is_integer(v)) {
		if (json_integer_value(v) < 0 ||
		    json_integer_value(v) > SAMPLER_MAX_LOGPROBS)
			return parse_error(pc, -EINVAL, "field 'logprobs' must be "
					   "in [0, %u], not %lld", SAMPLER_MAX_LOGPROBS,
					   (long long)json_integer_value(v));
		if (top)
			return parse_error(pc, -EINVAL, "field 'top_logprobs' "
					   "goes with 'logprobs': true; an integer "
					   "'logprobs' already says how many");
		sp->logprobs = true;
		sp->top_logprobs = (uint32_t)json_integer_value(v);
		return 0;
	} else if (v) {
		return parse_error(pc, -EINVAL, "field 'logprobs' must be true, "
				   "false or an integer, not %s", request_json_kind(v));
	}
	if (!top)
		return 0;
	if (!json_is_integer(top) || json_integer_value(top) < 0 ||
	    json_integer_value(top) > SAMPLER_MAX_LOGPROBS)
		return parse_error(pc, -EINVAL, "field 'top_logprobs' must be an "
				   "integer in [0, %u]", SAMPLER_MAX_LOGPROBS);
	if (!sp->logprobs && json_integer_value(top))
		return parse_error(pc, -EINVAL, "field 'top_logprobs' needs "
				   "'logprobs': true");
	sp->top_logprobs = (uint32_t)json_integer_value(top);
	return 0;
}

/* The sampling fields (docs/DESIGN.md 2.4): temperature, top_p, top_k,
 * min_p, presence_penalty, frequency_penalty, repetition_penalty, seed,
 * logit_bias, logprobs, top_logprobs, n. */
static int parse_sampling(const struct parse_ctx *pc, json_t *obj,
			  struct request *req)
{
	struct sampling_params *sp = &req->sampling;
	bool given;
	json_t *v;
	int rc;
	char why[160];

	rc = parse_float_field(pc, obj, "temperature", &sp->temperature, &given);
	if (rc)
		return rc;
	if (!given)
		sp->temperature = pc->lim->default_temperature;
	if ((rc = parse_float_field(pc, obj, "top_p", &sp->top_p, NULL)) ||
	    (rc = parse_float_field(pc, obj, "min_p", &sp->min_p, NULL)) ||
	    (rc = parse_float_field(pc, obj, "presence_penalty",
				    &sp->presence_penalty, NULL)) ||
	    (rc = parse_float_field(pc, obj, "frequency_penalty",
				    &sp->frequency_penalty, NULL)) ||
	    (rc = parse_float_field(pc, obj, "repetition_penalty",
				    &sp->repetition_penalty, &given)))
		return rc;
	/* the sampler reads 0 as "unset"; a request that says 0 asks for
	 * something vLLM refuses too */
	if (given && !(sp->repetition_penalty > 0.0f))
		return parse_error(pc, -EINVAL, "field 'repetition_penalty' must "
				   "be > 0 (1: off), not %g", sp->repetition_penalty);
	v = get_opt(obj, "top_k");
	if (v) {
		/* -1 is "off" in vLLM's and SGLang's APIs; 0 is ours */
		if (!json_is_integer(v) || json_integer_value(v) < -1 ||
		    json_integer_value(v) > UINT32_MAX)
			return parse_error(pc, -EINVAL, "field 'top_k' must be an "
					   "integer >= 0 (0 or -1: off)");
		sp->top_k = json_integer_value(v) < 0 ? 0 :
			    (uint32_t)json_integer_value(v);
	}
	v = get_opt(obj, "seed");
	if (v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return parse_error(pc, -EINVAL, "field 'seed' must be an "
					   "integer in [0, 2^63)");
		sp->seed = (uint64_t)json_integer_value(v);
		req->seed_given = true;
	}
	v = get_opt(obj, "n");
	if (v) {
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > REQUEST_MAX_CHOICES)
			return parse_error(pc, -EINVAL, "field 'n' must be an "
					   "integer in [1, %u]", REQUEST_MAX_CHOICES);
		req->n_choices = (uint32_t)json_integer_value(v);
	}
	rc = parse_logit_bias(pc, obj, req);
	if (!rc)
		rc = parse_logprobs(pc, obj, req);
	if (rc)
		return rc;
	if (sampling_params_validate(sp, pc->lim->vocab, why, sizeof(why)))
		return parse_error(pc, -EINVAL, "%s", why);
	if (request_needs_logits(req) && !pc->lim->has_logits)
		return parse_error(pc, -EINVAL, "this model gives tokens, not "
				   "logits: it cannot sample (temperature > 0), "
				   "apply logit_bias or penalties or report "
				   "logprobs");
	return 0;
}

/*
 * "stop": a string or an array of strings (OpenAI), matched on the text
 * of the generated tokens (text_stop.h says how); needs the tokenizer.
 */
static int parse_stop_strings(const struct parse_ctx *pc, json_t *obj,
			      struct request *req)
{
	json_t *v = get_opt(obj, "stop");
	size_t n;
	char why[160];

	if (!v)
		return 0;
	if (!json_is_string(v) && !json_is_array(v))
		return parse_error(pc, -EINVAL, "field 'stop' must be a string "
				   "or an array of strings, not %s", request_json_kind(v));
	if (!pc->lim->tok)
		return parse_error(pc, -EINVAL, "field 'stop' holds text, but "
				   "this server has no tokenizer (--tokenizer): "
				   "use stop_token_ids or stop_sequences");
	n = json_is_string(v) ? 1 : json_array_size(v);
	if (n > TEXT_STOP_MAX)
		return parse_error(pc, -EINVAL, "field 'stop' has %zu strings: "
				   "at most %u", n, TEXT_STOP_MAX);
	if (!n)
		return 0;
	req->stop_strs = calloc(n, sizeof(*req->stop_strs));
	req->stop_str_lens = calloc(n, sizeof(*req->stop_str_lens));
	if (!req->stop_strs || !req->stop_str_lens)
		return parse_error(pc, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		const json_t *e = json_is_string(v) ? v : json_array_get(v, i);

		if (!json_is_string(e))
			return parse_error(pc, -EINVAL, "stop[%zu] must be a "
					   "string, not %s", i, request_json_kind(e));
		req->stop_str_lens[i] = json_string_length(e);
		req->stop_strs[i] = malloc(req->stop_str_lens[i] + 1);
		if (!req->stop_strs[i])
			return parse_error(pc, -ENOMEM, "out of memory");
		memcpy(req->stop_strs[i], json_string_value(e),
		       req->stop_str_lens[i] + 1);
		req->n_stop_strs = (uint32_t)i + 1;
	}
	req->text_stops = text_stop_set_create((const char *const *)req->stop_strs,
					       req->stop_str_lens, req->n_stop_strs,
					       why, sizeof(why));
	if (!req->text_stops)
		return parse_error(pc, errno == ENOMEM ? -ENOMEM : -EINVAL,
				   "field 'stop': %s", why);
	return 0;
}

/* Every member is one of the front end's fields (request_fields.h). */
static int check_fields(const struct parse_ctx *pc, const json_t *obj)
{
	char why[256];

	if (request_fields_check(obj, pc->lim->api, why, sizeof(why), NULL, 0))
		return parse_error(pc, -EINVAL, "%s", why);
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
	rc = check_fields(pc, obj);
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
	rc = parse_sampling(pc, obj, req);
	if (!rc)
		rc = parse_stop_strings(pc, obj, req);
	if (rc)
		return rc;
	v = get_opt(obj, "ignore_eos");
	if (v) {
		if (!json_is_boolean(v))
			return parse_error(pc, -EINVAL,
					   "field 'ignore_eos' must be true or false, not %s",
					   request_json_kind(v));
		req->ignore_eos = json_is_true(v);
	}
	v = get_opt(obj, "speculate");
	if (v) {
		if (!json_is_boolean(v))
			return parse_error(pc, -EINVAL,
					   "field 'speculate' must be true or false, not %s",
					   request_json_kind(v));
		req->no_spec = json_is_false(v);
	}

	{
		char why[320];

		rc = request_parse_grammar(obj, pc->lim, req, why, sizeof(why));
		if (rc == -ENOMEM)
			return parse_error(pc, rc, "out of memory");
		if (rc)
			return parse_error(pc, rc, "%s", why);
	}

	v = get_opt(obj, "include_stop");
	if (v) {
		if (!json_is_boolean(v))
			return parse_error(pc, -EINVAL,
					   "field 'include_stop' must be true or false, not %s",
					   request_json_kind(v));
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

/* What a line that sets no sampling field gets. */
static void request_defaults(struct request *req, const struct request_limits *lim)
{
	req->sampling = SAMPLING_PARAMS_GREEDY;
	req->sampling.temperature = lim->default_temperature;
	req->n_choices = 1;
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
	request_defaults(req, lim);
	if (err && err_len)
		err[0] = '\0';

	if (is_blank(line, len))
		return parse_error(&pc, -EINVAL,
				   "empty line is not JSON (expected an object)");
	rc = request_parse_fast(line, len, lim, req);
	if (rc == 1)	/* it takes no sampling field: the defaults hold */
		return 0;
	if (rc < 0)
		return parse_error(&pc, -ENOMEM, "out of memory");
	/* NUL is a byte like any other in text (a prompt, a stop string):
	 * only the id, a C string everywhere, refuses it (parse_id) */
	obj = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY |
			 JSON_ALLOW_NUL,
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
				 request_json_kind(obj));
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
