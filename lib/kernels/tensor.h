/*
 * tensor.h - the kernels of each weight type (dtype.h), behind one
 * table indexed by type (after llama.cpp's ggml_type and its
 * per-type traits): a checkpoint reader fills struct tensor, the forward
 * pass multiplies by one through tensor_ops_get(), and neither knows
 * which file format the weights came from (docs/DESIGN.md 2.3).
 *
 * A new element type is one kernel file, its AVX2 twin and one entry in
 * tensor.c's table; a new file format is one more reader filling the
 * same tensors.
 */
#ifndef DYNBATCH_TENSOR_H
#define DYNBATCH_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"
#include "kernels/llama_kernels.h"

/* "f32", "q8_0", "q4_k", ...; "?" for a value out of range. */
const char *dtype_name(enum dtype type);

/*
 * Bytes of one [rows][cols] matrix of type with that group (ignored for
 * F32); 0 when it overflows, when a quantized type has group 0 or when
 * type is unknown.
 */
uint64_t dtype_matrix_bytes(enum dtype type, uint64_t rows, uint64_t cols,
			    uint32_t group);

/*
 * The kernels of type on kind: NULL for a type out of range, or for
 * LLAMA_KERNEL_AVX2 where the CPU lacks AVX2+FMA.  Asked once, when a
 * model is made; the forward pass then calls through what it got.
 */
const struct tensor_ops *tensor_ops_get(enum dtype type,
					enum llama_kernel_kind kind);

#endif /* DYNBATCH_TENSOR_H */
