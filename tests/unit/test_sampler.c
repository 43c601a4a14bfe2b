/*
 * test_sampler.c - the engine's sampler (lib/sampling/sampler.c) against the
 * Philox known answers, the naive reference sampler (tools/refdecode/ref_sampler.c,
 * penalties included,
 * compiled into this test by #include because the tests link only the
 * engine's libraries), a chi-square goodness-of-fit test that tells a
 * biased sampler from a correct one, the logprobs and the error paths,
 * and the sampler's AVX2 kernels against its portable ones, bit for bit
 * (the two tables of lib/sampling/sampler_internal.h, each asked for by
 * sampler_set_isa(), with the steps sampler_internal.h declares: the
 * library linked as the engine links it).
 *
 * The random tests print their seed; SEED=<n> replays a run.  Each test
 * derives its own generator from the seed, so one test replays the same
 * whatever runs before it.  The chi-square tests use fixed seeds and so
 * are deterministic.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sampling/philox.h"
#include "sampling/sampler.h"
#include "tests/unit/test_rng.h"

#include "sampling/sampler_internal.h"

/* The naive sampler itself, statics and all (see the file comment). */
#include "tools/refdecode/ref_sampler.h"

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

/* qsort() by decreasing value. */
static int u32_desc(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x > y ? -1 : x < y;
}

static double rng_unit(struct rng *r)
{
	return (double)(rng_next(r) >> 11) * 0x1p-53;
}

/* Sample with a fresh sampler; asserts creation. */
static int engine_sample(const float *logits, uint32_t vocab,
			 const struct sampling_params *p, uint32_t k,
			 uint32_t choice, struct sampler_result *out)
{
	struct sampler *s = sampler_create(vocab);
	int ret;

	assert_non_null(s);
	ret = sampler_sample(s, logits, p, k, choice, out);
	sampler_destroy(s);
	return ret;
}

static int validate(const struct sampling_params *p, uint32_t vocab,
		    char *err, size_t len)
{
	err[0] = '\0';
	return sampling_params_validate(p, vocab, err, len);
}

/* ------------------------------------------------------------------ */
/* (a) Philox                                                          */
/* ------------------------------------------------------------------ */

static void test_philox_known_answers(void **state)
{
	/* Random123's published known answers for philox4x32-10. */
	static const struct {
		uint32_t ctr[4], key[2], out[4];
	} kat[] = {
		{ { 0, 0, 0, 0 }, { 0, 0 },
		  { 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 } },
		{ { 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff },
		  { 0xffffffff, 0xffffffff },
		  { 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd } },
		{ { 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344 },
		  { 0xa4093822, 0x299f31d0 },
		  { 0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1 } },
	};
	/*
	 * (seed, k, choice) -> Philox output and uniform, computed once by a
	 * separate 20-line Python implementation of Philox4x32-10 (which
	 * reproduces the three answers above) with key = (seed & 0xffffffff,
	 * seed >> 32), counter = (k, choice, 0, 0) and
	 * u = ((out0 << 32 | out1) >> 11) * 2**-53, printed with float.hex().
	 */
	static const struct {
		uint64_t seed;
		uint32_t k, choice, out[4];
		double u;
	} draws[] = {
		{ 0x0000000000000000ull, 0u, 0u, { 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 }, 0x1.989fa35785a70p-2 },
		{ 0x000000000000002aull, 0u, 0u, { 0x9ceaf053, 0x77f5493b, 0x12bf50ad, 0x5742b3d7 }, 0x1.39d5e0a6efea9p-1 },
		{ 0x000000000000002aull, 1u, 0u, { 0xfcdb2127, 0x53ba6cfd, 0x838f5a6e, 0x744e06fb }, 0x1.f9b6424ea774dp-1 },
		{ 0x000000000000002aull, 0u, 1u, { 0x42e0b8b3, 0x7dbf5de8, 0x2fe739d4, 0x6aaf03eb }, 0x1.0b82e2cdf6fd6p-2 },
		{ 0x0123456789abcdefull, 7u, 3u, { 0x2b892e56, 0x3464376f, 0x8d9ce60e, 0xc493fd4a }, 0x1.5c4972b1a3218p-3 },
		{ 0xffffffffffffffffull, 4294967295u, 4294967295u, { 0x4d18d7d2, 0x430ac65a, 0xbd2fa22a, 0x0afae10d }, 0x1.34635f490c2b0p-2 },
	};

	for (size_t i = 0; i < sizeof(kat) / sizeof(kat[0]); i++) {
		uint32_t out[4];

		philox4x32_10(kat[i].ctr, kat[i].key, out);
		assert_memory_equal(out, kat[i].out, sizeof(out));
	}
	for (size_t i = 0; i < sizeof(draws) / sizeof(draws[0]); i++) {
		const uint32_t ctr[4] = { draws[i].k, draws[i].choice, 0, 0 };
		const uint32_t key[2] = { (uint32_t)draws[i].seed,
					  (uint32_t)(draws[i].seed >> 32) };
		uint32_t out[4];

		philox4x32_10(ctr, key, out);
		assert_memory_equal(out, draws[i].out, sizeof(out));
		assert_true(philox_uniform(draws[i].seed, draws[i].k,
					   draws[i].choice) == draws[i].u);
	}
}

/* ------------------------------------------------------------------ */
/* Semantics at the edges                                              */
/* ------------------------------------------------------------------ */

/* Which tokens n draws (k = 0 .. n-1) ever return. */
static void draw_set(const float *logits, uint32_t vocab,
		     const struct sampling_params *p, uint32_t n, bool *seen)
{
	struct sampler *s = sampler_create(vocab);
	struct sampler_result res;

	assert_non_null(s);
	memset(seen, 0, vocab * sizeof(*seen));
	for (uint32_t k = 0; k < n; k++) {
		assert_int_equal(sampler_sample(s, logits, p, k, 0, &res), 0);
		seen[res.token] = true;
	}
	sampler_destroy(s);
}

static void test_greedy(void **state)
{
	const float logits[] = { 1, 5, 2, 5, -3 };
	struct sampling_params p = SAMPLING_PARAMS_GREEDY;
	struct sampling_bias bias[] = { { 1, SAMPLER_BIAS_BAN } };
	struct sampler_result res;

	assert_int_equal(engine_sample(logits, 5, &p, 0, 0, &res), 0);
	assert_int_equal(res.token, 1);	/* lowest id of the tie */
	/* Whatever the other fields. */
	p.top_k = 1;
	p.top_p = 0.01f;
	p.min_p = 1.0f;
	p.seed = 99;
	assert_int_equal(engine_sample(logits, 5, &p, 3, 2, &res), 0);
	assert_int_equal(res.token, 1);
	/* After bias: the banned tie loses to its twin. */
	p.bias = bias;
	p.n_bias = 1;
	assert_int_equal(engine_sample(logits, 5, &p, 0, 0, &res), 0);
	assert_int_equal(res.token, 3);
}

static void test_banned_never_sampled(void **state)
{
	float logits[64];
	struct sampling_bias bias[] = { { 5, SAMPLER_BIAS_BAN },
					{ 7, SAMPLER_BIAS_BAN } };
	struct sampling_params p = { .temperature = 1000.0f, .top_p = 1.0f,
				     .seed = 7, .bias = bias, .n_bias = 2 };
	bool seen[64];

	for (int i = 0; i < 64; i++)
		logits[i] = (float)(i % 5);
	logits[9] = -INFINITY;	/* masked by the model */
	draw_set(logits, 64, &p, 20000, seen);
	for (int i = 0; i < 64; i++)
		assert_true(seen[i] == (i != 5 && i != 7 && i != 9));
}

static void test_top_k_ties_kept(void **state)
{
	const float logits[] = { 3, 2, 2, 2, 1, 0 };
	struct sampling_params p = { .temperature = 1.0f, .top_p = 1.0f,
				     .top_k = 2, .seed = 3 };
	bool seen[6];

	draw_set(logits, 6, &p, 5000, seen);
	/* The 2nd largest value is tied three ways: all three kept. */
	assert_true(seen[0] && seen[1] && seen[2] && seen[3]);
	assert_false(seen[4] || seen[5]);
}

static void test_top_p_ties_kept(void **state)
{
	const float logits[] = { 0, 1, 1, 1, -1 };
	struct sampling_params p = { .temperature = 1.0f, .top_p = 0.3f,
				     .seed = 5 };
	bool seen[5];

	/* Any one of the three tied tokens reaches 0.3: all three kept. */
	draw_set(logits, 5, &p, 5000, seen);
	assert_true(seen[1] && seen[2] && seen[3]);
	assert_false(seen[0] || seen[4]);
	/* top_p = 1 keeps every token with a non-zero probability. */
	p.top_p = 1.0f;
	draw_set(logits, 5, &p, 20000, seen);
	for (int i = 0; i < 5; i++)
		assert_true(seen[i]);
}

/*
 * top_p is ">= top_p": the smallest set whose mass reaches it.  With
 * weights {2^30, 2^29, 2^29} (a z found so that sampler_weight() gives
 * 2^29), Z = 2^31 and top_p = 0.5, the first token alone reaches the
 * target 2^30 exactly.
 */
static void test_top_p_exact_boundary(void **state)
{
	float z = -0.6931472f;
	struct sampling_params p = { .temperature = 1.0f, .top_p = 0.5f,
				     .seed = 13 };
	bool seen[3];
	int steps = 0;
	const float scale = sampler_weight_scale(1.0f);

	while (sampler_weight(z, 0.0f, scale) != SAMPLER_WEIGHT_ONE / 2 &&
	       steps++ < 64)
		z = nextafterf(z, sampler_weight(z, 0.0f, scale) <
				  SAMPLER_WEIGHT_ONE / 2 ? 0.0f : -1.0f);
	assert_int_equal(sampler_weight(z, 0.0f, scale), SAMPLER_WEIGHT_ONE / 2);
	{
		const float logits[] = { 0.0f, z, z };

		draw_set(logits, 3, &p, 2000, seen);
		assert_true(seen[0]);
		assert_false(seen[1] || seen[2]);
		p.top_p = 0.50000006f;	/* just above: the tied pair joins */
		draw_set(logits, 3, &p, 2000, seen);
		assert_true(seen[0] && seen[1] && seen[2]);
	}
}

/*
 * The weight function against e^z in double: sampler_weight() is
 * trunc(2^(30 + x) * (1 + err)) with |err| < 3e-6 (sampler.h), for every
 * x = (y - max) * scale it can see: 2^20 points spread over [-31, 0] at
 * several temperatures, the points just either side of each integer x
 * (where n changes) and x = 0, which must weigh 2^30 exactly.
 */
static void test_weight_accuracy(void **state)
{
	static const float temps[] = { 0.3f, 0.8f, 1.0f, 1.7f };
	double worst = 0;

	(void)state;
	assert_int_equal(sampler_weight(2.5f, 2.5f, sampler_weight_scale(0.8f)),
			 SAMPLER_WEIGHT_ONE);
	for (size_t t = 0; t < sizeof(temps) / sizeof(temps[0]); t++) {
		float scale = sampler_weight_scale(temps[t]);

		for (uint32_t i = 0; i <= 1u << 20; i++) {
			/* d from 0 down to where x passes -31. */
			float d = -(float)i * (31.5f / (float)(1u << 20)) / scale;
			float x = d * scale;
			uint32_t w = sampler_weight(d, 0.0f, scale);
			double want = ldexp(1.0, 30) * exp2((double)x);

			if (x < SAMPLER_X_MIN) {
				assert_int_equal(w, 0);
				continue;
			}
			assert_true(w <= SAMPLER_WEIGHT_ONE);
			/* trunc loses under 1; the polynomial 3e-6 relative. */
			if (fabs(((double)w + 0.5) - want) > 0.5 + 3e-6 * want) {
				print_error("T %g d %a x %a: W %u, 2^(30 + x) = %.3f\n",
					    (double)temps[t], (double)d, (double)x,
					    w, want);
				fail();
			}
			if (want > 1e9 && fabs((double)w / want - 1) > worst)
				worst = fabs((double)w / want - 1);
		}
	}
	/* Either side of each integer x, where n and f jump. */
	for (int n = -30; n <= 0; n++) {
		float x = (float)n;

		for (int side = 0; side < 2; side++) {
			float xs = nextafterf(x, side ? 0.0f : -64.0f);
			uint32_t w = sampler_weight(xs, 0.0f, 1.0f);
			double want = ldexp(1.0, 30) * exp2((double)xs);

			if (xs > 0.0f)
				continue;
			assert_true(fabs(((double)w + 0.5) - want) <= 0.5 + 3e-6 * want);
		}
	}
	print_message("weight: worst relative error %.3g (W > 1e9)\n", worst);
}

/*
 * sampler_cut() against the definition: sort a copy by decreasing value
 * and walk it until the running mass (or count) reaches the target.  Ties
 * (values from a small range), wide values, every target from 1 to the
 * total, and few rounds, which end in the fallback sort.
 */
static void test_cut_vs_sort(void **state)
{
	struct rng r = rng_for(11);
	uint32_t *w = malloc(3000 * sizeof(*w)), *sorted = malloc(3000 * sizeof(*w));

	(void)state;
	assert_non_null(w);
	assert_non_null(sorted);
	for (uint32_t c = 0; c < 3000; c++) {
		uint32_t n = 1 + rng_below(&r, c % 10 == 0 ? 3000 : 60);
		uint32_t range = rng_below(&r, 2) ? 1 + rng_below(&r, 8) :
				 SAMPLER_WEIGHT_ONE;
		bool by_mass = rng_below(&r, 2);
		int rounds = rng_below(&r, 2) ? 64 : (int)rng_below(&r, 4);
		uint64_t total = 0, target, cum = 0;
		uint32_t want = 0, got;

		for (uint32_t i = 0; i < n; i++) {
			w[i] = 1 + rng_below(&r, range);
			/* Sorted runs now and then: the pivots' worst case. */
			if (c % 7 == 0 && i)
				w[i] = w[i - 1] + (uint32_t)(w[i - 1] < range);
			total += by_mass ? w[i] : 1;
		}
		target = 1 + rng_next(&r) % total;
		memcpy(sorted, w, n * sizeof(*w));
		qsort(sorted, n, sizeof(*sorted), u32_desc);
		for (uint32_t i = 0; i < n && cum < target; i++) {
			cum += by_mass ? sorted[i] : 1;
			want = sorted[i];
		}
		got = sampler_cut_rounds(w, n, target, by_mass, rounds);
		if (got != want) {
			print_error("case %u: n %u range %u by_mass %d rounds %d "
				    "target %" PRIu64 " of %" PRIu64 ": cut %u, "
				    "want %u\n", c, n, range, by_mass, rounds,
				    target, total, got, want);
			fail();
		}
	}
	free(w);
	free(sorted);
}

static void test_min_p(void **state)
{
	/* p relative to the max: 1, e^-1 = .37, e^-2 = .135, e^-3 = .05 */
	const float logits[] = { -3, 0, -1, -2, 0 };
	struct sampling_params p = { .temperature = 1.0f, .top_p = 1.0f,
				     .min_p = 0.2f, .seed = 11 };
	bool seen[5];

	draw_set(logits, 5, &p, 5000, seen);
	assert_true(seen[1] && seen[2] && seen[4]);
	assert_false(seen[0] || seen[3]);
	p.min_p = 1.0f;	/* only the tokens tied with the max */
	draw_set(logits, 5, &p, 5000, seen);
	assert_true(seen[1] && seen[4]);
	assert_false(seen[0] || seen[2] || seen[3]);
}

static void test_seeded_draws_repeat(void **state)
{
	struct rng r = rng_for(6);
	uint32_t vocab = 1000;
	float *logits = malloc(vocab * sizeof(*logits));
	struct sampler *a = sampler_create(vocab), *b = sampler_create(vocab);
	struct sampling_params p = { .temperature = 1.0f, .top_p = 0.95f,
				     .seed = rng_next(&r) };
	struct sampler_result x, y;
	uint32_t differ = 0;

	assert_non_null(logits);
	for (uint32_t i = 0; i < vocab; i++)
		logits[i] = (float)(rng_unit(&r) * 6.0);
	/* k in reverse on the second sampler, interleaved with other rows. */
	for (uint32_t k = 0; k < 200; k++) {
		struct sampling_params q = p;

		q.seed ^= 1;
		assert_int_equal(sampler_sample(b, logits, &q, k, 0, &y), 0);
		assert_int_equal(sampler_sample(a, logits, &p, k, 1, &x), 0);
		assert_int_equal(sampler_sample(b, logits, &p, k, 1, &y), 0);
		assert_int_equal(x.token, y.token);
		assert_int_equal(sampler_sample(b, logits, &p, k, 0, &y), 0);
		differ += x.token != y.token;
	}
	/* Choices are independent draws, not copies. */
	assert_true(differ > 100);
	sampler_destroy(a);
	sampler_destroy(b);
	free(logits);
}

static void test_vocab_128k(void **state)
{
	struct rng r = rng_for(7);
	uint32_t vocab = 128256;
	float *logits = malloc(vocab * sizeof(*logits));
	struct sampling_params p = { .temperature = 0.8f, .top_p = 0.9f,
				     .top_k = 50, .min_p = 0.01f,
				     .logprobs = true, .top_logprobs = 20,
				     .seed = 1 };
	struct sampler_result a, b;

	assert_non_null(logits);
	for (uint32_t i = 0; i < vocab; i++)
		logits[i] = (float)(rng_unit(&r) * 20.0 - 10.0);
	assert_int_equal(engine_sample(logits, vocab, &p, 0, 0, &a), 0);
	assert_int_equal(ref_sample(logits, vocab, &p, 0, 0, &b), 0);
	assert_int_equal(a.token, b.token);
	assert_int_equal(a.n_top, 20);
	assert_memory_equal(&a, &b, sizeof(a));
	free(logits);
}

/* ------------------------------------------------------------------ */
/* (b) The engine against the naive sampler                            */
/* ------------------------------------------------------------------ */

static float random_temperature(struct rng *r)
{
	static const float edge[] = { 0.0f, 1e-6f, 1e-3f, 0.05f, 1.0f, 1.0f,
				      2.0f, 100.0f, 1e30f };

	if (rng_below(r, 3) == 0)
		return edge[rng_below(r, sizeof(edge) / sizeof(edge[0]))];
	return (float)(rng_unit(r) * 2.0 + 0.01);
}

static float random_top_p(struct rng *r)
{
	static const float edge[] = { 1.0f, 1.0f, 1e-6f, 0.5f, 0.9f,
				      0.999999f, 0.99999994f };

	if (rng_below(r, 2) == 0)
		return edge[rng_below(r, sizeof(edge) / sizeof(edge[0]))];
	return (float)(1.0 - rng_unit(r) * 0.999);
}

static void random_params(struct rng *r, uint32_t vocab,
			  struct sampling_params *p, struct sampling_bias *bias)
{
	memset(p, 0, sizeof(*p));
	p->temperature = random_temperature(r);
	p->top_p = random_top_p(r);
	switch (rng_below(r, 5)) {
	case 0: p->top_k = 0; break;
	case 1: p->top_k = 1 + rng_below(r, 3); break;
	case 2: p->top_k = 1 + rng_below(r, vocab); break;
	case 3: p->top_k = vocab + rng_below(r, 3); break;
	default: p->top_k = 1 + rng_below(r, 100); break;
	}
	switch (rng_below(r, 4)) {
	case 0: p->min_p = (float)rng_unit(r) * 0.3f; break;
	case 1: p->min_p = rng_below(r, 2) ? 1.0f : 1e-6f; break;
	default: p->min_p = 0.0f; break;
	}
	p->seed = rng_next(r);
	p->logprobs = rng_below(r, 2);
	p->top_logprobs = p->logprobs ? rng_below(r, SAMPLER_MAX_LOGPROBS + 1) : 0;
	if (rng_below(r, 3) == 0) {
		/* Distinct tokens: a stride through the vocabulary. */
		uint32_t n = 1 + rng_below(r, vocab < 50 ? vocab : 50);
		uint32_t start = rng_below(r, vocab);

		for (uint32_t i = 0; i < n; i++) {
			bias[i].token = (int32_t)((start + i * 7919ull) % vocab);
			bias[i].bias = rng_below(r, 3) == 0 ? SAMPLER_BIAS_BAN :
				       (float)(rng_unit(r) * 200.0 - 100.0);
		}
		/* 7919 is prime: repeats only when vocab divides by it. */
		if (vocab % 7919 == 0)
			n = 1;
		p->bias = bias;
		p->n_bias = n;
	}
}

static void random_logits(struct rng *r, float *logits, uint32_t vocab)
{
	uint32_t mode = rng_below(r, 6);
	double scale = rng_unit(r) * 30.0;

	for (uint32_t i = 0; i < vocab; i++) {
		switch (mode) {
		case 0:	/* few distinct values: ties everywhere */
			logits[i] = (float)rng_below(r, 4);
			break;
		case 1:	/* all equal */
			logits[i] = 2.5f;
			break;
		case 2:	/* huge magnitudes */
			logits[i] = (float)((rng_unit(r) - 0.5) * 1e38);
			break;
		case 3:	/* a peaked distribution */
			logits[i] = (float)(-rng_unit(r) * scale) +
				    (rng_below(r, 100) == 0 ? 20.0f : 0.0f);
			break;
		default:
			logits[i] = (float)((rng_unit(r) - 0.5) * scale);
			break;
		}
		if (rng_below(r, 20) == 0)
			logits[i] = -INFINITY;
	}
	if (rng_below(r, 30) == 0)	/* sometimes every token masked */
		for (uint32_t i = 0; i < vocab; i++)
			logits[i] = -INFINITY;
}

static void test_random_vs_naive(void **state)
{
	struct rng r = rng_for(1);
	struct sampling_bias bias[50];
	uint32_t n_cases = 3000, n_errors = 0, n_sampled = 0;

	for (uint32_t c = 0; c < n_cases; c++) {
		uint32_t vocab = 1 + rng_below(&r, 5000);
		struct sampling_params p;
		struct sampler *s;
		float *logits;

		if (c % 500 == 499)
			vocab = c % 1000 == 999 ? 128000 : 32000;
		logits = malloc(vocab * sizeof(*logits));
		assert_non_null(logits);
		random_logits(&r, logits, vocab);
		random_params(&r, vocab, &p, bias);
		s = sampler_create(vocab);
		assert_non_null(s);
		for (uint32_t k = 0; k < 4; k++) {
			struct sampler_result a, b;
			uint32_t choice = rng_below(&r, 3);
			int ra, rb;

			/* Both kernels where the CPU has AVX2: odd draws
			 * portable, even ones AVX2. */
			assert_int_equal(sampler_set_isa(s, sampler_isa_supported(
				SAMPLER_ISA_AVX2) && k % 2 == 0 ? SAMPLER_ISA_AVX2 :
				SAMPLER_ISA_PORTABLE), 0);
			ra = sampler_sample(s, logits, &p, k, choice, &a);
			rb = ref_sample(logits, vocab, &p, k, choice, &b);

			if (ra != rb || memcmp(&a, &b, sizeof(a))) {
				print_error("case %u k %u (%s): vocab %u T %g top_p %.9g "
					    "top_k %u min_p %g n_bias %u: engine %d "
					    "token %d lp %a, naive %d token %d lp %a\n",
					    c, k, s->k->name,
					    vocab, p.temperature, p.top_p,
					    p.top_k, p.min_p, p.n_bias, ra, a.token,
					    a.logprob, rb, b.token, b.logprob);
				fail();
			}
			n_errors += ra != 0;
			n_sampled += ra == 0 && p.temperature > 0.0f;
		}
		sampler_destroy(s);
		free(logits);
	}
	printf("random_vs_naive: %u cases x 4 draws, %u sampled, %u errors, "
	       "all identical\n", n_cases, n_sampled, n_errors);
}

/* ------------------------------------------------------------------ */
/* (b1) Penalties against the naive definition                         */
/* ------------------------------------------------------------------ */

/* The naive side (ref_sample_hist()) scans the whole history for every
 * token of the vocabulary: the definition read literally. */

static float random_penalty(struct rng *r)
{
	switch (rng_below(r, 4)) {
	case 0: return 0.0f;
	case 1: return rng_below(r, 2) ? 2.0f : -2.0f;
	default: return (float)(rng_unit(r) * 4.0 - 2.0);
	}
}

static void test_penalties_vs_naive(void **state)
{
	struct rng r = rng_for(21);
	struct sampling_bias bias[50];
	uint32_t n_cases = 600, n_pen = 0;

	for (uint32_t c = 0; c < n_cases; c++) {
		uint32_t vocab = 1 + rng_below(&r, 1500);
		uint32_t n_tokens = rng_below(&r, 300), n_prompt;
		/* a few distinct tokens, so the history repeats */
		uint32_t span = 1 + rng_below(&r, vocab < 40 ? vocab : 40);
		struct sampling_params p;
		struct sampling_history h;
		int32_t *hist = malloc((n_tokens + 1) * sizeof(*hist));
		float *logits = malloc(vocab * sizeof(*logits));
		struct sampler *s = sampler_create(vocab);

		assert_true(hist && logits && s);
		n_prompt = n_tokens ? rng_below(&r, n_tokens + 1) : 0;
		for (uint32_t i = 0; i < n_tokens; i++)
			hist[i] = (int32_t)(rng_below(&r, 4) ? rng_below(&r, span) :
					    rng_below(&r, vocab));
		random_logits(&r, logits, vocab);
		random_params(&r, vocab, &p, bias);
		p.presence_penalty = random_penalty(&r);
		p.frequency_penalty = random_penalty(&r);
		switch (rng_below(&r, 4)) {
		case 0: p.repetition_penalty = 1.0f; break;
		case 1: p.repetition_penalty = 0.0f; break;	/* unset: off */
		case 2: p.repetition_penalty = (float)(0.01 + rng_unit(&r) * 3.0); break;
		default: p.repetition_penalty = rng_below(&r, 2) ? 1e-30f : 1e30f; break;
		}
		n_pen += sampling_params_penalized(&p);
		h = (struct sampling_history){ hist, n_tokens, n_prompt };
		for (uint32_t k = 0; k < 3; k++) {
			struct sampler_result a, b;
			uint32_t choice = rng_below(&r, 3);
			int ra, rb;

			assert_int_equal(sampler_set_isa(s, sampler_isa_supported(
				SAMPLER_ISA_AVX2) && k % 2 == 0 ? SAMPLER_ISA_AVX2 :
				SAMPLER_ISA_PORTABLE), 0);
			ra = sampler_sample_row(s, logits, &p, &h, k, choice, &a);
			rb = ref_sample_hist(logits, vocab, &p, &h, k, choice, &b);
			if (ra != rb || memcmp(&a, &b, sizeof(a))) {
				print_error("case %u k %u: vocab %u history %u "
					    "(prompt %u) presence %g frequency %g "
					    "repetition %g T %g: engine %d token %d "
					    "lp %a, naive %d token %d lp %a\n", c, k,
					    vocab, n_tokens, n_prompt,
					    p.presence_penalty, p.frequency_penalty,
					    p.repetition_penalty, p.temperature, ra,
					    a.token, a.logprob, rb, b.token, b.logprob);
				fail();
			}
		}
		/* the scratch is left zeroed for the next row */
		for (uint32_t v = 0; v < vocab; v++)
			assert_int_equal(s->pen_count[v], 0);
		sampler_destroy(s);
		free(hist);
		free(logits);
	}
	printf("penalties_vs_naive: %u cases x 3 draws (%u penalized), "
	       "all identical\n", n_cases, n_pen);
}

/* A strong penalty moves greedy off a repeated token; bad histories and
 * ranges are errors. */
static void test_penalties_edges(void **state)
{
	float logits[8] = { 0, 0, 0, 5, 0, 0, 0, 4 };
	const int32_t hist[] = { 3, 1, 3, 3, 9 };
	struct sampling_params p = SAMPLING_PARAMS_GREEDY;
	struct sampling_history h = { hist, 4, 1 };
	struct sampler_result out;
	struct sampler *s = sampler_create(8);
	char err[160];

	assert_non_null(s);
	assert_int_equal(sampler_sample_row(s, logits, &p, &h, 0, 0, &out), 0);
	assert_int_equal(out.token, 3);
	/* token 3: generated twice, 5 - 2 x 0.6 < 4 */
	p.frequency_penalty = 0.6f;
	assert_int_equal(sampler_sample_row(s, logits, &p, &h, 0, 0, &out), 0);
	assert_int_equal(out.token, 7);
	/* presence alone: 5 - 0.9 > 4; 5 - 1.1 < 4 */
	p.frequency_penalty = 0.0f;
	p.presence_penalty = 0.9f;
	assert_int_equal(sampler_sample_row(s, logits, &p, &h, 0, 0, &out), 0);
	assert_int_equal(out.token, 3);
	p.presence_penalty = 1.1f;
	assert_int_equal(sampler_sample_row(s, logits, &p, &h, 0, 0, &out), 0);
	assert_int_equal(out.token, 7);
	/* a prompt-only token is not penalized by presence */
	h = (struct sampling_history){ hist, 1, 1 };
	assert_int_equal(sampler_sample_row(s, logits, &p, &h, 0, 0, &out), 0);
	assert_int_equal(out.token, 3);
	/* but is by repetition (over prompt + generated) */
	p.presence_penalty = 0.0f;
	p.repetition_penalty = 1.3f;
	assert_int_equal(sampler_sample_row(s, logits, &p, &h, 0, 0, &out), 0);
	assert_int_equal(out.token, 7);
	/* a token outside the vocabulary, a prompt past the history */
	h = (struct sampling_history){ hist, 5, 1 };
	assert_int_equal(sampler_sample_row(s, logits, &p, &h, 0, 0, &out), -EINVAL);
	h = (struct sampling_history){ hist, 2, 3 };
	assert_int_equal(sampler_sample_row(s, logits, &p, &h, 0, 0, &out), -EINVAL);
	for (uint32_t v = 0; v < 8; v++)
		assert_int_equal(s->pen_count[v], 0);
	/* ranges */
	p = SAMPLING_PARAMS_GREEDY;
	p.presence_penalty = 2.5f;
	assert_int_equal(validate(&p, 8, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "presence_penalty"));
	p.presence_penalty = 0.0f;
	p.frequency_penalty = NAN;
	assert_int_equal(validate(&p, 8, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "frequency_penalty"));
	p.frequency_penalty = -2.0f;
	p.repetition_penalty = -1.0f;
	assert_int_equal(validate(&p, 8, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "repetition_penalty"));
	p.repetition_penalty = INFINITY;
	assert_int_equal(validate(&p, 8, err, sizeof(err)), -EINVAL);
	p.repetition_penalty = 1.5f;
	assert_int_equal(validate(&p, 8, err, sizeof(err)), 0);
	sampler_destroy(s);
}

/* ------------------------------------------------------------------ */
/* (b2) The AVX2 kernels against the portable ones                     */
/* ------------------------------------------------------------------ */

/*
 * Logits for the kernel test: random_logits() and, on top, rows that
 * stress the weight's float operations: differences from the maximum at
 * every scale (denormal ones too), values around the cut-off at
 * SAMPLER_X_MIN, and tails that are not a multiple of 8 or 16 lanes.
 */
static void kernel_logits(struct rng *r, float *y, uint32_t vocab)
{
	random_logits(r, y, vocab);
	if (rng_below(r, 2) == 0)
		return;
	for (uint32_t i = 0; i < vocab; i++) {
		switch (rng_below(r, 5)) {
		case 0:	/* a tiny difference, denormal ones included */
			y[i] = 1.0f - ldexpf((float)rng_unit(r), -(int)rng_below(r, 150));
			break;
		case 1:	/* any scale */
			y[i] = -ldexpf((float)rng_unit(r), (int)rng_below(r, 100) - 50);
			break;
		case 2:	/* near the cut-off at temperature 1 */
			y[i] = 1.0f + SAMPLER_X_MIN / 1.44269504f +
			       (float)(rng_unit(r) - 0.5) * 1e-3f;
			break;
		case 3:
			y[i] = -INFINITY;
			break;
		default:
			y[i] = (float)((rng_unit(r) - 0.5) * 40.0);
			break;
		}
	}
	y[rng_below(r, vocab)] = 1.0f;
}

static float kernel_temperature(struct rng *r)
{
	static const float edge[] = { 1e-45f, 1e-40f, 1e-38f, 1e-30f, 1e-6f,
				      1.0f, 3e38f, 1e30f };

	if (rng_below(r, 2) == 0)
		return edge[rng_below(r, sizeof(edge) / sizeof(edge[0]))];
	return ldexpf((float)rng_unit(r) + 0.01f, (int)rng_below(r, 20) - 10);
}

/* Each kernel on both paths: the same results to the bit. */
static void kernels_agree(struct rng *r, struct sampler *a, struct sampler *b,
			  const float *y, uint32_t vocab)
{
	bool bad_a, bad_b;
	float max_a = sampler_row_max(a, y, &bad_a);
	float max_b = sampler_row_max(b, y, &bad_b);
	float scale = sampler_weight_scale(kernel_temperature(r));
	uint32_t t, bar, from, n, cap, k;
	uint64_t za, zb, target;

	/* == and not the bits: a maximum of +0 or -0 gives the same W. */
	assert_true(bad_a == bad_b);
	if (bad_a)
		return;
	assert_true(max_a == max_b);
	if (max_a == -INFINITY)
		return;
	assert_int_equal(sampler_argmax(a, max_a), sampler_argmax(b, max_b));
	/* The gathering: none, a fixed bar low (many gathered: past the
	 * cap) or anywhere, or top_k's rising bar. */
	sampler_gather_none(a);
	k = 0;
	switch (rng_below(r, 4)) {
	case 0:
		break;
	case 1:
		sampler_set_gather_bar(a, (uint32_t)rng_below(r, 64));
		break;
	case 2:
		sampler_set_gather_bar(a, (uint32_t)rng_below(r, SAMPLER_WEIGHT_ONE));
		break;
	default:
		k = 1 + rng_below(r, vocab < SAMPLER_TOP_K_GATHER_MAX ? vocab : SAMPLER_TOP_K_GATHER_MAX);
		a->gather_k = k;
		sampler_set_gather_bar(a, 0);
		a->gather_limit = vocab;
		a->gather_cap = 4 * k;
		break;
	}
	sampler_set_gather_bar(b, a->gather_bar);
	b->gather_k = a->gather_k;
	b->gather_limit = a->gather_limit;
	b->gather_cap = a->gather_cap;
	za = sampler_weights(a, max_a, scale);
	zb = sampler_weights(b, max_b, scale);
	/* top_k's buffer may compact at other moments: its final set is
	 * what both must hold. */
	if (k)
		assert_int_equal(sampler_top_k_gathered(a, k),
				 sampler_top_k_gathered(b, k));
	assert_int_equal(a->n_by_id, b->n_by_id);
	if (a->n_by_id != SAMPLER_NOT_GATHERED)
		assert_memory_equal(a->by_id, b->by_id,
				    a->n_by_id * sizeof(*a->by_id));
	if (za != zb || memcmp(a->w, b->w, vocab * sizeof(*a->w))) {
		for (uint32_t i = 0; i < vocab; i++)
			if (a->w[i] != b->w[i]) {
				print_error("vocab %u token %u: y %a max %a scale %a: "
					    "W %u (avx2) vs %u (portable)\n", vocab,
					    i, y[i], max_a, scale, a->w[i], b->w[i]);
				break;
			}
		fail_msg("Z %" PRIu64 " vs %" PRIu64, za, zb);
	}
	assert_memory_equal(a->block_sum, b->block_sum,
			    a->n_blocks * sizeof(*a->block_sum));
	/* top_p's histogram and its bucket (Z >= 2^30: the maximum's W). */
	target = 1 + rng_next(r) % za;
	assert_int_equal(sampler_top_p_histogram(a, target),
			 sampler_top_p_histogram(b, target));
	/* The masses too, where a wrong one need not move this cut. */
	assert_memory_equal(a->hist_mass + SAMPLER_BUCKET_ONE,
			    b->hist_mass + SAMPLER_BUCKET_ONE,
			    (SAMPLER_N_BUCKETS - SAMPLER_BUCKET_ONE) *
			    sizeof(a->hist_mass[0]));
	t = rng_below(r, 2) ? rng_below(r, 64) : rng_below(r, SAMPLER_WEIGHT_ONE + 2);
	assert_int_equal(sampler_block_sums(a, t), sampler_block_sums(b, t));
	assert_memory_equal(a->block_sum, b->block_sum,
			    a->n_blocks * sizeof(*a->block_sum));
	/* top_p's bracket pass: buckets [b_lo, b_hi] around the row's. */
	t = sampler_bucket(1 + a->w[rng_below(r, vocab)]);
	bar = rng_below(r, 4) ? sampler_bucket(1 + a->w[rng_below(r, vocab)]) :
	      SAMPLER_BUCKET_ONE;
	if (bar > t) {
		uint32_t tmp = bar;

		bar = t;
		t = tmp;
	}
	assert_int_equal(a->k->bracket_pass(a, bar, t),
			 b->k->bracket_pass(b, bar, t));
	assert_memory_equal(a->block_sum, b->block_sum,
			    a->n_blocks * sizeof(*a->block_sum));
	assert_int_equal(a->n_by_id, b->n_by_id);
	assert_memory_equal(a->by_id, b->by_id, a->n_by_id * sizeof(*a->by_id));
	bar = rng_below(r, 2) ? rng_below(r, 4) : a->w[rng_below(r, vocab)];
	from = rng_below(r, vocab + 1);
	assert_int_equal(a->k->next_above(a, from, bar),
			 b->k->next_above(b, from, bar));
	cap = rng_below(r, 2) ? vocab : rng_below(r, vocab + 1);
	n = sampler_gather_above(a, bar, cap);
	assert_int_equal(n, sampler_gather_above(b, bar, cap));
	if (n != SAMPLER_NOT_GATHERED)
		assert_memory_equal(a->by_id, b->by_id, n * sizeof(*a->by_id));
}

static void test_avx2_matches_portable(void **state)
{
	struct rng r = rng_for(9);
	uint32_t n_rows = 0;

	if (!sampler_isa_supported(SAMPLER_ISA_AVX2)) {
		printf("avx2_matches_portable: this CPU has no AVX2: skipped\n");
		skip();
	}
	for (uint32_t c = 0; c < 1500; c++) {
		uint32_t vocab = c % 300 == 299 ? 32000 + rng_below(&r, 16) :
				 1 + rng_below(&r, 3000);
		struct sampler *a = sampler_create(vocab), *b = sampler_create(vocab);
		float *y = malloc(vocab * sizeof(*y));

		assert_non_null(a);
		assert_non_null(b);
		assert_non_null(y);
		/* the tables themselves, as sampler_create() would pick them */
		assert_int_equal(sampler_set_isa(a, SAMPLER_ISA_AVX2), 0);
		assert_int_equal(sampler_set_isa(b, SAMPLER_ISA_PORTABLE), 0);
		assert_true(a->k == &sampler_kernels_avx2);
		assert_true(b->k == &sampler_kernels_portable);
		kernel_logits(&r, y, vocab);
		/* A NaN or +inf now and then, anywhere (the tail included). */
		if (rng_below(&r, 10) == 0)
			y[rng_below(&r, vocab)] = rng_below(&r, 2) ? NAN : INFINITY;
		a->y = b->y = y;
		for (int k = 0; k < 3; k++, n_rows++)
			kernels_agree(&r, a, b, y, vocab);
		sampler_destroy(a);
		sampler_destroy(b);
		free(y);
	}
	printf("avx2_matches_portable: %u rows, every kernel identical\n", n_rows);
}

/* ------------------------------------------------------------------ */
/* (c) Chi-square goodness of fit                                      */
/* ------------------------------------------------------------------ */

#define CHI_DRAWS 200000u
#define CHI_VOCAB 40u

/*
 * The upper 1e-6 quantile of chi-square with df degrees of freedom, by
 * Wilson and Hilferty's cube-root normal approximation (within about 1%
 * here, for df >= 3; it errs high: df 6 gives 39.7 for the exact 38.3,
 * df 39 96.6 for 96.1, by a Python incomplete-gamma bisection), and
 * 4.7534 is the normal's upper 1e-6 quantile.  A
 * correct sampler fails one such test with probability at most about
 * 1e-6 (8 cases: under 1e-5 for the test); the seeds are fixed, so a run
 * is deterministic and this is the chance that the fixed seeds are bad.
 */
static double chi2_critical(uint32_t df)
{
	double h = 2.0 / (9.0 * df);

	return df * pow(1.0 - h + 4.7534 * sqrt(h), 3.0);
}

/*
 * Chi-square of counts against the kept set of the naive sampler's
 * definition, with expected probabilities from libm's exp in double (the
 * softmax itself, not the weights the samplers share), cells with an
 * expected count under 5 pooled into one; *df = cells - 1.
 */
static double chi2_stat(const uint32_t *counts, const struct ref_row *row,
			float max_y, float temperature, uint32_t n,
			uint32_t *df)
{
	double total = 0.0, chi2 = 0.0, pool_e = 0.0;
	uint32_t cells = 0, pool_o = 0;

	for (uint32_t i = 0; i < row->vocab; i++)
		if (row->keep[i])
			total += exp(((double)row->y[i] - max_y) / temperature);
	for (uint32_t i = 0; i < row->vocab; i++) {
		double e;

		if (!row->keep[i]) {
			/* A token outside the kept set must never come. */
			assert_int_equal(counts[i], 0);
			continue;
		}
		e = (double)n * exp(((double)row->y[i] - max_y) / temperature) /
		    total;
		if (e < 5.0) {
			pool_e += e;
			pool_o += counts[i];
			continue;
		}
		chi2 += (counts[i] - e) * (counts[i] - e) / e;
		cells++;
	}
	if (pool_e > 0.0) {
		chi2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
		cells++;
	}
	*df = cells - 1;
	return chi2;
}

enum chi_sampler { CHI_ENGINE, CHI_BIASED_U, CHI_DROP_LAST };

/* Draw CHI_DRAWS tokens (k = 0 .. n-1) with the engine or a broken one. */
static void chi_counts(const float *logits, const struct sampling_params *p,
		       struct ref_row *row, enum chi_sampler how,
		       uint32_t *counts)
{
	struct sampler *s = sampler_create(CHI_VOCAB);
	struct sampler_result res;
	uint32_t last = 0;

	assert_non_null(s);
	memset(counts, 0, CHI_VOCAB * sizeof(*counts));
	for (uint32_t i = 0; i < CHI_VOCAB; i++)
		if (row->keep[i])
			last = i;
	for (uint32_t k = 0; k < CHI_DRAWS; k++) {
		uint64_t r53 = philox_bits53(p->seed, k, 0);
		double u = philox_uniform(p->seed, k, 0);
		uint32_t t;

		if (how == CHI_ENGINE) {
			assert_int_equal(sampler_sample(s, logits, p, k, 0, &res), 0);
			t = (uint32_t)res.token;
		} else if (how == CHI_BIASED_U) {
			t = ref_draw(row, (uint64_t)(pow(u, 1.1) * 0x1p53));
		} else {
			row->keep[last] = false;
			t = ref_draw(row, r53);
			row->keep[last] = true;
		}
		counts[t]++;
	}
	sampler_destroy(s);
}

static void test_chi_square(void **state)
{
	static const struct {
		float temperature, top_p, min_p;
		uint32_t top_k;
	} cases[] = {
		{ 1.0f, 1.0f, 0.0f, 0 },
		{ 0.5f, 1.0f, 0.0f, 0 },
		{ 2.0f, 1.0f, 0.0f, 0 },
		{ 1.0f, 1.0f, 0.0f, 10 },
		{ 0.8f, 0.9f, 0.0f, 0 },
		{ 1.0f, 0.5f, 0.0f, 0 },
		{ 1.3f, 1.0f, 0.1f, 0 },
		{ 1.0f, 0.8f, 0.02f, 20 },
	};
	float logits[CHI_VOCAB];
	uint32_t counts[CHI_VOCAB];
	struct ref_row row = { .vocab = CHI_VOCAB };
	float y[CHI_VOCAB];
	uint32_t w[CHI_VOCAB];
	bool keep[CHI_VOCAB];
	uint32_t order[CHI_VOCAB], tmp[CHI_VOCAB];

	row.y = y; row.w = w; row.keep = keep;
	row.order = order; row.tmp = tmp;
	/* A fixed, uneven logit vector with a few ties. */
	for (uint32_t i = 0; i < CHI_VOCAB; i++)
		logits[i] = (float)(3.0 * sin(i * 1.7) + (i % 7 == 0 ? 1.5 : 0.0));
	/* The last id ties with the most likely token, so it is kept in
	 * every case and dropping it (CHI_DROP_LAST) moves real mass: a
	 * token of probability q moves about CHI_DRAWS * q of chi-square, so
	 * this test sees a dropped token of q >= ~5e-4, not a rarer one. */
	logits[CHI_VOCAB - 1] = logits[0];
	for (uint32_t i = 0; i < CHI_VOCAB - 1; i++)
		if (logits[i] > logits[CHI_VOCAB - 1])
			logits[CHI_VOCAB - 1] = logits[i];
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct sampling_params p = {
			.temperature = cases[c].temperature,
			.top_p = cases[c].top_p, .top_k = cases[c].top_k,
			.min_p = cases[c].min_p, .seed = 1000 + c };
		double good, bad_u, bad_drop, crit;
		uint32_t df, df_u, df_drop, max_id = 0;

		for (uint32_t i = 0; i < CHI_VOCAB; i++) {
			y[i] = logits[i];
			if (y[i] > y[max_id])
				max_id = i;
		}
		ref_weigh(&row, y[max_id], p.temperature);
		ref_cut(&row, &p);

		chi_counts(logits, &p, &row, CHI_ENGINE, counts);
		good = chi2_stat(counts, &row, y[max_id], p.temperature, CHI_DRAWS, &df);
		crit = chi2_critical(df);
		chi_counts(logits, &p, &row, CHI_BIASED_U, counts);
		bad_u = chi2_stat(counts, &row, y[max_id], p.temperature, CHI_DRAWS,
				  &df_u);
		chi_counts(logits, &p, &row, CHI_DROP_LAST, counts);
		bad_drop = chi2_stat(counts, &row, y[max_id], p.temperature,
				     CHI_DRAWS, &df_drop);
		printf("chi2 case %zu (T %g top_p %g top_k %u min_p %g): df %u, "
		       "critical(1e-6) %.1f: engine %.1f, u^1.1 %.1f, "
		       "last kept dropped %.1f\n", c, p.temperature, p.top_p,
		       p.top_k, p.min_p, df, crit, good, bad_u, bad_drop);
		assert_true(good < crit);
		assert_true(bad_u > chi2_critical(df_u));
		assert_true(bad_drop > chi2_critical(df_drop));
	}
}

/* ------------------------------------------------------------------ */
/* (d) Logprobs                                                        */
/* ------------------------------------------------------------------ */

static void test_logprobs_full(void **state)
{
	struct rng r = rng_for(4);

	for (int c = 0; c < 200; c++) {
		uint32_t vocab = 1 + rng_below(&r, SAMPLER_MAX_LOGPROBS);
		float logits[SAMPLER_MAX_LOGPROBS];
		struct sampling_params p = {
			.temperature = c % 4 ? (float)(rng_unit(&r) * 3.0 + 0.05) : 0.0f,
			.top_p = (float)(rng_unit(&r) * 0.9 + 0.1),
			.top_k = rng_below(&r, 4), .seed = rng_next(&r),
			.logprobs = true, .top_logprobs = vocab };
		struct sampler_result res;
		double sum = 0.0;
		bool chosen_listed = false;

		for (uint32_t i = 0; i < vocab; i++)
			logits[i] = (float)rng_below(&r, 5) * (float)rng_unit(&r) * 4.0f;
		assert_int_equal(engine_sample(logits, vocab, &p, (uint32_t)c, 0, &res), 0);
		/* Tokens of weight 0 (under 2^-30 of the top one) are not
		 * listed; they hold no mass, so the listed ones sum to 1. */
		assert_true(res.n_top >= 1 && res.n_top <= vocab);
		for (uint32_t j = 0; j < res.n_top; j++) {
			sum += exp(res.top[j].logprob);
			if (j > 0) {
				/* Decreasing, ties by increasing id. */
				assert_true(res.top[j - 1].logprob >= res.top[j].logprob);
				if (res.top[j - 1].logprob == res.top[j].logprob)
					assert_true(res.top[j - 1].token < res.top[j].token);
			}
			if (res.top[j].token == res.token) {
				chosen_listed = true;
				assert_true(res.top[j].logprob == res.logprob);
			}
		}
		assert_true(chosen_listed);
		if (fabs(sum - 1.0) > 1e-6) {
			print_error("vocab %u T %g: exp(logprobs) sums to %.9f\n",
				    vocab, p.temperature, sum);
			fail();
		}
	}
}

/* ------------------------------------------------------------------ */
/* (e) Errors                                                          */
/* ------------------------------------------------------------------ */

static void test_row_errors(void **state)
{
	float logits[4] = { 1, 2, 3, 4 };
	struct sampling_bias ban_all[4] = { { 0, -100 }, { 1, -100 },
					    { 2, -100 }, { 3, -100 } };
	struct sampling_bias out_of_range[1] = { { 4, 1 } };
	struct sampling_params p = { .temperature = 1.0f, .top_p = 1.0f,
				     .bias = ban_all, .n_bias = 4 };
	struct sampler_result res;

	for (int t = 0; t < 2; t++) {
		p.temperature = (float)t;
		assert_int_equal(engine_sample(logits, 4, &p, 0, 0, &res), -ENOENT);
		assert_int_equal(ref_sample(logits, 4, &p, 0, 0, &res), -ENOENT);
	}
	p.n_bias = 0;
	logits[2] = NAN;
	assert_int_equal(engine_sample(logits, 4, &p, 0, 0, &res), -EDOM);
	logits[2] = INFINITY;
	assert_int_equal(engine_sample(logits, 4, &p, 0, 0, &res), -EDOM);
	p.temperature = 0.0f;
	assert_int_equal(engine_sample(logits, 4, &p, 0, 0, &res), -EDOM);
	for (int i = 0; i < 4; i++)
		logits[i] = -INFINITY;
	assert_int_equal(engine_sample(logits, 4, &p, 0, 0, &res), -ENOENT);
	logits[0] = 0;
	p.bias = out_of_range;	/* not validated: still no crash */
	p.n_bias = 1;
	assert_int_equal(engine_sample(logits, 4, &p, 0, 0, &res), -EINVAL);
	assert_string_equal(sampler_strerror(-EDOM),
			    "the model produced a NaN or +inf logit");
}

static void expect_invalid(const struct sampling_params *p, uint32_t vocab,
			   const char *needle)
{
	char err[200];

	assert_int_equal(validate(p, vocab, err, sizeof(err)), -EINVAL);
	if (!strstr(err, needle)) {
		print_error("message \"%s\" lacks \"%s\"\n", err, needle);
		fail();
	}
}

static void test_validate(void **state)
{
	static struct sampling_bias bias[SAMPLER_MAX_BIAS + 1];
	struct sampling_params ok = { .temperature = 0.7f, .top_p = 0.9f,
				      .top_k = 40, .min_p = 0.05f,
				      .logprobs = true, .top_logprobs = 20 };
	struct sampling_params p;
	char err[200];

	assert_int_equal(validate(&ok, 100, err, sizeof(err)), 0);
	p = SAMPLING_PARAMS_GREEDY;
	assert_int_equal(validate(&p, 100, err, sizeof(err)), 0);
	p = ok; p.temperature = -0.1f;
	expect_invalid(&p, 100, "temperature -0.1");
	p = ok; p.temperature = NAN;
	expect_invalid(&p, 100, "temperature");
	p = ok; p.temperature = INFINITY;
	expect_invalid(&p, 100, "temperature");
	p = ok; p.top_p = 0.0f;
	expect_invalid(&p, 100, "top_p 0: must be in (0, 1]");
	p = ok; p.top_p = 1.5f;
	expect_invalid(&p, 100, "top_p 1.5");
	p = ok; p.top_p = NAN;
	expect_invalid(&p, 100, "top_p");
	p = ok; p.min_p = -0.5f;
	expect_invalid(&p, 100, "min_p -0.5");
	p = ok; p.min_p = 2.0f;
	expect_invalid(&p, 100, "min_p 2");
	p = ok; p.top_logprobs = 21;
	expect_invalid(&p, 100, "top_logprobs 21: at most 20");
	p = ok; p.logprobs = false;
	expect_invalid(&p, 100, "needs logprobs");
	for (int i = 0; i <= SAMPLER_MAX_BIAS; i++)
		bias[i] = (struct sampling_bias){ i, 1.0f };
	p = ok; p.bias = bias; p.n_bias = SAMPLER_MAX_BIAS;
	assert_int_equal(validate(&p, 1000, err, sizeof(err)), 0);
	p.n_bias = SAMPLER_MAX_BIAS + 1;
	expect_invalid(&p, 1000, "logit_bias has 301 entries: at most 300");
	p.n_bias = 3;
	expect_invalid(&p, 2, "logit_bias token 2: outside the vocabulary [0, 2)");
	bias[1].token = -1;
	expect_invalid(&p, 100, "logit_bias token -1");
	bias[1].token = 0;
	expect_invalid(&p, 100, "logit_bias token 0 appears twice");
	bias[1] = (struct sampling_bias){ 1, 100.5f };
	expect_invalid(&p, 100, "logit_bias for token 1 is 100.5");
	bias[1].bias = NAN;
	expect_invalid(&p, 100, "logit_bias for token 1");
	bias[1].bias = -100.0f;
	assert_int_equal(validate(&p, 100, err, sizeof(err)), 0);
	assert_null(sampler_create(0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_philox_known_answers),
		cmocka_unit_test(test_greedy),
		cmocka_unit_test(test_banned_never_sampled),
		cmocka_unit_test(test_top_k_ties_kept),
		cmocka_unit_test(test_top_p_ties_kept),
		cmocka_unit_test(test_top_p_exact_boundary),
		cmocka_unit_test(test_weight_accuracy),
		cmocka_unit_test(test_cut_vs_sort),
		cmocka_unit_test(test_min_p),
		cmocka_unit_test(test_seeded_draws_repeat),
		cmocka_unit_test(test_vocab_128k),
		cmocka_unit_test(test_random_vs_naive),
		cmocka_unit_test(test_penalties_vs_naive),
		cmocka_unit_test(test_penalties_edges),
		cmocka_unit_test(test_avx2_matches_portable),
		cmocka_unit_test(test_chi_square),
		cmocka_unit_test(test_logprobs_full),
		cmocka_unit_test(test_row_errors),
		cmocka_unit_test(test_validate),
	};

	test_seed_init("sampler");
	return cmocka_run_group_tests_name("sampler", tests, NULL, NULL);
}
