/*
 * test_request_fields.c - cmocka tests of the request field table
 * (server/request/request_fields.c) and of its use by both front ends'
 * parsers (request_parse() for `run` lines, completion_parse() for
 * /v1/completions).
 *
 * The reference is written here from OpenAI's API reference (the
 * completions and chat completions request bodies) and our documented
 * extensions, not read from the table: per field, the front ends that
 * know it, values that must pass (neutral ones for a field we do not
 * implement), values that must be refused as not implemented, and values
 * of the wrong type.  A randomized test builds bodies of random fields
 * and values, asks the reference whether the body passes and which field
 * is at fault, and compares; it prints its seed and honours SEED=
 * (test_rng.h).
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
#include "server/request/request_fields.h"
#include "server/request/request_json.h"
#include "util/strbuf.h"
#include "tests/unit/test_rng.h"

#define J (1u << REQUEST_API_JSONL)
#define C (1u << REQUEST_API_COMPLETIONS)
#define H (1u << REQUEST_API_CHAT)

/* One field as the reference sees it.  Values are JSON texts; a NULL
 * ends each list. */
struct ref_field {
	const char *name;
	unsigned apis;
	const char *pass[4];	/* taken (neutral, or any for metadata) */
	const char *refuse[4];	/* the right type, but not implemented */
	const char *wrong[3];	/* the wrong type */
};

/*
 * The fields this test checks by value: every one that request_fields.c
 * checks itself (metadata and refused).  The parsed ones pass any value
 * at this level (their parsers judge them); they are in ref_parsed.
 */
static const struct ref_field ref_checked[] = {
	{ "user", C | H, { "\"u-1\"", "\"\"" }, { NULL }, { "1", "[]" } },
	{ "safety_identifier", H, { "\"x\"" }, { NULL }, { "true" } },
	{ "prompt_cache_key", H, { "\"k\"" }, { NULL }, { "{}" } },
	{ "echo", J | C, { "false" }, { "true" }, { "0", "\"false\"" } },
	{ "suffix", J | C, { "\"\"" }, { "\"end\"" }, { "1", "[]" } },
	{ "best_of", J | C, { "1" }, { "2", "5" }, { "1.0", "\"1\"" } },
	{ "functions", H, { "[]" }, { "[{\"name\":\"f\"}]" }, { "{}" } },
	{ "function_call", H, { "\"none\"", "\"auto\"" },
	  { "{\"name\":\"f\"}", "\"f\"" }, { "false" } },
	{ "store", H, { "false" }, { "true" }, { "0" } },
	{ "metadata", H, { "{}" }, { "{\"a\":\"b\"}" }, { "[]" } },
	{ "modalities", H, { "[\"text\"]" },
	  { "[\"text\",\"audio\"]", "[]", "[\"audio\"]" }, { "\"text\"" } },
	{ "audio", H, { NULL }, { "{\"voice\":\"alloy\"}", "{}" }, { "\"x\"" } },
	{ "prediction", H, { NULL }, { "{\"type\":\"content\"}" }, { "1" } },
	{ "reasoning_effort", H, { NULL }, { "\"low\"", "\"high\"" }, { "1" } },
	{ "verbosity", H, { "\"medium\"" }, { "\"low\"" }, { "2" } },
	{ "service_tier", H, { "\"auto\"", "\"default\"" },
	  { "\"flex\"", "\"priority\"" }, { "true" } },
	{ "web_search_options", H, { NULL }, { "{}" }, { "[]" } },
	{ "prompt_cache_retention", H, { "\"in-memory\"" }, { "\"24h\"" },
	  { "24" } },
};

/* Fields their parsers read, with the front ends that know them. */
static const struct { const char *name; unsigned apis; } ref_parsed[] = {
	{ "prompt", J | C }, { "messages", H }, { "model", C | H },
	{ "max_tokens", J | C | H }, { "max_completion_tokens", H },
	{ "temperature", J | C | H }, { "top_p", J | C | H }, { "n", J | C | H },
	{ "seed", J | C | H }, { "stop", J | C | H }, { "logit_bias", J | C | H },
	{ "logprobs", J | C | H }, { "top_logprobs", J | C | H },
	{ "stream", C | H }, { "stream_options", C | H },
	{ "id", J | C | H }, { "stop_token", J | C | H },
	{ "stop_token_ids", J | C | H }, { "stop_sequence", J | C | H },
	{ "stop_sequences", J | C | H }, { "include_stop", J | C | H },
	{ "ignore_eos", J | C | H }, { "top_k", J | C | H }, { "min_p", J | C | H },
	{ "presence_penalty", J | C | H }, { "frequency_penalty", J | C | H },
	{ "repetition_penalty", J | C | H },
	{ "grammar", J | C | H }, { "response_format", J | C | H },
	/* chat_tools.c judges these (test_chat_tools.c) */
	{ "tools", H }, { "tool_choice", H }, { "parallel_tool_calls", H },
};

/* Not fields of anything: typos and other servers' names. */
static const char *const ref_unknown[] = {
	"max_token", "Prompt", "stop_tokens", "temprature", "guided_json",
	"", "prompt ", "cache_prompt", "mirostat", "n_predict",
};

/* A field of ref_checked that one front end implements after all: its
 * refuse[] values pass there (its parser judges them), its wrong ones
 * still do not. */
static bool ref_implemented(const char *name, int api)
{
	return (!strcmp(name, "echo") || !strcmp(name, "best_of")) &&
	       api == REQUEST_API_COMPLETIONS;
}

#define N_CHECKED (sizeof(ref_checked) / sizeof(ref_checked[0]))
#define N_PARSED (sizeof(ref_parsed) / sizeof(ref_parsed[0]))
#define N_UNKNOWN (sizeof(ref_unknown) / sizeof(ref_unknown[0]))

static json_t *load(const char *text)
{
	json_error_t jerr;
	json_t *v = json_loads(text, JSON_DECODE_ANY, &jerr);

	if (!v)
		fail_msg("test bug: '%s' is not JSON: %s", text, jerr.text);
	return v;
}

/* {name: value} checked for api: rc, and param when refused. */
static int check_one(const char *name, const char *value, enum request_api api,
		     char *param, char *err)
{
	json_t *obj = json_object();
	int rc;

	json_object_set_new(obj, name, load(value));
	param[0] = '\0';
	rc = request_fields_check(obj, api, err, 256, param, REQUEST_FIELD_NAME_MAX);
	json_decref(obj);
	return rc;
}

static void expect_refused(const char *name, const char *value,
			   enum request_api api, const char *says)
{
	char param[REQUEST_FIELD_NAME_MAX], err[256];

	if (check_one(name, value, api, param, err) != -EINVAL)
		fail_msg("api %d: {\"%s\": %s} passed", api, name, value);
	if (strcmp(param, name))
		fail_msg("api %d: {\"%s\": %s}: param '%s'", api, name, value, param);
	if (!strstr(err, says) || !strstr(err, name))
		fail_msg("api %d: {\"%s\": %s}: message '%s' lacks '%s'", api,
			 name, value, err, says);
}

static void expect_passes(const char *name, const char *value,
			  enum request_api api)
{
	char param[REQUEST_FIELD_NAME_MAX], err[256];

	if (check_one(name, value, api, param, err))
		fail_msg("api %d: {\"%s\": %s} refused: %s", api, name, value, err);
}

/* ------------------------------------------------------------------------
 * Each field alone
 */

static void test_each_field(void **state)
{
	for (int api = 0; api < 3; api++) {
		for (size_t i = 0; i < N_CHECKED; i++) {
			const struct ref_field *f = &ref_checked[i];
			bool known = f->apis & (1u << api);

			/* null is "not given" wherever the field is known */
			if (known)
				expect_passes(f->name, "null", api);
			for (size_t k = 0; k < 4 && f->pass[k]; k++) {
				if (known)
					expect_passes(f->name, f->pass[k], api);
				else
					expect_refused(f->name, f->pass[k], api,
						       "not a field of");
			}
			for (size_t k = 0; k < 4 && f->refuse[k]; k++)
				if (ref_implemented(f->name, api))
					expect_passes(f->name, f->refuse[k], api);
				else
					expect_refused(f->name, f->refuse[k], api,
						       known ? "not implemented" :
						       "not a field of");
			for (size_t k = 0; k < 3 && f->wrong[k]; k++)
				expect_refused(f->name, f->wrong[k], api,
					       known ? "must be" : "not a field of");
		}
		for (size_t i = 0; i < N_PARSED; i++) {
			if (ref_parsed[i].apis & (1u << api))
				expect_passes(ref_parsed[i].name, "\"anything\"", api);
			else
				expect_refused(ref_parsed[i].name, "1", api,
					       "not a field of");
		}
		for (size_t i = 0; i < N_UNKNOWN; i++)
			expect_refused(ref_unknown[i], "0", api, "unknown field");
	}
}

/* Fields that depend on another: best_of on n, function_call on
 * functions. */
static void test_dependent_neutral(void **state)
{
	static const struct {
		const char *body;
		enum request_api api;
		const char *param;	/* NULL: passes */
	} cases[] = {
		{ "{\"n\":3,\"best_of\":3}", REQUEST_API_COMPLETIONS, NULL },
		/* completions rank best_of's candidates (completion_api.c) */
		{ "{\"n\":3,\"best_of\":4}", REQUEST_API_COMPLETIONS, NULL },
		{ "{\"n\":3,\"best_of\":4}", REQUEST_API_JSONL, "best_of" },
		{ "{\"best_of\":1,\"n\":2}", REQUEST_API_JSONL, NULL },
		{ "{\"functions\":[{}],\"function_call\":\"auto\"}", REQUEST_API_CHAT,
		  "functions" },
		{ "{\"function_call\":\"auto\",\"functions\":[]}", REQUEST_API_CHAT, NULL },
	};
	char param[REQUEST_FIELD_NAME_MAX], err[256];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *obj = load(cases[i].body);
		int rc;

		param[0] = '\0';
		rc = request_fields_check(obj, cases[i].api, err, sizeof(err), param,
					  sizeof(param));
		json_decref(obj);
		if (!cases[i].param && rc)
			fail_msg("'%s' refused: %s", cases[i].body, err);
		if (cases[i].param && (rc != -EINVAL || strcmp(param, cases[i].param)))
			fail_msg("'%s': rc %d param '%s', wanted '%s'", cases[i].body,
				 rc, param, cases[i].param);
	}
}

/* A hostile name: cut in param and message, never over-read. */
static void test_long_name(void **state)
{
	char name[4096], param[REQUEST_FIELD_NAME_MAX], err[256];

	memset(name, 'q', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	assert_int_equal(check_one(name, "1", REQUEST_API_CHAT, param, err), -EINVAL);
	assert_int_equal(strlen(param), REQUEST_FIELD_NAME_MAX - 1);
	assert_non_null(strstr(err, "unknown field"));
}

/* chat's fields go when the body goes on as a completions body. */
static void test_keep(void **state)
{
	json_t *obj = load("{\"tools\":[],\"prompt\":[1],\"user\":\"u\","
			   "\"store\":false,\"max_tokens\":3,\"zzz\":1}");

	assert_int_equal(request_fields_keep(obj, REQUEST_API_COMPLETIONS), 0);
	assert_int_equal(json_object_size(obj), 3);
	assert_non_null(json_object_get(obj, "prompt"));
	assert_non_null(json_object_get(obj, "user"));
	assert_non_null(json_object_get(obj, "max_tokens"));
	json_decref(obj);
}

/* ------------------------------------------------------------------------
 * Random bodies against the reference
 */

#define RAND_ROUNDS 3000

static void test_random_bodies(void **state)
{
	struct rng rng = rng_for(1);
	char param[REQUEST_FIELD_NAME_MAX], err[256];

	for (int round = 0; round < RAND_ROUNDS; round++) {
		enum request_api api = (enum request_api)rng_below(&rng, 3);
		uint32_t n = rng_below(&rng, 6);
		json_t *obj = json_object();
		const char *first_bad = NULL;
		int rc;

		for (uint32_t i = 0; i < n; i++) {
			const struct ref_field *f = &ref_checked[rng_below(&rng, N_CHECKED)];
			bool known = f->apis & (1u << api);
			uint32_t what = rng_below(&rng, 8);
			const char *value = NULL;
			bool bad;

			if (json_object_get(obj, f->name))
				continue;
			/* dependent neutrals are test_dependent_neutral's */
			if (!strcmp(f->name, "best_of") ||
			    !strcmp(f->name, "function_call"))
				continue;
			if (what < 5 && f->pass[0])
				value = f->pass[rng_below(&rng, 4)];
			else if (what < 7 && f->refuse[0])
				value = f->refuse[rng_below(&rng, 4)];
			else
				value = f->wrong[rng_below(&rng, 3)];
			if (!value)
				value = f->wrong[0];
			/* passes iff known and one of pass[] */
			bad = true;
			for (size_t k = 0; known && k < 4 && f->pass[k]; k++)
				if (!strcmp(value, f->pass[k]))
					bad = false;
			for (size_t k = 0; ref_implemented(f->name, api) && k < 4 &&
			     f->refuse[k]; k++)
				if (!strcmp(value, f->refuse[k]))
					bad = false;
			json_object_set_new(obj, f->name, load(value));
			if (bad && !first_bad)
				first_bad = f->name;
		}
		if (rng_below(&rng, 5) == 0) {
			const char *u = ref_unknown[rng_below(&rng, N_UNKNOWN)];

			if (!json_object_get(obj, u)) {
				json_object_set_new(obj, u, json_integer(1));
				if (!first_bad)
					first_bad = u;
			}
		}
		param[0] = '\0';
		rc = request_fields_check(obj, api, err, sizeof(err), param,
					  sizeof(param));
		if (!first_bad && rc)
			fail_msg("round %d api %d: refused: %s (SEED=%llu)", round, api,
				 err, test_seed);
		/* members are walked in insertion order: the first bad one */
		if (first_bad && (rc != -EINVAL || strcmp(param, first_bad)))
			fail_msg("round %d api %d: rc %d param '%s', wanted '%s' "
				 "(SEED=%llu)", round, api, rc, param, first_bad,
				 test_seed);
		json_decref(obj);
	}
}

/* ------------------------------------------------------------------------
 * The parsers use the table
 */

static const struct request_limits lim = {
	.vocab = 1000, .max_context = 512, .has_logits = true,
};

/* A `run` line: HTTP's fields and unknown ones are refused, line named. */
static void test_jsonl_lines(void **state)
{
	static const char *const bad[] = {
		"{\"id\":\"a\",\"prompt\":[1],\"max_token\":3}",
		"{\"id\":\"a\",\"prompt\":[1],\"stream\":false}",
		"{\"id\":\"a\",\"prompt\":[1],\"presence_penalty\":2.5}",
		"{\"id\":\"a\",\"prompt\":[1],\"echo\":1}",
	};
	static const char *const good[] = {
		"{\"id\":\"a\",\"prompt\":[1],\"presence_penalty\":0,\"echo\":false}",
		"{\"id\":\"a\",\"prompt\":[1],\"best_of\":2,\"n\":2,\"suffix\":null}",
	};
	struct request req;
	char err[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(request_parse(bad[i], strlen(bad[i]), 4, &lim, &req,
					       err, sizeof(err)), -EINVAL);
		assert_string_equal(req.id, "a");	/* for the error result */
		if (strncmp(err, "line 4: ", 8))
			fail_msg("'%s': %s", bad[i], err);
		request_release(&req);
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		if (request_parse(good[i], strlen(good[i]), 1, &lim, &req, err,
				  sizeof(err)))
			fail_msg("'%s': %s", good[i], err);
		request_release(&req);
	}
}

/* /v1/completions: the refused field is the error's param. */
static void test_completions_param(void **state)
{
	struct request_limits l = lim;
	struct completion_request c;
	const char *param;
	char err[256], body[512];

	l.id_optional = true;
	for (size_t i = 0; i < N_CHECKED; i++) {
		const struct ref_field *f = &ref_checked[i];
		/* best_of's values are completion_parse()'s to judge: its
		 * wrong type is the table's */
		const char *v = f->refuse[0] && strcmp(f->name, "best_of") ?
				f->refuse[0] : f->wrong[0];

		snprintf(body, sizeof(body), "{\"prompt\":[1],\"%s\":%s}", f->name,
			 (f->apis & C) ? v : "1");
		assert_int_equal(completion_parse(body, strlen(body), &l, &c, err,
						  sizeof(err), &param), -EINVAL);
		if (!param || strcmp(param, f->name))
			fail_msg("'%s': param %s (%s)", body, param ? param : "NULL", err);
		completion_request_release(&c);
	}
	snprintf(body, sizeof(body), "{\"prompt\":[1],\"messages\":[]}");
	assert_int_equal(completion_parse(body, strlen(body), &l, &c, err,
					  sizeof(err), &param), -EINVAL);
	assert_string_equal(param, "messages");
	completion_request_release(&c);
	snprintf(body, sizeof(body), "{\"prompt\":[1],\"user\":\"me\","
		 "\"presence_penalty\":0,\"best_of\":1,\"echo\":false,"
		 "\"suffix\":\"\",\"frequency_penalty\":0.0}");
	if (completion_parse(body, strlen(body), &l, &c, err, sizeof(err), &param))
		fail_msg("'%s': %s", body, err);
	completion_request_release(&c);
}

/*
 * The penalties: typed and ranged by their parser, the value landing in
 * the request as given, and a bad one a 400 whose param names it (the
 * JSONL line's error names it too).  Chat hands its body to the same
 * completion_parse().
 */
static void test_penalty_fields(void **state)
{
	static const struct {
		const char *name, *good[4], *bad[6];
	} f[] = {
		{ "presence_penalty", { "0", "-2", "2", "0.25" },
		  { "\"x\"", "true", "[0]", "2.01", "-2.5", "1e30" } },
		{ "frequency_penalty", { "0", "1.5", "-0.1", "2.0" },
		  { "\"0\"", "{}", "-2.0001", "3", "null", NULL } },
		{ "repetition_penalty", { "1", "1.1", "0.5", "100" },
		  { "\"1\"", "0", "-1", "false", "0.0", NULL } },
	};
	struct request_limits l = lim;
	struct completion_request c;
	struct request req;
	const char *param;
	char err[256], body[256];

	l.id_optional = true;
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
		for (size_t j = 0; j < 4; j++) {
			double want = strtod(f[i].good[j], NULL);
			const float *got;

			snprintf(body, sizeof(body), "{\"prompt\":[1],\"%s\":%s}",
				 f[i].name, f[i].good[j]);
			if (completion_parse(body, strlen(body), &l, &c, err,
					     sizeof(err), &param))
				fail_msg("'%s': %s", body, err);
			got = i == 0 ? &c.req.sampling.presence_penalty :
			      i == 1 ? &c.req.sampling.frequency_penalty :
				       &c.req.sampling.repetition_penalty;
			assert_true(*got == (float)want);
			/* a penalty needs the logits unless it is off */
			assert_int_equal(request_needs_logits(&c.req),
					 want != (i == 2 ? 1.0 : 0.0));
			completion_request_release(&c);
		}
		for (size_t j = 0; j < 6 && f[i].bad[j]; j++) {
			bool null = !strcmp(f[i].bad[j], "null");

			snprintf(body, sizeof(body), "{\"prompt\":[1],\"%s\":%s}",
				 f[i].name, f[i].bad[j]);
			if (null) {	/* null is "not given" */
				assert_int_equal(completion_parse(body, strlen(body),
					&l, &c, err, sizeof(err), &param), 0);
				completion_request_release(&c);
				continue;
			}
			assert_int_equal(completion_parse(body, strlen(body), &l, &c,
							  err, sizeof(err), &param),
					 -EINVAL);
			if (!param || strcmp(param, f[i].name))
				fail_msg("'%s': param %s (%s)", body,
					 param ? param : "NULL", err);
			completion_request_release(&c);
			snprintf(body, sizeof(body), "{\"id\":\"a\",\"prompt\":[1],"
				 "\"%s\":%s}", f[i].name, f[i].bad[j]);
			assert_int_equal(request_parse(body, strlen(body), 2, &lim,
						       &req, err, sizeof(err)), -EINVAL);
			if (!strstr(err, f[i].name))
				fail_msg("'%s': %s", body, err);
			request_release(&req);
		}
	}
	/* a token model has no logits to penalize */
	l.has_logits = false;
	snprintf(body, sizeof(body), "{\"prompt\":[1],\"frequency_penalty\":1}");
	assert_int_equal(completion_parse(body, strlen(body), &l, &c, err,
					  sizeof(err), &param), -EINVAL);
	assert_non_null(strstr(err, "penalties"));
	completion_request_release(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_each_field),
		cmocka_unit_test(test_penalty_fields),
		cmocka_unit_test(test_dependent_neutral),
		cmocka_unit_test(test_long_name),
		cmocka_unit_test(test_keep),
		cmocka_unit_test(test_random_bodies),
		cmocka_unit_test(test_jsonl_lines),
		cmocka_unit_test(test_completions_param),
	};

	test_seed_init("request_fields");
	return cmocka_run_group_tests_name("request_fields", tests, NULL, NULL);
}
