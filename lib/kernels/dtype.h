/*
 * dtype.h - the element types of weight tensors, the tensor view, and
 * the shape of one type's kernels: the types alone, which a reader, a
 * kernel file and tensor.h's table all name (docs/DESIGN.md 2.3).
 */
#ifndef DYNBATCH_DTYPE_H
#define DYNBATCH_DTYPE_H

#include <stddef.h>
#include <stdint.h>

/*
 * The element types.  APPEND ONLY: a value never changes meaning, so
 * that a type recorded anywhere (a test's fixture, a future cache file)
 * stays right.  Next come Q4_0, Q4_K, Q6_K and the other GGUF types
 * (issue 25), each at the end, before DTYPE_COUNT.
 */
enum dtype {
	DTYPE_F32 = 0,		/* fp32, little-endian */
	DTYPE_Q8_0 = 1,		/* int8 values, one fp32 scale a group */
	DTYPE_COUNT
};

/* One layer of a tensor whose layers lie apart (tensor.layers). */
struct tensor_part {
	const void *data;
	size_t bytes;		/* the matrix, its scales included */
	enum dtype type;
};

/*
 * A weight tensor in place in the read-only mapping: n_layers matrices
 * of [rows][cols] back to back, or apart (layers below; n_layers 1 for
 * one not stacked over layers; a vector is one row).
 *
 * F32: rows * cols floats, 4-byte aligned.
 * Q8_0 (llama2.c export.py's version 2): rows * cols int8 values q, then
 * rows * cols / group fp32 scales s (maybe unaligned: read with memcpy),
 * one per run of group consecutive values of a row (group divides cols);
 * the weight is q * s.  Stacked, each layer is its values then its
 * scales.
 */
struct tensor {
	enum dtype type;
	const void *data;	/* layer 0's first byte */
	uint32_t n_layers;	/* matrices stacked, >= 1 */
	uint32_t rows;		/* per matrix */
	uint32_t cols;		/* per row */
	uint32_t group;		/* values per scale (quantized types), else 0 */
	size_t layer_bytes;	/* one matrix, its scales included */
	/* NULL: the layers are back to back from data, layer_bytes apart,
	 * all of type (llama2.c's files); else layer l is layers[l],
	 * anywhere in the mapping and of its own type (a GGUF file's blk.N
	 * tensors: a Q4_K_M file mixes Q4_K and Q6_K layers) */
	const struct tensor_part *layers;
};

/*
 * One type's kernels on one instruction set.  Both are batch invariant
 * (llama_kernels.h): an output element's arithmetic does not depend on
 * n_rows, the row's place among them or the tiling.
 */
struct tensor_ops {
	const char *name;	/* "f32/avx2", "q8_0/portable", ... */
	/*
	 * out[b][o] = sum over i of W[o][i] * x[b][i] for b < n_rows and
	 * o < w->rows, W one matrix (w->n_layers == 1, tensor_layer());
	 * x is [n_rows][w->cols], out [n_rows][w->rows], row-major, not
	 * overlapping.
	 */
	void (*matmul)(float *out, const float *x, size_t n_rows,
		       const struct tensor *w);
	/* out[i] = W[row][i] as fp32, for i < w->cols (row < w->rows). */
	void (*get_row)(float *out, const struct tensor *w, uint32_t row);
};

/* Matrix l of t as a tensor of one layer (no check: l < t->n_layers). */
static inline struct tensor tensor_layer(const struct tensor *t, uint32_t l)
{
	struct tensor m = *t;

	if (t->layers) {
		m.data = t->layers[l].data;
		m.layer_bytes = t->layers[l].bytes;
		m.type = t->layers[l].type;
	} else {
		m.data = (const unsigned char *)t->data + (size_t)l * t->layer_bytes;
	}
	m.layers = NULL;
	m.n_layers = 1;
	return m;
}

#endif /* DYNBATCH_DTYPE_H */
