/*
 * test_stats.c - the latency histogram's quantiles against the exact
 * quantile of the same samples (sorted), for random samples spread over
 * nanoseconds to minutes: the reported value (its bucket's top) is never
 * below the exact one and at most 1/64 above it.  Randomized: the seed is
 * printed, SEED= replays it.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <unistd.h>

#include "engine/stats.h"
#include "tests/unit/test_rng.h"

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* reported is the top of exact's bucket: exact <= reported <= exact * 65/64 */
static void assert_close_above(uint64_t reported, uint64_t exact)
{
	if (reported < exact || reported - exact > exact / 64)
		fail_msg("quantile %llu for exact %llu (seed %llu)",
			 (unsigned long long)reported, (unsigned long long)exact,
			 test_seed);
}

static void test_empty_is_zero(void **state)
{
	struct engine_stats *s = calloc(1, sizeof(*s));

	(void)state;
	assert_non_null(s);
	assert_int_equal(stats_latency_quantile(s, 0.5), 0);
	assert_int_equal(stats_latency_quantile(s, 0.99), 0);
	free(s);
}

/* One sample at a time, over every bucket edge up to 2^40 ns. */
static void test_single_samples(void **state)
{
	struct engine_stats *s = calloc(1, sizeof(*s));

	(void)state;
	assert_non_null(s);
	for (uint64_t v = 0; v < 5000; v++) {
		memset(s, 0, sizeof(*s));
		stats_record_latency(s, v);
		assert_close_above(stats_latency_quantile(s, 0.5), v);
	}
	for (unsigned k = 6; k < 40; k++) {
		for (int d = -2; d <= 2; d++) {
			uint64_t v = (1ull << k) + (uint64_t)(int64_t)d;

			memset(s, 0, sizeof(*s));
			stats_record_latency(s, v);
			assert_close_above(stats_latency_quantile(s, 1.0), v);
		}
	}
	free(s);
}

/* Random samples, log-uniform from 1 ns to 2^40 ns: p50, p90, p99, max. */
static void test_random_quantiles(void **state)
{
	static const double qs[] = { 0.01, 0.5, 0.9, 0.99, 1.0 };
	struct engine_stats *s = calloc(1, sizeof(*s));
	struct rng r = rng_for(1);
	uint64_t *v = malloc(20000 * sizeof(*v));

	(void)state;
	assert_non_null(s);
	assert_non_null(v);
	for (int round = 0; round < 50; round++) {
		uint32_t n = 1 + rng_below(&r, 20000);
		unsigned span = 1 + rng_below(&r, 39);

		memset(s, 0, sizeof(*s));
		for (uint32_t i = 0; i < n; i++) {
			unsigned lg = rng_below(&r, span + 1);

			v[i] = (1ull << lg) + rng_next(&r) % (1ull << lg);
			stats_record_latency(s, v[i]);
		}
		qsort(v, n, sizeof(*v), cmp_u64);
		for (size_t k = 0; k < sizeof(qs) / sizeof(qs[0]); k++) {
			uint64_t want = (uint64_t)ceil(qs[k] * (double)n);

			if (want < 1)
				want = 1;
			assert_close_above(stats_latency_quantile(s, qs[k]), v[want - 1]);
		}
	}
	free(v);
	free(s);
}

/* The rejection counters reach the --stats JSON and the summary apart:
 * invalid results as stale, obsolete run-ahead rows as discarded. */
static void test_rejection_counters_reported(void **state)
{
	struct engine_stats *s = calloc(1, sizeof(*s));
	char path[] = "/tmp/test_stats.XXXXXX", line[1024] = "";
	json_error_t err;
	json_t *root;
	FILE *f;
	int fd = mkstemp(path);

	(void)state;
	assert_non_null(s);
	assert_true(fd >= 0);
	close(fd);
	s->n_stale = 3;
	s->n_discarded = 744;
	s->n_fruitless_kills = 2;
	s->end_ns = 1000000000;
	assert_int_equal(stats_write_json(s, path), 0);
	root = json_load_file(path, 0, &err);
	assert_non_null(root);
	assert_int_equal(json_integer_value(json_object_get(root, "stale_results_rejected")), 3);
	assert_int_equal(json_integer_value(json_object_get(root, "runahead_rows_discarded")), 744);
	assert_int_equal(json_integer_value(json_object_get(root, "fruitless_kills")), 2);
	json_decref(root);
	f = fopen(path, "w+");
	assert_non_null(f);
	stats_print_summary(s, f);
	rewind(f);
	assert_non_null(fgets(line, sizeof(line), f));
	/* the rate says what time it is over */
	assert_non_null(strstr(line, " s of uptime = "));
	assert_non_null(strstr(line, "tokens/s over uptime"));
	assert_non_null(fgets(line, sizeof(line), f));
	assert_non_null(strstr(line, ", 3 stale results rejected, 744 run-ahead rows discarded, "));
	/* errors: the summary says where their reasons are */
	s->n_finished[FINISH_ERROR] = 7;
	rewind(f);
	stats_print_summary(s, f);
	fflush(f);
	rewind(f);
	while (fgets(line, sizeof(line), f) && !strstr(line, "ended in error"))
		;
	assert_non_null(strstr(line, "7 requests ended in error: each one's result "
			       "says why in its \"error\" field"));
	fclose(f);
	unlink(path);
	free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rejection_counters_reported),
		cmocka_unit_test(test_empty_is_zero),
		cmocka_unit_test(test_single_samples),
		cmocka_unit_test(test_random_quantiles),
	};

	test_seed_init("stats");
	return cmocka_run_group_tests_name("stats", tests, NULL, NULL);
}
