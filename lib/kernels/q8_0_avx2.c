/*
 * q8_0_avx2.c - the AVX2+FMA twin of q8_0.c's Q8_0 matmul (tensor.c's
 * table picks it at run time where the CPU has AVX2+FMA).
 *
 * NOTES ON THE DESIGN
 *
 * Batch invariance (group a multiple of 8; q8_0_matmul_avx2() runs the
 * portable code for any other): per group, an 8-lane partial fed by one
 * FMA per 8 values in order; the 8-lane total takes one FMA partial *
 * scale per group in order; at the end llama_hsum8() (a fixed tree).
 * There is no scalar tail: cols is a multiple of group.  The tile
 * variants are one inline function with constant bounds, so an
 * element's arithmetic never depends on which tile it fell in.
 *
 * Tiles: each element needs two accumulators (the group's partial and the
 * total).  Full row groups run 4 x 3 tiles like the fp32 kernel: 12
 * partials, 3 weight vectors and an input fill the 16 ymm registers and
 * the 12 totals live on the stack, touched once per group (8 FMA steps
 * at group 64); that measured faster than 3 x 2 all in registers (64
 * rows of a 768 x 288 matrix in cache: 1.79 against 1.94 ms).  The rows
 * left over run 1 x 4, 2 x 2 or 3 x 2.  Each weight vector converted
 * (int8 -> int32 -> float, the cost the fp32 kernel does not have)
 * serves R rows.  With two row groups or more, a strip of 3 weight rows
 * is converted once into a stack buffer (up to Q8_0_STAGE_MAX
 * columns) and every row group reads floats from it: the same numbers,
 * as int8 -> float is exact, so the arithmetic is unchanged.  That took
 * 64 rows of a 768 x 288 matrix (in cache) from 1.79 to about 0.85 ms,
 * near the fp32 kernel's 0.8.  Outputs go in blocks of Q8_0_OB rows of
 * weights that stay in cache while every row group passes over them, so
 * each weight comes from memory once per call.
 */
#include "kernels/q8_0.h"

#include <stdbool.h>

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/llama_avx2.h"

#define Q8_0_AVX2 LLAMA_AVX2
#define Q8_0_MR 4	/* input rows per full tile */
#define Q8_0_NR 3	/* outputs per full tile */
#define Q8_0_NR1 4	/* outputs per tile of a single row */
#define Q8_0_OB 24	/* outputs per block (a multiple of 2, 3 and 4) */
#define Q8_0_STAGE_MAX 4096	/* widest input staged as float (48 KiB) */

/* 8 int8 at q as 8 floats (exact). */
static inline __attribute__((always_inline)) Q8_0_AVX2 __m256
q8_0_load8(const int8_t *q)
{
	__m128i b = _mm_loadl_epi64((const __m128i *)q);

	return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
}

/*
 * One tile: rows x[0..R) against weight rows o0 .. o0 + O of m, written
 * to out[r * n_out + o].  Inlined with constant R and O.  wf: NULL, or
 * those weight rows' values already converted to float ([O][n_in]), the
 * same numbers (int8 -> float is exact) without converting them again.
 */
static inline __attribute__((always_inline)) Q8_0_AVX2 void
q8_0_tile(int R, int O, float *out, const float *x,
	      const struct q8_0_matrix *m, size_t o0, const float *wf)
{
	size_t n_in = m->cols, n_out = m->rows, group = m->group;
	size_t n_groups = n_in / group;
	const int8_t *q = m->q + o0 * n_in;
	__m256 total[Q8_0_MR][Q8_0_NR1];

#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int o = 0; o < O; o++)
			total[r][o] = _mm256_setzero_ps();
	for (size_t g = 0; g < n_groups; g++) {
		__m256 part[Q8_0_MR][Q8_0_NR1];

#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
#pragma GCC unroll 4
			for (int o = 0; o < O; o++)
				part[r][o] = _mm256_setzero_ps();
		for (size_t i = g * group; i < (g + 1) * group; i += 8) {
			__m256 wv[Q8_0_NR1];

#pragma GCC unroll 4
			for (int o = 0; o < O; o++)
				wv[o] = wf ? _mm256_loadu_ps(wf + o * n_in + i) :
					     q8_0_load8(q + o * n_in + i);
#pragma GCC unroll 4
			for (int r = 0; r < R; r++) {
				__m256 xv = _mm256_loadu_ps(x + r * n_in + i);

#pragma GCC unroll 4
				for (int o = 0; o < O; o++)
					part[r][o] = _mm256_fmadd_ps(wv[o], xv,
								     part[r][o]);
			}
		}
#pragma GCC unroll 4
		for (int o = 0; o < O; o++) {
			__m256 sv = _mm256_set1_ps(q8_0_scale(
				m->s, (o0 + o) * n_groups + g));

#pragma GCC unroll 4
			for (int r = 0; r < R; r++)
				total[r][o] = _mm256_fmadd_ps(part[r][o], sv,
							      total[r][o]);
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int o = 0; o < O; o++)
			out[r * n_out + o0 + o] = llama_hsum8(total[r][o]);
}

/* The tile for R rows and O outputs, each a constant-bound copy. */
#define Q8_0_TILE_CASE(R, O)                               \
	case (R) * 16 + (O):                                   \
		q8_0_tile(R, O, out, x, m, o0, NULL);      \
		break

static Q8_0_AVX2 void q8_0_tile_any(int R, int O, float *out,
					    const float *x,
					    const struct q8_0_matrix *m,
					    size_t o0)
{
	switch (R * 16 + O) {
	Q8_0_TILE_CASE(1, 1); Q8_0_TILE_CASE(1, 2);
	Q8_0_TILE_CASE(1, 3); Q8_0_TILE_CASE(1, 4);
	Q8_0_TILE_CASE(2, 1); Q8_0_TILE_CASE(2, 2);
	Q8_0_TILE_CASE(3, 1); Q8_0_TILE_CASE(3, 2);
	Q8_0_TILE_CASE(4, 1); Q8_0_TILE_CASE(4, 2);
	Q8_0_TILE_CASE(4, 3);
	default:
		break;
	}
}

static Q8_0_AVX2 void q8_0_matmul_matrix_avx2(float *out, const float *x,
					       size_t n_rows,
					       const struct q8_0_matrix *m)
{
	size_t n_in = m->cols, n_out = m->rows;
	size_t n_full = n_rows / Q8_0_MR * Q8_0_MR;
	int R_left = (int)(n_rows - n_full);
	size_t NR_left = R_left == 1 ? Q8_0_NR1 : 2;	/* R_left 1..3 */
	/* several row groups share a strip's conversion: see the file comment */
	bool stage = n_full >= 2 * Q8_0_MR && n_in <= Q8_0_STAGE_MAX;
	float strip[Q8_0_NR * (stage ? n_in : 1)];

	if (m->group % 8) {	/* the checkpoint's property: see the header */
		q8_0_matmul_matrix_portable(out, x, n_rows, m);
		return;
	}
	for (size_t ob = 0; ob < n_out; ob += Q8_0_OB) {
		size_t oe = n_out - ob < Q8_0_OB ? n_out : ob + Q8_0_OB;

		for (size_t o = ob; n_full && o < oe; o += Q8_0_NR) {
			int O = oe - o < Q8_0_NR ? (int)(oe - o) :
						       Q8_0_NR;

			if (stage && O == Q8_0_NR) {
				const int8_t *q = m->q + o * n_in;

				for (size_t i = 0; i < Q8_0_NR * n_in; i += 8)
					_mm256_storeu_ps(strip + i,
							 q8_0_load8(q + i));
				for (size_t b = 0; b < n_full; b += Q8_0_MR)
					q8_0_tile(Q8_0_MR, Q8_0_NR,
						      out + b * n_out,
						      x + b * n_in, m, o, strip);
				continue;
			}
			for (size_t b = 0; b < n_full; b += Q8_0_MR)
				q8_0_tile_any(Q8_0_MR, O,
						  out + b * n_out,
						  x + b * n_in, m, o);
		}
		for (size_t o = ob; R_left && o < oe; o += NR_left) {
			int O = oe - o < NR_left ? (int)(oe - o) :
						   (int)NR_left;

			q8_0_tile_any(R_left, O, out + n_full * n_out,
					  x + n_full * n_in, m, o);
		}
	}
}

void q8_0_matmul_avx2(float *out, const float *x, size_t n_rows,
		      const struct tensor *w)
{
	struct q8_0_matrix m = q8_0_view(w);

	q8_0_matmul_matrix_avx2(out, x, n_rows, &m);
}
#endif
