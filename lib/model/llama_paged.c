/*
 * llama_paged.c - the llama model over the engine's paged KV pool (model.h
 * ABI version 4): bind_paged(), step_paged(), and where a position's K and
 * V live in the pool.  llama_model.c's notes give the design; this file
 * holds what differs from the contiguous cache of bind().
 *
 * A block holds block_tokens positions of every layer's K and V, laid out
 * [layer][K|V][offset][kv_dim] floats: the positions of one block that
 * one layer's attention reads are consecutive at stride kv_dim, as in the
 * contiguous cache, so the same kernels run over a block's span.  Block b
 * starts at float b * block_floats of the pool (model.h's rule), and its
 * bytes are only the K/V written at its offsets: a copy of it elsewhere
 * (the engine's copy-on-write) is the same state.
 *
 * What a row may read is positions [0, n_cached) of its table, which the
 * engine vouches for; the model keeps nothing per row.  What it checks is
 * what could make it touch memory outside the pool: every id in a table
 * below n_blocks and a table long enough for the positions the step
 * writes, for every row before any is computed, so a bad table fails the
 * step (-EINVAL) with nothing written.
 */
#include "model/llama_run.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Floats of K and V one position takes, every layer. */
static size_t llama_kv_floats_per_token(const struct llama_model *m)
{
	return (size_t)m->ck.cfg.n_layers * 2 * m->ck.cfg.kv_dim;
}

uint64_t llama_kv_bytes_per_token(void *model)
{
	return (uint64_t)llama_kv_floats_per_token(model) * sizeof(float);
}

int llama_bind_paged(void *model, void *pool, uint32_t n_blocks,
		     uint32_t block_tokens, uint32_t max_context,
		     uint32_t max_rows, char *err, size_t err_len)
{
	struct llama_model *m = model;
	const struct llama_config *c = &m->ck.cfg;
	size_t block_floats, pool_bytes;

	llama_unbind(m);
	if (m->tp_ranks > 1) {
		snprintf(err, err_len,
			 "llama: the paged mode does not run tensor parallel");
		return -EINVAL;
	}
	if (!pool || (uintptr_t)pool % sizeof(float) || n_blocks == 0 ||
	    block_tokens == 0 || max_rows == 0 || max_context == 0 ||
	    max_context > c->seq_len) {
		snprintf(err, err_len,
			 "llama: bind_paged(%u blocks of %u positions, max_context %u, max_rows %u): need a float-aligned pool, every count >= 1 and max_context <= the checkpoint's seq_len %u",
			 n_blocks, block_tokens, max_context, max_rows, c->seq_len);
		return -EINVAL;
	}
	/* every offset into the pool is then below pool_bytes: no overflow */
	if (__builtin_mul_overflow(llama_kv_floats_per_token(m),
				   (size_t)block_tokens, &block_floats) ||
	    __builtin_mul_overflow(block_floats, (size_t)n_blocks * sizeof(float),
				   &pool_bytes)) {
		snprintf(err, err_len,
			 "llama: a pool of %u blocks of %u positions overflows the address space",
			 n_blocks, block_tokens);
		return -EOVERFLOW;
	}
	m->pool = pool;
	m->n_blocks = n_blocks;
	m->block_tokens = block_tokens;
	m->block_floats = block_floats;
	m->max_rows = max_rows;
	m->max_context = max_context;
	m->n_slots = 0;
	if (llama_bind_scratch(m)) {
		llama_unbind(m);
		snprintf(err, err_len, "llama: out of memory for scratch buffers");
		return -ENOMEM;
	}
	m->paged = true;
	m->bound = true;
	return 0;
}

float *llama_paged_kv(const struct llama_model *m, const uint32_t *blocks,
		      uint32_t pos, uint32_t layer, int which)
{
	uint32_t bt = m->block_tokens;

	return m->pool + (size_t)blocks[pos / bt] * m->block_floats +
	       (((size_t)layer * 2 + (size_t)which) * bt + pos % bt) *
		       m->ck.cfg.kv_dim;
}

/*
 * llama_forward.c's attention head, with the keys and values of a token's
 * positions [0, pos] taken block by block: each block's span of scores
 * goes to its place in the token's one score array (scores are
 * independent per position), softmax runs over the whole array as in the
 * contiguous mode, and the values are summed span after span into a
 * zeroed output with attn_mix_acc(), whose chains go on across a span's
 * end: the result is the contiguous mode's, bit for bit, whatever the
 * block size.
 */
void llama_paged_attention_head(struct llama_model *m, uint32_t layer,
				uint32_t n, uint32_t h, float *out)
{
	const struct llama_config *c = &m->ck.cfg;
	uint32_t hs = c->head_size, group = c->n_heads / c->n_kv_heads;
	uint32_t bt = m->block_tokens;
	size_t kv_off = (size_t)(h / group) * hs;
	float scale = sqrtf((float)hs);

	for (uint32_t t = 0; t < n; t++) {
		const struct llama_chunk_token *ct = &m->ct[t];
		const float *q = m->q + (size_t)t * c->dim + (size_t)h * hs;
		float *att = m->att + (size_t)t * m->max_context;
		uint32_t n_pos = ct->pos + 1;

		/* p is a block's first position: the span is its block */
		for (uint32_t p = 0; p < n_pos; p += bt)
			m->k->attn_scores(att + p, q,
					  llama_paged_kv(m, ct->blocks, p, layer, 0) + kv_off,
					  c->kv_dim, n_pos - p < bt ? n_pos - p : bt,
					  hs, scale);
		m->k->softmax(att, n_pos);
	}
	for (uint32_t t = 0; t < n; t++) {
		const struct llama_chunk_token *ct = &m->ct[t];
		const float *att = m->att + (size_t)t * m->max_context;
		float *o = out + (size_t)t * c->dim + (size_t)h * hs;
		uint32_t n_pos = ct->pos + 1;

		memset(o, 0, hs * sizeof(float));
		for (uint32_t p = 0; p < n_pos; p += bt)
			m->k->attn_mix_acc(o, att + p,
					   llama_paged_kv(m, ct->blocks, p, layer, 1) + kv_off,
					   c->kv_dim, n_pos - p < bt ? n_pos - p : bt,
					   hs);
	}
}

/*
 * Check paged row pr against model.h and set its refusal: every block id
 * first (a table may hold anything; a refused row's too), then the
 * refusals in the contiguous mode's order, then a table that covers the
 * positions written.  0, or -EINVAL when the caller broke the protocol.
 */
static int llama_paged_row_check(const struct llama_model *m,
				 const struct dynbatch_paged_row *pr,
				 uint32_t *refusal)
{
	const struct dynbatch_model_row *r = &pr->row;
	uint64_t end = (uint64_t)r->n_cached + r->n_consume;

	*refusal = DYNBATCH_REFUSE_NONE;
	if (pr->n_blocks && !pr->blocks)
		return -EINVAL;
	for (uint32_t i = 0; i < pr->n_blocks; i++)
		if (pr->blocks[i] >= m->n_blocks)
			return -EINVAL;
	if (r->n_tokens == 0) {
		*refusal = DYNBATCH_REFUSE_EMPTY_PROMPT;
		return 0;
	}
	if (r->n_tokens > m->max_context) {
		*refusal = DYNBATCH_REFUSE_CONTEXT;
		return 0;
	}
	/* n_cached is not checked against anything: the engine vouches for
	 * it, and whatever the blocks hold, reading them stays in the pool */
	if (!r->tokens || r->n_consume == 0 || end > r->n_tokens ||
	    !llama_outputs_ok(r) ||
	    (uint64_t)pr->n_blocks * m->block_tokens < end)
		return -EINVAL;
	for (uint64_t i = r->n_cached; i < end; i++) {
		if (r->tokens[i] < 0 ||
		    (uint32_t)r->tokens[i] >= m->ck.cfg.vocab) {
			*refusal = DYNBATCH_REFUSE_TOKEN;
			return 0;
		}
	}
	return 0;
}

int llama_step_paged(void *model, uint32_t n_rows,
		     const struct dynbatch_paged_row *rows, float *logits,
		     uint32_t *refusals)
{
	struct llama_model *m = model;
	int32_t out_row = 0;

	/* bound with bind(): the engine never mixes the two ways */
	if (!m->bound || !m->paged || n_rows > m->max_rows ||
	    (n_rows && (!rows || !refusals)))
		return -EINVAL;
	/* every row checked before any position is written */
	for (uint32_t i = 0; i < n_rows; i++)
		if (llama_paged_row_check(m, &rows[i], &refusals[i]))
			return -EINVAL;
	m->logits = logits;
	m->n_ct = 0;
	for (uint32_t i = 0; i < n_rows; i++)
		llama_queue_row(m, &rows[i].row, rows[i].blocks, refusals[i],
				&out_row);
	if (m->n_ct)
		llama_chunk_run(m);
	m->logits = NULL;
	return 0;
}
