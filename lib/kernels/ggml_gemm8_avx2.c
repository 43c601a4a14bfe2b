/*
 * ggml_gemm8_avx2.c - the matmul of Q8_0, the nibble types, Q4_K and
 * Q5_K for whole groups of 8 activation rows, one row a lane: what
 * prefill and large batches run.  The same bits as ggml_dot_avx2.c's
 * tiles and the portable code (ggml_quants.h's orders), so a row's
 * outputs do not depend on whether it fell in a group of 8 or in the
 * tail.
 *
 * NOTES ON THE DESIGN
 *
 * tile256 keeps one row in a register's lanes and must sum the lanes of
 * every sub-block product, then reduce each row's lanes per block: about
 * four instructions per 32 products.  Here the 8 rows of a group are
 * interleaved (struct act8: four values of row r in dword r), so one
 * maddubs multiplies four weight codes, broadcast from memory, by four
 * values of every row at once, and the int16 pairs of up to 8 such
 * products add without overflow (Q4_K's codes <= 15: 8 x 2 x 15 x 127 <
 * 2^15; Q5_K's 4) before one madd applies the sub-block scale.
 * Lane r then holds row r's exact sumi; the float steps are the scalar
 * code's, lane for lane.  About half the instructions of tile256.
 *
 * The weight blocks are unpacked first (struct wblock: codes as bytes in
 * element order, scales as int16 pairs to broadcast), for GEMM8_OB rows
 * at a time, and met by every group while they sit in cache; the
 * activations of a group stay in L1 across those rows.  Both buffers are
 * per call; without memory the caller's tiles do the work.
 *
 * The caller uses it from two groups up (bin/bench_matmul: one group
 * pays the unpacking for 8 rows only and is no faster than the tiles).
 * Q8_0's weights are signed, so they meet the activations by the sign
 * trick, and a pair of products fills an int16: a madd per maddubs, then
 * int32 adds to the block's D.
 * Not for Q6_K: its codes (<= 63) let an int16 sum take 2 products
 * only, a madd per 2 maddubs, and that version measured no faster than
 * tile256, so Q6_K stays there (docs/DESIGN.md 2.5.3).
 */
#include "kernels/ggml_quants.h"

#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/ggml_avx2.h"

#define GEMM8_OB 16	/* weight rows unpacked at a time */

/* One weight block, unpacked. */
struct wblock {
	uint8_t code[256];	/* Q4_K 0..15, Q5_K 0..31 */
	int32_t sc2[8];		/* sub-block j's scale as two int16 */
	int32_t mn2[8];		/* sub-block m's min as two int16, against
				 * the row's 16-sum pair m */
	float d, dmin;
};

/* One block of a group of 8 activation rows, interleaved. */
struct act8 {
	int8_t q[64][32];	/* q[t][4r + i] = row r's value 4t + i */
	int32_t bpair[8][8];	/* row r: int16 (bsums[2m], bsums[2m + 1]) */
	float d[8];		/* row r's d */
};

static inline int32_t pair16(int a, int b)
{
	return (int32_t)((uint32_t)(uint16_t)a | (uint32_t)(uint16_t)b << 16);
}

/* Weight block b of type into *u. */
static GGML_AVX2 void unpack_block(enum dtype type, const uint8_t *b,
				   struct wblock *u)
{
	const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);

	{
		int five = type == DTYPE_GGML_Q5_K;
		const uint8_t *qs = b + (five ? 48 : 16);
		__m256i qh = five ? _mm256_loadu_si256((const __m256i *)(b + 16)) :
				    _mm256_setzero_si256();
		uint64_t sc, mn;

		for (int c = 0; c < 4; c++) {
			__m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
			__m256i lo = _mm256_and_si256(q, m4);
			__m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);

			if (five) {	/* bit j of qh[k]: sub-block j's fifth */
				lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(
					_mm256_srli_epi16(qh, 2 * c), one), 4));
				hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(
					_mm256_srli_epi16(qh, 2 * c + 1), one), 4));
			}
			_mm256_storeu_si256((__m256i *)(u->code + 64 * c), lo);
			_mm256_storeu_si256((__m256i *)(u->code + 64 * c + 32), hi);
		}
		k_scales_mins(b + 4, &sc, &mn);
		for (int j = 0; j < 8; j++) {
			int s6 = (int)(sc >> (8 * j) & 0xff), m6 = (int)(mn >> (8 * j) & 0xff);

			u->sc2[j] = pair16(s6, s6);
			u->mn2[j] = pair16(m6, m6);
		}
		u->d = half_f16c(b);
		u->dmin = half_f16c(b + 2);
	}
}

/* The 8 activation rows at rows (n_blocks blocks each, one after the
 * other) interleaved into g[0 .. n_blocks). */
static void interleave8(struct act8 *g, const struct ggml_act256 *rows,
			size_t n_blocks)
{
	for (size_t k = 0; k < n_blocks; k++, g++)
		for (int r = 0; r < 8; r++) {
			const struct ggml_act256 *a = rows + r * n_blocks + k;

			for (int t = 0; t < 64; t++)
				memcpy(&g->q[t][4 * r], a->q + 4 * t, 4);
			for (int m = 0; m < 8; m++)
				g->bpair[m][r] = pair16(a->bsums[2 * m], a->bsums[2 * m + 1]);
			g->d[r] = a->d;
		}
}

/* One weight row (n_blocks unpacked blocks) against one group: lane r of
 * the result is row r's output (ggml_quants.h's 256-block steps). */
ALWAYS_INLINE __m256 row_group(enum dtype type, const struct wblock *w,
			       const struct act8 *a, size_t n_blocks)
{
	/* maddubs an int16 sum can take: 8 sub-blocks of 8 dwords */
	const int per = 8, chunk = type == DTYPE_GGML_Q4_K ? 8 : 4;
	__m256 acc = _mm256_setzero_ps();

	for (size_t k = 0; k < n_blocks; k++, w++, a++) {
		__m256i isum = _mm256_setzero_si256(), off = _mm256_setzero_si256();
		__m256 da = _mm256_loadu_ps(a->d);

#pragma GCC unroll 8
		for (int j = 0; j < 8; j++) {
			__m256i scv = _mm256_set1_epi32(w->sc2[j]);

#pragma GCC unroll 8
			for (int c = 0; c < per; c += chunk) {
				__m256i p = _mm256_setzero_si256();

#pragma GCC unroll 8
				for (int t = per * j + c; t < per * j + c + chunk; t++) {
					int32_t w4;

					memcpy(&w4, w->code + 4 * t, 4);
					p = _mm256_add_epi16(p, _mm256_maddubs_epi16(
						_mm256_set1_epi32(w4),
						_mm256_loadu_si256((const __m256i *)a->q[t])));
				}
				isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, scv));
			}
		}
#pragma GCC unroll 8
		for (int m = 0; m < 8; m++)
			off = _mm256_add_epi32(off, _mm256_madd_epi16(
				_mm256_loadu_si256((const __m256i *)a->bpair[m]),
				_mm256_set1_epi32(w->mn2[m])));
		acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(
			_mm256_set1_ps(w->d), da), _mm256_cvtepi32_ps(isum)));
		acc = _mm256_sub_ps(acc, _mm256_mul_ps(_mm256_mul_ps(
			_mm256_set1_ps(w->dmin), da), _mm256_cvtepi32_ps(off)));
	}
	return acc;
}

/* ------------------------------------------------------ the nibble types */

/* One weight block of a nibble type, unpacked. */
struct wblock32 {
	uint8_t code[32];	/* unsigned codes, element order (Q4_0's -8
				 * and Q5_0's -16 come from qsum) */
	float d, m;		/* m: Q4_1/Q5_1's min, else 0 */
};

/* One block of a group of 8 activation rows, interleaved. */
struct act8x32 {
	int8_t q[8][32];	/* q[t][4r + i] = row r's value 4t + i */
	int32_t qsum[8];	/* row r's sum of q */
	float d[8], s[8];	/* row r's d and d * (sum of q) */
};

static GGML_AVX2 void unpack_block32(enum dtype type, const uint8_t *b,
				     struct wblock32 *u)
{
	const __m128i m4 = _mm_set1_epi8(0x0f);
	__m128i q = _mm_loadu_si128((const __m128i *)(b + qs_at(type)));
	__m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4),
				     _mm_and_si128(q, m4));

	if (type == DTYPE_GGML_Q5_0 || type == DTYPE_GGML_Q5_1) {
		__m256i f_lo, f_hi;

		fifth_bits2(load_u32(b + qs_at(type) - 4), 0, &f_lo, &f_hi);
		v = _mm256_or_si256(v, _mm256_set_m128i(_mm256_castsi256_si128(f_hi),
							_mm256_castsi256_si128(f_lo)));
	}
	_mm256_storeu_si256((__m256i *)u->code, v);
	u->d = half_f16c(b);
	u->m = type == DTYPE_GGML_Q4_1 || type == DTYPE_GGML_Q5_1 ?
	       half_f16c(b + 2) : 0;
}

/* The 8 activation rows at rows (n_quads quads each, one after the
 * other) interleaved into g[0 .. n_blocks). */
static void interleave8x32(struct act8x32 *g, const struct ggml_act32x4 *rows,
			   size_t n_blocks)
{
	size_t n_quads = (n_blocks + 3) / 4;

	for (size_t k = 0; k < n_blocks; k++, g++)
		for (int r = 0; r < 8; r++) {
			const struct ggml_act32x4 *a = rows + r * n_quads + k / 4;
			int c = (int)(k % 4);

			for (int t = 0; t < 8; t++)
				memcpy(&g->q[t][4 * r], (t < 4 ? a->lo[c / 2] : a->hi[c / 2]) +
				       16 * (c % 2) + 4 * (t % 4), 4);
			g->qsum[r] = a->qsum[c];
			g->d[r] = a->d[c];
			g->s[r] = a->s[c];
		}
}

/* Block k (chain c = k % 4) of one weight row against one group. */
ALWAYS_INLINE void block32x8(enum dtype type, const struct wblock32 *w,
			     const struct act8x32 *a, __m256 *acc, __m256 *macc)
{
	/* codes <= 15 (31): an int16 sum takes 8 (4) products of maddubs */
	const int chunk = type == DTYPE_GGML_Q4_0 || type == DTYPE_GGML_Q4_1 ? 8 : 4;
	int shift = type == DTYPE_GGML_Q4_0 ? 3 : type == DTYPE_GGML_Q5_0 ? 4 : 0;
	const __m256i ones = _mm256_set1_epi16(1);
	__m256i D, m[8];

#pragma GCC unroll 8
	for (int t = 0; t < 8; t++) {
		int32_t w4;

		memcpy(&w4, w->code + 4 * t, 4);
		m[t] = _mm256_maddubs_epi16(_mm256_set1_epi32(w4),
					    _mm256_loadu_si256((const __m256i *)a->q[t]));
	}
	/* a tree, not a chain: the adds' latency is what limits here */
	m[0] = _mm256_add_epi16(m[0], m[1]);
	m[2] = _mm256_add_epi16(m[2], m[3]);
	m[4] = _mm256_add_epi16(m[4], m[5]);
	m[6] = _mm256_add_epi16(m[6], m[7]);
	m[0] = _mm256_add_epi16(m[0], m[2]);
	m[4] = _mm256_add_epi16(m[4], m[6]);
	if (chunk == 8)
		D = _mm256_madd_epi16(_mm256_add_epi16(m[0], m[4]), ones);
	else
		D = _mm256_add_epi32(_mm256_madd_epi16(m[0], ones),
				     _mm256_madd_epi16(m[4], ones));
	if (shift)	/* v = code - 8 (16) */
		D = _mm256_sub_epi32(D, _mm256_slli_epi32(_mm256_loadu_si256(
			(const __m256i *)a->qsum), shift));
	*acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(D), _mm256_mul_ps(
		_mm256_set1_ps(w->d), _mm256_loadu_ps(a->d)), *acc);
	if (type == DTYPE_GGML_Q4_1 || type == DTYPE_GGML_Q5_1)
		*macc = _mm256_add_ps(*macc, _mm256_mul_ps(_mm256_set1_ps(w->m),
							    _mm256_loadu_ps(a->s)));
}

/* One weight row (n_blocks unpacked blocks) against one group: lane r
 * of the result is row r's output (ggml_quants.h's four chains). */
ALWAYS_INLINE __m256 row_group32(enum dtype type, const struct wblock32 *w,
				 const struct act8x32 *a, size_t n_blocks)
{
	__m256 acc[4], macc[4];
	size_t k = 0;

	for (int c = 0; c < 4; c++)
		acc[c] = macc[c] = _mm256_setzero_ps();
	for (; k + 4 <= n_blocks; k += 4)
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++)
			block32x8(type, w + k + c, a + k + c, &acc[c], &macc[c]);
	for (int c = 0; k + c < n_blocks; c++)
		block32x8(type, w + k + c, a + k + c, &acc[c], &macc[c]);
	return _mm256_add_ps(
		_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])),
		_mm256_add_ps(_mm256_add_ps(macc[0], macc[1]), _mm256_add_ps(macc[2], macc[3])));
}

/* ---------------------------------------------------------------- Q8_0 */

/* One Q8_0 weight block, unpacked for the sign trick. */
struct wblock8 {
	uint8_t aw[32];		/* |w| (-128 reads 128) */
	int8_t w[32];		/* w: its sign goes onto the activations */
	float d;
};

static GGML_AVX2 void unpack_block8(const uint8_t *b, struct wblock8 *u)
{
	__m256i wv = _mm256_loadu_si256((const __m256i *)(b + 2));

	_mm256_storeu_si256((__m256i *)u->aw, _mm256_sign_epi8(wv, wv));
	_mm256_storeu_si256((__m256i *)u->w, wv);
	u->d = half_f16c(b);
}

/* The 8 Q8_0 activation rows at rows (n_blocks blocks each) interleaved
 * into g[0 .. n_blocks) (struct act8x32; its sums are not used). */
static void interleave8x8(struct act8x32 *g, const struct ggml_act32 *rows,
			  size_t n_blocks)
{
	for (size_t k = 0; k < n_blocks; k++, g++)
		for (int r = 0; r < 8; r++) {
			const struct ggml_act32 *a = rows + r * n_blocks + k;

			for (int t = 0; t < 8; t++)
				memcpy(&g->q[t][4 * r], a->q + 4 * t, 4);
			g->qsum[r] = 0;
			g->d[r] = a->d;
			g->s[r] = 0;
		}
}

/* Q8_0 block k (chain c = k % 4) of one weight row against one group:
 * the sign trick gives every row's partial sums at once, a tree of
 * exact int32 adds its D (ggml_quants.h). */
ALWAYS_INLINE void block8x8(const struct wblock8 *w, const struct act8x32 *a,
			    __m256 *acc)
{
	const __m256i ones = _mm256_set1_epi16(1);
	__m256i m[8];

#pragma GCC unroll 8
	for (int t = 0; t < 8; t++) {
		int32_t aw4, w4;

		memcpy(&aw4, w->aw + 4 * t, 4);
		memcpy(&w4, w->w + 4 * t, 4);
		/* |w| <= 128, |a| <= 127: a pair fits int16, two do not */
		m[t] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi32(aw4),
			_mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)a->q[t]),
					 _mm256_set1_epi32(w4))), ones);
	}
	m[0] = _mm256_add_epi32(_mm256_add_epi32(m[0], m[1]), _mm256_add_epi32(m[2], m[3]));
	m[4] = _mm256_add_epi32(_mm256_add_epi32(m[4], m[5]), _mm256_add_epi32(m[6], m[7]));
	*acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(m[0], m[4])),
			       _mm256_mul_ps(_mm256_set1_ps(w->d), _mm256_loadu_ps(a->d)),
			       *acc);
}

/* One Q8_0 weight row against one group: lane r row r's output. */
ALWAYS_INLINE __m256 row_group8(const struct wblock8 *w,
				const struct act8x32 *a, size_t n_blocks)
{
	__m256 acc[4];
	size_t k = 0;

	for (int c = 0; c < 4; c++)
		acc[c] = _mm256_setzero_ps();
	for (; k + 4 <= n_blocks; k += 4)
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++)
			block8x8(w + k + c, a + k + c, &acc[c]);
	for (int c = 0; k + c < n_blocks; c++)
		block8x8(w + k + c, a + k + c, &acc[c]);
	return _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
}

/* Two Q8_0 weight rows against one group, block k (chain c = k % 4):
 * block8x8 for each row, but each activation load serves both rows
 * (performance.md O: the loads per maddubs were the limit).  The int32
 * adds are exact, so their order is free; the float steps are
 * block8x8's, so each row's lanes get its bits. */
ALWAYS_INLINE void block8x8x2(const struct wblock8 *w0, const struct wblock8 *w1,
			      const struct act8x32 *a, __m256 *acc0, __m256 *acc1)
{
	const __m256i ones = _mm256_set1_epi16(1);
	__m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();

#pragma GCC unroll 8
	for (int t = 0; t < 8; t++) {
		__m256i av = _mm256_loadu_si256((const __m256i *)a->q[t]);
		int32_t aw0, aw1, x0, x1;

		memcpy(&aw0, w0->aw + 4 * t, 4);
		memcpy(&x0, w0->w + 4 * t, 4);
		memcpy(&aw1, w1->aw + 4 * t, 4);
		memcpy(&x1, w1->w + 4 * t, 4);
		s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_maddubs_epi16(
			_mm256_set1_epi32(aw0), _mm256_sign_epi8(av, _mm256_set1_epi32(x0))), ones));
		s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_maddubs_epi16(
			_mm256_set1_epi32(aw1), _mm256_sign_epi8(av, _mm256_set1_epi32(x1))), ones));
	}
	{
		__m256 ad = _mm256_loadu_ps(a->d);

		*acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0),
					_mm256_mul_ps(_mm256_set1_ps(w0->d), ad), *acc0);
		*acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1),
					_mm256_mul_ps(_mm256_set1_ps(w1->d), ad), *acc1);
	}
}

/* Two Q8_0 weight rows against one group: row_group8's chains for each. */
ALWAYS_INLINE void row_group8x2(const struct wblock8 *w0, const struct wblock8 *w1,
				const struct act8x32 *a, size_t n_blocks,
				__m256 *out0, __m256 *out1)
{
	__m256 acc0[4], acc1[4];
	size_t k = 0;

	for (int c = 0; c < 4; c++)
		acc0[c] = acc1[c] = _mm256_setzero_ps();
	for (; k + 4 <= n_blocks; k += 4)
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++)
			block8x8x2(w0 + k + c, w1 + k + c, a + k + c, &acc0[c], &acc1[c]);
	for (int c = 0; k + c < n_blocks; c++)
		block8x8x2(w0 + k + c, w1 + k + c, a + k + c, &acc0[c], &acc1[c]);
	*out0 = _mm256_add_ps(_mm256_add_ps(acc0[0], acc0[1]), _mm256_add_ps(acc0[2], acc0[3]));
	*out1 = _mm256_add_ps(_mm256_add_ps(acc1[0], acc1[1]), _mm256_add_ps(acc1[2], acc1[3]));
}

/* ---------------------------------------------------------------- driver */

/*
 * The groups' rows of the matmul of weights t (type, a constant where
 * this is inlined, so the branches on it fold): g the interleaved groups,
 * wb room for GEMM8_OB rows of unpacked weight blocks.
 */
ALWAYS_INLINE void gemm8_run(enum dtype type, float *out, const struct tensor *t,
			     const void *g, size_t n_groups, void *wb)
{
	int quads = ggml_uses_quads(type);
	size_t n_out = t->rows, n_blocks = t->cols / ggml_block_values(type);
	size_t row_bytes = ggml_row_bytes(type, t->cols);
	unsigned bytes = ggml_block_bytes(type);
	const uint8_t *w = t->data;

	for (size_t ob = 0; ob < n_out; ob += GEMM8_OB) {
		size_t oe = n_out - ob < GEMM8_OB ? n_out : ob + GEMM8_OB;

		for (size_t o = ob; o < oe; o++)
			for (size_t k = 0; k < n_blocks; k++) {
				const uint8_t *b = w + o * row_bytes + k * bytes;
				size_t at = (o - ob) * n_blocks + k;

				if (type == DTYPE_GGML_Q8_0)
					unpack_block8(b, (struct wblock8 *)wb + at);
				else if (quads)
					unpack_block32(type, b, (struct wblock32 *)wb + at);
				else
					unpack_block(type, b, (struct wblock *)wb + at);
			}
		for (size_t gi = 0; gi < n_groups; gi++) {
			size_t o = ob;

			/* Q8_0: weight rows in pairs, the odd one below */
			for (; type == DTYPE_GGML_Q8_0 && o + 2 <= oe; o += 2) {
				size_t at = (o - ob) * n_blocks, ga = gi * n_blocks;
				float l0[8], l1[8];
				__m256 v0, v1;

				row_group8x2((const struct wblock8 *)wb + at,
					     (const struct wblock8 *)wb + at + n_blocks,
					     (const struct act8x32 *)g + ga, n_blocks, &v0, &v1);
				_mm256_storeu_ps(l0, v0);
				_mm256_storeu_ps(l1, v1);
				for (int r = 0; r < 8; r++) {
					out[(8 * gi + r) * n_out + o] = l0[r];
					out[(8 * gi + r) * n_out + o + 1] = l1[r];
				}
			}
			for (; o < oe; o++) {
				size_t at = (o - ob) * n_blocks, ga = gi * n_blocks;
				float lanes[8];

				_mm256_storeu_ps(lanes, type == DTYPE_GGML_Q8_0 ?
					row_group8((const struct wblock8 *)wb + at,
						   (const struct act8x32 *)g + ga, n_blocks) :
					quads ?
					row_group32(type, (const struct wblock32 *)wb + at,
						    (const struct act8x32 *)g + ga, n_blocks) :
					row_group(type, (const struct wblock *)wb + at,
						  (const struct act8 *)g + ga, n_blocks));
				for (int r = 0; r < 8; r++)
					out[(8 * gi + r) * n_out + o] = lanes[r];
			}
		}
	}
}

#define GEMM8_CASE(T)                                                        \
	case T:                                                              \
		gemm8_run(T, out, t, g, n_groups, wb);                       \
		break

GGML_AVX2 int ggml_gemm8_avx2(float *out, const struct tensor *t,
			      const void *act, size_t n_groups)
{
	enum dtype type = t->type;
	int q8 = type == DTYPE_GGML_Q8_0, quads = ggml_uses_quads(type);
	size_t n_blocks = t->cols / ggml_block_values(type);
	size_t g_size = quads || q8 ? sizeof(struct act8x32) : sizeof(struct act8);
	size_t w_size = q8 ? sizeof(struct wblock8) : quads ?
			sizeof(struct wblock32) : sizeof(struct wblock);
	void *g = NULL, *wb = NULL;
	size_t n_g;

	if (!q8 && !quads && type != DTYPE_GGML_Q4_K && type != DTYPE_GGML_Q5_K)
		return -1;
	if (!__builtin_mul_overflow(n_groups, n_blocks, &n_g) &&
	    n_g < SIZE_MAX / g_size)
		g = malloc(n_g * g_size);
	if (n_blocks < SIZE_MAX / GEMM8_OB / w_size)
		wb = malloc(GEMM8_OB * n_blocks * w_size);
	if (!g || !wb) {
		free(g);
		free(wb);
		return -1;
	}
	for (size_t gi = 0; gi < n_groups; gi++) {
		if (q8)
			interleave8x8((struct act8x32 *)g + gi * n_blocks,
				      (const struct ggml_act32 *)act + 8 * gi * n_blocks,
				      n_blocks);
		else if (quads)
			interleave8x32((struct act8x32 *)g + gi * n_blocks,
				       (const struct ggml_act32x4 *)act +
				       8 * gi * ((n_blocks + 3) / 4), n_blocks);
		else
			interleave8((struct act8 *)g + gi * n_blocks,
				    (const struct ggml_act256 *)act + 8 * gi * n_blocks,
				    n_blocks);
	}
	switch (type) {	/* a constant type each: the kernels inline */
	GEMM8_CASE(DTYPE_GGML_Q8_0);
	GEMM8_CASE(DTYPE_GGML_Q4_0);
	GEMM8_CASE(DTYPE_GGML_Q4_1);
	GEMM8_CASE(DTYPE_GGML_Q5_0);
	GEMM8_CASE(DTYPE_GGML_Q5_1);
	GEMM8_CASE(DTYPE_GGML_Q4_K);
	default:	/* DTYPE_GGML_Q5_K, checked above */
		gemm8_run(DTYPE_GGML_Q5_K, out, t, g, n_groups, wb);
		break;
	}
	free(g);
	free(wb);
	return 0;
}
#endif
