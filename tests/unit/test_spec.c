/*
 * test_spec.c - speculation's proposer and pacing (lib/spec/).
 *
 * The proposer is checked against a naive one written here from its
 * definition (every suffix length from longest, every earlier start from
 * the latest, compared token by token) on random token strings over small
 * alphabets, so suffixes recur often.  The pacing is checked for its
 * promises: never more than the most, a full acceptance grows, a miss cuts
 * to what was taken, and a row whose guesses always fail guesses on few
 * steps.  The runner's exact acceptance is shown end to end, against
 * --speculate off, by tests/e2e/e2e_spec.sh.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdint.h>
#include <string.h>

#include "spec/spec.h"
#include "test_rng.h"

/* The definition, naively. */
static uint32_t naive_propose(const int32_t *t, uint32_t n, uint32_t gmin,
			      uint32_t gmax, uint32_t max_out, int32_t *out)
{
	for (uint32_t g = gmax; g >= gmin && g >= 1; g--) {
		if (g >= n)
			continue;
		for (int64_t i = (int64_t)n - g - 1; i >= 0; i--) {
			uint32_t k = 0, same = 1;

			for (uint32_t x = 0; x < g; x++)
				if (t[i + x] != t[n - g + x])
					same = 0;
			if (!same)
				continue;
			/* the text as if it went on repeating from the match:
			 * t, then t[i + g ..] read on past the end */
			int32_t ext[300 + SPEC_MAX_DRAFT];

			memcpy(ext, t, n * sizeof(*t));
			for (uint32_t j = n; j < n + max_out; j++)
				ext[j] = ext[j - (n - ((uint32_t)i + g))];
			for (uint32_t j = (uint32_t)i + g; k < max_out; j++)
				out[k++] = ext[j];
			return k;
		}
	}
	return 0;
}

static void test_ngram_vs_naive(void **state)
{
	struct rng r = rng_for(1);
	int32_t t[300], a[SPEC_MAX_DRAFT], b[SPEC_MAX_DRAFT];
	uint32_t hits = 0;

	(void)state;
	for (int iter = 0; iter < 20000; iter++) {
		uint32_t n = rng_below(&r, 300), alpha = 1 + rng_below(&r, 12);
		uint32_t gmin = 1 + rng_below(&r, 3), gmax = gmin + rng_below(&r, 4);
		uint32_t k = 1 + rng_below(&r, SPEC_MAX_DRAFT), na, nb;

		for (uint32_t i = 0; i < n; i++)
			t[i] = (int32_t)rng_below(&r, alpha);
		memset(a, 0x55, sizeof(a));
		memset(b, 0x55, sizeof(b));
		na = spec_ngram_propose(t, n, gmin, gmax, k, a);
		nb = naive_propose(t, n, gmin, gmax, k, b);
		assert_int_equal(na, nb);
		assert_memory_equal(a, b, sizeof(a));	/* nothing past them */
		hits += na > 0;
	}
	assert_true(hits > 1000);	/* the cases that matter ran */
}

static void test_ngram_edges(void **state)
{
	int32_t t[] = { 7, 8, 9, 7, 8 }, out[SPEC_MAX_DRAFT];

	(void)state;
	assert_int_equal(spec_ngram_propose(t, 0, 1, 3, 4, out), 0);
	assert_int_equal(spec_ngram_propose(t, 1, 1, 3, 4, out), 0);
	/* "7 8" recurs at 0: what followed it, then on with its period 3 */
	assert_int_equal(spec_ngram_propose(t, 5, 1, 3, 4, out), 4);
	assert_int_equal(out[0], 9);
	assert_int_equal(out[1], 7);
	assert_int_equal(out[2], 8);
	assert_int_equal(out[3], 9);
	assert_int_equal(spec_ngram_propose(t, 5, 1, 3, 1, out), 1);
	/* no suffix of length 3 recurs, and 1..2 are not tried */
	assert_int_equal(spec_ngram_propose(t, 5, 3, 3, 4, out), 0);
}

static void test_ngram_run(void **state)
{
	int32_t t[] = { 3, 5, 5, 5 }, out[SPEC_MAX_DRAFT];

	(void)state;
	/* a run of one token guesses more of the run */
	assert_int_equal(spec_ngram_propose(t, 4, 1, 3, 6, out), 6);
	for (int j = 0; j < 6; j++)
		assert_int_equal(out[j], 5);
}

static void test_pace(void **state)
{
	struct rng r = rng_for(2);
	struct spec_pace p = { 0 };
	uint32_t guessing = 0;

	(void)state;
	assert_int_equal(spec_pace_allow(&p, 4), 4);	/* a new row: all */
	spec_pace_update(&p, 4, 4, 4);
	assert_int_equal(spec_pace_allow(&p, 4), 4);	/* never past */
	spec_pace_update(&p, 4, 4, 2);
	assert_int_equal(spec_pace_allow(&p, 4), 2);	/* cut to taken */
	spec_pace_update(&p, 4, 2, 2);
	assert_int_equal(spec_pace_allow(&p, 4), 4);	/* doubled */
	/* guesses that always fail: few steps guess at all */
	for (int step = 0; step < 1000; step++) {
		uint32_t k = spec_pace_allow(&p, 4);

		assert_true(k <= 4);
		guessing += k > 0;
		spec_pace_update(&p, 4, k, 0);
	}
	assert_true(guessing < 60);
	/* random outcomes: the allowance stays in range */
	for (int step = 0; step < 10000; step++) {
		uint32_t k = spec_pace_allow(&p, 8);

		assert_true(k <= 8);
		spec_pace_update(&p, 8, k, k ? rng_below(&r, k + 1) : 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ngram_vs_naive),
		cmocka_unit_test(test_ngram_edges),
		cmocka_unit_test(test_ngram_run),
		cmocka_unit_test(test_pace),
	};

	test_seed_init("spec");
	return cmocka_run_group_tests_name("spec", tests, NULL, NULL);
}
