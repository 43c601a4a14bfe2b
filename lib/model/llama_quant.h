/*
 * llama_quant.h - quant=q4: a float llama2.c checkpoint's matrices
 * quantized at load into private memory (DTYPE_Q4G, kernels/q4g.h), the
 * checkpoint's tensors then pointing there.  Private to the llama model
 * (llama_model.c).
 */
#ifndef DYNBATCH_LLAMA_QUANT_H
#define DYNBATCH_LLAMA_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "model/llama_checkpoint.h"

/* What llama_quantize_q4() made: unmap with llama_quant_free(). */
struct llama_quant {
	void *mem;		/* anonymous private mapping, or NULL */
	size_t bytes;
};

/*
 * Quantize wq, wk, wv, wo, w1, w2, w3 and the classifier of ck (every
 * one F32, stacked back to back: a llama2.c legacy or ak42 version 1
 * file) to Q4G of group (Q4G_GROUP), in q's fresh mapping, and point
 * ck's tensors at it; the token embedding stays F32 in the file's
 * mapping.  The file's fp32 pages of those matrices are then dropped
 * from this process (madvise; they stay in the page cache, shared).
 * Returns 0, or -EINVAL (a checkpoint this cannot apply to) / -ENOMEM
 * after writing err naming quant=q4; ck is untouched on failure.
 */
int llama_quantize_q4(struct llama_checkpoint *ck, uint32_t group,
		      struct llama_quant *q, char *err, size_t err_len);

/* Undo llama_quantize_q4()'s mapping; accepts a zeroed struct. */
void llama_quant_free(struct llama_quant *q);

#endif /* DYNBATCH_LLAMA_QUANT_H */
