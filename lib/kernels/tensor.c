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
 * are right everywhere.
 */
#include "kernels/tensor.h"
#include "kernels/f32.h"
#include "kernels/q8_0.h"

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
	return d->avx2 ? d->avx2 : d->portable;
}
