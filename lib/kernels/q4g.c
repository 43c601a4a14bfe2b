/*
 * q4g.c - the Q4G type's portable kernels (q4g.h says the arithmetic,
 * dtype.h the layout): the quantizer that makes it from fp32 at load,
 * the dequantization of a row, the activation quantizer both matmuls
 * share and the portable matmul, which q4g_avx2.c repeats bit for bit.
 *
 * NOTES ON THE DESIGN
 *
 * Symmetric, no offset: d = max |x| / 7 and codes -7..7 (the format
 * reads -8 too), so a weight is one multiply and the dot product needs
 * no sum of the activations.  The code is x / d by a division, not x
 * times 1 / d: at load it costs nothing, and it keeps the bound simple
 * (|x - d q| <= d / 2 plus a few ulps of d; test_q4.c derives it).
 *
 * A partial last group is stored as a whole one with codes 0 past the
 * row's end, and its activations quantized with q 0 there, so the
 * kernels walk whole groups and never read a value past the row: x is
 * read only below n, the weights' padding is theirs.
 */
#include "kernels/q4g.h"
#include "kernels/ggml_quants.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint64_t q4g_matrix_bytes(uint64_t rows, uint64_t cols, uint64_t group)
{
	uint64_t row, n;

	if (!q4g_group_ok(group) ||
	    __builtin_mul_overflow(q4g_row_groups(cols, group),
				   q4g_group_bytes(group), &row) ||
	    __builtin_mul_overflow(rows, row, &n))
		return 0;
	return n;
}

/* max |x[0 .. n)|; nan when one is nan (the group is then lost). */
static float q4g_amax(const float *x, size_t n)
{
	float amax = 0;

	for (size_t i = 0; i < n; i++) {
		float a = fabsf(x[i]);

		if (a > amax || a != a)
			amax = a;
	}
	return amax;
}

/* round(v) clamped to -lim..lim; 0 for nan. */
static int q4g_round(float v, int lim)
{
	float r = roundf(v);

	if (r > (float)lim)
		return lim;
	if (r < (float)-lim)
		return -lim;
	return r == r ? (int)r : 0;
}

void q4g_quantize_row(unsigned char *dst, const float *x, size_t n,
		      uint32_t group)
{
	size_t half = group / 2;

	for (size_t at = 0; at < n; at += group, dst += 4 + half) {
		size_t len = n - at < group ? n - at : group;
		float d = q4g_amax(x + at, len) / 7;
		/* d 0, inf or nan: every code 0 (x / d would be nan) */
		int usable = d != 0 && isfinite(d);

		memcpy(dst, &d, sizeof(d));	/* little-endian hosts only */
		memset(dst + 4, 0, half);
		for (size_t i = 0; usable && i < len; i++) {
			unsigned code = (unsigned)q4g_round(x[at + i] / d, 7) & 15;

			dst[4 + i % half] |= (unsigned char)(i < half ? code :
							     code << 4);
		}
	}
}

void q4g_quantize_matrix(unsigned char *dst, const float *src, size_t rows,
			 size_t cols, uint32_t group)
{
	size_t row_bytes = q4g_matrix_bytes(1, cols, group);

	for (size_t r = 0; r < rows; r++)
		q4g_quantize_row(dst + r * row_bytes, src + r * cols, cols,
				 group);
}

/* The signed value of a 4-bit two's complement code. */
static inline int q4g_code(unsigned nibble)
{
	return (int)(nibble ^ 8) - 8;
}

void q4g_get_row(float *out, const struct tensor *w, uint32_t row)
{
	uint32_t group = w->group, half = group / 2;
	size_t row_bytes = q4g_matrix_bytes(1, w->cols, group);
	const unsigned char *p = (const unsigned char *)w->data +
				 (size_t)row * row_bytes;

	for (size_t at = 0; at < w->cols; at += group, p += 4 + half) {
		size_t len = w->cols - at < group ? w->cols - at : group;
		float d;

		memcpy(&d, p, sizeof(d));
		for (size_t i = 0; i < len; i++) {
			unsigned b = p[4 + i % half];

			out[at + i] = d * (float)q4g_code(i < half ? b & 15 :
							      b >> 4);
		}
	}
}

/* ------------------------------------------------ activation quantizer */

/* One activation group of len <= group values at a: d_a, then codes. */
static void q4g_quantize_act_group(unsigned char *a, const float *x,
				   size_t len, uint32_t group)
{
	float d = q4g_amax(x, len) / 127;
	int usable = d != 0 && isfinite(d);
	int8_t *q = (int8_t *)(a + 4);

	memcpy(a, &d, sizeof(d));
	memset(q, 0, group);
	for (size_t i = 0; usable && i < len; i++)
		q[i] = (int8_t)q4g_round(x[i] / d, 127);
}

void q4g_quantize_act(unsigned char *act, const float *x, size_t n,
		      uint32_t group)
{
	for (size_t at = 0; at < n; at += group, act += 4 + group)
		q4g_quantize_act_group(act, x + at,
				       n - at < group ? n - at : group, group);
}

unsigned char *q4g_act_alloc(const float *x, size_t n_rows, size_t cols,
			     uint32_t group)
{
	size_t row = q4g_act_row_bytes(cols, group), bytes;
	unsigned char *act;

	if (__builtin_mul_overflow(n_rows, row, &bytes) || !bytes)
		return NULL;
	act = malloc(bytes);
	for (size_t b = 0; act && b < n_rows; b++)
		q4g_quantize_act(act + b * row, x + b * cols, cols, group);
	return act;
}

/* ------------------------------------------------------------ matmul */

float q4g_row_dot(const unsigned char *w, const unsigned char *act,
		  const float *x, size_t n, uint32_t group)
{
	uint32_t half = group / 2;
	float acc[8] = { 0 };
	unsigned char one[4 + Q4G_GROUP_MAX];

	for (size_t at = 0; at < n; at += group, w += 4 + half) {
		const unsigned char *a = act ? act : one;
		const int8_t *q;
		int32_t L[8] = { 0 };
		float dw, da;

		if (act)
			act += 4 + group;
		else
			q4g_quantize_act_group(one, x + at,
					       n - at < group ? n - at : group,
					       group);
		memcpy(&dw, w, sizeof(dw));
		memcpy(&da, a, sizeof(da));
		q = (const int8_t *)(a + 4);
		for (uint32_t j = 0; j < half; j++) {
			unsigned b = w[4 + j];

			L[(j / 4) % 8] += q4g_code(b & 15) * q[j];
			L[((j + half) / 4) % 8] += q4g_code(b >> 4) * q[j + half];
		}
		for (int l = 0; l < 8; l++)
			acc[l] = fmaf((float)L[l], dw * da, acc[l]);
	}
	return ggml_hsum8(acc);
}

void q4g_matmul_portable(float *out, const float *x, size_t n_rows,
			 const struct tensor *w)
{
	size_t n_in = w->cols, n_out = w->rows;
	size_t row_bytes = q4g_matrix_bytes(1, n_in, w->group);
	size_t act_row = q4g_act_row_bytes(n_in, w->group);
	unsigned char *act = q4g_act_alloc(x, n_rows, n_in, w->group);
	const unsigned char *p = w->data;

	for (size_t o = 0; o < n_out; o++)
		for (size_t b = 0; b < n_rows; b++)
			out[b * n_out + o] = q4g_row_dot(
				p + o * row_bytes, act ? act + b * act_row : NULL,
				x + b * n_in, n_in, w->group);
	free(act);
}
