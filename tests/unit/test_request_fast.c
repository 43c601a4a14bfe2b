/*
 * test_request_fast.c - the request fast path against jansson.
 *
 * The reference is an independent jansson read of the same line (the
 * parser request_json.c falls back to): whenever request_parse_fast() takes a
 * line, jansson must read it as an object with exactly the fields taken,
 * the same id, prompt, max_tokens, include_stop and stop sequences (in
 * docs/DESIGN.md 3.1's order: stop_token, stop_token_ids, stop_sequence,
 * stop_sequences), within the limits.  Lines of the common shape, with
 * random key order, whitespace, ids, prompts and stops, must all be taken
 * (so the fast path is really used); a list of other shapes must all be
 * given up; and random byte mutations of good lines must never be taken
 * unless jansson agrees.  Randomized: the seed is printed,
 * SEED= replays it.
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

#include "engine/request.h"
#include "server/request/request_fast.h"
#include "tests/unit/test_rng.h"
#include "server/request/request_json.h"

static const struct request_limits lim = { .vocab = 1000, .max_context = 600 };

/* A token by docs/DESIGN.md 3.1: an integer in [0, vocab). */
static bool ref_token(const json_t *t, const struct request_limits *l, int32_t *out)
{
	if (!json_is_integer(t) || json_integer_value(t) < 0 ||
	    json_integer_value(t) >= l->vocab)
		return false;
	*out = (int32_t)json_integer_value(t);
	return true;
}

/* Tokens over want's stop sequences so far. */
static uint32_t ref_n_tokens(const struct request *want)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < want->n_stop_seqs; i++)
		n += want->stop_lens[i];
	return n;
}

/* Append seq to want's stop sequences: a non-empty array of tokens, or
 * (one) a single token, a sequence of one. */
static bool ref_add_seq(const json_t *seq, bool one, const struct request_limits *l,
			struct request *want)
{
	size_t n = one ? 1 : json_array_size(seq);
	uint32_t at = ref_n_tokens(want);

	if ((!one && !json_is_array(seq)) || n == 0)
		return false;
	want->stop_tokens = realloc(want->stop_tokens, (at + n) * sizeof(int32_t));
	want->stop_lens = realloc(want->stop_lens,
				  (want->n_stop_seqs + 1) * sizeof(uint32_t));
	assert_non_null(want->stop_tokens);
	assert_non_null(want->stop_lens);
	for (size_t j = 0; j < n; j++)
		if (!ref_token(one ? seq : json_array_get(seq, j), l,
			       &want->stop_tokens[at + j]))
			return false;
	want->stop_lens[want->n_stop_seqs++] = (uint32_t)n;
	return true;
}

/*
 * What jansson makes of line, by docs/DESIGN.md 3.1, for the fields the fast
 * path knows.  Returns 1 and fills want (without a matcher) when the line
 * is a valid request made of only id, prompt, max_tokens, include_stop
 * and the four stop fields; 0 otherwise.
 */
static int reference_read(const char *line, size_t len,
			  const struct request_limits *l, struct request *want)
{
	json_t *obj = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY,
				 NULL);
	json_t *id, *prompt, *mt, *inc, *st, *sti, *ss1, *ss;
	size_t fields = 0;
	int ok = 0;

	memset(want, 0, sizeof(*want));
	want->max_tokens = REQUEST_DEFAULT_MAX_TOKENS;
	if (!obj || !json_is_object(obj))
		goto out;
	id = json_object_get(obj, "id");
	prompt = json_object_get(obj, "prompt");
	mt = json_object_get(obj, "max_tokens");
	inc = json_object_get(obj, "include_stop");
	st = json_object_get(obj, "stop_token");
	sti = json_object_get(obj, "stop_token_ids");
	ss1 = json_object_get(obj, "stop_sequence");
	ss = json_object_get(obj, "stop_sequences");
	fields = (id != NULL) + (prompt != NULL) + (mt != NULL) + (inc != NULL) +
		 (st != NULL) + (sti != NULL) + (ss1 != NULL) + (ss != NULL);
	if (json_object_size(obj) != fields || !json_is_array(prompt))
		goto out;
	if (inc) {
		if (!json_is_boolean(inc))
			goto out;
		want->include_stop = json_is_true(inc);
	}
	if (st && !ref_add_seq(st, true, l, want))
		goto out;
	if (sti) {
		if (!json_is_array(sti))
			goto out;
		for (size_t i = 0; i < json_array_size(sti); i++)
			if (!ref_add_seq(json_array_get(sti, i), true, l, want))
				goto out;
	}
	if (ss1 && !ref_add_seq(ss1, false, l, want))
		goto out;
	if (ss) {
		if (!json_is_array(ss))
			goto out;
		for (size_t i = 0; i < json_array_size(ss); i++)
			if (!ref_add_seq(json_array_get(ss, i), false, l, want))
				goto out;
	}
	if (id && !json_is_string(id))
		goto out;
	if (!id && !l->id_optional)
		goto out;
	if (mt) {
		if (!json_is_integer(mt) || json_integer_value(mt) < 0 ||
		    json_integer_value(mt) > l->max_context)
			goto out;
		want->max_tokens = (uint32_t)json_integer_value(mt);
	}
	want->n_prompt = (uint32_t)json_array_size(prompt);
	if ((uint64_t)want->n_prompt + want->max_tokens > l->max_context)
		goto out;
	want->prompt = calloc(want->n_prompt + 1, sizeof(int32_t));
	assert_non_null(want->prompt);
	for (uint32_t i = 0; i < want->n_prompt; i++) {
		json_t *t = json_array_get(prompt, i);

		if (!json_is_integer(t) || json_integer_value(t) < 0 ||
		    json_integer_value(t) >= l->vocab)
			goto out;
		want->prompt[i] = (int32_t)json_integer_value(t);
	}
	if (id) {
		want->id = strndup(json_string_value(id), json_string_length(id));
		assert_non_null(want->id);
	}
	ok = 1;
out:
	json_decref(obj);
	return ok;
}

/* Take line with the fast path; if taken, it must match the reference. */
static int check_line(const char *line, size_t len, const struct request_limits *l)
{
	struct request got, want;
	char *copy = malloc(len ? len : 1);	/* exact size: ASan sees overreads */
	int rc, ref;

	assert_non_null(copy);
	memcpy(copy, line, len);
	memset(&got, 0, sizeof(got));
	rc = request_parse_fast(copy, len, l, &got);
	assert_true(rc == 0 || rc == 1);
	ref = reference_read(line, len, l, &want);
	if (rc == 1) {
		if (!ref)
			fail_msg("fast path took a line jansson rejects: %.*s",
				 (int)len, line);
		assert_int_equal(got.n_prompt, want.n_prompt);
		assert_int_equal(got.max_tokens, want.max_tokens);
		if (got.n_prompt)
			assert_memory_equal(got.prompt, want.prompt,
					    got.n_prompt * sizeof(int32_t));
		if (want.id)
			assert_string_equal(got.id, want.id);
		else
			assert_null(got.id);
		assert_int_equal(got.include_stop, want.include_stop);
		assert_int_equal(got.n_stop_seqs, want.n_stop_seqs);
		if (want.n_stop_seqs) {
			assert_non_null(got.stops);
			assert_memory_equal(got.stop_lens, want.stop_lens,
					    want.n_stop_seqs * sizeof(uint32_t));
			assert_memory_equal(got.stop_tokens, want.stop_tokens,
					    ref_n_tokens(&want) * sizeof(int32_t));
		} else {
			assert_null(got.stops);
		}
	} else {
		/* given up: nothing allocated, nothing written */
		assert_null(got.id);
		assert_null(got.prompt);
		assert_int_equal(got.n_prompt, 0);
		assert_null(got.stops);
		assert_null(got.stop_tokens);
		assert_int_equal(got.n_stop_seqs, 0);
	}
	request_release(&got);
	request_release(&want);
	free(copy);
	return rc;
}

/* Random JSON whitespace, usually none. */
static void put_ws(struct rng *r, char **p)
{
	static const char ws[] = " \t\r\n";

	while (rng_below(r, 4) == 0)
		*(*p)++ = ws[rng_below(r, 4)];
}

/* "key": after optional whitespace. */
static void put_key(struct rng *r, char **p, const char *key)
{
	*p += sprintf(*p, "\"%s\"", key);
	put_ws(r, p);
	*(*p)++ = ':';
	put_ws(r, p);
}

/* An array of n random tokens. */
static void put_tokens(struct rng *r, char **p, uint32_t n,
		       const struct request_limits *l)
{
	*(*p)++ = '[';
	for (uint32_t i = 0; i < n; i++) {
		if (i)
			*(*p)++ = ',';
		put_ws(r, p);
		*p += sprintf(*p, "%u", rng_below(r, l->vocab));
		put_ws(r, p);
	}
	*(*p)++ = ']';
}

enum { F_ID, F_PROMPT, F_MAX_TOKENS, F_INCLUDE_STOP, F_STOP_TOKEN,
       F_STOP_TOKEN_IDS, F_STOP_SEQUENCE, F_STOP_SEQUENCES, F_N };

/*
 * A line of the common shape into buf, fields in random order, each
 * optional one present or not; returns its length.
 */
static size_t common_line(struct rng *r, char *buf, const struct request_limits *l)
{
	uint32_t n_prompt = rng_below(r, 40), max_tokens = rng_below(r, 200);
	bool with[F_N];
	int order[F_N], n_fields = 0;
	char *p = buf;

	for (int i = 0; i < F_N; i++) {
		order[i] = i;
		with[i] = rng_below(r, 3) == 0;	/* the stop fields, mostly */
	}
	with[F_ID] = !l->id_optional || rng_below(r, 2);
	with[F_PROMPT] = true;
	with[F_MAX_TOKENS] = rng_below(r, 3) != 0;
	if (rng_below(r, 2))	/* half the lines: none of the stop fields */
		with[F_INCLUDE_STOP] = with[F_STOP_TOKEN] = with[F_STOP_TOKEN_IDS] =
			with[F_STOP_SEQUENCE] = with[F_STOP_SEQUENCES] = false;
	for (int i = F_N - 1; i > 0; i--) {	/* shuffle the key order */
		int j = (int)rng_below(r, (uint32_t)i + 1), t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	put_ws(r, &p);
	*p++ = '{';
	for (int k = 0; k < F_N; k++) {
		uint32_t n;

		if (!with[order[k]])
			continue;
		if (n_fields++) {
			put_ws(r, &p);
			*p++ = ',';
		}
		put_ws(r, &p);
		switch (order[k]) {
		case F_ID:
			n = rng_below(r, 12);
			put_key(r, &p, "id");
			*p++ = '"';
			for (uint32_t i = 0; i < n; i++) {
				char c = (char)(0x20 + rng_below(r, 0x5f));

				*p++ = (c == '"' || c == '\\') ? 'x' : c;
			}
			*p++ = '"';
			break;
		case F_PROMPT:
			put_key(r, &p, "prompt");
			put_tokens(r, &p, n_prompt, l);
			break;
		case F_MAX_TOKENS:
			put_key(r, &p, "max_tokens");
			p += sprintf(p, "%u", max_tokens);
			break;
		case F_INCLUDE_STOP:
			put_key(r, &p, "include_stop");
			p += sprintf(p, rng_below(r, 2) ? "true" : "false");
			break;
		case F_STOP_TOKEN:
			put_key(r, &p, "stop_token");
			p += sprintf(p, "%u", rng_below(r, l->vocab));
			break;
		case F_STOP_TOKEN_IDS:
			put_key(r, &p, "stop_token_ids");
			put_tokens(r, &p, rng_below(r, 5), l);	/* may be [] */
			break;
		case F_STOP_SEQUENCE:
			put_key(r, &p, "stop_sequence");
			put_tokens(r, &p, 1 + rng_below(r, 5), l);
			break;
		default:	/* F_STOP_SEQUENCES, may be [] */
			put_key(r, &p, "stop_sequences");
			n = rng_below(r, 4);
			*p++ = '[';
			for (uint32_t i = 0; i < n; i++) {
				if (i)
					*p++ = ',';
				put_ws(r, &p);
				put_tokens(r, &p, 1 + rng_below(r, 5), l);
				put_ws(r, &p);
			}
			*p++ = ']';
		}
	}
	put_ws(r, &p);
	*p++ = '}';
	put_ws(r, &p);
	return (size_t)(p - buf);
}

/* Every line of the common shape is taken, and matches jansson's read. */
static void test_common_shape_taken(void **state)
{
	static const struct request_limits lim_http = {
		.vocab = 1000, .max_context = 600, .id_optional = true };
	struct rng r = rng_for(1);
	char buf[4096];

	(void)state;
	for (int i = 0; i < 20000; i++) {
		const struct request_limits *l = (i & 1) ? &lim_http : &lim;
		size_t len = common_line(&r, buf, l);

		if (check_line(buf, len, l) != 1)
			fail_msg("common line given up (seed %llu): %.*s",
				 test_seed, (int)len, buf);
	}
}

#define FITS "{\"id\":\"a\",\"prompt\":[1,2],\"max_tokens\":598}"
#define OVER "{\"id\":\"a\",\"prompt\":[1,2],\"max_tokens\":599}"

/* Shapes the fast path must leave to jansson (valid or not). */
static void test_other_shapes_given_up(void **state)
{
	static const char *const lines[] = {
		"{\"id\":\"a\",\"prompt\":[1],\"stop_token\":null}",
		"{\"id\":\"a\",\"prompt\":[1],\"stop_token\":1000}",
		"{\"id\":\"a\",\"prompt\":[1],\"stop_token\":[3]}",
		"{\"id\":\"a\",\"prompt\":[1],\"stop_token_ids\":[[3]]}",
		"{\"id\":\"a\",\"prompt\":[1],\"stop_sequence\":[]}",
		"{\"id\":\"a\",\"prompt\":[1],\"stop_sequences\":[[]]}",
		"{\"id\":\"a\",\"prompt\":[1],\"stop_sequences\":[[1],[]]}",
		"{\"id\":\"a\",\"prompt\":[1],\"stop_sequences\":[1,2]}",
		"{\"id\":\"a\",\"prompt\":[1],\"stop_sequences\":[[1],]}",
		"{\"id\":\"a\",\"prompt\":[1],\"stop_token\":3,\"stop_token\":4}",
		"{\"id\":\"a\",\"prompt\":[1],\"include_stop\":1}",
		"{\"id\":\"a\",\"prompt\":[1],\"include_stop\":\"true\"}",
		"{\"id\":\"a\",\"prompt\":[1],\"include_stop\":tru}",
		"{\"id\":\"a\",\"prompt\":[1],\"include_stop\":truex}",
		"{\"id\":\"a\",\"prompt\":[1],\"include_stop\":null}",
		"{\"id\":\"a\",\"prompt\":[1],\"temperature\":0}",
		"{\"id\":\"a\",\"prompt\":[1],\"max_tokens\":null}",
		"{\"id\":null,\"prompt\":[1]}",
		"{\"id\":\"a\\u0062\",\"prompt\":[1]}",
		"{\"id\":\"caf\xc3\xa9\",\"prompt\":[1]}",
		"{\"id\":\"a\tb\",\"prompt\":[1]}",
		"{\"i\\u0064\":\"a\",\"prompt\":[1]}",
		"{\"id\":\"a\",\"prompt\":[-0]}",
		"{\"id\":\"a\",\"prompt\":[1.0]}",
		"{\"id\":\"a\",\"prompt\":[1e2]}",
		"{\"id\":\"a\",\"prompt\":[01]}",
		"{\"id\":\"a\",\"prompt\":[12345678901]}",
		"{\"id\":\"a\",\"prompt\":[1000]}",
		"{\"id\":\"a\",\"prompt\":[1,]}",
		"{\"id\":\"a\",\"prompt\":[1],}",
		"{\"id\":\"a\",\"id\":\"b\",\"prompt\":[1]}",
		"{\"id\":\"a\",\"prompt\":[1],\"prompt\":[2]}",
		"{\"id\":\"a\",\"prompt\":[1]} x",
		"{\"id\":\"a\",\"prompt\":[1]}{}",
		"{\"id\":\"a\",\"prompt\":[1],\"max_tokens\":600}",
		"{\"id\":\"a\",\"prompt\":[1],\"max_tokens\":-1}",
		"{\"id\":\"a\",\"prompt\":[1],\"max_tokens\":\"5\"}",
		"{\"prompt\":[1]}",
		"{\"id\":\"a\"}",
		"{\"id\":\"a\",\"prompt\":{}}",
		"{\"id\":\"a\",\"prompt\":[[1]]}",
		"{\"id\":7,\"prompt\":[1]}",
		"[{\"id\":\"a\",\"prompt\":[1]}]",
		"{}",
		"{",
		"\xef\xbb\xbf{\"id\":\"a\",\"prompt\":[1]}",
		"{\"id\":\"a\",\"prompt\":[1]",
		"{\"id\":\"a\" \"prompt\":[1]}",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
		if (check_line(lines[i], strlen(lines[i]), &lim) != 0)
			fail_msg("taken, should be given up: %s", lines[i]);
	/* a NUL byte inside the line */
	assert_int_equal(check_line("{\"id\":\"a\0\",\"prompt\":[1]}",
				    sizeof("{\"id\":\"a\0\",\"prompt\":[1]}") - 1, &lim), 0);
	/* the context limit counts prompt + max_tokens, and prompt alone */
	assert_int_equal(check_line(FITS, strlen(FITS), &lim), 1);
	assert_int_equal(check_line(OVER, strlen(OVER), &lim), 0);
}

/* Mutated good lines: whatever the fast path takes, jansson agrees with. */
static void test_mutations_agree(void **state)
{
	static const char alphabet[] = "{}[],:\"\\ 0123456789-.eE\tnul\x80";
	struct rng r = rng_for(3);
	char buf[4200];
	int taken = 0, given_up = 0;

	(void)state;
	for (int i = 0; i < 40000; i++) {
		size_t len = common_line(&r, buf, &lim);
		uint32_t n = 1 + rng_below(&r, 3);

		for (uint32_t k = 0; k < n && len; k++) {
			size_t at = rng_below(&r, (uint32_t)len);
			char c = alphabet[rng_below(&r, sizeof(alphabet) - 1)];

			switch (rng_below(&r, 3)) {
			case 0:	/* replace */
				buf[at] = c;
				break;
			case 1:	/* insert */
				memmove(buf + at + 1, buf + at, len - at);
				buf[at] = c;
				len++;
				break;
			default: /* delete */
				memmove(buf + at, buf + at + 1, len - at - 1);
				len--;
			}
		}
		if (check_line(buf, len, &lim))
			taken++;
		else
			given_up++;
	}
	/* both outcomes occurred, so the agreement check was exercised */
	assert_true(taken > 100);
	assert_true(given_up > 100);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_common_shape_taken),
		cmocka_unit_test(test_other_shapes_given_up),
		cmocka_unit_test(test_mutations_agree),
	};

	test_seed_init("request_fast");
	return cmocka_run_group_tests_name("request_fast", tests, NULL, NULL);
}
