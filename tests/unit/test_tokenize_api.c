/*
 * test_tokenize_api.c - cmocka tests of POST /tokenize and /detokenize's
 * bodies (server/http/tokenize_api.c).
 *
 * The reference for /tokenize is the naive encoder
 * (tools/refdecode/ref_tokenizer.c, llama2.c's loop written again) on a
 * tokenizer trained here; /detokenize must give back the text that was
 * tokenized with add_special: BOS's own text ("<s>"), then the text (the
 * decoder drops the dummy-prefix space after BOS).  Random printable texts; the seed is printed and
 * SEED= replays (test_rng.h).  Every bad body is a 400 naming its field.
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

#include "server/http/tokenize_api.h"
#include "text/text_tokenizer.h"
#include "text/tokenizer.h"
#include "text/tokenizer_train.h"
#include "tools/refdecode/ref_tokenizer.h"
#include "util/strbuf.h"
#include "tests/unit/test_rng.h"
#include "tests/unit/test_trained_tok.h"

#define VOCAB 512

static struct tokenizer *tok;		/* owned by ttok */
static struct text_tokenizer *ttok;
static struct ref_tokenizer *ref;

static int setup(void **state)
{
	if (test_trained_tok(VOCAB, &tok, &ttok))
		return -1;
	ref = ref_tokenizer_new(tok);
	return ref ? 0 : -1;
}

static int teardown(void **state)
{
	ref_tokenizer_free(ref);
	text_tokenizer_free(ttok);
	return 0;
}

static struct request_limits limits(void)
{
	return (struct request_limits){ .vocab = VOCAB, .max_context = 2048,
					.id_optional = true, .tok = ttok };
}

/* The body's answer as JSON (fails the test on an error). */
static json_t *answer(bool detok, const char *body)
{
	struct request_limits lim = limits();
	struct strbuf out = STRBUF_INIT;
	char err[320], param[REQUEST_FIELD_NAME_MAX];
	json_error_t jerr;
	json_t *o;
	int rc;

	rc = (detok ? detokenize_answer : tokenize_answer)(body, strlen(body), &lim,
							 &out, err, sizeof(err), param);
	if (rc)
		fail_msg("'%.200s': %s (SEED=%llu)", body, err, test_seed);
	o = json_loadb(out.data, out.len, JSON_REJECT_DUPLICATES, &jerr);
	if (!o || json_object_size(o) != 1)
		fail_msg("'%.200s': answer '%s'", body, out.data);
	strbuf_release(&out);
	return o;
}

static void test_random_round_trip(void **state)
{
	struct rng rng = rng_for(1);
	int32_t want[2 * 200 + 3];

	for (int round = 0; round < 300; round++) {
		char text[201];
		size_t n = rng_below(&rng, 200);
		bool special = rng_below(&rng, 2);
		json_t *body, *o, *ids, *back;
		char *dumped;
		long n_want;

		for (size_t i = 0; i < n; i++)
			text[i] = (char)(' ' + rng_below(&rng, 95));
		text[n] = '\0';
		body = json_pack("{s:s,s:b}", "content", text, "add_special", special);
		dumped = json_dumps(body, JSON_COMPACT);
		o = answer(false, dumped);
		free(dumped);
		json_decref(body);
		ids = json_object_get(o, "tokens");
		n_want = ref_tokenizer_encode(ref, text, n, special, false, want);
		assert_true(n_want >= 0);
		if (json_array_size(ids) != (size_t)n_want)
			fail_msg("round %d '%s': %zu tokens, the reference %ld (SEED=%llu)",
				 round, text, json_array_size(ids), n_want, test_seed);
		for (long i = 0; i < n_want; i++)
			if (json_integer_value(json_array_get(ids, (size_t)i)) != want[i])
				fail_msg("round %d '%s': token %ld differs (SEED=%llu)",
					 round, text, i, test_seed);
		if (special) {
			body = json_pack("{s:O}", "tokens", ids);
			dumped = json_dumps(body, JSON_COMPACT);
			back = answer(true, dumped);
			free(dumped);
			json_decref(body);
			/* BOS as its text ("<s>": llama.cpp's /detokenize
			 * writes special tokens too), then the text */
			size_t bos_len;
			const char *bos = text_tokenizer_token_text(ttok,
								    text_tokenizer_bos(ttok),
								    &bos_len);
			const char *got = json_string_value(json_object_get(back, "content"));

			if (strncmp(got, bos, bos_len) || strcmp(got + bos_len, text))
				fail_msg("round %d: '%s' came back '%s' (SEED=%llu)", round,
					 text, json_string_value(json_object_get(back, "content")),
					 test_seed);
			json_decref(back);
		}
		json_decref(o);
	}
}

static void test_errors(void **state)
{
	static const struct {
		bool detok;
		const char *body;
		const char *param;	/* "": the body as a whole */
		const char *says;
	} cases[] = {
		{ false, "{}", "content", "must be a string" },
		{ false, "{\"content\":1}", "content", "must be a string" },
		{ false, "{\"content\":\"a\",\"add_special\":1}", "add_special", "true or false" },
		{ false, "{\"content\":\"a\",\"with_pieces\":true}", "with_pieces", "not implemented" },
		{ false, "{\"content\":\"a\",\"prompt\":\"b\"}", "prompt", "unknown field" },
		{ false, "[\"a\"]", "", "object" },
		{ false, "{\"content\":", "", "JSON" },
		{ true, "{}", "tokens", "array" },
		{ true, "{\"tokens\":[1,512]}", "tokens", "tokens[1]" },
		{ true, "{\"tokens\":[-1]}", "tokens", "tokens[0]" },
		{ true, "{\"tokens\":[1.0]}", "tokens", "tokens[0]" },
		{ true, "{\"tokens\":\"1\"}", "tokens", "array" },
		{ true, "{\"tokens\":[1],\"content\":\"x\"}", "content", "unknown field" },
	};
	struct request_limits lim = limits();
	struct strbuf out = STRBUF_INIT;
	char err[320], param[REQUEST_FIELD_NAME_MAX];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = (cases[i].detok ? detokenize_answer : tokenize_answer)(
			cases[i].body, strlen(cases[i].body), &lim, &out, err,
			sizeof(err), param);

		if (rc != -EINVAL || strcmp(param, cases[i].param) ||
		    !strstr(err, cases[i].says))
			fail_msg("'%s': rc %d param '%s' err '%s'", cases[i].body, rc,
				 param, err);
		assert_int_equal(out.len, 0);
	}
	/* no tokenizer: a clear 400 */
	lim.tok = NULL;
	assert_int_equal(tokenize_answer("{\"content\":\"a\"}", 15, &lim, &out, err,
					 sizeof(err), param), -EINVAL);
	assert_non_null(strstr(err, "--tokenizer"));
	assert_int_equal(detokenize_answer("{\"tokens\":[]}", 13, &lim, &out, err,
					   sizeof(err), param), -EINVAL);
	strbuf_release(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_round_trip),
		cmocka_unit_test(test_errors),
	};

	test_seed_init("tokenize_api");
	return cmocka_run_group_tests_name("tokenize_api", tests, setup, teardown);
}
