/*
 * llama_q8.h - Q8_0 weights of llama2.c's export.py "version 2"
 * checkpoints, used in place in the read-only mapping: the tensor view,
 * the matmul kernels and the dequantisation of one row (the token
 * embedding's lookup).
 *
 * A Q8_0 matrix [rows][cols] is stored as rows * cols int8 values q, then
 * rows * cols / group fp32 scales s, one per run of `group` consecutive
 * values of a row (group divides cols, so a group never straddles rows).
 * The weight it stands for is q * s.  A tensor stacked over layers is the
 * layers' matrices back to back, each its values then its scales.
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
 * Like llama_kernels.h, two implementations (AVX2+FMA, portable), each
 * BATCH INVARIANT: an output element's arithmetic does not depend on the
 * number of rows, the row's place or the tiling.
 */
#ifndef DYNBATCH_LLAMA_Q8_H
#define DYNBATCH_LLAMA_Q8_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/llama_kernels.h"

/* One Q8_0 tensor of the mapping, stacked over n layers (1 if not). */
struct llama_q8_tensor {
	const unsigned char *base;	/* layer 0's values */
	size_t layer_bytes;		/* one layer's values + scales */
	uint32_t rows, cols, group;
};

/* One layer's matrix: values, and scales (fp32, maybe unaligned). */
struct llama_q8_matrix {
	const int8_t *q;
	const unsigned char *s;
	uint32_t rows, cols, group;
};

/* Bytes of one [rows][cols] Q8_0 matrix; 0 when it overflows. */
uint64_t llama_q8_matrix_bytes(uint64_t rows, uint64_t cols, uint64_t group);

/* Layer l of t (no bounds check: l < the tensor's layers). */
struct llama_q8_matrix llama_q8_layer(const struct llama_q8_tensor *t,
				      uint32_t l);

/* out[i] = q[row][i] * s[row][i / group] for i < cols. */
void llama_q8_dequant_row(float *out, const struct llama_q8_matrix *m,
			  uint32_t row);

/*
 * out[b][o] = W x[b] as in the file comment, for b < n_rows and
 * o < m->rows; x is [n_rows][m->cols], out [n_rows][m->rows], row-major,
 * not overlapping.
 */
typedef void llama_q8_matmul_fn(float *out, const float *x, size_t n_rows,
				const struct llama_q8_matrix *m);

/*
 * The Q8 matmul of kernel kind (NULL for AVX2 where the CPU lacks it).
 * The AVX2 one runs the portable code for a group that is not a multiple
 * of 8 (a property of the checkpoint, never of the batch).
 */
llama_q8_matmul_fn *llama_q8_matmul_get(enum llama_kernel_kind kind);

#endif /* DYNBATCH_LLAMA_Q8_H */
