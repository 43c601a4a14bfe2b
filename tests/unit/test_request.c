/*
 * test_request.c - cmocka tests of request_parse() and result_format()
 * (docs/DESIGN.md 3).
 *
 * Each bad-input rule gets its own case and the error text is checked for
 * the line number and the field (and index) it names.  result_format() is
 * checked by parsing its line back with jansson.  A randomized test builds
 * random valid requests as JSON text, with a model of what each field
 * should parse to, and compares; it prints its seed and honours SEED=.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <jansson.h>

#include "engine/request.h"
#include "text/stop_matcher.h"
#include "util/strbuf.h"
#include "model/sim_model.h"
#include "tests/unit/test_rng.h"
#include "server/request/request_json.h"
#include "server/jsonl/jsonl_result.h"

static const struct request_limits lim = { .vocab = 32000, .max_context = 4096,
					   .has_logits = true };

static int parse_str(const char *line, uint64_t line_no, struct request *req,
		     char *err, size_t err_len)
{
	return request_parse(line, strlen(line), line_no, &lim, req, err,
			     err_len);
}

/* ------------------------------------------------------------------------
 * Valid requests
 */

static void test_all_fields(void **state)
{
	const char *line =
		"{\"id\":\"req-1\",\"prompt\":[1,2,3],\"max_tokens\":5,"
		"\"stop_token\":7,\"stop_token_ids\":[8,9],"
		"\"stop_sequence\":[10,11],"
		"\"stop_sequences\":[[12],[13,14,15]],\"include_stop\":true,"
		"\"temperature\":0.5,\"presence_penalty\":0,\"echo\":false}";
	static const int32_t want_tokens[] = { 7, 8, 9, 10, 11, 12, 13, 14, 15 };
	static const uint32_t want_lens[] = { 1, 1, 1, 2, 1, 3 };
	struct request req;
	char err[256];

	assert_int_equal(parse_str(line, 3, &req, err, sizeof(err)), 0);
	assert_string_equal(req.id, "req-1");
	assert_int_equal(req.line_no, 3);
	assert_int_equal(req.n_prompt, 3);
	assert_int_equal(req.prompt[0], 1);
	assert_int_equal(req.prompt[1], 2);
	assert_int_equal(req.prompt[2], 3);
	assert_int_equal(req.max_tokens, 5);
	assert_true(req.include_stop);
	assert_int_equal(req.n_stop_seqs, 6);
	assert_memory_equal(req.stop_lens, want_lens, sizeof(want_lens));
	assert_memory_equal(req.stop_tokens, want_tokens, sizeof(want_tokens));
	assert_non_null(req.stops);
	assert_int_equal(stop_matcher_max_len(req.stops), 3);
	request_release(&req);
	assert_null(req.id);
	assert_null(req.prompt);
	assert_null(req.stops);
}

static void test_defaults(void **state)
{
	struct request req;
	char err[256];

	assert_int_equal(parse_str("{\"id\":\"x\",\"prompt\":[]}", 1, &req,
				   err, sizeof(err)), 0);
	assert_string_equal(req.id, "x");
	assert_int_equal(req.line_no, 1);
	assert_int_equal(req.n_prompt, 0);
	assert_null(req.prompt);
	assert_int_equal(req.max_tokens, REQUEST_DEFAULT_MAX_TOKENS);
	assert_false(req.include_stop);
	assert_null(req.stops);
	assert_null(req.stop_tokens);
	assert_null(req.stop_lens);
	assert_int_equal(req.n_stop_seqs, 0);
	request_release(&req);

	/* Optional fields set to null or to empty lists mean "not given". */
	assert_int_equal(parse_str(" {\"prompt\":[5],\"id\":\"\",\"max_tokens\":null,"
				   "\"stop_token\":null,\"stop_token_ids\":[],"
				   "\"stop_sequence\":null,\"stop_sequences\":[],"
				   "\"include_stop\":null}\r\n", 2, &req, err,
				   sizeof(err)), 0);
	assert_string_equal(req.id, "");
	assert_int_equal(req.n_prompt, 1);
	assert_int_equal(req.max_tokens, REQUEST_DEFAULT_MAX_TOKENS);
	assert_false(req.include_stop);
	assert_null(req.stops);
	assert_int_equal(req.n_stop_seqs, 0);
	request_release(&req);

	/* Releasing a zeroed request is fine, and twice too. */
	request_release(&req);
}

/* The sampling fields (docs/DESIGN.md 3.1): parsed, defaulted, checked,
 * refused without logits, and deep-copied by request_clone(). */
static void test_sampling_fields(void **state)
{
	const char *line =
		"{\"id\":\"s\",\"prompt\":[1],\"max_tokens\":3,\"temperature\":0.5,"
		"\"top_p\":0.9,\"top_k\":40,\"min_p\":0.05,\"seed\":12345,"
		"\"logit_bias\":{\"7\":-100,\"31999\":2.5},\"logprobs\":3,\"n\":4}";
	struct request_limits greedy_model = lim, warm = lim;
	struct request req, copy;
	char err[256];

	assert_int_equal(parse_str(line, 1, &req, err, sizeof(err)), 0);
	assert_true(req.sampling.temperature == 0.5f);
	assert_true(req.sampling.top_p == 0.9f);
	assert_int_equal(req.sampling.top_k, 40);
	assert_true(req.sampling.min_p == 0.05f);
	assert_true(req.sampling.seed == 12345 && req.seed_given);
	assert_int_equal(req.sampling.n_bias, 2);
	assert_true(req.sampling.logprobs);
	assert_int_equal(req.sampling.top_logprobs, 3);
	assert_int_equal(req.n_choices, 4);
	assert_true(request_needs_logits(&req));

	assert_int_equal(request_clone(&copy, &req), 0);
	assert_ptr_not_equal(copy.sampling.bias, req.sampling.bias);
	assert_memory_equal(copy.sampling.bias, req.sampling.bias,
			    2 * sizeof(req.sampling.bias[0]));
	assert_string_equal(copy.id, req.id);
	assert_ptr_not_equal(copy.id, req.id);
	request_release(&req);		/* the copy stands alone */
	assert_int_equal(copy.sampling.bias[1].token, 31999);
	request_release(&copy);

	/* none given: greedy, one choice, no logits needed (fast path) */
	assert_int_equal(parse_str("{\"id\":\"g\",\"prompt\":[1]}", 1, &req,
				   err, sizeof(err)), 0);
	assert_true(req.sampling.temperature == 0.0f && req.sampling.top_p == 1.0f);
	assert_int_equal(req.n_choices, 1);
	assert_false(request_needs_logits(&req));
	request_release(&req);
	/* chat's form of logprobs */
	assert_int_equal(parse_str("{\"id\":\"c\",\"prompt\":[1],\"logprobs\":true,"
				   "\"top_logprobs\":2}", 1, &req, err,
				   sizeof(err)), 0);
	assert_true(req.sampling.logprobs && req.sampling.top_logprobs == 2);
	request_release(&req);

	/* --default-temperature reaches both parsers */
	warm.default_temperature = 0.8f;
	line = "{\"id\":\"w\",\"prompt\":[1]}";
	assert_int_equal(request_parse(line, strlen(line), 1, &warm, &req, err,
				       sizeof(err)), 0);
	assert_true(req.sampling.temperature == 0.8f);
	request_release(&req);
	line = "{\"id\":\"w\",\"prompt\":[1],\"temperature\":0}";
	assert_int_equal(request_parse(line, strlen(line), 1, &warm, &req, err,
				       sizeof(err)), 0);
	assert_true(req.sampling.temperature == 0.0f);
	request_release(&req);

	/* a model without logits cannot sample */
	line = "{\"id\":\"s\",\"prompt\":[1],\"temperature\":0.5}";
	greedy_model.has_logits = false;
	assert_int_equal(request_parse(line, strlen(line), 1, &greedy_model, &req,
				       err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "logits"));
	request_release(&req);
}

/* Each bad sampling value: an error naming its field. */
static void test_sampling_bad(void **state)
{
	static const struct { const char *fields, *want; } cases[] = {
		{ "\"temperature\":-1", "temperature" },
		{ "\"temperature\":\"hot\"", "temperature" },
		{ "\"top_p\":0", "top_p" },
		{ "\"top_p\":1.5", "top_p" },
		{ "\"top_k\":-2", "top_k" },
		{ "\"top_k\":1.5", "top_k" },
		{ "\"min_p\":2", "min_p" },
		{ "\"seed\":-1", "seed" },
		{ "\"seed\":1.5", "seed" },
		{ "\"n\":0", "'n'" },
		{ "\"n\":65", "'n'" },
		{ "\"logit_bias\":{\"32000\":1}", "logit_bias" },
		{ "\"logit_bias\":{\"-1\":1}", "logit_bias" },
		{ "\"logit_bias\":{\"x\":1}", "logit_bias" },
		{ "\"logit_bias\":{\"5\":101}", "bias" },
		{ "\"logit_bias\":{\"5\":\"a\"}", "logit_bias" },
		{ "\"logit_bias\":[1]", "logit_bias" },
		{ "\"logprobs\":21", "logprobs" },
		{ "\"logprobs\":-1", "logprobs" },
		{ "\"logprobs\":\"yes\"", "logprobs" },
		{ "\"top_logprobs\":3", "top_logprobs" },
		{ "\"logprobs\":true,\"top_logprobs\":21", "top_logprobs" },
		{ "\"logprobs\":2,\"top_logprobs\":2", "top_logprobs" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char line[256], err[256];
		struct request req;

		snprintf(line, sizeof(line), "{\"id\":\"b\",\"prompt\":[1],%s}",
			 cases[i].fields);
		assert_int_equal(parse_str(line, 9, &req, err, sizeof(err)), -EINVAL);
		if (!strstr(err, cases[i].want) || strncmp(err, "line 9: ", 8))
			fail_msg("%s: error '%s' does not name %s", line, err,
				 cases[i].want);
		request_release(&req);
	}
}

/* Result lines with a choice index, a seed and logprobs. */
static void test_format_sampling(void **state)
{
	static const int32_t toks[] = { 5, 6 };
	static const struct sampler_logprob lp[] = {
		{ 5, -0.25f }, { 5, -0.25f }, { 9, -1.5f },
		{ 6, -0.125f }, { 6, -0.125f }, { -1, 0.0f },
	};
	struct result r = { .id = "x", .line_no = 1, .tokens = toks,
			    .n_tokens = 2, .finish_reason = "length",
			    .n_choices = 3, .index = 2, .has_seed = true,
			    .seed = 9223372036854775807ull, .logprobs = lp,
			    .logprob_stride = 3 };
	struct strbuf out = STRBUF_INIT;

	assert_int_equal(result_format(&r, &out), 0);
	assert_string_equal(out.data,
		"{\"id\":\"x\",\"tokens\":[5,6],\"finish_reason\":\"length\","
		"\"usage\":{\"prompt_tokens\":0,\"completion_tokens\":0},\"line\":1,"
		"\"index\":2,\"seed\":9223372036854775807,\"logprobs\":["
		"{\"token\":5,\"logprob\":-0.25,\"top_logprobs\":[{\"token\":5,"
		"\"logprob\":-0.25},{\"token\":9,\"logprob\":-1.5}]},"
		"{\"token\":6,\"logprob\":-0.125,\"top_logprobs\":[{\"token\":6,"
		"\"logprob\":-0.125}]}]}\n");
	strbuf_release(&out);
}

static void test_limits_edges(void **state)
{
	struct strbuf sb = STRBUF_INIT;
	struct request req;
	char err[256];
	int i;

	/* Exactly at the context limit is allowed. */
	strbuf_printf(&sb, "{\"id\":\"a\",\"prompt\":[");
	for (i = 0; i < 96; i++)
		strbuf_printf(&sb, "%s%d", i ? "," : "", i);
	strbuf_printf(&sb, "],\"max_tokens\":4000}");
	assert_int_equal(request_parse(sb.data, sb.len, 1, &lim, &req, err,
				       sizeof(err)), 0);
	assert_int_equal(req.n_prompt, 96);
	assert_int_equal(req.max_tokens, 4000);
	request_release(&req);

	/* Tokens 0 and vocab - 1 are in range; max_tokens 0 is allowed. */
	assert_int_equal(parse_str("{\"id\":\"a\",\"prompt\":[0,31999],"
				   "\"max_tokens\":0,\"stop_token\":0,"
				   "\"stop_sequence\":[31999,0]}", 1, &req,
				   err, sizeof(err)), 0);
	assert_int_equal(req.prompt[1], 31999);
	assert_int_equal(req.max_tokens, 0);
	assert_int_equal(req.n_stop_seqs, 2);
	request_release(&req);

	/* The line need not be NUL-terminated: only len bytes are read. */
	strbuf_release(&sb);
	strbuf_printf(&sb, "{\"id\":\"b\",\"prompt\":[4]}GARBAGE");
	assert_int_equal(request_parse(sb.data, sb.len - 7, 9, &lim, &req, err,
				       sizeof(err)), 0);
	assert_string_equal(req.id, "b");
	request_release(&req);
	strbuf_release(&sb);
}

static void test_stops_combined(void **state)
{
	struct request req;
	uint32_t st, m;
	char err[256];

	/* Field order in the line does not matter: the list is always
	 * stop_token, stop_token_ids, stop_sequence, stop_sequences. */
	assert_int_equal(parse_str("{\"stop_sequences\":[[5,6,7],[6,7]],"
				   "\"stop_sequence\":[4,4],"
				   "\"stop_token_ids\":[3,2],"
				   "\"stop_token\":1,\"id\":\"s\",\"prompt\":[]}",
				   1, &req, err, sizeof(err)), 0);
	assert_int_equal(req.n_stop_seqs, 6);
	{
		static const uint32_t lens[] = { 1, 1, 1, 2, 3, 2 };
		static const int32_t toks[] = { 1, 3, 2, 4, 4, 5, 6, 7, 6, 7 };

		assert_memory_equal(req.stop_lens, lens, sizeof(lens));
		assert_memory_equal(req.stop_tokens, toks, sizeof(toks));
	}
	/* The compiled matcher sees the same list: 5 6 7 matches 3 long. */
	st = STOP_MATCHER_ROOT;
	st = stop_matcher_feed(req.stops, st, 5, &m);
	assert_int_equal(m, 0);
	st = stop_matcher_feed(req.stops, st, 6, &m);
	assert_int_equal(m, 0);
	st = stop_matcher_feed(req.stops, st, 7, &m);
	assert_int_equal(m, 3);
	st = stop_matcher_feed(req.stops, st, 2, &m);
	assert_int_equal(m, 1);
	st = stop_matcher_feed(req.stops, st, 4, &m);
	assert_int_equal(m, 0);
	stop_matcher_feed(req.stops, st, 4, &m);
	assert_int_equal(m, 2);
	request_release(&req);

	/* Only stop_token: one sequence of length one; duplicates kept. */
	assert_int_equal(parse_str("{\"id\":\"t\",\"prompt\":[1],\"stop_token\":9,"
				   "\"stop_token_ids\":[9]}", 1, &req, err,
				   sizeof(err)), 0);
	assert_int_equal(req.n_stop_seqs, 2);
	assert_int_equal(req.stop_lens[0], 1);
	assert_int_equal(req.stop_tokens[0], 9);
	assert_int_equal(req.stop_tokens[1], 9);
	assert_non_null(req.stops);
	request_release(&req);
}

/* ------------------------------------------------------------------------
 * Bad input: one case per rule
 */

struct bad_case {
	const char *line;
	const char *id;		/* id that must survive the error, or NULL */
	const char *want[3];	/* substrings the message must contain */
};

static const struct bad_case bad_cases[] = {
	/* tokens outside [0, vocab), in the prompt and every stop field */
	{ "{\"id\":\"a\",\"prompt\":[1,2,3,40000]}", "a",
	  { "prompt[3]", "40000", "out of range [0, 32000)" } },
	{ "{\"id\":\"a\",\"prompt\":[-1]}", "a", { "prompt[0]", "-1", "range" } },
	/* OpenAI's batches are /v1/completions': a line has one prompt */
	{ "{\"id\":\"a\",\"prompt\":[[1,2],[3]]}", "a",
	  { "field 'prompt' is a list of prompts", "one prompt" } },
	{ "{\"id\":\"a\",\"prompt\":[\"x\",\"y\"]}", "a",
	  { "a list of prompts", "/v1/completions" } },
	{ "{\"id\":\"a\",\"prompt\":[32000]}", "a", { "prompt[0]", "32000" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"stop_token\":32000}", "a",
	  { "stop_token", "32000", "range" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"stop_token\":-3}", "a",
	  { "stop_token", "-3", "range" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"stop_token_ids\":[1,99999]}", "a",
	  { "stop_token_ids[1]", "99999", "range" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"stop_sequence\":[1,-5]}", "a",
	  { "stop_sequence[1]", "-5", "range" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"stop_sequences\":[[1],[2,32000]]}", "a",
	  { "stop_sequences[1][1]", "32000", "range" } },
	/* empty stop sequences */
	{ "{\"id\":\"a\",\"prompt\":[1],\"stop_sequence\":[]}", "a",
	  { "stop_sequence", "empty" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"stop_sequences\":[[1],[]]}", "a",
	  { "stop_sequences[1]", "empty" } },
	/* prompt + max_tokens over the context limit */
	{ "{\"id\":\"a\",\"prompt\":[1,2,3,4,5,6,7,8,9,10,11,12],\"max_tokens\":4090}",
	  "a", { "prompt (12 tokens) + max_tokens (4090)", "context limit 4096" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"max_tokens\":9223372036854775807}", "a",
	  { "max_tokens (9223372036854775807)", "context limit 4096" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"max_tokens\":4294967296}", "a",
	  { "max_tokens (4294967296)", "context limit" } },
	/* missing required fields */
	{ "{\"prompt\":[1]}", NULL, { "missing", "'id'" } },
	{ "{\"id\":\"a\"}", "a", { "missing", "'prompt'" } },
	{ "{}", NULL, { "missing", "'id'" } },
	/* mistyped fields */
	{ "{\"id\":5,\"prompt\":[1]}", NULL, { "'id'", "string" } },
	{ "{\"id\":null,\"prompt\":[1]}", NULL, { "'id'", "string" } },
	{ "{\"id\":[\"a\"],\"prompt\":[1]}", NULL, { "'id'", "string" } },
	{ "{\"id\":\"a\",\"prompt\":\"1 2 3\"}", "a", { "'prompt'", "no tokenizer" } },
	{ "{\"id\":\"a\",\"prompt\":null}", "a", { "'prompt'", "array" } },
	{ "{\"id\":\"a\",\"prompt\":{\"0\":1}}", "a", { "'prompt'", "array" } },
	{ "{\"id\":\"a\",\"prompt\":[1,\"2\"]}", "a", { "prompt[1]", "integer" } },
	{ "{\"id\":\"a\",\"prompt\":[1,[2]]}", "a", { "prompt[1]", "integer" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"max_tokens\":\"5\"}", "a",
	  { "'max_tokens'", "integer >= 0" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"max_tokens\":true}", "a",
	  { "'max_tokens'", "integer >= 0" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"max_tokens\":-1}", "a",
	  { "'max_tokens'", "integer >= 0" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"stop_token\":\"x\"}", "a",
	  { "stop_token", "integer" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"stop_token\":[3]}", "a",
	  { "stop_token", "integer" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"stop_token_ids\":5}", "a",
	  { "'stop_token_ids'", "array" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"stop_token_ids\":[5,null]}", "a",
	  { "stop_token_ids[1]", "integer" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"stop_sequence\":5}", "a",
	  { "'stop_sequence'", "array" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"stop_sequence\":[[5]]}", "a",
	  { "stop_sequence[0]", "integer" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"stop_sequences\":[5]}", "a",
	  { "stop_sequences[0]", "array" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"stop_sequences\":[[5],[6,\"7\"]]}", "a",
	  { "stop_sequences[1][1]", "integer" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"stop_sequences\":{\"a\":[1]}}", "a",
	  { "'stop_sequences'", "array" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"include_stop\":1}", "a",
	  { "'include_stop'", "true or false" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"include_stop\":\"true\"}", "a",
	  { "'include_stop'" } },
	/* integers written as reals are type errors */
	{ "{\"id\":\"a\",\"prompt\":[1.0]}", "a", { "prompt[0]", "integer", "real" } },
	{ "{\"id\":\"a\",\"prompt\":[1e3]}", "a", { "prompt[0]", "integer" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"max_tokens\":5.0}", "a",
	  { "'max_tokens'", "integer" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"stop_token\":2.0}", "a",
	  { "stop_token", "integer" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"stop_token_ids\":[2.5]}", "a",
	  { "stop_token_ids[0]", "integer" } },
	{ "{\"id\":\"a\",\"prompt\":[1],\"stop_sequences\":[[2,3.0]]}", "a",
	  { "stop_sequences[0][1]", "integer" } },
	/* not JSON */
	{ "{\"id\":\"a\",\"prompt\":[1]", NULL, { "not valid JSON", "column" } },
	{ "{\"id\":\"a\",\"prompt\":[1]} x", NULL, { "not valid JSON" } },
	{ "{\"id\":\"a\",\"prompt\":[1,]}", NULL, { "not valid JSON" } },
	{ "id=a prompt=1", NULL, { "not valid JSON" } },
	{ "{\"id\":\"a\",\"id\":\"b\",\"prompt\":[1]}", NULL,
	  { "not valid JSON", "duplicate" } },
	{ "{\"id\":\"a\",\"prompt\":[1]}\n{\"id\":\"b\",\"prompt\":[1]}", NULL,
	  { "not valid JSON" } },
	/* not an object */
	{ "[1,2,3]", NULL, { "array", "object" } },
	{ "\"id\"", NULL, { "string", "object" } },
	{ "42", NULL, { "integer", "object" } },
	{ "null", NULL, { "null", "object" } },
	/* empty line */
	{ "", NULL, { "empty line" } },
	{ "  \t \r", NULL, { "empty line" } },
};

static void check_bad(const struct bad_case *bc, uint64_t line_no)
{
	struct request req;
	char err[512], want_line[32];
	int rc, k;

	rc = parse_str(bc->line, line_no, &req, err, sizeof(err));
	if (rc != -EINVAL)
		fail_msg("line %s: rc %d, want -EINVAL", bc->line, rc);
	snprintf(want_line, sizeof(want_line), "line %" PRIu64 ": ", line_no);
	if (strncmp(err, want_line, strlen(want_line)) != 0)
		fail_msg("'%s': error '%s' does not start with '%s'", bc->line,
			 err, want_line);
	for (k = 0; k < 3 && bc->want[k]; k++)
		if (!strstr(err, bc->want[k]))
			fail_msg("'%s': error '%s' does not mention '%s'",
				 bc->line, err, bc->want[k]);
	if (bc->id) {
		assert_non_null(req.id);
		assert_string_equal(req.id, bc->id);
	} else {
		assert_null(req.id);
	}
	assert_int_equal(req.line_no, line_no);
	assert_null(req.prompt);
	assert_int_equal(req.n_prompt, 0);
	assert_null(req.stops);
	assert_null(req.stop_tokens);
	assert_null(req.stop_lens);
	assert_int_equal(req.n_stop_seqs, 0);
	request_release(&req);
	assert_null(req.id);
}

static void test_bad_inputs(void **state)
{
	size_t i;

	for (i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++)
		check_bad(&bad_cases[i], 7 + i * 1000003ull);
}

static void test_bad_huge_prompt(void **state)
{
	struct strbuf sb = STRBUF_INIT;
	struct request req;
	char err[256];
	int i;

	strbuf_printf(&sb, "{\"id\":\"big\",\"max_tokens\":0,\"prompt\":[");
	for (i = 0; i < 5000; i++)
		strbuf_printf(&sb, "%s%d", i ? "," : "", i % 32000);
	strbuf_printf(&sb, "]}");
	assert_int_equal(request_parse(sb.data, sb.len, 12, &lim, &req, err,
				       sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "line 12: "));
	assert_non_null(strstr(err, "prompt (5000 tokens)"));
	assert_non_null(strstr(err, "context limit 4096"));
	assert_string_equal(req.id, "big");
	assert_null(req.prompt);
	request_release(&req);
	strbuf_release(&sb);
}

static void test_bad_small_err_buffer(void **state)
{
	struct request req;
	char err[12];

	memset(err, 'X', sizeof(err));
	assert_int_equal(request_parse("[]", 2, 123456, &lim, &req, err, 8),
			 -EINVAL);
	assert_int_equal(strlen(err), 7);
	assert_int_equal(err[8], 'X');
	request_release(&req);
	/* No error buffer at all is accepted. */
	assert_int_equal(request_parse("{}", 2, 1, &lim, &req, NULL, 0),
			 -EINVAL);
	request_release(&req);
}

/* ------------------------------------------------------------------------
 * result_format
 */

/* Parse the one line r was formatted into and compare every field. */
static void check_roundtrip(const struct result *r)
{
	struct strbuf sb = STRBUF_INIT;
	json_error_t jerr;
	json_t *o, *v, *u;
	size_t prefix, i;

	strbuf_printf(&sb, "previous line\n");
	prefix = sb.len;
	assert_int_equal(result_format(r, &sb), 0);
	assert_memory_equal(sb.data, "previous line\n", prefix);
	assert_true(sb.len > prefix + 1);
	assert_int_equal(sb.data[sb.len - 1], '\n');
	assert_null(memchr(sb.data + prefix, '\n', sb.len - prefix - 1));
	assert_int_equal(strlen(sb.data), sb.len);

	o = json_loadb(sb.data + prefix, sb.len - prefix, JSON_REJECT_DUPLICATES,
		       &jerr);
	if (!o)
		fail_msg("result line not JSON: %s: %s", jerr.text,
			 sb.data + prefix);
	v = json_object_get(o, "id");
	if (r->id)
		assert_string_equal(json_string_value(v), r->id);
	else
		assert_true(json_is_null(v));
	v = json_object_get(o, "tokens");
	assert_true(json_is_array(v));
	assert_int_equal(json_array_size(v), r->n_tokens);
	for (i = 0; i < r->n_tokens; i++)
		assert_int_equal(json_integer_value(json_array_get(v, i)),
				 r->tokens[i]);
	assert_string_equal(json_string_value(json_object_get(o, "finish_reason")),
			    r->finish_reason);
	u = json_object_get(o, "usage");
	assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")),
			 r->n_prompt);
	assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")),
			 r->n_generated);
	assert_int_equal(json_integer_value(json_object_get(o, "line")),
			 r->line_no);
	v = json_object_get(o, "error");
	if (r->error)
		assert_string_equal(json_string_value(v), r->error);
	else
		assert_null(v);
	json_decref(o);
	strbuf_release(&sb);
}

static void test_format_basic(void **state)
{
	static const int32_t toks[] = { 1, 2 };
	struct result r = {
		.id = "a", .line_no = 7, .tokens = toks, .n_tokens = 2,
		.finish_reason = "length", .n_prompt = 3, .n_generated = 2,
	};
	struct strbuf sb = STRBUF_INIT;

	assert_int_equal(result_format(&r, &sb), 0);
	assert_string_equal(sb.data,
			    "{\"id\":\"a\",\"tokens\":[1,2],\"finish_reason\":\"length\","
			    "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2},"
			    "\"line\":7}\n");
	strbuf_release(&sb);

	r.id = NULL;
	r.tokens = NULL;
	r.n_tokens = 0;
	r.finish_reason = "error";
	r.error = "line 7: not valid JSON";
	r.n_prompt = 0;
	r.n_generated = 0;
	assert_int_equal(result_format(&r, &sb), 0);
	assert_string_equal(sb.data,
			    "{\"id\":null,\"tokens\":[],\"finish_reason\":\"error\","
			    "\"usage\":{\"prompt_tokens\":0,\"completion_tokens\":0},"
			    "\"line\":7,\"error\":\"line 7: not valid JSON\"}\n");
	check_roundtrip(&r);
	strbuf_release(&sb);
}

static void test_format_numbers(void **state)
{
	static const int32_t toks[] = {
		0, 9, 10, 99, 100, 101, 999, 1000, 31999, 65536, 1234567,
		2147483647, -1, -10, -2147483647 - 1,
	};
	struct result r = {
		.id = "n", .line_no = 9007199254740993ull, .tokens = toks,
		.n_tokens = sizeof(toks) / sizeof(toks[0]),
		.finish_reason = "stop", .n_prompt = UINT32_MAX,
		.n_generated = 4000000000u,
	};
	struct strbuf sb = STRBUF_INIT;

	check_roundtrip(&r);
	r.line_no = UINT64_MAX;
	assert_int_equal(result_format(&r, &sb), 0);
	assert_non_null(strstr(sb.data, "\"line\":18446744073709551615}"));
	assert_non_null(strstr(sb.data, "[0,9,10,99,100,101,999,1000,31999,65536,"
				 "1234567,2147483647,-1,-10,-2147483648]"));
	strbuf_release(&sb);
}

static void test_format_escapes(void **state)
{
	static const char *const ids[] = {
		"plain",
		"",
		"with \"quotes\"",
		"back\\slash\\",
		"new\nline\r\n",
		"tab\there\b\f",
		"ctl\x01\x1f\x7f",
		"h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80",
		"\xe2\x80\xa8 line separator",
		"/slash/ </script>",
	};
	static const int32_t toks[] = { 42 };
	struct result r = {
		.line_no = 1, .tokens = toks, .n_tokens = 1,
		.finish_reason = "cancelled", .n_prompt = 1, .n_generated = 1,
	};
	size_t i;

	for (i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		r.id = ids[i];
		r.error = NULL;
		check_roundtrip(&r);
		r.error = ids[i];
		check_roundtrip(&r);
	}
}

static void test_format_bad_utf8(void **state)
{
	static const char *const bad[] = {
		"a\xff" "b",		/* never valid */
		"a\xc3",		/* truncated */
		"a\xc0\xaf",		/* overlong */
		"a\xed\xa0\x80",	/* surrogate */
		"a\xf4\x90\x80\x80",	/* above U+10FFFF */
		"a\xe2\x9c" "b",	/* short sequence */
	};
	struct result r = {
		.line_no = 1, .finish_reason = "error", .error = "x",
	};
	struct strbuf sb = STRBUF_INIT;
	json_error_t jerr;
	json_t *o;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		r.id = bad[i];
		assert_int_equal(result_format(&r, &sb), 0);
		o = json_loadb(sb.data, sb.len, 0, &jerr);
		if (!o)
			fail_msg("case %zu: not JSON: %s", i, jerr.text);
		assert_non_null(strstr(json_string_value(json_object_get(o, "id")),
				       "\xef\xbf\xbd"));
		json_decref(o);
		strbuf_release(&sb);
	}
}

/* A result line built from a parsed request's error names its id. */
static void test_format_error_of_parse(void **state)
{
	struct request req;
	char err[256];
	struct result r = { 0 };

	assert_int_equal(parse_str("{\"id\":\"q\\\"\\u00e9\",\"prompt\":[\"x\"]}",
				   5, &req, err, sizeof(err)), -EINVAL);
	assert_string_equal(req.id, "q\"\xc3\xa9");
	r.id = req.id;
	r.line_no = req.line_no;
	r.finish_reason = "error";
	r.error = err;
	check_roundtrip(&r);
	request_release(&req);

	/* jansson's message about bad bytes still gives a valid line. */
	assert_int_equal(parse_str("{\"id\":\"\xff\xfe\",\"prompt\":[]}", 6,
				   &req, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "line 6: not valid JSON"));
	r.id = NULL;
	r.line_no = 6;
	r.error = err;
	{
		struct strbuf sb = STRBUF_INIT;
		json_error_t jerr;
		json_t *o;

		assert_int_equal(result_format(&r, &sb), 0);
		o = json_loadb(sb.data, sb.len, 0, &jerr);
		assert_non_null(o);
		json_decref(o);
		strbuf_release(&sb);
	}
	request_release(&req);
}

/* ------------------------------------------------------------------------
 * Randomized: random valid requests as text, parsed and checked
 */

/* The randomized tests' generator: rng_for(test id) from the printed seed. */
static struct rng test_rng;

static uint64_t rnd(void)
{
	return rng_next(&test_rng);
}

/* Uniform-ish in [0, n). */
static uint32_t rnd_below(uint32_t n)
{
	return n ? (uint32_t)(rnd() % n) : 0;
}

/* What the generated line must parse to. */
struct model_req {
	char id[64];
	int32_t prompt[64];
	uint32_t n_prompt;
	uint32_t max_tokens;
	bool include_stop;
	int32_t stop_tokens[64];
	uint32_t stop_lens[32];
	uint32_t n_stop_seqs;
	uint32_t n_stop_tokens;
};

static void ws(struct strbuf *sb)
{
	static const char *const spaces[] = { "", "", "", " ", "\t", "  " };

	strbuf_printf(sb, "%s", spaces[rnd_below(6)]);
}

static void put_tok_list(struct strbuf *sb, const int32_t *t, uint32_t n)
{
	uint32_t i;

	strbuf_printf(sb, "[");
	for (i = 0; i < n; i++) {
		if (i)
			strbuf_printf(sb, ",");
		ws(sb);
		strbuf_printf(sb, "%d", t[i]);
	}
	ws(sb);
	strbuf_printf(sb, "]");
}

/* A random id; the text (escaped) goes to sb, its value to m->id. */
static void gen_id(struct strbuf *sb, struct model_req *m)
{
	size_t n = 0, len = rnd_below(12);

	strbuf_printf(sb, "\"");
	while (len--) {
		switch (rnd_below(8)) {
		case 0:
			strbuf_printf(sb, "\\\"");
			m->id[n++] = '"';
			break;
		case 1:
			strbuf_printf(sb, "\\\\");
			m->id[n++] = '\\';
			break;
		case 2:
			strbuf_printf(sb, "\\n");
			m->id[n++] = '\n';
			break;
		case 3:
			strbuf_printf(sb, "\\u00e9");
			m->id[n++] = '\xc3';
			m->id[n++] = '\xa9';
			break;
		case 4:
			strbuf_printf(sb, "\xe2\x9c\x93");
			m->id[n++] = '\xe2';
			m->id[n++] = '\x9c';
			m->id[n++] = '\x93';
			break;
		default: {
			char c = (char)('a' + rnd_below(26));

			strbuf_printf(sb, "%c", c);
			m->id[n++] = c;
		}
		}
	}
	m->id[n] = '\0';
	strbuf_printf(sb, "\"");
}

static int32_t rnd_tok(void)
{
	switch (rnd_below(4)) {
	case 0:
		return 0;
	case 1:
		return (int32_t)lim.vocab - 1;
	default:
		return (int32_t)rnd_below(lim.vocab);
	}
}

static void add_seq(struct model_req *m, const int32_t *t, uint32_t n)
{
	memcpy(m->stop_tokens + m->n_stop_tokens, t, n * sizeof(*t));
	m->n_stop_tokens += n;
	m->stop_lens[m->n_stop_seqs++] = n;
}

/* id, prompt, max_tokens, 4 stop fields, include_stop, a neutral one of
 * OpenAI's (not implemented, so the fast path leaves it to jansson) */
#define N_FIELDS 9

/*
 * Build one random valid request line into sb (fields in random order)
 * and its expected parse into m.
 */
static void gen_request(struct strbuf *sb, struct model_req *m)
{
	/* field texts, built first, then emitted in a random order */
	struct strbuf f[N_FIELDS];
	int32_t st_token = 0, ids[4], seq[4], seqs[4][4];
	uint32_t n_ids = 0, n_seq = 0, n_seqs = 0, seqs_len[4];
	bool has_st = false, has_ids = false, has_seq = false, has_seqs = false;
	uint32_t i, j, n_f = 0, order[N_FIELDS];

	memset(m, 0, sizeof(*m));
	memset(f, 0, sizeof(f));
	strbuf_printf(&f[n_f], "\"id\":");
	ws(&f[n_f]);
	gen_id(&f[n_f++], m);

	m->n_prompt = rnd_below(65);
	for (i = 0; i < m->n_prompt; i++)
		m->prompt[i] = rnd_tok();
	strbuf_printf(&f[n_f], "\"prompt\":");
	put_tok_list(&f[n_f++], m->prompt, m->n_prompt);

	m->max_tokens = REQUEST_DEFAULT_MAX_TOKENS;
	if (rnd_below(4)) {
		m->max_tokens = rnd_below(3) ? rnd_below(200)
			: lim.max_context - m->n_prompt;
		strbuf_printf(&f[n_f++], "\"max_tokens\":%u", m->max_tokens);
	}
	if (rnd_below(3) == 0) {
		has_st = true;
		st_token = rnd_tok();
		strbuf_printf(&f[n_f++], "\"stop_token\":%d", st_token);
	}
	if (rnd_below(3) == 0) {
		has_ids = true;
		n_ids = rnd_below(5);
		for (i = 0; i < n_ids; i++)
			ids[i] = rnd_tok();
		strbuf_printf(&f[n_f], "\"stop_token_ids\":");
		put_tok_list(&f[n_f++], ids, n_ids);
	}
	if (rnd_below(3) == 0) {
		has_seq = true;
		n_seq = 1 + rnd_below(4);
		for (i = 0; i < n_seq; i++)
			seq[i] = rnd_tok();
		strbuf_printf(&f[n_f], "\"stop_sequence\":");
		put_tok_list(&f[n_f++], seq, n_seq);
	}
	if (rnd_below(3) == 0) {
		has_seqs = true;
		n_seqs = rnd_below(5);
		strbuf_printf(&f[n_f], "\"stop_sequences\":[");
		for (i = 0; i < n_seqs; i++) {
			seqs_len[i] = 1 + rnd_below(4);
			for (j = 0; j < seqs_len[i]; j++)
				seqs[i][j] = rnd_tok();
			if (i)
				strbuf_printf(&f[n_f], ",");
			put_tok_list(&f[n_f], seqs[i], seqs_len[i]);
		}
		strbuf_printf(&f[n_f++], "]");
	}
	if (rnd_below(3) == 0) {
		m->include_stop = rnd_below(2);
		strbuf_printf(&f[n_f++], "\"include_stop\":%s",
			      m->include_stop ? "true" : "false");
	}
	if (rnd_below(4) == 0)
		strbuf_printf(&f[n_f++], "\"suffix\":%s",
			      rnd_below(2) ? "null" : "\"\"");

	/* the parsed list is always in field order */
	if (has_st)
		add_seq(m, &st_token, 1);
	for (i = 0; has_ids && i < n_ids; i++)
		add_seq(m, &ids[i], 1);
	if (has_seq)
		add_seq(m, seq, n_seq);
	for (i = 0; has_seqs && i < n_seqs; i++)
		add_seq(m, seqs[i], seqs_len[i]);

	for (i = 0; i < n_f; i++)
		order[i] = i;
	for (i = n_f; i > 1; i--) {
		uint32_t k = rnd_below(i), t = order[i - 1];

		order[i - 1] = order[k];
		order[k] = t;
	}
	ws(sb);
	strbuf_printf(sb, "{");
	for (i = 0; i < n_f; i++) {
		if (i)
			strbuf_printf(sb, ",");
		ws(sb);
		strbuf_append(sb, f[order[i]].data, f[order[i]].len);
		ws(sb);
	}
	strbuf_printf(sb, "}");
	ws(sb);
	for (i = 0; i < N_FIELDS; i++)
		strbuf_release(&f[i]);
}

static void check_against_model(const struct request *req,
				const struct model_req *m, uint64_t line_no)
{
	uint32_t i, st, ml, got;

	assert_string_equal(req->id, m->id);
	assert_int_equal(req->line_no, line_no);
	assert_int_equal(req->n_prompt, m->n_prompt);
	if (m->n_prompt)
		assert_memory_equal(req->prompt, m->prompt,
				    m->n_prompt * sizeof(int32_t));
	else
		assert_null(req->prompt);
	assert_int_equal(req->max_tokens, m->max_tokens);
	assert_int_equal(req->include_stop, m->include_stop);
	assert_int_equal(req->n_stop_seqs, m->n_stop_seqs);
	if (!m->n_stop_seqs) {
		assert_null(req->stops);
		return;
	}
	assert_non_null(req->stops);
	assert_memory_equal(req->stop_lens, m->stop_lens,
			    m->n_stop_seqs * sizeof(uint32_t));
	assert_memory_equal(req->stop_tokens, m->stop_tokens,
			    m->n_stop_tokens * sizeof(int32_t));
	/* Fed alone, the last stop sequence matches in full. */
	st = STOP_MATCHER_ROOT;
	ml = m->stop_lens[m->n_stop_seqs - 1];
	got = 0;
	for (i = 0; i < ml; i++)
		st = stop_matcher_feed(req->stops, st,
				       m->stop_tokens[m->n_stop_tokens - ml + i],
				       &got);
	assert_int_equal(got, ml);
}

/*
 * result_format() writes no more than result_format_bound() says, on the
 * longest logprob lines there are: up to 20 alternatives a token, the
 * longest token ids and the longest "%.9g" logprobs (denormals such as
 * -1.40129846e-45), mixed with random ones.  The bound once left out the
 * literal around each entry, and a worker's long logprobs overran the
 * buffer (found under ASan in e2e_hostile's logprobs mode).
 */
static void test_format_logprob_bound(void **state)
{
	static const float longest[] = { -1.40129846e-45f, -1.17549435e-38f,
					 -3.40282347e38f, -1.23456791e-05f };
	struct sampler_logprob *lp;
	int32_t *tokens;
	uint32_t iter;

	test_rng = rng_for(40);
	for (iter = 0; iter < 300; iter++) {
		uint32_t n = 1 + rnd_below(iter < 10 ? 64 : 300);
		uint32_t stride = 1 + rnd_below(SAMPLER_MAX_LOGPROBS + 1);
		struct result r = { .id = "id", .finish_reason = "length",
				    .n_prompt = 1, .n_generated = n };
		struct strbuf sb = STRBUF_INIT;
		size_t bound;

		if (iter < 10)
			stride = SAMPLER_MAX_LOGPROBS + 1;
		tokens = malloc(n * sizeof(*tokens));
		lp = malloc((size_t)n * stride * sizeof(*lp));
		assert_non_null(tokens);
		assert_non_null(lp);
		for (uint32_t i = 0; i < n; i++) {
			tokens[i] = iter < 10 ? INT32_MAX : (int32_t)rnd_below(INT32_MAX);
			for (uint32_t j = 0; j < stride; j++) {
				struct sampler_logprob *e = &lp[(size_t)i * stride + j];

				e->token = iter < 10 || rnd_below(2) ? INT32_MAX :
					   (int32_t)rnd_below(100000);
				e->logprob = iter < 10 || rnd_below(2) ?
					longest[rnd_below(4)] :
					-(float)rnd_below(1000000) / 997.0f;
			}
		}
		r.tokens = tokens;
		r.n_tokens = n;
		r.logprobs = lp;
		r.logprob_stride = stride;
		bound = result_format_bound(&r);
		assert_int_equal(result_format(&r, &sb), 0);
		if (sb.len + 1 > bound)
			fail_msg("seed %llu: %u tokens x %u entries: %zu bytes written, "
				 "bound %zu", (unsigned long long)test_seed, n, stride,
				 sb.len + 1, bound);
		strbuf_release(&sb);
		free(tokens);
		free(lp);
	}
}

static void test_random_requests(void **state)
{
	struct strbuf sb = STRBUF_INIT;
	struct model_req m;
	struct request req;
	uint64_t seed = test_seed;
	char err[512];
	int iter;

	test_rng = rng_for(1);

	for (iter = 0; iter < 5000; iter++) {
		uint64_t line_no = 1 + rnd_below(1000000);
		struct result r = { 0 };

		strbuf_release(&sb);
		gen_request(&sb, &m);
		if (request_parse(sb.data, sb.len, line_no, &lim, &req, err,
				  sizeof(err)))
			fail_msg("SEED=%" PRIu64 " iter %d: %s\n  line: %s",
				 seed, iter, err, sb.data);
		check_against_model(&req, &m, line_no);

		/* and its result line round-trips */
		r.id = req.id;
		r.line_no = req.line_no;
		r.tokens = req.prompt;
		r.n_tokens = req.n_prompt;
		r.finish_reason = rnd_below(2) ? "stop" : "length";
		r.n_prompt = req.n_prompt;
		r.n_generated = req.max_tokens;
		check_roundtrip(&r);
		request_release(&req);
	}
	strbuf_release(&sb);
}

/* Random valid requests with one token made invalid: always an error
 * naming that field. */
static void test_random_bad_token(void **state)
{
	struct strbuf sb = STRBUF_INIT;
	struct model_req m;
	struct request req;
	uint64_t seed = test_seed;
	char err[512];
	int iter;

	test_rng = rng_for(2);

	for (iter = 0; iter < 2000; iter++) {
		struct strbuf line = STRBUF_INIT;
		uint32_t k;

		strbuf_release(&sb);
		gen_request(&sb, &m);
		if (m.n_prompt == 0)
			continue;
		/* rewrite the prompt with one token out of range */
		k = rnd_below(m.n_prompt);
		m.prompt[k] = rnd_below(2) ? -1 - (int32_t)rnd_below(100)
			: (int32_t)(lim.vocab + rnd_below(100));
		strbuf_printf(&line, "{\"id\":\"x\",\"prompt\":");
		put_tok_list(&line, m.prompt, m.n_prompt);
		strbuf_printf(&line, "}");
		assert_int_equal(request_parse(line.data, line.len, 3, &lim,
					       &req, err, sizeof(err)), -EINVAL);
		{
			char want[64];

			snprintf(want, sizeof(want), "line 3: prompt[%u]: token %d",
				 k, m.prompt[k]);
			if (!strstr(err, want))
				fail_msg("SEED=%" PRIu64 ": '%s' lacks '%s'",
					 seed, err, want);
		}
		request_release(&req);
		strbuf_release(&line);
	}
	strbuf_release(&sb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_all_fields),
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_limits_edges),
		cmocka_unit_test(test_sampling_fields),
		cmocka_unit_test(test_sampling_bad),
		cmocka_unit_test(test_format_sampling),
		cmocka_unit_test(test_stops_combined),
		cmocka_unit_test(test_bad_inputs),
		cmocka_unit_test(test_bad_huge_prompt),
		cmocka_unit_test(test_bad_small_err_buffer),
		cmocka_unit_test(test_format_basic),
		cmocka_unit_test(test_format_numbers),
		cmocka_unit_test(test_format_escapes),
		cmocka_unit_test(test_format_bad_utf8),
		cmocka_unit_test(test_format_error_of_parse),
		cmocka_unit_test(test_format_logprob_bound),
		cmocka_unit_test(test_random_requests),
		cmocka_unit_test(test_random_bad_token),
	};

	test_seed_init("request");
	return cmocka_run_group_tests_name("request", tests, NULL, NULL);
}
