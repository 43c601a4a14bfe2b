/*
 * f32.h - the F32 type's kernels (DTYPE_F32), which tensor.c's table
 * names: portable and AVX2+FMA, in llama_kernels.c beside the
 * activations' kernels whose dot product and tiles they share.  Private
 * to lib/kernels; everything else goes through tensor_ops_get().
 */
#ifndef DYNBATCH_F32_H
#define DYNBATCH_F32_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

/* tensor_ops.get_row: a copy of the row. */
void f32_get_row(float *out, const struct tensor *w, uint32_t row);

/* tensor_ops.matmul, portable. */
void f32_matmul_portable(float *out, const float *x, size_t n_rows,
			 const struct tensor *w);

#if defined(__x86_64__) || defined(__i386__)
/* tensor_ops.matmul, AVX2+FMA (only where llama_kernels_have_avx2()). */
void f32_matmul_avx2(float *out, const float *x, size_t n_rows,
		     const struct tensor *w);
#endif

#endif /* DYNBATCH_F32_H */
