/*
 * llama_checkpoint.h - read and validate a llama2.c checkpoint, mapped
 * read-only so that every worker process shares one page-cache copy.
 *
 * Three layouts are read (all numbers little-endian; weights fp32 but
 * in "ak42" version 2, whose matrices are Q8_0):
 *
 *   legacy (llama2.c run.c): 7 int32 (dim, hidden_dim, n_layers, n_heads,
 *     n_kv_heads, vocab_size, seq_len), vocab_size < 0 meaning that a
 *     separate classifier follows at the end; then token_embedding,
 *     rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, the RoPE
 *     tables freq_cis_real and freq_cis_imag (seq_len x head_size / 2
 *     each; skipped; also accepted when absent, which the file size tells
 *     unambiguously), then wcls when separate.
 *
 *   "ak42" version 1 (llama2.c export.py): uint32 magic 0x616b3432,
 *     int32 version, the same 7 int32 (vocab_size positive), uint8
 *     shared_classifier, zeros up to byte 256; then all rms_att, all
 *     rms_ffn, rms_final, token_embedding, wq, wk, wv, wo, w1, w2, w3 (each
 *     stacked over layers), then wcls when not shared.
 *
 *   "ak42" version 2 (export.py's version2_export, what llama2.c's runq.c
 *     reads): the version 1 header with an int32 group_size after the
 *     shared_classifier byte (byte 37); then fp32 all rms_att, all
 *     rms_ffn, rms_final; then Q8_0 tensors (tensor.h) token_embedding,
 *     wq, wk, wv, wo, w1, w2, w3, wcls when not shared, each layer's
 *     matrix as its int8 values then its fp32 scales (per layer, not per
 *     stacked tensor).  group_size must divide dim and hidden_dim: every
 *     matrix row is dim or hidden_dim long, and runq.c quantizes the
 *     activations in those groups.
 *
 *   Other versions are refused.
 *
 * The file size must be exactly what the header implies: a checkpoint cut
 * short or with bytes trailing is refused, so no weight is ever read out
 * of bounds.
 */
#ifndef DYNBATCH_LLAMA_CHECKPOINT_H
#define DYNBATCH_LLAMA_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

#define LLAMA_AK42_MAGIC 0x616b3432u
#define LLAMA_GGUF_MAGIC 0x46554747u	/* "GGUF" read little-endian */
#define LLAMA_FORMAT_GGUF 3		/* format_version of a GGUF file */
#define LLAMA_AK42_HEADER_BYTES 256u
#define LLAMA_LEGACY_HEADER_BYTES 28u

/* The shapes, all > 0 and consistent once a checkpoint is parsed. */
struct llama_config {
	uint32_t dim;		/* residual stream width */
	uint32_t hidden_dim;	/* FFN width */
	uint32_t n_layers;
	uint32_t n_heads;	/* query heads */
	uint32_t n_kv_heads;	/* key/value heads; divides n_heads */
	uint32_t vocab;
	uint32_t seq_len;	/* longest prefix the model was built for */
	uint32_t head_size;	/* dim / n_heads, even */
	uint32_t kv_dim;	/* n_kv_heads * head_size */
	/* What llama2.c fixes and a GGUF file states (llama_config_check()
	 * sets llama2.c's values) */
	float rms_eps;		/* RMSNorm's epsilon: 1e-5 */
	float rope_theta;	/* RoPE's base: 10000 */
	uint32_t rope_dim;	/* leading dims of a head RoPE rotates:
				 * head_size; even, <= head_size */
	bool rope_half;		/* pairs (i, i + rope_dim / 2) of a head
				 * (GPT-NeoX's, qwen2's), not llama2.c's
				 * adjacent (2i, 2i + 1) */
};

/*
 * The weights, one set whatever the file's layout: tensors (tensor.h) in
 * place in the mapped file, each with its own type, so the forward pass
 * multiplies by a tensor through its type's kernels and never asks which
 * reader filled it.  Shapes in (...) as [layer][rows][cols]; the norms
 * are always F32, the matrices F32 or Q8_0 as the file has them.
 */
struct llama_weights {
	struct tensor token_embedding;	/* (vocab, dim) */
	struct tensor rms_att;		/* (layer, 1, dim) F32 */
	struct tensor wq;		/* (layer, dim, dim) */
	struct tensor wk;		/* (layer, kv_dim, dim) */
	struct tensor wv;		/* (layer, kv_dim, dim) */
	struct tensor wo;		/* (layer, dim, dim) */
	struct tensor rms_ffn;		/* (layer, 1, dim) F32 */
	struct tensor w1;		/* (layer, hidden_dim, dim) */
	struct tensor w2;		/* (layer, dim, hidden_dim) */
	struct tensor w3;		/* (layer, hidden_dim, dim) */
	struct tensor rms_final;	/* (1, dim) F32 */
	struct tensor wcls;		/* (vocab, dim); token_embedding if shared */
	/* qwen2's biases of the Q, K and V projections, F32 (layer, 1,
	 * dim or kv_dim); data NULL when the model has none */
	struct tensor bq, bk, bv;
};

struct llama_checkpoint {
	struct llama_config cfg;
	struct llama_weights w;
	bool shared_classifier;
	int format_version;	/* 0: legacy, 1 or 2: ak42 version, 3: GGUF; for
				 * messages and tests, never the forward */
	void *map;		/* what llama_checkpoint_open() mapped, or NULL */
	size_t map_len;
	void *reader_mem;	/* what the reader allocated (a GGUF file's
				 * per-layer pointers), freed at close */
};

/*
 * Parse the checkpoint held in data[0..size) (name is for messages only).
 * The weights point into data, which must stay valid and 4-byte aligned.
 * Returns 0, or -EINVAL after writing a one-line reason into err.
 */
int llama_checkpoint_parse(struct llama_checkpoint *ck, const void *data,
			   size_t size, const char *name, char *err,
			   size_t err_len);

/*
 * Map the file at path read-only and parse it.  Returns 0, or a negative
 * errno after writing err (nothing stays open).  Undo with
 * llama_checkpoint_close().
 */
int llama_checkpoint_open(struct llama_checkpoint *ck, const char *path,
			  char *err, size_t err_len);

/* Unmap what llama_checkpoint_open() mapped; accepts a zeroed struct. */
void llama_checkpoint_close(struct llama_checkpoint *ck);

#endif /* DYNBATCH_LLAMA_CHECKPOINT_H */
