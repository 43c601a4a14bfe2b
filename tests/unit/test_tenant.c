/*
 * test_tenant.c - cmocka tests of the tenant limits
 * (server/http/token_bucket.c, server/http/tenant_table.c): the tenants
 * file's strict parsing, key lookup, and the bucket's guarantee as a
 * property on a simulated clock.
 *
 * The reference: a naive bucket written here from the definition (a
 * long double level, refilled by rate x elapsed / 60 s and cut at the
 * burst).  Random admissions, completions, cancellations and
 * disconnects (each a refund of reserved - used, used in [0, reserved]
 * or beyond) are interleaved on a clock that jumps by random amounts;
 * every decision must match the reference (to within a millionth of a
 * token, where the two roundings may differ), and over EVERY window
 * between two events, tokens admitted minus tokens refunded (as this
 * test computes the refund) <= rate x window + burst.  The seed is
 * printed and SEED= replays (test_rng.h).
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

#include "server/http/tenant_table.h"
#include "server/http/token_bucket.h"
#include "tests/unit/test_rng.h"

static struct tenant_table *parse(const char *s, char *err, size_t errlen)
{
	return tenant_table_parse(s, strlen(s), "t.json", 0, err, errlen);
}

/* ------------------------------------------------------------------------
 * The file
 * ---------------------------------------------------------------------- */

static void test_parse_good(void **state)
{
	char err[256];
	struct tenant_table *t = parse("{\"tenants\": [{\"name\": \"a\", "
		"\"api_keys\": [\"ka\", \"ka2\"], \"tokens_per_minute\": 60000, "
		"\"burst_tokens\": 8000, \"requests_per_minute\": 600, "
		"\"max_concurrent\": 8}, {\"name\": \"b\", \"api_keys\": [\"kb\"], "
		"\"tokens_per_minute\": 10, \"burst_tokens\": 5}]}", err, sizeof(err));

	(void)state;
	assert_non_null(t);
	assert_int_equal(t->n_tenants, 2);
	assert_string_equal(t->tenants[0].name, "a");
	assert_int_equal(t->tenants[0].burst_tokens, 8000);
	assert_int_equal(t->tenants[0].max_concurrent, 8);
	assert_int_equal(t->tenants[1].requests_per_minute, 0);
	assert_ptr_equal(tenant_table_find(t, "ka2", 3), &t->tenants[0]);
	assert_ptr_equal(tenant_table_find(t, "kb", 2), &t->tenants[1]);
	assert_null(tenant_table_find(t, "k", 1));
	assert_null(tenant_table_find(t, "kaa", 3));
	assert_null(tenant_table_find(t, "", 0));
	tenant_table_destroy(t);
}

/* Each bad file fails with an error naming the file and the thing. */
static void test_parse_bad(void **state)
{
	static const struct { const char *json, *says; } bad[] = {
		{ "", "t.json" },
		{ "[]", "must be an object" },
		{ "{\"tenants\": [], \"x\": 1}", "unknown key \"x\"" },
		{ "{\"tenants\": []}", "1 to" },
		{ "{\"tenants\": [{\"name\": \"a\", \"api_keys\": [\"k\"], "
		  "\"tokens_per_minute\": 1, \"burst_tokens\": 1, \"bogus\": 2}]}",
		  "unknown key \"bogus\"" },
		{ "{\"tenants\": [{\"name\": \"a\", \"api_keys\": [\"k\"], "
		  "\"tokens_per_minute\": 1, \"burst_tokens\": 1}, {\"name\": \"a\", "
		  "\"api_keys\": [\"j\"], \"tokens_per_minute\": 1, \"burst_tokens\": 1}]}",
		  "name 'a' is given twice" },
		{ "{\"tenants\": [{\"name\": \"a\", \"api_keys\": [\"k\"], "
		  "\"tokens_per_minute\": 1, \"burst_tokens\": 1}, {\"name\": \"b\", "
		  "\"api_keys\": [\"k\"], \"tokens_per_minute\": 1, \"burst_tokens\": 1}]}",
		  "tenant 'b' is also one of tenant 'a'" },
		{ "{\"tenants\": [{\"name\": \"a\", \"api_keys\": [\"k\", \"k\"], "
		  "\"tokens_per_minute\": 1, \"burst_tokens\": 1}]}",
		  "tenant 'a' is also one of tenant 'a'" },
		{ "{\"tenants\": [{\"name\": \"a\", \"api_keys\": [\"k\"], "
		  "\"tokens_per_minute\": 0, \"burst_tokens\": 1}]}",
		  "\"tokens_per_minute\" must be an integer in [1, 100000000]" },
		{ "{\"tenants\": [{\"name\": \"a\", \"api_keys\": [\"k\"], "
		  "\"tokens_per_minute\": 1, \"burst_tokens\": 1.5}]}",
		  "\"burst_tokens\" must be" },
		{ "{\"tenants\": [{\"name\": \"a\", \"api_keys\": [\"k\"], "
		  "\"tokens_per_minute\": 1}]}", "\"burst_tokens\" is missing" },
		{ "{\"tenants\": [{\"name\": \"a\", \"api_keys\": [\"k\"], "
		  "\"tokens_per_minute\": 1, \"burst_tokens\": 1, "
		  "\"max_concurrent\": -1}]}", "\"max_concurrent\" must be" },
		{ "{\"tenants\": [{\"name\": \"a b\", \"api_keys\": [\"k\"], "
		  "\"tokens_per_minute\": 1, \"burst_tokens\": 1}]}", "\"name\" must be" },
		{ "{\"tenants\": [{\"name\": \"a\", \"api_keys\": [\"k y\"], "
		  "\"tokens_per_minute\": 1, \"burst_tokens\": 1}]}", "api_keys[0]" },
		{ "{\"tenants\": [{\"name\": \"a\", \"api_keys\": [], "
		  "\"tokens_per_minute\": 1, \"burst_tokens\": 1}]}", "\"api_keys\" must" },
		{ "{\"tenants\": [{\"name\": \"a\", \"name\": \"b\"}]}", "duplicate" },
	};
	char err[256];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		assert_null(parse(bad[i].json, err, sizeof(err)));
		if (!strstr(err, bad[i].says) || strncmp(err, "t.json", 6)) {
			printf("case %zu: error '%s' lacks '%s'\n", i, err, bad[i].says);
			fail();
		}
	}
}

/* Random bytes: never a crash, an error or a table. */
static void test_parse_random(void **state)
{
	struct rng rng = rng_for(3);
	char buf[64], err[256];

	(void)state;
	for (int i = 0; i < 2000; i++) {
		size_t n = rng_below(&rng, sizeof(buf));
		struct tenant_table *t;

		for (size_t j = 0; j < n; j++)
			buf[j] = "{}[]\",:0a \\"[rng_below(&rng, 11)];
		t = tenant_table_parse(buf, n, "t.json", 0, err, sizeof(err));
		tenant_table_destroy(t);
	}
}

/* ------------------------------------------------------------------------
 * The property, against a naive bucket
 * ---------------------------------------------------------------------- */

struct ref_bucket {
	long double level, rate, burst;	/* tokens; tokens a minute */
	uint64_t last_ns;
};

static void ref_refill(struct ref_bucket *r, uint64_t now_ns)
{
	r->level += r->rate * (long double)(now_ns - r->last_ns) / 60e9L;
	if (r->level > r->burst)
		r->level = r->burst;
	r->last_ns = now_ns;
}

struct event {
	uint64_t t_ns;
	int64_t tokens;			/* + admitted, - refunded */
};

struct live {
	uint64_t reserved;
};

#define N_STEPS 3000

static void run_property(uint64_t id, uint64_t rate, uint64_t burst)
{
	struct rng rng = rng_for(id);
	struct tenant_table *tt;
	struct tenant *t;
	struct ref_bucket ref = { burst, rate, burst, 0 };
	static struct event ev[N_STEPS];
	static struct live live[N_STEPS];
	uint32_t n_ev = 0, n_live = 0;
	uint64_t now = 0, sum_reserved = 0, sum_back = 0;
	char json[256], err[256];

	snprintf(json, sizeof(json), "{\"tenants\": [{\"name\": \"p\", \"api_keys\": "
		 "[\"k\"], \"tokens_per_minute\": %llu, \"burst_tokens\": %llu}]}",
		 (unsigned long long)rate, (unsigned long long)burst);
	tt = parse(json, err, sizeof(err));
	assert_non_null(tt);
	t = &tt->tenants[0];
	for (int s = 0; s < N_STEPS; s++) {
		uint32_t what = rng_below(&rng, 10);

		/* mostly short steps, now and then a long idle */
		now += rng_below(&rng, 20) ? rng_next(&rng) % (60000000000ull / rate * 4 + 1) :
		       rng_next(&rng) % 120000000000ull;
		ref_refill(&ref, now);
		if (what < 6 || !n_live) {	/* a request arrives */
			uint64_t want = 1 + rng_next(&rng) % (burst + burst / 4 + 1);
			enum tenant_verdict v = tenant_admit(t, want, now);
			bool fits = ref.level >= (long double)want;
			bool near = ref.level - (long double)want < 1e-6L &&
				    (long double)want - ref.level < 1e-6L;

			if (want > burst) {
				assert_int_equal(v, TENANT_NEVER_FITS);
				continue;
			}
			if (!near && fits != (v == TENANT_OK)) {
				printf("step %d: %llu wanted, reference holds %.6Lf, "
				       "bucket says %d\n", s, (unsigned long long)want,
				       ref.level, v);
				fail();
			}
			if (v != TENANT_OK) {
				assert_int_equal(v, TENANT_TOKENS);
				continue;
			}
			ref.level -= (long double)want;
			live[n_live++].reserved = want;
			ev[n_ev++] = (struct event){ now, (int64_t)want };
			sum_reserved += want;
		} else {		/* one ends: done, cancelled, gone */
			uint32_t i = rng_below(&rng, n_live);
			uint64_t r = live[i].reserved;
			/* a disconnect may report nothing used; a buggy
			 * counter more than reserved */
			uint64_t used = rng_below(&rng, 8) ? rng_next(&rng) % (r + 1) :
					rng_below(&rng, 2) ? 0 : r + 1 + rng_below(&rng, 50);
			uint64_t back = used < r ? r - used : 0;

			tenant_release(t, r, used, now);
			ref.level += (long double)back;
			if (ref.level > ref.burst)
				ref.level = ref.burst;
			live[i] = live[--n_live];
			ev[n_ev++] = (struct event){ now, -(int64_t)back };
			sum_back += back;
		}
	}
	/* the bucket never holds more than its burst, and agrees with the
	 * reference at the end */
	assert_true(token_bucket_available(&t->tokens, now) <= burst);
	assert_true(t->tokens_refunded <= t->tokens_reserved);
	assert_int_equal(t->tokens_reserved, sum_reserved);
	assert_int_equal(t->tokens_refunded, sum_back);
	if (getenv("TENANT_VERBOSE"))
		printf("rate %llu burst %llu: %u events, %llu reserved, %llu back\n",
		       (unsigned long long)rate, (unsigned long long)burst, n_ev,
		       (unsigned long long)sum_reserved, (unsigned long long)sum_back);
	/* every window [ev[i].t, ev[j].t] */
	for (uint32_t i = 0; i < n_ev; i++) {
		int64_t net = 0;

		for (uint32_t j = i; j < n_ev; j++) {
			long double bound;

			net += ev[j].tokens;
			bound = (long double)rate * (long double)(ev[j].t_ns - ev[i].t_ns) /
				60e9L + (long double)burst + 1e-6L;
			if ((long double)net > bound) {
				printf("window %llu..%llu ns: %lld net tokens admitted, "
				       "bound %.3Lf\n", (unsigned long long)ev[i].t_ns,
				       (unsigned long long)ev[j].t_ns, (long long)net, bound);
				fail();
			}
		}
	}
	tenant_table_destroy(tt);
}

static void test_property(void **state)
{
	struct rng rng = rng_for(7);

	(void)state;
	run_property(100, 60000, 8000);
	run_property(101, 7, 3);
	run_property(102, TOKEN_BUCKET_MAX, TOKEN_BUCKET_MAX);
	for (uint64_t k = 0; k < 6; k++)
		run_property(200 + k, 1 + rng_next(&rng) % 1000000,
			     1 + rng_next(&rng) % 100000);
}

/* ------------------------------------------------------------------------
 * Requests, concurrency, the status a 429 reports
 * ---------------------------------------------------------------------- */

static void test_limits_and_status(void **state)
{
	char err[256];
	struct tenant_table *tt = parse("{\"tenants\": [{\"name\": \"a\", "
		"\"api_keys\": [\"k\"], \"tokens_per_minute\": 600, "
		"\"burst_tokens\": 100, \"requests_per_minute\": 2, "
		"\"max_concurrent\": 1}]}", err, sizeof(err));
	struct tenant *t;
	struct tenant_status st;

	(void)state;
	assert_non_null(tt);
	t = &tt->tenants[0];
	assert_int_equal(tenant_admit(t, 101, 0), TENANT_NEVER_FITS);
	assert_int_equal(tenant_admit(t, 60, 0), TENANT_OK);
	assert_int_equal(tenant_admit(t, 10, 0), TENANT_CONCURRENCY);
	tenant_release(t, 60, 20, 0);		/* 40 back: 80 there */
	tenant_status(t, 90, 0, &st);
	assert_int_equal(st.remaining_tokens, 80);
	assert_int_equal(st.limit_tokens, 600);
	assert_int_equal(st.remaining_requests, 1);
	/* 10 tokens at 600 a minute: one second */
	assert_int_equal(st.retry_after_ns, 1000000000ull);
	assert_int_equal(st.reset_tokens_ns, 2000000000ull);
	/* 1 request at 2 a minute: 30 s until full */
	assert_int_equal(st.reset_requests_ns, 30000000000ull);
	assert_int_equal(tenant_admit(t, 90, 0), TENANT_TOKENS);
	assert_int_equal(tenant_admit(t, 90, st.retry_after_ns), TENANT_OK);
	tenant_release(t, 90, 0, st.retry_after_ns);
	/* the requests bucket is spent now */
	assert_int_equal(tenant_admit(t, 1, st.retry_after_ns), TENANT_REQUESTS);
	tenant_status(t, 1, st.retry_after_ns, &st);
	assert_true(st.retry_after_ns > 0 && st.retry_after_ns <= 30000000000ull);
	assert_int_equal(t->n_inflight, 0);
	assert_int_equal(t->n_refused[TENANT_TOKENS], 1);
	assert_int_equal(t->n_refused[TENANT_REQUESTS], 1);
	assert_int_equal(t->n_refused[TENANT_NEVER_FITS], 1);
	assert_int_equal(t->n_refused[TENANT_CONCURRENCY], 1);
	tenant_table_destroy(tt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_good),
		cmocka_unit_test(test_parse_bad),
		cmocka_unit_test(test_parse_random),
		cmocka_unit_test(test_property),
		cmocka_unit_test(test_limits_and_status),
	};

	test_seed_init("tenant");
	return cmocka_run_group_tests_name("tenant", tests, NULL, NULL);
}
