/*
 * ggml_dot.c - the ggml block types' portable matmul and activation
 * quantizers (ggml_quants.h says the arithmetic and the layouts, which
 * ggml_dot_avx2.c repeats bit for bit).
 *
 * NOTES ON THE DESIGN
 *
 * Activations are quantized once per call into a buffer (n_rows rows of
 * blocks), then every weight row meets every activation row.  Should the
 * buffer not be had, each activation block is quantized again where it
 * is used: a block's quantization depends on its own values only, so the
 * result is the same, only slower; the AVX2 twin falls back to this.
 * The nibble types' activations come four blocks at a time (struct
 * ggml_act32x4), in the order the AVX2 code reads them; here each block
 * is still met on its own, into its chain.
 * Each weight block is unpacked by ggml_unpack.h (the dequantizer's own
 * reading of the format) into int8 values and integer scales, then dotted
 * in integers exactly.
 */
#include "kernels/ggml_quants.h"
#include "kernels/ggml_unpack.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------ activation quantizers */

/* q = x * id rounded to nearest, ties to even (vroundps's rounding),
 * clamped to -127..127; nan (a nan or inf input) 0. */
static inline int8_t ggml_act_q(float x, float id)
{
	float v = rintf(x * id);	/* the default rounding mode: to even */

	if (v > 127)
		return 127;
	if (v < -127)
		return -127;
	return v == v ? (int8_t)v : 0;
}

/* Scale d = max |x| / 127 of x[0 .. n), and its inverse (0 for d = 0). */
static void ggml_act_scale(const float *x, size_t n, float *d, float *id)
{
	float amax = 0;

	for (size_t i = 0; i < n; i++) {
		float a = fabsf(x[i]);

		if (a > amax || a != a)	/* a nan stays: the block is lost */
			amax = a;
	}
	*d = amax / 127;
	*id = *d != 0 ? 1 / *d : 0;
}

void ggml_quantize_act32(struct ggml_act32 *a, const float *x, size_t n)
{
	for (size_t k = 0; k < n / GGML_QK32; k++, a++, x += GGML_QK32) {
		float id;

		ggml_act_scale(x, GGML_QK32, &a->d, &id);
		for (int i = 0; i < GGML_QK32; i++)
			a->q[i] = ggml_act_q(x[i], id);
	}
}

void ggml_quantize_act32x4(struct ggml_act32x4 *a, const float *x, size_t n)
{
	size_t n_blocks = n / GGML_QK32;

	for (size_t k = 0; k < n_blocks; k += 4, a++) {
		memset(a, 0, sizeof(*a));
		for (size_t c = 0; c < 4 && k + c < n_blocks; c++) {
			const float *xb = x + (k + c) * GGML_QK32;
			int8_t *lo = a->lo[c / 2] + 16 * (c % 2);
			int8_t *hi = a->hi[c / 2] + 16 * (c % 2);
			float id;
			int sum = 0;

			ggml_act_scale(xb, GGML_QK32, &a->d[c], &id);
			for (int i = 0; i < 16; i++) {
				lo[i] = ggml_act_q(xb[i], id);
				hi[i] = ggml_act_q(xb[16 + i], id);
				sum += lo[i] + hi[i];
			}
			a->qsum[c] = sum;
			a->s[c] = a->d[c] * (float)sum;
		}
	}
}

void ggml_quantize_act256(struct ggml_act256 *a, const float *x, size_t n)
{
	for (size_t k = 0; k < n / GGML_QK256; k++, a++, x += GGML_QK256) {
		float id;

		ggml_act_scale(x, GGML_QK256, &a->d, &id);
		for (int g = 0; g < GGML_QK256 / 16; g++) {
			int sum = 0;

			for (int i = 16 * g; i < 16 * g + 16; i++) {
				a->q[i] = ggml_act_q(x[i], id);
				sum += a->q[i];
			}
			a->bsums[g] = (int16_t)sum;
		}
	}
}

size_t ggml_act_row_bytes(enum dtype type, size_t n_in)
{
	size_t n_blocks = n_in / ggml_block_values(type);

	if (ggml_block_values(type) == GGML_QK256)
		return n_blocks * sizeof(struct ggml_act256);
	if (ggml_uses_quads(type))
		return (n_blocks + 3) / 4 * sizeof(struct ggml_act32x4);
	return n_blocks * sizeof(struct ggml_act32);
}

void ggml_quantize_act_row(enum dtype type, void *act, const float *x,
			   size_t n_in)
{
	if (ggml_block_values(type) == GGML_QK256)
		ggml_quantize_act256(act, x, n_in);
	else if (ggml_uses_quads(type))
		ggml_quantize_act32x4(act, x, n_in);
	else
		ggml_quantize_act32(act, x, n_in);
}

/* ----------------------------------------------------------- dot products */

/* One Q8_0 block's exact integer D into chain c of acc[] (ggml_quants.h). */
static void ggml_block32_acc(float acc[4], enum dtype type, const uint8_t *wb,
			     const struct ggml_act32 *a, int c)
{
	struct ggml_unpacked32 u;
	int32_t D = 0;

	ggml_unpack32(&u, type, wb);
	for (int i = 0; i < GGML_QK32; i++)
		D += (int32_t)u.v[i] * a->q[i];
	acc[c] = fmaf((float)D, u.d * a->d, acc[c]);
}

/* Block c of a quad (wb its weight block) into chain c of acc[] and
 * macc[] (ggml_quants.h). */
static void ggml_quad32_acc(float acc[4], float macc[4], enum dtype type,
			    const uint8_t *wb, const struct ggml_act32x4 *a,
			    int c)
{
	struct ggml_unpacked32 u;
	const int8_t *lo = a->lo[c / 2] + 16 * (c % 2);
	const int8_t *hi = a->hi[c / 2] + 16 * (c % 2);
	int32_t D = 0;

	ggml_unpack32(&u, type, wb);
	for (int i = 0; i < 16; i++)
		D += (int32_t)u.v[i] * lo[i] + (int32_t)u.v[16 + i] * hi[i];
	acc[c] = fmaf((float)D, u.d * a->d[c], acc[c]);
	if (u.has_min)
		macc[c] = macc[c] + u.m * a->s[c];
}

/* acc += one 256-block's contribution (ggml_quants.h). */
static float ggml_block256_acc(float acc, enum dtype type, const uint8_t *wb,
			       const struct ggml_act256 *a)
{
	struct ggml_unpacked256 u;
	int32_t sumi = 0, summ = 0;

	ggml_unpack256(&u, type, wb);
	for (int j = 0; j < 256 / u.n_sub; j++) {
		int32_t dot = 0;

		for (int e = j * u.n_sub; e < (j + 1) * u.n_sub; e++)
			dot += (int32_t)u.v[e] * a->q[e];
		sumi += u.sc[j] * dot;
	}
	acc = acc + (u.d * a->d) * (float)sumi;
	if (u.has_min) {
		for (int j = 0; j < 8; j++)
			summ += u.mn[j] * (a->bsums[2 * j] + a->bsums[2 * j + 1]);
		acc = acc - (u.dmin * a->d) * (float)summ;
	}
	return acc;
}

/*
 * Weight row w (n values) against activation row x, quantized at act
 * (NULL: quantize each block here, the same numbers).
 */
static float ggml_row_dot(enum dtype type, const uint8_t *w, const float *x,
			  const void *act, size_t n)
{
	unsigned bytes = ggml_block_bytes(type);

	if (ggml_uses_quads(type)) {
		const struct ggml_act32x4 *a = act;
		size_t n_blocks = n / GGML_QK32;
		float acc[4] = { 0 }, macc[4] = { 0 };

		for (size_t k = 0; k < n_blocks; k += 4) {
			struct ggml_act32x4 one;
			size_t nb = n_blocks - k < 4 ? n_blocks - k : 4;

			if (!a)
				ggml_quantize_act32x4(&one, x + k * GGML_QK32,
						      nb * GGML_QK32);
			for (size_t c = 0; c < nb; c++)
				ggml_quad32_acc(acc, macc, type, w + (k + c) * bytes,
						a ? a + k / 4 : &one, (int)c);
		}
		return ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
		       ((macc[0] + macc[1]) + (macc[2] + macc[3]));
	} else if (ggml_block_values(type) == GGML_QK32) {
		const struct ggml_act32 *a = act;
		float acc[4] = { 0 };

		for (size_t k = 0; k < n / GGML_QK32; k++) {
			struct ggml_act32 one;

			if (!a)
				ggml_quantize_act32(&one, x + k * GGML_QK32,
						    GGML_QK32);
			ggml_block32_acc(acc, type, w + k * bytes, a ? a + k : &one,
					 (int)(k % 4));
		}
		return (acc[0] + acc[1]) + (acc[2] + acc[3]);
	} else {
		const struct ggml_act256 *a = act;
		float acc = 0;

		for (size_t k = 0; k < n / GGML_QK256; k++) {
			struct ggml_act256 one;

			if (!a)
				ggml_quantize_act256(&one, x + k * GGML_QK256,
						     GGML_QK256);
			acc = ggml_block256_acc(acc, type, w + k * bytes,
						a ? a + k : &one);
		}
		return acc;
	}
}

void ggml_matmul_portable(float *out, const float *x, size_t n_rows,
			  const struct tensor *w)
{
	enum dtype type = w->type;
	size_t n_in = w->cols, n_out = w->rows;
	size_t row_bytes = ggml_row_bytes(type, n_in);
	size_t act_row = ggml_act_row_bytes(type, n_in);
	size_t act_bytes;
	unsigned char *act = NULL;
	const uint8_t *p = w->data;

	if (!__builtin_mul_overflow(n_rows, act_row, &act_bytes) && act_bytes)
		act = malloc(act_bytes);
	for (size_t b = 0; act && b < n_rows; b++)
		ggml_quantize_act_row(type, act + b * act_row, x + b * n_in, n_in);
	for (size_t o = 0; o < n_out; o++)
		for (size_t b = 0; b < n_rows; b++)
			out[b * n_out + o] = ggml_row_dot(
				type, p + o * row_bytes, x + b * n_in,
				act ? act + b * act_row : NULL, n_in);
	free(act);
}
