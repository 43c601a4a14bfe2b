/*
 * ggml_dot_avx2.c - the AVX2 twin of ggml_dot.c (stub).
 */
#include "kernels/ggml_quants.h"

#if defined(__x86_64__) || defined(__i386__)
void ggml_matmul_avx2(float *out, const float *x, size_t n_rows,
		      const struct tensor *w)
{
	ggml_matmul_portable(out, x, n_rows, w);
}
#endif
