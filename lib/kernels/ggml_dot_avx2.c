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
 * Q8_0: a weight block's 32 int8 in one register meet each of up to 8
 * activation rows by the sign trick maddubs(|w|, sign(a, w)); madd with
 * ones leaves 8 int32 partial sums.  No int16 overflow: |w| <= 128 and
 * |a| <= 127 (the quantizer never gives -128), so a pair is at most
 * 32512.  Four blocks at a time, three hadds give their exact integers
 * D, lane c block c, and one SSE FMA advances the four chains, as for
 * the nibble types.
 *
 * The nibble types, four blocks at a time: one register holds the low
 * nibbles of two blocks (values 0..15 of each, one per 128-bit half),
 * another their high ones, so the unsigned codes go straight into
 * maddubs against activations laid out to match (struct ggml_act32x4);
 * Q4_0's -8 and Q5_0's -16 come back through the blocks' sums of q.
 * Two hadds turn the partial sums into the four blocks' exact integers,
 * lane c block c, so one SSE FMA advances the four chains.
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
 * arithmetic never depends on the tile it fell in.  From 16 rows up the
 * whole groups of 8 go to ggml_gemm8_avx2.c (rows in the lanes; the same
 * bits), the tail to the tiles.
 */
#include "kernels/f16.h"
#include "kernels/ggml_quants.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/ggml_avx2.h"

#define GGML_MR 8	/* activation rows per tile (at most) */
#define GGML_OB 16	/* weight rows per block of outputs */

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

/* ------------------------------------------------------------- Q8_0 */

/* The halves at b, b + stride, ... of n (0..4) blocks as 4 floats (0
 * for a missing block). */
ALWAYS_INLINE __m128 halves4(const uint8_t *b, unsigned stride, int n)
{
	uint64_t h = 0;

	for (int c = 0; c < n; c++)
		h |= (uint64_t)load_u16(b + c * stride) << (16 * c);
	return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)h));
}

/* ((v0 + v1) + (v2 + v3)) of the lanes of v. */
ALWAYS_INLINE float chains4(__m128 v)
{
	float f[4];

	_mm_storeu_ps(f, v);
	return (f[0] + f[1]) + (f[2] + f[3]);
}

/*
 * Q8_0 blocks 4q .. 4q + n - 1 (n 1..4; b the first) into the chains
 * acc[] of R rows, a[r * n_blocks] row r's block 4q: per block the sign
 * trick maddubs(|w|, sign(a, w)) and madd with ones leave 8 partial
 * sums, and three hadds turn the four blocks' into their exact D, lane
 * c block c, chain c (ggml_quants.h), so one SSE FMA a row advances
 * four blocks.
 */
ALWAYS_INLINE void quad8(int R, int n, __m128 *acc, const uint8_t *b,
			 const struct ggml_act32 *a, size_t n_blocks)
{
	const __m256i ones = _mm256_set1_epi16(1);
	__m256i wv[4], aw[4];
	__m128 dw = halves4(b, 34, n);

#pragma GCC unroll 4
	for (int c = 0; c < 4; c++) {
		wv[c] = c < n ? _mm256_loadu_si256((const __m256i *)(b + 34 * c + 2)) :
				_mm256_setzero_si256();
		aw[c] = _mm256_sign_epi8(wv[c], wv[c]);	/* |w|; -128 reads 128 */
	}
#pragma GCC unroll 8
	for (int r = 0; r < R; r++) {
		const struct ggml_act32 *ab = a + r * n_blocks;
		__m256i P[4], t;
		__m128i D;
		__m128 da;

#pragma GCC unroll 4
		for (int c = 0; c < 4; c++)
			P[c] = c < n ? _mm256_madd_epi16(_mm256_maddubs_epi16(aw[c],
				_mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)ab[c].q),
						 wv[c])), ones) : _mm256_setzero_si256();
		/* the low half then holds the four blocks' sums of lanes
		 * 0..3, the high half of lanes 4..7 */
		t = _mm256_hadd_epi32(_mm256_hadd_epi32(P[0], P[1]),
				      _mm256_hadd_epi32(P[2], P[3]));
		D = _mm_add_epi32(_mm256_castsi256_si128(t),
				  _mm256_extracti128_si256(t, 1));
		da = _mm_setr_ps(ab[0].d, n > 1 ? ab[1].d : 0, n > 2 ? ab[2].d : 0,
				 n > 3 ? ab[3].d : 0);
		acc[r] = _mm_fmadd_ps(_mm_cvtepi32_ps(D), _mm_mul_ps(dw, da), acc[r]);
	}
}

/* One weight row against R activation rows (a[r], n_blocks each). */
ALWAYS_INLINE void tile32(int R, enum dtype type, float *out, size_t n_out,
			  const uint8_t *w, const struct ggml_act32 *a,
			  size_t n_blocks)
{
	__m128 acc[GGML_MR];
	size_t q;

	(void)type;
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
		acc[r] = _mm_setzero_ps();
	for (q = 0; q < n_blocks / 4; q++) {
		const uint8_t *b = w + 4 * q * 34;

		/* the row streams from memory: ask ahead */
		_mm_prefetch((const char *)(b + 8 * 34), _MM_HINT_T0);
		_mm_prefetch((const char *)(b + 10 * 34), _MM_HINT_T0);
		quad8(R, 4, acc, b, a + 4 * q, n_blocks);
	}
	if (n_blocks % 4)
		quad8(R, (int)(n_blocks % 4), acc, w + 4 * q * 34, a + 4 * q,
		      n_blocks);
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
		out[r * n_out] = chains4(acc[r]);
}

/* -------------------------------------------- the nibble types, 4 blocks */





/*
 * The quad of n (1..4) blocks at b into chains acc[] and macc[] of R
 * rows: a[r * n_quads] row r's activations for the quad.  One register
 * holds the low nibbles of blocks 0 and 1 (values 0..15 of block 0 in
 * its low half, of block 1 in its high half), another their high ones,
 * two more blocks 2 and 3; maddubs and madd leave 4 partial sums a block
 * that two hadds turn into the 4 blocks' exact integers, lane c block c,
 * chain c (ggml_quants.h).
 */
ALWAYS_INLINE void quad32(int R, enum dtype type, int n, __m128 *acc,
			  __m128 *macc, const uint8_t *b,
			  const struct ggml_act32x4 *a, size_t n_quads)
{
	unsigned bytes = block_bytes(type), at = qs_at(type);
	int has_min = type == DTYPE_GGML_Q4_1 || type == DTYPE_GGML_Q5_1;
	int five = type == DTYPE_GGML_Q5_0 || type == DTYPE_GGML_Q5_1;
	int shift = type == DTYPE_GGML_Q4_0 ? 3 : type == DTYPE_GGML_Q5_0 ? 4 : 0;
	const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
	__m256i lo[2], hi[2];
	__m128 dw = halves4(b, bytes, n), mw = _mm_setzero_ps();

#pragma GCC unroll 2
	for (int h = 0; h < 2; h++) {
		const uint8_t *b0 = b + 2 * h * bytes, *b1 = b0 + bytes;
		__m128i q0 = 2 * h < n ? _mm_loadu_si128((const __m128i *)(b0 + at)) :
					 _mm_setzero_si128();
		__m128i q1 = 2 * h + 1 < n ? _mm_loadu_si128((const __m128i *)(b1 + at)) :
					     _mm_setzero_si128();
		__m256i q = _mm256_set_m128i(q1, q0);

		lo[h] = _mm256_and_si256(q, m4);
		hi[h] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
		if (five) {
			__m256i f_lo, f_hi;

			fifth_bits2(2 * h < n ? load_u32(b0 + at - 4) : 0,
				    2 * h + 1 < n ? load_u32(b1 + at - 4) : 0,
				    &f_lo, &f_hi);
			lo[h] = _mm256_or_si256(lo[h], f_lo);
			hi[h] = _mm256_or_si256(hi[h], f_hi);
		}
	}
	if (has_min)
		mw = halves4(b + 2, bytes, n);
#pragma GCC unroll 8
	for (int r = 0; r < R; r++) {
		const struct ggml_act32x4 *ab = a + r * n_quads;
		__m256i P[2], t;
		__m128i D;

#pragma GCC unroll 2
		for (int h = 0; h < 2; h++)	/* codes <= 31, |a| <= 127:
						 * each int16 sum < 2^14 */
			P[h] = _mm256_madd_epi16(_mm256_add_epi16(
				_mm256_maddubs_epi16(lo[h], _mm256_loadu_si256(
					(const __m256i *)ab->lo[h])),
				_mm256_maddubs_epi16(hi[h], _mm256_loadu_si256(
					(const __m256i *)ab->hi[h]))), ones);
		/* lanes of P[h]: 0..3 block 2h's partial sums, 4..7 block
		 * 2h + 1's; after two hadds the low half holds blocks 0, 2
		 * and the high half blocks 1, 3 */
		t = _mm256_hadd_epi32(P[0], P[1]);
		t = _mm256_hadd_epi32(t, t);
		D = _mm_unpacklo_epi32(_mm256_castsi256_si128(t),
				       _mm256_extracti128_si256(t, 1));
		if (shift)	/* v = code - 8 (16): less 8 (16) x sum of q */
			D = _mm_sub_epi32(D, _mm_slli_epi32(_mm_loadu_si128(
				(const __m128i *)ab->qsum), shift));
		acc[r] = _mm_fmadd_ps(_mm_cvtepi32_ps(D),
				      _mm_mul_ps(dw, _mm_loadu_ps(ab->d)), acc[r]);
		if (has_min)
			macc[r] = _mm_add_ps(macc[r], _mm_mul_ps(mw, _mm_loadu_ps(ab->s)));
	}
}

/* One weight row against R activation rows of quads (tile32x4). */
ALWAYS_INLINE void tile32x4(int R, enum dtype type, float *out, size_t n_out,
			    const uint8_t *w, const struct ggml_act32x4 *a,
			    size_t n_blocks)
{
	unsigned bytes = block_bytes(type);
	size_t n_quads = (n_blocks + 3) / 4, q;
	__m128 acc[GGML_MR], macc[GGML_MR];

#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
		acc[r] = macc[r] = _mm_setzero_ps();
	for (q = 0; q < n_blocks / 4; q++) {
		const uint8_t *b = w + 4 * q * bytes;

		/* the row streams from memory: ask ahead */
		_mm_prefetch((const char *)(b + 8 * bytes), _MM_HINT_T0);
		_mm_prefetch((const char *)(b + 10 * bytes), _MM_HINT_T0);
		quad32(R, type, 4, acc, macc, b, a + q, n_quads);
	}
	if (n_blocks % 4)
		quad32(R, type, (int)(n_blocks % 4), acc, macc,
		       w + 4 * q * bytes, a + q, n_quads);
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
		out[r * n_out] = chains4(acc[r]) + chains4(macc[r]);
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


/* Byte j of bytes as an int16 in all 16 lanes (bytes: 8 in both
 * 128-bit halves; j constant, so the mask is). */
ALWAYS_INLINE __m256i splat_u8(__m256i bytes, int j)
{
	return _mm256_shuffle_epi8(bytes, _mm256_set1_epi16((short)(0x8000 | j)));
}

/* Q4_K/Q5_K (five) block b: each row's lanes of sumi into isum[]; sc8
 * the 8 scales as bytes in both 128-bit halves. */
ALWAYS_INLINE void sumi_k45(int R, int five, const uint8_t *b, __m256i sc8,
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
		__m256i s_lo = splat_u8(sc8, 2 * c);
		__m256i s_hi = splat_u8(sc8, 2 * c + 1);

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
ALWAYS_INLINE void sumi_q6_k(int R, const uint8_t *b, __m256i sc16,
			     const struct ggml_act256 *const *ab, __m256i *isum)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
	/* int16 0 of a dword in the low half, int16 1 in the high half */
	const __m256i split = _mm256_set_epi64x(
		0x0302030203020302, 0x0302030203020302,
		0x0100010001000100, 0x0100010001000100);

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
			/* int16 lanes 0..7: elements 0..15, scale g = 8h + 2s;
			 * 8..15: g + 1 (the pair is int16 dword 4h + s) */
			scv = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(
				sc16, _mm256_set1_epi32(4 * h + s)), split);
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

			sumi_q6_k(R, b, sc16, ab, isum);
			d = half_f16c(b + 208);
		} else {
			uint64_t sc, mn;
			__m128i m8;
			__m256i mv;

			k_scales_mins(b + 4, &sc, &mn);
			sumi_k45(R, type == DTYPE_GGML_Q5_K, b,
				 _mm256_set1_epi64x((long long)sc), ab, isum);
			/* each min twice, against the pairs of 16-sums */
			m8 = _mm_cvtsi64_si128((long long)mn);
			mv = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
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

/* ------------------------------------------------------- the quantizer */

/* max |x[0 .. 32k)|, and whether any x is nan (then the caller hands the
 * block to the portable quantizer, which keeps the nan's bits). */
ALWAYS_INLINE float amax32k(const float *x, int k, int *nan)
{
	const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	__m256 m = _mm256_setzero_ps(), un = _mm256_setzero_ps();
	__m128 h;

	for (int i = 0; i < 4 * k; i += 2) {
		__m256 v0 = _mm256_loadu_ps(x + 8 * i);
		__m256 v1 = _mm256_loadu_ps(x + 8 * i + 8);

		un = _mm256_or_ps(un, _mm256_cmp_ps(v0, v1, _CMP_UNORD_Q));
		m = _mm256_max_ps(m, _mm256_max_ps(_mm256_and_ps(v0, abs_mask),
						   _mm256_and_ps(v1, abs_mask)));
	}
	*nan = _mm256_movemask_ps(un) != 0;
	/* max is exact, so any order of the lanes gives the portable max */
	h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
	h = _mm_max_ps(h, _mm_movehl_ps(h, h));
	h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
	return _mm_cvtss_f32(h);
}

/* x[0 .. 32) * id rounded to even and clamped (ggml_act_q()), as bytes
 * in element order. */
ALWAYS_INLINE __m256i quant32(const float *x, float id)
{
	const __m256 lo = _mm256_set1_ps(-127), hi = _mm256_set1_ps(127);
	__m256 vid = _mm256_set1_ps(id);
	__m256i i[4];

#pragma GCC unroll 4
	for (int j = 0; j < 4; j++) {
		__m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * j), vid),
					   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);

		v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));	/* nan: 0 */
		i[j] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, lo), hi));
	}
	/* the packs interleave the 128-bit halves; the permute undoes it */
	return _mm256_permutevar8x32_epi32(
		_mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]),
				   _mm256_packs_epi32(i[2], i[3])),
		_mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* int32 lane m of the result: the sum of bytes 4m .. 4m + 3 of q. */
ALWAYS_INLINE __m256i sums4(__m256i q)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q),
				 _mm256_set1_epi16(1));
}

/* Block scale d of amax and its inverse, as ggml_act_scale() has them. */
ALWAYS_INLINE float act_scale(float amax, float *id)
{
	float d = amax / 127;

	*id = d != 0 ? 1 / d : 0;
	return d;
}

/* ggml_quantize_act32x4(), vectorised: the same bytes. */
static GGML_AVX2 void quantize_quads(struct ggml_act32x4 *a, const float *x,
				     size_t n)
{
	size_t n_blocks = n / GGML_QK32;

	for (size_t k = 0; k < n_blocks; k += 4, a++) {
		int nb = n_blocks - k < 4 ? (int)(n_blocks - k) : 4, nan = 0;
		float amax[4], id;

		for (int c = 0; c < nb; c++) {
			int bad;

			amax[c] = amax32k(x + (k + c) * GGML_QK32, 1, &bad);
			nan |= bad;
		}
		if (nan) {
			ggml_quantize_act32x4(a, x + k * GGML_QK32, nb * GGML_QK32);
			continue;
		}
		memset(a, 0, sizeof(*a));
		for (int c = 0; c < nb; c++) {
			__m256i q, t;
			__m128i s4;
			int32_t s[4];

			a->d[c] = act_scale(amax[c], &id);
			q = quant32(x + (k + c) * GGML_QK32, id);
			_mm_storeu_si128((__m128i *)(a->lo[c / 2] + 16 * (c % 2)),
					 _mm256_castsi256_si128(q));
			_mm_storeu_si128((__m128i *)(a->hi[c / 2] + 16 * (c % 2)),
					 _mm256_extracti128_si256(q, 1));
			t = sums4(q);
			s4 = _mm_add_epi32(_mm256_castsi256_si128(t),
					   _mm256_extracti128_si256(t, 1));
			_mm_storeu_si128((__m128i *)s, s4);
			a->qsum[c] = s[0] + s[1] + s[2] + s[3];
			a->s[c] = a->d[c] * (float)a->qsum[c];
		}
	}
}

/* ggml_quantize_act32(), vectorised. */
static GGML_AVX2 void quantize_blocks32(struct ggml_act32 *a, const float *x,
					size_t n)
{
	for (size_t k = 0; k < n / GGML_QK32; k++, a++, x += GGML_QK32) {
		int nan;
		float id, amax = amax32k(x, 1, &nan);

		if (nan) {
			ggml_quantize_act32(a, x, GGML_QK32);
			continue;
		}
		a->d = act_scale(amax, &id);
		_mm256_storeu_si256((__m256i *)a->q, quant32(x, id));
	}
}

/* ggml_quantize_act256(), vectorised. */
static GGML_AVX2 void quantize_blocks256(struct ggml_act256 *a, const float *x,
					 size_t n)
{
	for (size_t k = 0; k < n / GGML_QK256; k++, a++, x += GGML_QK256) {
		int nan;
		float id, amax = amax32k(x, 8, &nan);

		if (nan) {
			ggml_quantize_act256(a, x, GGML_QK256);
			continue;
		}
		a->d = act_scale(amax, &id);
		for (int c = 0; c < 8; c++) {
			__m256i q = quant32(x + 32 * c, id), t = sums4(q);
			int32_t s[8];

			_mm256_storeu_si256((__m256i *)(a->q + 32 * c), q);
			_mm256_storeu_si256((__m256i *)s, t);
			a->bsums[2 * c] = (int16_t)(s[0] + s[1] + s[2] + s[3]);
			a->bsums[2 * c + 1] = (int16_t)(s[4] + s[5] + s[6] + s[7]);
		}
	}
}

void ggml_quantize_act_row_avx2(enum dtype type, void *act, const float *x,
				size_t n_in)
{
	if (ggml_block_values(type) == GGML_QK256)
		quantize_blocks256(act, x, n_in);
	else if (ggml_uses_quads(type))
		quantize_quads(act, x, n_in);
	else
		quantize_blocks32(act, x, n_in);
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
	TILE_TYPE(tile32x4, DTYPE_GGML_Q4_0, struct ggml_act32x4);
	TILE_TYPE(tile32x4, DTYPE_GGML_Q4_1, struct ggml_act32x4);
	TILE_TYPE(tile32x4, DTYPE_GGML_Q5_0, struct ggml_act32x4);
	TILE_TYPE(tile32x4, DTYPE_GGML_Q5_1, struct ggml_act32x4);
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
	size_t act_row = ggml_act_row_bytes(type, n_in);
	const uint8_t *w = t->data;
	unsigned char *act = NULL;
	size_t act_bytes, b0 = 0;	/* rows below b0 are done */

	if (!__builtin_mul_overflow(n_rows, act_row, &act_bytes) && act_bytes)
		act = malloc(act_bytes);
	if (!act || !ggml_have_f16c()) {	/* the same numbers, portably */
		ggml_matmul_portable(out, x, n_rows, t);
		return;
	}
	for (size_t b = 0; b < n_rows; b++)
		ggml_quantize_act_row_avx2(type, act + b * act_row, x + b * n_in,
					   n_in);
	/* two groups of 8 rows or more: one row a lane (not Q6_K) */
	if (n_rows >= 16 && !ggml_gemm8_avx2(out, t, act, n_rows / 8))
		b0 = n_rows / 8 * 8;
	for (size_t ob = 0; b0 < n_rows && ob < n_out; ob += GGML_OB) {
		size_t oe = n_out - ob < GGML_OB ? n_out : ob + GGML_OB;

		for (size_t b = b0; b < n_rows; b += GGML_MR) {
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
