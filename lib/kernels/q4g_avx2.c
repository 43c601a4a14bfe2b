/*
 * q4g_avx2.c - the AVX2 twin of q4g.c's matmul: the same numbers in the
 * same order (q4g.h), so the two agree bit for bit; tensor.c's table
 * picks it where the CPU has AVX2+FMA.
 *
 * NOTES ON THE DESIGN
 *
 * Per group, the weight's codes are unpacked once into vectors of 32
 * signed bytes, each 32 consecutive elements from a multiple of 32 (for
 * G = 32 the 16 low nibbles then the 16 high ones; for G >= 64 each 32
 * bytes give elements b .. b + 31 in their low nibbles and G/2 + b ..
 * in their high ones), so int32 lane l of maddubs + madd holds elements
 * 4l .. 4l + 3 of its 32: the portable code's L[(i / 4) % 8], summed
 * over the group's vectors in integers (exact, any order).  Signed
 * codes against signed activations go through the sign trick:
 * maddubs(|w|, sign(a, w)), |w| <= 8.  Then one FMA by d_w * d_a into
 * the row's 8 float lanes and llama_hsum8() at the end, as the portable
 * fmaf() and ggml_hsum8().
 *
 * Tiles: one weight row against up to Q4G_MR activation rows, so each
 * group is unpacked once per row tile; the tile body is inline with
 * constant R and vector count, so an element's arithmetic never depends
 * on the tile it fell in.  Without memory for the activations it runs
 * the portable matmul: the same bits.
 */
#include "kernels/q4g.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/llama_avx2.h"

#define Q4G_MR 4	/* activation rows per tile */
#define ALWAYS_INLINE static inline __attribute__((always_inline)) LLAMA_AVX2

/* Nibbles (0..15) as the signed codes they hold (-8..7). */
ALWAYS_INLINE __m256i signed_codes(__m256i n)
{
	const __m256i eight = _mm256_set1_epi8(8);

	return _mm256_sub_epi8(_mm256_xor_si256(n, eight), eight);
}

/* The group's codes at c (half = G / 2 bytes) as nv vectors, in the
 * element order the header comment says. */
ALWAYS_INLINE void unpack(__m256i *v, const unsigned char *c, int nv)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f);

	if (nv == 1) {
		__m128i q = _mm_loadu_si128((const __m128i *)c);
		__m128i m = _mm_set1_epi8(0x0f);

		v[0] = signed_codes(_mm256_set_m128i(
			_mm_and_si128(_mm_srli_epi16(q, 4), m),
			_mm_and_si128(q, m)));
		return;
	}
#pragma GCC unroll 4
	for (int k = 0; k < nv / 2; k++) {
		__m256i q = _mm256_loadu_si256((const __m256i *)(c + 32 * k));

		v[k] = signed_codes(_mm256_and_si256(q, m4));
		v[k + nv / 2] = signed_codes(
			_mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
	}
}

/* One weight row against R activation rows, nv = G / 32. */
ALWAYS_INLINE void tile(int R, int nv, float *out, size_t n_out,
			const unsigned char *w, const unsigned char *act,
			size_t act_row, size_t n_groups)
{
	const __m256i ones = _mm256_set1_epi16(1);
	size_t gw = 4 + 16 * (size_t)nv, ga = 4 + 32 * (size_t)nv;
	__m256 acc[Q4G_MR];

#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		acc[r] = _mm256_setzero_ps();
	for (size_t g = 0; g < n_groups; g++) {
		const unsigned char *wg = w + g * gw;
		__m256i v[Q4G_GROUP_MAX / 32], av[Q4G_GROUP_MAX / 32];
		float dw;

		memcpy(&dw, wg, sizeof(dw));
		unpack(v, wg + 4, nv);
#pragma GCC unroll 8
		for (int k = 0; k < nv; k++)
			av[k] = _mm256_sign_epi8(v[k], v[k]);
#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			const unsigned char *a = act + r * act_row + g * ga;
			__m256i isum = _mm256_setzero_si256();
			float da;

			memcpy(&da, a, sizeof(da));
#pragma GCC unroll 8
			for (int k = 0; k < nv; k++) {
				__m256i y = _mm256_loadu_si256(
					(const __m256i *)(a + 4 + 32 * k));
				__m256i p = _mm256_maddubs_epi16(
					av[k], _mm256_sign_epi8(y, v[k]));

				isum = _mm256_add_epi32(isum,
							_mm256_madd_epi16(p, ones));
			}
			acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
						 _mm256_set1_ps(dw * da), acc[r]);
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		out[r * n_out] = llama_hsum8(acc[r]);
}

/* All rows through tiles of constant width, nv constant. */
ALWAYS_INLINE void matmul_nv(int nv, float *out, size_t n_rows,
			     size_t n_out, const unsigned char *w,
			     size_t row_bytes, const unsigned char *act,
			     size_t act_row, size_t n_groups)
{
	for (size_t o = 0; o < n_out; o++) {
		const unsigned char *wr = w + o * row_bytes;
		size_t b = 0;

		for (; b + Q4G_MR <= n_rows; b += Q4G_MR)
			tile(Q4G_MR, nv, out + b * n_out + o, n_out, wr,
			     act + b * act_row, act_row, n_groups);
		switch (n_rows - b) {
		case 3:
			tile(3, nv, out + b * n_out + o, n_out, wr,
			     act + b * act_row, act_row, n_groups);
			break;
		case 2:
			tile(2, nv, out + b * n_out + o, n_out, wr,
			     act + b * act_row, act_row, n_groups);
			break;
		case 1:
			tile(1, nv, out + b * n_out + o, n_out, wr,
			     act + b * act_row, act_row, n_groups);
			break;
		}
	}
}

LLAMA_AVX2 void q4g_matmul_avx2(float *out, const float *x, size_t n_rows,
				const struct tensor *w)
{
	uint32_t group = w->group;
	size_t n_in = w->cols, n_out = w->rows;
	size_t row_bytes = q4g_matrix_bytes(1, n_in, group);
	size_t act_row = q4g_act_row_bytes(n_in, group);
	size_t n_groups = q4g_row_groups(n_in, group);
	unsigned char *act = q4g_act_alloc(x, n_rows, n_in, group);

	if (!act) {
		q4g_matmul_portable(out, x, n_rows, w);
		return;
	}
	switch (group) {
	case 32:
		matmul_nv(1, out, n_rows, n_out, w->data, row_bytes, act,
			  act_row, n_groups);
		break;
	case 64:
		matmul_nv(2, out, n_rows, n_out, w->data, row_bytes, act,
			  act_row, n_groups);
		break;
	case 128:
		matmul_nv(4, out, n_rows, n_out, w->data, row_bytes, act,
			  act_row, n_groups);
		break;
	default:	/* 256 */
		matmul_nv(8, out, n_rows, n_out, w->data, row_bytes, act,
			  act_row, n_groups);
		break;
	}
	free(act);
}
#endif
