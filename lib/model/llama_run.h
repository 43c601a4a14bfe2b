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
#include "model/llama_quant.h"
#include "kernels/llama_kernels.h"
#include "kernels/tensor.h"

#define LLAMA_CHUNK 64		/* tokens per internal forward pass */
#define LLAMA_MAX_OUTPUTS 16u	/* output rows per row of a step (model.h
				 * version 5: a speculated row's drafts) */
#define LLAMA_ALIGN 64
/* attention=split: keys cut at absolute positions, multiples of this
 * (a constant, so that results depend on no block size or layout) */
#define LLAMA_SPLIT_POS 64

/* One token of a chunk: where its K/V go and whether it makes logits. */
struct llama_chunk_token {
	uint32_t slot;		/* bind(): whose cache (paged: informational) */
	const uint32_t *blocks;	/* bind_paged(): the row's block table,
				 * checked by step_paged(); NULL after bind() */
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
	/* attention=split (llama_split.c) instead of one softmax a token;
	 * cascade: rows sharing a chunk's blocks compute it together */
	bool split;
	bool cascade;
	/* quant=q4: the matrices' Q4G copy, which ck's tensors point into
	 * (llama_quant.h); mem NULL without it */
	bool quant_q4;
	struct llama_quant quant;
	/* query width, n_heads x head_size: dim, or a rank's share */
	uint32_t q_dim;
	/* tensor parallel (llama_tp.c): rank tp_rank of tp_ranks (0: not
	 * split) holds slices in tp_mem (ck's wq..w2 point there, ck.cfg's
	 * heads, kv_dim and hidden_dim are its share); tp_sum(tp_ctx, ..)
	 * sums a partial over the group; tp_failed its first error in a
	 * step */
	uint32_t tp_rank;
	uint32_t tp_ranks;
	int (*tp_sum)(void *ctx, float *v, uint64_t n);
	void *tp_ctx;
	int tp_failed;
	float *tp_mem;
	/* split: ck.w.wcls is rows [tp_vocab0, + its rows) of the
	 * classifier; tp_logits (chunk, those rows) its output */
	uint32_t tp_vocab0;
	float *tp_logits;

	/* ---- run state, made by bind() or bind_paged() */
	bool bound;
	bool paged;		/* bind_paged(): K/V in the engine's pool */
	uint32_t n_slots;
	uint32_t max_context;
	float *kv;		/* (slot, layer, K|V, position, kv_dim) */
	size_t kv_bytes;
	size_t slot_floats;	/* floats per slot, page-aligned */
	uint32_t *consumed;	/* (slot) tokens the cache holds */
	uint64_t *seen;		/* (slot) last step that named it */
	uint64_t step_id;
	/* ---- paged mode (bind_paged()); kv, consumed and seen stay NULL */
	float *pool;		/* the engine's mapping: never ours to unmap */
	uint32_t n_blocks;
	uint32_t block_tokens;
	uint32_t max_rows;
	size_t block_floats;	/* block_tokens x llama_kv_floats_per_token() */
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
	/* attention=split: a chunk's scores, then exps (LLAMA_SPLIT_POS);
	 * its value sum (head_size); each token's and head's running max
	 * and sum (chunk, n_heads) */
	float *split_att;
	float *split_acc;
	float *split_max;
	float *split_sum;
};

/* ---- llama_model.c */

/* posix_memalign'd zeroed floats (at least one), or NULL. */
float *llama_alloc_floats(size_t n);

/* The chunk scratch for m->max_context (bind() and bind_paged()). */
int llama_bind_scratch(struct llama_model *m);

/* Drop the run state (either mode); m is unbound after. */
void llama_unbind(struct llama_model *m);

/*
 * Queue row r's tokens [n_cached, n_cached + n_consume) into the chunk,
 * running the chunk whenever it fills; blocks: the row's block table
 * (paged) or NULL.  A refused row (refusal set) queues nothing, and its
 * logits, if it wants some, are zeros.  *out_row: the row's logits slot,
 * moved past it when it wants output.
 */
bool llama_outputs_ok(const struct dynbatch_model_row *r);
void llama_queue_row(struct llama_model *m, const struct dynbatch_model_row *r,
		     const uint32_t *blocks, uint32_t refusal, int32_t *out_row);

/* ---- llama_paged.c (ABI version 4) */

uint64_t llama_kv_bytes_per_token(void *model);
int llama_bind_paged(void *model, void *pool, uint32_t n_blocks,
		     uint32_t block_tokens, uint32_t max_context,
		     uint32_t max_rows, char *err, size_t err_len);
int llama_step_paged(void *model, uint32_t n_rows,
		     const struct dynbatch_paged_row *rows, float *logits,
		     uint32_t *refusals);

/* K (which 0) or V (which 1) of layer at position pos of the row whose
 * block table is blocks (checked to cover pos), kv_dim floats. */
float *llama_paged_kv(const struct llama_model *m, const uint32_t *blocks,
		      uint32_t pos, uint32_t layer, int which);

/* Attention of query head h for the chunk's n tokens over their rows'
 * blocks, into out (chunk, dim): llama_forward.c's head, span by span. */
void llama_paged_attention_head(struct llama_model *m, uint32_t layer,
				uint32_t n, uint32_t h, float *out);

/* ---- llama_split.c (attention=split) */

/* Attention of every query head for the chunk's n tokens, into out
 * (chunk, dim): per token and head, chunks of LLAMA_SPLIT_POS keys merged
 * by log-sum-exp; bind() or bind_paged(), cascade when m->cascade. */
void llama_split_attention(struct llama_model *m, uint32_t layer, uint32_t n,
			   float *out);

/* ---- llama_tp.c */

/* Replace v (n floats) by the group's sum when split; a failure is kept
 * in m->tp_failed (and the step fails with it). */
void llama_tp_sum(struct llama_model *m, float *v, uint64_t n);

/* Split: the logits of the n rows of x (final-normed, (n, dim)) into out
 * (n, vocab): this rank's classifier rows, gathered over the group. */
void llama_tp_logits(struct llama_model *m, const float *x, uint32_t n,
		     float *out);

/* ---- llama_forward.c */

/* K (which 0) or V (which 1) of slot's contiguous cache (bind()) for
 * layer, at position 0. */
float *llama_cache(struct llama_model *m, uint32_t slot, uint32_t layer,
		   int which);

/* Run the forward pass over the chunk's m->n_ct tokens (K/V written,
 * logits of the tokens with an out_row) and empty the chunk. */
void llama_chunk_run(struct llama_model *m);

#endif /* DYNBATCH_LLAMA_RUN_H */
