/*
 * make_gguf.c - write a GGUF file of the llama architecture, from a
 * llama2.c checkpoint or from seeded random weights of any shape, for
 * tests and benchmarks of the GGUF path (issue 25).
 *
 *   make_gguf --out FILE (--checkpoint CKPT |
 *             [--shape stories15M|stories110M]
 *             [--dim D --hidden H --layers L --heads NH --kv-heads NKV
 *              --vocab V --seq-len S] [--separate-classifier] [--seed N])
 *             [--type f32|f16|q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q5_k|q6_k|q4_k_m]
 *             [--arch llama|qwen2] [--tokenizer tokenizer.bin | --vocab-file F.vocab]
 *             [--chat-template FILE]
 *             [--alignment A] [--rope-base F] [--rms-eps F] [--name NAME]
 *
 * Exit status: 0 written, 1 I/O error (the partial file is removed),
 * 2 bad arguments or a checkpoint/tokenizer that does not load.
 *
 * NOTES ON THE DESIGN
 *
 * The file holds what llama.cpp's converter writes for a llama model:
 * general.architecture "llama", the llama.* shape keys, and the tensors
 * token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output,
 * ffn_norm, ffn_gate, ffn_down, ffn_up}, output_norm, output (left out
 * when the classifier is tied to the embedding, as llama2.c's shared
 * classifier is; llama.cpp then uses token_embd).  A matrix of [rows]
 * [cols] (out, in) has GGUF dims {cols, rows}: dims[0] is the row
 * length.  Norms are always F32; the matrices and the embedding take
 * --type.
 *
 * Q and K row order.  llama.cpp's ggml rope (the "normal" mode of the
 * llama architecture) rotates adjacent pairs (2i, 2i+1) of each head,
 * as Meta's original code and llama2.c's run.c do.  Hugging Face stores
 * wq and wk permuted for its rotate-half rope (pairs (i, i + head/2)),
 * so llama.cpp's convert_hf_to_gguf.py permutes their rows back, per
 * head, to the interleaved order; llama2.c's export.py undoes the same
 * permutation when it reads a HF model.  A llama2.c checkpoint's wq/wk
 * are therefore already in the order a GGUF llama file holds, and are
 * written unchanged: a file from this tool and its checkpoint describe
 * the same model under the same adjacent-pair rope.
 *
 * Weights are read a row at a time (a checkpoint's through its type's
 * get_row(), so an ak42 v2 Q8_0 checkpoint works too) and streamed to
 * the file after gguf_write_head(): a 110M-shape model never sits in
 * memory twice.  Random weights: each row comes from its own splitmix64
 * stream, seeded by --seed, the tensor and the row, uniform with
 * deviation 1/sqrt(fan_in) (norms 1 +- 0.1, the embedding 1/sqrt(dim)).
 *
 * Tensor types.  A --type is one entry of ftypes[] below: llama.cpp's
 * general.file_type and the tensor type of the matrices and the
 * embedding, each a row encoder of codecs[] (F32, F16, or a ggml block
 * type through kernels/ggml_quantize.h's round-to-nearest quantizers).
 * q4_k_m mixes as llama.cpp's quantizer does for LLAMA_FTYPE_MOSTLY_
 * Q4_K_M: output.weight (or token_embd when it is the tied output)
 * Q6_K, and attn_v and ffn_down of the layers use_more_bits() picks
 * (the first and last eighth, and every third between) Q6_K, the rest
 * Q4_K.  A K type (256-value blocks) on a row 256 does not divide
 * (288- or 576-wide models) falls back as llama.cpp does: Q4_K to Q5_0,
 * Q5_K to Q5_1, Q6_K to Q8_0.  Every row must then be a whole number
 * of its tensor's blocks, which main() checks for every matrix.  Plain
 * q4_k/q5_k/q6_k are uniform (file types Q4_K_S, Q5_K_S, Q6_K by name
 * only: llama.cpp's _S mixes are not imitated).
 *
 * --arch qwen2 writes general.architecture "qwen2", the qwen2.* keys,
 * and F32 biases blk.N.attn_{q,k,v}.bias (random, deviation 0.1), for
 * random weights only: a qwen2 file's rope is rotate-half, so a
 * llama2.c checkpoint (adjacent pairs, no biases) is not one.
 *
 * Tokenizer.  --tokenizer adds a llama2.c tokenizer.bin as
 * tokenizer.ggml.model "llama": tokens, scores, token_type (1 normal,
 * 2 unknown, 3 control, 6 byte), bos/eos/unknown ids 1/2/0 and
 * add_bos_token true.  llama2.c's export replaced SentencePiece's
 * U+2581 with a space in every piece; it is put back, as a GGUF
 * vocabulary holds it; ids 0..2 are written as <unk>, <s>, </s>.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/fp16.h"
#include "kernels/ggml_quantize.h"
#include "kernels/tensor.h"
#include "model/gguf_write.h"
#include "model/llama_checkpoint.h"
#include "model/sim_model.h"
#include "text/tokenizer.h"
#include "tools/llama_shape.h"
#include "tools/vocab/vocab_file.h"
#include "util/parse_num.h"
#include "util/file_map.h"
#include "util/strbuf.h"

/* ------------------------------------------------------------------------
 * Row encoders: the hook for more tensor types
 */

static void encode_f32(const float *x, uint32_t n, void *out)
{
	memcpy(out, x, (size_t)n * sizeof(float));
}

/* IEEE half, round to nearest even, subnormals kept (kernels/fp16.h,
 * which test_ggml_quants holds to all 65536 halves; the compiler's
 * _Float16 would do too, but clang 14, the asan build's, lacks it). */
static void encode_f16(const float *x, uint32_t n, void *out)
{
	unsigned char *o = out;

	for (uint32_t i = 0; i < n; i++)
		fp16_store(o + 2 * (size_t)i, x[i]);
}

/* One tensor type: floats through encode, or (encode NULL) through
 * ggml_quantize_row() as dt. */
struct row_codec {
	uint32_t type;		/* enum gguf_tensor_type */
	enum dtype dt;
	void (*encode)(const float *x, uint32_t n, void *out);
};

enum codec_id { C_F32, C_F16, C_Q8_0, C_Q4_0, C_Q4_1, C_Q5_0, C_Q5_1,
		C_Q4_K, C_Q5_K, C_Q6_K };

static const struct row_codec codecs[] = {
	[C_F32] = { GGUF_TENSOR_F32, DTYPE_F32, encode_f32 },
	[C_F16] = { GGUF_TENSOR_F16, DTYPE_F16, encode_f16 },
	[C_Q8_0] = { GGUF_TENSOR_Q8_0, DTYPE_GGML_Q8_0, NULL },
	[C_Q4_0] = { GGUF_TENSOR_Q4_0, DTYPE_GGML_Q4_0, NULL },
	[C_Q4_1] = { GGUF_TENSOR_Q4_1, DTYPE_GGML_Q4_1, NULL },
	[C_Q5_0] = { GGUF_TENSOR_Q5_0, DTYPE_GGML_Q5_0, NULL },
	[C_Q5_1] = { GGUF_TENSOR_Q5_1, DTYPE_GGML_Q5_1, NULL },
	[C_Q4_K] = { GGUF_TENSOR_Q4_K, DTYPE_GGML_Q4_K, NULL },
	[C_Q5_K] = { GGUF_TENSOR_Q5_K, DTYPE_GGML_Q5_K, NULL },
	[C_Q6_K] = { GGUF_TENSOR_Q6_K, DTYPE_GGML_Q6_K, NULL },
};

/* A --type: llama.cpp's enum llama_ftype value and the matrices' type. */
struct file_type {
	const char *name;
	uint32_t file_type;	/* general.file_type */
	enum codec_id base;
	bool k_m;		/* the Q4_K_M mix */
};

static const struct file_type ftypes[] = {
	{ "f32", 0, C_F32, false }, { "f16", 1, C_F16, false },
	{ "q4_0", 2, C_Q4_0, false }, { "q4_1", 3, C_Q4_1, false },
	{ "q8_0", 7, C_Q8_0, false }, { "q5_0", 8, C_Q5_0, false },
	{ "q5_1", 9, C_Q5_1, false }, { "q4_k", 14, C_Q4_K, false },
	{ "q4_k_m", 15, C_Q4_K, true }, { "q5_k", 16, C_Q5_K, false },
	{ "q6_k", 18, C_Q6_K, false },
};

static void encode_row(const struct row_codec *c, const float *x, uint32_t n,
		       void *out)
{
	if (c->encode)
		c->encode(x, n, out);
	else
		ggml_quantize_row(c->dt, out, x, n);
}

/* ------------------------------------------------------------------------
 * The tensors and where their rows come from
 */

enum which {
	W_EMBED, W_RMS_ATT, W_WQ, W_WK, W_WV, W_WO, W_RMS_FFN, W_W1, W_W2,
	W_W3, W_BQ, W_BK, W_BV, W_RMS_FINAL, W_WCLS,
};

struct source {
	const struct llama_checkpoint *ck;	/* or NULL: random weights */
	uint64_t seed;
};

/* The GGUF name of tensor w of layer l. */
static void tensor_name(char *buf, size_t len, enum which w, uint32_t l)
{
	static const char *const names[] = {
		[W_EMBED] = "token_embd.weight",
		[W_RMS_ATT] = "attn_norm.weight", [W_WQ] = "attn_q.weight",
		[W_WK] = "attn_k.weight", [W_WV] = "attn_v.weight",
		[W_WO] = "attn_output.weight", [W_RMS_FFN] = "ffn_norm.weight",
		[W_W1] = "ffn_gate.weight", [W_W2] = "ffn_down.weight",
		[W_W3] = "ffn_up.weight", [W_BQ] = "attn_q.bias",
		[W_BK] = "attn_k.bias", [W_BV] = "attn_v.bias",
		[W_RMS_FINAL] = "output_norm.weight", [W_WCLS] = "output.weight",
	};

	if (w == W_EMBED || w == W_RMS_FINAL || w == W_WCLS)
		snprintf(buf, len, "%s", names[w]);
	else
		snprintf(buf, len, "blk.%u.%s", l, names[w]);
}

/* Rows and columns of tensor w (one layer). */
static void tensor_shape(const struct shape *s, enum which w, uint32_t *rows,
			 uint32_t *cols)
{
	uint32_t kvd = s->kv_heads * (s->dim / s->heads);

	*cols = s->dim;
	switch (w) {
	case W_EMBED: case W_WCLS: *rows = s->vocab; break;
	case W_WQ: case W_WO: *rows = s->dim; break;
	case W_WK: case W_WV: *rows = kvd; break;
	case W_W1: case W_W3: *rows = s->hidden; break;
	case W_W2: *rows = s->dim; *cols = s->hidden; break;
	case W_BK: case W_BV: *rows = 1; *cols = kvd; break;
	default: *rows = 1; break;	/* the norms, attn_q.bias */
	}
}

static const struct tensor *ck_tensor(const struct llama_weights *lw,
				      enum which w)
{
	const struct tensor *t[] = {
		[W_EMBED] = &lw->token_embedding, [W_RMS_ATT] = &lw->rms_att,
		[W_WQ] = &lw->wq, [W_WK] = &lw->wk, [W_WV] = &lw->wv,
		[W_WO] = &lw->wo, [W_RMS_FFN] = &lw->rms_ffn, [W_W1] = &lw->w1,
		[W_W2] = &lw->w2, [W_W3] = &lw->w3,
		[W_RMS_FINAL] = &lw->rms_final, [W_WCLS] = &lw->wcls,
	};	/* no biases: a checkpoint is llama only */

	return t[w];
}

/* Row r of tensor w of layer l as floats (cols of them). */
static void get_row(const struct source *src, enum which w, uint32_t l,
		    uint32_t r, uint32_t cols, float *out)
{
	if (src->ck) {
		const struct tensor *t = ck_tensor(&src->ck->w, w);
		struct tensor m = tensor_layer(t, t->n_layers > 1 ? l : 0);

		tensor_ops_get(m.type, LLAMA_KERNEL_PORTABLE)->get_row(out, &m, r);
		return;
	}
	{
		bool norm = w == W_RMS_ATT || w == W_RMS_FFN || w == W_RMS_FINAL;
		bool bias = w == W_BQ || w == W_BK || w == W_BV;
		double half = (norm || bias ? 0.1 : 1.0 / sqrt(cols)) * sqrt(3.0);
		uint64_t st = sim_mix(src->seed ^ (uint64_t)(w + 1) * 0xA24BAED4963EE407ull ^
				      (uint64_t)l * 0x9FB21C651E98DF25ull ^
				      (uint64_t)r * 0xC2B2AE3D27D4EB4Full);

		for (uint32_t i = 0; i < cols; i++) {
			double u = (double)(sim_splitmix64(&st) >> 11) *
				   (1.0 / 9007199254740992.0);

			out[i] = (float)((norm ? 1.0 : 0.0) + (2.0 * u - 1.0) * half);
		}
	}
}

/* ------------------------------------------------------------------------
 * The file
 */

struct plan {
	struct shape s;
	const struct file_type *ft;
	bool qwen2;		/* --arch qwen2: qwen2.* keys and Q/K/V biases */
	bool separate;		/* output.weight written */
	float rope_base, rms_eps;
	const char *name;
	const struct tokenizer *tok;			/* --tokenizer, or */
	const struct tokenizer_vocab_spec *vocab;	/* --vocab, or NULL */
	const char *chat_template;			/* --chat-template's text */
	size_t chat_template_len;
};

/* One tensor of the file: which, of which layer. */
struct item {
	enum which w;
	uint32_t l;
};

/* The tensors in file order into it (room for 3 + 12 * layers); the
 * count. */
static size_t plan_items(const struct plan *p, struct item *it)
{
	size_t n = 0;

	it[n++] = (struct item){ W_EMBED, 0 };
	for (uint32_t l = 0; l < p->s.layers; l++)
		for (enum which w = W_RMS_ATT; w <= (p->qwen2 ? W_BV : W_W3); w++)
			it[n++] = (struct item){ w, l };
	it[n++] = (struct item){ W_RMS_FINAL, 0 };
	if (p->separate)
		it[n++] = (struct item){ W_WCLS, 0 };
	return n;
}

/* llama.cpp's use_more_bits(): the layers of a Q4_K_M file whose attn_v
 * and ffn_down get Q6_K. */
static bool more_bits(uint32_t i, uint32_t n)
{
	return i < n / 8 || i >= 7 * n / 8 || (i >= n / 8 && (i - n / 8) % 3 == 2);
}

/* The type of tensor w of layer l, whose rows are cols long. */
static const struct row_codec *codec_of(const struct plan *p, enum which w,
					uint32_t l, uint32_t cols)
{
	enum codec_id c = p->ft->base;

	if (w == W_RMS_ATT || w == W_RMS_FFN || w == W_RMS_FINAL ||
	    w == W_BQ || w == W_BK || w == W_BV)
		return &codecs[C_F32];
	if (p->ft->k_m && (w == W_WCLS || (w == W_EMBED && !p->separate) ||
			   ((w == W_WV || w == W_W2) && more_bits(l, p->s.layers))))
		c = C_Q6_K;
	/* llama.cpp's fallback for a row 256 does not divide */
	if (cols % 256 && (c == C_Q4_K || c == C_Q5_K || c == C_Q6_K))
		c = c == C_Q4_K ? C_Q5_0 : c == C_Q5_K ? C_Q5_1 : C_Q8_0;
	return &codecs[c];
}

static int add_keys(struct gguf_writer *g, const struct plan *p)
{
	const struct shape *s = &p->s;

	const char *a = p->qwen2 ? "qwen2" : "llama";
	char k[64];

	gguf_write_str(g, "general.architecture", a, strlen(a));
	gguf_write_str(g, "general.name", p->name, strlen(p->name));
	gguf_write_u32(g, "general.file_type", p->ft->file_type);
#define ARCH_KEY(key) (snprintf(k, sizeof(k), "%s." key, a), k)
	gguf_write_u32(g, ARCH_KEY("vocab_size"), s->vocab);
	gguf_write_u32(g, ARCH_KEY("context_length"), s->seq_len);
	gguf_write_u32(g, ARCH_KEY("embedding_length"), s->dim);
	gguf_write_u32(g, ARCH_KEY("block_count"), s->layers);
	gguf_write_u32(g, ARCH_KEY("feed_forward_length"), s->hidden);
	gguf_write_u32(g, ARCH_KEY("attention.head_count"), s->heads);
	gguf_write_u32(g, ARCH_KEY("attention.head_count_kv"), s->kv_heads);
	gguf_write_f32(g, ARCH_KEY("attention.layer_norm_rms_epsilon"), p->rms_eps);
	gguf_write_f32(g, ARCH_KEY("rope.freq_base"), p->rope_base);
	return gguf_write_u32(g, ARCH_KEY("rope.dimension_count"),
			      s->dim / s->heads);
#undef ARCH_KEY
}

/* An id key, left out for none (-1). */
static int add_id(struct gguf_writer *g, const char *key, int32_t id)
{
	return id < 0 ? 0 : gguf_write_u32(g, key, (uint32_t)id);
}

/* A vocabulary (--vocab-file, or llama2.c's below) as the tokenizer.ggml.*
 * keys llama.cpp's converter writes. */
static int add_vocab(struct gguf_writer *g, const struct tokenizer_vocab_spec *v)
{
	size_t *lens = calloc(v->n_tokens, sizeof(*lens));
	size_t *mlens = calloc(v->n_merges + 1, sizeof(*mlens));
	int rc = -ENOMEM;

	if (!lens || !mlens)
		goto out;
	for (uint32_t i = 0; i < v->n_tokens; i++)
		lens[i] = v->token_lens[i];
	for (uint32_t i = 0; i < v->n_merges; i++)
		mlens[i] = v->merge_lens[i];
	gguf_write_str(g, "tokenizer.ggml.model", v->model, strlen(v->model));
	if (v->pre)
		gguf_write_str(g, "tokenizer.ggml.pre", v->pre, strlen(v->pre));
	gguf_write_str_array(g, "tokenizer.ggml.tokens", v->n_tokens, v->tokens, lens);
	if (v->scores)
		gguf_write_array(g, "tokenizer.ggml.scores", GGUF_VT_F32,
				 v->n_tokens, v->scores);
	if (v->token_types)
		gguf_write_array(g, "tokenizer.ggml.token_type", GGUF_VT_I32,
				 v->n_tokens, v->token_types);
	if (v->n_merges)
		gguf_write_str_array(g, "tokenizer.ggml.merges", v->n_merges,
				     v->merges, mlens);
	add_id(g, "tokenizer.ggml.bos_token_id", v->bos_id);
	add_id(g, "tokenizer.ggml.eos_token_id", v->eos_id);
	add_id(g, "tokenizer.ggml.eot_token_id", v->eot_id);
	add_id(g, "tokenizer.ggml.unknown_token_id", v->unk_id);
	add_id(g, "tokenizer.ggml.padding_token_id", v->pad_id);
	gguf_write_bool(g, "tokenizer.ggml.add_bos_token", v->add_bos);
	gguf_write_bool(g, "tokenizer.ggml.add_eos_token", v->add_eos);
	rc = gguf_write_bool(g, "tokenizer.ggml.add_space_prefix",
			     v->add_space_prefix);
out:
	free(lens);
	free(mlens);
	return rc;
}

/* The llama2.c vocabulary as a GGUF "llama" one (see the file comment). */
static int add_tokenizer(struct gguf_writer *g, const struct tokenizer *t)
{
	uint32_t n = tokenizer_vocab_size(t);
	char **pieces = calloc(n, sizeof(*pieces));
	uint32_t *lens = calloc(n, sizeof(*lens));
	float *scores = calloc(n, sizeof(*scores));
	int32_t *types = calloc(n, sizeof(*types));
	static const char *const special[] = { "<unk>", "<s>", "</s>" };
	int rc = -ENOMEM;

	if (!pieces || !lens || !scores || !types)
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		size_t len, o = 0;
		const char *p = tokenizer_raw_piece(t, (int32_t)i, &len, &scores[i]);

		pieces[i] = malloc(len * 3 + 8);	/* a space grows to 3 */
		if (!pieces[i])
			goto out;
		if (i < 3) {
			o = strlen(special[i]);
			memcpy(pieces[i], special[i], o);
		}
		for (size_t k = 0; i >= 3 && k < len; k++) {
			if (p[k] == ' ' && i >= TOKENIZER_MIN_VOCAB) {
				memcpy(pieces[i] + o, "\xe2\x96\x81", 3);
				o += 3;
			} else {
				pieces[i][o++] = p[k];
			}
		}
		lens[i] = (uint32_t)o;
		types[i] = i == 0 ? 2 : i < 3 ? 3 : i < TOKENIZER_MIN_VOCAB ? 6 : 1;
	}
	rc = add_vocab(g, &(struct tokenizer_vocab_spec){
		.model = "llama", .n_tokens = n,
		.tokens = (const char *const *)pieces, .token_lens = lens,
		.scores = scores, .token_types = types,
		.bos_id = 1, .eos_id = 2, .eot_id = -1, .unk_id = 0, .pad_id = -1,
		.add_bos = true, .add_space_prefix = true });
out:
	for (uint32_t i = 0; pieces && i < n; i++)
		free(pieces[i]);
	free(pieces);
	free(lens);
	free(scores);
	free(types);
	return rc;
}

static int add_tensors(struct gguf_writer *g, const struct plan *p,
		       const struct item *it, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t rows, cols;
		uint64_t dims[2];
		char name[64];

		tensor_shape(&p->s, it[i].w, &rows, &cols);
		dims[0] = cols;
		dims[1] = rows;
		tensor_name(name, sizeof(name), it[i].w, it[i].l);
		gguf_write_tensor(g, name, codec_of(p, it[i].w, it[i].l, cols)->type,
				  rows == 1 ? 1 : 2, dims, NULL, NULL);
	}
	return g->err;
}

/* Stream one tensor's rows, encoded, then its padding. */
static int write_tensor_data(FILE *f, const struct plan *p,
			     const struct source *src, struct item it,
			     uint32_t alignment, float *row, void *enc)
{
	static const unsigned char zeros[4096];
	const struct row_codec *c;
	uint32_t rows, cols;
	uint64_t row_bytes, pad;

	tensor_shape(&p->s, it.w, &rows, &cols);
	c = codec_of(p, it.w, it.l, cols);
	gguf_type_bytes(c->type, cols, &row_bytes);
	for (uint32_t r = 0; r < rows; r++) {
		get_row(src, it.w, it.l, r, cols, row);
		encode_row(c, row, cols, enc);
		if (fwrite(enc, 1, (size_t)row_bytes, f) != row_bytes)
			return -EIO;
	}
	pad = gguf_write_pad(row_bytes * rows, alignment);
	if (pad && fwrite(zeros, 1, (size_t)pad, f) != pad)
		return -EIO;
	return 0;
}

static int write_data(FILE *f, const struct plan *p, const struct source *src,
		      const struct item *it, size_t n, uint32_t alignment)
{
	uint32_t max_cols = p->s.dim > p->s.hidden ? p->s.dim : p->s.hidden;
	float *row = malloc((size_t)max_cols * sizeof(float));
	unsigned char *enc = malloc((size_t)max_cols * sizeof(float));
	int rc = row && enc ? 0 : -ENOMEM;

	for (size_t i = 0; i < n && !rc; i++)
		rc = write_tensor_data(f, p, src, it[i], alignment, row, enc);
	free(row);
	free(enc);
	return rc;
}

/* Header, keys and infos into memory, then the data streamed to path. */
static int write_file(const char *path, const struct plan *p,
		      const struct source *src, uint32_t alignment)
{
	struct gguf_writer g;
	struct strbuf head = STRBUF_INIT;
	struct item *it = malloc((3 + 12 * (size_t)p->s.layers) * sizeof(*it));
	size_t n = it ? plan_items(p, it) : 0;
	FILE *f = NULL;
	int rc = gguf_writer_init(&g, alignment);

	if (!rc && !it)
		rc = -ENOMEM;
	if (!rc)
		rc = add_keys(&g, p);
	if (!rc && p->tok)
		rc = add_tokenizer(&g, p->tok);
	if (!rc && p->vocab)
		rc = add_vocab(&g, p->vocab);
	if (!rc && p->chat_template)
		rc = gguf_write_str(&g, "tokenizer.chat_template", p->chat_template,
				    p->chat_template_len);
	if (!rc)
		rc = add_tensors(&g, p, it, n);
	if (!rc)
		rc = gguf_write_head(&g, &head);
	if (rc) {
		fprintf(stderr, "make_gguf: building the header failed: %s\n",
			strerror(-rc));
		goto out;
	}
	f = fopen(path, "wb");
	if (!f) {
		rc = -errno;
		fprintf(stderr, "make_gguf: cannot create '%s': %s\n", path,
			strerror(errno));
		goto out;
	}
	if (fwrite(head.data, 1, head.len, f) != head.len)
		rc = -EIO;
	if (!rc)
		rc = write_data(f, p, src, it, n, alignment);
	if (fclose(f) != 0 && !rc)
		rc = -EIO;
	if (rc) {
		fprintf(stderr, "make_gguf: writing '%s' failed: %s\n", path,
			strerror(-rc));
		unlink(path);
	}
out:
	free(it);
	strbuf_release(&head);
	gguf_writer_release(&g);
	return rc;
}

/* ------------------------------------------------------------------------
 * The command line
 */

static void usage(FILE *out)
{
	fprintf(out,
		"usage: make_gguf --out FILE (--checkpoint CKPT |\n"
		"       [--shape stories15M|stories110M] [--dim D --hidden H --layers L\n"
		"        --heads NH --kv-heads NKV --vocab V --seq-len S]\n"
		"       [--separate-classifier] [--seed N])\n"
		"       [--type f32|f16|q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q5_k|q6_k|q4_k_m]\n"
		"       [--arch llama|qwen2] [--tokenizer tokenizer.bin | --vocab-file F.vocab]\n"
		"       [--chat-template FILE] [--alignment A]\n"
		"       [--rope-base F] [--rms-eps F] [--name NAME]\n");
}

static int parse_float(const char *arg, const char *opt, float *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(arg, &end);
	if (errno || end == arg || *end || !(v > 0) || v > 1e30) {
		fprintf(stderr, "make_gguf: bad %s '%s' (a positive number)\n",
			opt, arg);
		return -1;
	}
	*out = (float)v;
	return 0;
}

/* The --type named arg, or NULL after saying which there are. */
static const struct file_type *find_ftype(const char *arg)
{
	for (size_t i = 0; i < sizeof(ftypes) / sizeof(ftypes[0]); i++)
		if (strcmp(ftypes[i].name, arg) == 0)
			return &ftypes[i];
	fprintf(stderr, "make_gguf: unknown --type '%s' (f32 f16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k q4_k_m)\n",
		arg);
	return NULL;
}

/* Every matrix row a whole number of its tensor's blocks. */
static int rows_check(const struct plan *p)
{
	for (enum which w = W_EMBED; w <= W_WCLS; w++) {
		for (uint32_t l = 0; l < p->s.layers; l++) {
			uint32_t rows, cols;
			const struct row_codec *c;
			const struct gguf_type_info *ti;

			tensor_shape(&p->s, w, &rows, &cols);
			c = codec_of(p, w, l, cols);
			ti = gguf_type_info(c->type);
			if (cols % ti->block_elems) {
				fprintf(stderr, "make_gguf: --type %s: a %s row of %u values is not a whole number of %s blocks of %u\n",
					p->ft->name, w == W_W2 ? "ffn_down" : "dim-wide",
					cols, ti->name, ti->block_elems);
				return -1;
			}
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "out", required_argument, NULL, 'o' },
		{ "checkpoint", required_argument, NULL, 'C' },
		SHAPE_OPTIONS,
		{ "separate-classifier", no_argument, NULL, 'c' },
		{ "seed", required_argument, NULL, 'r' },
		{ "type", required_argument, NULL, 't' },
		{ "arch", required_argument, NULL, 'A' },
		{ "tokenizer", required_argument, NULL, 'T' },
		{ "vocab-file", required_argument, NULL, 'V' },
		{ "chat-template", required_argument, NULL, 'J' },
		{ "alignment", required_argument, NULL, 'a' },
		{ "rope-base", required_argument, NULL, 'b' },
		{ "rms-eps", required_argument, NULL, 'e' },
		{ "name", required_argument, NULL, 'N' },
		{ "help", no_argument, NULL, 'H' },
		{ NULL, 0, NULL, 0 },
	};
	struct plan p = { .ft = &ftypes[0], .rope_base = 10000.0f,
			  .rms_eps = 1e-5f, .name = "dynbatch-make_gguf" };
	struct source src = { NULL, 1 };
	struct llama_checkpoint ck = { 0 };
	struct tokenizer *tok = NULL;
	const char *out = NULL, *ckpt = NULL, *tok_path = NULL, *vocab_path = NULL;
	const char *tmpl_path = NULL;
	struct vocab_file vf;
	bool vf_loaded = false;
	struct file_map tmpl = { 0 };	/* --chat-template's file */
	uint32_t alignment = GGUF_DEFAULT_ALIGNMENT;
	bool shape_given = false;
	char err[512];
	int c, rc = 2;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'o': out = optarg; break;
		case 'C': ckpt = optarg; break;
		case 'c': p.separate = true; break;
		case 'r':
			if (parse_u64(optarg, 0, UINT64_MAX, &src.seed)) {
				fprintf(stderr, "make_gguf: bad --seed '%s'\n", optarg);
				return 2;
			}
			break;
		case 't':
			if (!(p.ft = find_ftype(optarg)))
				return 2;
			break;
		case 'A':
			if (strcmp(optarg, "qwen2") && strcmp(optarg, "llama")) {
				fprintf(stderr, "make_gguf: unknown --arch '%s' (llama or qwen2)\n",
					optarg);
				return 2;
			}
			p.qwen2 = strcmp(optarg, "qwen2") == 0;
			break;
		case 'T': tok_path = optarg; break;
		case 'V': vocab_path = optarg; break;
		case 'J': tmpl_path = optarg; break;
		case 'a':
			if (parse_u32(optarg, 1, 1u << 20, &alignment) ||
			    (alignment & (alignment - 1))) {
				fprintf(stderr, "make_gguf: bad --alignment '%s' (a power of two up to 2^20)\n",
					optarg);
				return 2;
			}
			break;
		case 'b':
			if (parse_float(optarg, "--rope-base", &p.rope_base))
				return 2;
			break;
		case 'e':
			if (parse_float(optarg, "--rms-eps", &p.rms_eps))
				return 2;
			break;
		case 'N': p.name = optarg; break;
		case 'H': usage(stdout); return 0;
		default:
			switch (shape_option(&p.s, c, optarg, "make_gguf")) {
			case 1: shape_given = true; break;
			case 0: usage(stderr); return 2;
			default: return 2;
			}
		}
	}
	if (optind < argc || !out || (ckpt && (shape_given || p.separate || p.qwen2)) ||
	    (tok_path && vocab_path)) {
		fprintf(stderr, "make_gguf: %s\n",
			!out ? "--out FILE is required" :
			tok_path && vocab_path ? "--tokenizer or --vocab-file, not both" :
			optind < argc ? "unexpected argument" :
			p.qwen2 ? "--arch qwen2 takes random weights, not --checkpoint" :
			"--checkpoint takes its shape from the file: no shape options");
		usage(stderr);
		return 2;
	}
	if (ckpt) {
		if (llama_checkpoint_open(&ck, ckpt, err, sizeof(err))) {
			fprintf(stderr, "make_gguf: %s\n", err);
			return 2;
		}
		src.ck = &ck;
		p.s = (struct shape){ ck.cfg.dim, ck.cfg.hidden_dim,
				      ck.cfg.n_layers, ck.cfg.n_heads,
				      ck.cfg.n_kv_heads, ck.cfg.vocab,
				      ck.cfg.seq_len };
		p.separate = !ck.shared_classifier;
	}
	if (vocab_path) {	/* the vocabulary sets the model's size */
		if (vocab_file_load(vocab_path, &vf)) {
			vocab_file_free(&vf);
			fprintf(stderr, "make_gguf: --vocab-file '%s': not a vocabulary "
				"file (tests/tokenizers/export_vocab.js's)\n", vocab_path);
			goto out;
		}
		vf_loaded = true;
		if (ckpt && ck.cfg.vocab != vf.spec.n_tokens) {
			fprintf(stderr, "make_gguf: --vocab-file '%s' has %u tokens, the "
				"checkpoint %u\n", vocab_path, vf.spec.n_tokens,
				ck.cfg.vocab);
			goto out;
		}
		p.s.vocab = vf.spec.n_tokens;
		p.vocab = &vf.spec;
	}
	if (tmpl_path) {
		if (file_map_open(&tmpl, tmpl_path, "--chat-template file", err,
				  sizeof(err))) {
			fprintf(stderr, "make_gguf: %s\n", err);
			goto out;
		}
		p.chat_template = tmpl.data;
		p.chat_template_len = tmpl.size;
	}
	if (shape_check(&p.s, "make_gguf") || rows_check(&p))
		goto out;
	if (tok_path) {
		if (tokenizer_load(tok_path, p.s.vocab, &tok, err, sizeof(err))) {
			fprintf(stderr, "make_gguf: %s\n", err);
			goto out;
		}
		p.tok = tok;
	}
	rc = write_file(out, &p, &src, alignment) ? 1 : 0;
	if (rc == 0) {
		printf("make_gguf: wrote %s (%s, %s, dim %u hidden %u layers %u heads %u kv_heads %u vocab %u seq_len %u, %s classifier%s) ",
		       out, p.qwen2 ? "qwen2" : "llama", p.ft->name, p.s.dim, p.s.hidden, p.s.layers,
		       p.s.heads, p.s.kv_heads, p.s.vocab, p.s.seq_len,
		       p.separate ? "separate" : "tied",
		       tok || vocab_path ? ", tokenizer" : "");
		if (ckpt)
			printf("from %s\n", ckpt);
		else
			printf("seed=%llu\n", (unsigned long long)src.seed);
	}
out:
	tokenizer_free(tok);
	if (vf_loaded)
		vocab_file_free(&vf);
	file_map_close(&tmpl);
	llama_checkpoint_close(&ck);
	return rc;
}
