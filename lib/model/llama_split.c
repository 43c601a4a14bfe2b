/*
 * llama_split.c - the llama model's split attention (create option
 * attention=split), over the contiguous cache (bind()) and the paged pool
 * (bind_paged()), and its cascade: rows of one step whose tables share a
 * chunk's blocks compute that chunk together.
 *
 * A token at position pos attends over keys [0, pos], cut at absolute
 * positions that are multiples of LLAMA_SPLIT_POS (never at block edges).
 * Per chunk: its scores (attn_scores(), span by span of the blocks that
 * hold it: each score is its own dot product), its max and exps and their
 * sum (attn_chunk_exp()), its values summed from zero span by span
 * (attn_mix_acc(), whose chains go on across a span's end); then the
 * chunk is merged into the token's running (output, max, sum) by the
 * log-sum-exp rule (attn_merge()), chunks in ascending order, and the
 * output divided by the sum at the end.  Every number is a function of
 * the token's query, the K/V at its positions and the position count
 * alone, so the result is the same bits for any block size, table,
 * batch, row order, prefill chunking and sharing, and the same in bind()
 * and bind_paged() (test_llama_paged.c).  It is not the exact mode's one
 * softmax: it rounds differently (docs/DESIGN.md 11.3).
 *
 * Cascade (m->cascade, paged only: contiguous slots never share).  Per
 * chunk of keys, the step's tokens whose chunk is full (all of its
 * LLAMA_SPLIT_POS positions below their position count) and whose tables
 * name the same block ids over it form a group: sorted by the block at
 * the chunk's first position, then each candidate checked against its
 * group's leader over the rest of the chunk (the same table, as a
 * prefill's tokens have, passes at once).  A group reads the chunk's
 * K/V through its leader's table, once from memory: the loop runs chunk,
 * group, KV head, then the group's tokens and that KV head's query heads,
 * so one head's chunk (2 x LLAMA_SPLIT_POS x head_size floats) stays in
 * L1 while every query of the group uses it.  Each query's arithmetic is
 * the same calls on the same numbers as without cascade (the ids are
 * equal, so the addresses are), so cascade on or off is bit for bit the
 * same; what it changes is how often the shared K/V come from memory.
 * Tokens whose chunk is partial (their last) compute it alone.
 */
#include "model/llama_run.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/*
 * K (which 0) or V (which 1) of layer at position pos for token src's
 * row, and in *left how many positions from pos on are consecutive there
 * (to the block's end; the whole slot in the contiguous cache).
 */
static const float *llama_split_kv(struct llama_model *m,
				   const struct llama_chunk_token *src,
				   uint32_t pos, uint32_t layer, int which,
				   uint32_t *left)
{
	if (m->paged) {
		*left = m->block_tokens - pos % m->block_tokens;
		return llama_paged_kv(m, src->blocks, pos, layer, which);
	}
	*left = UINT32_MAX;
	return llama_cache(m, src->slot, layer, which) +
	       (size_t)pos * m->ck.cfg.kv_dim;
}

/*
 * Query head h of the chunk's token t over keys [lo, hi) of src's row (t
 * itself, or the leader of t's cascade group, whose table names the same
 * blocks there), merged into t's running output, max and sum.
 */
static void llama_split_chunk(struct llama_model *m, uint32_t layer,
			      const struct llama_chunk_token *src, uint32_t t,
			      uint32_t h, uint32_t lo, uint32_t hi, float *out)
{
	const struct llama_config *c = &m->ck.cfg;
	const struct llama_kernels *k = m->k;
	uint32_t hs = c->head_size, group = c->n_heads / c->n_kv_heads;
	size_t kv_off = (size_t)(h / group) * hs;
	const float *q = m->q + (size_t)t * c->dim + (size_t)h * hs;
	float *att = m->split_att, *acc = m->split_acc;
	size_t state = (size_t)t * c->n_heads + h;
	uint32_t left, span;
	float max, sum;

	for (uint32_t p = lo; p < hi; p += span) {
		const float *keys = llama_split_kv(m, src, p, layer, 0, &left);

		span = left < hi - p ? left : hi - p;
		k->attn_scores(att + (p - lo), q, keys + kv_off, c->kv_dim,
			       span, hs, sqrtf((float)hs));
	}
	sum = k->attn_chunk_exp(att, hi - lo, &max);
	memset(acc, 0, hs * sizeof(float));
	for (uint32_t p = lo; p < hi; p += span) {
		const float *vals = llama_split_kv(m, src, p, layer, 1, &left);

		span = left < hi - p ? left : hi - p;
		k->attn_mix_acc(acc, att + (p - lo), vals + kv_off, c->kv_dim,
				span, hs);
	}
	k->attn_merge(out + (size_t)t * c->dim + (size_t)h * hs,
		      &m->split_max[state], &m->split_sum[state], acc, max, sum,
		      hs);
}

/* Do tokens a and b (both with the chunk at lo full) read the same
 * blocks over it?  Both tables cover it: step_paged() checked them. */
static bool llama_split_same_blocks(const struct llama_model *m,
				    const struct llama_chunk_token *a,
				    const struct llama_chunk_token *b,
				    uint32_t lo)
{
	uint32_t bt = m->block_tokens;
	uint32_t first = lo / bt, last = (lo + LLAMA_SPLIT_POS - 1) / bt;

	return a->blocks == b->blocks ||
	       memcmp(a->blocks + first, b->blocks + first,
		      (size_t)(last - first + 1) * sizeof(uint32_t)) == 0;
}

/*
 * The groups of the chunk at lo among the chunk's n tokens: order[] lists
 * the tokens that have keys there, group g being order[start[g] ..
 * start[g + 1]), its leader first.  Without cascade (or bind()) every
 * token is a group of its own.  Returns the number of groups.
 */
static uint32_t llama_split_groups(const struct llama_model *m, uint32_t n,
				   uint32_t lo, uint32_t *order,
				   uint32_t *start)
{
	uint32_t full[LLAMA_CHUNK], key[LLAMA_CHUNK], n_full = 0, n_order = 0;
	uint32_t n_groups = 0, bt = m->block_tokens;
	bool taken[LLAMA_CHUNK] = { false };
	bool cascade = m->paged && m->cascade;

	for (uint32_t t = 0; t < n; t++) {
		uint32_t n_pos = m->ct[t].pos + 1;

		if (n_pos <= lo)
			continue;
		if (!cascade || n_pos < lo + LLAMA_SPLIT_POS) {
			start[n_groups++] = n_order;
			order[n_order++] = t;
			continue;
		}
		/* insertion sort by the block at lo, then by token */
		uint32_t i = n_full++, b = m->ct[t].blocks[lo / bt];

		for (; i > 0 && key[i - 1] > b; i--) {
			full[i] = full[i - 1];
			key[i] = key[i - 1];
		}
		full[i] = t;
		key[i] = b;
	}
	for (uint32_t i = 0; i < n_full; i++) {
		const struct llama_chunk_token *lead = &m->ct[full[i]];

		if (taken[i])
			continue;
		start[n_groups++] = n_order;
		order[n_order++] = full[i];
		for (uint32_t j = i + 1; j < n_full && key[j] == key[i]; j++) {
			if (taken[j] ||
			    !llama_split_same_blocks(m, lead, &m->ct[full[j]], lo))
				continue;
			taken[j] = true;
			order[n_order++] = full[j];
		}
	}
	start[n_groups] = n_order;
	return n_groups;
}

void llama_split_attention(struct llama_model *m, uint32_t layer, uint32_t n,
			   float *out)
{
	const struct llama_config *c = &m->ck.cfg;
	uint32_t hs = c->head_size, group = c->n_heads / c->n_kv_heads;
	uint32_t order[LLAMA_CHUNK], start[LLAMA_CHUNK + 1], n_pos_max = 0;

	/* every (token, head) starts empty: the merge's identity */
	for (uint32_t t = 0; t < n; t++) {
		if (m->ct[t].pos + 1 > n_pos_max)
			n_pos_max = m->ct[t].pos + 1;
		for (uint32_t h = 0; h < c->n_heads; h++) {
			memset(out + (size_t)t * c->dim + (size_t)h * hs, 0,
			       hs * sizeof(float));
			m->split_max[(size_t)t * c->n_heads + h] = -INFINITY;
			m->split_sum[(size_t)t * c->n_heads + h] = 0.0f;
		}
	}
	for (uint32_t lo = 0; lo < n_pos_max; lo += LLAMA_SPLIT_POS) {
		uint32_t n_groups = llama_split_groups(m, n, lo, order, start);

		for (uint32_t g = 0; g < n_groups; g++) {
			const struct llama_chunk_token *src = &m->ct[order[start[g]]];

			for (uint32_t kvh = 0; kvh < c->n_kv_heads; kvh++)
				for (uint32_t i = start[g]; i < start[g + 1]; i++) {
					uint32_t t = order[i], hi = m->ct[t].pos + 1;

					if (hi > lo + LLAMA_SPLIT_POS)
						hi = lo + LLAMA_SPLIT_POS;
					for (uint32_t h = kvh * group; h < (kvh + 1) * group; h++)
						llama_split_chunk(m, layer, src, t, h, lo,
								  hi, out);
				}
		}
	}
	/* the output is the merged value sum over the merged exp sum; a
	 * token always has a key (its own), so the sum is above 0 */
	for (uint32_t t = 0; t < n; t++)
		for (uint32_t h = 0; h < c->n_heads; h++) {
			float *o = out + (size_t)t * c->dim + (size_t)h * hs;
			float sum = m->split_sum[(size_t)t * c->n_heads + h];

			for (uint32_t i = 0; i < hs && sum > 0.0f; i++)
				o[i] /= sum;
		}
}
