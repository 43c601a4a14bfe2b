/*
 * llama_forward.c - the llama model's forward pass over one chunk of
 * tokens: embeddings, per layer attention and FFN, the logits of the
 * tokens that want them.  The design (chunks, attention head by head,
 * batch invariance) is in llama_model.c's notes.
 */
#include "model/llama_run.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ----------------------------------------------------------- forward */

/* cos and sin of pos * freq for every pair, for each token of the chunk:
 * a function of the position alone, so the same however it is reached. */
static void llama_rope_chunk(struct llama_model *m, uint32_t n)
{
	uint32_t hs = m->ck.cfg.head_size, pairs = m->ck.cfg.rope_dim / 2;

	for (uint32_t t = 0; t < n; t++) {
		for (uint32_t j = 0; j < pairs; j++) {
			float val = (float)m->ct[t].pos * m->rope_freq[j];
			float *e = m->rope + ((size_t)t * (hs / 2) + j) * 2;

			e[0] = cosf(val);
			e[1] = sinf(val);
		}
	}
}

float *llama_cache(struct llama_model *m, uint32_t slot, uint32_t layer,
		   int which)
{
	size_t per = (size_t)m->max_context * m->ck.cfg.kv_dim;

	return m->kv + (size_t)slot * m->slot_floats +
	       ((size_t)layer * 2 + (size_t)which) * per;
}

/* o = w * (x / sqrt(mean(x^2) + eps)), as llama2.c's rmsnorm. */
static void llama_rmsnorm(const struct llama_model *m, float *o,
			  const float *x, const float *w, uint32_t n)
{
	float ss = m->k->dot(x, x, n) / (float)n + m->ck.cfg.rms_eps;

	ss = 1.0f / sqrtf(ss);
	for (uint32_t j = 0; j < n; j++)
		o[j] = w[j] * (ss * x[j]);
}

/* Rotate the pairs of each head of vec (n floats) for the chunk's
 * token t (llama_rope_chunk()): pair j of the rope_dim / 2 is the
 * adjacent (2j, 2j + 1), or (j, j + rope_dim / 2) with rope_half; the
 * dims past rope_dim stay as they are. */
static void llama_rope(const struct llama_model *m, float *vec, uint32_t n,
		       uint32_t t)
{
	const struct llama_config *c = &m->ck.cfg;
	uint32_t hs = c->head_size, pairs = c->rope_dim / 2;
	const float *tab = m->rope + (size_t)t * hs;

	for (uint32_t h = 0; h < n; h += hs) {
		for (uint32_t j = 0; j < pairs; j++) {
			uint32_t a = h + (c->rope_half ? j : 2 * j);
			uint32_t b = c->rope_half ? a + pairs : a + 1;
			const float *e = tab + 2 * j;
			float v0 = vec[a], v1 = vec[b];

			vec[a] = v0 * e[0] - v1 * e[1];
			vec[b] = v0 * e[1] + v1 * e[0];
		}
	}
}

/*
 * Attention of query head h for the chunk's n tokens, each over its own
 * slot's cache, into out (chunk, dim).  Per token: all its scores in one
 * kernel pass over the cached keys, softmax, then the weighted sum of the
 * cached values in one pass; what a token gets depends only on its q, its
 * slot's cache and its position.  All the tokens' scores come before any
 * token's values, so that while one pass runs only the keys, or only the
 * values, of head h over a long prefix need to stay in cache.
 */
static void llama_attention_head(struct llama_model *m, uint32_t layer,
				 uint32_t n, uint32_t h, float *out)
{
	const struct llama_config *c = &m->ck.cfg;
	uint32_t hs = c->head_size, group = c->n_heads / c->n_kv_heads;
	size_t kv_off = (size_t)(h / group) * hs;
	float scale = sqrtf((float)hs);

	for (uint32_t t = 0; t < n; t++) {
		const struct llama_chunk_token *ct = &m->ct[t];
		float *att = m->att + (size_t)t * m->max_context;

		m->k->attn_scores(att, m->q + (size_t)t * m->q_dim + (size_t)h * hs,
				  llama_cache(m, ct->slot, layer, 0) + kv_off,
				  c->kv_dim, ct->pos + 1, hs, scale);
		m->k->softmax(att, ct->pos + 1);
	}
	for (uint32_t t = 0; t < n; t++) {
		const struct llama_chunk_token *ct = &m->ct[t];

		m->k->attn_mix(out + (size_t)t * m->q_dim + (size_t)h * hs,
			       m->att + (size_t)t * m->max_context,
			       llama_cache(m, ct->slot, layer, 1) + kv_off,
			       c->kv_dim, ct->pos + 1, hs);
	}
}

/*
 * out = x W^T for the chunk's n rows, W layer l of the weight w, through
 * w's type's kernels (tensor.h): one table lookup per call, none per
 * element.
 */
static void llama_matmul_w(const struct llama_model *m, float *out,
			   const float *x, uint32_t n, const struct tensor *w,
			   uint32_t l)
{
	struct tensor mat = tensor_layer(w, l);

	m->ops[mat.type]->matmul(out, x, n, &mat);
}

/* Layer l of an F32 vector tensor (a norm's weights: always F32). */
static const float *llama_f32_row(const struct tensor *t, uint32_t l)
{
	if (t->layers)
		return t->layers[l].data;
	return (const float *)t->data + (size_t)l * t->cols;
}

/* out[t] += layer l of the bias b, for the chunk's n rows (nothing when
 * the model has no such bias). */
static void llama_add_bias(float *out, const struct tensor *b, uint32_t l,
			   uint32_t n)
{
	const float *v;

	if (!b->data)
		return;
	v = llama_f32_row(b, l);
	for (uint32_t t = 0; t < n; t++)
		for (uint32_t i = 0; i < b->cols; i++)
			out[(size_t)t * b->cols + i] += v[i];
}

/* The attention half of one layer for the chunk's n tokens. */
static void llama_layer_attention(struct llama_model *m, uint32_t l,
				  uint32_t n)
{
	const struct llama_config *c = &m->ck.cfg;
	const struct llama_weights *w = &m->ck.w;
	size_t dim = c->dim, kvd = c->kv_dim, qd = m->q_dim;
	const float *rms = llama_f32_row(&w->rms_att, l);

	for (uint32_t t = 0; t < n; t++)
		llama_rmsnorm(m, m->xb + t * dim, m->x + t * dim, rms, c->dim);
	llama_matmul_w(m, m->q, m->xb, n, &w->wq, l);
	llama_matmul_w(m, m->kb, m->xb, n, &w->wk, l);
	llama_matmul_w(m, m->vb, m->xb, n, &w->wv, l);
	llama_add_bias(m->q, &w->bq, l, n);
	llama_add_bias(m->kb, &w->bk, l, n);
	llama_add_bias(m->vb, &w->bv, l, n);
	/* every K/V of the chunk goes in before anyone attends */
	for (uint32_t t = 0; t < n; t++) {
		const struct llama_chunk_token *ct = &m->ct[t];
		float *kd, *vd;

		llama_rope(m, m->q + t * qd, m->q_dim, t);
		llama_rope(m, m->kb + t * kvd, c->kv_dim, t);
		if (m->paged) {
			kd = llama_paged_kv(m, ct->blocks, ct->pos, l, 0);
			vd = llama_paged_kv(m, ct->blocks, ct->pos, l, 1);
		} else {
			kd = llama_cache(m, ct->slot, l, 0) + (size_t)ct->pos * kvd;
			vd = llama_cache(m, ct->slot, l, 1) + (size_t)ct->pos * kvd;
		}
		memcpy(kd, m->kb + t * kvd, kvd * sizeof(float));
		memcpy(vd, m->vb + t * kvd, kvd * sizeof(float));
	}
	/*
	 * Head by head, so that a long prefix's keys and values of one head
	 * stay in cache across the chunk's tokens; the order changes
	 * nothing in the results.  attention=split has its own order.
	 */
	for (uint32_t h = 0; h < c->n_heads && !m->split; h++) {
		if (m->paged)
			llama_paged_attention_head(m, l, n, h, m->xb2);
		else
			llama_attention_head(m, l, n, h, m->xb2);
	}
	if (m->split)
		llama_split_attention(m, l, n, m->xb2);
	llama_matmul_w(m, m->xb, m->xb2, n, &w->wo, l);
	/* split: xb is this rank's heads' part of the output */
	llama_tp_sum(m, m->xb, n * dim);
	for (size_t i = 0; i < n * dim; i++)
		m->x[i] += m->xb[i];
}

/* The SwiGLU FFN half of one layer for the chunk's n tokens. */
static void llama_layer_ffn(struct llama_model *m, uint32_t l, uint32_t n)
{
	const struct llama_config *c = &m->ck.cfg;
	const struct llama_weights *w = &m->ck.w;
	size_t dim = c->dim, hid = c->hidden_dim;
	const float *rms = llama_f32_row(&w->rms_ffn, l);

	for (uint32_t t = 0; t < n; t++)
		llama_rmsnorm(m, m->xb + t * dim, m->x + t * dim, rms, c->dim);
	llama_matmul_w(m, m->hb, m->xb, n, &w->w1, l);
	llama_matmul_w(m, m->hb2, m->xb, n, &w->w3, l);
	for (size_t i = 0; i < n * hid; i++) {
		float v = m->hb[i];

		v *= 1.0f / (1.0f + expf(-v));
		m->hb[i] = v * m->hb2[i];
	}
	llama_matmul_w(m, m->xb, m->hb, n, &w->w2, l);
	/* split: xb is this rank's FFN columns' part */
	llama_tp_sum(m, m->xb, n * dim);
	for (size_t i = 0; i < n * dim; i++)
		m->x[i] += m->xb[i];
}

/*
 * Logits of the chunk's tokens that want them: final norm into xb (packed),
 * then the classifier into each run of consecutive output rows.
 */
static void llama_chunk_logits(struct llama_model *m, uint32_t n)
{
	const struct llama_config *c = &m->ck.cfg;
	const struct llama_weights *w = &m->ck.w;
	size_t dim = c->dim, vocab = c->vocab;
	uint32_t n_out = 0, first = 0;
	int32_t rows[LLAMA_CHUNK];

	for (uint32_t t = 0; t < n; t++) {
		if (m->ct[t].out_row < 0)
			continue;
		llama_rmsnorm(m, m->xb + n_out * dim, m->x + t * dim,
			      llama_f32_row(&w->rms_final, 0), c->dim);
		rows[n_out++] = m->ct[t].out_row;
	}
	for (uint32_t j = 1; j <= n_out; j++) {
		if (j < n_out && rows[j] == rows[j - 1] + 1)
			continue;
		if (m->tp_ranks > 1)
			llama_tp_logits(m, m->xb + first * dim, j - first,
					m->logits + (size_t)rows[first] * vocab);
		else
			llama_matmul_w(m, m->logits + (size_t)rows[first] * vocab,
				       m->xb + first * dim, j - first, &w->wcls, 0);
		first = j;
	}
}

/* Run the forward pass over the chunk's tokens and empty the chunk. */
void llama_chunk_run(struct llama_model *m)
{
	const struct llama_config *c = &m->ck.cfg;
	const struct tensor *e = &m->ck.w.token_embedding;
	uint32_t n = m->n_ct;

	/* each token's embedding row as fp32 (a copy, or dequantized) */
	for (uint32_t t = 0; t < n; t++)
		m->ops[e->type]->get_row(m->x + (size_t)t * c->dim, e,
					 (uint32_t)m->ct[t].token);
	llama_rope_chunk(m, n);
	for (uint32_t l = 0; l < c->n_layers; l++) {
		llama_layer_attention(m, l, n);
		llama_layer_ffn(m, l, n);
	}
	llama_chunk_logits(m, n);
	m->n_ct = 0;
}
