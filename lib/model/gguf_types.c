/*
 * gguf_types.c - the block shapes of the ggml tensor types dynbatch reads
 * (gguf_types.h).
 *
 * Checked against ggml's own definitions (ggml-common.h's block structs
 * and gguf-py's GGML_QUANT_SIZES): each size below is the sum of its
 * block's fields, spelled out so a reader can check it again.
 */
#include "model/gguf_types.h"

#include <stddef.h>

#define QK_K 256	/* elements of a K-quant super-block */

static const struct gguf_type_info gguf_types[] = {
	[GGUF_TENSOR_F32] = { "f32", 1, 4 },
	[GGUF_TENSOR_F16] = { "f16", 1, 2 },
	/* fp16 scale, 32 nibbles */
	[GGUF_TENSOR_Q4_0] = { "q4_0", 32, 2 + 16 },
	/* fp16 scale and min, 32 nibbles */
	[GGUF_TENSOR_Q4_1] = { "q4_1", 32, 2 + 2 + 16 },
	/* fp16 scale, 32 fifth bits, 32 nibbles */
	[GGUF_TENSOR_Q5_0] = { "q5_0", 32, 2 + 4 + 16 },
	/* fp16 scale and min, 32 fifth bits, 32 nibbles */
	[GGUF_TENSOR_Q5_1] = { "q5_1", 32, 2 + 2 + 4 + 16 },
	/* fp16 scale, 32 int8 */
	[GGUF_TENSOR_Q8_0] = { "q8_0", 32, 2 + 32 },
	/* fp16 d and dmin, 12 bytes of 6-bit scales/mins, 256 nibbles */
	[GGUF_TENSOR_Q4_K] = { "q4_k", QK_K, 2 + 2 + 12 + QK_K / 2 },
	/* as Q4_K plus 256 fifth bits */
	[GGUF_TENSOR_Q5_K] = { "q5_k", QK_K, 2 + 2 + 12 + QK_K / 8 + QK_K / 2 },
	/* 256 low nibbles, 256 2-bit highs, 16 int8 scales, fp16 d */
	[GGUF_TENSOR_Q6_K] = { "q6_k", QK_K, QK_K / 2 + QK_K / 4 + QK_K / 16 + 2 },
	[GGUF_TENSOR_BF16] = { "bf16", 1, 2 },
};

const struct gguf_type_info *gguf_type_info(uint32_t type)
{
	if (type >= sizeof(gguf_types) / sizeof(gguf_types[0]) ||
	    gguf_types[type].name == NULL)
		return NULL;
	return &gguf_types[type];
}

bool gguf_type_bytes(uint32_t type, uint64_t n_elems, uint64_t *bytes)
{
	const struct gguf_type_info *t = gguf_type_info(type);
	uint64_t blocks;

	if (!t || n_elems % t->block_elems)
		return false;
	blocks = n_elems / t->block_elems;
	if (blocks > UINT64_MAX / t->block_bytes)
		return false;
	*bytes = blocks * t->block_bytes;
	return true;
}
