/*
 * ggml_quantize.c - fp32 rows to ggml's block types, round to nearest
 * (ggml_quantize.h says the promise; dtype.h the layouts).
 *
 * NOTES ON THE DESIGN
 *
 * Every scale is stored as a half, so the quants are computed from the
 * stored (rounded) scale, never from the fp32 one: what the reader
 * multiplies by is what we divided by.  A scale is rounded to the half
 * on the far side of the data (half_toward()), so that the largest value
 * still fits the levels, and the K types' 6-bit (8-bit for Q6_K) scales
 * and mins are rounded up for the same reason; the error is then at
 * most half a step, with no value clamped (Q4_0/Q5_0: one step, as
 * their levels run -8..7 and -16..15 around a scale chosen for the
 * larger side).  Q4_K/Q5_K compute the mins first, then the scales of
 * what is left above them, so both ends are covered.
 */
#include "kernels/ggml_quantize.h"
#include "kernels/fp16.h"
#include "kernels/ggml_quants.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- scales */

/* The half nearest v on v's side of it in direction dir (> 0: not below
 * v, < 0: not above), finite (a v past the largest half gets it). */
static uint16_t half_toward(float v, int dir)
{
	uint16_t h = fp32_to_fp16(v);
	float f = fp16_to_fp32(h);

	if ((h & 0x7fff) >= 0x7c00)	/* overflow: the largest of its sign */
		return (uint16_t)((h & 0x8000) | 0x7bff);
	if (dir > 0 && f < v)
		h = h == 0x8000 ? 1 : (h & 0x8000) ? (uint16_t)(h - 1) : (uint16_t)(h + 1);
	else if (dir < 0 && f > v)
		h = h == 0 ? 0x8001 : (h & 0x8000) ? (uint16_t)(h + 1) : (uint16_t)(h - 1);
	if ((h & 0x7fff) >= 0x7c00)
		h = (uint16_t)((h & 0x8000) | 0x7bff);
	return h;
}

static void put_half(uint8_t *p, uint16_t h)
{
	p[0] = (uint8_t)h;
	p[1] = (uint8_t)(h >> 8);
}

/* round(v) clamped to lo .. hi (a nan, from a nan input, gives lo). */
static int round_clamp(float v, int lo, int hi)
{
	float r = roundf(v);

	return !(r >= lo) ? lo : r > hi ? hi : (int)r;
}

/* x / s rounded, 0 where s is 0 (a block of zeros). */
static int quant(float x, float s, int lo, int hi)
{
	return s != 0 ? round_clamp(x / s, lo, hi) : 0;
}

/* Low nibbles are elements 0..15, high 16..31; bit 4 to the qh word. */
static void pack_nibbles(uint8_t *qs, uint8_t *qh, const int q[32])
{
	uint32_t h = 0;

	for (int j = 0; j < 16; j++) {
		qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
		h |= (uint32_t)(q[j] >> 4 & 1) << j;
		h |= (uint32_t)(q[j + 16] >> 4 & 1) << (j + 16);
	}
	if (qh)
		for (int k = 0; k < 4; k++)
			qh[k] = (uint8_t)(h >> (8 * k));
}

/* --------------------------------------------------------------- 32-blocks */

static void quantize_q8_0(uint8_t *b, const float *x)
{
	float amax = 0, d;

	for (int i = 0; i < 32; i++)
		amax = fmaxf(amax, fabsf(x[i]));
	put_half(b, half_toward(amax / 127, 1));
	d = fp16_load(b);
	for (int i = 0; i < 32; i++)
		b[2 + i] = (uint8_t)(int8_t)quant(x[i], d, -127, 127);
}

/* Q4_0 (levels 8) and Q5_0 (16): d = -max / levels, max the value of
 * largest magnitude, which lands on the bottom level. */
static void quantize_sym(uint8_t *b, const float *x, int levels)
{
	float max = 0, d;
	int q[32];

	for (int i = 0; i < 32; i++)
		if (fabsf(x[i]) > fabsf(max))
			max = x[i];
	/* away from zero: |d| not below |max| / levels */
	put_half(b, half_toward(-max / (float)levels, max > 0 ? -1 : 1));
	d = fp16_load(b);
	for (int i = 0; i < 32; i++)
		q[i] = quant(x[i], d, -levels, levels - 1) + levels;
	if (levels == 8)
		pack_nibbles(b + 2, NULL, q);
	else
		pack_nibbles(b + 6, b + 2, q);
}

/* Q4_1 (top 15) and Q5_1 (31): m = min rounded down, d over the rest. */
static void quantize_min(uint8_t *b, const float *x, int top)
{
	float lo = x[0], hi = x[0], d, m;
	int q[32];

	for (int i = 1; i < 32; i++) {
		lo = fminf(lo, x[i]);
		hi = fmaxf(hi, x[i]);
	}
	put_half(b + 2, half_toward(lo, -1));
	m = fp16_load(b + 2);
	put_half(b, half_toward((hi - m) / (float)top, 1));
	d = fp16_load(b);
	for (int i = 0; i < 32; i++)
		q[i] = quant(x[i] - m, d, 0, top);
	if (top == 15)
		pack_nibbles(b + 4, NULL, q);
	else
		pack_nibbles(b + 8, b + 4, q);
}

/* -------------------------------------------------------------- 256-blocks */

/* The 6-bit scales and mins of Q4_K/Q5_K into their 12 bytes (dtype.h). */
static void pack_k_scales(uint8_t *s, const int sc[8], const int mn[8])
{
	for (int j = 0; j < 4; j++) {
		s[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
		s[j + 4] = (uint8_t)((mn[j] & 63) | (mn[j + 4] >> 4) << 6);
		s[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
	}
}

/* ceil(v / unit) clamped to 0 .. 63, 0 where unit is 0. */
static int six_up(float v, float unit)
{
	float r;

	if (unit == 0)
		return 0;
	r = ceilf(v / unit);
	return r < 0 ? 0 : r > 63 ? 63 : (int)r;
}

/* Q4_K (top 15) and Q5_K (31). */
static void quantize_k45(uint8_t *b, const float *x, int top)
{
	float lo[8], need[8], dm[8], max_lo = 0, max_need = 0, d, dmin;
	int sc[8], mn[8];
	uint8_t *qh = top == 31 ? b + 16 : NULL, *qs = b + (qh ? 48 : 16);

	for (int j = 0; j < 8; j++) {
		lo[j] = 0;	/* the offset is never above zero */
		for (int k = 0; k < 32; k++)
			lo[j] = fminf(lo[j], x[32 * j + k]);
		max_lo = fmaxf(max_lo, -lo[j]);
	}
	put_half(b + 2, half_toward(max_lo / 63, 1));
	dmin = fp16_load(b + 2);
	for (int j = 0; j < 8; j++) {
		float hi = 0;

		mn[j] = six_up(-lo[j], dmin);
		dm[j] = dmin * (float)mn[j];	/* >= -lo[j] */
		for (int k = 0; k < 32; k++)
			hi = fmaxf(hi, x[32 * j + k]);
		need[j] = (hi + dm[j]) / (float)top;
		max_need = fmaxf(max_need, need[j]);
	}
	put_half(b, half_toward(max_need / 63, 1));
	d = fp16_load(b);
	for (int j = 0; j < 8; j++)
		sc[j] = six_up(need[j], d);
	pack_k_scales(b + 4, sc, mn);
	memset(qs, 0, 128);
	if (qh)
		memset(qh, 0, 32);
	for (int j = 0; j < 8; j++) {
		float s = d * (float)sc[j];

		for (int k = 0; k < 32; k++) {
			int q = quant(x[32 * j + k] + dm[j], s, 0, top);

			qs[32 * (j / 2) + k] |= (uint8_t)((q & 15) << (4 * (j & 1)));
			if (qh)
				qh[k] |= (uint8_t)((q >> 4 & 1) << j);
		}
	}
}

static void quantize_q6_k(uint8_t *b, const float *x)
{
	float need[16], max_need = 0, d;
	int8_t *scales = (int8_t *)(b + 192);

	for (int g = 0; g < 16; g++) {
		float amax = 0;

		for (int k = 0; k < 16; k++)
			amax = fmaxf(amax, fabsf(x[16 * g + k]));
		need[g] = amax / 31;	/* levels -31..31 of -32..31 */
		max_need = fmaxf(max_need, need[g]);
	}
	put_half(b + 208, half_toward(max_need / 127, 1));
	d = fp16_load(b + 208);
	memset(b, 0, 192);
	for (int g = 0; g < 16; g++) {
		float r = d != 0 ? ceilf(need[g] / d) : 0;

		scales[g] = (int8_t)(r > 127 ? 127 : r);
	}
	for (int e = 0; e < 256; e++) {
		int h = e / 128, s = e % 128 / 32, k = e % 32;
		int q = quant(x[e], d * (float)scales[e / 16], -32, 31) + 32;

		b[64 * h + k + 32 * (s & 1)] |= (uint8_t)((q & 15) << (4 * (s / 2)));
		b[128 + 32 * h + k] |= (uint8_t)((q >> 4) << (2 * s));
	}
}

/* ------------------------------------------------------------------- rows */

static void quantize_block(enum dtype type, uint8_t *b, const float *x)
{
	switch (type) {
	case DTYPE_GGML_Q8_0: quantize_q8_0(b, x); break;
	case DTYPE_GGML_Q4_0: quantize_sym(b, x, 8); break;
	case DTYPE_GGML_Q5_0: quantize_sym(b, x, 16); break;
	case DTYPE_GGML_Q4_1: quantize_min(b, x, 15); break;
	case DTYPE_GGML_Q5_1: quantize_min(b, x, 31); break;
	case DTYPE_GGML_Q4_K: quantize_k45(b, x, 15); break;
	case DTYPE_GGML_Q5_K: quantize_k45(b, x, 31); break;
	default: quantize_q6_k(b, x); break;
	}
}

size_t ggml_quantize_bytes(enum dtype type, size_t n)
{
	if (!ggml_is_block_type(type))
		return 0;
	return (size_t)ggml_row_bytes(type, n);
}

size_t ggml_quantize_row(enum dtype type, uint8_t *dst, const float *x,
			 size_t n)
{
	size_t bytes = ggml_quantize_bytes(type, n), qk, bb;

	if (!bytes)
		return 0;
	qk = ggml_block_values(type);
	bb = ggml_block_bytes(type);
	for (size_t k = 0; k < n / qk; k++)
		quantize_block(type, dst + k * bb, x + k * qk);
	return bytes;
}
