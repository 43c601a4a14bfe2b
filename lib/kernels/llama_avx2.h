/*
 * llama_avx2.h - what the llama kernels' AVX2 code shares (llama_kernels.c
 * for float weights, q8_0_avx2.c for Q8_0, f16_avx2.c and ggml_dot_avx2.c
 * for GGUF's types): the target attribute that lets them use AVX2+FMA in
 * a build for any x86-64 (llama_kernels_get() and tensor_ops_get() pick
 * at run time), the one horizontal sum every output element ends with
 * and the scalar FMA of dot products' tails.  Batch invariance rests on
 * that sum being the same fixed tree everywhere, so it is written once.
 * Include only inside "#if defined(__x86_64__) || defined(__i386__)".
 */
#ifndef DYNBATCH_LLAMA_AVX2_H
#define DYNBATCH_LLAMA_AVX2_H

#include <immintrin.h>

#define LLAMA_AVX2 __attribute__((target("avx2,fma")))

/* The 8 lanes of v summed in a fixed order: (0+4, 1+5, 2+6, 3+7), then
 * pairs, then the last two. */
static inline __attribute__((always_inline)) LLAMA_AVX2 float
llama_hsum8(__m256 v)
{
	__m128 lo = _mm_add_ps(_mm256_castps256_ps128(v),
			       _mm256_extractf128_ps(v, 1));
	__m128 hi = _mm_movehl_ps(lo, lo);

	lo = _mm_add_ps(lo, hi);
	hi = _mm_shuffle_ps(lo, lo, 1);
	return _mm_cvtss_f32(_mm_add_ss(lo, hi));
}

/* s + a * b with one rounding, as the tail of every dot product (the F32
 * kernel's and the F16/BF16 ones', which must match it). */
static inline __attribute__((always_inline)) LLAMA_AVX2 float
llama_fma1(float a, float b, float s)
{
	return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b),
					  _mm_set_ss(s)));
}

#endif /* DYNBATCH_LLAMA_AVX2_H */
