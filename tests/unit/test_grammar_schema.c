/*
 * test_grammar_schema.c - JSON schemas as grammars, end to end.
 *
 * Each schema below is compiled to GBNF (json_schema.c), parsed, and
 * decoded by random walks over a JSON-flavoured vocabulary: at each step
 * a uniformly random allowed token (half the time among the "closing"
 * ones, so walks end), the mask checked against the naive masker.  Every
 * walk that picks EOS must give text that jansson parses and that a
 * small validator written here (from the JSON schema definitions of the
 * supported keywords) accepts.  Unsupported keywords must be refused by
 * name and place.
 *
 * SEED=<n> replays a run (tests/unit/test_rng.h).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"
#include "tests/unit/test_rng.h"

/* ------------------------------------------------------------------ */
/* The validator                                                       */
/* ------------------------------------------------------------------ */

static size_t utf8_len(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		n += ((uint8_t)*s & 0xc0) != 0x80;
	return n;
}

static int validate(json_t *x, json_t *s, json_t *root);

static int type_ok(json_t *x, const char *t, json_t *s, json_t *root)
{
	json_t *v, *p, *req, *ap;
	const char *k;
	size_t i;

	if (!strcmp(t, "null"))
		return json_is_null(x);
	if (!strcmp(t, "boolean"))
		return json_is_boolean(x);
	if (!strcmp(t, "integer"))
		return json_is_integer(x);
	if (!strcmp(t, "number"))
		return json_is_number(x);
	if (!strcmp(t, "string")) {
		json_t *mn = json_object_get(s, "minLength");
		json_t *mx = json_object_get(s, "maxLength");

		if (!json_is_string(x))
			return 0;
		if (mn && (long long)utf8_len(json_string_value(x)) < json_integer_value(mn))
			return 0;
		if (mx && (long long)utf8_len(json_string_value(x)) > json_integer_value(mx))
			return 0;
		return 1;
	}
	if (!strcmp(t, "array")) {
		json_t *mn = json_object_get(s, "minItems");
		json_t *mx = json_object_get(s, "maxItems");
		json_t *items = json_object_get(s, "items");

		if (!json_is_array(x))
			return 0;
		if (mn && (long long)json_array_size(x) < json_integer_value(mn))
			return 0;
		if (mx && (long long)json_array_size(x) > json_integer_value(mx))
			return 0;
		json_array_foreach(x, i, v)
			if (items && !validate(v, items, root))
				return 0;
		return 1;
	}
	if (!strcmp(t, "object")) {
		if (!json_is_object(x))
			return 0;
		p = json_object_get(s, "properties");
		req = json_object_get(s, "required");
		ap = json_object_get(s, "additionalProperties");
		json_array_foreach(req, i, v)
			if (!json_object_get(x, json_string_value(v)))
				return 0;
		json_object_foreach(x, k, v) {
			json_t *ps = p ? json_object_get(p, k) : NULL;

			if (ps && !validate(v, ps, root))
				return 0;
			if (!ps && ap && json_is_false(ap))
				return 0;
		}
		return 1;
	}
	return 0;
}

static int validate(json_t *x, json_t *s, json_t *root)
{
	json_t *v, *a;
	size_t i;

	if (json_is_true(s))
		return 1;
	if ((v = json_object_get(s, "$ref"))) {
		const char *r = json_string_value(v);

		return validate(x, json_object_get(json_object_get(root, "$defs"),
						   r + 8), root);
	}
	if ((v = json_object_get(s, "const")))
		return json_equal(x, v);
	if ((v = json_object_get(s, "enum"))) {
		json_array_foreach(v, i, a)
			if (json_equal(x, a))
				return 1;
		return 0;
	}
	if ((v = json_object_get(s, "anyOf"))) {
		json_array_foreach(v, i, a)
			if (validate(x, a, root))
				return 1;
		return 0;
	}
	v = json_object_get(s, "type");
	if (json_is_string(v))
		return type_ok(x, json_string_value(v), s, root);
	if (json_is_array(v)) {
		json_array_foreach(v, i, a)
			if (type_ok(x, json_string_value(a), s, root))
				return 1;
		return 0;
	}
	return 1;
}

/* ------------------------------------------------------------------ */
/* The vocabulary                                                      */
/* ------------------------------------------------------------------ */

static const char *const PIECES[] = {
	"{\"", "\":", "\",", "\"}", "\"]", "true", "false", "null", "[]", "{}",
	"12", "0.", "5e", "-3", "E+", "name", "\"name\"", "age", "\"age\":",
	"tags", "kind", "\"kind\"", "red", "\"red\"", "green", "child",
	"items", "id", "\\n", "\\u00e9", "\\\"", "\xc3\xa9", "\xc3", "\xa9",
	"\xe4\xb8\xad", ", ", ": ", "  ", "\n", "}}", "]]", "},{", "ab",
};
#define N_PIECES (sizeof(PIECES) / sizeof(PIECES[0]))

struct vocab {
	uint8_t *b[256];
	uint32_t len[256];
	uint32_t n;
};

/* Token 0 is EOS; then printable ASCII one by one; then PIECES. */
static void make_vocab(struct vocab *v)
{
	uint32_t c, i;

	v->n = 0;
	v->b[v->n] = (uint8_t *)strdup("");
	v->len[v->n++] = 0;
	for (c = 0x20; c < 0x7f; c++) {
		v->b[v->n] = malloc(1);
		v->b[v->n][0] = (uint8_t)c;
		v->len[v->n++] = 1;
	}
	for (i = 0; i < N_PIECES; i++) {
		v->b[v->n] = (uint8_t *)strdup(PIECES[i]);
		v->len[v->n] = (uint32_t)strlen(PIECES[i]);
		v->n++;
	}
}

static int closing(const struct vocab *v, uint32_t t)
{
	return t == 0 || (v->len[t] && strchr("\"]}0123456789el,", v->b[t][0]));
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */
/* ------------------------------------------------------------------ */

static const char *const SCHEMAS[] = {
	"{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\","
	" \"maxLength\": 5}, \"age\": {\"type\": \"integer\"}}, \"required\":"
	" [\"name\"], \"additionalProperties\": false}",
	"{\"type\": \"object\", \"properties\": {\"tags\": {\"type\": \"array\","
	" \"items\": {\"enum\": [\"red\", \"green\", 3, null]}, \"minItems\": 1,"
	" \"maxItems\": 3}, \"kind\": {\"const\": \"k\"}, \"id\": {\"type\":"
	" [\"number\", \"null\"]}}, \"required\": [\"kind\", \"tags\"]}",
	"{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"id\":"
	" {\"type\": \"integer\"}, \"child\": {\"anyOf\": [{\"$ref\":"
	" \"#/$defs/node\"}, {\"type\": \"null\"}]}}, \"required\": [\"id\"],"
	" \"additionalProperties\": false}}, \"$ref\": \"#/$defs/node\"}",
	"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"boolean\"},"
	" \"b\": {\"type\": \"string\", \"minLength\": 2}, \"c\": {}, \"d\":"
	" {\"type\": \"array\", \"maxItems\": 0}}, \"additionalProperties\": false,"
	" \"title\": \"t\"}",
	"{\"type\": \"object\"}",
	NULL,	/* JSON mode */
};

static void naive_mask(const struct vocab *v, const struct grammar_matcher *m,
		       uint64_t *mask)
{
	uint32_t t;

	memset(mask, 0, grammar_mask_words(v->n) * 8);
	for (t = 0; t < v->n; t++) {
		struct grammar_matcher *c = grammar_matcher_clone(m);
		int ok = t == 0 ? grammar_matcher_is_accepting(m) :
			 grammar_matcher_accept_bytes(c, v->b[t], v->len[t]) == 0;

		grammar_matcher_destroy(c);
		if (ok)
			mask[t / 64] |= 1ull << (t % 64);
	}
}

static void test_schema_walks(void **state)
{
	struct rng r = rng_for(1);
	struct vocab v;
	struct grammar_vocab *gv;
	size_t si;

	(void)state;
	make_vocab(&v);
	gv = grammar_vocab_create((const uint8_t *const *)v.b, v.len, v.n, 0);
	assert_non_null(gv);
	for (si = 0; si < sizeof(SCHEMAS) / sizeof(SCHEMAS[0]); si++) {
		char err[256], *src;
		json_t *schema = SCHEMAS[si] ? json_loads(SCHEMAS[si], 0, NULL) :
			json_loads("{\"type\": \"object\"}", 0, NULL);
		struct grammar *g;
		struct grammar_mask_cache *cache = grammar_mask_cache_create(v.n, 1 << 20);
		uint64_t want[4] = { 0 }, got[4] = { 0 };	/* words past the vocabulary stay 0 */
		uint32_t walk, finished = 0;

		src = SCHEMAS[si] ? json_schema_to_gbnf(SCHEMAS[si],
				strlen(SCHEMAS[si]), err, sizeof(err)) : json_mode_gbnf();
		if (!src)
			fail_msg("schema %zu refused: %s", si, err);
		g = grammar_parse(src, strlen(src), err, sizeof(err));
		if (!g)
			fail_msg("schema %zu's grammar refused: %s\n%s", si, err, src);
		for (walk = 0; walk < 60; walk++) {
			struct grammar_matcher *m = grammar_matcher_create(g);
			char out[4096];
			size_t n_out = 0;
			uint32_t step;

			for (step = 0; step < 300; step++) {
				uint32_t t, n_allowed = 0, n_close = 0, pick;
				int only_close;

				assert_int_equal(grammar_mask_compute(gv, m, cache, got), 0);
				if (step % 7 == 0) {
					naive_mask(&v, m, want);
					if (memcmp(want, got, sizeof(want)))
						fail_msg("schema %zu: mask differs", si);
				}
				for (t = 0; t < v.n; t++) {
					if (!(got[t / 64] >> (t % 64) & 1))
						continue;
					n_allowed++;
					n_close += closing(&v, t);
				}
				if (!n_allowed)
					fail_msg("schema %zu: dead end after '%.*s'",
						 si, (int)n_out, out);
				only_close = n_close && rng_below(&r, 2);
				pick = rng_below(&r, only_close ? n_close : n_allowed);
				for (t = 0; t < v.n; t++)
					if ((got[t / 64] >> (t % 64) & 1) &&
					    (!only_close || closing(&v, t)) && !pick--)
						break;
				assert_int_equal(grammar_matcher_accept_token(m, gv, t), 0);
				if (t == 0) {
					json_error_t je;
					json_t *doc = json_loadb(out, n_out, JSON_ALLOW_NUL, &je);

					if (!doc)
						fail_msg("schema %zu: not JSON (%s): '%.*s'",
							 si, je.text, (int)n_out, out);
					if (!validate(doc, schema, schema))
						fail_msg("schema %zu: invalid: '%.*s'",
							 si, (int)n_out, out);
					json_decref(doc);
					finished++;
					break;
				}
				if (n_out + v.len[t] >= sizeof(out))
					break;
				memcpy(out + n_out, v.b[t], v.len[t]);
				n_out += v.len[t];
			}
			grammar_matcher_destroy(m);
		}
		printf("schema %zu: %u of 60 walks finished\n", si, finished);
		assert_true(finished >= 10);
		grammar_mask_cache_destroy(cache);
		grammar_destroy(g);
		free(src);
		json_decref(schema);
	}
	grammar_vocab_destroy(gv);
	for (si = 0; si < v.n; si++)
		free(v.b[si]);
}

static void test_schema_refusals(void **state)
{
	static const struct {
		const char *schema, *want;
	} cases[] = {
		{ "{\"type\": \"string\", \"pattern\": \"a+\"}",
		  "schema at /: unsupported keyword 'pattern'" },
		{ "{\"type\": \"object\", \"properties\": {\"x\": {\"type\": "
		  "\"number\", \"minimum\": 3}}}",
		  "schema at /properties/x: unsupported keyword 'minimum'" },
		{ "{\"oneOf\": []}", "unsupported keyword 'oneOf'" },
		{ "{\"type\": \"object\", \"additionalProperties\": true}",
		  "'additionalProperties' other than false" },
		{ "{\"$ref\": \"#/$defs/nope\"}", "$ref '#/$defs/nope' is not" },
		{ "{\"type\": \"wat\"}", "unknown type 'wat'" },
		{ "{\"type\": \"array\", \"minItems\": 3, \"maxItems\": 2}",
		  "maxItems below minItems" },
		{ "{\"type\": \"object\", \"properties\": {}, \"required\": [\"q\"]}",
		  "required property q" },
		{ "{\"type\": ", "schema is not JSON: line 1" },
		{ "false", "a schema must be an object or true" },
	};
	char err[256];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *g = json_schema_to_gbnf(cases[i].schema,
					      strlen(cases[i].schema), err,
					      sizeof(err));

		if (g)
			fail_msg("accepted: %s", cases[i].schema);
		if (!strstr(err, cases[i].want))
			fail_msg("'%s': got '%s', want '%s'", cases[i].schema,
				 err, cases[i].want);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_schema_walks),
		cmocka_unit_test(test_schema_refusals),
	};

	test_seed_init("test_grammar_schema");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
