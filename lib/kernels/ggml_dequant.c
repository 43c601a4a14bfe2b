/*
 * ggml_dequant.c - ggml's block types (dtype.h) to fp32: their sizes,
 * the dequantization of a row, and the row lookup (get_row) the token
 * embedding uses.  Bit for bit what dtype.h's formulas give: the block's
 * integers come from ggml_unpack.h, and each product and sum is written
 * as the formula writes it (the build's -ffp-contract=off keeps the
 * compiler from fusing any of them).
 */
#include "kernels/ggml_quants.h"
#include "kernels/ggml_unpack.h"

static const struct {
	unsigned values, bytes;
} ggml_blocks[] = {
	[DTYPE_GGML_Q8_0 - DTYPE_GGML_Q8_0] = { 32, 34 },
	[DTYPE_GGML_Q4_0 - DTYPE_GGML_Q8_0] = { 32, 18 },
	[DTYPE_GGML_Q4_1 - DTYPE_GGML_Q8_0] = { 32, 20 },
	[DTYPE_GGML_Q5_0 - DTYPE_GGML_Q8_0] = { 32, 22 },
	[DTYPE_GGML_Q5_1 - DTYPE_GGML_Q8_0] = { 32, 24 },
	[DTYPE_GGML_Q4_K - DTYPE_GGML_Q8_0] = { 256, 144 },
	[DTYPE_GGML_Q5_K - DTYPE_GGML_Q8_0] = { 256, 176 },
	[DTYPE_GGML_Q6_K - DTYPE_GGML_Q8_0] = { 256, 210 },
};

_Static_assert(sizeof(ggml_blocks) / sizeof(ggml_blocks[0]) ==
		       DTYPE_GGML_Q6_K - DTYPE_GGML_Q8_0 + 1,
	       "one entry per ggml block type");

unsigned ggml_block_values(enum dtype type)
{
	return ggml_blocks[type - DTYPE_GGML_Q8_0].values;
}

unsigned ggml_block_bytes(enum dtype type)
{
	return ggml_blocks[type - DTYPE_GGML_Q8_0].bytes;
}

uint64_t ggml_row_bytes(enum dtype type, uint64_t cols)
{
	uint64_t n;

	if (cols % ggml_block_values(type) ||
	    __builtin_mul_overflow(cols / ggml_block_values(type),
				   ggml_block_bytes(type), &n))
		return 0;
	return n;
}

static void dequant32(float *out, enum dtype type, const uint8_t *b)
{
	struct ggml_unpacked32 u;

	ggml_unpack32(&u, type, b);
	for (int i = 0; i < 32; i++)
		out[i] = u.has_min ? u.d * (float)u.v[i] + u.m :
				     u.d * (float)u.v[i];
}

static void dequant256(float *out, enum dtype type, const uint8_t *b)
{
	struct ggml_unpacked256 u;

	ggml_unpack256(&u, type, b);
	for (int e = 0; e < 256; e++) {
		int j = e / u.n_sub;
		float ds = u.d * (float)u.sc[j];

		out[e] = u.has_min ? ds * (float)u.v[e] - u.dmin * (float)u.mn[j] :
				     ds * (float)u.v[e];
	}
}

void ggml_dequant_row(enum dtype type, float *out, const uint8_t *src,
		      size_t n)
{
	unsigned qk = ggml_block_values(type), bytes = ggml_block_bytes(type);

	for (size_t i = 0; i < n / qk; i++) {
		if (qk == 32)
			dequant32(out + i * qk, type, src + i * bytes);
		else
			dequant256(out + i * qk, type, src + i * bytes);
	}
}

void ggml_get_row(float *out, const struct tensor *w, uint32_t row)
{
	const uint8_t *p = w->data;

	ggml_dequant_row(w->type, out,
			 p + (size_t)row * ggml_row_bytes(w->type, w->cols),
			 w->cols);
}
