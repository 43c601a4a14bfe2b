/*
 * tensor.c - the table of element types (tensor.h): for each, its name,
 * its matrix size and its kernels on each instruction set.
 *
 * NOTES ON THE DESIGN
 *
 * The table is indexed by enum dtype, so asking for a type's kernels is
 * one bounds check and one load; the forward pass asks once, when the
 * model is made, and a matmul then costs one indirect call whatever the
 * type.
 * An instruction set's entry is NULL where it has no kernels of its own
 * (none today); tensor_ops_get() then gives the portable ones, which
 * are right everywhere.  F16's AVX2 kernels need F16C as well: without
 * it (no AVX2 CPU known lacks it) F16 falls back to the portable ones.
 */
#include "kernels/tensor.h"
#include "kernels/f32.h"
#include "kernels/q8_0.h"
#include "kernels/f16.h"
#include "kernels/ggml_quants.h"
#include "kernels/q4g.h"

struct dtype_info {
	const char *name;
	/* bytes of one [rows][cols] matrix, 0 on overflow or a bad group */
	uint64_t (*matrix_bytes)(uint64_t rows, uint64_t cols, uint64_t group);
	const struct tensor_ops *portable;
	const struct tensor_ops *avx2;	/* NULL off x86 */
};

static uint64_t f32_matrix_bytes(uint64_t rows, uint64_t cols, uint64_t group)
{
	uint64_t n;

	(void)group;
	if (__builtin_mul_overflow(rows, cols, &n) ||
	    __builtin_mul_overflow(n, 4, &n))
		return 0;
	return n;
}

static const struct tensor_ops f32_portable = {
	.name = "f32/portable",
	.matmul = f32_matmul_portable,
	.get_row = f32_get_row,
};

static const struct tensor_ops q8_0_portable = {
	.name = "q8_0/portable",
	.matmul = q8_0_matmul_portable,
	.get_row = q8_0_get_row,
};

static const struct tensor_ops q4g_portable = {
	.name = "q4g/portable",
	.matmul = q4g_matmul_portable,
	.get_row = q4g_get_row,
};

static uint64_t ggml_matrix_bytes(enum dtype type, uint64_t rows,
				  uint64_t cols)
{
	uint64_t row = ggml_row_bytes(type, cols), n;

	if (!row || __builtin_mul_overflow(rows, row, &n))
		return 0;
	return n;
}

/* One matrix_bytes per block type, as the table's entries take no type. */
#define GGML_BYTES(lower, TYPE)                                              \
	static uint64_t lower##_matrix_bytes(uint64_t rows, uint64_t cols,   \
					     uint64_t group)                 \
	{                                                                    \
		(void)group;                                                 \
		return ggml_matrix_bytes(TYPE, rows, cols);                  \
	}
GGML_BYTES(ggml_q8_0, DTYPE_GGML_Q8_0)
GGML_BYTES(q4_0, DTYPE_GGML_Q4_0)
GGML_BYTES(q4_1, DTYPE_GGML_Q4_1)
GGML_BYTES(q5_0, DTYPE_GGML_Q5_0)
GGML_BYTES(q5_1, DTYPE_GGML_Q5_1)
GGML_BYTES(q4_k, DTYPE_GGML_Q4_K)
GGML_BYTES(q5_k, DTYPE_GGML_Q5_K)
GGML_BYTES(q6_k, DTYPE_GGML_Q6_K)

/* The portable (and, on x86, AVX2) kernels of a 16-bit or block type. */
#define OPS_PORTABLE(lower, matmul_fn, row_fn)                               \
	static const struct tensor_ops lower##_portable = {                  \
		.name = #lower "/portable", .matmul = matmul_fn##_portable,  \
		.get_row = row_fn,                                           \
	};
#define OPS_AVX2(lower, matmul_fn, row_fn)                                   \
	static const struct tensor_ops lower##_avx2 = {                      \
		.name = #lower "/avx2", .matmul = matmul_fn##_avx2,          \
		.get_row = row_fn,                                           \
	};
#define OPS_GGML(lower, OPS) \
	OPS(lower, ggml_matmul, ggml_get_row)
#define OPS_ALL(OPS)                                                         \
	OPS(f16, f16_matmul, f16_get_row) OPS(bf16, f16_matmul, f16_get_row)  \
	OPS_GGML(ggml_q8_0, OPS) OPS_GGML(q4_0, OPS) OPS_GGML(q4_1, OPS)          \
	OPS_GGML(q5_0, OPS) OPS_GGML(q5_1, OPS) OPS_GGML(q4_k, OPS)           \
	OPS_GGML(q5_k, OPS) OPS_GGML(q6_k, OPS)
OPS_ALL(OPS_PORTABLE)

#if defined(__x86_64__) || defined(__i386__)
static const struct tensor_ops f32_avx2 = {
	.name = "f32/avx2",
	.matmul = f32_matmul_avx2,
	.get_row = f32_get_row,		/* a copy: nothing to vectorise */
};

static const struct tensor_ops q8_0_avx2 = {
	.name = "q8_0/avx2",
	.matmul = q8_0_matmul_avx2,
	.get_row = q8_0_get_row,	/* once per token: not worth a twin */
};
OPS_ALL(OPS_AVX2)

static const struct tensor_ops q4g_avx2 = {
	.name = "q4g/avx2",
	.matmul = q4g_matmul_avx2,
	.get_row = q4g_get_row,		/* the classifier's lookup only */
};
#define DTYPE_AVX2(ops) (ops)
#else
#define DTYPE_AVX2(ops) NULL
#endif

/* Indexed by enum dtype: a new type appends its line. */
static const struct dtype_info dtype_table[DTYPE_COUNT] = {
	[DTYPE_F32] = { "f32", f32_matrix_bytes, &f32_portable,
			DTYPE_AVX2(&f32_avx2) },
	[DTYPE_Q8_0] = { "q8_0", q8_0_matrix_bytes, &q8_0_portable,
			 DTYPE_AVX2(&q8_0_avx2) },
	[DTYPE_F16] = { "f16", f16_matrix_bytes, &f16_portable,
			DTYPE_AVX2(&f16_avx2) },
	[DTYPE_BF16] = { "bf16", f16_matrix_bytes, &bf16_portable,
			 DTYPE_AVX2(&bf16_avx2) },
	[DTYPE_GGML_Q8_0] = { "ggml_q8_0", ggml_q8_0_matrix_bytes, &ggml_q8_0_portable,
			      DTYPE_AVX2(&ggml_q8_0_avx2) },
	[DTYPE_GGML_Q4_0] = { "q4_0", q4_0_matrix_bytes, &q4_0_portable,
			      DTYPE_AVX2(&q4_0_avx2) },
	[DTYPE_GGML_Q4_1] = { "q4_1", q4_1_matrix_bytes, &q4_1_portable,
			      DTYPE_AVX2(&q4_1_avx2) },
	[DTYPE_GGML_Q5_0] = { "q5_0", q5_0_matrix_bytes, &q5_0_portable,
			      DTYPE_AVX2(&q5_0_avx2) },
	[DTYPE_GGML_Q5_1] = { "q5_1", q5_1_matrix_bytes, &q5_1_portable,
			      DTYPE_AVX2(&q5_1_avx2) },
	[DTYPE_GGML_Q4_K] = { "q4_k", q4_k_matrix_bytes, &q4_k_portable,
			      DTYPE_AVX2(&q4_k_avx2) },
	[DTYPE_GGML_Q5_K] = { "q5_k", q5_k_matrix_bytes, &q5_k_portable,
			      DTYPE_AVX2(&q5_k_avx2) },
	[DTYPE_GGML_Q6_K] = { "q6_k", q6_k_matrix_bytes, &q6_k_portable,
			      DTYPE_AVX2(&q6_k_avx2) },
	[DTYPE_Q4G] = { "q4g", q4g_matrix_bytes, &q4g_portable,
			DTYPE_AVX2(&q4g_avx2) },
};

const char *dtype_name(enum dtype type)
{
	return (unsigned)type < DTYPE_COUNT ? dtype_table[type].name : "?";
}

uint64_t dtype_matrix_bytes(enum dtype type, uint64_t rows, uint64_t cols,
			    uint32_t group)
{
	if ((unsigned)type >= DTYPE_COUNT)
		return 0;
	return dtype_table[type].matrix_bytes(rows, cols, group);
}

const struct tensor_ops *tensor_ops_get(enum dtype type,
					enum llama_kernel_kind kind)
{
	const struct dtype_info *d;

	if ((unsigned)type >= DTYPE_COUNT)
		return NULL;
	d = &dtype_table[type];
	if (kind != LLAMA_KERNEL_AVX2)
		return d->portable;
	if (!llama_kernels_have_avx2())
		return NULL;
#if defined(__x86_64__) || defined(__i386__)
	if (type == DTYPE_F16 && !f16_have_f16c())
		return d->portable;
#endif
	return d->avx2 ? d->avx2 : d->portable;
}
