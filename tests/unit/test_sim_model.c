/*
 * test_sim_model.c - unit tests of the sim model (lib/model/sim_model.c).
 *
 * The hash is normative (docs/DESIGN.md 2.1): the test vectors below are
 * that section's, copied digit for digit.  sim_logits() is normative too:
 * its vectors were computed by a Python transcription of the definition
 * in sim_model.h, and random prefixes are checked against a second C
 * transcription below (written from the definition, not the code) and
 * against the properties the engine relies on: the argmax is unique and
 * is sim_next(), and every value is in the documented set.  The config parser is checked key by
 * key and on every class of bad input.  The model table is checked against
 * sim_next() on random batches (the seed is printed; SEED=N replays it),
 * its cost against a lower bound only (a loaded machine may be slow, never
 * fast), and its faults in a forked child.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "model/sim_model.h"

static uint64_t test_seed;

/* xorshift64*: the test's own generator, independent of the model's hash */
static uint64_t rng_state;

static uint64_t rng_next(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ull;
}

static uint32_t rng_below(uint32_t n)
{
	return (uint32_t)(rng_next() % n);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------ vectors */

static void test_mix_vector(void **state)
{
	assert_true(sim_mix(0) == 16294208416658607535ull);
}

static void test_next_vectors(void **state)
{
	static const int32_t p[] = { 1, 2, 3, 4, 5, 6 };
	static const int32_t seven[] = { 7 };

	assert_int_equal(sim_next(NULL, 0, 32000, 0), 15535);
	assert_int_equal(sim_next(p, 3, 32000, 0), 26355);
	assert_int_equal(sim_next(p, 6, 32000, 0), 14866);
	assert_int_equal(sim_next(seven, 1, 50, 42), 5);
}

static void test_decode_vector(void **state)
{
	static const int32_t want[8] = {
		26355, 5658, 24635, 10745, 23270, 31656, 10417, 8625
	};
	int32_t seq[11] = { 1, 2, 3 };

	for (size_t i = 0; i < 8; i++) {
		seq[3 + i] = sim_next(seq, 3 + i, 32000, 0);
		assert_int_equal(seq[3 + i], want[i]);
	}
}

/* Only the last four tokens and the length matter. */
static void test_next_window(void **state)
{
	int32_t a[10] = { 9, 9, 9, 9, 9, 9, 1, 2, 3, 4 };
	int32_t b[10] = { 5, 0, 7, 3, 8, 1, 1, 2, 3, 4 };

	assert_int_equal(sim_next(a, 10, 32000, 0), sim_next(b, 10, 32000, 0));
	for (uint32_t v = 1; v < 100; v++) {
		int32_t t = sim_next(a, 10, v, 123);

		assert_true(t >= 0 && (uint32_t)t < v);
	}
}

/* -------------------------------------------------------------- logits */

/* The bit length of x, bit by bit (sim_model.c uses __builtin_clzll). */
static int bit_length(uint64_t x)
{
	int n = 0;

	for (; x; x >>= 1)
		n++;
	return n;
}

/* sim_logits() transcribed from its definition in sim_model.h. */
static void ref_logits(const int32_t *p, size_t n, uint32_t vocab,
		       uint64_t seed, float *out)
{
	uint64_t h = sim_mix(seed ^ (uint64_t)n), h0;
	size_t first = n < 4 ? 0 : n - 4;
	int depth = bit_length(vocab);

	for (size_t i = first; i < n; i++)
		h = sim_mix(h ^ (uint64_t)(uint32_t)p[i]);
	h0 = sim_mix(h ^ 0x6C6F67697473ull);	/* "logits" */
	for (uint32_t v = 0; v < vocab; v++) {
		uint64_t r = sim_mix(h0 + v);
		int zeros = 64 - bit_length(r);
		int level = zeros < depth ? zeros : depth;

		out[v] = (float)(level - depth) + (float)(r & 7) / 8.0f;
	}
	out[h % vocab] = 1.0f;
}

/* Computed with a Python transcription of the definition (sim_model.h). */
static void test_logits_vectors(void **state)
{
	static const int32_t p123[] = { 1, 2, 3 };
	static const int32_t p7[] = { 7 };
	static const float want16[16] = {
		-3.25f, -4.5f, 0.75f, 1.0f, -5.0f, -3.0f, -5.0f, -4.5f,
		-4.875f, -1.0f, 0.625f, -2.75f, -3.5f, -3.5f, -5.0f, -1.375f
	};
	static const float want4[4] = { -2.25f, -1.125f, -1.75f, 1.0f };
	/* 8 x the logits of [7], vocab 50, seed 42 */
	static const int want50[50] = {
		-48, -45, -47, -43, -39, 8, -38, -13, -44, -38, -22, -47, -34,
		-36, -33, -42, -45, -20, -36, -44, -41, -35, -20, -37, -46, -47,
		-44, -48, -42, -11, -46, -38, -43, -30, -38, -34, -47, -34, -35,
		-44, -46, -34, -31, -48, -42, -44, -31, -44, -43, -47
	};
	static float out[32000];
	int64_t sum8 = 0;

	sim_logits(p123, 3, 16, 0, out);
	assert_memory_equal(out, want16, sizeof(want16));
	sim_logits(NULL, 0, 4, 0, out);
	assert_memory_equal(out, want4, sizeof(want4));
	sim_logits(p7, 1, 50, 42, out);
	for (int v = 0; v < 50; v++)
		assert_int_equal((int)(out[v] * 8.0f), want50[v]);
	/* [1,2,3] at vocab 32000: the top is 26355 (sim_next), and 8 times
	 * the values sum to -3471379 */
	sim_logits(p123, 3, 32000, 0, out);
	assert_true(out[26355] == 1.0f);
	for (int v = 0; v < 32000; v++)
		sum8 += (int64_t)(out[v] * 8.0f);
	assert_int_equal(sum8, -3471379);
}

/*
 * Random prefixes: sim_logits() equals the transcription bit for bit, its
 * argmax (lowest id on ties) is sim_next() and unique, and every other
 * value is k/8 for an integer k in [-8 * depth, 7].
 */
static void test_logits_random(void **state)
{
	static const uint32_t vocabs[] = { 1, 2, 16, 32000, 3, 1000 };
	static float got[32000], want[32000];
	int32_t p[12];

	rng_state = (test_seed ? test_seed : 1) ^ 0x1091757ull;
	for (int round = 0; round < 600; round++) {
		uint32_t vocab = vocabs[round % 6];
		uint64_t seed = round % 3 ? rng_next() : 0;
		size_t n = rng_below(13);
		int depth = bit_length(vocab);
		uint32_t top = 0;
		int32_t t;

		for (size_t i = 0; i < n; i++)	/* any int32, now and then */
			p[i] = round % 5 ? (int32_t)rng_below(vocab) :
					   (int32_t)(uint32_t)rng_next();
		sim_logits(n ? p : NULL, n, vocab, seed, got);
		ref_logits(p, n, vocab, seed, want);
		if (memcmp(got, want, vocab * sizeof(float)))
			fail_msg("SEED=%" PRIu64 " round %d: sim_logits differs "
				 "from its definition", test_seed, round);
		t = sim_next(p, n, vocab, seed);
		for (uint32_t v = 1; v < vocab; v++)
			if (got[v] > got[top])
				top = v;
		if ((int32_t)top != t)
			fail_msg("SEED=%" PRIu64 " round %d: argmax %u, sim_next %d",
				 test_seed, round, top, t);
		for (uint32_t v = 0; v < vocab; v++) {
			float k = got[v] * 8.0f;

			if (v == top) {
				assert_true(got[v] == 1.0f);
				continue;
			}
			/* unique: everything else is below the top's 1 */
			if (k != (float)(int)k || k < (float)(-8 * depth) || k > 7.0f)
				fail_msg("SEED=%" PRIu64 " round %d: logit %u is %a",
					 test_seed, round, v, (double)got[v]);
		}
	}
}

/* -------------------------------------------------------------- config */

static void test_config_defaults(void **state)
{
	struct sim_config cfg, parsed;
	char err[128] = "stale";

	sim_config_default(&cfg);
	assert_int_equal(cfg.vocab, 32000);
	assert_true(cfg.seed == 0);
	assert_true(cfg.call_us == 0 && cfg.row_us == 0 && cfg.token_ns == 0);
	assert_false(cfg.mode_sleep);
	assert_false(cfg.has_crash_token);
	assert_false(cfg.has_hang_token);

	memset(&parsed, 0xa5, sizeof(parsed));
	assert_int_equal(sim_config_parse("", &parsed, err, sizeof(err)), 0);
	assert_int_equal(parsed.vocab, 32000);
	assert_true(parsed.seed == 0 && parsed.call_us == 0);
	assert_true(parsed.row_us == 0 && parsed.token_ns == 0);
	assert_false(parsed.mode_sleep || parsed.has_crash_token ||
		     parsed.has_hang_token);

	assert_int_equal(sim_config_parse(NULL, &parsed, err, sizeof(err)), 0);
	assert_int_equal(parsed.vocab, 32000);
}

static void test_config_keys(void **state)
{
	struct sim_config cfg;
	char err[128];

	assert_int_equal(sim_config_parse(
		"vocab=50,seed=42,call_us=1,row_us=2,token_ns=3,mode=sleep,crash_token=0,hang_token=2147483647",
		&cfg, err, sizeof(err)), 0);
	assert_int_equal(cfg.vocab, 50);
	assert_true(cfg.seed == 42);
	assert_true(cfg.call_us == 1 && cfg.row_us == 2 && cfg.token_ns == 3);
	assert_true(cfg.mode_sleep);
	assert_true(cfg.has_crash_token);
	assert_int_equal(cfg.crash_token, 0);
	assert_true(cfg.has_hang_token);
	assert_int_equal(cfg.hang_token, 2147483647);

	assert_int_equal(sim_config_parse("mode=spin", &cfg, err, sizeof(err)),
			 0);
	assert_false(cfg.mode_sleep);
	/* a later key wins */
	assert_int_equal(sim_config_parse("mode=sleep,mode=spin,vocab=7,vocab=9",
					  &cfg, err, sizeof(err)), 0);
	assert_false(cfg.mode_sleep);
	assert_int_equal(cfg.vocab, 9);

	/* the extremes of each range */
	assert_int_equal(sim_config_parse(
		"vocab=2147483647,seed=18446744073709551615,call_us=18446744073709551615,row_us=0,token_ns=18446744073709551615",
		&cfg, err, sizeof(err)), 0);
	assert_int_equal(cfg.vocab, 2147483647u);
	assert_true(cfg.seed == UINT64_MAX);
	assert_true(cfg.call_us == UINT64_MAX && cfg.token_ns == UINT64_MAX);
	assert_int_equal(sim_config_parse("vocab=1,seed=0", &cfg, err,
					  sizeof(err)), 0);
	assert_int_equal(cfg.vocab, 1);
	assert_int_equal(sim_config_parse("vocab=007", &cfg, err, sizeof(err)),
			 0);
	assert_int_equal(cfg.vocab, 7);
}

struct bad_case {
	const char *args;
	const char *must_say[2];	/* substrings the error must contain */
};

static void test_config_errors(void **state)
{
	static const struct bad_case cases[] = {
		{ "vocab=x", { "'x'", "'vocab'" } },
		{ "vocab=0", { "'0'", "'vocab'" } },
		{ "vocab=2147483648", { "'2147483648'", "'vocab'" } },
		{ "vocab=-1", { "'-1'", "'vocab'" } },
		{ "vocab=+1", { "'+1'", "'vocab'" } },
		{ "vocab= 1", { "' 1'", "'vocab'" } },
		{ "vocab=12x", { "'12x'", "'vocab'" } },
		{ "vocab=", { "''", "'vocab'" } },
		{ "vocab=0x10", { "'0x10'", "'vocab'" } },
		{ "seed=18446744073709551616", { "18446744073709551616", "'seed'" } },
		{ "seed=-1", { "'-1'", "'seed'" } },
		{ "seed=1.5", { "'1.5'", "'seed'" } },
		{ "call_us=abc", { "'abc'", "'call_us'" } },
		{ "call_us=99999999999999999999", { "99999999999999999999", "'call_us'" } },
		{ "row_us=-5", { "'-5'", "'row_us'" } },
		{ "token_ns=1e3", { "'1e3'", "'token_ns'" } },
		{ "mode=fast", { "'fast'", "'mode'" } },
		{ "mode=", { "''", "'mode'" } },
		{ "mode=SLEEP", { "'SLEEP'", "'mode'" } },
		{ "crash_token=-1", { "'-1'", "'crash_token'" } },
		{ "crash_token=2147483648", { "'2147483648'", "'crash_token'" } },
		{ "crash_token=t", { "'t'", "'crash_token'" } },
		{ "hang_token=-1", { "'-1'", "'hang_token'" } },
		{ "hang_token=4294967296", { "'4294967296'", "'hang_token'" } },
		{ "colour=red", { "unknown key", "'colour'" } },
		{ "Vocab=5", { "unknown key", "'Vocab'" } },
		{ "=5", { "unknown key", "''" } },
		{ "vocab", { "missing '='", "'vocab'" } },
		{ "vocab=5,seed", { "missing '='", "'seed'" } },
		{ "vocab=5,", { "empty entry", "vocab=5," } },
		{ ",vocab=5", { "empty entry", ",vocab=5" } },
		{ "vocab=5,,seed=1", { "empty entry", ",," } },
		{ ",", { "empty entry", "','" } },
		{ "seed=1,vocab=bad,mode=nope", { "'bad'", "'vocab'" } },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct sim_config cfg;
		char err[256] = "";
		int ret;

		ret = sim_config_parse(cases[i].args, &cfg, err, sizeof(err));
		if (ret != -EINVAL)
			fail_msg("'%s': got %d, want -EINVAL", cases[i].args,
				 ret);
		if (strncmp(err, "sim: ", 5) || strchr(err, '\n'))
			fail_msg("'%s': error not one 'sim: ' line: '%s'",
				 cases[i].args, err);
		for (size_t j = 0; j < 2; j++)
			if (!strstr(err, cases[i].must_say[j]))
				fail_msg("'%s': error '%s' does not say %s",
					 cases[i].args, err,
					 cases[i].must_say[j]);
	}
}

/* A short or absent err buffer is never overrun. */
static void test_config_error_buffer(void **state)
{
	struct sim_config cfg;
	char small[8];

	memset(small, 'z', sizeof(small));
	assert_int_equal(sim_config_parse("vocab=toolongtofit", &cfg, small,
					  sizeof(small)), -EINVAL);
	assert_int_equal(strlen(small), sizeof(small) - 1);
	assert_int_equal(sim_config_parse("nope=1", &cfg, NULL, 0), -EINVAL);
	assert_int_equal(sim_config_parse("nope", &cfg, small, 0), -EINVAL);
}

/* --------------------------------------------------------------- model */

static void *open_sim(const char *args)
{
	char err[256] = "";
	void *m = sim_model_api()->create(args, err, sizeof(err));

	if (!m)
		fail_msg("sim create('%s'): %s", args, err);
	return m;
}

static void test_api_table(void **state)
{
	const struct dynbatch_model_api *api = sim_model_api();
	char err[256] = "";
	void *m;

	assert_non_null(api);
	assert_int_equal(api->abi_version, DYNBATCH_MODEL_ABI_VERSION);
	assert_string_equal(api->name, "sim");
	assert_non_null(api->create);
	assert_non_null(api->vocab);
	assert_non_null(api->next);
	assert_non_null(api->destroy);
	assert_non_null(api->logits);
	assert_null(api->step);		/* a token model */

	assert_null(api->create("vocab=0", err, sizeof(err)));
	assert_non_null(strstr(err, "'vocab'"));
	assert_null(api->create("bogus", err, sizeof(err)));
	assert_true(err[0] != '\0');

	m = open_sim("");
	assert_int_equal(api->vocab(m), 32000);
	api->destroy(m);
	m = open_sim("vocab=50,seed=42");
	assert_int_equal(api->vocab(m), 50);
	api->destroy(m);
	api->destroy(NULL);
}

static void test_api_next_vectors(void **state)
{
	const struct dynbatch_model_api *api = sim_model_api();
	static const int32_t p123[] = { 1, 2, 3 };
	static const int32_t p7[] = { 7 };
	const int32_t *const prefixes[3] = { NULL, p123, p123 };
	const uint32_t lengths[3] = { 0, 3, 2 };
	int32_t out[3] = { -1, -1, -1 };
	void *m;

	m = open_sim("");
	assert_int_equal(api->next(m, 3, prefixes, lengths, out), 0);
	assert_int_equal(out[0], 15535);
	assert_int_equal(out[1], 26355);
	assert_int_equal(out[2], sim_next(p123, 2, 32000, 0));
	/* an empty batch is a valid call */
	assert_int_equal(api->next(m, 0, NULL, NULL, NULL), 0);
	api->destroy(m);

	m = open_sim("vocab=50,seed=42");
	{
		const int32_t *const one[1] = { p7 };
		const uint32_t len1[1] = { 1 };

		assert_int_equal(api->next(m, 1, one, len1, out), 0);
		assert_int_equal(out[0], 5);
	}
	api->destroy(m);
}

/* next() through the table equals sim_next() row by row. */
static void test_api_next_random(void **state)
{
	enum { MAX_ROWS = 64, MAX_LEN = 40 };
	const struct dynbatch_model_api *api = sim_model_api();
	static int32_t tokens[MAX_ROWS][MAX_LEN];
	const int32_t *prefixes[MAX_ROWS];
	uint32_t lengths[MAX_ROWS];
	int32_t out[MAX_ROWS];

	rng_state = test_seed ? test_seed : 1;
	for (int round = 0; round < 200; round++) {
		uint32_t vocab = 1 + rng_below(round % 2 ? 100 : 2000000000);
		uint64_t seed = rng_next();
		uint32_t n_rows = rng_below(MAX_ROWS + 1);
		char args[96];
		void *m;

		snprintf(args, sizeof(args), "vocab=%" PRIu32 ",seed=%" PRIu64,
			 vocab, seed);
		m = open_sim(args);
		for (uint32_t i = 0; i < n_rows; i++) {
			lengths[i] = rng_below(MAX_LEN + 1);
			for (uint32_t j = 0; j < lengths[i]; j++)
				tokens[i][j] = (int32_t)rng_below(vocab);
			prefixes[i] = lengths[i] ? tokens[i] : NULL;
			out[i] = -1;
		}
		assert_int_equal(api->next(m, n_rows, prefixes, lengths, out),
				 0);
		for (uint32_t i = 0; i < n_rows; i++) {
			int32_t want = sim_next(prefixes[i], lengths[i], vocab,
						seed);

			if (out[i] != want)
				fail_msg("SEED=%" PRIu64 " round %d row %u: got %d want %d",
					 test_seed, round, i, out[i], want);
		}
		api->destroy(m);
	}
}

/*
 * logits() through the table equals sim_logits() row by row, and its
 * argmax is what next() gives for the same batch.
 */
static void test_api_logits_random(void **state)
{
	enum { MAX_ROWS = 8, MAX_LEN = 20, MAX_VOCAB = 32000 };
	static const uint32_t vocabs[] = { 1, 2, 16, MAX_VOCAB };
	const struct dynbatch_model_api *api = sim_model_api();
	static int32_t tokens[MAX_ROWS][MAX_LEN];
	static float got[MAX_ROWS * MAX_VOCAB], want[MAX_VOCAB];
	const int32_t *prefixes[MAX_ROWS];
	uint32_t lengths[MAX_ROWS];
	int32_t next[MAX_ROWS];

	assert_non_null(api->logits);
	rng_state = (test_seed ? test_seed : 1) ^ 0x4a9111ull;
	for (int round = 0; round < 40; round++) {
		uint32_t vocab = vocabs[round % 4];
		uint64_t seed = rng_next();
		uint32_t n_rows = rng_below(MAX_ROWS + 1);
		char args[96];
		void *m;

		snprintf(args, sizeof(args), "vocab=%" PRIu32 ",seed=%" PRIu64,
			 vocab, seed);
		m = open_sim(args);
		for (uint32_t i = 0; i < n_rows; i++) {
			lengths[i] = rng_below(MAX_LEN + 1);
			for (uint32_t j = 0; j < lengths[i]; j++)
				tokens[i][j] = (int32_t)rng_below(vocab);
			prefixes[i] = lengths[i] ? tokens[i] : NULL;
		}
		assert_int_equal(api->logits(m, n_rows, prefixes, lengths, got), 0);
		assert_int_equal(api->next(m, n_rows, prefixes, lengths, next), 0);
		for (uint32_t i = 0; i < n_rows; i++) {
			const float *row = got + (size_t)i * vocab;

			sim_logits(prefixes[i], lengths[i], vocab, seed, want);
			if (memcmp(row, want, vocab * sizeof(float)))
				fail_msg("SEED=%" PRIu64 " round %d row %u: logits() "
					 "is not sim_logits()", test_seed, round, i);
			if (row[next[i]] != 1.0f)
				fail_msg("SEED=%" PRIu64 " round %d row %u: next() "
					 "%d is not the top", test_seed, round, i, next[i]);
		}
		api->destroy(m);
	}
}

static void test_api_logits_errors(void **state)
{
	const struct dynbatch_model_api *api = sim_model_api();
	static const int32_t p[] = { 1 };
	const int32_t *const one[1] = { p };
	const int32_t *const null_row[1] = { NULL };
	const uint32_t len1[1] = { 1 };
	float out[16];
	void *m = open_sim("vocab=16");

	assert_int_equal(api->logits(m, 0, NULL, NULL, NULL), 0);
	assert_int_equal(api->logits(m, 1, one, len1, NULL), -EINVAL);
	assert_int_equal(api->logits(m, 1, null_row, len1, out), -EINVAL);
	assert_int_equal(api->logits(NULL, 1, one, len1, out), -EINVAL);
	api->destroy(m);
}

/* ---------------------------------------------------------------- cost */

static uint64_t time_one_call(const char *args, uint32_t n_rows,
			      uint32_t len)
{
	const struct dynbatch_model_api *api = sim_model_api();
	static const int32_t row[1000];
	const int32_t *prefixes[16];
	uint32_t lengths[16];
	int32_t out[16];
	uint64_t t0;
	void *m;

	assert_true(n_rows <= 16 && len <= 1000);
	for (uint32_t i = 0; i < n_rows; i++) {
		prefixes[i] = row;
		lengths[i] = len;
	}
	m = open_sim(args);
	t0 = now_ns();
	assert_int_equal(api->next(m, n_rows, prefixes, lengths, out), 0);
	t0 = now_ns() - t0;
	api->destroy(m);
	return t0;
}

/* Lower bounds only: a busy machine may be slower, never faster. */
static void test_cost(void **state)
{
	assert_true(time_one_call("call_us=2000,mode=sleep", 1, 0) >= 2000000);
	assert_true(time_one_call("call_us=2000,mode=spin", 0, 0) >= 2000000);
	assert_true(time_one_call("call_us=2000", 1, 10) >= 2000000);
	/* 4 rows * 500 us */
	assert_true(time_one_call("row_us=500,mode=sleep", 4, 0) >= 2000000);
	assert_true(time_one_call("row_us=500", 4, 0) >= 2000000);
	/* 4 rows * 500 tokens * 1000 ns */
	assert_true(time_one_call("token_ns=1000,mode=sleep", 4, 500) >=
		    2000000);
	assert_true(time_one_call("token_ns=1000", 4, 500) >= 2000000);
	/* all three add up: 1000 + 2 * 250 + 2 * 250 * 1000 ns = 2 ms */
	assert_true(time_one_call("call_us=1000,row_us=250,token_ns=1000,mode=sleep",
				  2, 250) >= 2000000);
}

/* --------------------------------------------------------------- faults */

/*
 * Run one next() (logits() when use_logits) on a one-row batch of prefix
 * in a child; return its wait status, or -1 if it was still running after
 * wait_ms (then it is killed).
 */
static int run_call_in_child(const char *args, const int32_t *prefix,
			     uint32_t len, int wait_ms, bool use_logits)
{
	const struct dynbatch_model_api *api = sim_model_api();
	int status = 0;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char err[256];
		void *m = api->create(args, err, sizeof(err));
		const int32_t *const prefixes[1] = { prefix };
		static float logits[32000];
		int32_t out;

		signal(SIGABRT, SIG_DFL);	/* whatever the runner set */
		if (!m || api->vocab(m) > 32000)
			_exit(3);
		if (use_logits)
			_exit(api->logits(m, 1, prefixes, &len, logits) ? 4 : 0);
		_exit(api->next(m, 1, prefixes, &len, &out) ? 4 : 0);
	}
	for (int ms = 0; ms < wait_ms; ms++) {
		pid_t r = waitpid(pid, &status, WNOHANG);

		assert_true(r >= 0);
		if (r == pid)
			return status;
		usleep(1000);
	}
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return -1;
}

static int run_in_child(const char *args, const int32_t *prefix, uint32_t len,
			int wait_ms)
{
	return run_call_in_child(args, prefix, len, wait_ms, false);
}

/* logits() crashes and hangs on the poison tokens as next() does. */
static void test_logits_faults(void **state)
{
	static const int32_t ends5[] = { 1, 2, 5 };
	int status;

	status = run_call_in_child("crash_token=5", ends5, 3, 10000, true);
	assert_true(status != -1 && WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGABRT);
	assert_int_equal(run_call_in_child("hang_token=5", ends5, 3, 200, true), -1);
	assert_int_equal(run_call_in_child("crash_token=2", ends5, 3, 10000, true), 0);
}

static void test_crash_token(void **state)
{
	static const int32_t ends5[] = { 1, 2, 5 };
	static const int32_t has5[] = { 5, 2, 1 };
	int status;

	status = run_in_child("crash_token=5", ends5, 3, 10000);
	assert_true(status != -1);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGABRT);

	/* only the last token counts, and an empty prefix ends in nothing */
	assert_int_equal(run_in_child("crash_token=5", has5, 3, 10000), 0);
	assert_int_equal(run_in_child("crash_token=5", NULL, 0, 10000), 0);
	assert_int_equal(run_in_child("crash_token=2", ends5, 3, 10000), 0);
}

static void test_hang_token(void **state)
{
	static const int32_t ends9[] = { 3, 9 };
	static const int32_t has9[] = { 9, 3 };
	int status;

	/* still running after 200 ms is as close to "forever" as a test gets */
	assert_int_equal(run_in_child("hang_token=9", ends9, 2, 200), -1);
	assert_int_equal(run_in_child("hang_token=9", has9, 2, 10000), 0);
	assert_int_equal(run_in_child("hang_token=9", NULL, 0, 10000), 0);
	/* both set: the row's last token picks the fault */
	status = run_in_child("hang_token=9,crash_token=3", has9, 2, 10000);
	assert_true(status != -1 && WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGABRT);
}

int main(void)
{
	const char *env = getenv("SEED");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mix_vector),
		cmocka_unit_test(test_next_vectors),
		cmocka_unit_test(test_decode_vector),
		cmocka_unit_test(test_next_window),
		cmocka_unit_test(test_logits_vectors),
		cmocka_unit_test(test_logits_random),
		cmocka_unit_test(test_config_defaults),
		cmocka_unit_test(test_config_keys),
		cmocka_unit_test(test_config_errors),
		cmocka_unit_test(test_config_error_buffer),
		cmocka_unit_test(test_api_table),
		cmocka_unit_test(test_api_next_vectors),
		cmocka_unit_test(test_api_next_random),
		cmocka_unit_test(test_api_logits_random),
		cmocka_unit_test(test_api_logits_errors),
		cmocka_unit_test(test_cost),
		cmocka_unit_test(test_crash_token),
		cmocka_unit_test(test_hang_token),
		cmocka_unit_test(test_logits_faults),
	};

	test_seed = env && *env ? strtoull(env, NULL, 0)
				: (uint64_t)time(NULL) ^ (uint64_t)getpid();
	printf("test_sim_model: SEED=%" PRIu64 "\n", test_seed);
	return cmocka_run_group_tests_name("sim_model", tests, NULL, NULL);
}
