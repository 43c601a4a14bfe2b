/*
 * llama_run.h - private to the llama model (llama_model.c, llama_forward.c,
 * llama_paged.c): its run state and the calls between its parts.  The
 * model's design is in llama_model.c's notes; nothing outside those files
 * includes this (the ABI is llama_model.h's table).
 */
#ifndef DYNBATCH_LLAMA_RUN_H
#define DYNBATCH_LLAMA_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dynbatch/model.h"
#include "model/llama_checkpoint.h"
#include "kernels/llama_kernels.h"
#include "kernels/tensor.h"

#define LLAMA_CHUNK 64		/* tokens per internal forward pass */
#define LLAMA_RMS_EPS 1e-5f
#define LLAMA_ROPE_THETA 10000.0f
#define LLAMA_ALIGN 64

/* One token of a chunk: where its K/V go and whether it makes logits. */
struct llama_chunk_token {
	uint32_t slot;
	uint32_t pos;
	int32_t token;
	int32_t out_row;	/* index into the step's logits, or -1 */
};

struct llama_model {
	struct llama_checkpoint ck;
	const struct llama_kernels *k;	/* the activations' kernels */
	/* each weight type's kernels, of the same kind as k: a tensor is
	 * multiplied through ops[its type], whatever file it came from */
	const struct tensor_ops *ops[DTYPE_COUNT];

	/* ---- run state, made by bind() */
	bool bound;
	uint32_t n_slots;
	uint32_t max_context;
	float *kv;		/* (slot, layer, K|V, position, kv_dim) */
	size_t kv_bytes;
	size_t slot_floats;	/* floats per slot, page-aligned */
	uint32_t *consumed;	/* (slot) tokens the cache holds */
	uint64_t *seen;		/* (slot) last step that named it */
	uint64_t step_id;
	float *rope_freq;	/* (head_size / 2) RoPE frequency per pair */
	float *rope;		/* (chunk, head_size / 2, cos|sin): the
				 * chunk's tokens' rotations, made per
				 * chunk: a table over every position would
				 * cost seq_len x head_size floats up front,
				 * and the header says what seq_len is */

	/* scratch for one chunk */
	struct llama_chunk_token *ct;	/* (LLAMA_CHUNK) */
	uint32_t n_ct;
	float *x;		/* (chunk, dim) residual stream */
	float *xb;		/* (chunk, dim) */
	float *xb2;		/* (chunk, dim) */
	float *q;		/* (chunk, dim) */
	float *kb;		/* (chunk, kv_dim) */
	float *vb;		/* (chunk, kv_dim) */
	float *hb;		/* (chunk, hidden_dim) */
	float *hb2;		/* (chunk, hidden_dim) */
	float *att;		/* (chunk, max_context) scores, then weights */
	size_t att_bytes;	/* its mapping's size */
	float *logits;		/* the step's output, during step() */
};

/* ---- llama_forward.c */

/* Run the forward pass over the chunk's m->n_ct tokens (K/V written,
 * logits of the tokens with an out_row) and empty the chunk. */
void llama_chunk_run(struct llama_model *m);

#endif /* DYNBATCH_LLAMA_RUN_H */
