/*
 * ggml_unpack.h - one ggml block (dtype.h) as its integers: the quants
 * as int8 values in element order, the sub-block scales and mins, and
 * the fp32 of its half scales.  The one reading of the bit layouts that
 * the dequantization (ggml_dequant.c) and the portable dot products
 * (ggml_dot.c) share, so that the two cannot disagree about a format.
 * Header-only: the loops inline into both.
 */
#ifndef DYNBATCH_GGML_UNPACK_H
#define DYNBATCH_GGML_UNPACK_H

#include <stdint.h>

#include "kernels/dtype.h"
#include "kernels/fp16.h"
#include "kernels/ggml_quants.h"

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block's
 * 12 scale bytes (dtype.h). */
static inline void ggml_k_scale_min(const uint8_t *s, int j, uint8_t *sc,
				    uint8_t *mn)
{
	if (j < 4) {
		*sc = s[j] & 63;
		*mn = s[j + 4] & 63;
	} else {
		*sc = (uint8_t)((s[j + 4] & 0xf) | (s[j - 4] >> 6) << 4);
		*mn = (uint8_t)((s[j + 4] >> 4) | (s[j] >> 6) << 4);
	}
}

/* A 32-value block: x[i] = d * v[i], plus m where has_min. */
struct ggml_unpacked32 {
	float d, m;
	int has_min;	/* Q4_1, Q5_1 */
	int bias;	/* Q4_0 8, Q5_0 16: v[i] + bias is the stored code */
	int8_t v[32];	/* Q8_0 -128..127, Q4_0 -8..7, Q4_1 0..15,
			 * Q5_0 -16..15, Q5_1 0..31 */
};

/* A 256-value block: x[e] = (d * sc[e / n_sub]) * v[e] - (dmin *
 * mn[e / n_sub]) (no min term for Q6_K). */
struct ggml_unpacked256 {
	float d, dmin;
	int n_sub;	/* values per sub-block: 32, or Q6_K's 16 */
	int has_min;	/* Q4_K, Q5_K */
	int sc[16], mn[8];
	int8_t v[256];	/* Q4_K 0..15, Q5_K 0..31, Q6_K -32..31 */
};

/* The fifth bits of Q5_0/Q5_1 (a 32-bit little-endian word) and the
 * nibbles: element j is qs[j]'s low nibble, j + 16 its high one. */
static inline void ggml_unpack_nibbles(int8_t v[32], const uint8_t *qs,
				       const uint8_t *qh, int bias)
{
	uint32_t h = 0;

	if (qh)
		h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 |
		    (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
	for (int j = 0; j < 16; j++) {
		int lo = (qs[j] & 0xf) | (int)((h >> j) & 1) << 4;
		int hi = (qs[j] >> 4) | (int)((h >> (j + 16)) & 1) << 4;

		v[j] = (int8_t)(lo - bias);
		v[j + 16] = (int8_t)(hi - bias);
	}
}

/* Block b of a 32-value type (DTYPE_GGML_Q8_0 .. Q5_1). */
static inline void ggml_unpack32(struct ggml_unpacked32 *u, enum dtype type,
				 const uint8_t *b)
{
	u->d = fp16_load(b);
	u->m = 0;
	u->has_min = type == DTYPE_GGML_Q4_1 || type == DTYPE_GGML_Q5_1;
	u->bias = type == DTYPE_GGML_Q4_0 ? 8 : type == DTYPE_GGML_Q5_0 ? 16 : 0;
	if (u->has_min)
		u->m = fp16_load(b + 2);
	switch (type) {
	case DTYPE_GGML_Q8_0:
		for (int i = 0; i < 32; i++)
			u->v[i] = (int8_t)b[2 + i];
		break;
	case DTYPE_GGML_Q4_0:
		ggml_unpack_nibbles(u->v, b + 2, NULL, 8);
		break;
	case DTYPE_GGML_Q4_1:
		ggml_unpack_nibbles(u->v, b + 4, NULL, 0);
		break;
	case DTYPE_GGML_Q5_0:
		ggml_unpack_nibbles(u->v, b + 6, b + 2, 16);
		break;
	default:	/* DTYPE_GGML_Q5_1 */
		ggml_unpack_nibbles(u->v, b + 8, b + 4, 0);
		break;
	}
}

/* Q4_K (qh NULL) and Q5_K: scales, mins and 4 or 5-bit quants. */
static inline void ggml_unpack_k45(struct ggml_unpacked256 *u,
				   const uint8_t *b, const uint8_t *qh,
				   const uint8_t *qs)
{
	u->d = fp16_load(b);
	u->dmin = fp16_load(b + 2);
	u->n_sub = 32;
	u->has_min = 1;
	for (int j = 0; j < 8; j++) {
		const uint8_t *q = qs + 32 * (j / 2);
		int shift = 4 * (j & 1);
		uint8_t sc, mn;

		ggml_k_scale_min(b + 4, j, &sc, &mn);
		u->sc[j] = sc;
		u->mn[j] = mn;
		for (int k = 0; k < 32; k++) {
			int v = (q[k] >> shift) & 0xf;

			if (qh)
				v |= ((qh[k] >> j) & 1) << 4;
			u->v[32 * j + k] = (int8_t)v;
		}
	}
}

static inline void ggml_unpack_q6_k(struct ggml_unpacked256 *u,
				    const uint8_t *b)
{
	const uint8_t *ql = b, *qh = b + 128;

	u->d = fp16_load(b + 208);
	u->dmin = 0;
	u->n_sub = 16;
	u->has_min = 0;
	for (int g = 0; g < 16; g++)
		u->sc[g] = (int8_t)b[192 + g];
	for (int e = 0; e < 256; e++) {
		int h = e / 128, s = (e / 32) % 4, k = e % 32;
		int lo = ql[64 * h + k + 32 * (s & 1)] >> (4 * (s / 2)) & 0xf;
		int hi = qh[32 * h + k] >> (2 * s) & 3;

		u->v[e] = (int8_t)((lo | hi << 4) - 32);
	}
}

/* Block b of a K type (DTYPE_GGML_Q4_K .. Q6_K). */
static inline void ggml_unpack256(struct ggml_unpacked256 *u,
				  enum dtype type, const uint8_t *b)
{
	if (type == DTYPE_GGML_Q4_K)
		ggml_unpack_k45(u, b, NULL, b + 16);
	else if (type == DTYPE_GGML_Q5_K)
		ggml_unpack_k45(u, b, b + 16, b + 48);
	else
		ggml_unpack_q6_k(u, b);
}

#endif /* DYNBATCH_GGML_UNPACK_H */
