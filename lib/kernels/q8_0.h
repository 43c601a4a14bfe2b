/*
 * q8_0.h - the Q8_0 type's kernels (DTYPE_Q8_0, tensor.h says the
 * layout): q8_0.c, portable, and its AVX2 twin q8_0_avx2.c, which
 * tensor.c's table names.  Private to lib/kernels; everything else goes
 * through tensor_ops_get().
 *
 * The kernels compute with fp32 activations:
 *
 *	out[b][o] = sum over groups g of s[o][g] * (sum over i in g of
 *						    q[o][i] * x[b][i])
 *
 * llama2.c's runq.c instead quantizes the activations to Q8_0 too and
 * multiplies integers; we keep the activations in fp32, so logits differ
 * from runq.c's in the last bits and greedy choices at near-ties.
 *
 * Both are BATCH INVARIANT (llama_kernels.h): an output element's
 * arithmetic does not depend on the number of rows, the row's place or
 * the tiling.
 */
#ifndef DYNBATCH_Q8_0_H
#define DYNBATCH_Q8_0_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/dtype.h"

/* One matrix, its values and scales apart: what the kernels walk. */
struct q8_0_matrix {
	const int8_t *q;	/* (rows, cols) */
	const unsigned char *s;	/* (rows, cols / group) fp32, maybe unaligned */
	uint32_t rows, cols, group;
};

/* The matrix of a one-layer Q8_0 tensor: its scales follow its values. */
static inline struct q8_0_matrix q8_0_view(const struct tensor *w)
{
	const unsigned char *p = w->data;

	return (struct q8_0_matrix){
		.q = (const int8_t *)p, .s = p + (size_t)w->rows * w->cols,
		.rows = w->rows, .cols = w->cols, .group = w->group,
	};
}

/* Scale number g of the matrix (groups counted over the whole matrix):
 * memcpy, as a legal file's scales need not be 4-byte aligned. */
static inline float q8_0_scale(const unsigned char *s, size_t g)
{
	float v;

	memcpy(&v, s + 4 * g, sizeof(v));
	return v;
}

/* Bytes of one [rows][cols] matrix; 0 when it overflows or group is 0. */
uint64_t q8_0_matrix_bytes(uint64_t rows, uint64_t cols, uint64_t group);

/* tensor_ops.get_row: out[i] = q[row][i] * s[row][i / group]. */
void q8_0_get_row(float *out, const struct tensor *w, uint32_t row);

/* The portable matmul on a matrix (the AVX2 one's fallback too). */
void q8_0_matmul_matrix_portable(float *out, const float *x, size_t n_rows,
				 const struct q8_0_matrix *m);

/* tensor_ops.matmul, portable. */
void q8_0_matmul_portable(float *out, const float *x, size_t n_rows,
			  const struct tensor *w);

#if defined(__x86_64__) || defined(__i386__)
/*
 * tensor_ops.matmul, AVX2+FMA (only where llama_kernels_have_avx2()).
 * It runs the portable code for a group that is not a multiple of 8 (a
 * property of the checkpoint, never of the batch).
 */
void q8_0_matmul_avx2(float *out, const float *x, size_t n_rows,
		      const struct tensor *w);
#endif

#endif /* DYNBATCH_Q8_0_H */
