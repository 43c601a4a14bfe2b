/*
 * llama_tp.c - one rank's slice of the llama model for a tensor-parallel
 * group: the checks, the sliced weights and the group sum the forward
 * pass calls (llama_forward.c).  What is split and why: llama_tp.h.
 */
#include "model/llama_tp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/llama_run.h"

/* A slice to make: rows [row0, row0 + rows) and columns [col0, col0 +
 * cols) of every layer of *t, which becomes the copy. */
struct tp_cut {
	const char *name;
	struct tensor *t;
	uint32_t row0, rows, col0, cols;
};

/* Why the model cannot be split, or NULL. */
static const char *tp_refusal(const struct llama_model *m,
			      const struct tp_cut *cuts, uint32_t n_cuts)
{
	static char why[96];

	if (m->bound)
		return "the model is bound already (split before bind)";
	if (m->split)
		return "attention=split is not supported";
	if (m->ck.w.bq.data || m->ck.w.bk.data || m->ck.w.bv.data)
		return "Q/K/V biases are not supported";
	for (uint32_t i = 0; i < n_cuts; i++)
		for (uint32_t l = 0; l < cuts[i].t->n_layers; l++)
			if (tensor_layer(cuts[i].t, l).type != DTYPE_F32) {
				snprintf(why, sizeof(why),
					 "%s layer %u is not F32 (only F32 splits)",
					 cuts[i].name, l);
				return why;
			}
	return NULL;
}

/* Copy the cut into dst (back to back layers) and point its tensor
 * there; returns the floats written. */
static size_t tp_copy(const struct tp_cut *c, float *dst)
{
	struct tensor *t = c->t;
	size_t per = (size_t)c->rows * c->cols;

	for (uint32_t l = 0; l < t->n_layers; l++) {
		struct tensor src = tensor_layer(t, l);
		const float *w = src.data;

		for (uint32_t i = 0; i < c->rows; i++)
			memcpy(dst + l * per + (size_t)i * c->cols,
			       w + (size_t)(c->row0 + i) * src.cols + c->col0,
			       (size_t)c->cols * sizeof(float));
	}
	*t = (struct tensor){ .type = DTYPE_F32, .data = dst,
			      .n_layers = t->n_layers, .rows = c->rows,
			      .cols = c->cols, .layer_bytes = per * sizeof(float) };
	return per * t->n_layers;
}

int llama_tp_split(void *model, uint32_t rank, uint32_t n_ranks,
		   llama_tp_sum_fn sum, void *ctx, char *err, size_t err_len)
{
	struct llama_model *m = model;
	struct llama_config *c = &m->ck.cfg;
	struct llama_weights *w = &m->ck.w;
	uint32_t hs = c->head_size, q = 0, kv = 0, hid = 0, dim = c->dim;
	uint32_t v0, vn;
	const char *why;
	size_t floats = 0;
	float *mem, *at;

	if (n_ranks == 0 || rank >= n_ranks || (n_ranks > 1 && !sum)) {
		snprintf(err, err_len, "llama: tensor parallel rank %u of %u%s",
			 rank, n_ranks, sum ? "" : " without a sum");
		return -EINVAL;
	}
	if (n_ranks == 1)
		return 0;
	if (c->n_kv_heads % n_ranks || c->hidden_dim % n_ranks) {
		snprintf(err, err_len,
			 "llama: --tensor-parallel %u must divide n_kv_heads %u and hidden_dim %u",
			 n_ranks, c->n_kv_heads, c->hidden_dim);
		return -EINVAL;
	}
	q = c->n_heads / n_ranks * hs;
	kv = c->n_kv_heads / n_ranks * hs;
	hid = c->hidden_dim / n_ranks;
	v0 = (uint32_t)((uint64_t)c->vocab * rank / n_ranks);
	vn = (uint32_t)((uint64_t)c->vocab * (rank + 1) / n_ranks) - v0;
	{
		const struct tp_cut cuts[] = {
			{ "wq", &w->wq, rank * q, q, 0, dim },
			{ "wk", &w->wk, rank * kv, kv, 0, dim },
			{ "wv", &w->wv, rank * kv, kv, 0, dim },
			{ "wo", &w->wo, 0, dim, rank * q, q },
			{ "w1", &w->w1, rank * hid, hid, 0, dim },
			{ "w3", &w->w3, rank * hid, hid, 0, dim },
			{ "w2", &w->w2, 0, dim, rank * hid, hid },
			{ "wcls", &w->wcls, v0, vn, 0, dim },
		};
		uint32_t n_cuts = sizeof(cuts) / sizeof(cuts[0]);

		why = tp_refusal(m, cuts, n_cuts);
		if (why) {
			snprintf(err, err_len, "llama: tensor parallel: %s", why);
			return -EINVAL;
		}
		for (uint32_t i = 0; i < n_cuts; i++)
			floats += (size_t)cuts[i].rows * cuts[i].cols *
				  cuts[i].t->n_layers;
		/* then the classifier's output for a chunk */
		floats += (size_t)LLAMA_CHUNK * vn;
		mem = llama_alloc_floats(floats);
		if (!mem) {
			snprintf(err, err_len, "llama: tensor parallel: no memory for %zu floats of slices",
				 floats);
			return -ENOMEM;
		}
		at = mem;
		for (uint32_t i = 0; i < n_cuts; i++)
			at += tp_copy(&cuts[i], at);
		m->tp_logits = at;
	}
	m->tp_mem = mem;
	m->tp_rank = rank;
	m->tp_ranks = n_ranks;
	m->tp_sum = sum;
	m->tp_ctx = ctx;
	m->q_dim = q;
	m->tp_vocab0 = v0;
	c->n_heads /= n_ranks;
	c->n_kv_heads /= n_ranks;
	c->kv_dim = kv;
	c->hidden_dim = hid;
	return 0;
}

void llama_tp_sum(struct llama_model *m, float *v, uint64_t n)
{
	int rc;

	if (m->tp_ranks <= 1 || m->tp_failed)
		return;
	rc = m->tp_sum(m->tp_ctx, v, n);
	if (rc)
		m->tp_failed = rc;
}

void llama_tp_logits(struct llama_model *m, const float *x, uint32_t n,
		     float *out)
{
	struct tensor cls = tensor_layer(&m->ck.w.wcls, 0);
	size_t vocab = m->ck.cfg.vocab, vn = cls.rows;

	m->ops[cls.type]->matmul(m->tp_logits, x, n, &cls);
	/* our rows in place, zeros elsewhere: the group's sum is then an
	 * all-gather, exact (x + 0 == x) */
	for (uint32_t t = 0; t < n; t++) {
		float *o = out + (size_t)t * vocab;

		memset(o, 0, vocab * sizeof(float));
		memcpy(o + m->tp_vocab0, m->tp_logits + (size_t)t * vn,
		       vn * sizeof(float));
	}
	llama_tp_sum(m, out, (uint64_t)n * vocab);
}
