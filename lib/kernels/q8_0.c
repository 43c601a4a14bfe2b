/*
 * q8_0.c - the Q8_0 type's portable kernels: the matmul and the
 * dequantisation of one row (the token embedding's lookup); its AVX2
 * twin is q8_0_avx2.c, and tensor.h says the layout.
 *
 * NOTES ON THE DESIGN
 *
 * The weights stay int8 in the shared read-only mapping: a quarter of the
 * fp32 bytes to stream per token, which is what bounds small batches.
 * Nothing is dequantized ahead of time except, per looked-up token, one
 * embedding row.
 *
 * Scales are read with memcpy (q8_0_scale()): in export.py's layout a
 * tensor's scales follow its rows * cols int8 values, so they are 4-byte
 * aligned only when rows * cols is a multiple of 4, which a legal file
 * need not be.
 *
 * Batch invariance: per group, one float partial sum over i in order;
 * the total adds scale * partial group after group, whatever the rows.
 */
#include "kernels/q8_0.h"

uint64_t q8_0_matrix_bytes(uint64_t rows, uint64_t cols, uint64_t group)
{
	uint64_t n, scales;

	if (!group || __builtin_mul_overflow(rows, cols, &n) ||
	    __builtin_mul_overflow(n / group, 4, &scales) ||
	    __builtin_add_overflow(n, scales, &n))
		return 0;
	return n;
}

void q8_0_get_row(float *out, const struct tensor *w, uint32_t row)
{
	struct q8_0_matrix m = q8_0_view(w);
	size_t n_groups = m.cols / m.group;
	const int8_t *q = m.q + (size_t)row * m.cols;

	for (size_t g = 0; g < n_groups; g++) {
		float s = q8_0_scale(m.s, (size_t)row * n_groups + g);

		for (size_t i = g * m.group; i < (g + 1) * m.group; i++)
			out[i] = (float)q[i] * s;
	}
}

static float q8_0_dot_portable(const int8_t *q, const unsigned char *s,
			       size_t first_group, const float *x,
			       size_t n_in, size_t group)
{
	float total = 0;

	for (size_t g = 0; g < n_in / group; g++) {
		float part = 0;

		for (size_t i = g * group; i < (g + 1) * group; i++)
			part += (float)q[i] * x[i];
		total += q8_0_scale(s, first_group + g) * part;
	}
	return total;
}

void q8_0_matmul_matrix_portable(float *out, const float *x, size_t n_rows,
				 const struct q8_0_matrix *m)
{
	size_t n_in = m->cols, n_out = m->rows, n_groups = n_in / m->group;

	for (size_t o = 0; o < n_out; o++)
		for (size_t b = 0; b < n_rows; b++)
			out[b * n_out + o] = q8_0_dot_portable(
				m->q + o * n_in, m->s, o * n_groups,
				x + b * n_in, n_in, m->group);
}

void q8_0_matmul_portable(float *out, const float *x, size_t n_rows,
			  const struct tensor *w)
{
	struct q8_0_matrix m = q8_0_view(w);

	q8_0_matmul_matrix_portable(out, x, n_rows, &m);
}
