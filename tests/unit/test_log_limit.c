/*
 * test_log_limit.c - the log rate limiter against its promise, for random
 * bursts of messages at random times: every message is either logged or
 * counted in the next logged one (nothing lost, nothing counted twice);
 * the first LOG_LIMIT_BURST pass; after them no two pass less than a
 * period apart; and a message a period or more after the last one that
 * passed always passes (a noisy kind still says something every second).
 * Randomized: the seed is printed, SEED= replays it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util/log_limit.h"
#include "tests/unit/test_rng.h"

static void test_burst_then_one_per_period(void **state)
{
	struct log_limit l;
	uint64_t held = 99;

	(void)state;
	memset(&l, 0, sizeof(l));
	for (unsigned i = 0; i < LOG_LIMIT_BURST; i++) {
		assert_true(log_limit_pass(&l, 1000 + i, &held));
		assert_int_equal(held, 0);
	}
	for (unsigned i = 0; i < 1000; i++)
		assert_false(log_limit_pass(&l, 2000 + i, &held));
	assert_true(log_limit_pass(&l, 1000 + LOG_LIMIT_BURST - 1 + LOG_LIMIT_PERIOD_NS, &held));
	assert_int_equal(held, 1000);
}

static void test_random_streams(void **state)
{
	struct rng r = rng_for(1);

	(void)state;
	for (int round = 0; round < 200; round++) {
		struct log_limit l;
		uint64_t now = rng_next(&r) % (1ull << 40), last_pass = 0;
		uint64_t n_msgs = 0, n_passed = 0, n_reported = 0, n_pending = 0;
		uint32_t n = 1 + rng_below(&r, 5000);
		/* mean gap: from a flood (ns apart) to a trickle (seconds) */
		uint64_t gap = 1ull << rng_below(&r, 32);

		memset(&l, 0, sizeof(l));
		for (uint32_t i = 0; i < n; i++) {
			uint64_t held = 0;
			bool passed;

			now += rng_next(&r) % (2 * gap + 1);
			passed = log_limit_pass(&l, now, &held);
			n_msgs++;
			if (n_passed < LOG_LIMIT_BURST)
				assert_true(passed);
			else if (now - last_pass >= LOG_LIMIT_PERIOD_NS)
				assert_true(passed);
			else
				assert_false(passed);
			if (!passed) {
				n_pending++;
				continue;
			}
			if (held != n_pending)
				fail_msg("reported %llu held, %llu were (seed %llu)",
					 (unsigned long long)held,
					 (unsigned long long)n_pending, test_seed);
			n_reported += held;
			n_pending = 0;
			n_passed++;
			last_pass = now;
		}
		assert_int_equal(n_passed + n_reported + n_pending, n_msgs);
		assert_int_equal(l.n_held, n_pending);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_burst_then_one_per_period),
		cmocka_unit_test(test_random_streams),
	};

	test_seed_init("log_limit");
	return cmocka_run_group_tests_name("log_limit", tests, NULL, NULL);
}
