/*
 * ggml_dot_avx2.c - the AVX2 twin of ggml_dot.c's matmul for ggml's
 * block types: the same numbers in the same order (ggml_quants.h), so
 * the two agree bit for bit; tensor.c's table picks it where the CPU has
 * AVX2+FMA.
 *
 * NOTES ON THE DESIGN
 *
 * Integer work, where the time goes, is vectorised; the float work per
 * block is the portable code's, operation for operation.
 *
 * 32-blocks: a weight block is unpacked once into its 32 stored codes in
 * element order (nibbles split, Q5's fifth bits spread from their 32-bit
 * word with a byte shuffle and compare), then met by each of up to 4
 * activation rows: maddubs(code, a) (the codes are unsigned but Q8_0's,
 * which goes through the sign trick maddubs(|w|, sign(a, w))) then madd
 * with ones leaves in int32 lane l the exact sum over elements 4l ..
 * 4l + 3, the portable code's L[l].  No int16 overflow: codes are at
 * most 31 (|w| <= 128 for Q8_0) and |a| <= 127 (the activation
 * quantizer never gives -128), so a pair is at most 32512.  Lanes become
 * floats and one FMA by the block's d_w * d_a adds them to the row's
 * 8-lane accumulator: the portable code's fmaf().  Q4_0/Q5_0's -8/-16
 * come back as an offset term, as Q4_1/Q5_1's minimum does.
 *
 * 256-blocks: per block and row, the exact int32 sumi summed in any order
 * (integers), reduced once per block, then the portable code's two
 * scalar float steps.  Q6_K's quants go in as unsigned 0..63 and the
 * -32 comes back through the activations' 16-sums (bsums).
 *
 * Tiles: one weight row against up to GGML_MR activation rows, so each
 * weight block is unpacked once per row group; outputs go in blocks of
 * GGML_OB weight rows that stay in cache while every row group passes,
 * so the weights come from memory once per call whatever n_rows.
 * The tile bodies are inline with constant R and type, so an element's
 * arithmetic never depends on the tile it fell in.
 */
#include "kernels/ggml_quants.h"
#include "kernels/ggml_unpack.h"

#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/llama_avx2.h"

#define GGML_AVX2 LLAMA_AVX2
#define GGML_MR 4	/* activation rows per tile */
#define GGML_OB 16	/* weight rows per block of outputs */
#define ALWAYS_INLINE static inline __attribute__((always_inline)) GGML_AVX2

/* ------------------------------------------------------------- 32-blocks */

/* 16 bytes of nibbles as 32 bytes: low nibbles first (elements 0..15). */
ALWAYS_INLINE __m256i nibbles32(const uint8_t *qs)
{
	__m128i q = _mm_loadu_si128((const __m128i *)qs);
	__m128i m = _mm_set1_epi8(0x0f);

	return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m),
				_mm_and_si128(q, m));
}

/* The 32 bits of the little-endian word at qh as bytes: 16 where set. */
ALWAYS_INLINE __m256i fifth_bits(const uint8_t *qh)
{
	uint32_t h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 |
		     (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
	/* byte k takes byte k / 8 of the word, then tests bit k % 8 */
	const __m256i pick = _mm256_set_epi64x(
		0x0303030303030303, 0x0202020202020202,
		0x0101010101010101, 0x0000000000000000);
	const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
	__m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), pick);

	v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
	return _mm256_and_si256(v, _mm256_set1_epi8(16));
}

/*
 * Weight block b of type as its 32 stored codes (Q8_0 signed, the others
 * unsigned), d and the offset term's factor m (ggml_quants.h: m_w, or
 * -8 d / -16 d for Q4_0 / Q5_0; 0 for Q8_0).
 */
ALWAYS_INLINE __m256i unpack32(enum dtype type, const uint8_t *b, float *d,
			       float *m)
{
	*d = fp16_load(b);
	switch (type) {
	case DTYPE_GGML_Q8_0:
		*m = 0;
		return _mm256_loadu_si256((const __m256i *)(b + 2));
	case DTYPE_GGML_Q4_0:
		*m = -8.0f * *d;
		return nibbles32(b + 2);
	case DTYPE_GGML_Q4_1:
		*m = fp16_load(b + 2);
		return nibbles32(b + 4);
	case DTYPE_GGML_Q5_0:
		*m = -16.0f * *d;
		return _mm256_or_si256(nibbles32(b + 6), fifth_bits(b + 2));
	default:	/* DTYPE_GGML_Q5_1 */
		*m = fp16_load(b + 2);
		return _mm256_or_si256(nibbles32(b + 8), fifth_bits(b + 4));
	}
}

/* One weight row against R activation rows (a[r], n_blocks each). */
ALWAYS_INLINE void tile32(int R, enum dtype type, float *out, size_t n_out,
			  const uint8_t *w, const struct ggml_act32 *a,
			  size_t n_blocks)
{
	unsigned bytes = ggml_block_bytes(type);
	int is_q8 = type == DTYPE_GGML_Q8_0;
	const __m256i ones = _mm256_set1_epi16(1);
	__m256 acc[GGML_MR];
	float macc[GGML_MR];

#pragma GCC unroll 4
	for (int r = 0; r < R; r++) {
		acc[r] = _mm256_setzero_ps();
		macc[r] = 0;
	}
	for (size_t k = 0; k < n_blocks; k++) {
		float d, m;
		__m256i wv = unpack32(type, w + k * bytes, &d, &m);
		/* Q8_0: |w| as unsigned, its sign moved onto a */
		__m256i aw = is_q8 ? _mm256_sign_epi8(wv, wv) : wv;

#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			const struct ggml_act32 *ab = a + r * n_blocks + k;
			__m256i y = _mm256_loadu_si256((const __m256i *)ab->q);
			__m256i p = _mm256_maddubs_epi16(
				aw, is_q8 ? _mm256_sign_epi8(y, wv) : y);
			__m256 L = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));

			acc[r] = _mm256_fmadd_ps(L, _mm256_set1_ps(d * ab->d), acc[r]);
			if (!is_q8)
				macc[r] = macc[r] + m * ab->s;
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		out[r * n_out] = llama_hsum8(acc[r]) + macc[r];
}

/* ------------------------------------------------------------ 256-blocks */

ALWAYS_INLINE int32_t hsum_epi32(__m256i v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v),
				  _mm256_extracti128_si256(v, 1));

	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
	return _mm_cvtsi128_si32(s);
}

/* Q4_K/Q5_K (five) block b: the exact sumi of R rows into sumi[]. */
ALWAYS_INLINE void sumi_k45(int R, int five, const uint8_t *b, const int *sc,
			    const struct ggml_act256 *const *ab, int32_t *sumi)
{
	const uint8_t *qs = b + (five ? 48 : 16);
	const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
	__m256i qh = five ? _mm256_loadu_si256((const __m256i *)(b + 16)) :
			    _mm256_setzero_si256();
	__m256i isum[GGML_MR];

#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		isum[r] = _mm256_setzero_si256();
#pragma GCC unroll 4
	for (int c = 0; c < 4; c++) {
		__m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
		__m256i lo = _mm256_and_si256(q, m4);
		__m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
		__m256i s_lo = _mm256_set1_epi16((short)sc[2 * c]);
		__m256i s_hi = _mm256_set1_epi16((short)sc[2 * c + 1]);

		if (five) {	/* bit j of qh[k] is sub-block j's fifth bit */
			__m256i b_lo = _mm256_and_si256(
				_mm256_srli_epi16(qh, 2 * c), one);
			__m256i b_hi = _mm256_and_si256(
				_mm256_srli_epi16(qh, 2 * c + 1), one);

			lo = _mm256_or_si256(lo, _mm256_slli_epi16(b_lo, 4));
			hi = _mm256_or_si256(hi, _mm256_slli_epi16(b_hi, 4));
		}
#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			const int8_t *y = ab[r]->q + 64 * c;
			__m256i p_lo = _mm256_maddubs_epi16(
				lo, _mm256_loadu_si256((const __m256i *)y));
			__m256i p_hi = _mm256_maddubs_epi16(
				hi, _mm256_loadu_si256((const __m256i *)(y + 32)));

			isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(
				_mm256_madd_epi16(p_lo, s_lo),
				_mm256_madd_epi16(p_hi, s_hi)));
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		sumi[r] = hsum_epi32(isum[r]);
}

/* Q6_K block b: the exact sumi of R rows (quants -32 .. 31). */
ALWAYS_INLINE void sumi_q6_k(int R, const uint8_t *b, const int *sc,
			     const struct ggml_act256 *const *ab, int32_t *sumi)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
	__m256i isum[GGML_MR];

#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		isum[r] = _mm256_setzero_si256();
#pragma GCC unroll 2
	for (int h = 0; h < 2; h++) {
		__m256i q0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
		__m256i q1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
		__m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));

#pragma GCC unroll 4
		for (int s = 0; s < 4; s++) {
			__m256i nib = s & 1 ? q1 : q0;
			__m256i q, scv;

			nib = s < 2 ? _mm256_and_si256(nib, m4) :
				      _mm256_and_si256(_mm256_srli_epi16(nib, 4), m4);
			q = _mm256_or_si256(nib, _mm256_slli_epi16(_mm256_and_si256(
				_mm256_srli_epi16(qh, 2 * s), m2), 4));
			/* int16 lanes 0..7: elements 0..15, scale g; 8..15: g + 1 */
			scv = _mm256_set_m128i(
				_mm_set1_epi16((short)sc[8 * h + 2 * s + 1]),
				_mm_set1_epi16((short)sc[8 * h + 2 * s]));
#pragma GCC unroll 4
			for (int r = 0; r < R; r++) {
				const int8_t *y = ab[r]->q + 128 * h + 32 * s;
				__m256i p = _mm256_maddubs_epi16(
					q, _mm256_loadu_si256((const __m256i *)y));

				isum[r] = _mm256_add_epi32(isum[r],
							   _mm256_madd_epi16(p, scv));
			}
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++) {
		int32_t corr = 0;	/* the -32 of every quant */

		for (int g = 0; g < 16; g++)
			corr += sc[g] * ab[r]->bsums[g];
		sumi[r] = hsum_epi32(isum[r]) - 32 * corr;
	}
}

ALWAYS_INLINE void tile256(int R, enum dtype type, float *out, size_t n_out,
			   const uint8_t *w, const struct ggml_act256 *a,
			   size_t n_blocks)
{
	unsigned bytes = ggml_block_bytes(type);
	float acc[GGML_MR];

#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		acc[r] = 0;
	for (size_t k = 0; k < n_blocks; k++) {
		const uint8_t *b = w + k * bytes;
		const struct ggml_act256 *ab[GGML_MR];
		int32_t sumi[GGML_MR];
		int sc[16], mn[8];
		float d, dmin = 0;

#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
			ab[r] = a + r * n_blocks + k;
		if (type == DTYPE_GGML_Q6_K) {
			d = fp16_load(b + 208);
			for (int g = 0; g < 16; g++)
				sc[g] = (int8_t)b[192 + g];
			sumi_q6_k(R, b, sc, ab, sumi);
		} else {
			d = fp16_load(b);
			dmin = fp16_load(b + 2);
			for (int j = 0; j < 8; j++) {
				uint8_t s6, m6;

				ggml_k_scale_min(b + 4, j, &s6, &m6);
				sc[j] = s6;
				mn[j] = m6;
			}
			sumi_k45(R, type == DTYPE_GGML_Q5_K, b, sc, ab, sumi);
		}
#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			acc[r] = acc[r] + (d * ab[r]->d) * (float)sumi[r];
			if (type != DTYPE_GGML_Q6_K) {
				int32_t summ = 0;

				for (int j = 0; j < 8; j++)
					summ += mn[j] * (ab[r]->bsums[2 * j] +
							 ab[r]->bsums[2 * j + 1]);
				acc[r] = acc[r] - (dmin * ab[r]->d) * (float)summ;
			}
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		out[r * n_out] = acc[r];
}

/* ----------------------------------------------------------------- matmul */

#define TILE_R(fn, R, T, act_t)                                              \
	case R:                                                              \
		fn(R, T, out, n_out, w, (const act_t *)act, n_blocks);       \
		break
#define TILE_TYPE(fn, T, act_t)                                              \
	case T:                                                              \
		switch (R) {                                                 \
		TILE_R(fn, 1, T, act_t); TILE_R(fn, 2, T, act_t);            \
		TILE_R(fn, 3, T, act_t); default: TILE_R(fn, 4, T, act_t);   \
		}                                                            \
		break

/* Weight row w against R (1..4) rows of quantized activations act. */
static GGML_AVX2 void ggml_tile(enum dtype type, int R, float *out,
				size_t n_out, const uint8_t *w,
				const void *act, size_t n_blocks)
{
	switch (type) {
	TILE_TYPE(tile32, DTYPE_GGML_Q8_0, struct ggml_act32);
	TILE_TYPE(tile32, DTYPE_GGML_Q4_0, struct ggml_act32);
	TILE_TYPE(tile32, DTYPE_GGML_Q4_1, struct ggml_act32);
	TILE_TYPE(tile32, DTYPE_GGML_Q5_0, struct ggml_act32);
	TILE_TYPE(tile32, DTYPE_GGML_Q5_1, struct ggml_act32);
	TILE_TYPE(tile256, DTYPE_GGML_Q4_K, struct ggml_act256);
	TILE_TYPE(tile256, DTYPE_GGML_Q5_K, struct ggml_act256);
	TILE_TYPE(tile256, DTYPE_GGML_Q6_K, struct ggml_act256);
	default:
		break;
	}
}

GGML_AVX2 void ggml_matmul_avx2(float *out, const float *x, size_t n_rows,
				const struct tensor *t)
{
	enum dtype type = t->type;
	size_t n_in = t->cols, n_out = t->rows;
	size_t row_bytes = ggml_row_bytes(type, n_in);
	size_t qk = ggml_block_values(type), n_blocks = n_in / qk;
	size_t act_row = n_blocks * (qk == GGML_QK256 ?
				     sizeof(struct ggml_act256) :
				     sizeof(struct ggml_act32));
	const uint8_t *w = t->data;
	unsigned char *act = NULL;
	size_t act_bytes;

	if (!__builtin_mul_overflow(n_rows, act_row, &act_bytes) && act_bytes)
		act = malloc(act_bytes);
	if (!act) {	/* the same numbers, quantized where they are used */
		ggml_matmul_portable(out, x, n_rows, t);
		return;
	}
	for (size_t b = 0; b < n_rows; b++) {
		if (qk == GGML_QK256)
			ggml_quantize_act256((void *)(act + b * act_row),
					     x + b * n_in, n_in);
		else
			ggml_quantize_act32((void *)(act + b * act_row),
					    x + b * n_in, n_in);
	}
	for (size_t ob = 0; ob < n_out; ob += GGML_OB) {
		size_t oe = n_out - ob < GGML_OB ? n_out : ob + GGML_OB;

		for (size_t b = 0; b < n_rows; b += GGML_MR) {
			int R = n_rows - b < GGML_MR ? (int)(n_rows - b) : GGML_MR;

			for (size_t o = ob; o < oe; o++)
				ggml_tile(type, R, out + b * n_out + o, n_out,
					  w + o * row_bytes, act + b * act_row,
					  n_blocks);
		}
	}
	free(act);
}
#endif
