/*
 * test_completion_api.c - cmocka tests of the OpenAI-style completion
 * bodies (server/http/completion_api.c).
 *
 * completion_parse(): docs/DESIGN.md 3.1's fields plus "stream" and "model" are
 * read, and each bad body names the field OpenAI clients expect in
 * "param" (NULL when the body is not JSON at all).  The writers:
 * every answer is parsed back with jansson and must have exactly the
 * fields of OpenAI's text_completion object (or error object), whatever
 * bytes the id, model or message hold.  A randomized test formats random
 * token arrays and reads them back; it prints its seed and honours SEED=
 * (test_rng.h).  Batch prompts: a random batch (some prompts bad) must
 * parse as each prompt alone does, or name the first bad one's index;
 * best_of's ranking against a naive selection.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "server/http/completion_api.h"
#include "engine/request.h"
#include "text/stop_matcher.h"
#include "util/strbuf.h"
#include "tests/unit/test_rng.h"
#include "tests/unit/test_logprob_ref.h"
#include "tests/unit/test_trained_tok.h"
#include "server/request/request_json.h"

static const struct request_limits lim = {
	.vocab = 1000,
	.max_context = 512,
	.id_optional = true,
	.has_logits = true,
};

static int parse_str(const char *body, struct completion_request *c,
		     char *err, size_t err_len, const char **param)
{
	return completion_parse(body, strlen(body), &lim, c, err, err_len, param);
}

/* ------------------------------------------------------------------------
 * Parsing
 */

static void test_parse_all_fields(void **state)
{
	static const char body[] =
		"{\"id\":\"req-7\",\"model\":\"sim\",\"prompt\":[1,2,3],"
		"\"max_tokens\":5,\"stop_token\":7,\"stop_token_ids\":[8,9],"
		"\"stop_sequence\":[10,11],\"stop_sequences\":[[12],[13,14]],"
		"\"include_stop\":true,\"stream\":true,"
		"\"temperature\":0.7,\"top_p\":1,\"n\":1,\"user\":\"u\","
		"\"stream_options\":{\"include_usage\":true,"
		"\"include_obfuscation\":false}}";
	static const int32_t want_tokens[] = { 7, 8, 9, 10, 11, 12, 13, 14 };
	static const uint32_t want_lens[] = { 1, 1, 1, 2, 1, 2 };
	struct completion_request c;
	const char *param = "unset";
	char err[256];

	assert_int_equal(parse_str(body, &c, err, sizeof(err), &param), 0);
	assert_null(param);
	assert_true(c.stream);
	assert_true(c.include_usage);
	assert_string_equal(c.req.id, "req-7");
	assert_int_equal(c.req.n_prompt, 3);
	assert_int_equal(c.req.prompt[0], 1);
	assert_int_equal(c.req.prompt[2], 3);
	assert_int_equal(c.req.max_tokens, 5);
	assert_true(c.req.include_stop);
	assert_int_equal(c.req.n_stop_seqs, 6);
	assert_memory_equal(c.req.stop_lens, want_lens, sizeof(want_lens));
	assert_memory_equal(c.req.stop_tokens, want_tokens, sizeof(want_tokens));
	assert_non_null(c.req.stops);
	assert_true(c.req.sampling.temperature == 0.7f);
	assert_true(c.req.sampling.top_p == 1.0f);
	assert_int_equal(c.req.n_choices, 1);
	assert_int_equal(stop_matcher_max_len(c.req.stops), 2);
	completion_request_release(&c);
	assert_null(c.req.id);
	assert_null(c.req.prompt);
	assert_null(c.req.stops);
}

static void test_parse_defaults(void **state)
{
	static const char *const bodies[] = {
		"{\"prompt\":[4]}",
		"{\"prompt\":[4],\"stream\":false}",
		"{\"prompt\":[4],\"stream\":null,\"model\":null}",
		"  {\"model\":\"any name at all\",\"prompt\":[4]}\r\n",
	};
	struct completion_request c;
	const char *param;
	char err[256];

	for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		if (parse_str(bodies[i], &c, err, sizeof(err), &param))
			fail_msg("'%s': %s", bodies[i], err);
		assert_false(c.stream);
		assert_null(c.req.id);		/* the server names it */
		assert_int_equal(c.req.n_prompt, 1);
		assert_int_equal(c.req.prompt[0], 4);
		assert_int_equal(c.req.max_tokens, REQUEST_DEFAULT_MAX_TOKENS);
		assert_false(c.req.include_stop);
		assert_null(c.req.stops);
		completion_request_release(&c);
	}

	/* The body need not be NUL-terminated: only len bytes are read. */
	{
		static const char two[] = "{\"prompt\":[9],\"stream\":true}garbage";

		assert_int_equal(completion_parse(two, sizeof("{\"prompt\":[9],"
							      "\"stream\":true}") - 1,
						  &lim, &c, err, sizeof(err), &param), 0);
		assert_true(c.stream);
		assert_int_equal(c.req.prompt[0], 9);
		completion_request_release(&c);
	}
	/* Releasing a released request is fine. */
	completion_request_release(&c);
}

struct bad_body {
	const char *body;
	const char *param;	/* NULL: the body as a whole */
	const char *says;	/* a piece of the message */
};

static const struct bad_body bad_bodies[] = {
	{ "{\"prompt\":[1],\"stream\":\"yes\"}", "stream", "stream" },
	{ "{\"prompt\":[1],\"stream\":1}", "stream", "stream" },
	{ "{\"prompt\":[1],\"stream\":[]}", "stream", "stream" },
	{ "{\"prompt\":[1],\"model\":5}", "model", "model" },
	{ "{\"prompt\":[1],\"stream_options\":{\"include_usage\":true}}",
	  "stream_options", "\"stream\": true" },
	{ "{\"prompt\":[1],\"stream\":true,\"stream_options\":[]}",
	  "stream_options", "object" },
	{ "{\"prompt\":[1],\"stream\":true,\"stream_options\":{\"include_usage\":1}}",
	  "stream_options", "true or false" },
	{ "{\"prompt\":[1],\"stream\":true,\"stream_options\":{\"usage\":true}}",
	  "stream_options", "unknown member" },
	{ "{\"prompt\":[1],\"stream\":true,\"stream_options\":"
	  "{\"include_obfuscation\":true}}", "stream_options", "not implemented" },
	{ "{\"prompt\":[1],\"max_tokens\":-1}", "max_tokens", "max_tokens" },
	{ "{\"prompt\":[1],\"max_tokens\":\"5\"}", "max_tokens", "max_tokens" },
	{ "{\"prompt\":[1],\"max_tokens\":2.0}", "max_tokens", "max_tokens" },
	{ "{\"prompt\":\"Say hello\"}", "prompt", "tokenizer" },
	{ "{\"prompt\":\"\",\"stream\":true}", "prompt", "prompt" },
	{ "{\"prompt\":[1,99999]}", "prompt", "prompt[1]" },
	{ "{\"prompt\":[-1]}", "prompt", "prompt[0]" },
	{ "{\"prompt\":[1,\"2\"]}", "prompt", "prompt[1]" },
	{ "{\"prompt\":{}}", "prompt", "prompt" },
	/* OpenAI's API continues at least one token (a 400, never a 500) */
	{ "{\"prompt\":[]}", "prompt", "empty" },
	{ "{\"prompt\":[],\"id\":\"e\",\"stream\":true}", "prompt", "empty" },
	{ "{\"max_tokens\":3}", "prompt", "prompt" },
	{ "{\"prompt\":[1],\"stop_sequences\":[[]]}", "stop_sequences", "empty" },
	{ "{\"prompt\":[1],\"stop_sequences\":[[1],[]]}", "stop_sequences", "[1]" },
	{ "{\"prompt\":[1],\"stop_sequences\":[[1,1000]]}", "stop_sequences", "out of range" },
	{ "{\"prompt\":[1],\"stop_sequence\":[]}", "stop_sequence", "empty" },
	{ "{\"prompt\":[1],\"stop_token_ids\":[5000]}", "stop_token_ids", "stop_token_ids[0]" },
	{ "{\"prompt\":[1],\"stop_token_ids\":5}", "stop_token_ids", "stop_token_ids" },
	{ "{\"prompt\":[1],\"stop_token\":-1}", "stop_token", "stop_token" },
	{ "{\"prompt\":[1],\"include_stop\":1}", "include_stop", "include_stop" },
	{ "{\"prompt\":[1],\"id\":5}", "id", "id" },
	/* The server's generated ids are not for clients to take. */
	{ "{\"prompt\":[1],\"id\":\"cmpl-1a2b-7\"}", "id", "cmpl-" },
	{ "{\"prompt\":[1],\"id\":\"cmpl-\",\"stream\":true}", "id", "cmpl-" },
	{ "{\"id\":\"cmpl-x\",\"prompt\":[1],\"stop_sequences\":[[2,3]]}", "id", "cmpl-" },
	/* Not JSON, or not an object: no field to name. */
	{ "hello", NULL, "JSON" },
	{ "", NULL, "JSON" },
	{ "   ", NULL, "JSON" },
	{ "{", NULL, "JSON" },
	{ "[1,2]", NULL, "object" },
	{ "\"prompt\"", NULL, "object" },
	{ "{\"prompt\":[1],}", NULL, "JSON" },
	{ "{prompt:[1]}", NULL, "JSON" },
	{ "{\"prompt\":[1]} {\"stream\":true}", NULL, "JSON" },
	{ "{\"prompt\":[1],\"prompt\":[2]}", NULL, "JSON" },
	{ "{\"prompt\":[1],\"stream\":tru}", NULL, "JSON" },
};

static void test_parse_errors(void **state)
{
	struct completion_request c;
	const char *param;
	char err[256];
	int rc;

	for (size_t i = 0; i < sizeof(bad_bodies) / sizeof(bad_bodies[0]); i++) {
		const struct bad_body *b = &bad_bodies[i];

		param = "unset";
		err[0] = '\0';
		rc = parse_str(b->body, &c, err, sizeof(err), &param);
		if (rc != -EINVAL)
			fail_msg("'%s': rc %d", b->body, rc);
		if (b->param ? !param || strcmp(param, b->param) : param != NULL)
			fail_msg("'%s': param %s, wanted %s (%s)", b->body,
				 param ? param : "NULL",
				 b->param ? b->param : "NULL", err);
		if (!strstr(err, b->says))
			fail_msg("'%s': message '%s' lacks '%s'", b->body, err,
				 b->says);
		assert_null(c.req.prompt);
		assert_null(c.req.stops);
		completion_request_release(&c);
	}
}

/* An id that is a string is kept on error, for the error answer. */
static void test_parse_error_keeps_id(void **state)
{
	struct completion_request c;
	const char *param;
	char err[256];

	assert_int_equal(parse_str("{\"id\":\"mine\",\"prompt\":[1],\"max_tokens\":-3}",
				   &c, err, sizeof(err), &param), -EINVAL);
	assert_string_equal(param, "max_tokens");
	assert_string_equal(c.req.id, "mine");
	completion_request_release(&c);
	assert_null(c.req.id);
}

/* Only ids that start with the generated ids' prefix are refused. */
static void test_reserved_id_prefix(void **state)
{
	static const char *const fine[] = { "cmpl", "xcmpl-1", "Cmpl-1", "cmp-1",
					    "a cmpl-1" };
	struct completion_request c;
	const char *param;
	char err[256], body[128];

	for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++) {
		snprintf(body, sizeof(body), "{\"id\":\"%s\",\"prompt\":[1]}", fine[i]);
		if (parse_str(body, &c, err, sizeof(err), &param))
			fail_msg("'%s' refused: %s", body, err);
		assert_string_equal(c.req.id, fine[i]);
		completion_request_release(&c);
	}
	assert_int_equal(parse_str("{\"id\":\"" COMPLETION_ID_PREFIX "9-9\",\"prompt\":[1]}",
				   &c, err, sizeof(err), &param), -EINVAL);
	assert_string_equal(param, "id");
	assert_string_equal(c.req.id, COMPLETION_ID_PREFIX "9-9");	/* for the answer */
	assert_null(c.req.prompt);
	completion_request_release(&c);
}

/* ------------------------------------------------------------------------
 * Reading answers back
 */

/* The keys of o must be exactly keys[0..n). */
static void expect_keys(json_t *o, const char *const *keys, size_t n)
{
	assert_true(json_is_object(o));
	for (size_t i = 0; i < n; i++)
		if (!json_object_get(o, keys[i]))
			fail_msg("key '%s' missing", keys[i]);
	assert_int_equal(json_object_size(o), n);
}

static void expect_str(json_t *v, const char *want)
{
	if (!want) {
		assert_true(json_is_null(v));
		return;
	}
	assert_true(json_is_string(v));
	assert_int_equal(json_string_length(v), strlen(want));
	assert_memory_equal(json_string_value(v), want, strlen(want));
}

static void expect_uint(json_t *v, uint64_t want)
{
	assert_true(json_is_integer(v));
	assert_true(json_integer_value(v) >= 0);
	assert_true((uint64_t)json_integer_value(v) == want);
}

/*
 * text (len bytes) must be one text_completion object with these values;
 * want_id and want_model are the strings as they should read back.
 */
static void check_answer(const char *text, size_t len, const char *want_id,
			 const struct completion_meta *m, const char *want_model,
			 const int32_t *tokens, uint32_t n_tokens,
			 const char *finish_reason,
			 const struct completion_usage *usage)
{
	static const char *const top_keys[] = {
		"id", "object", "created", "model", "choices", "usage",
	};
	static const char *const choice_keys[] = {
		"index", "text", "token_ids", "finish_reason", "logprobs",
	};
	static const char *const usage_keys[] = {
		"prompt_tokens", "completion_tokens", "total_tokens",
	};
	json_error_t jerr;
	json_t *o, *choices, *ch, *ids, *u;

	o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!o)
		fail_msg("not JSON (%s at column %d): %.*s", jerr.text,
			 jerr.column, (int)len, text);
	expect_keys(o, top_keys, usage ? 6 : 5);
	expect_str(json_object_get(o, "id"), want_id);
	expect_str(json_object_get(o, "object"), "text_completion");
	expect_uint(json_object_get(o, "created"), m->created);
	expect_str(json_object_get(o, "model"), want_model);

	choices = json_object_get(o, "choices");
	assert_true(json_is_array(choices));
	assert_int_equal(json_array_size(choices), 1);
	ch = json_array_get(choices, 0);
	expect_keys(ch, choice_keys, 5);
	expect_uint(json_object_get(ch, "index"), 0);
	expect_str(json_object_get(ch, "text"), "");
	expect_str(json_object_get(ch, "finish_reason"), finish_reason);
	assert_true(json_is_null(json_object_get(ch, "logprobs")));
	ids = json_object_get(ch, "token_ids");
	assert_true(json_is_array(ids));
	assert_int_equal(json_array_size(ids), n_tokens);
	for (uint32_t i = 0; i < n_tokens; i++) {
		json_t *t = json_array_get(ids, i);

		assert_true(json_is_integer(t));
		if (json_integer_value(t) != tokens[i])
			fail_msg("token_ids[%u] = %lld, wanted %d", i,
				 (long long)json_integer_value(t), tokens[i]);
	}

	if (usage) {
		u = json_object_get(o, "usage");
		expect_keys(u, usage_keys, 3);
		expect_uint(json_object_get(u, "prompt_tokens"), usage->prompt_tokens);
		expect_uint(json_object_get(u, "completion_tokens"),
			    usage->completion_tokens);
		expect_uint(json_object_get(u, "total_tokens"),
			    (uint64_t)usage->prompt_tokens + usage->completion_tokens);
	}
	json_decref(o);
}

/* The event appended at out[old..]: "data: <one JSON object>\n\n". */
static void check_event(const struct strbuf *out, size_t old,
			const char *want_id, const struct completion_meta *m,
			const char *want_model, const int32_t *tokens,
			uint32_t n_tokens, const char *finish_reason,
			const struct completion_usage *usage)
{
	const char *ev = out->data + old;
	size_t n = out->len - old;

	assert_true(n > 8);
	assert_memory_equal(ev, "data: ", 6);
	assert_memory_equal(ev + n - 2, "\n\n", 2);
	/* No other line break: the event is exactly one data line. */
	assert_null(memchr(ev, '\n', n - 2));
	assert_null(memchr(ev, '\r', n));
	assert_int_equal(out->data[out->len], '\0');
	check_answer(ev + 6, n - 8, want_id, m, want_model, tokens, n_tokens,
		     finish_reason, usage);
}

/* ------------------------------------------------------------------------
 * Writing answers
 */

/* One choice, the shape of every answer before "n" (index 0, no
 * logprobs, no seed). */
static int fmt_answer(struct strbuf *out, const struct completion_meta *m,
		      const int32_t *tokens, uint32_t n, const char *fr,
		      const struct completion_usage *u)
{
	struct completion_choice c = { .tokens = tokens, .n_tokens = n,
				       .finish_reason = fr };

	return completion_format(out, m, &c, 1, u, false, 0);
}

static int fmt_event(struct strbuf *out, const struct completion_meta *m,
		     const int32_t *tokens, uint32_t n, const char *fr,
		     const struct completion_usage *u)
{
	struct completion_choice c = { .tokens = tokens, .n_tokens = n,
				       .finish_reason = fr };

	return completion_format_event(out, m, &c, u);
}

static void test_format_completion(void **state)
{
	static const int32_t tokens[] = { 5, 0, 999, 2147483647, -2147483647 - 1 };
	const struct completion_meta m = {
		.id = "cmpl-1a2b", .created = 1700000000, .model = "sim",
	};
	const struct completion_usage usage = { .prompt_tokens = 12,
						.completion_tokens = 5 };
	const struct completion_usage big = { UINT32_MAX, UINT32_MAX };
	struct strbuf out = STRBUF_INIT;

	assert_int_equal(fmt_answer(&out, &m, tokens, 5, "length", &usage), 0);
	assert_int_equal(out.data[out.len], '\0');
	assert_int_equal(strlen(out.data), out.len);
	check_answer(out.data, out.len, m.id, &m, m.model, tokens, 5, "length",
		     &usage);

	/* No tokens, no usage, the largest counts. */
	out.len = 0;
	assert_int_equal(fmt_answer(&out, &m, NULL, 0, "stop", NULL), 0);
	check_answer(out.data, out.len, m.id, &m, m.model, NULL, 0, "stop", NULL);
	out.len = 0;
	assert_int_equal(fmt_answer(&out, &m, NULL, 0, "stop", &big), 0);
	check_answer(out.data, out.len, m.id, &m, m.model, NULL, 0, "stop", &big);
	strbuf_release(&out);
}

static void test_format_events(void **state)
{
	static const int32_t step1[] = { 17 }, step2[] = { 3, 4, 5 };
	const struct completion_meta m = {
		.id = "cmpl-x", .created = 0, .model = "m",
	};
	const struct completion_usage usage = { .prompt_tokens = 2,
						.completion_tokens = 4 };
	struct strbuf out = STRBUF_INIT;
	size_t old;

	/* Events append: what is in the buffer stays. */
	assert_int_equal(strbuf_append(&out, "1f\r\n", 4), 0);
	old = out.len;
	assert_int_equal(fmt_event(&out, &m, step1, 1, NULL, NULL), 0);
	assert_memory_equal(out.data, "1f\r\n", 4);
	check_event(&out, old, m.id, &m, m.model, step1, 1, NULL, NULL);

	old = out.len;
	assert_int_equal(fmt_event(&out, &m, step2, 3, NULL, NULL), 0);
	check_event(&out, old, m.id, &m, m.model, step2, 3, NULL, NULL);

	/* The last event: a reason and the usage, maybe no new tokens. */
	old = out.len;
	assert_int_equal(fmt_event(&out, &m, NULL, 0, "stop", &usage), 0);
	check_event(&out, old, m.id, &m, m.model, NULL, 0, "stop", &usage);

	/* A non-streamed answer appends too. */
	old = out.len;
	assert_int_equal(fmt_answer(&out, &m, step2, 3, "length", &usage), 0);
	check_answer(out.data + old, out.len - old, m.id, &m, m.model, step2, 3,
		     "length", &usage);
	strbuf_release(&out);
}

static void check_error_answer(const char *text, size_t len, const char *message,
			       const char *type, const char *param,
			       const char *code)
{
	static const char *const top_keys[] = { "error" };
	static const char *const err_keys[] = { "message", "type", "param", "code" };
	json_error_t jerr;
	json_t *o, *e;

	o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!o)
		fail_msg("not JSON (%s): %.*s", jerr.text, (int)len, text);
	expect_keys(o, top_keys, 1);
	e = json_object_get(o, "error");
	expect_keys(e, err_keys, 4);
	expect_str(json_object_get(e, "message"), message);
	expect_str(json_object_get(e, "type"), type);
	expect_str(json_object_get(e, "param"), param);
	expect_str(json_object_get(e, "code"), code);
	json_decref(o);
}

/* The usage event: "choices": [] and the usage, nothing else of a choice. */
static void test_format_usage_event(void **state)
{
	struct completion_meta m = { "cmpl-1", 7, "sim", false };
	struct completion_usage u = { 3, 9 };
	struct strbuf out = STRBUF_INIT;
	json_error_t jerr;
	json_t *o, *usage;

	assert_int_equal(completion_format_usage_event(&out, &m, &u), 0);
	assert_memory_equal(out.data, "data: ", 6);
	assert_memory_equal(out.data + out.len - 2, "\n\n", 2);
	o = json_loadb(out.data + 6, out.len - 8, JSON_REJECT_DUPLICATES, &jerr);
	assert_non_null(o);
	assert_int_equal(json_object_size(o), 6);
	assert_string_equal(json_string_value(json_object_get(o, "object")),
			    "text_completion");
	assert_true(json_is_array(json_object_get(o, "choices")));
	assert_int_equal(json_array_size(json_object_get(o, "choices")), 0);
	usage = json_object_get(o, "usage");
	assert_int_equal(json_integer_value(json_object_get(usage, "prompt_tokens")), 3);
	assert_int_equal(json_integer_value(json_object_get(usage, "completion_tokens")), 9);
	assert_int_equal(json_integer_value(json_object_get(usage, "total_tokens")), 12);
	json_decref(o);

	/* with include_usage the other events say "usage": null (OpenAI),
	 * without it they have no usage at all */
	for (int with = 0; with < 2; with++) {
		struct completion_choice c = { .text = "x", .text_len = 1 };

		m.usage_null = with;
		out.len = 0;
		assert_int_equal(completion_format_event(&out, &m, &c, NULL), 0);
		o = json_loadb(out.data + 6, out.len - 8, JSON_REJECT_DUPLICATES, &jerr);
		assert_non_null(o);
		usage = json_object_get(o, "usage");
		assert_true(with ? json_is_null(usage) : usage == NULL);
		json_decref(o);
	}
	strbuf_release(&out);
}

static void test_format_error(void **state)
{
	struct strbuf out = STRBUF_INIT;
	size_t old;

	assert_int_equal(api_format_error(&out, "field 'stream' must be true or false",
					  "invalid_request_error", "stream", NULL), 0);
	assert_int_equal(strlen(out.data), out.len);
	check_error_answer(out.data, out.len, "field 'stream' must be true or false",
			   "invalid_request_error", "stream", NULL);

	old = out.len;
	assert_int_equal(api_format_error(&out, "Incorrect API key provided",
					  "invalid_request_error", NULL,
					  "invalid_api_key"), 0);
	check_error_answer(out.data + old, out.len - old, "Incorrect API key provided",
			   "invalid_request_error", NULL, "invalid_api_key");

	/* The parser's own message, with quotes and a control byte in it. */
	out.len = 0;
	assert_int_equal(api_format_error(&out, "not valid JSON: '\"' near '\x01\\'",
					  "invalid_request_error", NULL, NULL), 0);
	check_error_answer(out.data, out.len, "not valid JSON: '\"' near '\x01\\'",
			   "invalid_request_error", NULL, NULL);
	strbuf_release(&out);
}

/* Strings with bytes JSON cannot carry as they are. */
static const struct {
	const char *raw;
	const char *reads;	/* what jansson reads back */
} hostile[] = {
	{ "", "" },
	{ "say \"hi\"", "say \"hi\"" },
	{ "back\\slash\\", "back\\slash\\" },
	{ "\x01\x02\x1f\x7f", "\x01\x02\x1f\x7f" },
	{ "tab\tnl\ncr\rff\fbs\b", "tab\tnl\ncr\rff\fbs\b" },
	{ "</script>\u2028\u2029", "</script>\u2028\u2029" },
	{ "caf\xc3\xa9 \xf0\x9f\x98\x80", "caf\xc3\xa9 \xf0\x9f\x98\x80" },
	{ "bad \xff byte", "bad \xef\xbf\xbd byte" },
	{ "cut \xe2\x82", "cut \xef\xbf\xbd\xef\xbf\xbd" },
	{ "overlong \xc0\xaf", "overlong \xef\xbf\xbd\xef\xbf\xbd" },
	{ "surrogate \xed\xa0\x80", "surrogate \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
	{ "too high \xf4\x90\x80\x80",
	  "too high \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
	{ "\x80", "\xef\xbf\xbd" },
};

static void test_format_hostile_strings(void **state)
{
	static const int32_t tokens[] = { 1, 2 };
	const struct completion_usage usage = { 1, 2 };
	struct strbuf out = STRBUF_INIT;
	size_t n = sizeof(hostile) / sizeof(hostile[0]);

	for (size_t i = 0; i < n; i++) {
		const char *model = hostile[(i + 1) % n].raw;
		const char *model_reads = hostile[(i + 1) % n].reads;
		const struct completion_meta m = {
			.id = hostile[i].raw, .created = 42, .model = model,
		};
		size_t old;

		out.len = 0;
		assert_int_equal(fmt_answer(&out, &m, tokens, 2, "stop",
						   &usage), 0);
		check_answer(out.data, out.len, hostile[i].reads, &m, model_reads,
			     tokens, 2, "stop", &usage);

		old = out.len;
		assert_int_equal(fmt_event(&out, &m, tokens, 2,
							 NULL, NULL), 0);
		check_event(&out, old, hostile[i].reads, &m, model_reads, tokens,
			    2, NULL, NULL);

		out.len = 0;
		assert_int_equal(api_format_error(&out, hostile[i].raw, model,
						  hostile[i].raw, model), 0);
		check_error_answer(out.data, out.len, hostile[i].reads,
				   model_reads, hostile[i].reads, model_reads);
	}
	strbuf_release(&out);
}

/* A NULL id or model is written as null, not left out. */
static void test_format_null_strings(void **state)
{
	const struct completion_meta m = { .id = NULL, .created = 1, .model = NULL };
	struct strbuf out = STRBUF_INIT;

	assert_int_equal(fmt_answer(&out, &m, NULL, 0, NULL, NULL), 0);
	check_answer(out.data, out.len, NULL, &m, NULL, NULL, 0, NULL, NULL);
	strbuf_release(&out);
}

/* ------------------------------------------------------------------------
 * Random round trip
 */

#define RAND_ROUNDS 500
#define RAND_MAX_TOKENS 300

static int32_t rand_token(struct rng *rng)
{
	switch (rng_below(rng, 4)) {
	case 0:
		return (int32_t)rng_below(rng, 1000);
	case 1:
		return rng_below(rng, 2) ? INT32_MAX : INT32_MIN;
	default:
		return (int32_t)(uint32_t)rng_next(rng);
	}
}

/* Random bytes, NUL excluded, often not UTF-8. */
static void rand_str(struct rng *rng, char *buf, size_t max)
{
	size_t n = rng_below(rng, (uint32_t)max);

	for (size_t i = 0; i < n; i++)
		buf[i] = (char)(1 + rng_below(rng, 255));
	buf[n] = '\0';
}

static void test_random_roundtrip(void **state)
{
	struct rng rng = rng_for(1);
	int32_t tokens[RAND_MAX_TOKENS];
	struct strbuf out = STRBUF_INIT;
	char id[40], model[24];
	json_error_t jerr;

	for (int round = 0; round < RAND_ROUNDS; round++) {
		uint32_t n = rng_below(&rng, RAND_MAX_TOKENS + 1);
		bool event = rng_below(&rng, 2), last = rng_below(&rng, 2);
		struct completion_usage usage = {
			(uint32_t)rng_next(&rng), (uint32_t)rng_next(&rng),
		};
		struct completion_meta m = {
			.id = id, .model = model,
			.created = rng_next(&rng) >> (1 + rng_below(&rng, 63)),
		};
		const char *reason = last ? (rng_below(&rng, 2) ? "stop" : "length")
					  : NULL;
		size_t old = out.len;
		json_t *o, *ids;
		int rc;

		for (uint32_t i = 0; i < n; i++)
			tokens[i] = rand_token(&rng);
		rand_str(&rng, id, sizeof(id));
		rand_str(&rng, model, sizeof(model));
		if (event)
			rc = fmt_event(&out, &m, tokens, n, reason,
						     last ? &usage : NULL);
		else
			rc = fmt_answer(&out, &m, tokens, n, reason,
					       last ? &usage : NULL);
		assert_int_equal(rc, 0);

		/* Read back: valid JSON, the same tokens and counts. */
		if (event) {
			assert_memory_equal(out.data + old, "data: ", 6);
			assert_memory_equal(out.data + out.len - 2, "\n\n", 2);
			old += 6;
		}
		o = json_loadb(out.data + old, out.len - old - (event ? 2 : 0),
			       JSON_REJECT_DUPLICATES, &jerr);
		if (!o)
			fail_msg("round %d: not JSON (%s) (SEED=%llu)", round,
				 jerr.text, test_seed);
		assert_true(json_is_string(json_object_get(o, "id")));
		assert_true(json_is_string(json_object_get(o, "model")));
		expect_uint(json_object_get(o, "created"), m.created);
		ids = json_object_get(json_array_get(json_object_get(o, "choices"), 0),
				      "token_ids");
		assert_int_equal(json_array_size(ids), n);
		for (uint32_t i = 0; i < n; i++)
			if (json_integer_value(json_array_get(ids, i)) != tokens[i])
				fail_msg("round %d token %u: %lld != %d (SEED=%llu)",
					 round, i,
					 (long long)json_integer_value(json_array_get(ids, i)),
					 tokens[i], test_seed);
		assert_int_equal(json_object_size(o), last ? 6 : 5);
		json_decref(o);
		/* Keep appending for a while: formats must not depend on len. */
		if (out.len > 65536)
			out.len = 0;
	}
	strbuf_release(&out);
}

/*
 * Logprobs named by their text (logprob_text.h), against the naive
 * reference of test_logprob_ref.h: random tokens of a trained llama2.c
 * vocabulary (its byte tokens make pieces that are no UTF-8 on their
 * own, its end tokens text of none), random alternatives, a random token
 * before them and ignore_eos either way.
 */
#define LP_VOCAB 512
#define LP_ROUNDS 200
#define LP_MAX_TOKENS 24
#define LP_MAX_TOP 4

static void test_logprobs_text(void **state)
{
	struct sampler_logprob lp[LP_MAX_TOKENS * (1 + LP_MAX_TOP)];
	struct completion_meta m = { .id = "cmpl-1", .model = "m", .created = 1 };
	struct strbuf out = STRBUF_INIT;
	struct text_tokenizer *ttok;
	struct tokenizer *tok;
	struct rng rng = rng_for(2);
	int32_t tokens[LP_MAX_TOKENS];
	uint32_t n_bytes_tokens = 0;

	assert_int_equal(test_trained_tok(LP_VOCAB, &tok, &ttok), 0);
	for (int round = 0; round < LP_ROUNDS; round++) {
		uint32_t n = rng_below(&rng, LP_MAX_TOKENS + 1);
		uint32_t stride = 1 + rng_below(&rng, LP_MAX_TOP + 1);
		struct completion_choice c = { .tokens = tokens, .n_tokens = n,
			.finish_reason = "length", .logprobs = lp,
			.logprob_stride = stride,
			.lp = { .tok = ttok,
				.prev_token = (int32_t)rng_below(&rng, LP_VOCAB + 1) - 1,
				.text_offset = rng_below(&rng, 2) ? 0 : rng_next(&rng) >> 8,
				.ignore_eos = rng_below(&rng, 2) } };
		struct ref_walk w = { ttok, c.lp.ignore_eos, c.lp.prev_token,
				      c.lp.text_offset };
		json_t *o, *l, *names, *tops, *offs;
		json_error_t jerr;

		ref_random_logprobs(&rng, LP_VOCAB, tokens, n, lp, stride, true);
		out.len = 0;
		assert_int_equal(completion_format(&out, &m, &c, 1, NULL, false, 0), 0);
		o = json_loadb(out.data, out.len, JSON_ALLOW_NUL, &jerr);
		if (!o)
			fail_msg("round %d: not JSON (%s) (SEED=%llu)", round, jerr.text,
				 test_seed);
		l = json_object_get(json_array_get(json_object_get(o, "choices"), 0),
				    "logprobs");
		names = json_object_get(l, "tokens");
		tops = json_object_get(l, "top_logprobs");
		offs = json_object_get(l, "text_offset");
		assert_int_equal(json_array_size(names), n);
		assert_int_equal(json_array_size(tops), n);
		assert_int_equal(json_array_size(offs), n);
		assert_int_equal(json_array_size(json_object_get(l, "token_logprobs")), n);
		for (uint32_t i = 0; i < n; i++) {
			struct ref_walk at = w;	/* the alternatives follow the same */
			const json_t *top = json_array_get(tops, i);
			struct ref_token r;
			uint32_t n_alt = 0;

			ref_token_at(&w, tokens[i], true, &r);
			if (!ref_name_is(json_array_get(names, i), &r))
				fail_msg("round %d token %u (id %d): name '%s' != '%.*s' "
					 "(SEED=%llu)", round, i, tokens[i],
					 json_string_value(json_array_get(names, i)),
					 (int)r.name_len, r.name, test_seed);
			n_bytes_tokens += !strncmp(r.name, "bytes:", 6);
			if ((uint64_t)json_integer_value(json_array_get(offs, i)) != r.offset)
				fail_msg("round %d token %u: text_offset %lld != %llu "
					 "(SEED=%llu)", round, i,
					 (long long)json_integer_value(json_array_get(offs, i)),
					 (unsigned long long)r.offset, test_seed);
			for (uint32_t j = 1; j < stride && lp[i * stride + j].token >= 0; j++) {
				struct ref_token ra;
				const json_t *v;

				n_alt++;
				ref_token_at(&at, lp[i * stride + j].token, false, &ra);
				v = json_object_getn(top, ra.name, ra.name_len);
				if (!json_is_number(v))
					fail_msg("round %d token %u: no alternative '%.*s' "
						 "(SEED=%llu)", round, i, (int)ra.name_len,
						 ra.name, test_seed);
			}
			/* two alternatives of one text share a key */
			assert_true(json_object_size(top) <= n_alt);
			assert_true(json_object_size(top) >= (n_alt ? 1u : 0u));
		}
		json_decref(o);
	}
	/* the rounds reached the case that needs the bytes: form */
	assert_true(n_bytes_tokens > 0);
	text_tokenizer_free(ttok);
	strbuf_release(&out);
}

/*
 * echo: the prompt's text before each choice's.  A string prompt is
 * echoed as given; token ids are checked by a round trip (the ids the
 * tokenizer makes of a text echo as that text), and echo with logprobs
 * or without a tokenizer is a 400 naming echo.  The answer's text is
 * the prefix and the text, read back by jansson, for random strings.
 */
static void test_echo(void **state)
{
	static const char *const texts[] = { "Once upon a time", "the cat sat",
					     "a", "Hello world and more words" };
	struct request_limits l = lim;
	struct completion_request c;
	struct text_tokenizer *ttok;
	struct tokenizer *tok;
	struct strbuf out = STRBUF_INIT;
	struct rng rng = rng_for(3);
	const char *param;
	char err[256], body[1024];

	assert_int_equal(test_trained_tok(LP_VOCAB, &tok, &ttok), 0);
	l.tok = ttok;
	l.vocab = LP_VOCAB;
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		int32_t ids[128];
		size_t n, at;

		snprintf(body, sizeof(body), "{\"prompt\":\"%s\",\"echo\":true,"
			 "\"max_tokens\":1}", texts[i]);
		assert_int_equal(completion_parse(body, strlen(body), &l, &c, err,
						  sizeof(err), &param), 0);
		assert_int_equal(c.echo_len, strlen(texts[i]));
		assert_memory_equal(c.echo, texts[i], c.echo_len);
		completion_request_release(&c);

		assert_int_equal(text_tokenizer_encode(ttok, texts[i], strlen(texts[i]),
						       true, ids, 128, &n), 0);
		at = (size_t)snprintf(body, sizeof(body), "{\"prompt\":[");
		for (size_t k = 0; k < n; k++)
			at += (size_t)snprintf(body + at, sizeof(body) - at, "%s%d",
					       k ? "," : "", ids[k]);
		snprintf(body + at, sizeof(body) - at, "],\"echo\":true}");
		assert_int_equal(completion_parse(body, strlen(body), &l, &c, err,
						  sizeof(err), &param), 0);
		if (c.echo_len != strlen(texts[i]) ||
		    memcmp(c.echo, texts[i], c.echo_len))
			fail_msg("ids of '%s' echo as '%.*s'", texts[i],
				 (int)c.echo_len, c.echo);
		completion_request_release(&c);
	}
	/* no echo: none kept */
	snprintf(body, sizeof(body), "{\"prompt\":\"x\",\"echo\":false}");
	assert_int_equal(completion_parse(body, strlen(body), &l, &c, err,
					  sizeof(err), &param), 0);
	assert_null(c.echo);
	completion_request_release(&c);
	/* the refusals */
	snprintf(body, sizeof(body), "{\"prompt\":\"x\",\"echo\":true,"
		 "\"logprobs\":1}");
	assert_int_equal(completion_parse(body, strlen(body), &l, &c, err,
					  sizeof(err), &param), -EINVAL);
	assert_string_equal(param, "echo");
	assert_non_null(strstr(err, "logprobs"));
	completion_request_release(&c);
	assert_int_equal(parse_str("{\"prompt\":[1],\"echo\":true}", &c, err,
				   sizeof(err), &param), -EINVAL);
	assert_string_equal(param, "echo");
	assert_non_null(strstr(err, "tokenizer"));
	completion_request_release(&c);
	assert_int_equal(parse_str("{\"prompt\":[1],\"echo\":1}", &c, err,
				   sizeof(err), &param), -EINVAL);
	assert_string_equal(param, "echo");
	completion_request_release(&c);

	/* the prefix and the text are one string */
	for (int round = 0; round < 200; round++) {
		char pre[64], text[64];
		size_t n_pre = rng_below(&rng, sizeof(pre)), n_text = rng_below(&rng, sizeof(text));
		struct completion_meta m = { .id = "cmpl-1", .model = "m" };
		struct completion_choice ch = { .text = text, .text_len = n_text,
			.prefix = pre, .prefix_len = n_pre, .finish_reason = "stop" };
		const json_t *t;
		json_t *o;
		json_error_t jerr;

		for (size_t k = 0; k < n_pre; k++)	/* ASCII, escapes too */
			pre[k] = (char)(1 + rng_below(&rng, 127));
		for (size_t k = 0; k < n_text; k++)
			text[k] = (char)(1 + rng_below(&rng, 127));
		out.len = 0;
		assert_int_equal(completion_format(&out, &m, &ch, 1, NULL, false, 0), 0);
		o = json_loadb(out.data, out.len, 0, &jerr);
		if (!o)
			fail_msg("round %d: not JSON: %s (SEED=%llu)", round, jerr.text,
				 test_seed);
		t = json_object_get(json_array_get(json_object_get(o, "choices"), 0),
				    "text");
		if (json_string_length(t) != n_pre + n_text ||
		    memcmp(json_string_value(t), pre, n_pre) ||
		    memcmp(json_string_value(t) + n_pre, text, n_text))
			fail_msg("round %d: text is not prefix + text (SEED=%llu)",
				 round, test_seed);
		json_decref(o);
	}
	text_tokenizer_free(ttok);
	strbuf_release(&out);
}

/* ------------------------------------------------------------------------
 * Batch prompts and best_of
 */

/* One prompt of a random batch: its tokens (some bad on purpose). */
struct ref_prompt {
	int32_t tok[8];
	uint32_t n;
	bool bad;		/* empty, or a token out of range */
};

static void random_prompt(struct rng *rng, struct ref_prompt *p)
{
	p->n = rng_below(rng, 9);
	p->bad = !p->n;
	for (uint32_t i = 0; i < p->n; i++) {
		/* one token in 16 out of [0, vocab) */
		p->tok[i] = rng_below(rng, 16) ? (int32_t)rng_below(rng, lim.vocab) :
			    (int32_t)(lim.vocab + rng_below(rng, 5));
		if (p->tok[i] >= (int32_t)lim.vocab)
			p->bad = true;
	}
}

static void put_prompt(struct strbuf *b, const struct ref_prompt *p)
{
	strbuf_append(b, "[", 1);
	for (uint32_t i = 0; i < p->n; i++)
		strbuf_printf(b, "%s%d", i ? "," : "", p->tok[i]);
	strbuf_append(b, "]", 1);
}

/* A random batch against a naive reference: each prompt parsed alone
 * (the one-prompt path), and the first bad one named by its index. */
static void test_batch_prompts(void **state)
{
	struct rng rng = rng_for(4);
	struct strbuf body = { 0 }, one = { 0 };

	for (int round = 0; round < 400; round++) {
		struct ref_prompt ps[12];
		uint32_t k = 1 + rng_below(&rng, 12), n = 1 + rng_below(&rng, 8);
		uint32_t max_tokens = rng_below(&rng, 6);
		int first_bad = -1;
		struct completion_request c, alone;
		const char *param;
		char err[512], want[64];
		int rc;

		body.len = 0;
		strbuf_printf(&body, "{\"max_tokens\":%u,\"n\":%u,\"temperature\":0.5,"
			      "\"prompt\":[", max_tokens, n);
		for (uint32_t i = 0; i < k; i++) {
			random_prompt(&rng, &ps[i]);
			if (ps[i].bad && first_bad < 0)
				first_bad = (int)i;
			if (i)
				strbuf_append(&body, ",", 1);
			put_prompt(&body, &ps[i]);
		}
		strbuf_append(&body, "]}", 2);
		rc = parse_str(body.data, &c, err, sizeof(err), &param);
		if (k * n > REQUEST_MAX_CHOICES) {
			if (rc != -EINVAL || !param || strcmp(param, "prompt") ||
			    !strstr(err, "choices one request may have"))
				fail_msg("round %d: %u x %u choices: rc %d (%s) (SEED=%llu)",
					 round, k, n, rc, err, test_seed);
			completion_request_release(&c);
			continue;
		}
		if (first_bad >= 0) {
			snprintf(want, sizeof(want), "prompt %d of the batch: ", first_bad);
			if (rc != -EINVAL || !param || strcmp(param, "prompt") ||
			    strncmp(err, want, strlen(want)))
				fail_msg("round %d: '%s': rc %d param %s '%s', wanted '%s' "
					 "(SEED=%llu)", round, body.data, rc,
					 param ? param : "NULL", err, want, test_seed);
			completion_request_release(&c);
			continue;
		}
		if (rc || c.n_prompts != k)
			fail_msg("round %d: '%s': rc %d (%s), %u prompts (SEED=%llu)",
				 round, body.data, rc, err, c.n_prompts, test_seed);
		for (uint32_t i = 0; i < k; i++) {
			const struct request *r = i ? &c.more[i - 1].req : &c.req;

			one.len = 0;
			strbuf_printf(&one, "{\"max_tokens\":%u,\"n\":%u,"
				      "\"temperature\":0.5,\"prompt\":", max_tokens, n);
			put_prompt(&one, &ps[i]);
			strbuf_append(&one, "}", 1);
			assert_int_equal(parse_str(one.data, &alone, err, sizeof(err),
						   &param), 0);
			if (r->n_prompt != ps[i].n || r->n_choices != n ||
			    r->max_tokens != alone.req.max_tokens ||
			    memcmp(r->prompt, ps[i].tok, ps[i].n * sizeof(int32_t)) ||
			    r->sampling.temperature != alone.req.sampling.temperature)
				fail_msg("round %d prompt %u: not as parsed alone "
					 "(SEED=%llu)", round, i, test_seed);
			completion_request_release(&alone);
		}
		completion_request_release(&c);
	}
	strbuf_release(&body);
	strbuf_release(&one);
}

/* The shapes a batch refuses, and a list of one prompt. */
static void test_batch_shapes(void **state)
{
	static const struct {
		const char *body;
		const char *says;	/* NULL: taken */
	} cases[] = {
		{ "{\"prompt\":[[1,2],[3]]}", NULL },
		{ "{\"prompt\":[[1]]}", NULL },
		{ "{\"prompt\":[[1],5]}", "its item 1 is an integer" },
		{ "{\"prompt\":[[1],{}]}", "its item 1 is an object" },
		{ "{\"prompt\":[[1],[2],[]]}", "prompt 2 of the batch: field 'prompt' is empty" },
		{ "{\"prompt\":[[1],[[2]]]}", "prompt 1 of the batch: prompt[0]" },
		{ "{\"prompt\":[[1],[2,3,4,5,6,7,8,9,10]],\"max_tokens\":504}",
		  "prompt 1 of the batch: prompt (9 tokens) + max_tokens" },
		/* the strings need a tokenizer: the first is named */
		{ "{\"prompt\":[\"a\",\"b\"]}", "prompt 0 of the batch: field 'prompt' is a string" },
		{ "{\"prompt\":[\"a\",[1]]}", "prompt 0 of the batch" },
	};
	struct completion_request c;
	const char *param;
	char err[512];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = parse_str(cases[i].body, &c, err, sizeof(err), &param);

		if (!cases[i].says ? rc != 0 :
		    rc != -EINVAL || !param || strcmp(param, "prompt") ||
		    !strstr(err, cases[i].says))
			fail_msg("'%s': rc %d param %s '%s', wanted '%s'", cases[i].body,
				 rc, param ? param : "NULL", rc ? err : "",
				 cases[i].says ? cases[i].says : "taken");
		completion_request_release(&c);
	}
	assert_int_equal(parse_str("{\"prompt\":[[7,8]],\"max_tokens\":3}", &c, err,
				   sizeof(err), &param), 0);
	assert_int_equal(c.n_prompts, 1);
	assert_int_equal(c.req.n_prompt, 2);
	assert_int_equal(c.req.prompt[1], 8);
	completion_request_release(&c);
}

static void test_best_of_parse(void **state)
{
	static const struct {
		const char *body;
		const char *param;	/* NULL: taken */
		uint32_t n_choices, n_best;
		bool hide;
	} cases[] = {
		{ "{\"prompt\":[1],\"n\":2,\"best_of\":5}", NULL, 5, 2, true },
		{ "{\"prompt\":[[1],[2]],\"best_of\":3,\"logprobs\":1}", NULL, 3, 1, false },
		{ "{\"prompt\":[1],\"n\":3,\"best_of\":3}", NULL, 3, 0, false },
		{ "{\"prompt\":[1],\"best_of\":1,\"stream\":true}", NULL, 1, 0, false },
		{ "{\"prompt\":[1],\"best_of\":null}", NULL, 1, 0, false },
		{ "{\"prompt\":[1],\"n\":3,\"best_of\":2}", "best_of", 0, 0, false },
		{ "{\"prompt\":[1],\"best_of\":21}", "best_of", 0, 0, false },
		{ "{\"prompt\":[1],\"best_of\":0}", "best_of", 0, 0, false },
		{ "{\"prompt\":[1],\"best_of\":2,\"stream\":true}", "best_of", 0, 0, false },
		{ "{\"prompt\":[1],\"best_of\":2.0}", "best_of", 0, 0, false },
		{ "{\"prompt\":[[1],[2],[3],[4]],\"best_of\":20}", "prompt", 0, 0, false },
	};
	struct completion_request c;
	const char *param;
	char err[512];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = parse_str(cases[i].body, &c, err, sizeof(err), &param);

		if (cases[i].param) {
			if (rc != -EINVAL || !param || strcmp(param, cases[i].param))
				fail_msg("'%s': rc %d param %s (%s)", cases[i].body, rc,
					 param ? param : "NULL", err);
			completion_request_release(&c);
			continue;
		}
		if (rc)
			fail_msg("'%s': %s", cases[i].body, err);
		for (uint32_t p = 0; p < c.n_prompts; p++) {
			const struct request *r = p ? &c.more[p - 1].req : &c.req;

			assert_int_equal(r->n_choices, cases[i].n_choices);
			assert_true(r->sampling.logprobs == (cases[i].n_best ||
				    strstr(cases[i].body, "logprobs")));
		}
		assert_int_equal(c.n_best, cases[i].n_best);
		assert_int_equal(c.hide_logprobs, cases[i].hide);
		completion_request_release(&c);
	}
	/* a model without logits cannot rank */
	{
		struct request_limits nl = lim;
		static const char body[] = "{\"prompt\":[1],\"best_of\":2}";

		nl.has_logits = false;
		assert_int_equal(completion_parse(body, strlen(body), &nl, &c, err,
						  sizeof(err), &param), -EINVAL);
		assert_string_equal(param, "best_of");
		completion_request_release(&c);
	}
}

/* completion_rank() against a naive selection: the best of those not
 * yet taken, sums in token order, the lower index on a tie. */
static void test_rank(void **state)
{
	struct rng rng = rng_for(5);
	struct sampler_logprob lp[REQUEST_MAX_CHOICES][12 * 3];
	struct completion_candidate cand[REQUEST_MAX_CHOICES];
	uint32_t order[REQUEST_MAX_CHOICES];

	for (int round = 0; round < 2000; round++) {
		uint32_t n = 1 + rng_below(&rng, 24), n_best = 1 + rng_below(&rng, n);
		uint32_t stride = 1 + rng_below(&rng, 3);
		double sum[REQUEST_MAX_CHOICES];
		bool taken[REQUEST_MAX_CHOICES] = { false };

		for (uint32_t i = 0; i < n; i++) {
			uint32_t len = rng_below(&rng, 13);

			/* ties: a copy of an earlier candidate now and then */
			if (i && !rng_below(&rng, 4)) {
				uint32_t from = rng_below(&rng, i);

				memcpy(lp[i], lp[from], sizeof(lp[i]));
				cand[i] = cand[from];
				cand[i].logprobs = lp[i];
				continue;
			}
			for (uint32_t t = 0; t < len * stride; t++)
				lp[i][t] = (struct sampler_logprob){ (int32_t)t,
					-(float)rng_below(&rng, 1u << 20) / 65536.0f };
			cand[i] = (struct completion_candidate){ lp[i], len, stride };
		}
		for (uint32_t i = 0; i < n; i++) {
			sum[i] = 0;
			for (uint32_t t = 0; t < cand[i].n_tokens; t++)
				sum[i] += lp[i][t * stride].logprob;
		}
		completion_rank(cand, n, n_best, order);
		for (uint32_t r = 0; r < n_best; r++) {
			int best = -1;

			for (uint32_t i = 0; i < n; i++)
				if (!taken[i] && (best < 0 || sum[i] > sum[best]))
					best = (int)i;
			taken[best] = true;
			if (order[r] != (uint32_t)best)
				fail_msg("round %d rank %u: %u, wanted %d (SEED=%llu)",
					 round, r, order[r], best, test_seed);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_all_fields),
		cmocka_unit_test(test_parse_defaults),
		cmocka_unit_test(test_parse_errors),
		cmocka_unit_test(test_parse_error_keeps_id),
		cmocka_unit_test(test_reserved_id_prefix),
		cmocka_unit_test(test_format_completion),
		cmocka_unit_test(test_format_events),
		cmocka_unit_test(test_format_usage_event),
		cmocka_unit_test(test_format_error),
		cmocka_unit_test(test_format_hostile_strings),
		cmocka_unit_test(test_format_null_strings),
		cmocka_unit_test(test_random_roundtrip),
		cmocka_unit_test(test_logprobs_text),
		cmocka_unit_test(test_echo),
		cmocka_unit_test(test_batch_prompts),
		cmocka_unit_test(test_batch_shapes),
		cmocka_unit_test(test_best_of_parse),
		cmocka_unit_test(test_rank),
	};

	test_seed_init("completion_api");
	return cmocka_run_group_tests_name("completion_api", tests, NULL, NULL);
}
