/*
 * test_ggml_quants.c - the GGUF weight types of lib/kernels: fp16.h's
 * conversions, the ggml block types' dequantization (ggml_dequant.c),
 * their matmuls on quantized activations (ggml_dot.c, ggml_dot_avx2.c),
 * the F16/BF16 kernels (f16.c, f16_avx2.c) and the quantizers
 * (ggml_quantize.c), each against a naive reference written here from
 * the formats' definitions (dtype.h), not from the code under test.
 *
 *  - fp16/bf16 -> fp32: all 65536 values against a conversion by ldexp
 *    of the fields; fp32 -> fp16: every half round-trips, every midpoint
 *    between neighbours ties to the even one and one fp32 ulp either way
 *    goes to the nearer, overflow and underflow edges; and, where the
 *    CPU has F16C, random floats against the hardware's conversion.
 *  - dequantization: random blocks (random bytes, random finite half
 *    scales with zeros and subnormals) against the naive dequantizer,
 *    compared with memcmp (bit for bit, signed zeros included).
 *  - matmul: the kernels' result against a double-precision dot of the
 *    naively dequantized weights with the naively quantized activations
 *    (the test's own quantizer, itself checked bit for bit against the
 *    kernels'), within (n_blocks + 16) * 2^-24 * S, S the sum of
 *    |weight term| * |activation| (see matmul_bound()); the AVX2 twin
 *    equal to the portable kernel bit for bit; batch invariance.
 *  - F16/BF16 matmul equal, bit for bit, to the F32 kernel of the same
 *    kind on the converted weights.
 *  - quantize -> dequantize: every value within half a step (d, or the
 *    K types' d * sc; one step for Q4_0/Q5_0) of its original, plus
 *    2^-20 of |x| and of the block's offset (ggml_quantize.h), on rows
 *    of magnitudes from 1e-6 to 1e2 with outliers to 2e4, zeros and
 *    constants.
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

#include "kernels/f16.h"
#include "kernels/fp16.h"
#include "kernels/ggml_quants.h"
#include "kernels/ggml_quantize.h"
#include "kernels/tensor.h"
#include "tests/unit/test_rng.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

/* ------------------------------------------------------ naive references */

/* The half h by its definition: (-1)^s * 2^(e - 15) * 1.m, subnormal
 * 2^-14 * 0.m, inf and nan at e = 31. */
static double naive_half(uint16_t h)
{
	int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
	double v;

	if (e == 31)
		v = m ? NAN : INFINITY;
	else if (e == 0)
		v = ldexp(m, -24);
	else
		v = ldexp(1024 + m, e - 25);
	return s ? -v : v;
}

static float naive_half_f(const uint8_t *p)
{
	return (float)naive_half((uint16_t)(p[0] | p[1] << 8));
}

static uint32_t float_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static float bits_float(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

/* A random finite half: zero, subnormal or normal of either sign, the
 * exponents spread over [lo_e, hi_e] (biased 1..30) for the normal ones. */
static uint16_t random_half(struct rng *r, int lo_e, int hi_e)
{
	uint16_t s = (uint16_t)(rng_below(r, 2) << 15);

	switch (rng_below(r, 8)) {
	case 0:
		return s;
	case 1:
		return (uint16_t)(s | (1 + rng_below(r, 1023)));
	default:
		return (uint16_t)(s | (lo_e + rng_below(r, hi_e - lo_e + 1)) << 10 |
				  rng_below(r, 1024));
	}
}

static void put_half(uint8_t *p, uint16_t h)
{
	p[0] = (uint8_t)h;
	p[1] = (uint8_t)(h >> 8);
}

struct type_case {
	enum dtype type;
	unsigned qk, bytes;
	int half_at[2];	/* offsets of the half scales, -1 for none */
};

static const struct type_case cases[] = {
	{ DTYPE_GGML_Q8_0, 32, 34, { 0, -1 } },
	{ DTYPE_GGML_Q4_0, 32, 18, { 0, -1 } },
	{ DTYPE_GGML_Q4_1, 32, 20, { 0, 2 } },
	{ DTYPE_GGML_Q5_0, 32, 22, { 0, -1 } },
	{ DTYPE_GGML_Q5_1, 32, 24, { 0, 2 } },
	{ DTYPE_GGML_Q4_K, 256, 144, { 0, 2 } },
	{ DTYPE_GGML_Q5_K, 256, 176, { 0, 2 } },
	{ DTYPE_GGML_Q6_K, 256, 210, { 208, -1 } },
};
#define N_CASES (sizeof(cases) / sizeof(cases[0]))

/* n blocks of random bytes with random finite half scales. */
static void random_blocks(struct rng *r, const struct type_case *c,
			  uint8_t *p, size_t n, int lo_e, int hi_e)
{
	for (size_t k = 0; k < n * c->bytes; k++)
		p[k] = (uint8_t)rng_next(r);
	for (size_t k = 0; k < n; k++)
		for (int h = 0; h < 2; h++)
			if (c->half_at[h] >= 0)
				put_half(p + k * c->bytes + c->half_at[h],
					 random_half(r, lo_e, hi_e));
}

/* The 6-bit scale (what 0) or min (what 1) of K sub-block j, by the
 * packing's definition (dtype.h). */
static int naive_k_six(const uint8_t *s, int j, int what)
{
	if (j < 4)
		return s[j + 4 * what] & 63;
	return what ? (s[j + 4] >> 4) | (s[j] >> 6) << 4 :
		      (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
}

/*
 * Element e of one block: its integer q and the float terms, so that
 * x = scale * q + add where the format adds (K types: add = -dmin * mn)
 * and x = scale * q otherwise; *has_add says which.
 */
static int naive_element(const struct type_case *c, const uint8_t *b, int e,
			 float *scale, float *add, int *has_add)
{
	int q;

	*has_add = 0;
	*add = 0;
	switch (c->type) {
	case DTYPE_GGML_Q8_0:
		*scale = naive_half_f(b);
		return (int8_t)b[2 + e];
	case DTYPE_GGML_Q4_0:
	case DTYPE_GGML_Q4_1: {
		const uint8_t *qs = b + (c->type == DTYPE_GGML_Q4_0 ? 2 : 4);

		q = e < 16 ? qs[e] & 15 : qs[e - 16] >> 4;
		*scale = naive_half_f(b);
		if (c->type == DTYPE_GGML_Q4_0)
			return q - 8;
		*add = naive_half_f(b + 2);
		*has_add = 1;
		return q;
	}
	case DTYPE_GGML_Q5_0:
	case DTYPE_GGML_Q5_1: {
		int one = c->type == DTYPE_GGML_Q5_1;
		const uint8_t *qh = b + (one ? 4 : 2), *qs = b + (one ? 8 : 6);
		int bit = qh[e / 8] >> (e % 8) & 1;

		q = (e < 16 ? qs[e] & 15 : qs[e - 16] >> 4) + 16 * bit;
		*scale = naive_half_f(b);
		if (!one)
			return q - 16;
		*add = naive_half_f(b + 2);
		*has_add = 1;
		return q;
	}
	case DTYPE_GGML_Q4_K:
	case DTYPE_GGML_Q5_K: {
		int five = c->type == DTYPE_GGML_Q5_K, j = e / 32;
		const uint8_t *qs = b + (five ? 48 : 16);
		uint8_t byte = qs[32 * (j / 2) + e % 32];

		q = j % 2 ? byte >> 4 : byte & 15;
		if (five)
			q += 16 * (b[16 + e % 32] >> j & 1);
		*scale = naive_half_f(b) * (float)naive_k_six(b + 4, j, 0);
		*add = -(naive_half_f(b + 2) * (float)naive_k_six(b + 4, j, 1));
		*has_add = 1;
		return q;
	}
	default: {	/* Q6_K */
		int half = e / 128, s = e % 128 / 32, k = e % 32;
		uint8_t lb = b[64 * half + k + (s % 2 ? 32 : 0)];
		int lo = s < 2 ? lb & 15 : lb >> 4;
		int hi = b[128 + 32 * half + k] >> (2 * s) & 3;

		*scale = naive_half_f(b + 208) * (float)(int8_t)b[192 + e / 16];
		return lo + 16 * hi - 32;
	}
	}
}

/* The naive dequantization of n values of blocks at p. */
static void naive_dequant(const struct type_case *c, float *out,
			  const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const uint8_t *b = p + i / c->qk * c->bytes;
		float scale, add;
		int has_add, q = naive_element(c, b, (int)(i % c->qk), &scale,
					       &add, &has_add);

		/* K types: (d * sc) * q - dmin * mn, a subtraction */
		if (has_add && c->qk == 256)
			out[i] = scale * (float)q - -add;
		else if (has_add)
			out[i] = scale * (float)q + add;
		else
			out[i] = scale * (float)q;
	}
}

/* The activation quantizer the kernels promise (ggml_quants.h): per block
 * of qk, d = max|x| / 127, q = x * (1 / d) rounded to nearest with ties
 * to even (by hand here: floor, then the tie's even side), clamped to
 * +-127. */
static float naive_round_even(float v)
{
	float f = floorf(v), diff = v - f;

	if (diff > 0.5f || (diff == 0.5f && fmodf(f, 2) != 0))
		f += 1;
	return f;
}

static void naive_act(float *dq, int8_t *q, float *d_out, const float *x,
		      size_t n, unsigned qk)
{
	for (size_t k = 0; k < n / qk; k++) {
		float amax = 0, d, id;

		for (unsigned i = 0; i < qk; i++)
			amax = fmaxf(amax, fabsf(x[k * qk + i]));
		d = amax / 127;
		id = d != 0 ? 1 / d : 0;
		d_out[k] = d;
		for (unsigned i = 0; i < qk; i++) {
			float v = naive_round_even(x[k * qk + i] * id);

			v = v > 127 ? 127 : v < -127 ? -127 : v == v ? v : 0;
			q[k * qk + i] = (int8_t)v;
			dq[k * qk + i] = d * v;
		}
	}
}

/* --------------------------------------------------------------- helpers */

static struct tensor matrix(enum dtype type, const void *data, uint32_t rows,
			    uint32_t cols)
{
	return (struct tensor){
		.type = type, .data = data, .n_layers = 1, .rows = rows,
		.cols = cols,
		.layer_bytes = (size_t)dtype_matrix_bytes(type, rows, cols, 0),
	};
}

static float random_act(struct rng *r)
{
	return (float)((double)(rng_next(r) >> 11) / 9007199254740992.0 * 4 - 2);
}

static const struct tensor_ops *ops_of(enum dtype type, int avx2)
{
	return tensor_ops_get(type, avx2 ? LLAMA_KERNEL_AVX2 : LLAMA_KERNEL_PORTABLE);
}

/* ------------------------------------------------------------------ fp16 */

static void test_fp16_to_fp32_all(void **state)
{
	(void)state;
	for (uint32_t h = 0; h < 65536; h++) {
		float got = fp16_to_fp32((uint16_t)h);
		double want = naive_half((uint16_t)h);

		if (isnan(want)) {
			/* quiet nan, the sign and payload kept */
			uint32_t bits = (h & 0x8000u) << 16 | 0x7fc00000u |
					(h & 0x3ffu) << 13;

			assert_int_equal(float_bits(got), bits);
		} else {
			assert_int_equal(float_bits(got),
					 float_bits((float)want));
		}
		/* bf16: its bits are the fp32's top half */
		{
			int e = (h >> 7) & 255, m = h & 127;
			double v = e == 255 ? (m ? NAN : INFINITY) :
				   e == 0 ? ldexp(m, -133) :
					    ldexp(128 + m, e - 134);
			float b = bf16_to_fp32((uint16_t)h);

			if (h >> 15)
				v = -v;
			if (isnan(v))
				assert_true(isnan(b) && float_bits(b) >> 16 == h);
			else
				assert_int_equal(float_bits(b), float_bits((float)v));
		}
	}
}

static void test_fp32_to_fp16_rounding(void **state)
{
	(void)state;
	for (uint32_t h = 0; h < 0x7c00; h++) {	/* finite, positive */
		float f = (float)naive_half((uint16_t)h);

		assert_int_equal(fp32_to_fp16(f), h);
		assert_int_equal(fp32_to_fp16(-f), h | 0x8000);
		if (h + 1 < 0x7c00) {
			/* the midpoint to the next half: exact in fp32 */
			float mid = (float)((naive_half((uint16_t)h) +
					     naive_half((uint16_t)(h + 1))) / 2);
			uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;

			assert_int_equal(fp32_to_fp16(mid), even);
			assert_int_equal(fp32_to_fp16(nextafterf(mid, 0)), h);
			assert_int_equal(fp32_to_fp16(nextafterf(mid, INFINITY)),
					 h + 1);
		}
	}
	/* the largest half's upper midpoint 65520 ties to inf (even) */
	assert_int_equal(fp32_to_fp16(65520.0f), 0x7c00);
	assert_int_equal(fp32_to_fp16(nextafterf(65520.0f, 0)), 0x7bff);
	assert_int_equal(fp32_to_fp16(INFINITY), 0x7c00);
	assert_int_equal(fp32_to_fp16(-1e30f), 0xfc00);
	/* half the smallest subnormal ties to zero; just above it to 1 */
	assert_int_equal(fp32_to_fp16(0x1p-25f), 0);
	assert_int_equal(fp32_to_fp16(nextafterf(0x1p-25f, 1)), 1);
	assert_int_equal(fp32_to_fp16(1e-30f), 0);
	assert_int_equal(fp32_to_fp16(-0.0f), 0x8000);
	assert_true((fp32_to_fp16(NAN) & 0x7fff) > 0x7c00);
	assert_true((fp32_to_fp16(bits_float(0x7f800001)) & 0x7fff) > 0x7c00);
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("f16c"))) static uint16_t hw_to_half(float f)
{
	return (uint16_t)_cvtss_sh(f, 0);	/* round to nearest even */
}

__attribute__((target("f16c"))) static float hw_from_half(uint16_t h)
{
	return _cvtsh_ss(h);
}
#endif

static void test_fp16_against_f16c(void **state)
{
	(void)state;
#if defined(__x86_64__) || defined(__i386__)
	struct rng r = rng_for(3);

	if (!f16_have_f16c())
		skip();
	for (uint32_t h = 0; h < 65536; h++)
		assert_int_equal(float_bits(fp16_to_fp32((uint16_t)h)),
				 float_bits(hw_from_half((uint16_t)h)));
	for (int i = 0; i < 2000000; i++) {
		float f = bits_float((uint32_t)rng_next(&r));

		if (isnan(f))
			continue;	/* payload rules may differ; checked above */
		assert_int_equal(fp32_to_fp16(f), hw_to_half(f));
	}
#else
	skip();
#endif
}

/* --------------------------------------------------------- dequantization */

static void test_dequant_bit_exact(void **state)
{
	struct rng r = rng_for(10);

	(void)state;
	for (size_t t = 0; t < N_CASES; t++) {
		const struct type_case *c = &cases[t];
		size_t n_blocks = 64, n = n_blocks * c->qk;
		uint8_t *p = malloc(n_blocks * c->bytes);
		float *got = malloc(n * sizeof(float));
		float *want = malloc(n * sizeof(float));
		struct tensor m;

		assert_non_null(p);
		assert_non_null(got);
		assert_non_null(want);
		for (int round = 0; round < 20; round++) {
			random_blocks(&r, c, p, n_blocks, 1, 30);
			/* 4 rows of 16 blocks: get_row of each kind */
			m = matrix(c->type, p, 4, (uint32_t)(n / 4));
			naive_dequant(c, want, p, n);
			for (int avx2 = 0; avx2 < 2; avx2++) {
				const struct tensor_ops *ops = ops_of(c->type, avx2);

				if (!ops)
					continue;
				for (uint32_t row = 0; row < 4; row++)
					ops->get_row(got + row * (n / 4), &m, row);
				if (memcmp(got, want, n * sizeof(float))) {
					for (size_t i = 0; i < n; i++)
						if (float_bits(got[i]) != float_bits(want[i]))
							fail_msg("%s element %zu: got %a want %a",
								 dtype_name(c->type), i,
								 got[i], want[i]);
				}
			}
		}
		free(p);
		free(got);
		free(want);
	}
}

static void test_matrix_bytes(void **state)
{
	(void)state;
	for (size_t t = 0; t < N_CASES; t++) {
		const struct type_case *c = &cases[t];

		assert_int_equal(dtype_matrix_bytes(c->type, 3, 2 * c->qk, 0),
				 6 * c->bytes);
		assert_int_equal(dtype_matrix_bytes(c->type, 3, c->qk + 1, 0), 0);
		assert_int_equal(dtype_matrix_bytes(c->type, 3, c->qk / 2, 0), 0);
		assert_int_equal(dtype_matrix_bytes(c->type, UINT64_MAX / 2,
						    c->qk, 0), 0);
		assert_int_equal(dtype_matrix_bytes(c->type, 16,
						    UINT64_MAX / c->qk * c->qk,
						    0), 0);
	}
	assert_int_equal(dtype_matrix_bytes(DTYPE_F16, 3, 5, 0), 30);
	assert_int_equal(dtype_matrix_bytes(DTYPE_BF16, 3, 5, 0), 30);
	assert_int_equal(dtype_matrix_bytes(DTYPE_F16, UINT64_MAX / 2, 2, 0), 0);
	assert_string_equal(dtype_name(DTYPE_GGML_Q4_K), "q4_k");
}

/* ----------------------------------------------------------------- matmul */

/*
 * The bound on |kernel - exact| for one output (ggml_quants.h's order):
 * each term of a block is rounded at most 3 times (the product of the
 * scales, (float) of the integer sum, their product; the min term the
 * same), the naive dequantization rounds each weight at most 3 times,
 * and the accumulation over n_blocks blocks (then 8 lanes' tree and the
 * min sum) at most n_blocks + 4 times; every rounding is within 2^-24
 * of its magnitude, and every magnitude within S = sum over i of
 * (|scale_i * q_i| + 2 |add_i|) * |a_i| (Q4_0/Q5_0's add: 8 d or 16 d,
 * room for a kernel that sums the stored codes and takes the offset off
 * after; today's dot the signed values, well inside it).  So (n_blocks + 16) * 2^-24 * S, with room,
 * plus the tiny absolute slack of subnormal products.
 */
static double matmul_bound(const struct type_case *c, const uint8_t *w,
			   const float *adq, size_t n)
{
	double s = 0;

	for (size_t i = 0; i < n; i++) {
		float scale, add;
		int has_add, q = naive_element(c, w + i / c->qk * c->bytes,
					       (int)(i % c->qk), &scale, &add,
					       &has_add);

		/* Q4_0/Q5_0 sum the stored codes and subtract 8 or 16 d */
		if (c->type == DTYPE_GGML_Q4_0 || c->type == DTYPE_GGML_Q5_0)
			add = scale * (c->type == DTYPE_GGML_Q4_0 ? 8 : 16);
		s += (fabs((double)scale * q) + 2 * fabs((double)add)) * fabs(adq[i]);
	}
	return ((double)(n / c->qk) + 16) * 0x1p-24 * s + 1e-30;
}

static void check_matmul_type(const struct type_case *c, struct rng *r,
			      uint32_t n_out, uint32_t cols, size_t n_rows)
{
	size_t row_bytes = cols / c->qk * c->bytes;
	uint8_t *w = malloc(n_out * row_bytes);
	float *x = malloc(n_rows * cols * sizeof(float));
	float *adq = malloc(n_rows * cols * sizeof(float));
	int8_t *aq = malloc(n_rows * cols);
	float *ad = malloc(n_rows * cols / c->qk * sizeof(float));
	float *wdq = malloc(cols * sizeof(float));
	float *out[2];
	struct tensor m;

	out[0] = malloc(n_rows * n_out * sizeof(float));
	out[1] = malloc(n_rows * n_out * sizeof(float));
	assert_true(w && x && adq && aq && ad && wdq && out[0] && out[1]);
	random_blocks(r, c, w, n_out * (cols / c->qk), 5, 20);
	for (size_t i = 0; i < n_rows * cols; i++)
		x[i] = random_act(r);
	if (n_rows > 1)	/* a row of zeros and one of tiny values */
		memset(x, 0, cols * sizeof(float));
	for (size_t i = 0; n_rows > 2 && i < cols; i++)
		x[2 * cols + i] *= 1e-30f;
	/* the integer sums' worst case: weight row 1 all ones bits (the
	 * largest codes and scales), activation row 1 all q = 127 */
	for (size_t i = 0; n_rows > 1 && i < cols; i++)
		x[cols + i] = 1.0f;
	if (n_out > 1) {
		memset(w + row_bytes, 0xff, row_bytes);
		for (size_t k = 0; k < cols / c->qk; k++)
			for (int h = 0; h < 2; h++)
				if (c->half_at[h] >= 0)
					put_half(w + row_bytes + k * c->bytes + c->half_at[h],
						 random_half(r, 5, 20));
	}
	naive_act(adq, aq, ad, x, n_rows * cols, c->qk);
	m = matrix(c->type, w, n_out, cols);
	for (int avx2 = 0; avx2 < 2; avx2++) {
		const struct tensor_ops *ops = ops_of(c->type, avx2);

		if (!ops) {
			memcpy(out[1], out[0], n_rows * n_out * sizeof(float));
			continue;
		}
		ops->matmul(out[avx2], x, n_rows, &m);
	}
	for (uint32_t o = 0; o < n_out; o++) {
		naive_dequant(c, wdq, w + o * row_bytes, cols);
		for (size_t b = 0; b < n_rows; b++) {
			double exact = 0, bound;

			for (size_t i = 0; i < cols; i++)
				exact += (double)wdq[i] * adq[b * cols + i];
			bound = matmul_bound(c, w + o * row_bytes,
					     adq + b * cols, cols);
			if (!(fabs(out[0][b * n_out + o] - exact) <= bound))
				fail_msg("%s row %zu out %u: got %.9g exact %.9g bound %.3g",
					 dtype_name(c->type), b, o,
					 out[0][b * n_out + o], exact, bound);
		}
	}
	if (memcmp(out[0], out[1], n_rows * n_out * sizeof(float)))
		fail_msg("%s: avx2 differs from portable (%u x %u, %zu rows)",
			 dtype_name(c->type), n_out, cols, n_rows);
	free(w);
	free(x);
	free(adq);
	free(aq);
	free(ad);
	free(wdq);
	free(out[0]);
	free(out[1]);
}

static void test_matmul_against_naive(void **state)
{
	struct rng r = rng_for(20);

	(void)state;
	for (size_t t = 0; t < N_CASES; t++) {
		const struct type_case *c = &cases[t];

		check_matmul_type(c, &r, 7, 4 * 256, 1);
		check_matmul_type(c, &r, 13, 2 * 256, 5);
		check_matmul_type(c, &r, 29, c->qk == 32 ? 6 * 32 : c->qk, 9);
		check_matmul_type(c, &r, 50, 3 * 256, 17);
	}
}

/* Random activations of the quantizer test: magnitudes from 1e-20 to 1,
 * zero blocks, a block of exact ties (amax 127: d = 1, values k + 0.5),
 * and with nan or inf in one block (whose neighbours must not mind). */
static void act_case(struct rng *r, float *x, int round)
{
	for (int i = 0; i < 512; i++)
		x[i] = random_act(r) * (round % 3 ? 1.0f : 1e-20f);
	if (round % 7 == 0)
		memset(x + 32, 0, 64 * sizeof(float));
	if (round % 5 == 1)
		for (int i = 0; i < 32; i++)
			x[64 + i] = i == 7 ? 127 : (float)(int)(rng_next(r) % 250) -
						      124.5f;
	if (round % 11 == 4)
		x[rng_next(r) % 512] = round % 2 ? NAN : -INFINITY;
}

/* The quad layout (struct ggml_act32x4) of the naive quantizer's q and d
 * for n values, against what a quantizer wrote at a. */
static void check_quads(const struct ggml_act32x4 *a, const int8_t *q,
			const float *d, size_t n)
{
	size_t nb = n / 32;

	for (size_t k = 0; k < nb; k += 4, a++)
		for (size_t c = 0; c < 4; c++) {
			int full = k + c < nb, sum = 0;
			const int8_t *qb = q + 32 * (k + c);
			const int8_t *lo = a->lo[c / 2] + 16 * (c % 2);
			const int8_t *hi = a->hi[c / 2] + 16 * (c % 2);

			for (int i = 0; i < 16; i++) {
				assert_int_equal(lo[i], full ? qb[i] : 0);
				assert_int_equal(hi[i], full ? qb[16 + i] : 0);
				sum += full ? qb[i] + qb[16 + i] : 0;
			}
			assert_int_equal(a->qsum[c], sum);
			assert_int_equal(float_bits(a->d[c]), full ? float_bits(d[k + c]) : 0);
			assert_int_equal(float_bits(a->s[c]),
					 full ? float_bits(d[k + c] * (float)sum) : 0);
		}
}

static int has_nan(const float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (isnan(x[i]))
			return 1;
	return 0;
}

/* The kernels' activation quantizers (portable, and AVX2 where the CPU
 * has it) are the one the bound assumes, in each layout, bit for bit. */
static void test_act_quantizer(void **state)
{
	struct rng r = rng_for(21);
	float x[512], adq[512], d[16];
	int8_t q[512];
	struct ggml_act32 a32[16];
	struct ggml_act32x4 p32[4];
	struct ggml_act256 a256[2];
	static const int8_t zeros[256];
	int avx2 = 0;

	(void)state;
#if defined(__x86_64__) || defined(__i386__)
	avx2 = ops_of(DTYPE_GGML_Q4_0, 1) != NULL;
#endif
	for (int round = 0; round < 400; round++) {
		int nan = round % 11 == 4;
		/* 15 or 13 blocks: a quad of 3 or of 1 */
		size_t n = round % 4 == 3 ? 480 : round % 4 == 2 ? 416 : 512;

		act_case(&r, x, round);
		naive_act(adq, q, d, x, 512, 32);
		for (int twin = 0; twin <= avx2; twin++) {
			memset(p32, 0x55, sizeof(p32));
#if defined(__x86_64__) || defined(__i386__)
			if (twin) {
				ggml_quantize_act_row_avx2(DTYPE_GGML_Q8_0, a32, x, 512);
				ggml_quantize_act_row_avx2(DTYPE_GGML_Q4_0, p32, x, n);
			} else
#endif
			{
				ggml_quantize_act_row(DTYPE_GGML_Q8_0, a32, x, 512);
				ggml_quantize_act_row(DTYPE_GGML_Q4_0, p32, x, n);
			}
			/* a nan's block (the naive fmaxf() skips it) is lost:
			 * d nan, q 0 */
			for (int k = 0; k < 16; k++) {
				if (has_nan(x + 32 * k, 32)) {
					assert_true(isnan(a32[k].d));
					assert_memory_equal(a32[k].q, zeros, 32);
					continue;
				}
				assert_int_equal(float_bits(a32[k].d), float_bits(d[k]));
				assert_memory_equal(a32[k].q, q + 32 * k, 32);
			}
			if (!nan)
				check_quads(p32, q, d, n);
		}
		naive_act(adq, q, d, x, 512, 256);
		for (int twin = 0; twin <= avx2; twin++) {
#if defined(__x86_64__) || defined(__i386__)
			if (twin)
				ggml_quantize_act_row_avx2(DTYPE_GGML_Q4_K, a256, x, 512);
			else
#endif
				ggml_quantize_act_row(DTYPE_GGML_Q4_K, a256, x, 512);
			for (int k = 0; k < 2; k++) {
				if (has_nan(x + 256 * k, 256)) {
					assert_true(isnan(a256[k].d));
					assert_memory_equal(a256[k].q, zeros, 256);
					continue;
				}
				assert_int_equal(float_bits(a256[k].d), float_bits(d[k]));
				assert_memory_equal(a256[k].q, q + 256 * k, 256);
				for (int g = 0; g < 16; g++) {
					int sum = 0;

					for (int i = 0; i < 16; i++)
						sum += q[256 * k + 16 * g + i];
					assert_int_equal(a256[k].bsums[g], sum);
				}
			}
		}
	}
}

/*
 * Batch invariance: one activation row's outputs are the same bits alone
 * and at any place among n_rows - 1 random neighbours, for every kind.
 */
static void check_invariance(enum dtype type, const struct type_case *c,
			     struct rng *r)
{
	uint32_t n_out = 37, cols = 2 * 256 + (!c ? 5 : c->qk == 32 ? 96 : 0);
	uint64_t bytes = dtype_matrix_bytes(type, n_out, cols, 0);
	uint8_t *w = malloc(bytes);
	float *x = malloc(17 * cols * sizeof(float));
	float *one = malloc(n_out * sizeof(float));
	float *out = malloc(17 * n_out * sizeof(float));
	float *row = malloc(cols * sizeof(float));
	static const size_t n_rows[] = { 1, 3, 12, 17, 31 };	/* tiles of 1 .. 8 */
	struct tensor m = matrix(type, w, n_out, cols);

	assert_true(w && x && one && out && row);
	/* finite scales: a nan's payload may come out of either operand */
	if (c)
		random_blocks(r, c, w, bytes / c->bytes, 8, 16);
	for (size_t i = 0; !c && i < bytes / 2; i++)
		put_half(w + 2 * i, random_half(r, 8, 20));
	for (size_t i = 0; i < cols; i++)
		row[i] = random_act(r);
	for (int avx2 = 0; avx2 < 2; avx2++) {
		const struct tensor_ops *ops = ops_of(type, avx2);

		if (!ops)
			continue;
		ops->matmul(one, row, 1, &m);
		for (size_t k = 0; k < 3; k++) {
			size_t n = n_rows[k];

			for (size_t at = 0; at < n; at += (n > 3 ? 5 : 1)) {
				for (size_t i = 0; i < n * cols; i++)
					x[i] = random_act(r);
				memcpy(x + at * cols, row, cols * sizeof(float));
				ops->matmul(out, x, n, &m);
				if (memcmp(out + at * n_out, one,
					   n_out * sizeof(float)))
					fail_msg("%s: row %zu of %zu differs alone",
						 ops->name, at, n);
			}
		}
	}
	free(w);
	free(x);
	free(one);
	free(out);
	free(row);
}

static void test_batch_invariance(void **state)
{
	struct rng r = rng_for(30);

	(void)state;
	for (size_t t = 0; t < N_CASES; t++)
		check_invariance(cases[t].type, &cases[t], &r);
	check_invariance(DTYPE_F16, NULL, &r);
	check_invariance(DTYPE_BF16, NULL, &r);
}

/*
 * Every n_rows from 1 to 70: the AVX2 matmul (its tiles below 16 rows,
 * then ggml_gemm8_avx2.c's groups of 8 and the tiles for the rest)
 * against the portable one, bit for bit.  19 outputs: a partial block
 * of GEMM8_OB weight rows; 5 blocks of 32: a partial quad.
 */
static void check_all_row_counts(const struct type_case *c, struct rng *r)
{
	uint32_t n_out = 19, cols = c->qk == 32 ? 5 * 32 : 256;
	size_t row_bytes = cols / c->qk * c->bytes, max_rows = 70;
	uint8_t *w = malloc(n_out * row_bytes);
	float *x = malloc(max_rows * cols * sizeof(float));
	float *out[2];
	struct tensor m = matrix(c->type, w, n_out, cols);
	const struct tensor_ops *ops[2] = { ops_of(c->type, 0), ops_of(c->type, 1) };

	out[0] = malloc(max_rows * n_out * sizeof(float));
	out[1] = malloc(max_rows * n_out * sizeof(float));
	assert_true(w && x && out[0] && out[1] && ops[0]);
	if (!ops[1])	/* no AVX2 here: nothing to compare */
		goto out_free;
	random_blocks(r, c, w, n_out * (cols / c->qk), 8, 16);
	memset(w + row_bytes, 0xff, row_bytes);	/* the largest codes */
	for (size_t k = 0; k < cols / c->qk; k++)
		for (int h = 0; h < 2; h++)
			if (c->half_at[h] >= 0)
				put_half(w + row_bytes + k * c->bytes + c->half_at[h],
					 random_half(r, 8, 16));
	for (size_t n = 1; n <= max_rows; n++) {
		for (size_t i = 0; i < n * cols; i++)
			x[i] = random_act(r);
		for (size_t i = 0; n > 1 && i < cols; i++)	/* q = 127 */
			x[cols + i] = 1.0f;
		ops[0]->matmul(out[0], x, n, &m);
		ops[1]->matmul(out[1], x, n, &m);
		for (size_t i = 0; i < n * n_out; i++)
			if (memcmp(&out[0][i], &out[1][i], sizeof(float)))
				fail_msg("%s, %zu rows: row %zu out %zu: avx2 %.9g portable %.9g",
					 dtype_name(c->type), n, i / n_out, i % n_out,
					 out[1][i], out[0][i]);
	}
out_free:
	free(w);
	free(x);
	free(out[0]);
	free(out[1]);
}

static void test_all_row_counts(void **state)
{
	struct rng r = rng_for(35);

	(void)state;
	for (size_t t = 0; t < N_CASES; t++)
		check_all_row_counts(&cases[t], &r);
}

/* F16/BF16: the F32 kernel of the same kind on the converted weights. */
static void test_f16_is_f32(void **state)
{
	struct rng r = rng_for(40);
	static const uint32_t shapes[][3] = {	/* n_out, cols, n_rows */
		{ 5, 8, 1 }, { 29, 77, 3 }, { 50, 256, 9 }, { 31, 13, 6 },
	};

	(void)state;
	for (int bf = 0; bf < 2; bf++) {
		enum dtype type = bf ? DTYPE_BF16 : DTYPE_F16;

		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
			uint32_t n_out = shapes[s][0], cols = shapes[s][1];
			size_t n_rows = shapes[s][2], n = (size_t)n_out * cols;
			uint8_t *h = malloc(2 * n);
			float *wf = malloc(n * sizeof(float));
			float *x = malloc(n_rows * cols * sizeof(float));
			float *o16 = malloc(n_rows * n_out * sizeof(float));
			float *o32 = malloc(n_rows * n_out * sizeof(float));
			struct tensor m16 = matrix(type, h, n_out, cols);
			struct tensor m32 = matrix(DTYPE_F32, wf, n_out, cols);

			assert_true(h && wf && x && o16 && o32);
			for (size_t i = 0; i < n; i++) {
				uint16_t v = bf ? (uint16_t)(float_bits(random_act(&r)) >> 16) :
						  random_half(&r, 1, 30);

				put_half(h + 2 * i, v);
				wf[i] = bf ? bf16_to_fp32(v) : (float)naive_half(v);
			}
			for (size_t i = 0; i < n_rows * cols; i++)
				x[i] = random_act(&r);
			for (int avx2 = 0; avx2 < 2; avx2++) {
				const struct tensor_ops *k16 = ops_of(type, avx2);
				const struct tensor_ops *k32 = ops_of(DTYPE_F32, avx2);
				float *row = malloc(cols * sizeof(float));

				if (!k16 || !k32) {
					free(row);
					continue;
				}
				k16->matmul(o16, x, n_rows, &m16);
				k32->matmul(o32, x, n_rows, &m32);
				assert_memory_equal(o16, o32,
						    n_rows * n_out * sizeof(float));
				k16->get_row(row, &m16, n_out - 1);
				assert_memory_equal(row, wf + (size_t)(n_out - 1) * cols,
						    cols * sizeof(float));
				free(row);
			}
			free(h);
			free(wf);
			free(x);
			free(o16);
			free(o32);
		}
	}
}

static void test_quantize_roundtrip(void **state)
{
	struct rng r = rng_for(50);
	float x[1024], y[1024];
	uint8_t q[1024 / 32 * 34];

	(void)state;
	for (size_t t = 0; t < N_CASES; t++) {
		const struct type_case *c = &cases[t];
		double worst = 0;

		assert_int_equal(ggml_quantize_bytes(c->type, 1024),
				 1024 / c->qk * c->bytes);
		assert_int_equal(ggml_quantize_row(c->type, q, x, c->qk + 16), 0);
		assert_int_equal(ggml_quantize_row(DTYPE_F32, q, x, 1024), 0);
		for (int round = 0; round < 200; round++) {
			float mag = powf(10, (float)rng_below(&r, 9) - 6); /* to 1e2 */
			int kind = (int)rng_below(&r, 6);

			for (int i = 0; i < 1024; i++) {
				x[i] = random_act(&r) * mag;
				if (kind == 1)	/* one-sided */
					x[i] = fabsf(x[i]) + mag;
				else if (kind == 2 && rng_below(&r, 50) == 0)
					x[i] *= 100;	/* outliers */
				else if (kind == 3 && i % 64 < 40)
					x[i] = 0;
				else if (kind == 4)
					x[i] = -mag * 0.37f;	/* constant */
			}
			assert_int_equal(ggml_quantize_row(c->type, q, x, 1024),
					 1024 / c->qk * c->bytes);
			ggml_dequant_row(c->type, y, q, 1024);
			for (int i = 0; i < 1024; i++) {
				float scale, add;
				int has_add;
				double step, bound, err = fabs((double)x[i] - y[i]);

				naive_element(c, q + i / c->qk * c->bytes,
					      (int)(i % c->qk), &scale, &add,
					      &has_add);
				step = fabs((double)scale);
				bound = (c->type == DTYPE_GGML_Q4_0 ||
					 c->type == DTYPE_GGML_Q5_0 ? 1.0 : 0.5) * step +
					0x1p-20 * (fabs(x[i]) + fabs(add)) + 1e-35;
				if (!(err <= bound))
					fail_msg("%s round %d value %d: %a came back %a "
						 "(step %a, bound %a)", dtype_name(c->type),
						 round, i, x[i], y[i], step, bound);
				if (step > 0 && err / step > worst)
					worst = err / step;
			}
		}
		printf("%s: worst error %.3f of a step\n", dtype_name(c->type), worst);
	}
}

static void test_bf16_rounding(void **state)
{
	(void)state;
	for (uint32_t b = 0; b < 0x7f80; b++) {	/* finite, positive */
		float f = bf16_to_fp32((uint16_t)b);
		float next = bf16_to_fp32((uint16_t)(b + 1));
		float mid = (float)(((double)f + next) / 2);

		assert_int_equal(fp32_to_bf16(f), b);
		assert_int_equal(fp32_to_bf16(-f), b | 0x8000);
		if (b + 1 < 0x7f80) {
			assert_int_equal(fp32_to_bf16(mid), (b & 1) ? b + 1 : b);
			assert_int_equal(fp32_to_bf16(nextafterf(mid, 0)), b);
			assert_int_equal(fp32_to_bf16(nextafterf(mid, INFINITY)), b + 1);
		}
	}
	assert_int_equal(fp32_to_bf16(INFINITY), 0x7f80);
	assert_true((fp32_to_bf16(NAN) & 0x7fff) > 0x7f80);
	assert_true((fp32_to_bf16(bits_float(0x7f800001)) & 0x7fff) > 0x7f80);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fp16_to_fp32_all),
		cmocka_unit_test(test_fp32_to_fp16_rounding),
		cmocka_unit_test(test_fp16_against_f16c),
		cmocka_unit_test(test_dequant_bit_exact),
		cmocka_unit_test(test_matrix_bytes),
		cmocka_unit_test(test_act_quantizer),
		cmocka_unit_test(test_matmul_against_naive),
		cmocka_unit_test(test_batch_invariance),
		cmocka_unit_test(test_all_row_counts),
		cmocka_unit_test(test_f16_is_f32),
		cmocka_unit_test(test_quantize_roundtrip),
		cmocka_unit_test(test_bf16_rounding),
	};

	test_seed_init("ggml_quants");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
