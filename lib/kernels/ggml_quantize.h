/*
 * ggml_quantize.h - fp32 rows to ggml's block types (dtype.h): simple
 * round-to-nearest reference quantizers, for a GGUF writer and for
 * quantizing a float checkpoint at load.  They do not search scales as
 * llama.cpp's do (their error is larger, never unbounded), and their
 * bytes need not equal llama.cpp's; any reader of the format reads them.
 *
 * The promise (test_ggml_quants.c checks it): each value comes back from
 * the dequantization within half a step of its block, or for Q4_0 and
 * Q5_0 (whose levels are not symmetric) one step, plus fp32 rounding
 * (2^-20 of |x| and of the block's offset).  A step is the block's
 * d (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) or the sub-block's d * sc (K types).
 * Scales are rounded to halves AWAY from the data's range, and the K
 * types' sub-block scales and mins rounded up, so no value is clamped:
 * that is what keeps the error within the step.  It holds for values of
 * magnitude up to 65504, the largest half (Q4_1/Q5_1 store the minimum
 * itself as one); beyond, or for inf and nan, the blocks are still
 * well-formed but the values saturate.
 */
#ifndef DYNBATCH_GGML_QUANTIZE_H
#define DYNBATCH_GGML_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

/*
 * The n values at x (n a multiple of the type's block size, 32
 * or 256) as blocks of type (a DTYPE_GGML_* type) at dst, which has room
 * for ggml_quantize_bytes(type, n).  Returns the bytes written, or 0
 * (nothing written) for another type or an n that is not a multiple.
 */
size_t ggml_quantize_row(enum dtype type, uint8_t *dst, const float *x,
			 size_t n);

/* Bytes of n values of a block type; 0 as ggml_quantize_row() refuses. */
size_t ggml_quantize_bytes(enum dtype type, size_t n);

#endif /* DYNBATCH_GGML_QUANTIZE_H */
