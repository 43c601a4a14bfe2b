/*
 * f16_avx2.c - the AVX2+FMA twin of f16.c's F16/BF16 matmul (f16.h).
 *
 * Per output element, exactly the F32 AVX2 kernel's arithmetic
 * (llama_kernels.c): one 8-lane accumulator fed by one FMA per 8 values
 * in order of i, llama_hsum8(), then the n_in % 8 tail one llama_fma1()
 * at a time; the weights are converted 8 at a time (F16C's vcvtph2ps,
 * or BF16's shift into the top half), exactly.  Tiles of up to 4 input
 * rows by 3 outputs (12 accumulators, 3 weight vectors and an input in
 * the 16 registers) are one inline function with constant bounds, so an
 * element's arithmetic never depends on the tile it fell in; outputs go
 * in blocks of F16_OB weight rows that stay in cache while every row
 * group passes, so the weights come from memory once per call.
 */
#include "kernels/f16.h"
#include "kernels/fp16.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/llama_avx2.h"

#include <cpuid.h>

#define F16_AVX2 __attribute__((target("avx2,fma,f16c")))
#define F16_MR 4	/* input rows per tile */
#define F16_NR 3	/* outputs per tile */
#define F16_OB 24	/* outputs per block */

int f16_have_f16c(void)
{
	unsigned a, b, c, d;

	/* CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports has no
	 * "f16c") */
	return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}

/* 8 weights at p (16-bit each) as fp32. */
static inline __attribute__((always_inline)) F16_AVX2 __m256
f16_load8(int bf, const uint8_t *p)
{
	__m128i h = _mm_loadu_si128((const __m128i *)p);

	if (bf)
		return _mm256_castsi256_ps(
			_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
	return _mm256_cvtph_ps(h);
}

static inline __attribute__((always_inline)) F16_AVX2 void
f16_tile(int R, int O, int bf, float *out, const float *x, const uint8_t *w,
	 size_t n_in, size_t n_out)
{
	__m256 acc[F16_MR][F16_NR];
	size_t i, n8 = n_in & ~(size_t)7;

#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int o = 0; o < O; o++)
			acc[r][o] = _mm256_setzero_ps();
	for (i = 0; i < n8; i += 8) {
		__m256 wv[F16_NR];

#pragma GCC unroll 4
		for (int o = 0; o < O; o++)
			wv[o] = f16_load8(bf, w + 2 * (o * n_in + i));
#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			__m256 xv = _mm256_loadu_ps(x + r * n_in + i);

#pragma GCC unroll 4
			for (int o = 0; o < O; o++)
				acc[r][o] = _mm256_fmadd_ps(wv[o], xv, acc[r][o]);
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int o = 0; o < O; o++) {
			float s = llama_hsum8(acc[r][o]);

			for (size_t j = n8; j < n_in; j++) {
				uint16_t h = (uint16_t)(w[2 * (o * n_in + j)] |
							w[2 * (o * n_in + j) + 1] << 8);

				s = llama_fma1(bf ? bf16_to_fp32(h) : fp16_to_fp32(h),
					       x[r * n_in + j], s);
			}
			out[r * n_out + o] = s;
		}
}

#define F16_TILE_CASE(R, O)                                            \
	case (R) * 16 + (O):                                           \
		if (bf)                                                \
			f16_tile(R, O, 1, out, x, w, n_in, n_out);     \
		else                                                   \
			f16_tile(R, O, 0, out, x, w, n_in, n_out);     \
		break

static F16_AVX2 void f16_tile_any(int R, int O, int bf, float *out,
				  const float *x, const uint8_t *w,
				  size_t n_in, size_t n_out)
{
	switch (R * 16 + O) {
	F16_TILE_CASE(1, 1); F16_TILE_CASE(1, 2); F16_TILE_CASE(1, 3);
	F16_TILE_CASE(2, 1); F16_TILE_CASE(2, 2); F16_TILE_CASE(2, 3);
	F16_TILE_CASE(3, 1); F16_TILE_CASE(3, 2); F16_TILE_CASE(3, 3);
	F16_TILE_CASE(4, 1); F16_TILE_CASE(4, 2); F16_TILE_CASE(4, 3);
	default:
		break;
	}
}

F16_AVX2 void f16_matmul_avx2(float *out, const float *x, size_t n_rows,
			      const struct tensor *t)
{
	const uint8_t *w = t->data;
	size_t n_in = t->cols, n_out = t->rows;
	int bf = t->type == DTYPE_BF16;

	for (size_t ob = 0; ob < n_out; ob += F16_OB) {
		size_t oe = n_out - ob < F16_OB ? n_out : ob + F16_OB;

		for (size_t b = 0; b < n_rows; b += F16_MR) {
			int R = n_rows - b < F16_MR ? (int)(n_rows - b) : F16_MR;

			for (size_t o = ob; o < oe; o += F16_NR) {
				int O = oe - o < F16_NR ? (int)(oe - o) : F16_NR;

				f16_tile_any(R, O, bf, out + b * n_out + o,
					     x + b * n_in, w + 2 * o * n_in,
					     n_in, n_out);
			}
		}
	}
}
#endif
