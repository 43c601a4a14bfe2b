/*
 * request_fields.c - the one table of request fields (request_fields.h):
 * for every field any front end knows, which front ends take it, whether
 * it is parsed, accepted as metadata or refused, its JSON type, and for a
 * refused one the value that asks for nothing.
 *
 * NOTES ON THE DESIGN
 *
 * The table is the documentation's source: docs/usage.md ("Request
 * fields") lists the same rows.  A row's name is unique; a field two
 * front ends share is one row with both bits.  The check walks the body,
 * not the table, so a body of n members costs n lookups in a table of a
 * few dozen rows: a linear scan is enough.  JSON null is "not given"
 * everywhere (request_json.c), so null passes every row.
 *
 * A refused field's neutral value is what OpenAI documents as its
 * default (echo false, best_of 1) or a value that
 * cannot change the answer here (best_of equal to n, function_call
 * "auto" with no functions).
 */
#include "server/request/request_fields.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "util/err_fail.h"

#define API(a) (1u << (a))
#define A_JSONL API(REQUEST_API_JSONL)
#define A_CMPL API(REQUEST_API_COMPLETIONS)
#define A_CHAT API(REQUEST_API_CHAT)
#define A_HTTP (A_CMPL | A_CHAT)
#define A_ALL (A_JSONL | A_CMPL | A_CHAT)

/* JSON types a row takes (0: its parser checks). */
#define T_BOOL 1u
#define T_NUM 2u	/* integer or real */
#define T_INT 4u
#define T_STR 8u
#define T_ARR 16u
#define T_OBJ 32u

enum field_kind {
	FIELD_PARSED,	/* implemented: read by its parser */
	FIELD_METADATA,	/* taken, type-checked, changes nothing */
	FIELD_REFUSED,	/* not implemented: only its neutral value passes */
};

struct field_rule {
	const char *name;
	unsigned apis;		/* A_*: the front ends that know it */
	enum field_kind kind;
	unsigned types;		/* T_*: checked here */
	const char *want;	/* the types in words, for messages */
	/* FIELD_REFUSED: true for the value that asks for nothing (v is
	 * not null; obj is the whole body, for fields that depend on
	 * another) */
	bool (*neutral)(const json_t *v, const json_t *obj);
	const char *neutral_doc;	/* FIELD_REFUSED: that value in words */
	/* FIELD_REFUSED: the front ends (A_*) that implement it after all;
	 * there its type is checked here and its value by its parser */
	unsigned parsed_in;
};

/* ------------------------------------------------------------------------
 * Neutral values
 */

static bool is_false(const json_t *v, const json_t *obj)
{
	return json_is_false(v);
}

static bool is_empty(const json_t *v, const json_t *obj)
{
	return (json_is_string(v) && !json_string_length(v)) ||
	       (json_is_array(v) && !json_array_size(v)) ||
	       (json_is_object(v) && !json_object_size(v));
}

static bool str_is(const json_t *v, const char *s)
{
	return json_is_string(v) && !strcmp(json_string_value(v), s) &&
	       strlen(s) == json_string_length(v);
}

/* best_of 1, or equal to n (1 when absent): one candidate per choice. */
static bool best_of_neutral(const json_t *v, const json_t *obj)
{
	const json_t *n = json_object_get(obj, "n");
	json_int_t want = json_is_integer(n) ? json_integer_value(n) : 1;

	return json_integer_value(v) == 1 || json_integer_value(v) == want;
}

/* No list of key (absent, null or []). */
static bool no_list(const json_t *obj, const char *key)
{
	const json_t *l = json_object_get(obj, key);

	return !l || json_is_null(l) || (json_is_array(l) && !json_array_size(l));
}

/* "none", or "auto" when there is nothing to call. */
static bool function_call_neutral(const json_t *v, const json_t *obj)
{
	return str_is(v, "none") ||
	       (str_is(v, "auto") && no_list(obj, "functions"));
}

static bool modalities_text(const json_t *v, const json_t *obj)
{
	return json_array_size(v) == 1 && str_is(json_array_get(v, 0), "text");
}

static bool tier_default(const json_t *v, const json_t *obj)
{
	return str_is(v, "auto") || str_is(v, "default");
}

static bool is_medium(const json_t *v, const json_t *obj)
{
	return str_is(v, "medium");
}

static bool is_in_memory(const json_t *v, const json_t *obj)
{
	return str_is(v, "in-memory") || str_is(v, "in_memory");
}

static bool never(const json_t *v, const json_t *obj)
{
	return false;
}

/* ------------------------------------------------------------------------
 * The table (docs/usage.md, "Request fields", lists the same)
 */

#define PARSED(n, a) { n, a, FIELD_PARSED, 0, NULL, NULL, NULL, 0 }
#define META(n, a, t, w) { n, a, FIELD_METADATA, t, w, NULL, NULL, 0 }
#define REFUSED(n, a, t, w, f, d) { n, a, FIELD_REFUSED, t, w, f, d, 0 }
/* refused, but implemented by the front ends p */
#define REFUSED_BUT(n, a, t, w, f, d, p) { n, a, FIELD_REFUSED, t, w, f, d, p }

static const struct field_rule rules[] = {
	/* OpenAI's, implemented */
	PARSED("prompt", A_JSONL | A_CMPL),
	PARSED("messages", A_CHAT),
	PARSED("model", A_HTTP),
	PARSED("max_tokens", A_ALL),
	PARSED("max_completion_tokens", A_CHAT),
	PARSED("temperature", A_ALL),
	PARSED("top_p", A_ALL),
	PARSED("n", A_ALL),
	PARSED("seed", A_ALL),
	PARSED("stop", A_ALL),
	PARSED("logit_bias", A_ALL),
	PARSED("logprobs", A_ALL),
	PARSED("top_logprobs", A_ALL),	/* OpenAI's in chat, ours elsewhere */
	PARSED("stream", A_HTTP),
	PARSED("stream_options", A_HTTP),
	/* ours (docs/DESIGN.md 3.1) and vLLM's sampling extensions */
	PARSED("id", A_ALL),
	PARSED("stop_token", A_ALL),
	PARSED("stop_token_ids", A_ALL),
	PARSED("stop_sequence", A_ALL),
	PARSED("stop_sequences", A_ALL),
	PARSED("include_stop", A_ALL),
	PARSED("ignore_eos", A_ALL),
	PARSED("speculate", A_ALL),
	PARSED("top_k", A_ALL),
	PARSED("min_p", A_ALL),
	/* structured output (docs/DESIGN.md 2.8): llama.cpp's GBNF field,
	 * and OpenAI's response_format (taken by every front end, as vLLM
	 * takes it on completions too) */
	PARSED("grammar", A_ALL),
	PARSED("response_format", A_ALL),
	/* OpenAI's two, and vLLM's/llama.cpp's repetition_penalty */
	PARSED("presence_penalty", A_ALL),
	PARSED("frequency_penalty", A_ALL),
	PARSED("repetition_penalty", A_ALL),
	/* OpenAI's, metadata: nothing to do with them but accept them */
	META("user", A_HTTP, T_STR, "a string"),
	META("safety_identifier", A_CHAT, T_STR, "a string"),
	META("prompt_cache_key", A_CHAT, T_STR, "a string"),
	/* function tools (server/http/chat_tools.h, docs/DESIGN.md 2.9) */
	PARSED("tools", A_CHAT),
	PARSED("tool_choice", A_CHAT),
	PARSED("parallel_tool_calls", A_CHAT),
	/* not implemented: refused unless they ask for nothing */
	/* completions echo the prompt's text (completion_api.c); a `run`
	 * line's answer has no text field to put it in */
	REFUSED_BUT("echo", A_JSONL | A_CMPL, T_BOOL, "true or false", is_false,
		    "false", A_CMPL),
	REFUSED("suffix", A_JSONL | A_CMPL, T_STR, "a string", is_empty,
		"\"\" (no fill-in-the-middle model)"),
	/* completions rank best_of candidates (completion_api.c); a `run`
	 * line has one answer per choice */
	REFUSED_BUT("best_of", A_JSONL | A_CMPL, T_INT, "an integer",
		    best_of_neutral, "1 or n", A_CMPL),
	REFUSED("functions", A_CHAT, T_ARR, "an array", is_empty, "[]"),
	REFUSED("function_call", A_CHAT, T_STR | T_OBJ, "a string or an object",
		function_call_neutral, "\"none\" (or \"auto\" with no functions)"),
	REFUSED("store", A_CHAT, T_BOOL, "true or false", is_false,
		"false (nothing is stored)"),
	REFUSED("metadata", A_CHAT, T_OBJ, "an object", is_empty,
		"{} (nothing is stored to attach it to)"),
	REFUSED("modalities", A_CHAT, T_ARR, "an array", modalities_text,
		"[\"text\"]"),
	REFUSED("audio", A_CHAT, T_OBJ, "an object", never, "null"),
	REFUSED("prediction", A_CHAT, T_OBJ, "an object", never, "null"),
	REFUSED("reasoning_effort", A_CHAT, T_STR, "a string", never,
		"null (not a reasoning model)"),
	REFUSED("verbosity", A_CHAT, T_STR, "a string", is_medium,
		"\"medium\""),
	REFUSED("service_tier", A_CHAT, T_STR, "a string", tier_default,
		"\"auto\" or \"default\" (one tier)"),
	REFUSED("web_search_options", A_CHAT, T_OBJ, "an object", never, "null"),
	REFUSED("prompt_cache_retention", A_CHAT, T_STR, "a string",
		is_in_memory, "\"in-memory\""),
};

#define N_RULES (sizeof(rules) / sizeof(rules[0]))

static const char *const api_names[] = {
	[REQUEST_API_JSONL] = "a `run` input line",
	[REQUEST_API_COMPLETIONS] = "/v1/completions",
	[REQUEST_API_CHAT] = "/v1/chat/completions",
};

const char *request_field_name(size_t i)
{
	return i < N_RULES ? rules[i].name : NULL;
}

const char *request_json_kind(const json_t *v)
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

static const struct field_rule *rule_of(const char *name)
{
	for (size_t i = 0; i < N_RULES; i++)
		if (!strcmp(rules[i].name, name))
			return &rules[i];
	return NULL;
}

static bool type_ok(const json_t *v, unsigned types)
{
	return ((types & T_BOOL) && json_is_boolean(v)) ||
	       ((types & T_NUM) && json_is_number(v)) ||
	       ((types & T_INT) && json_is_integer(v)) ||
	       ((types & T_STR) && json_is_string(v)) ||
	       ((types & T_ARR) && json_is_array(v)) ||
	       ((types & T_OBJ) && json_is_object(v));
}

/* The first front end of apis, for "it is X's". */
static const char *api_of(unsigned apis)
{
	for (unsigned a = 0; a < sizeof(api_names) / sizeof(api_names[0]); a++)
		if (apis & API(a))
			return api_names[a];
	return "none";
}

/* One member: 0 or -EINVAL with err written. */
static int field_check(const char *key, const json_t *v, const json_t *obj,
		       enum request_api api, char *err, size_t err_len)
{
	const struct field_rule *r = rule_of(key);

	if (!r)
		return err_fail(err, err_len, "unknown field '%.64s': not a field "
				"of %s (docs/usage.md, \"Request fields\", lists "
				"them)", key, api_names[api]);
	if (!(r->apis & API(api)))
		return err_fail(err, err_len, "field '%s' is not a field of %s "
				"(it is %s's)", key, api_names[api], api_of(r->apis));
	if (json_is_null(v) || r->kind == FIELD_PARSED)
		return 0;
	if (!type_ok(v, r->types))
		return err_fail(err, err_len, "field '%s' must be %s, not %s", key,
				r->want, request_json_kind(v));
	if (r->kind == FIELD_REFUSED && !(r->parsed_in & API(api)) &&
	    !r->neutral(v, obj))
		return err_fail(err, err_len, "field '%s' is not implemented by "
				"this server: only %s is taken", key, r->neutral_doc);
	return 0;
}

int request_fields_check(const json_t *obj, enum request_api api, char *err,
			 size_t err_len, char *param, size_t param_len)
{
	const char *key;
	json_t *v;
	int rc;

	/* jansson's foreach takes a non-const object; it does not write it */
	json_object_foreach((json_t *)obj, key, v) {
		rc = field_check(key, v, obj, api, err, err_len);
		if (rc) {
			if (param && param_len)
				snprintf(param, param_len, "%s", key);
			return rc;
		}
	}
	return 0;
}

int request_fields_keep(json_t *obj, enum request_api api)
{
	const struct field_rule *r;
	const char *key;
	json_t *v;
	void *tmp;

	json_object_foreach_safe(obj, tmp, key, v) {
		r = rule_of(key);
		if (!r || !(r->apis & API(api)))
			if (json_object_del(obj, key))
				return -ENOMEM;
	}
	return 0;
}
