/*
 * q4g.h - the Q4G type (DTYPE_Q4G, dtype.h says the layout): 4-bit
 * weights in groups of G with an fp32 scale a group, made from a float
 * checkpoint at load (quant=q4).  q4g.c has the quantizer, the
 * dequantization of a row and the portable matmul; q4g_avx2.c its AVX2
 * twin.  The model reaches the kernels through tensor_ops_get() and
 * calls only q4g_quantize_matrix() here directly.
 *
 * THE MATMUL.  Each activation row is quantized once per call, group by
 * group with the weights' G (its last group as partial as the weights'):
 * d_a = max |x| / 127 (fp32), q_a = round(x / d_a) clamped to -127..127
 * (never -128), 0 where d_a is 0 or x is nan, and 0 past the row's end.
 * Then, per output, with q_w the weight's signed codes:
 *
 *	L[l] = sum over elements i of the group with (i / 4) % 8 == l of
 *	       q_w[i] * q_a[i]				(int32, exact)
 *	acc[l] = fmaf((float)L[l], d_w * d_a, acc[l])	group after group
 *	out = ggml_hsum8(acc)				(llama_hsum8()'s tree)
 *
 * which is what AVX2's maddubs + madd leave in 8 int32 lanes per 32
 * elements (|q_w| <= 8, |q_a| <= 127: a pair sum is at most 2032, no
 * int16 overflow; |L| <= 32 * 8 * 127 at G = 256, exact as a float).
 * Both twins compute exactly this, so they agree BIT FOR BIT, and an
 * output depends only on its weight row and activation row: BATCH
 * INVARIANT.
 */
#ifndef DYNBATCH_Q4G_H
#define DYNBATCH_Q4G_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

#define Q4G_GROUP 32		/* what quant=q4 uses */
#define Q4G_GROUP_MAX 256

/* Is g a group Q4G takes (32, 64, 128 or 256)? */
static inline int q4g_group_ok(uint64_t g)
{
	return g == 32 || g == 64 || g == 128 || g == 256;
}

/* Groups of a row of cols values (the last maybe partial). */
static inline uint64_t q4g_row_groups(uint64_t cols, uint64_t group)
{
	return (cols + group - 1) / group;
}

/* Bytes of one group: its scale, then G / 2 bytes of codes. */
static inline uint64_t q4g_group_bytes(uint64_t group)
{
	return 4 + group / 2;
}

/* Bytes of a [rows][cols] matrix; 0 on overflow or a group not taken. */
uint64_t q4g_matrix_bytes(uint64_t rows, uint64_t cols, uint64_t group);

/*
 * The n values at x as one row of Q4G with group at dst
 * (q4g_row_groups(n, group) * q4g_group_bytes(group) bytes): d = max |x|
 * / 7 per group, code = round(x / d) (to nearest, ties away from zero),
 * in -7..7; nan, and every value of a group with d 0, nan or inf, give
 * code 0 (the scale stays as computed).  Deterministic.
 */
void q4g_quantize_row(unsigned char *dst, const float *x, size_t n,
		      uint32_t group);

/* A [rows][cols] f32 matrix at src as Q4G at dst (q4g_matrix_bytes()). */
void q4g_quantize_matrix(unsigned char *dst, const float *src, size_t rows,
			 size_t cols, uint32_t group);

/* tensor_ops.get_row: out[i] = d * q of element i of the row. */
void q4g_get_row(float *out, const struct tensor *w, uint32_t row);

/* ------------------------------------- what the two matmuls share */

/* Bytes of one activation row's quantized groups: per group an fp32
 * d_a then G int8 codes (4-byte aligned for every G taken). */
static inline size_t q4g_act_row_bytes(size_t cols, uint32_t group)
{
	return (size_t)q4g_row_groups(cols, group) * (4 + group);
}

/* x[0 .. n) as one activation row at act (q4g_act_row_bytes()). */
void q4g_quantize_act(unsigned char *act, const float *x, size_t n,
		      uint32_t group);

/* The quantized activation rows of x[n_rows][cols], or NULL when there
 * is no memory for them (or n_rows is 0); free() it. */
unsigned char *q4g_act_alloc(const float *x, size_t n_rows, size_t cols,
			     uint32_t group);

/*
 * Weight row w against the activation row x of n values, quantized at
 * act (NULL: each group quantized here as it is used, the same numbers,
 * for when q4g_act_alloc() found no memory).
 */
float q4g_row_dot(const unsigned char *w, const unsigned char *act,
		  const float *x, size_t n, uint32_t group);

/* tensor_ops.matmul, portable. */
void q4g_matmul_portable(float *out, const float *x, size_t n_rows,
			 const struct tensor *w);

#if defined(__x86_64__) || defined(__i386__)
/* tensor_ops.matmul, AVX2+FMA (only where llama_kernels_have_avx2()). */
void q4g_matmul_avx2(float *out, const float *x, size_t n_rows,
		     const struct tensor *w);
#endif

#endif /* DYNBATCH_Q4G_H */
