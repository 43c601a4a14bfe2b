/*
 * llama_kernels.c - dot, axpy, softmax and the attention passes for the
 * llama model, and the F32 type's matmul (f32.h, tensor.h's table), in
 * AVX2+FMA and in portable C; see llama_kernels.h.
 *
 * NOTES ON THE DESIGN
 *
 * The AVX2 matmul reads each weight once per call, however many rows: it
 * walks the outputs in blocks of LLAMA_NR weight rows (which stay in L1)
 * and, for each block, the input rows in blocks of LLAMA_MR (the last
 * n_rows % MR rows alone, with LLAMA_NR1 outputs per tile), keeping
 * MR x NR accumulators in registers (4 x 3 = 12 of the 16 ymm registers;
 * 3 hold weights, 1 an input).  Each weight vector loaded is used MR
 * times, each input vector NR times.
 *
 * Batch invariance: every output element has exactly one 8-lane
 * accumulator, fed in order i = 0, 8, 16, ... by one FMA per step, then
 * reduced by llama_hsum8() (a fixed tree), then the n_in % 8 tail added
 * one scalar FMA at a time in order.  The tile shapes at the edges (fewer
 * rows or outputs) run the same inline function with smaller constant
 * bounds, so an element's arithmetic never depends on which tile it fell
 * in.  The scalar tail uses explicit FMAs so that the compiler's choice
 * to contract or not cannot differ between tile variants.
 *
 * Small batches are memory-bound: the 1 x NR1 and MR x NR tiles prefetch
 * the weights two tiles ahead (a tile's NR or NR1 weight rows are
 * contiguous), a little faster than they consume them.  On the 2-core
 * EPYC (Zen 1) it is developed on, that took batch-1 decode of the
 * stories15M shape from 7.3 to 6.7 ms per token, and the 32000 x 288
 * classifier at 4 and 8 rows from 8.1 and 12.3 ms to 4.1 and 5.1 ms.
 * Each step the prefetch touches two lines: the next two of a tile of up
 * to 4 outputs (the 2 x 4 tile of two rows: its 128 bytes a step), every
 * other one of wider tiles (the hardware prefetcher fills in).  Covering
 * the 2 x 4 tile's both lines took the weights of the stories110M shape
 * at 2 rows from 45 to 37 ms a pass (malloc'd weights, best of 5).
 *
 * Attention: attn_scores() runs a head's query against LLAMA_SP cached
 * keys at a time (one q load feeds LLAMA_SP independent FMA chains, where
 * a dot() per position had one chain and a call each); attn_mix() keeps
 * up to 64 floats of the head's output in registers across all positions
 * (one broadcast weight, then one FMA per vector).  Each score is exactly
 * dot()'s and each output element exactly what axpy() position after
 * position gives, so the tiles' edges change nothing, and a token's
 * result depends only on its query, its cache and its position count.
 * attn_mix_acc() is the same loop started from out's values instead of
 * zeros: a paged cache runs attn_scores() and it once per block's span
 * of positions, and since scores are independent per position and every
 * output element's chain just goes on across a span's end, the spans
 * give the single call's bits (test_llama_paged.c shows it).
 *
 * The functions carry __attribute__((target("avx2,fma"))) instead of the
 * Makefile passing -mavx2, so the rest of the program still runs on any
 * x86-64 and llama_kernels_get() and tensor_ops_get() pick at run time.
 */
#include "kernels/llama_kernels.h"
#include "kernels/f32.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

/* ---------------------------------------------------------------- portable */

/*
 * Portable: 8 partial sums per element, like the AVX2 kernel's lanes, so
 * a compiler may vectorise it, then summed in a fixed order.
 */
static float llama_dot_portable(const float *a, const float *b, size_t n)
{
	float part[8] = { 0 };
	size_t i, n8 = n & ~(size_t)7;
	float s;

	for (i = 0; i < n8; i += 8)
		for (int l = 0; l < 8; l++)
			part[l] += a[i + l] * b[i + l];
	s = ((part[0] + part[4]) + (part[2] + part[6])) +
	    ((part[1] + part[5]) + (part[3] + part[7]));
	for (; i < n; i++)
		s += a[i] * b[i];
	return s;
}

void f32_matmul_portable(float *out, const float *x, size_t n_rows,
			 const struct tensor *t)
{
	const float *w = t->data;
	size_t n_in = t->cols, n_out = t->rows;

	for (size_t o = 0; o < n_out; o++)
		for (size_t b = 0; b < n_rows; b++)
			out[b * n_out + o] = llama_dot_portable(w + o * n_in,
								x + b * n_in,
								n_in);
}

void f32_get_row(float *out, const struct tensor *w, uint32_t row)
{
	memcpy(out, (const float *)w->data + (size_t)row * w->cols,
	       w->cols * sizeof(float));
}

static void llama_axpy_portable(float *y, float a, const float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] += a * x[i];
}

static void llama_attn_scores_portable(float *att, const float *q,
				       const float *keys, size_t stride,
				       size_t n_pos, size_t hs, float scale)
{
	for (size_t p = 0; p < n_pos; p++)
		att[p] = llama_dot_portable(q, keys + p * stride, hs) / scale;
}

/* The largest of x[0 .. n), n >= 1. */
static float llama_max_portable(const float *x, size_t n)
{
	float max = x[0];

	for (size_t i = 1; i < n; i++)
		if (x[i] > max)
			max = x[i];
	return max;
}

/* x[i] = exp(x[i] - max) for i < n, in place; their sum, i ascending. */
static float llama_exp_sum_portable(float *x, size_t n, float max)
{
	float sum = 0.0f;

	for (size_t i = 0; i < n; i++) {
		x[i] = expf(x[i] - max);
		sum += x[i];
	}
	return sum;
}

static void llama_softmax_portable(float *x, size_t n)
{
	float sum = llama_exp_sum_portable(x, n, llama_max_portable(x, n));

	for (size_t i = 0; i < n; i++)
		x[i] /= sum;
}

static float llama_attn_chunk_exp_portable(float *x, size_t n, float *max)
{
	*max = n ? llama_max_portable(x, n) : -INFINITY;
	if (*max == -INFINITY) {
		memset(x, 0, n * sizeof(float));
		return 0.0f;
	}
	return llama_exp_sum_portable(x, n, *max);
}

/*
 * Both tables' merge: written once so that it cannot differ between them
 * (-ffp-contract=off keeps o * a + acc * b two roundings and an add).
 */
static void llama_attn_merge(float *o, float *m_run, float *l_run,
			     const float *acc, float m, float l, size_t hs)
{
	float mx, a, b;

	if (m == -INFINITY)
		return;		/* a chunk without keys: the identity */
	mx = *m_run > m ? *m_run : m;
	a = expf(*m_run - mx);	/* 0 while the running one is empty */
	b = expf(m - mx);
	*l_run = *l_run * a + l * b;
	for (size_t i = 0; i < hs; i++)
		o[i] = o[i] * a + acc[i] * b;
	*m_run = mx;
}

static void llama_attn_mix_acc_portable(float *out, const float *att,
					const float *vals, size_t stride,
					size_t n_pos, size_t hs)
{
	for (size_t p = 0; p < n_pos; p++)
		llama_axpy_portable(out, att[p], vals + p * stride, hs);
}

static void llama_attn_mix_portable(float *out, const float *att,
				    const float *vals, size_t stride,
				    size_t n_pos, size_t hs)
{
	memset(out, 0, hs * sizeof(float));
	llama_attn_mix_acc_portable(out, att, vals, stride, n_pos, hs);
}

/* -------------------------------------------------------------- AVX2 + FMA */

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/llama_avx2.h"

#define LLAMA_MR 4	/* input rows per tile */
#define LLAMA_NR 3	/* outputs per tile */
#define LLAMA_NR1 8	/* outputs per tile of a single row */

/*
 * One tile: rows x[0..R) times weight rows w[0..O), R <= MR, O <= NR1,
 * written to out[r * n_out + o].  Inlined with constant R, O and PF.
 * PF: prefetch the weights of two tiles ahead.  Only memory-bound calls
 * do, and only in the first row group of a block: prefetching in every
 * group evicts from L1 the weights the later groups still need, which
 * made a 64-row step of the stories110M shape 3x slower.
 */
static inline __attribute__((always_inline)) LLAMA_AVX2 void
llama_tile(int R, int O, bool PF, float *out, const float *x, const float *w,
	   size_t n_in, size_t n_out)
{
	__m256 acc[LLAMA_MR][LLAMA_NR1];
	size_t i, n8 = n_in & ~(size_t)7;

#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
#pragma GCC unroll 8
		for (int o = 0; o < O; o++)
			acc[r][o] = _mm256_setzero_ps();
	for (i = 0; i < n8; i += 8) {
		__m256 wv[LLAMA_NR1];

#pragma GCC unroll 8
		for (int o = 0; o < O; o++)
			wv[o] = _mm256_loadu_ps(w + o * n_in + i);
		if (PF && R * O >= 8) {
			/* two tiles ahead: see the file comment */
			const char *ahead = (const char *)(w + 2 * O * n_in + i * O);

			_mm_prefetch(ahead, _MM_HINT_T0);
			_mm_prefetch(ahead + (O <= 4 ? 64 : 128), _MM_HINT_T0);
		}
#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			__m256 xv = _mm256_loadu_ps(x + r * n_in + i);

#pragma GCC unroll 8
			for (int o = 0; o < O; o++)
				acc[r][o] = _mm256_fmadd_ps(wv[o], xv,
							    acc[r][o]);
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++) {
#pragma GCC unroll 8
		for (int o = 0; o < O; o++) {
			float s = llama_hsum8(acc[r][o]);

			for (size_t j = n8; j < n_in; j++)
				s = llama_fma1(w[o * n_in + j],
					       x[r * n_in + j], s);
			out[r * n_out + o] = s;
		}
	}
}

/* The tile for R rows and O outputs, each a constant-bound copy. */
#define LLAMA_TILE_CASE(R, O)                                          \
	case (R) * 16 + (O):                                           \
		llama_tile(R, O, true, out, x, w, n_in, n_out);        \
		break

static LLAMA_AVX2 void llama_tile_any(int R, int O, float *out,
				      const float *x, const float *w,
				      size_t n_in, size_t n_out)
{
	switch (R * 16 + O) {
	LLAMA_TILE_CASE(1, 1); LLAMA_TILE_CASE(1, 2); LLAMA_TILE_CASE(1, 3);
	LLAMA_TILE_CASE(1, 4); LLAMA_TILE_CASE(1, 5); LLAMA_TILE_CASE(1, 6);
	LLAMA_TILE_CASE(1, 7); LLAMA_TILE_CASE(1, 8);
	LLAMA_TILE_CASE(2, 1); LLAMA_TILE_CASE(2, 2); LLAMA_TILE_CASE(2, 3);
	LLAMA_TILE_CASE(2, 4);
	LLAMA_TILE_CASE(3, 1); LLAMA_TILE_CASE(3, 2); LLAMA_TILE_CASE(3, 3);
	LLAMA_TILE_CASE(4, 1); LLAMA_TILE_CASE(4, 2);
	default:
		break;
	}
}

/*
 * Outputs in blocks of LLAMA_OB weight rows (a multiple of NR and NR1);
 * per block, rows in groups of MR against NR outputs at a time, then the
 * R_left = n_rows % MR rows left over (all of them at batch 1 to 3)
 * together against 8, 4 or 3 outputs at a time, which keeps enough
 * independent FMA chains and weight streams in flight.  The leftover rows
 * find the block's weights still in cache, so every weight comes from
 * memory once per call whatever n_rows.
 */
#define LLAMA_OB 24

LLAMA_AVX2 void f32_matmul_avx2(float *out, const float *x, size_t n_rows,
				const struct tensor *t)
{
	const float *w = t->data;
	size_t n_in = t->cols, n_out = t->rows;
	size_t n_full = n_rows / LLAMA_MR * LLAMA_MR;
	/* only small batches are memory-bound enough to gain by prefetching */
	bool few_rows = n_full <= 2 * LLAMA_MR;
	int R_left = (int)(n_rows - n_full);
	/* as many accumulators as fit the 16 registers beside the weights */
	size_t NR_left = R_left == 1 ? LLAMA_NR1 : R_left == 2 ? 4 : 3;

	for (size_t ob = 0; ob < n_out; ob += LLAMA_OB) {
		size_t oe = n_out - ob < LLAMA_OB ? n_out : ob + LLAMA_OB;

		for (size_t o = ob; n_full && o < oe; o += LLAMA_NR) {
			int O = oe - o < LLAMA_NR ? (int)(oe - o) : LLAMA_NR;

			for (size_t b = 0; b < n_full; b += LLAMA_MR) {
				if (O == LLAMA_NR && b == 0 && few_rows)
					llama_tile(LLAMA_MR, LLAMA_NR, true,
						   out + b * n_out + o,
						   x + b * n_in, w + o * n_in,
						   n_in, n_out);
				else if (O == LLAMA_NR)
					llama_tile(LLAMA_MR, LLAMA_NR, false,
						   out + b * n_out + o,
						   x + b * n_in, w + o * n_in,
						   n_in, n_out);
				else
					llama_tile_any(LLAMA_MR, O,
						       out + b * n_out + o,
						       x + b * n_in,
						       w + o * n_in, n_in,
						       n_out);
			}
		}
		for (size_t o = ob; R_left && o < oe; o += NR_left) {
			int O = oe - o < NR_left ? (int)(oe - o) : (int)NR_left;

			if (R_left == 1 && O == LLAMA_NR1)
				llama_tile(1, LLAMA_NR1, true, out + n_full * n_out + o,
					   x + n_full * n_in, w + o * n_in, n_in,
					   n_out);
			else
				llama_tile_any(R_left, O, out + n_full * n_out + o,
					       x + n_full * n_in, w + o * n_in,
					       n_in, n_out);
		}
	}
}

static LLAMA_AVX2 float llama_dot_avx2(const float *a, const float *b,
				       size_t n)
{
	__m256 acc = _mm256_setzero_ps();
	size_t i, n8 = n & ~(size_t)7;
	float s;

	for (i = 0; i < n8; i += 8)
		acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i),
				      _mm256_loadu_ps(b + i), acc);
	s = llama_hsum8(acc);
	for (; i < n; i++)
		s = llama_fma1(a[i], b[i], s);
	return s;
}

static LLAMA_AVX2 void llama_axpy_avx2(float *y, float a, const float *x,
				       size_t n)
{
	__m256 av = _mm256_set1_ps(a);
	size_t i, n8 = n & ~(size_t)7;

	for (i = 0; i < n8; i += 8)
		_mm256_storeu_ps(y + i,
				 _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i),
						 _mm256_loadu_ps(y + i)));
	for (; i < n; i++)
		y[i] = llama_fma1(a, x[i], y[i]);
}

/*
 * Scores of P positions at once (P <= LLAMA_SP): P accumulators fed from
 * one load of q per step, so that P independent FMA chains are in flight
 * where dot() has one.  Each score's arithmetic is dot()'s: one 8-lane
 * accumulator fed in order, llama_hsum8(), the scalar FMA tail.
 */
#define LLAMA_SP 8

static inline __attribute__((always_inline)) LLAMA_AVX2 void
llama_scores_tile(int P, float *att, const float *q, const float *keys,
		  size_t stride, size_t hs, float scale)
{
	__m256 acc[LLAMA_SP];
	size_t i, n8 = hs & ~(size_t)7;

#pragma GCC unroll 8
	for (int p = 0; p < P; p++)
		acc[p] = _mm256_setzero_ps();
	for (i = 0; i < n8; i += 8) {
		__m256 qv = _mm256_loadu_ps(q + i);

#pragma GCC unroll 8
		for (int p = 0; p < P; p++)
			acc[p] = _mm256_fmadd_ps(qv,
						 _mm256_loadu_ps(keys + p * stride + i),
						 acc[p]);
	}
#pragma GCC unroll 8
	for (int p = 0; p < P; p++) {
		float s = llama_hsum8(acc[p]);

		for (size_t j = n8; j < hs; j++)
			s = llama_fma1(q[j], keys[p * stride + j], s);
		att[p] = s / scale;
	}
}

#define LLAMA_SCORES_CASE(P)                                            \
	case P:                                                         \
		llama_scores_tile(P, att, q, keys, stride, hs, scale);  \
		break

static LLAMA_AVX2 void llama_attn_scores_avx2(float *att, const float *q,
					      const float *keys, size_t stride,
					      size_t n_pos, size_t hs,
					      float scale)
{
	size_t p = 0;

	for (; p + LLAMA_SP <= n_pos; p += LLAMA_SP)
		llama_scores_tile(LLAMA_SP, att + p, q, keys + p * stride,
				  stride, hs, scale);
	att += p;
	keys += p * stride;
	switch (n_pos - p) {
	LLAMA_SCORES_CASE(1); LLAMA_SCORES_CASE(2); LLAMA_SCORES_CASE(3);
	LLAMA_SCORES_CASE(4); LLAMA_SCORES_CASE(5); LLAMA_SCORES_CASE(6);
	LLAMA_SCORES_CASE(7);
	default:
		break;
	}
}

/*
 * out[i0 .. i0 + 8 V) over all positions, the V vectors held in registers
 * (V <= 8): per position one broadcast weight and V FMAs, each element's
 * chain fed in order of p from 0, as axpy() into a zeroed out would.
 * ACC (a constant once inlined): the chains start from out's values
 * instead of 0 (attn_mix_acc()); a float stored and loaded back is
 * exact, so a chain split at a span's end goes on unchanged.
 */
static inline __attribute__((always_inline)) LLAMA_AVX2 void
llama_mix_block(int V, bool ACC, float *out, const float *att,
		const float *vals, size_t stride, size_t n_pos)
{
	__m256 acc[8];

#pragma GCC unroll 8
	for (int v = 0; v < V; v++)
		acc[v] = ACC ? _mm256_loadu_ps(out + 8 * v) : _mm256_setzero_ps();
	for (size_t p = 0; p < n_pos; p++) {
		__m256 a = _mm256_broadcast_ss(att + p);
		const float *row = vals + p * stride;

#pragma GCC unroll 8
		for (int v = 0; v < V; v++)
			acc[v] = _mm256_fmadd_ps(a, _mm256_loadu_ps(row + 8 * v),
						 acc[v]);
	}
#pragma GCC unroll 8
	for (int v = 0; v < V; v++)
		_mm256_storeu_ps(out + 8 * v, acc[v]);
}

#define LLAMA_MIX_CASE(V)                                               \
	case V:                                                         \
		llama_mix_block(V, ACC, out + i, att, vals + i, stride, n_pos); \
		break

/* attn_mix() (ACC false) and attn_mix_acc() (ACC true), inlined into each
 * with ACC constant: the same chains, started from 0 or from out. */
static inline __attribute__((always_inline)) LLAMA_AVX2 void
llama_attn_mix_body(bool ACC, float *out, const float *att, const float *vals,
		    size_t stride, size_t n_pos, size_t hs)
{
	size_t i, n8 = hs & ~(size_t)7;

	for (i = 0; i + 64 <= n8; i += 64)
		llama_mix_block(8, ACC, out + i, att, vals + i, stride, n_pos);
	switch ((n8 - i) / 8) {
	LLAMA_MIX_CASE(1); LLAMA_MIX_CASE(2); LLAMA_MIX_CASE(3);
	LLAMA_MIX_CASE(4); LLAMA_MIX_CASE(5); LLAMA_MIX_CASE(6);
	LLAMA_MIX_CASE(7);
	default:
		break;
	}
	for (i = n8; i < hs; i++) {
		float s = ACC ? out[i] : 0.0f;

		for (size_t p = 0; p < n_pos; p++)
			s = llama_fma1(att[p], vals[p * stride + i], s);
		out[i] = s;
	}
}

static LLAMA_AVX2 void llama_attn_mix_avx2(float *out, const float *att,
					   const float *vals, size_t stride,
					   size_t n_pos, size_t hs)
{
	llama_attn_mix_body(false, out, att, vals, stride, n_pos, hs);
}

static LLAMA_AVX2 void llama_attn_mix_acc_avx2(float *out, const float *att,
					       const float *vals, size_t stride,
					       size_t n_pos, size_t hs)
{
	llama_attn_mix_body(true, out, att, vals, stride, n_pos, hs);
}

/*
 * exp of 8 values <= 0: exp(x) = 2^k e^r with k = round(x / ln 2) and
 * |r| <= ln 2 / 2 (ln 2 in two parts, so r is exact enough), e^r by its
 * Taylor polynomial to degree 6 (relative error about 1.2e-7), 2^k put
 * in the exponent bits.  Below -87 (where 2^k leaves the normal range)
 * the result is 0, as exp's is to within 1.7e-38.
 */
static inline __attribute__((always_inline)) LLAMA_AVX2 __m256
llama_exp8(__m256 x)
{
	const __m256 lo = _mm256_set1_ps(-87.0f);
	__m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
	__m256 k, r, p;
	__m256i e;

	x = _mm256_max_ps(x, lo);
	k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
			    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
	r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
	p = _mm256_set1_ps(1.0f / 720);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k),
					       _mm256_set1_epi32(127)), 23);
	return _mm256_andnot_ps(under,
				_mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* The largest of x[0 .. n), n >= 1: exact in any order. */
static inline __attribute__((always_inline)) LLAMA_AVX2 float
llama_max_avx2(const float *x, size_t n)
{
	size_t i, n8 = n & ~(size_t)7;
	__m256 vmax = _mm256_set1_ps(x[0]);
	float max;

	for (i = 0; i < n8; i += 8)
		vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
	vmax = _mm256_max_ps(vmax, _mm256_permute2f128_ps(vmax, vmax, 1));
	vmax = _mm256_max_ps(vmax, _mm256_permute_ps(vmax, 0x4e));
	vmax = _mm256_max_ps(vmax, _mm256_permute_ps(vmax, 0xb1));
	max = _mm256_cvtss_f32(vmax);
	for (; i < n; i++)
		max = x[i] > max ? x[i] : max;
	return max;
}

/*
 * x[i] = exp(x[i] - max) in place (element by element, the last n % 8
 * through a padded vector so that every element gets the same function)
 * and their sum: one 8-lane accumulator in order, llama_hsum8(), then the
 * tail's exps added in order.
 */
static inline __attribute__((always_inline)) LLAMA_AVX2 float
llama_exp_sum_avx2(float *x, size_t n, float max)
{
	size_t i, n8 = n & ~(size_t)7;
	__m256 vmax = _mm256_set1_ps(max), acc = _mm256_setzero_ps();
	float sum, tail[8];

	for (i = 0; i < n8; i += 8) {
		__m256 v = llama_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i),
						    vmax));

		_mm256_storeu_ps(x + i, v);
		acc = _mm256_add_ps(acc, v);
	}
	sum = llama_hsum8(acc);
	if (n8 < n) {
		for (i = 0; i < 8; i++)
			tail[i] = n8 + i < n ? x[n8 + i] - max : -INFINITY;
		_mm256_storeu_ps(tail, llama_exp8(_mm256_loadu_ps(tail)));
		for (i = n8; i < n; i++) {
			x[i] = tail[i - n8];
			sum += x[i];
		}
	}
	return sum;
}

/* The max, the exps and their sum as above, then one multiply by 1 / sum. */
static LLAMA_AVX2 void llama_softmax_avx2(float *x, size_t n)
{
	size_t i, n8 = n & ~(size_t)7;
	float sum = llama_exp_sum_avx2(x, n, llama_max_avx2(x, n));
	__m256 vinv = _mm256_set1_ps(1.0f / sum);

	for (i = 0; i < n8; i += 8)
		_mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i),
						      vinv));
	for (; i < n; i++)
		x[i] *= 1.0f / sum;
}

static LLAMA_AVX2 float llama_attn_chunk_exp_avx2(float *x, size_t n,
						  float *max)
{
	*max = n ? llama_max_avx2(x, n) : -INFINITY;
	if (*max == -INFINITY) {
		memset(x, 0, n * sizeof(float));
		return 0.0f;
	}
	return llama_exp_sum_avx2(x, n, *max);
}

static const struct llama_kernels llama_kernels_avx2 = {
	.name = "avx2",
	.dot = llama_dot_avx2,
	.axpy = llama_axpy_avx2,
	.attn_scores = llama_attn_scores_avx2,
	.attn_mix = llama_attn_mix_avx2,
	.attn_mix_acc = llama_attn_mix_acc_avx2,
	.softmax = llama_softmax_avx2,
	.attn_chunk_exp = llama_attn_chunk_exp_avx2,
	.attn_merge = llama_attn_merge,
};

bool llama_kernels_have_avx2(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
bool llama_kernels_have_avx2(void)
{
	return false;
}
#endif

static const struct llama_kernels llama_kernels_portable = {
	.name = "portable",
	.dot = llama_dot_portable,
	.axpy = llama_axpy_portable,
	.attn_scores = llama_attn_scores_portable,
	.attn_mix = llama_attn_mix_portable,
	.attn_mix_acc = llama_attn_mix_acc_portable,
	.softmax = llama_softmax_portable,
	.attn_chunk_exp = llama_attn_chunk_exp_portable,
	.attn_merge = llama_attn_merge,
};

const struct llama_kernels *llama_kernels_get(enum llama_kernel_kind kind)
{
#if defined(__x86_64__) || defined(__i386__)
	if (kind == LLAMA_KERNEL_AVX2 && llama_kernels_have_avx2())
		return &llama_kernels_avx2;
#endif
	if (kind == LLAMA_KERNEL_AVX2)
		return NULL;
	return &llama_kernels_portable;
}
