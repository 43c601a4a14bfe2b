/*
 * test_stop_matcher.c - the stop-sequence automaton against hand-worked
 * cases and, on random sequence sets and token streams, against a naive
 * reference: after every token, the longest stop sequence that is a suffix
 * of the stream so far, by direct comparison (docs/DESIGN.md 3.3).
 *
 * The random tests print their seed; SEED=<n> replays a run.  Each test
 * derives its own generator from the seed, so one test replays the same
 * whatever runs before it.
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
#include <unistd.h>

#include <cmocka.h>

#include "text/stop_matcher.h"
#include "tests/unit/test_rng.h"

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * Build from a flat list: lens[i] tokens per sequence, concatenated in
 * flat.  Asserts success and a sound automaton.
 */
static struct stop_matcher *build(const int32_t *flat, const uint32_t *lens,
				  uint32_t n_seqs)
{
	const int32_t **seqs = calloc(n_seqs ? n_seqs : 1, sizeof(*seqs));
	struct stop_matcher *sm;
	size_t off = 0;

	assert_non_null(seqs);
	for (uint32_t i = 0; i < n_seqs; i++) {
		seqs[i] = flat + off;
		off += lens[i];
	}
	sm = stop_matcher_create(seqs, lens, n_seqs);
	free(seqs);
	assert_non_null(sm);
	assert_int_equal(stop_matcher_check(sm), 0);
	return sm;
}

/* Feed n tokens from the root; expect[i] is the match after tokens[i]. */
static void expect_stream(const struct stop_matcher *sm, const int32_t *tokens,
			  const uint32_t *expect, size_t n)
{
	uint32_t state = STOP_MATCHER_ROOT;

	for (size_t i = 0; i < n; i++) {
		uint32_t got = UINT32_MAX;

		state = stop_matcher_feed(sm, state, tokens[i], &got);
		if (got != expect[i]) {
			print_error("token %zu (%" PRId32 "): match_len %u, "
				    "expected %u\n", i, tokens[i], got,
				    expect[i]);
			fail();
		}
	}
}

/*
 * Naive reference: the longest of the n_seqs sequences (flat/lens as in
 * build()) that is a suffix of stream[0..n).
 */
static uint32_t naive_match(const int32_t *flat, const uint32_t *lens,
			    uint32_t n_seqs, const int32_t *stream, size_t n)
{
	uint32_t best = 0;
	size_t off = 0;

	for (uint32_t i = 0; i < n_seqs; off += lens[i], i++) {
		const int32_t *seq = flat + off;
		uint32_t len = lens[i];
		uint32_t j;

		if (len > n || len <= best)
			continue;
		for (j = len; j > 0; j--)
			if (seq[j - 1] != stream[n - len + j - 1])
				break;
		if (j == 0)
			best = len;
	}
	return best;
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------ */
/* Hand-worked cases                                                   */
/* ------------------------------------------------------------------ */

static void test_single_token(void **unused)
{
	static const int32_t seqs[] = { 7 };
	static const uint32_t lens[] = { 1 };
	static const int32_t in[] = { 1, 7, 7, 3, 0, 7 };
	static const uint32_t want[] = { 0, 1, 1, 0, 0, 1 };
	struct stop_matcher *sm = build(seqs, lens, N_OF(lens));

	assert_int_equal(stop_matcher_max_len(sm), 1);
	expect_stream(sm, in, want, N_OF(in));
	stop_matcher_destroy(sm);
}

static void test_overlapping(void **unused)
{
	static const int32_t seqs[] = { 1, 2, 3, /**/ 2, 3 };
	static const uint32_t lens[] = { 3, 2 };
	static const int32_t in1[] = { 1, 2, 3 };
	static const uint32_t want1[] = { 0, 0, 3 };
	static const int32_t in2[] = { 2, 3 };
	static const uint32_t want2[] = { 0, 2 };
	static const int32_t in3[] = { 1, 2, 2, 3, 1, 1, 2, 3, 3 };
	static const uint32_t want3[] = { 0, 0, 0, 2, 0, 0, 0, 3, 0 };
	struct stop_matcher *sm = build(seqs, lens, N_OF(lens));

	assert_int_equal(stop_matcher_max_len(sm), 3);
	expect_stream(sm, in1, want1, N_OF(in1));
	expect_stream(sm, in2, want2, N_OF(in2));
	expect_stream(sm, in3, want3, N_OF(in3));
	stop_matcher_destroy(sm);
}

/* Several sequences end at the same token: the longest is reported. */
static void test_longest_at_same_token(void **unused)
{
	static const int32_t seqs[] = { 3, /**/ 9, 1, 2, 3, /**/ 2, 3,
					/**/ 1, 2, 3 };
	static const uint32_t lens[] = { 1, 4, 2, 3 };
	static const int32_t in1[] = { 1, 2, 3 };
	static const uint32_t want1[] = { 0, 0, 3 };
	static const int32_t in2[] = { 9, 1, 2, 3 };
	static const uint32_t want2[] = { 0, 0, 0, 4 };
	static const int32_t in3[] = { 5, 2, 3, 3, 8, 1, 3 };
	static const uint32_t want3[] = { 0, 0, 2, 1, 0, 0, 1 };
	struct stop_matcher *sm = build(seqs, lens, N_OF(lens));

	assert_int_equal(stop_matcher_max_len(sm), 4);
	expect_stream(sm, in1, want1, N_OF(in1));
	expect_stream(sm, in2, want2, N_OF(in2));
	expect_stream(sm, in3, want3, N_OF(in3));
	stop_matcher_destroy(sm);
}

/* One sequence is a prefix of another; another sits inside it. */
static void test_prefix_of_another(void **unused)
{
	static const int32_t seqs[] = { 1, 2, 3, 4, /**/ 1, 2, /**/ 2, 3 };
	static const uint32_t lens[] = { 4, 2, 2 };
	static const int32_t in1[] = { 1, 2, 3, 4 };
	static const uint32_t want1[] = { 0, 2, 2, 4 };
	static const int32_t in2[] = { 1, 2, 3, 5, 1, 2, 1, 2, 3, 4, 4 };
	static const uint32_t want2[] = { 0, 2, 2, 0, 0, 2, 0, 2, 2, 4, 0 };
	struct stop_matcher *sm = build(seqs, lens, N_OF(lens));

	assert_int_equal(stop_matcher_max_len(sm), 4);
	expect_stream(sm, in1, want1, N_OF(in1));
	expect_stream(sm, in2, want2, N_OF(in2));
	stop_matcher_destroy(sm);
}

static void test_repeated_tokens(void **unused)
{
	static const int32_t seqs[] = { 5, 5, 5 };
	static const uint32_t lens[] = { 3 };
	static const int32_t in[] = { 5, 5, 5, 5, 6, 5, 5, 5 };
	static const uint32_t want[] = { 0, 0, 3, 3, 0, 0, 0, 3 };
	struct stop_matcher *sm = build(seqs, lens, N_OF(lens));

	expect_stream(sm, in, want, N_OF(in));
	stop_matcher_destroy(sm);
}

static void test_duplicates(void **unused)
{
	static const int32_t seqs[] = { 4, 2, /**/ 2, /**/ 4, 2, /**/ 2,
					/**/ 4, 2 };
	static const uint32_t lens[] = { 2, 1, 2, 1, 2 };
	static const int32_t in[] = { 4, 2, 2, 4, 4, 2 };
	static const uint32_t want[] = { 0, 2, 1, 0, 0, 2 };
	struct stop_matcher *sm = build(seqs, lens, N_OF(lens));

	assert_int_equal(stop_matcher_max_len(sm), 2);
	expect_stream(sm, in, want, N_OF(in));
	stop_matcher_destroy(sm);
}

/* Tokens are any int32: the extremes and negatives hash and match. */
static void test_extreme_tokens(void **unused)
{
	static const int32_t seqs[] = { INT32_MIN, INT32_MAX, /**/ -1,
					/**/ 0, INT32_MIN, INT32_MAX };
	static const uint32_t lens[] = { 2, 1, 3 };
	static const int32_t in[] = { INT32_MAX, INT32_MIN, INT32_MAX, -1, 0,
				      INT32_MIN, INT32_MAX, 1 };
	static const uint32_t want[] = { 0, 0, 2, 1, 0, 0, 3, 0 };
	struct stop_matcher *sm = build(seqs, lens, N_OF(lens));

	expect_stream(sm, in, want, N_OF(in));
	stop_matcher_destroy(sm);
}

/* The automaton is immutable: interleaved cursors do not disturb each other. */
static void test_independent_cursors(void **unused)
{
	static const int32_t seqs[] = { 1, 2, 3, /**/ 3, 1 };
	static const uint32_t lens[] = { 3, 2 };
	struct stop_matcher *sm = build(seqs, lens, N_OF(lens));
	uint32_t a = STOP_MATCHER_ROOT, b = STOP_MATCHER_ROOT;
	uint32_t ma, mb;

	a = stop_matcher_feed(sm, a, 1, &ma);
	b = stop_matcher_feed(sm, b, 3, &mb);
	assert_int_equal(ma, 0);
	assert_int_equal(mb, 0);
	a = stop_matcher_feed(sm, a, 2, &ma);
	b = stop_matcher_feed(sm, b, 1, &mb);
	assert_int_equal(ma, 0);
	assert_int_equal(mb, 2);
	a = stop_matcher_feed(sm, a, 3, &ma);
	b = stop_matcher_feed(sm, b, 2, &mb);
	assert_int_equal(ma, 3);
	assert_int_equal(mb, 0);
	a = stop_matcher_feed(sm, a, 1, &ma);
	b = stop_matcher_feed(sm, b, 3, &mb);
	assert_int_equal(ma, 2);
	assert_int_equal(mb, 3);
	stop_matcher_destroy(sm);
}

static void test_create_errors(void **unused)
{
	static const int32_t tok[] = { 1, 2 };
	const int32_t *seqs[] = { tok, tok };
	const int32_t *with_null[] = { tok, NULL };
	uint32_t lens[] = { 2, 0 };
	uint32_t ones[] = { 1, 1 };

	errno = 0;
	assert_null(stop_matcher_create(seqs, lens, 2));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(stop_matcher_create(with_null, ones, 2));
	assert_int_equal(errno, EINVAL);
	assert_null(stop_matcher_create(NULL, ones, 1));
	assert_null(stop_matcher_create(seqs, NULL, 1));

	/* NULL handles are harmless. */
	stop_matcher_destroy(NULL);
	assert_int_equal(stop_matcher_max_len(NULL), 0);
	assert_int_equal(stop_matcher_check(NULL), -EINVAL);
}

/* No sequences at all: a valid automaton that never matches. */
static void test_empty_set(void **unused)
{
	struct stop_matcher *sm = stop_matcher_create(NULL, NULL, 0);
	uint32_t state = STOP_MATCHER_ROOT, m;

	assert_non_null(sm);
	assert_int_equal(stop_matcher_check(sm), 0);
	assert_int_equal(stop_matcher_max_len(sm), 0);
	for (int32_t t = -3; t < 10; t++) {
		state = stop_matcher_feed(sm, state, t, &m);
		assert_int_equal(state, STOP_MATCHER_ROOT);
		assert_int_equal(m, 0);
	}
	stop_matcher_destroy(sm);
}

/* ------------------------------------------------------------------ */
/* Randomized model test                                               */
/* ------------------------------------------------------------------ */

#define RAND_ROUNDS 2000
#define RAND_MAX_SEQS 20
#define RAND_MAX_SEQ_LEN 8
#define RAND_MAX_STREAM 500

/* A token of the round's alphabet, now and then one outside it. */
static int32_t rand_token(struct rng *r, const int32_t *alpha, uint32_t n_alpha,
			  int noise)
{
	if (noise && rng_below(r, 16) == 0)
		return rng_below(r, 2) ? (int32_t)rng_next(r) : 1000;
	return alpha[rng_below(r, n_alpha)];
}

static void rand_round(struct rng *r, unsigned round)
{
	int32_t flat[RAND_MAX_SEQS * RAND_MAX_SEQ_LEN];
	uint32_t lens[RAND_MAX_SEQS];
	int32_t stream[RAND_MAX_STREAM];
	int32_t alpha[4];
	uint32_t n_alpha = 1 + rng_below(r, 4);
	uint32_t n_seqs = 1 + rng_below(r, RAND_MAX_SEQS);
	uint32_t n_stream = 1 + rng_below(r, RAND_MAX_STREAM);
	uint32_t longest = 0, state = STOP_MATCHER_ROOT;
	int large = rng_below(r, 4) == 0;
	int noise = rng_below(r, 2);
	struct stop_matcher *sm;
	size_t off = 0;

	for (uint32_t a = 0; a < n_alpha; a++)
		alpha[a] = large ? (int32_t)rng_next(r) : (int32_t)a + 1;
	for (uint32_t i = 0; i < n_seqs; i++) {
		lens[i] = 1 + rng_below(r, RAND_MAX_SEQ_LEN);
		for (uint32_t j = 0; j < lens[i]; j++)
			flat[off++] = alpha[rng_below(r, n_alpha)];
		if (lens[i] > longest)
			longest = lens[i];
	}
	sm = build(flat, lens, n_seqs);
	assert_int_equal(stop_matcher_max_len(sm), longest);

	for (uint32_t n = 0; n < n_stream; n++) {
		uint32_t got = UINT32_MAX, want;

		stream[n] = rand_token(r, alpha, n_alpha, noise);
		state = stop_matcher_feed(sm, state, stream[n], &got);
		want = naive_match(flat, lens, n_seqs, stream, n + 1);
		if (got != want) {
			print_error("round %u token %u: match_len %u, naive %u "
				    "(SEED=%llu)\n", round, n, got, want,
				    test_seed);
			stop_matcher_destroy(sm);
			fail();
		}
	}
	stop_matcher_destroy(sm);
}

static void test_random_vs_naive(void **unused)
{
	struct rng r = rng_for(1);

	for (unsigned round = 0; round < RAND_ROUNDS; round++)
		rand_round(&r, round);
}

/* ------------------------------------------------------------------ */
/* Many long sequences                                                 */
/* ------------------------------------------------------------------ */

#define LONG_SEQS 100
#define LONG_LEN 32
#define LONG_STREAM 100000
#define LONG_CHECKED 20000	/* tokens also compared with the reference */

/*
 * 100 sequences of 32 tokens, mostly 1 with a 2 or two in them, so they
 * share long prefixes and deep failure chains; a stream of mostly 1s.
 * Sanity on cost (printed, not asserted) and on answers.
 */
static void test_many_long(void **unused)
{
	static int32_t flat[LONG_SEQS * LONG_LEN];
	static int32_t stream[LONG_STREAM];
	uint32_t lens[LONG_SEQS];
	struct rng r = rng_for(2);
	struct stop_matcher *sm;
	uint32_t state = STOP_MATCHER_ROOT;
	uint64_t n_matches = 0;
	double t0, t_build, t_feed;

	for (uint32_t i = 0; i < LONG_SEQS; i++) {
		int32_t *seq = flat + i * LONG_LEN;

		lens[i] = LONG_LEN;
		for (uint32_t j = 0; j < LONG_LEN; j++)
			seq[j] = 1;
		seq[i % LONG_LEN] = 2;
		if (i >= LONG_LEN)
			seq[rng_below(&r, LONG_LEN)] = 2;
	}
	for (uint32_t n = 0; n < LONG_STREAM; n++)
		stream[n] = rng_below(&r, 32) ? 1 : 2;

	/* Best of a few builds: the first pays for cold caches and faults. */
	t_build = 1e9;
	for (int k = 0; k < 8; k++) {
		t0 = now_s();
		sm = build(flat, lens, LONG_SEQS);
		t0 = now_s() - t0;
		if (t0 < t_build)
			t_build = t0;
		if (k < 7)
			stop_matcher_destroy(sm);
	}
	assert_int_equal(stop_matcher_max_len(sm), LONG_LEN);

	t0 = now_s();
	for (uint32_t n = 0; n < LONG_STREAM; n++) {
		uint32_t m;

		state = stop_matcher_feed(sm, state, stream[n], &m);
		n_matches += m != 0;
	}
	t_feed = now_s() - t0;
	print_message("stop_matcher: %d x %d built in %.1f us (with checks, best of 8), "
		      "%.1f ns/token, %llu matches in %d tokens\n", LONG_SEQS,
		      LONG_LEN, t_build * 1e6, t_feed * 1e9 / LONG_STREAM,
		      (unsigned long long)n_matches, LONG_STREAM);
	assert_true(n_matches > 0);

	state = STOP_MATCHER_ROOT;
	for (uint32_t n = 0; n < LONG_CHECKED; n++) {
		uint32_t m;

		state = stop_matcher_feed(sm, state, stream[n], &m);
		assert_int_equal(m, naive_match(flat, lens, LONG_SEQS, stream,
						n + 1));
	}

	/* The classic worst case for a failure walk: 1^31 2 after 1^32. */
	state = STOP_MATCHER_ROOT;
	for (uint32_t n = 0; n < LONG_STREAM; n++) {
		uint32_t m;

		stream[n] = n % LONG_LEN == LONG_LEN - 1 ? 2 : 1;
		state = stop_matcher_feed(sm, state, stream[n], &m);
		if (n < LONG_CHECKED)
			assert_int_equal(m, naive_match(flat, lens, LONG_SEQS,
							stream, n + 1));
	}
	stop_matcher_destroy(sm);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_single_token),
		cmocka_unit_test(test_overlapping),
		cmocka_unit_test(test_longest_at_same_token),
		cmocka_unit_test(test_prefix_of_another),
		cmocka_unit_test(test_repeated_tokens),
		cmocka_unit_test(test_duplicates),
		cmocka_unit_test(test_extreme_tokens),
		cmocka_unit_test(test_independent_cursors),
		cmocka_unit_test(test_create_errors),
		cmocka_unit_test(test_empty_set),
		cmocka_unit_test(test_random_vs_naive),
		cmocka_unit_test(test_many_long),
	};

	test_seed_init("stop_matcher");
	return cmocka_run_group_tests_name("stop_matcher", tests, NULL, NULL);
}
