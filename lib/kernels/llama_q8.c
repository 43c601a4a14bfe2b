/*
 * llama_q8.c - Q8_0 matmul (AVX2+FMA and portable) and row
 * dequantisation for version 2 checkpoints; see llama_q8.h.
 *
 * NOTES ON THE DESIGN
 *
 * The weights stay int8 in the shared read-only mapping: a quarter of the
 * fp32 bytes to stream per token, which is what bounds small batches.
 * Nothing is dequantized ahead of time except, per looked-up token, one
 * embedding row.
 *
 * Scales are read with memcpy: in export.py's layout a tensor's scales
 * follow its rows * cols int8 values, so they are 4-byte aligned only
 * when rows * cols is a multiple of 4, which a legal file need not be.
 *
 * Batch invariance (the order every output element's sum follows, in
 * every tile variant):
 *  - portable: per group, one float partial sum over i in order; the
 *    total adds scale * partial group after group.
 *  - AVX2 (group a multiple of 8): per group, an 8-lane partial fed by
 *    one FMA per 8 values in order; the 8-lane total takes one FMA
 *    partial * scale per group in order; at the end llama_hsum8() (a
 *    fixed tree).  There is no scalar tail: cols is a multiple of group.
 * The tile variants are one inline function with constant bounds, so an
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
 * is converted once into a stack buffer (up to LLAMA_Q8_STAGE_MAX
 * columns) and every row group reads floats from it: the same numbers,
 * as int8 -> float is exact, so the arithmetic is unchanged.  That took
 * 64 rows of a 768 x 288 matrix (in cache) from 1.79 to about 0.85 ms,
 * near the fp32 kernel's 0.8.  Outputs go in blocks of LLAMA_Q8_OB rows of
 * weights that stay in cache while every row group passes over them, so
 * each weight comes from memory once per call.
 */
#include "kernels/llama_q8.h"

#include <stdbool.h>
#include <string.h>

uint64_t llama_q8_matrix_bytes(uint64_t rows, uint64_t cols, uint64_t group)
{
	uint64_t n, scales;

	if (!group || __builtin_mul_overflow(rows, cols, &n) ||
	    __builtin_mul_overflow(n / group, 4, &scales) ||
	    __builtin_add_overflow(n, scales, &n))
		return 0;
	return n;
}

struct llama_q8_matrix llama_q8_layer(const struct llama_q8_tensor *t,
				      uint32_t l)
{
	const unsigned char *p = t->base + (size_t)l * t->layer_bytes;
	size_t n = (size_t)t->rows * t->cols;

	return (struct llama_q8_matrix){
		.q = (const int8_t *)p, .s = p + n,
		.rows = t->rows, .cols = t->cols, .group = t->group,
	};
}

/* Scale number g of the matrix (groups counted over the whole matrix). */
static inline float llama_q8_scale(const unsigned char *s, size_t g)
{
	float v;

	memcpy(&v, s + 4 * g, sizeof(v));
	return v;
}

void llama_q8_dequant_row(float *out, const struct llama_q8_matrix *m,
			  uint32_t row)
{
	size_t n_groups = m->cols / m->group;
	const int8_t *q = m->q + (size_t)row * m->cols;

	for (size_t g = 0; g < n_groups; g++) {
		float s = llama_q8_scale(m->s, (size_t)row * n_groups + g);

		for (size_t i = g * m->group; i < (g + 1) * m->group; i++)
			out[i] = (float)q[i] * s;
	}
}

/* ---------------------------------------------------------------- portable */

static float llama_q8_dot_portable(const int8_t *q, const unsigned char *s,
				   size_t first_group, const float *x,
				   size_t n_in, size_t group)
{
	float total = 0;

	for (size_t g = 0; g < n_in / group; g++) {
		float part = 0;

		for (size_t i = g * group; i < (g + 1) * group; i++)
			part += (float)q[i] * x[i];
		total += llama_q8_scale(s, first_group + g) * part;
	}
	return total;
}

static void llama_q8_matmul_portable(float *out, const float *x,
				     size_t n_rows,
				     const struct llama_q8_matrix *m)
{
	size_t n_in = m->cols, n_out = m->rows, n_groups = n_in / m->group;

	for (size_t o = 0; o < n_out; o++)
		for (size_t b = 0; b < n_rows; b++)
			out[b * n_out + o] = llama_q8_dot_portable(
				m->q + o * n_in, m->s, o * n_groups,
				x + b * n_in, n_in, m->group);
}

/* -------------------------------------------------------------- AVX2 + FMA */

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/llama_avx2.h"

#define LLAMA_Q8_AVX2 LLAMA_AVX2
#define LLAMA_Q8_MR 4	/* input rows per full tile */
#define LLAMA_Q8_NR 3	/* outputs per full tile */
#define LLAMA_Q8_NR1 4	/* outputs per tile of a single row */
#define LLAMA_Q8_OB 24	/* outputs per block (a multiple of 2, 3 and 4) */
#define LLAMA_Q8_STAGE_MAX 4096	/* widest input staged as float (48 KiB) */

/* 8 int8 at q as 8 floats (exact). */
static inline __attribute__((always_inline)) LLAMA_Q8_AVX2 __m256
llama_q8_load8(const int8_t *q)
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
static inline __attribute__((always_inline)) LLAMA_Q8_AVX2 void
llama_q8_tile(int R, int O, float *out, const float *x,
	      const struct llama_q8_matrix *m, size_t o0, const float *wf)
{
	size_t n_in = m->cols, n_out = m->rows, group = m->group;
	size_t n_groups = n_in / group;
	const int8_t *q = m->q + o0 * n_in;
	__m256 total[LLAMA_Q8_MR][LLAMA_Q8_NR1];

#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int o = 0; o < O; o++)
			total[r][o] = _mm256_setzero_ps();
	for (size_t g = 0; g < n_groups; g++) {
		__m256 part[LLAMA_Q8_MR][LLAMA_Q8_NR1];

#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
#pragma GCC unroll 4
			for (int o = 0; o < O; o++)
				part[r][o] = _mm256_setzero_ps();
		for (size_t i = g * group; i < (g + 1) * group; i += 8) {
			__m256 wv[LLAMA_Q8_NR1];

#pragma GCC unroll 4
			for (int o = 0; o < O; o++)
				wv[o] = wf ? _mm256_loadu_ps(wf + o * n_in + i) :
					     llama_q8_load8(q + o * n_in + i);
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
			__m256 sv = _mm256_set1_ps(llama_q8_scale(
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
#define LLAMA_Q8_TILE_CASE(R, O)                               \
	case (R) * 16 + (O):                                   \
		llama_q8_tile(R, O, out, x, m, o0, NULL);      \
		break

static LLAMA_Q8_AVX2 void llama_q8_tile_any(int R, int O, float *out,
					    const float *x,
					    const struct llama_q8_matrix *m,
					    size_t o0)
{
	switch (R * 16 + O) {
	LLAMA_Q8_TILE_CASE(1, 1); LLAMA_Q8_TILE_CASE(1, 2);
	LLAMA_Q8_TILE_CASE(1, 3); LLAMA_Q8_TILE_CASE(1, 4);
	LLAMA_Q8_TILE_CASE(2, 1); LLAMA_Q8_TILE_CASE(2, 2);
	LLAMA_Q8_TILE_CASE(3, 1); LLAMA_Q8_TILE_CASE(3, 2);
	LLAMA_Q8_TILE_CASE(4, 1); LLAMA_Q8_TILE_CASE(4, 2);
	LLAMA_Q8_TILE_CASE(4, 3);
	default:
		break;
	}
}

static LLAMA_Q8_AVX2 void llama_q8_matmul_avx2(float *out, const float *x,
					       size_t n_rows,
					       const struct llama_q8_matrix *m)
{
	size_t n_in = m->cols, n_out = m->rows;
	size_t n_full = n_rows / LLAMA_Q8_MR * LLAMA_Q8_MR;
	int R_left = (int)(n_rows - n_full);
	size_t NR_left = R_left == 1 ? LLAMA_Q8_NR1 : 2;	/* R_left 1..3 */
	/* several row groups share a strip's conversion: see the file comment */
	bool stage = n_full >= 2 * LLAMA_Q8_MR && n_in <= LLAMA_Q8_STAGE_MAX;
	float strip[LLAMA_Q8_NR * (stage ? n_in : 1)];

	if (m->group % 8) {	/* the checkpoint's property: see the header */
		llama_q8_matmul_portable(out, x, n_rows, m);
		return;
	}
	for (size_t ob = 0; ob < n_out; ob += LLAMA_Q8_OB) {
		size_t oe = n_out - ob < LLAMA_Q8_OB ? n_out : ob + LLAMA_Q8_OB;

		for (size_t o = ob; n_full && o < oe; o += LLAMA_Q8_NR) {
			int O = oe - o < LLAMA_Q8_NR ? (int)(oe - o) :
						       LLAMA_Q8_NR;

			if (stage && O == LLAMA_Q8_NR) {
				const int8_t *q = m->q + o * n_in;

				for (size_t i = 0; i < LLAMA_Q8_NR * n_in; i += 8)
					_mm256_storeu_ps(strip + i,
							 llama_q8_load8(q + i));
				for (size_t b = 0; b < n_full; b += LLAMA_Q8_MR)
					llama_q8_tile(LLAMA_Q8_MR, LLAMA_Q8_NR,
						      out + b * n_out,
						      x + b * n_in, m, o, strip);
				continue;
			}
			for (size_t b = 0; b < n_full; b += LLAMA_Q8_MR)
				llama_q8_tile_any(LLAMA_Q8_MR, O,
						  out + b * n_out,
						  x + b * n_in, m, o);
		}
		for (size_t o = ob; R_left && o < oe; o += NR_left) {
			int O = oe - o < NR_left ? (int)(oe - o) :
						   (int)NR_left;

			llama_q8_tile_any(R_left, O, out + n_full * n_out,
					  x + n_full * n_in, m, o);
		}
	}
}
#endif

llama_q8_matmul_fn *llama_q8_matmul_get(enum llama_kernel_kind kind)
{
#if defined(__x86_64__) || defined(__i386__)
	if (kind == LLAMA_KERNEL_AVX2 && llama_kernels_have_avx2())
		return llama_q8_matmul_avx2;
#endif
	if (kind == LLAMA_KERNEL_AVX2)
		return NULL;
	return llama_q8_matmul_portable;
}
