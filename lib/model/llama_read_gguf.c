/*
 * llama_read_gguf.c - the llama model's weights from a GGUF file
 * (llama.cpp's format; lib/model/gguf.h reads it): architectures "llama"
 * (Llama 2 and 3, TinyLlama, Mistral, SmolLM) and "qwen2" (Q/K/V biases,
 * RoPE over the pairs (i, i + rope_dim / 2)), every tensor in place in
 * the mapping, each layer of its own type (a Q4_K_M file mixes Q4_K and
 * Q6_K).  It fills struct llama_checkpoint as the llama2.c readers do and
 * knows nothing of the forward pass (docs/DESIGN.md 2.3).
 *
 * What a file must hold, or it is refused naming the file and the key
 * or tensor:
 *   general.architecture  "llama" or "qwen2"
 *   ARCH.block_count, .embedding_length, .feed_forward_length,
 *   .attention.head_count, .context_length,
 *   .attention.layer_norm_rms_epsilon
 *   ARCH.attention.head_count_kv   (default: head_count)
 *   ARCH.rope.freq_base            (default 10000)
 *   ARCH.rope.dimension_count      (default: the head size; even)
 *   token_embd.weight [dim, vocab], output_norm.weight [dim],
 *   output.weight [dim, vocab] (absent: tied to token_embd),
 *   per layer N: blk.N.attn_norm, attn_q [dim, dim], attn_k and attn_v
 *   [dim, kv_dim], attn_output [dim, dim], ffn_norm, ffn_gate and ffn_up
 *   [dim, hidden], ffn_down [hidden, dim] (".weight" each), and for
 *   qwen2 blk.N.attn_q.bias [dim], attn_k.bias and attn_v.bias [kv_dim].
 * Shapes as GGUF writes them, row length first.  Norms and biases are
 * F32; matrices any type of dtype.h's GGUF set.  A tensor the model does
 * not use is ignored, as llama.cpp does.
 *
 * Q and K rows: the "llama" architecture's files hold them in the order
 * of RoPE over adjacent pairs (llama.cpp's converter permutes Hugging
 * Face's rotate-half order back to it), which is llama2.c's order, so the
 * forward rotates adjacent pairs; "qwen2" files keep rotate-half order,
 * so the forward rotates (i, i + rope_dim / 2).
 */
#include "model/llama_checkpoint.h"
#include "model/llama_reader.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"

/* The GGUF tensor types the kernels take, and their dtype. */
static bool llama_gguf_dtype(uint32_t gguf_type, enum dtype *out)
{
	static const struct { uint32_t gguf; enum dtype type; } map[] = {
		{ GGUF_TENSOR_F32, DTYPE_F32 },
		{ GGUF_TENSOR_F16, DTYPE_F16 },
		{ GGUF_TENSOR_BF16, DTYPE_BF16 },
		{ GGUF_TENSOR_Q8_0, DTYPE_GGML_Q8_0 },
		{ GGUF_TENSOR_Q4_0, DTYPE_GGML_Q4_0 },
		{ GGUF_TENSOR_Q4_1, DTYPE_GGML_Q4_1 },
		{ GGUF_TENSOR_Q5_0, DTYPE_GGML_Q5_0 },
		{ GGUF_TENSOR_Q5_1, DTYPE_GGML_Q5_1 },
		{ GGUF_TENSOR_Q4_K, DTYPE_GGML_Q4_K },
		{ GGUF_TENSOR_Q5_K, DTYPE_GGML_Q5_K },
		{ GGUF_TENSOR_Q6_K, DTYPE_GGML_Q6_K },
	};

	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
		if (map[i].gguf == gguf_type) {
			*out = map[i].type;
			return true;
		}
	}
	return false;
}

/* What the reader works with: the parsed file and where messages go. */
struct gguf_read {
	struct gguf_file f;
	const char *name;
	const char *arch;	/* "llama" or "qwen2" */
	char *err;
	size_t err_len;
};

static int llama_gguf_fail(struct gguf_read *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int llama_gguf_fail(struct gguf_read *r, const char *fmt, ...)
{
	int n = snprintf(r->err, r->err_len, "gguf '%s': ", r->name);
	va_list ap;

	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < r->err_len)
		vsnprintf(r->err + n, r->err_len - (size_t)n, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/*
 * What a getter's rc for key means: 1 when the key is absent and may be
 * (the caller takes its default), 0 when it was read, else -EINVAL with
 * the message written.
 */
static int llama_gguf_got(struct gguf_read *r, const char *key, int rc,
			  const char *why, bool def_ok)
{
	if (rc == -ENOENT && def_ok)
		return 1;
	if (rc == -ENOENT)
		return llama_gguf_fail(r, "key '%s' is missing (a %s model needs it)",
				       key, r->arch);
	if (rc)
		return llama_gguf_fail(r, "key '%s': %s", key, why);
	return 0;
}

/* ARCH.suffix as a u32 in 1 .. INT32_MAX: required, or def when def_ok. */
static int llama_gguf_u32(struct gguf_read *r, const char *suffix,
			  bool def_ok, uint32_t def, uint32_t *out)
{
	char key[128], why[256];
	int rc;

	snprintf(key, sizeof(key), "%s.%s", r->arch, suffix);
	rc = llama_gguf_got(r, key, gguf_get_u32(&r->f, key, out, why, sizeof(why)),
			    why, def_ok);
	if (rc)
		return rc < 0 ? rc : (*out = def, 0);
	if (*out == 0 || *out > INT32_MAX)
		return llama_gguf_fail(r, "key '%s' is %u (expected 1 .. %d)",
				       key, *out, INT32_MAX);
	return 0;
}

/* ARCH.suffix as a positive finite f32, or def when absent and def_ok. */
static int llama_gguf_f32(struct gguf_read *r, const char *suffix,
			  bool def_ok, float def, float *out)
{
	char key[128], why[256];
	int rc;

	snprintf(key, sizeof(key), "%s.%s", r->arch, suffix);
	rc = llama_gguf_got(r, key, gguf_get_f32(&r->f, key, out, why, sizeof(why)),
			    why, def_ok);
	if (rc)
		return rc < 0 ? rc : (*out = def, 0);
	if (!(*out > 0.0f) || *out > 3.4e38f)
		return llama_gguf_fail(r, "key '%s' is %g (expected a positive finite number)",
				       key, (double)*out);
	return 0;
}

/* The architecture and the shape. */
static int llama_gguf_config(struct gguf_read *r, struct llama_config *cfg)
{
	uint32_t dim, hidden, layers, heads, kv_heads, ctx, rope_dim;
	const struct gguf_tensor *emb;
	struct gguf_str arch;
	int32_t h[LLAMA_H_N];
	char why[256];
	int rc;

	rc = gguf_get_str(&r->f, "general.architecture", &arch, why, sizeof(why));
	if (rc == -ENOENT)
		return llama_gguf_fail(r, "key 'general.architecture' is missing");
	if (rc)
		return llama_gguf_fail(r, "key 'general.architecture': %s", why);
	if (arch.len == 5 && memcmp(arch.ptr, "llama", 5) == 0)
		r->arch = "llama";
	else if (arch.len == 5 && memcmp(arch.ptr, "qwen2", 5) == 0)
		r->arch = "qwen2";
	else
		return llama_gguf_fail(r, "architecture '%.*s' is not supported (expected llama or qwen2)",
				       (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
	if ((rc = llama_gguf_u32(r, "embedding_length", false, 0, &dim)) ||
	    (rc = llama_gguf_u32(r, "feed_forward_length", false, 0, &hidden)) ||
	    (rc = llama_gguf_u32(r, "block_count", false, 0, &layers)) ||
	    (rc = llama_gguf_u32(r, "attention.head_count", false, 0, &heads)) ||
	    (rc = llama_gguf_u32(r, "attention.head_count_kv", true, heads, &kv_heads)) ||
	    (rc = llama_gguf_u32(r, "context_length", false, 0, &ctx)))
		return rc;
	emb = gguf_find_tensor(&r->f, "token_embd.weight");
	if (!emb)
		return llama_gguf_fail(r, "tensor 'token_embd.weight' is missing");
	if (emb->n_dims != 2 || emb->dims[1] > INT32_MAX)
		return llama_gguf_fail(r, "tensor 'token_embd.weight' has %u dims (expected [%u, vocab])",
				       emb->n_dims, dim);
	h[LLAMA_H_DIM] = (int32_t)dim;
	h[LLAMA_H_HIDDEN] = (int32_t)hidden;
	h[LLAMA_H_LAYERS] = (int32_t)layers;
	h[LLAMA_H_HEADS] = (int32_t)heads;
	h[LLAMA_H_KV_HEADS] = (int32_t)kv_heads;
	h[LLAMA_H_VOCAB] = (int32_t)emb->dims[1];
	h[LLAMA_H_SEQ] = (int32_t)ctx;
	if ((rc = llama_config_check(cfg, h, r->name, r->err, r->err_len)))
		return rc;
	if ((rc = llama_gguf_f32(r, "attention.layer_norm_rms_epsilon", false, 0,
				 &cfg->rms_eps)) ||
	    (rc = llama_gguf_f32(r, "rope.freq_base", true, 10000.0f, &cfg->rope_theta)) ||
	    (rc = llama_gguf_u32(r, "rope.dimension_count", true, cfg->head_size, &rope_dim)))
		return rc;
	if (rope_dim % 2 || rope_dim > cfg->head_size)
		return llama_gguf_fail(r, "key '%s.rope.dimension_count' is %u (expected an even number <= the head size %u)",
				       r->arch, rope_dim, cfg->head_size);
	cfg->rope_dim = rope_dim;
	cfg->rope_half = strcmp(r->arch, "qwen2") == 0;
	return 0;
}

/*
 * The tensor called name, of shape [cols, rows] (rows 1: a vector of
 * cols), into *part; f32_only for norms and biases.  -ENOENT (no message)
 * when it is absent and optional.
 */
static int llama_gguf_tensor(struct gguf_read *r, const char *name,
			     uint64_t cols, uint64_t rows, bool f32_only,
			     bool optional, struct tensor_part *part)
{
	const struct gguf_tensor *t = gguf_find_tensor(&r->f, name);
	const struct gguf_type_info *info;
	uint64_t want_dims = rows == 1 ? 1 : 2;

	if (!t && optional)
		return -ENOENT;
	if (!t)
		return llama_gguf_fail(r, "tensor '%s' is missing", name);
	if (t->n_dims != want_dims || t->dims[0] != cols ||
	    (want_dims == 2 && t->dims[1] != rows)) {
		char got[96];
		int n = 0;

		for (uint32_t i = 0; i < t->n_dims && n >= 0 && (size_t)n < sizeof(got); i++)
			n += snprintf(got + n, sizeof(got) - (size_t)n, "%s%llu",
				      i ? ", " : "", (unsigned long long)t->dims[i]);
		if (want_dims == 1)
			return llama_gguf_fail(r, "tensor '%s' has shape [%s] (expected [%llu])",
					       name, got, (unsigned long long)cols);
		return llama_gguf_fail(r, "tensor '%s' has shape [%s] (expected [%llu, %llu])",
				       name, got, (unsigned long long)cols,
				       (unsigned long long)rows);
	}
	info = gguf_type_info(t->type);
	if (!llama_gguf_dtype(t->type, &part->type) ||
	    (f32_only && part->type != DTYPE_F32))
		return llama_gguf_fail(r, "tensor '%s' is of type %s (expected %s)", name,
				       info ? info->name : "unknown",
				       f32_only ? "f32" : "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k or q6_k");
	part->data = t->data;
	part->bytes = t->n_bytes;
	return 0;
}

/* The per-layer weights of the model, in llama_weights' order. */
enum { LW_RMS_ATT, LW_WQ, LW_WK, LW_WV, LW_WO, LW_RMS_FFN, LW_W1, LW_W2, LW_W3,
       LW_BQ, LW_BK, LW_BV, LW_N };

/* The GGUF name of each, its [cols, rows] and whether it is F32-only. */
static void llama_gguf_layer_spec(const struct llama_config *c, int which,
				  const char **name, uint64_t *cols,
				  uint64_t *rows)
{
	static const char *const names[LW_N] = {
		"attn_norm.weight", "attn_q.weight", "attn_k.weight",
		"attn_v.weight", "attn_output.weight", "ffn_norm.weight",
		"ffn_gate.weight", "ffn_down.weight", "ffn_up.weight",
		"attn_q.bias", "attn_k.bias", "attn_v.bias",
	};
	uint64_t d = c->dim, kv = c->kv_dim, hid = c->hidden_dim;
	static const int dims_of[LW_N][2] = { { 0, 3 }, { 0, 0 }, { 0, 1 },
		{ 0, 1 }, { 0, 0 }, { 0, 3 }, { 0, 2 }, { 2, 0 }, { 0, 2 },
		{ 0, 3 }, { 1, 3 }, { 1, 3 } };
	uint64_t v[4] = { d, kv, hid, 1 };

	*name = names[which];
	*cols = v[dims_of[which][0]];
	*rows = v[dims_of[which][1]];
}

/* Point t at its layers (parts[0 .. n_layers)). */
static void llama_gguf_stack(struct tensor *t, const struct tensor_part *parts,
			     uint32_t n_layers, uint64_t cols, uint64_t rows)
{
	*t = (struct tensor){
		.type = parts[0].type, .data = parts[0].data,
		.n_layers = n_layers, .rows = (uint32_t)rows, .cols = (uint32_t)cols,
		.layer_bytes = parts[0].bytes, .layers = parts,
	};
}

/* One tensor of a single layer (the embedding, the final norm, the
 * classifier) as a plain tensor. */
static void llama_gguf_single(struct tensor *t, const struct tensor_part *p,
			      uint64_t cols, uint64_t rows)
{
	*t = (struct tensor){
		.type = p->type, .data = p->data, .n_layers = 1,
		.rows = (uint32_t)rows, .cols = (uint32_t)cols,
		.layer_bytes = p->bytes,
	};
}

static int llama_gguf_weights(struct gguf_read *r, struct llama_checkpoint *ck,
			      struct tensor_part *parts)
{
	const struct llama_config *c = &ck->cfg;
	struct llama_weights *w = &ck->w;
	struct tensor *stacked[LW_N] = { &w->rms_att, &w->wq, &w->wk, &w->wv,
		&w->wo, &w->rms_ffn, &w->w1, &w->w2, &w->w3, &w->bq, &w->bk,
		&w->bv };
	bool biases = strcmp(r->arch, "qwen2") == 0;
	struct tensor_part one;
	int rc;

	for (int k = 0; k < LW_N; k++) {
		struct tensor_part *row = parts + (size_t)k * c->n_layers;
		const char *name;
		uint64_t cols, rows;

		if (k >= LW_BQ && !biases)
			break;
		llama_gguf_layer_spec(c, k, &name, &cols, &rows);
		for (uint32_t l = 0; l < c->n_layers; l++) {
			char full[96];

			snprintf(full, sizeof(full), "blk.%u.%s", l, name);
			rc = llama_gguf_tensor(r, full, cols, rows,
					       k == LW_RMS_ATT || k == LW_RMS_FFN || k >= LW_BQ,
					       false, &row[l]);
			if (rc)
				return rc;
		}
		llama_gguf_stack(stacked[k], row, c->n_layers, cols, rows);
	}
	if ((rc = llama_gguf_tensor(r, "token_embd.weight", c->dim, c->vocab, false,
				    false, &one)))
		return rc;
	llama_gguf_single(&w->token_embedding, &one, c->dim, c->vocab);
	if ((rc = llama_gguf_tensor(r, "output_norm.weight", c->dim, 1, true, false,
				    &one)))
		return rc;
	llama_gguf_single(&w->rms_final, &one, c->dim, 1);
	rc = llama_gguf_tensor(r, "output.weight", c->dim, c->vocab, false, true, &one);
	if (rc == -ENOENT) {
		ck->shared_classifier = true;
		w->wcls = w->token_embedding;
		return 0;
	}
	if (rc)
		return rc;
	llama_gguf_single(&w->wcls, &one, c->dim, c->vocab);
	return 0;
}

int llama_read_gguf(struct llama_checkpoint *ck, const unsigned char *data,
		    size_t size, const char *name, char *err, size_t err_len)
{
	struct gguf_read r = { .name = name, .err = err, .err_len = err_len };
	struct tensor_part *parts = NULL;
	int rc;

	rc = gguf_parse(&r.f, data, size, name, err, err_len);
	if (rc)
		return rc;
	rc = llama_gguf_config(&r, &ck->cfg);
	if (!rc) {
		parts = calloc((size_t)LW_N * ck->cfg.n_layers, sizeof(*parts));
		if (!parts)
			rc = llama_gguf_fail(&r, "out of memory for %u layers",
					     ck->cfg.n_layers);
	}
	if (!rc)
		rc = llama_gguf_weights(&r, ck, parts);
	gguf_free(&r.f);
	if (rc) {
		free(parts);
		return rc;
	}
	ck->reader_mem = parts;
	ck->format_version = LLAMA_FORMAT_GGUF;
	return 0;
}
