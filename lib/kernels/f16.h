/*
 * f16.h - the F16 and BF16 types' kernels (DTYPE_F16, DTYPE_BF16):
 * f16.c, portable, and its AVX2 twin f16_avx2.c, which tensor.c's table
 * names.  Private to lib/kernels; everything else goes through
 * tensor_ops_get().
 *
 * Each weight is converted to fp32 exactly (fp16.h) and the dot product
 * then runs in the F32 kernel's order on the same instruction set
 * (llama_kernels.c): the portable one's 8 partial sums and tree, the
 * AVX2 one's 8-lane FMA chain, llama_hsum8() and scalar FMA tail.  So an
 * F16 or BF16 matrix gives, bit for bit, what the F32 kernel of the same
 * kind gives on its converted values; like that kernel, the portable and
 * AVX2 results differ in the last bits, and each is batch invariant.
 */
#ifndef DYNBATCH_F16_H
#define DYNBATCH_F16_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

/* Bytes of one [rows][cols] matrix; 0 when it overflows. */
uint64_t f16_matrix_bytes(uint64_t rows, uint64_t cols, uint64_t group);

/* tensor_ops.get_row of F16 and of BF16 (w->type says which). */
void f16_get_row(float *out, const struct tensor *w, uint32_t row);

/* tensor_ops.matmul, portable, F16 and BF16. */
void f16_matmul_portable(float *out, const float *x, size_t n_rows,
			 const struct tensor *w);

#if defined(__x86_64__) || defined(__i386__)
/* Does the CPU convert halves (F16C)?  f16_matmul_avx2() needs it. */
int f16_have_f16c(void);

/* tensor_ops.matmul, AVX2+FMA (+F16C for F16). */
void f16_matmul_avx2(float *out, const float *x, size_t n_rows,
		     const struct tensor *w);
#endif

#endif /* DYNBATCH_F16_H */
