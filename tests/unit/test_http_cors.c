/*
 * test_http_cors.c - cmocka tests of the CORS decisions
 * (server/http/http_cors.c): which Origin gets which
 * Access-Control-Allow-Origin, what a preflight is, and the headers
 * written (never split by what a client sent).
 *
 * The reference: the lists are split here with strtok on copies, and an
 * origin is allowed iff it equals one name or a name is "*".  Random
 * lists and origins from a small alphabet (so that they meet); the seed
 * is printed and SEED= replays (test_rng.h).
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

#include "server/http/http_cors.h"
#include "util/strbuf.h"
#include "tests/unit/test_rng.h"

static void set(struct strbuf *sb, const char *s)
{
	sb->len = 0;
	assert_int_equal(strbuf_append(sb, s, strlen(s)), 0);
}

/* A random name: "*" now and then, else 1..3 of a, b, c. */
static void rand_name(struct rng *rng, char *out)
{
	size_t n = 1 + rng_below(rng, 3);

	if (rng_below(rng, 12) == 0) {
		strcpy(out, "*");
		return;
	}
	for (size_t i = 0; i < n; i++)
		out[i] = (char)('a' + rng_below(rng, 3));
	out[n] = '\0';
}

static void test_random_origins(void **state)
{
	struct rng rng = rng_for(1);
	struct http_message m = { 0 };

	for (int round = 0; round < 5000; round++) {
		char lists[3][64], origin[8], copy[64], *name, *save;
		const char *v[3];
		struct http_config cfg = { .allowed_origins = v };
		bool want = false, star = false;
		const char *got;
		size_t len = 0;

		cfg.n_allowed_origins = rng_below(&rng, 4);
		for (uint32_t i = 0; i < cfg.n_allowed_origins; i++) {
			uint32_t k = 1 + rng_below(&rng, 3);

			lists[i][0] = '\0';
			for (uint32_t j = 0; j < k; j++) {
				char nm[8];

				rand_name(&rng, nm);
				if (j)
					strcat(lists[i], ",");
				strcat(lists[i], nm);
			}
			v[i] = lists[i];
			strcpy(copy, lists[i]);
			for (name = strtok_r(copy, ",", &save); name;
			     name = strtok_r(NULL, ",", &save))
				star |= !strcmp(name, "*");
		}
		rand_name(&rng, origin);
		/* the reference again, now that the origin is known */
		want = star;
		for (uint32_t i = 0; i < cfg.n_allowed_origins; i++) {
			strcpy(copy, lists[i]);
			for (name = strtok_r(copy, ",", &save); name;
			     name = strtok_r(NULL, ",", &save))
				want |= !strcmp(name, origin);
		}
		set(&m.origin, origin);
		m.cors_seen = rng_below(&rng, 8) ? HTTP_SEEN_ORIGIN : 0;
		want &= m.cors_seen != 0;
		got = cors_allow_origin(&cfg, &m, &len);
		if (!!got != want)
			fail_msg("round %d: origin '%s' lists %u: got %s (SEED=%llu)",
				 round, origin, cfg.n_allowed_origins,
				 got ? "allowed" : "refused", test_seed);
		if (got && !(len == 1 && *got == '*') &&
		    (len != strlen(origin) || memcmp(got, origin, len)))
			fail_msg("round %d: allowed as '%.*s' (SEED=%llu)", round,
				 (int)len, got, test_seed);
	}
	strbuf_release(&m.origin);
}

static void test_preflight(void **state)
{
	const char *v[] = { "http://a.example" };
	struct http_config on = { .allowed_origins = v, .n_allowed_origins = 1 };
	struct http_config off = { 0 };
	struct http_message m = { .method = HTTP_OPTIONS,
				  .cors_seen = HTTP_SEEN_ORIGIN | HTTP_SEEN_ACR_METHOD };
	struct strbuf out = STRBUF_INIT;
	size_t len;

	assert_true(cors_is_preflight(&on, &m));
	assert_false(cors_is_preflight(&off, &m));
	set(&m.origin, "http://a.example");
	assert_null(cors_allow_origin(&off, &m, &len));	/* off: never */
	m.cors_seen = HTTP_SEEN_ORIGIN;
	assert_false(cors_is_preflight(&on, &m));	/* a plain OPTIONS */
	m.cors_seen |= HTTP_SEEN_ACR_METHOD;
	m.method = HTTP_POST;
	assert_false(cors_is_preflight(&on, &m));

	/* requested headers echoed only when they are header names */
	set(&m.acr_headers, "authorization, content-type, x-stainless-os");
	assert_int_equal(cors_put_preflight(&out, &m, "POST"), 0);
	assert_non_null(strstr(out.data, "Access-Control-Allow-Methods: POST\r\n"));
	assert_non_null(strstr(out.data, "Access-Control-Allow-Headers: authorization, "
			       "content-type, x-stainless-os\r\n"));
	out.len = 0;
	set(&m.acr_headers, "x\r\nSet-Cookie: a=b");
	assert_int_equal(cors_put_preflight(&out, &m, "POST"), 0);
	assert_null(strstr(out.data, "Set-Cookie"));
	assert_non_null(strstr(out.data, "Access-Control-Allow-Headers: Authorization, "
			       "Content-Type\r\n"));
	out.len = 0;
	assert_int_equal(cors_put_headers(&out, NULL, 0), 0);
	assert_int_equal(out.len, 0);
	assert_int_equal(cors_put_headers(&out, "*", 1), 0);
	assert_string_equal(out.data, "Access-Control-Allow-Origin: *\r\nVary: Origin\r\n");
	strbuf_release(&out);
	strbuf_release(&m.origin);
	strbuf_release(&m.acr_headers);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_origins),
		cmocka_unit_test(test_preflight),
	};

	test_seed_init("http_cors");
	return cmocka_run_group_tests_name("http_cors", tests, NULL, NULL);
}
