/*
 * gguf_types.h - the ggml tensor types a GGUF file may name, and the
 * block shape of the ones dynbatch reads (issue 25): how many elements
 * a block holds and how many bytes it takes.
 *
 * A tensor's row (its dimension 0) is a whole number of blocks, so its
 * byte size is (elements / block_elems) * block_bytes.  The ids are
 * ggml's and are file format: never renumber them.  A type that is not
 * in the table (Q2_K, Q3_K, Q8_K, the IQ types, ...) is unsupported,
 * and the reader refuses a tensor of it by name.
 */
#ifndef DYNBATCH_GGUF_TYPES_H
#define DYNBATCH_GGUF_TYPES_H

#include <stdbool.h>
#include <stdint.h>

/* ggml's type ids, as a tensor info stores them (u32). */
enum gguf_tensor_type {
	GGUF_TENSOR_F32 = 0,
	GGUF_TENSOR_F16 = 1,
	GGUF_TENSOR_Q4_0 = 2,
	GGUF_TENSOR_Q4_1 = 3,
	/* 4 and 5 were Q4_2 and Q4_3, gone from ggml */
	GGUF_TENSOR_Q5_0 = 6,
	GGUF_TENSOR_Q5_1 = 7,
	GGUF_TENSOR_Q8_0 = 8,
	GGUF_TENSOR_Q8_1 = 9,
	GGUF_TENSOR_Q2_K = 10,
	GGUF_TENSOR_Q3_K = 11,
	GGUF_TENSOR_Q4_K = 12,
	GGUF_TENSOR_Q5_K = 13,
	GGUF_TENSOR_Q6_K = 14,
	GGUF_TENSOR_Q8_K = 15,
	GGUF_TENSOR_BF16 = 30,
};

struct gguf_type_info {
	const char *name;	/* "f32", "q4_k", ... */
	uint32_t block_elems;	/* elements a block holds (1 for floats) */
	uint32_t block_bytes;	/* bytes a block takes */
};

/* The block shape of type, or NULL when dynbatch does not read it. */
const struct gguf_type_info *gguf_type_info(uint32_t type);

/*
 * *bytes = the size of n_elems elements of type.  False when the type
 * is not read, n_elems is not a whole number of blocks, or the size
 * overflows 64 bits.
 */
bool gguf_type_bytes(uint32_t type, uint64_t n_elems, uint64_t *bytes);

#endif /* DYNBATCH_GGUF_TYPES_H */
