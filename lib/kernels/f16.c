/*
 * f16.c - the F16 and BF16 types' portable kernels (f16.h): the row
 * lookup and the matmul, which converts each weight as it goes and sums
 * in the portable F32 kernel's order (llama_kernels.c's
 * llama_dot_portable()): 8 partial sums over i in steps of 8, the fixed
 * tree, then the tail in order.  No buffer: the portable kernels are the
 * fallback, and converting on the fly needs no memory of any size.
 */
#include "kernels/f16.h"
#include "kernels/fp16.h"

uint64_t f16_matrix_bytes(uint64_t rows, uint64_t cols, uint64_t group)
{
	uint64_t n;

	(void)group;
	if (__builtin_mul_overflow(rows, cols, &n) ||
	    __builtin_mul_overflow(n, 2, &n))
		return 0;
	return n;
}

/* Value i of the 16-bit row at p, as fp32 (bf: BF16, else F16). */
static inline float f16_value(int bf, const uint8_t *p, size_t i)
{
	uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);

	return bf ? bf16_to_fp32(h) : fp16_to_fp32(h);
}

void f16_get_row(float *out, const struct tensor *w, uint32_t row)
{
	const uint8_t *p = (const uint8_t *)w->data + (size_t)row * w->cols * 2;
	int bf = w->type == DTYPE_BF16;

	for (size_t i = 0; i < w->cols; i++)
		out[i] = f16_value(bf, p, i);
}

static float f16_dot_portable(int bf, const uint8_t *w, const float *x,
			      size_t n)
{
	float part[8] = { 0 };
	size_t i, n8 = n & ~(size_t)7;
	float s;

	for (i = 0; i < n8; i += 8)
		for (int l = 0; l < 8; l++)
			part[l] += f16_value(bf, w, i + l) * x[i + l];
	s = ((part[0] + part[4]) + (part[2] + part[6])) +
	    ((part[1] + part[5]) + (part[3] + part[7]));
	for (; i < n; i++)
		s += f16_value(bf, w, i) * x[i];
	return s;
}

void f16_matmul_portable(float *out, const float *x, size_t n_rows,
			 const struct tensor *w)
{
	const uint8_t *p = w->data;
	size_t n_in = w->cols, n_out = w->rows;
	int bf = w->type == DTYPE_BF16;

	for (size_t o = 0; o < n_out; o++)
		for (size_t b = 0; b < n_rows; b++)
			out[b * n_out + o] = f16_dot_portable(
				bf, p + o * n_in * 2, x + b * n_in, n_in);
}
