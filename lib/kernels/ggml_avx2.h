/*
 * ggml_avx2.h - what the AVX2 kernels of ggml's block types share
 * (ggml_dot_avx2.c, ggml_gemm8_avx2.c): the target attribute, unaligned
 * little-endian loads, F16C's half, the K types' scale unpacking and the
 * nibble types' fields and fifth bits.
 * Include only inside "#if defined(__x86_64__) || defined(__i386__)".
 */
#ifndef DYNBATCH_GGML_AVX2_H
#define DYNBATCH_GGML_AVX2_H

#include <stdint.h>
#include <string.h>

#include "kernels/dtype.h"
#include "kernels/llama_avx2.h"

#define GGML_AVX2 __attribute__((target("avx2,fma,f16c")))
#define ALWAYS_INLINE static inline __attribute__((always_inline)) GGML_AVX2

/* The half at p (any alignment) by F16C: the same bits as fp16_load()
 * (tests/unit/test_ggml_quants.c checks all 65536), in two instructions. */
ALWAYS_INLINE float half_f16c(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, sizeof(h));
	return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

ALWAYS_INLINE uint32_t load_u32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

ALWAYS_INLINE uint16_t load_u16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* The eight 6-bit scales (sc) and mins (mn) of a Q4_K/Q5_K block's 12
 * scale bytes s, as bytes 0..7 of each: ggml_k_scale_min() on 32-bit
 * words, four sub-blocks at a time. */
ALWAYS_INLINE void k_scales_mins(const uint8_t *s, uint64_t *sc, uint64_t *mn)
{
	const uint32_t six = 0x3f3f3f3f, four = 0x0f0f0f0f, two = 0x03030303;
	uint32_t u0 = load_u32(s), u1 = load_u32(s + 4), u2 = load_u32(s + 8);
	/* sub-blocks 4..7: low (high) nibbles of bytes 8..11, and the top
	 * two bits of bytes 0..3 (4..7) above them */
	uint32_t sc47 = (u2 & four) | ((u0 >> 6) & two) << 4;
	uint32_t mn47 = ((u2 >> 4) & four) | ((u1 >> 6) & two) << 4;

	*sc = (uint64_t)(u0 & six) | (uint64_t)sc47 << 32;
	*mn = (uint64_t)(u1 & six) | (uint64_t)mn47 << 32;
}

/* Where a nibble type's fields sit in its block (dtype.h). */
ALWAYS_INLINE unsigned qs_at(enum dtype type)
{
	return type == DTYPE_GGML_Q4_0 ? 2 : type == DTYPE_GGML_Q4_1 ? 4 :
	       type == DTYPE_GGML_Q5_0 ? 6 : 8;
}

/* The two blocks' fifth bits (words h0, h1) as bytes of 16 where set, in
 * the order of their nibbles: *lo elements 0..15 of each block, *hi
 * elements 16..31. */
ALWAYS_INLINE void fifth_bits2(uint32_t h0, uint32_t h1, __m256i *lo,
			       __m256i *hi)
{
	/* byte k of a half takes byte k / 8 (+ 2 for *hi) of its word,
	 * then tests bit k % 8 */
	const __m256i pick_lo = _mm256_set_epi64x(
		0x0101010101010101, 0x0000000000000000,
		0x0101010101010101, 0x0000000000000000);
	const __m256i pick_hi = _mm256_set_epi64x(
		0x0303030303030303, 0x0202020202020202,
		0x0303030303030303, 0x0202020202020202);
	const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
	const __m256i sixteen = _mm256_set1_epi8(16);
	__m256i v = _mm256_set_m128i(_mm_cvtsi32_si128((int)h1),
				     _mm_cvtsi32_si128((int)h0));
	__m256i l = _mm256_and_si256(_mm256_shuffle_epi8(v, pick_lo), bit);
	__m256i h = _mm256_and_si256(_mm256_shuffle_epi8(v, pick_hi), bit);

	*lo = _mm256_and_si256(_mm256_cmpeq_epi8(l, bit), sixteen);
	*hi = _mm256_and_si256(_mm256_cmpeq_epi8(h, bit), sixteen);
}

#endif /* DYNBATCH_GGML_AVX2_H */
