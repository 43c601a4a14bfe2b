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
 * stays right.  A new type goes at the end, before DTYPE_COUNT.
 */
enum dtype {
	DTYPE_F32 = 0,		/* fp32, little-endian */
	DTYPE_Q8_0 = 1,		/* int8 values, one fp32 scale a group */
	DTYPE_F16 = 2,		/* IEEE binary16, little-endian */
	DTYPE_BF16 = 3,		/* the top 16 bits of an fp32, little-endian */
	DTYPE_GGML_Q8_0 = 4,	/* ggml's blocks, below */
	DTYPE_GGML_Q4_0 = 5,
	DTYPE_GGML_Q4_1 = 6,
	DTYPE_GGML_Q5_0 = 7,
	DTYPE_GGML_Q5_1 = 8,
	DTYPE_GGML_Q4_K = 9,
	DTYPE_GGML_Q5_K = 10,
	DTYPE_GGML_Q6_K = 11,
	DTYPE_Q4G = 12,		/* 4-bit codes, one fp32 scale a group;
				 * made at load (quant=q4), never in a file */
	DTYPE_COUNT
};

/* One layer of a tensor whose layers lie apart (tensor.layers). */
struct tensor_part {
	const void *data;
	size_t bytes;		/* the matrix, its scales included */
	enum dtype type;
};

/*
 * THE GGML BLOCK TYPES (GGUF files; lib/kernels/ggml_quants.h has the
 * sizes).  A matrix is its rows one after another, a row cols / QK
 * blocks, QK 32 for the first five and 256 for the K types (cols must
 * be a multiple of QK).  Every multi-byte field is little-endian and
 * read byte by byte: a block may sit at any address.  "half" is an IEEE
 * binary16 (subnormals, inf and nan included: fp16.h).  Offsets in
 * bytes; element i of a block is the i-th value of its run of the row.
 *
 * Q8_0 (34 bytes): half d @0, int8 q[32] @2.  x[i] = d * q[i].
 * Q4_0 (18): half d @0, qs[16] @2.  Byte j holds two elements: its low
 *	nibble is element j, its high nibble element j + 16 (NOT 2j, 2j+1).
 *	x[i] = d * (nibble - 8).
 * Q4_1 (20): half d @0, half m @2, qs[16] @4, nibbles as Q4_0.
 *	x[i] = d * nibble + m (a product then a sum: two roundings).
 * Q5_0 (22): half d @0, qh[4] @2, qs[16] @6.  qh is one 32-bit
 *	little-endian word whose bit i is the fifth (value 16) bit of
 *	element i; the low four bits are the nibbles as in Q4_0.
 *	x[i] = d * (q - 16), q = nibble | bit << 4 in 0..31.
 * Q5_1 (24): half d @0, half m @2, qh[4] @4, qs[16] @8, bits as Q5_0.
 *	x[i] = d * q + m.
 *
 * The K types split 256 elements into 8 sub-blocks of 32 (Q6_K: 16 of
 * 16), each with its own small integer scale under the block's half d.
 *
 * Q4_K (144): half d @0, half dmin @2, scales[12] @4, qs[128] @16.
 *	The 12 bytes hold eight 6-bit scales sc[j] and eight 6-bit mins
 *	mn[j] for sub-blocks j = 0..7: for j < 4, sc[j] is the low 6 bits
 *	of byte j and mn[j] the low 6 bits of byte j + 4; for j >= 4,
 *	sc[j] is the low nibble of byte j + 4 with the top two bits of
 *	byte j - 4 above it (bits 4, 5), and mn[j] the high nibble of byte
 *	j + 4 with the top two bits of byte j above it.  The quants go in
 *	4 chunks of 32 bytes, chunk c for sub-blocks 2c (the low nibbles:
 *	byte k is element 64c + k) and 2c + 1 (the high nibbles: element
 *	64c + 32 + k).  x = (d * sc[j]) * q - (dmin * mn[j]), each
 *	product rounded to fp32 as written, then the difference.
 * Q5_K (176): half d @0, half dmin @2, scales[12] @4, qh[32] @16,
 *	qs[128] @48.  Scales, mins and nibbles as Q4_K; the fifth bit of
 *	element 32j + k (sub-block j, 0 <= k < 32) is bit j of qh[k].
 *	x = (d * sc[j]) * (nibble + 16 * bit) - (dmin * mn[j]).
 * Q6_K (210): ql[128] @0, qh[64] @128, int8 scales[16] @192, half d
 *	@208.  The 256 elements go in two halves of 128; in half h,
 *	element 128h + 32s + k (s = 0..3, k < 32) takes its low 4 bits
 *	from ql[64h + k + 32 * (s & 1)] (the low nibble for s < 2, the
 *	high one for s >= 2) and its top 2 bits from bits 2s, 2s+1 of
 *	qh[32h + k].  q is those 6 bits minus 32 (-32..31); element e
 *	has the scale scales[e / 16].  x = (d * scales[e / 16]) * q.
 */

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
 * F16, BF16: rows * cols 16-bit values, 2-byte aligned.
 * GGML_*: rows of blocks as above (group unused, 0).
 * Q4G (group G = 32, 64, 128 or 256; quant=q4 makes G = 32): each row
 * is ceil(cols / G) groups back to back, cols any number (odd too): the
 * last group may be partial.  A group is 4 + G / 2 bytes: its scale d,
 * an fp32 in host order (little-endian; read with memcpy: a group of
 * any G starts 4-byte aligned only if the row does) @0, then G / 2
 * bytes of codes @4, byte j holding element j of the group in its low
 * nibble and element j + G / 2 in its high nibble (so that 32 bytes
 * widen to two runs of 32 consecutive elements).  A code is a 4-bit
 * two's complement q in -8..7 and the weight is d * q.  The quantizer
 * makes d = max |x| / 7 and q = round(x / d) in -7..7; the codes of the
 * elements past the row's end in a partial group are 0.  Made in
 * private memory at load from an F32 tensor (model/llama_quant.c);
 * stacked, each layer is its rows, layer_bytes apart.
 */
struct tensor {
	enum dtype type;
	const void *data;	/* layer 0's first byte */
	uint32_t n_layers;	/* matrices stacked, >= 1 */
	uint32_t rows;		/* per matrix */
	uint32_t cols;		/* per row */
	uint32_t group;		/* values per scale (DTYPE_Q8_0, DTYPE_Q4G),
				 * else 0 */
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
