/*
 * ggml_quants.h - the ggml block types' kernels (DTYPE_GGML_*, dtype.h
 * says the layouts): the dequantization of rows (ggml_dequant.c), the
 * matmuls on quantized activations (ggml_dot.c, portable, and its AVX2
 * twin ggml_dot_avx2.c) and what they share.  Private to lib/kernels;
 * everything else goes through tensor_ops_get(), and the quantizers are
 * in ggml_quantize.h.
 *
 * THE MATMUL.  Each activation row is quantized once per call to the
 * type's companion, our own in-memory blocks (never in a file).  Every
 * block of x gets d = max |x| / 127 and q = x * (1 / d) rounded to
 * nearest, ties to even (what AVX's vroundps does; rintf() in C),
 * clamped to -127..127 (never -128, so the AVX2 sign trick cannot
 * overflow; a nan or inf input's block gives q = 0 where x * (1 / d) is
 * nan).  The blocks are laid out as the kernels read them:
 *
 *	struct ggml_act32 for Q8_0: one 32-block;
 *	struct ggml_act32x4 for Q4_0, Q4_1, Q5_0, Q5_1: four 32-blocks
 *	  4k .. 4k + 3, their values in the order two AVX2 registers hold
 *	  the four weight blocks' nibbles (see the struct), with each
 *	  block's d, sum of q and d * (sum of q);
 *	struct ggml_act256 for Q4_K, Q5_K, Q6_K: one 256-block, with
 *	  bsums[k] the sum of q over values 16k .. 16k + 15.
 *
 * Both twins then compute the same numbers in the same order, so they
 * agree BIT FOR BIT (and each is batch invariant: an output depends only
 * on its activation row and weight row):
 *
 *   Q8_0: per block k, D = the exact sum of w * a_q over its 32
 *	values, then four chains, block k in chain c = k % 4: acc[c] =
 *	fmaf((float)D, d_w * d_a, acc[c]) (one rounding: fmaf() in C, an
 *	FMA in AVX2); the result is (acc[0] + acc[1]) + (acc[2] + acc[3]).
 *   Q4_0, Q4_1, Q5_0, Q5_1: the same, with D = the exact sum of v * a_q
 *	over its 32 values, v the weight's integer (Q4_0's code - 8 and
 *	Q5_0's code - 16; Q4_1's and Q5_1's unsigned codes), then four
 *	chains, block k in chain c = k % 4: acc[c] = fmaf((float)D, d_w *
 *	d_a, acc[c]) and, for Q4_1/Q5_1's min, macc[c] = macc[c] + m_w *
 *	s_a.  The result is ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
 *	((macc[0] + macc[1]) + (macc[2] + macc[3])).  A block's exact
 *	integer lets a kernel hold rows or blocks in its lanes as it
 *	likes (ggml_gemm8_avx2.c: 8 rows; ggml_dot_avx2.c: 4 blocks, the
 *	chains), and four chains keep the FMA latency off the critical
 *	path (docs/DESIGN.md 2.5.3).
 *   256-blocks: per block the exact int32 sumi = sum over sub-blocks j of
 *	sc[j] * (integer dot of sub-block j), and for Q4_K/Q5_K summ = sum
 *	of mn[j] * (sum of a_q over sub-block j); then, block after block,
 *	acc += (d_w * d_a) * (float)sumi, acc -= (dmin_w * d_a) *
 *	(float)summ.
 *
 * The build uses -ffp-contract=off, so no product and sum is fused in
 * either twin but the fmaf()s, written out in both.  Integer sums are
 * exact in any order, which is what lets the AVX2 code sum them its own
 * way.
 */
#ifndef DYNBATCH_GGML_QUANTS_H
#define DYNBATCH_GGML_QUANTS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

#define GGML_QK32 32	/* values per block, legacy types */
#define GGML_QK256 256	/* values per block, K types */

/* Is type one of ggml's block types (DTYPE_GGML_*)? */
static inline int ggml_is_block_type(enum dtype type)
{
	return type >= DTYPE_GGML_Q8_0 && type <= DTYPE_GGML_Q6_K;
}

/* Values per block of a block type (32 or 256). */
unsigned ggml_block_values(enum dtype type);

/* Bytes per block of a block type (18 for Q4_0, ..., 210 for Q6_K). */
unsigned ggml_block_bytes(enum dtype type);

/* Bytes of one row of cols values of a block type; 0 unless cols is a
 * multiple of its block size. */
uint64_t ggml_row_bytes(enum dtype type, uint64_t cols);

/* ------------------------------------------------------ dequantization */

/* out[0 .. n) = the n values (a multiple of the block size) of the
 * blocks at src, as the format defines them (dtype.h), bit for bit. */
void ggml_dequant_row(enum dtype type, float *out, const uint8_t *src,
		      size_t n);

/* tensor_ops.get_row of every block type. */
void ggml_get_row(float *out, const struct tensor *w, uint32_t row);

/* ------------------------------------------------- quantized activations */

struct ggml_act32 {
	float d;		/* scale: value = d * q */
	int8_t q[GGML_QK32];
};

/* Blocks 4k .. 4k + 3 of an activation row, for the nibble types: two
 * pairs, each as one AVX2 register holds two weight blocks' nibbles
 * (the low nibbles are values 0..15, the high ones 16..31).  A missing
 * block of the row's last quad is all zeros. */
struct ggml_act32x4 {
	int8_t lo[2][32];	/* pair h: q[0 .. 16) of block 4k + 2h, then
				 * of block 4k + 2h + 1 */
	int8_t hi[2][32];	/* pair h: q[16 .. 32) of the same two */
	float d[4];		/* block 4k + c's d */
	int32_t qsum[4];	/* its sum of q (Q4_0/Q5_0's offset) */
	float s[4];		/* d * (sum of q) (Q4_1/Q5_1's min) */
};

struct ggml_act256 {
	float d;
	int16_t bsums[GGML_QK256 / 16];	/* sum of q[16k .. 16k + 15] */
	int8_t q[GGML_QK256];
};

/* x[0 .. n) (n a multiple of 32) as n / 32 blocks at a. */
void ggml_quantize_act32(struct ggml_act32 *a, const float *x, size_t n);

/* x[0 .. n) (n a multiple of 32) as (n / 32 + 3) / 4 quads at a. */
void ggml_quantize_act32x4(struct ggml_act32x4 *a, const float *x, size_t n);

/* x[0 .. n) (n a multiple of 256) as n / 256 blocks at a. */
void ggml_quantize_act256(struct ggml_act256 *a, const float *x, size_t n);

/* Does type's matmul use struct ggml_act32x4 (the nibble types)? */
static inline int ggml_uses_quads(enum dtype type)
{
	return type >= DTYPE_GGML_Q4_0 && type <= DTYPE_GGML_Q5_1;
}

/* Bytes of the quantized activations of one row of n_in values. */
size_t ggml_act_row_bytes(enum dtype type, size_t n_in);

/* Row x (n_in values) quantized for type at act (ggml_act_row_bytes()). */
void ggml_quantize_act_row(enum dtype type, void *act, const float *x,
			   size_t n_in);

/* ggml_dot.c's portable matmul, the same arithmetic the AVX2 twin does
 * (and its fallback when it cannot get memory for the activations). */
void ggml_matmul_portable(float *out, const float *x, size_t n_rows,
			  const struct tensor *w);

/* The 8 lanes summed as llama_hsum8() sums them. */
static inline float ggml_hsum8(const float a[8])
{
	return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

#if defined(__x86_64__) || defined(__i386__)
/* ggml_quantize_act_row() in AVX2 (and F16C-free): the same bytes. */
void ggml_quantize_act_row_avx2(enum dtype type, void *act, const float *x,
				size_t n_in);

/* Rows [0, 8 n_groups) of the matmul of weights t (Q8_0, a nibble
 * type, Q4_K or Q5_K) with activation rows act (ggml_quantize_act_row()'s), one row
 * a lane (ggml_gemm8_avx2.c): the same bits as the tiles.  0, or -1
 * without memory or for another type (nothing written). */
int ggml_gemm8_avx2(float *out, const struct tensor *t, const void *act,
		    size_t n_groups);

/* tensor_ops.matmul, AVX2 (only where llama_kernels_have_avx2()). */
void ggml_matmul_avx2(float *out, const float *x, size_t n_rows,
		      const struct tensor *w);
#endif

#endif /* DYNBATCH_GGML_QUANTS_H */
