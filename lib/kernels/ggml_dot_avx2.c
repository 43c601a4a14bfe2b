/*
 * ggml_dot_avx2.c - the AVX2 twin of ggml_dot.c's matmul for ggml's
 * block types: the same numbers in the same order (ggml_quants.h), so
 * the two agree bit for bit; tensor.c's table picks it where the CPU has
 * AVX2+FMA, and it hands over to the portable code where F16C is missing.
 *
 * NOTES ON THE DESIGN
 *
 * Integer work, where the time goes, is vectorised; the float work per
 * block is the portable code's, operation for operation.  Half scales
 * are read by F16C, which gives fp16_load()'s bits.
 *
 * 32-blocks: a weight block is unpacked once into its 32 integers in
 * element order (nibbles split, Q5's fifth bits spread from their 32-bit
 * word with a byte shuffle and compare; Q4_0/Q5_0 less 8/16), then met by
 * each of up to 8 activation rows: maddubs(code, a) for Q4_1/Q5_1's
 * unsigned codes, the sign trick maddubs(|w|, sign(a, w)) for the signed
 * ones (Q8_0, Q4_0, Q5_0), then madd with ones leaves in int32 lane l the
 * exact sum over elements 4l .. 4l + 3, the portable code's L[l].  No
 * int16 overflow: |w| <= 128 and |a| <= 127 (the activation quantizer
 * never gives -128), so a pair is at most 32512.  Lanes become floats and
 * one FMA by the block's d_w * d_a (a broadcast load of d_a times a
 * vector of d_w: the same product) adds them to the row's 8-lane
 * accumulator: the portable code's fmaf().  Q4_1/Q5_1's minimum comes
 * back as an offset term.
 *
 * 256-blocks: per block and row, the exact int32 sumi summed in any order
 * (integers): Q6_K's quants go in as unsigned 0..63 and the -32, like the
 * K mins' sum, comes from the activations' 16-sums (bsums) by one madd.
 * Four rows' lanes are reduced together (hadd), and the portable code's
 * two scalar float steps run for four rows at once in the lanes of an SSE
 * register, each lane exactly one row's scalar operations.
 *
 * Tiles: one weight row against up to GGML_MR activation rows, so each
 * weight block is unpacked once per row group; outputs go in blocks of
 * GGML_OB weight rows that stay in cache while every row group passes,
 * so the weights come from memory once per call whatever n_rows.
 * The tile bodies are inline with constant R and type, so an element's
 * arithmetic never depends on the tile it fell in.
 */
#include "kernels/f16.h"
#include "kernels/ggml_quants.h"
#include "kernels/ggml_unpack.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/llama_avx2.h"

#define GGML_AVX2 __attribute__((target("avx2,fma,f16c")))
#define GGML_MR 8	/* activation rows per tile (at most) */
#define GGML_OB 16	/* weight rows per block of outputs */
#define ALWAYS_INLINE static inline __attribute__((always_inline)) GGML_AVX2

/* ggml_block_bytes() of a constant type, folded where it is inlined. */
ALWAYS_INLINE unsigned block_bytes(enum dtype type)
{
	switch (type) {
	case DTYPE_GGML_Q8_0:
		return 34;
	case DTYPE_GGML_Q4_0:
		return 18;
	case DTYPE_GGML_Q4_1:
		return 20;
	case DTYPE_GGML_Q5_0:
		return 22;
	case DTYPE_GGML_Q5_1:
		return 24;
	case DTYPE_GGML_Q4_K:
		return 144;
	case DTYPE_GGML_Q5_K:
		return 176;
	default:	/* DTYPE_GGML_Q6_K */
		return 210;
	}
}

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

/* The half at p (any alignment) by F16C: the same bits as fp16_load()
 * (tests/unit/test_ggml_quants.c checks all 65536), in two instructions. */
ALWAYS_INLINE float half_f16c(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, sizeof(h));
	return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

/*
 * Weight block b of type as its 32 integers (ggml_quants.h: Q8_0's,
 * Q4_0's and Q5_0's signed, Q4_1's and Q5_1's unsigned codes), d and the
 * min m (Q4_1, Q5_1; else 0).
 */
ALWAYS_INLINE __m256i unpack32(enum dtype type, const uint8_t *b, float *d,
			       float *m)
{
	*d = half_f16c(b);
	*m = 0;
	switch (type) {
	case DTYPE_GGML_Q8_0:
		return _mm256_loadu_si256((const __m256i *)(b + 2));
	case DTYPE_GGML_Q4_0:
		return _mm256_sub_epi8(nibbles32(b + 2), _mm256_set1_epi8(8));
	case DTYPE_GGML_Q4_1:
		*m = half_f16c(b + 2);
		return nibbles32(b + 4);
	case DTYPE_GGML_Q5_0:
		return _mm256_sub_epi8(_mm256_or_si256(nibbles32(b + 6),
						       fifth_bits(b + 2)),
				       _mm256_set1_epi8(16));
	default:	/* DTYPE_GGML_Q5_1 */
		*m = half_f16c(b + 2);
		return _mm256_or_si256(nibbles32(b + 8), fifth_bits(b + 4));
	}
}

/* Block k of weight row w into acc[] and macc[] of R rows (tile32). */
ALWAYS_INLINE void block32(int R, enum dtype type, __m256 *acc, float *macc,
			   const uint8_t *w, const struct ggml_act32 *a,
			   size_t n_blocks, size_t k)
{
	unsigned bytes = block_bytes(type);
	int has_min = type == DTYPE_GGML_Q4_1 || type == DTYPE_GGML_Q5_1;
	const __m256i ones = _mm256_set1_epi16(1);
	float d, m;
	__m256i wv = unpack32(type, w + k * bytes, &d, &m);
	/* signed: |w| as unsigned, its sign moved onto a */
	__m256i aw = has_min ? wv : _mm256_sign_epi8(wv, wv);
	__m256 dv = _mm256_set1_ps(d);

#pragma GCC unroll 8
	for (int r = 0; r < R; r++) {
		const struct ggml_act32 *ab = a + r * n_blocks + k;
		__m256i y = _mm256_loadu_si256((const __m256i *)ab->q);
		__m256i p = _mm256_maddubs_epi16(
			aw, has_min ? y : _mm256_sign_epi8(y, wv));
		__m256 L = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));

		/* d_w * d_a as 8 lanes of the same product: a broadcast
		 * load and one multiply */
		acc[r] = _mm256_fmadd_ps(L, _mm256_mul_ps(dv,
			_mm256_broadcast_ss(&ab->d)), acc[r]);
		if (has_min)
			macc[r] = macc[r] + m * ab->s;
	}
}

/* One weight row against R activation rows (a[r], n_blocks each). */
ALWAYS_INLINE void tile32(int R, enum dtype type, float *out, size_t n_out,
			  const uint8_t *w, const struct ggml_act32 *a,
			  size_t n_blocks)
{
	unsigned bytes = block_bytes(type);
	__m256 acc[GGML_MR];
	float macc[GGML_MR];

#pragma GCC unroll 8
	for (int r = 0; r < R; r++) {
		acc[r] = _mm256_setzero_ps();
		macc[r] = 0;
	}
	for (size_t k = 0; k < n_blocks; k++) {
		/* the row streams from memory: ask ahead */
		_mm_prefetch((const char *)(w + (k + 8) * bytes), _MM_HINT_T0);
		block32(R, type, acc, macc, w, a, n_blocks, k);
	}
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
		out[r * n_out] = llama_hsum8(acc[r]) + macc[r];
}

/* ------------------------------------------------------------ 256-blocks */

/* The sums of the int32 lanes of v[0 .. R) (R <= 4) in lanes 0 .. R - 1;
 * integers, so exact in this order as in any. */
ALWAYS_INLINE __m128i hsum4_epi32(int R, const __m256i *v)
{
	__m256i z = _mm256_setzero_si256();
	__m256i t0 = _mm256_hadd_epi32(v[0], R > 1 ? v[1] : z);
	__m256i t1 = R > 2 ? _mm256_hadd_epi32(v[2], R > 3 ? v[3] : z) : z;
	__m256i t = _mm256_hadd_epi32(t0, t1);

	return _mm_add_epi32(_mm256_castsi256_si128(t),
			     _mm256_extracti128_si256(t, 1));
}

/* Q4_K/Q5_K (five) block b: each row's lanes of sumi into isum[]. */
ALWAYS_INLINE void sumi_k45(int R, int five, const uint8_t *b, const int *sc,
			    const struct ggml_act256 *const *ab, __m256i *isum)
{
	const uint8_t *qs = b + (five ? 48 : 16);
	const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
	__m256i qh = five ? _mm256_loadu_si256((const __m256i *)(b + 16)) :
			    _mm256_setzero_si256();

#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
		isum[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
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
#pragma GCC unroll 8
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
}

/* Q6_K block b: each row's lanes of sumi (quants -32 .. 31) into isum[];
 * sc16 the 16 scales as int16. */
ALWAYS_INLINE void sumi_q6_k(int R, const uint8_t *b, const int *sc,
			     __m256i sc16, const struct ggml_act256 *const *ab,
			     __m256i *isum)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);

#pragma GCC unroll 8
	for (int r = 0; r < R; r++) {	/* the -32 of every quant */
		__m256i bs = _mm256_loadu_si256((const __m256i *)ab[r]->bsums);

		isum[r] = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5);
		isum[r] = _mm256_sub_epi32(_mm256_setzero_si256(), isum[r]);
	}
#pragma GCC unroll 2
	for (int h = 0; h < 2; h++) {
		__m256i q0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
		__m256i q1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
		__m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));

#pragma GCC unroll 8
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
#pragma GCC unroll 8
			for (int r = 0; r < R; r++) {
				const int8_t *y = ab[r]->q + 128 * h + 32 * s;
				__m256i p = _mm256_maddubs_epi16(
					q, _mm256_loadu_si256((const __m256i *)y));

				isum[r] = _mm256_add_epi32(isum[r],
							   _mm256_madd_epi16(p, scv));
			}
		}
	}
}

/* Rows 4h .. 4h + 3 of R: how many there are (0 .. 4). */
#define HALF_R(R, h) ((R) - 4 * (h) > 4 ? 4 : (R) - 4 * (h) < 0 ? 0 : (R) - 4 * (h))

/*
 * One weight row against R activation rows of 256-blocks.  The float
 * steps of the rows go side by side in the lanes of SSE registers (rows
 * 0..3 in acc[0], 4..7 in acc[1]): lane r does row r's scalar
 * operations, in the same order, so the bits are the portable code's.
 */
ALWAYS_INLINE void tile256(int R, enum dtype type, float *out, size_t n_out,
			   const uint8_t *w, const struct ggml_act256 *a,
			   size_t n_blocks)
{
	unsigned bytes = block_bytes(type);
	__m128 acc[2] = { _mm_setzero_ps(), _mm_setzero_ps() };
	float res[8];

	for (size_t k = 0; k < n_blocks; k++) {
		const uint8_t *b = w + k * bytes;
		const struct ggml_act256 *ab[GGML_MR];
		__m256i isum[GGML_MR], msum[GGML_MR];
		float ad[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
		int sc[16];
		float d, dmin = 0;

		/* the row streams from memory: ask two blocks ahead */
		for (unsigned at = 0; at < bytes; at += 64)
			_mm_prefetch((const char *)(b + 2 * bytes + at), _MM_HINT_T0);
#pragma GCC unroll 8
		for (int r = 0; r < R; r++) {
			ab[r] = a + r * n_blocks + k;
			ad[r] = ab[r]->d;
		}
		if (type == DTYPE_GGML_Q6_K) {
			__m256i sc16 = _mm256_cvtepi8_epi16(
				_mm_loadu_si128((const __m128i *)(b + 192)));

			for (int g = 0; g < 16; g++)
				sc[g] = (int8_t)b[192 + g];
			sumi_q6_k(R, b, sc, sc16, ab, isum);
			d = half_f16c(b + 208);
		} else {
			int16_t mn2[16];	/* each min twice: bsums pairs */
			__m256i mv;

			for (int j = 0; j < 8; j++) {
				uint8_t s6, m6;

				ggml_k_scale_min(b + 4, j, &s6, &m6);
				sc[j] = s6;
				mn2[2 * j] = mn2[2 * j + 1] = m6;
			}
			sumi_k45(R, type == DTYPE_GGML_Q5_K, b, sc, ab, isum);
			mv = _mm256_loadu_si256((const __m256i *)mn2);
#pragma GCC unroll 8
			for (int r = 0; r < R; r++)
				msum[r] = _mm256_madd_epi16(mv, _mm256_loadu_si256(
					(const __m256i *)ab[r]->bsums));
			d = half_f16c(b);
			dmin = half_f16c(b + 2);
		}
#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			__m128 adv = _mm_loadu_ps(ad + 4 * h), sumi;

			if (HALF_R(R, h) == 0)
				continue;
			sumi = _mm_cvtepi32_ps(hsum4_epi32(HALF_R(R, h), isum + 4 * h));
			acc[h] = _mm_add_ps(acc[h], _mm_mul_ps(
				_mm_mul_ps(_mm_set1_ps(d), adv), sumi));
			if (type == DTYPE_GGML_Q6_K)
				continue;
			sumi = _mm_cvtepi32_ps(hsum4_epi32(HALF_R(R, h), msum + 4 * h));
			acc[h] = _mm_sub_ps(acc[h], _mm_mul_ps(
				_mm_mul_ps(_mm_set1_ps(dmin), adv), sumi));
		}
	}
	_mm_storeu_ps(res, acc[0]);
	_mm_storeu_ps(res + 4, acc[1]);
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
		out[r * n_out] = res[r];
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
		TILE_R(fn, 3, T, act_t); TILE_R(fn, 4, T, act_t);            \
		TILE_R(fn, 5, T, act_t); TILE_R(fn, 6, T, act_t);            \
		TILE_R(fn, 7, T, act_t); default: TILE_R(fn, 8, T, act_t);   \
		}                                                            \
		break

/* Weight row w against R (1..8) rows of quantized activations act. */
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

/* Does the CPU have F16C (every AVX2 one we know does; asked once)? */
static int ggml_have_f16c(void)
{
	static int have = -1;	/* a race only stores the same answer */
	int h = __atomic_load_n(&have, __ATOMIC_RELAXED);

	if (h < 0) {
		h = f16_have_f16c();
		__atomic_store_n(&have, h, __ATOMIC_RELAXED);
	}
	return h;
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
	if (!act || !ggml_have_f16c()) {	/* the same numbers, portably */
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
