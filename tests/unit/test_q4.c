/*
 * test_q4.c - the Q4G weight type (lib/kernels/q4g.c, q4g_avx2.c; the
 * layout in dtype.h), each kernel against a naive reference written here
 * from the format's definition, not from the code under test.
 *
 * For random rows of K in {1, 7, 31, 32, 33, ..., 288, 1000, 1001}
 * values and groups G of 32, 64, 128 and 256:
 *  - the quantizer's bytes equal the naive quantizer's (scale, nibble
 *    order, zero padding of a partial group), memcmp;
 *  - (a) every dequantized value (get_row) is within the bound derived
 *    from its group's scale d: |x - x^| <= d / 2 + 16 u d (u = 2^-24;
 *    see dequant_bound()), and get_row is the naive d * q bit for bit;
 *  - (b) the matmul against a double-precision sum of the naively
 *    dequantized weights times the naively quantized activations, within
 *    gamma(n_groups + 4) * T (see matmul_bound(), which derives it);
 *  - (c) the AVX2 twin equal to the portable kernel bit for bit;
 *  - (d) batch invariance: a row's outputs the same bits at n_rows 1, 3
 *    and 64 and at any position among them, in both twins;
 *  - dtype_matrix_bytes, and hostile weights (nan, inf, huge, tiny) that
 *    quantize without a crash to codes the format defines.
 *
 * Randomized; prints its seed, SEED=<n> replays.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/q4g.h"
#include "kernels/tensor.h"
#include "tests/unit/test_rng.h"

static const uint32_t test_ks[] = { 1, 2, 7, 31, 32, 33, 63, 64, 65, 95,
				    127, 128, 129, 255, 257, 288, 1000, 1001 };
static const uint32_t test_groups[] = { 32, 64, 128, 256 };
#define N_KS (sizeof(test_ks) / sizeof(test_ks[0]))
#define N_GROUPS (sizeof(test_groups) / sizeof(test_groups[0]))
#define U 0x1p-24	/* fp32's unit roundoff */

/* ------------------------------------------------------ random inputs */

static float rng_unit(struct rng *r)	/* in [-1, 1) */
{
	return (float)((double)(rng_next(r) >> 11) * 0x1p-52 - 1.0);
}

/*
 * n values of one magnitude chosen per row (1e-3 .. 1e2), with, now and
 * then, zeros, an outlier, a run of one constant or of exact multiples
 * of a step (ties of the rounding) and a negative maximum.
 */
static void random_row(struct rng *r, float *x, size_t n)
{
	float mag = powf(10.0f, -3.0f + 5.0f * (float)rng_below(r, 1000) / 1000.0f);
	uint32_t kind = rng_below(r, 6);

	for (size_t i = 0; i < n; i++) {
		x[i] = mag * rng_unit(r);
		if (kind == 1 && rng_below(r, 4) == 0)
			x[i] = 0;
		if (kind == 2 && rng_below(r, 50) == 0)
			x[i] = 30 * mag;
		if (kind == 3)
			x[i] = mag;
		if (kind == 4)	/* k / 2 steps of 1: halfway codes */
			x[i] = (float)((int)rng_below(r, 15) - 7) * 0.5f;
	}
	if (kind == 5 && n)
		x[rng_below(r, (uint32_t)n)] = -2 * mag;
}

/* ------------------------------------------------------ naive references */

/* The format's quantizer (dtype.h): d = max |x| / 7 per group, q =
 * round(x / d) in -7..7, stored as 4-bit two's complement, byte j =
 * element j (low nibble) and element j + G/2 (high), padding 0. */
static void naive_quantize(unsigned char *dst, const float *x, size_t n,
			   uint32_t G)
{
	size_t ng = (n + G - 1) / G, gb = 4 + G / 2;

	memset(dst, 0, ng * gb);
	for (size_t g = 0; g < ng; g++) {
		size_t len = n - g * G < G ? n - g * G : G;
		float amax = 0, d;

		for (size_t i = 0; i < len; i++)
			if (fabsf(x[g * G + i]) > amax)
				amax = fabsf(x[g * G + i]);
		d = amax / 7;
		memcpy(dst + g * gb, &d, 4);
		for (size_t i = 0; d != 0 && i < len; i++) {
			long q = lroundf(x[g * G + i] / d);

			q = q > 7 ? 7 : q < -7 ? -7 : q;
			dst[g * gb + 4 + i % (G / 2)] |= (unsigned char)
				(((unsigned)q & 15) << (i < G / 2 ? 0 : 4));
		}
	}
}

/* Element i's code of the Q4G row at w, by the layout. */
static int naive_code(const unsigned char *w, size_t i, uint32_t G)
{
	const unsigned char *g = w + (i / G) * (4 + G / 2) + 4;
	size_t e = i % G;
	unsigned nib = e < G / 2 ? g[e] & 15 : g[e - G / 2] >> 4;

	return nib >= 8 ? (int)nib - 16 : (int)nib;
}

static float naive_scale(const unsigned char *w, size_t i, uint32_t G)
{
	float d;

	memcpy(&d, w + (i / G) * (4 + G / 2), 4);
	return d;
}

/* The activation quantizer by q4g.h's definition: per group of G, d_a =
 * max |x| / 127, q = round(x / d_a) in -127..127, 0 where d_a is 0. */
static void naive_act(float *da, int *qa, const float *x, size_t n,
		      uint32_t G)
{
	for (size_t g = 0; g * G < n; g++) {
		size_t len = n - g * G < G ? n - g * G : G;
		float amax = 0;

		for (size_t i = 0; i < len; i++)
			if (fabsf(x[g * G + i]) > amax)
				amax = fabsf(x[g * G + i]);
		da[g] = amax / 127;
		for (size_t i = 0; i < len; i++) {
			long q = da[g] != 0 ? lroundf(x[g * G + i] / da[g]) : 0;

			qa[g * G + i] = (int)(q > 127 ? 127 : q < -127 ? -127 : q);
		}
	}
}

/*
 * (a) The bound on |x - x^| for a value of a group with scale d (normal,
 * as every test row's is), x^ = fl(d * q):
 *   d = fl(amax / 7), so |x| / d <= amax / d <= 7 / (1 - u);
 *   y = fl(x / d) = (x / d)(1 + e), |e| <= u: |y - x / d| <= 7u / (1 - u);
 *   q = round(y), clamped to -7..7 (the clamp only cuts an excess of
 *   that rounding): |y - q| <= 1/2, so |x / d - q| <= 1/2 + 7u / (1 - u)
 *   and |x - d q| <= d / 2 + 7.01 u d;
 *   x^ = fl(d q) adds at most u |d q| <= 7 u d.
 * Total: d / 2 + 14.01 u d; we allow d / 2 + 16 u d.
 */
static double dequant_bound(float d)
{
	return (double)d / 2 + 16 * U * (double)d;
}

/*
 * (b) The bound on the matmul's error against E = sum over groups g of
 * dd_g * sum_i q_w[i] q_a[i] (dd_g = d_w d_a exactly), the dot of the
 * dequantized weights and the quantized activations.  The kernel forms
 * the lanes' integer sums L[g][l] exactly (|L| < 2^24), then
 *   dd = fl(d_w d_a) = dd_g (1 + e0),
 *   acc[l] = fl(L dd + acc[l]) group after group (fmaf: one rounding),
 *   out = three levels of pairwise sums of the 8 lanes.
 * Each term L[g][l] dd_g thus meets at most 1 + n_g + 3 roundings
 * (its dd, the n_g fmas of its lane's chain from its group on, the
 * tree), each a factor (1 + e), |e| <= u, so (Higham, Lemma 3.1)
 *   |out - E| <= gamma(n_g + 4) * sum_g dd_g sum_l |L[g][l]|
 *             <= gamma(n_g + 4) * T,  T = sum_g dd_g sum_i |q_w q_a|,
 * gamma(n) = n u / (1 - n u).  The double reference is off E by at most
 * (n_g + 1) 2^-53 T (dd_g and the integer sums are exact in double; one
 * rounding per product and per sum), added as slack.  No underflow: the
 * test's scales are normal and dd_g >= 2^-126 there.
 */
static double matmul_bound(size_t n_groups, double T)
{
	double n = (double)n_groups + 4;

	return (n * U / (1 - n * U) + ((double)n_groups + 1) * 0x1p-53) * T;
}

/* E and T of weight row w against activation row x (n values). */
static void naive_dot(const unsigned char *w, const float *x, size_t n,
		      uint32_t G, double *E, double *T)
{
	size_t ng = (n + G - 1) / G;
	float *da = malloc(ng * sizeof(float));
	int *qa = malloc(n * sizeof(int));

	assert_non_null(da);
	assert_non_null(qa);
	naive_act(da, qa, x, n, G);
	*E = *T = 0;
	for (size_t g = 0; g < ng; g++) {
		double dd = (double)naive_scale(w, g * G, G) * (double)da[g];
		long long s = 0, a = 0;

		for (size_t i = g * G; i < n && i < (g + 1) * G; i++) {
			long long p = (long long)naive_code(w, i, G) * qa[i];

			s += p;
			a += p < 0 ? -p : p;
		}
		*E += dd * (double)s;
		*T += dd * (double)a;
	}
	free(da);
	free(qa);
}

/* ------------------------------------------------------------ helpers */

static struct tensor q4_tensor(const unsigned char *data, uint32_t rows,
			       uint32_t cols, uint32_t G)
{
	return (struct tensor){
		.type = DTYPE_Q4G, .data = data, .n_layers = 1, .rows = rows,
		.cols = cols, .group = G,
		.layer_bytes = (size_t)dtype_matrix_bytes(DTYPE_Q4G, rows, cols, G),
	};
}

/* A random [rows][K] matrix quantized: its floats at *f, its bytes. */
static unsigned char *random_q4(struct rng *r, uint32_t rows, uint32_t K,
				uint32_t G, float **f)
{
	size_t bytes = (size_t)dtype_matrix_bytes(DTYPE_Q4G, rows, K, G);
	unsigned char *w = malloc(bytes);

	*f = malloc((size_t)rows * K * sizeof(float));
	assert_non_null(w);
	assert_non_null(*f);
	for (uint32_t o = 0; o < rows; o++)
		random_row(r, *f + (size_t)o * K, K);
	q4g_quantize_matrix(w, *f, rows, K, G);
	return w;
}

static const struct tensor_ops *avx2_ops(void)
{
	return tensor_ops_get(DTYPE_Q4G, LLAMA_KERNEL_AVX2);
}

/* -------------------------------------------------------------- tests */

static void test_matrix_bytes(void **state)
{
	(void)state;
	assert_int_equal(dtype_matrix_bytes(DTYPE_Q4G, 1, 1, 32), 20);
	assert_int_equal(dtype_matrix_bytes(DTYPE_Q4G, 1, 32, 32), 20);
	assert_int_equal(dtype_matrix_bytes(DTYPE_Q4G, 1, 33, 32), 40);
	assert_int_equal(dtype_matrix_bytes(DTYPE_Q4G, 3, 1000, 64), 3 * 16 * 36);
	assert_int_equal(dtype_matrix_bytes(DTYPE_Q4G, 2, 257, 256), 2 * 2 * 132);
	assert_int_equal(dtype_matrix_bytes(DTYPE_Q4G, 5, 0, 32), 0);
	/* groups not taken, and overflow */
	assert_int_equal(dtype_matrix_bytes(DTYPE_Q4G, 1, 32, 0), 0);
	assert_int_equal(dtype_matrix_bytes(DTYPE_Q4G, 1, 32, 16), 0);
	assert_int_equal(dtype_matrix_bytes(DTYPE_Q4G, 1, 96, 96), 0);
	assert_int_equal(dtype_matrix_bytes(DTYPE_Q4G, 1, 32, 512), 0);
	assert_int_equal(dtype_matrix_bytes(DTYPE_Q4G, UINT64_MAX / 8, 64, 32), 0);
	assert_string_equal(dtype_name(DTYPE_Q4G), "q4g");
	assert_int_equal(DTYPE_Q4G, 12);	/* append only */
}

/* The quantizer's bytes are the format's; (a) the dequantized values. */
static void test_quantize_dequant(void **state)
{
	struct rng r = rng_for(1);

	(void)state;
	for (size_t gi = 0; gi < N_GROUPS; gi++) {
		for (size_t ki = 0; ki < N_KS; ki++) {
			uint32_t G = test_groups[gi], K = test_ks[ki], rows = 4;
			float *f, *row = malloc(K * sizeof(float));
			unsigned char *w = random_q4(&r, rows, K, G, &f);
			size_t rb = (size_t)dtype_matrix_bytes(DTYPE_Q4G, 1, K, G);
			unsigned char *naive = malloc(rb);
			struct tensor t = q4_tensor(w, rows, K, G);

			assert_non_null(row);
			assert_non_null(naive);
			for (uint32_t o = 0; o < rows; o++) {
				const unsigned char *wr = w + o * rb;

				naive_quantize(naive, f + (size_t)o * K, K, G);
				assert_memory_equal(wr, naive, rb);
				q4g_get_row(row, &t, o);
				for (uint32_t i = 0; i < K; i++) {
					float d = naive_scale(wr, i, G);
					float want = d * (float)naive_code(wr, i, G);
					double err = fabs((double)f[(size_t)o * K + i] -
							  (double)row[i]);

					assert_memory_equal(&row[i], &want, 4);
					if (err > dequant_bound(d)) {
						fail_msg("K %u G %u row %u elem %u: |x - x^| %g > bound %g (d %g)",
							 K, G, o, i, err, dequant_bound(d), (double)d);
					}
				}
			}
			free(naive);
			free(row);
			free(w);
			free(f);
		}
	}
}

/* (b) against the naive dot, (c) portable == AVX2, for many shapes. */
static void test_matmul(void **state)
{
	struct rng r = rng_for(2);
	const struct tensor_ops *port = tensor_ops_get(DTYPE_Q4G,
						       LLAMA_KERNEL_PORTABLE);
	const struct tensor_ops *avx = avx2_ops();

	(void)state;
	if (!avx)
		printf("test_q4: no AVX2+FMA here, twin comparison skipped\n");
	for (size_t gi = 0; gi < N_GROUPS; gi++) {
		for (size_t ki = 0; ki < N_KS; ki++) {
			uint32_t G = test_groups[gi], K = test_ks[ki];
			uint32_t rows = 1 + rng_below(&r, 9), n = 1 + rng_below(&r, 7);
			float *f, *x = malloc((size_t)n * K * sizeof(float));
			unsigned char *w = random_q4(&r, rows, K, G, &f);
			struct tensor t = q4_tensor(w, rows, K, G);
			float *out = malloc((size_t)n * rows * sizeof(float));
			float *out2 = malloc((size_t)n * rows * sizeof(float));
			size_t rb = (size_t)dtype_matrix_bytes(DTYPE_Q4G, 1, K, G);

			assert_non_null(x);
			assert_non_null(out);
			assert_non_null(out2);
			for (uint32_t b = 0; b < n; b++)
				random_row(&r, x + (size_t)b * K, K);
			port->matmul(out, x, n, &t);
			for (uint32_t b = 0; b < n; b++) {
				for (uint32_t o = 0; o < rows; o++) {
					double E, T, got = out[b * rows + o];

					naive_dot(w + o * rb, x + (size_t)b * K, K, G, &E, &T);
					if (fabs(got - E) > matmul_bound((K + G - 1) / G, T))
						fail_msg("K %u G %u out %u row %u: %.9g, naive %.9g, |err| %g > bound %g",
							 K, G, o, b, got, E, fabs(got - E),
							 matmul_bound((K + G - 1) / G, T));
				}
			}
			if (avx) {
				avx->matmul(out2, x, n, &t);
				for (size_t i = 0; i < (size_t)n * rows; i++)
					if (memcmp(&out[i], &out2[i], 4))
						fail_msg("K %u G %u n %u: output %zu portable %.9g, avx2 %.9g",
							 K, G, n, i, (double)out[i], (double)out2[i]);
			}
			free(out2);
			free(out);
			free(w);
			free(f);
			free(x);
		}
	}
}

/* (d) a row's outputs at n_rows 1, 3 and 64 and at any position. */
static void test_batch_invariance(void **state)
{
	struct rng r = rng_for(3);
	const struct tensor_ops *ops[2] = {
		tensor_ops_get(DTYPE_Q4G, LLAMA_KERNEL_PORTABLE), avx2_ops(),
	};
	static const uint32_t shapes[][2] = { { 33, 32 }, { 288, 32 },
					      { 1001, 64 }, { 95, 128 },
					      { 257, 256 } };

	(void)state;
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		uint32_t K = shapes[s][0], G = shapes[s][1], rows = 13, big = 64;
		float *f, *x = malloc((size_t)big * K * sizeof(float));
		unsigned char *w = random_q4(&r, rows, K, G, &f);
		struct tensor t = q4_tensor(w, rows, K, G);
		float *one = malloc(rows * sizeof(float));
		float *many = malloc((size_t)big * rows * sizeof(float));

		assert_non_null(x);
		assert_non_null(one);
		assert_non_null(many);
		for (uint32_t b = 0; b < big; b++)
			random_row(&r, x + (size_t)b * K, K);
		for (int k = 0; k < 2; k++) {
			if (!ops[k])
				continue;
			/* every row alone, then at its place in 64 and in
			 * the 3 that end with it */
			ops[k]->matmul(many, x, big, &t);
			for (uint32_t b = 0; b < big; b++) {
				ops[k]->matmul(one, x + (size_t)b * K, 1, &t);
				assert_memory_equal(one, many + (size_t)b * rows,
						    rows * sizeof(float));
			}
			for (uint32_t b = 2; b < big; b += 7) {
				float three[3 * 13];

				ops[k]->matmul(three, x + (size_t)(b - 2) * K, 3, &t);
				for (int j = 0; j < 3; j++)
					assert_memory_equal(three + j * rows,
							    many + (size_t)(b - 2 + j) * rows,
							    rows * sizeof(float));
			}
		}
		free(many);
		free(one);
		free(w);
		free(f);
		free(x);
	}
}

/* Hostile weights: nan, inf, huge and subnormal quantize to codes the
 * format defines, and the kernels run on them without a crash. */
static void test_hostile_weights(void **state)
{
	float x[70];
	unsigned char w[3 * 20];
	struct tensor t = q4_tensor(w, 1, 70, 32);
	float row[70], out[2];

	(void)state;
	for (int i = 0; i < 70; i++)
		x[i] = (float)i - 35;
	x[3] = NAN;			/* group 0 lost: nan scale, codes 0 */
	x[40] = INFINITY;		/* group 1: inf scale, codes 0 */
	x[64] = 0x1p-140f;		/* group 2: a subnormal scale */
	x[65] = -0x1p-141f;
	for (int i = 66; i < 70; i++)
		x[i] = 0;
	q4g_quantize_row(w, x, 70, 32);
	for (int i = 0; i < 70; i++)
		if (i < 64)
			assert_int_equal(naive_code(w, (size_t)i, 32), 0);
	assert_true(isnan(naive_scale(w, 0, 32)));
	assert_true(isinf(naive_scale(w, 32, 32)));
	assert_int_equal(naive_code(w, 64, 32), 7);
	q4g_get_row(row, &t, 0);
	assert_true(row[64] > 0 && row[65] < 0);
	assert_true(row[66] == 0);
	/* the codes past the row's end are 0 */
	for (int i = 70; i < 96; i++)
		assert_int_equal(naive_code(w, (size_t)i, 32), 0);
	t.rows = 1;
	for (int i = 0; i < 70; i++)
		x[i] = 1;
	tensor_ops_get(DTYPE_Q4G, LLAMA_KERNEL_PORTABLE)->matmul(out, x, 1, &t);
	if (avx2_ops()) {
		avx2_ops()->matmul(out + 1, x, 1, &t);
		assert_memory_equal(&out[0], &out[1], 4);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_matrix_bytes),
		cmocka_unit_test(test_quantize_dequant),
		cmocka_unit_test(test_matmul),
		cmocka_unit_test(test_batch_invariance),
		cmocka_unit_test(test_hostile_weights),
	};

	test_seed_init("test_q4");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
