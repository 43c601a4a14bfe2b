/*
 * make_gguf.c - write a GGUF file of the llama architecture, from a
 * llama2.c checkpoint or from seeded random weights of any shape, for
 * tests and benchmarks of the GGUF path (issue 25).
 *
 *   make_gguf --out FILE (--checkpoint CKPT |
 *             [--shape stories15M|stories110M]
 *             [--dim D --hidden H --layers L --heads NH --kv-heads NKV
 *              --vocab V --seq-len S] [--separate-classifier] [--seed N])
 *             [--type f32|f16] [--tokenizer tokenizer.bin]
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
 * Tensor types.  A --type is one row encoder of codecs[] below (F32,
 * F16).  The quantized types come from the quantizers of issue 25
 * section 2: each is one more entry (its ggml type, its llama.cpp
 * general.file_type and a function encoding a row of floats into its
 * blocks); the row length must then be a whole number of its blocks,
 * which main() checks for every matrix.
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

#include "kernels/tensor.h"
#include "model/gguf_write.h"
#include "model/llama_checkpoint.h"
#include "model/sim_model.h"
#include "text/tokenizer.h"
#include "tools/llama_shape.h"
#include "util/parse_num.h"

/* ------------------------------------------------------------------------
 * Row encoders: the hook for more tensor types
 */

static void encode_f32(const float *x, uint32_t n, void *out)
{
	memcpy(out, x, (size_t)n * sizeof(float));
}

/* IEEE half, round to nearest even, subnormals kept: the compiler's
 * conversion of _Float16 (GCC >= 12 on x86-64) is exactly that. */
static void encode_f16(const float *x, uint32_t n, void *out)
{
	unsigned char *o = out;

	for (uint32_t i = 0; i < n; i++) {
		_Float16 h = (_Float16)x[i];

		memcpy(o + 2 * (size_t)i, &h, 2);
	}
}

struct row_codec {
	const char *name;	/* --type */
	uint32_t type;		/* enum gguf_tensor_type */
	uint32_t file_type;	/* llama.cpp's general.file_type */
	void (*encode)(const float *x, uint32_t n, void *out);
};

static const struct row_codec codecs[] = {
	{ "f32", GGUF_TENSOR_F32, 0, encode_f32 },
	{ "f16", GGUF_TENSOR_F16, 1, encode_f16 },
	/* quantizers of issue 25 section 2 go here, e.g.
	 * { "q8_0", GGUF_TENSOR_Q8_0, 7, quantize_row_q8_0 } */
};

static const struct row_codec norm_codec = { "f32", GGUF_TENSOR_F32, 0,
					     encode_f32 };

/* ------------------------------------------------------------------------
 * The tensors and where their rows come from
 */

enum which {
	W_EMBED, W_RMS_ATT, W_WQ, W_WK, W_WV, W_WO, W_RMS_FFN, W_W1, W_W2,
	W_W3, W_RMS_FINAL, W_WCLS,
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
		[W_W3] = "ffn_up.weight",
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
	default: *rows = 1; break;	/* the norms */
	}
}

static const struct tensor *ck_tensor(const struct llama_weights *lw,
				      enum which w)
{
	const struct tensor *t[] = {
		&lw->token_embedding, &lw->rms_att, &lw->wq, &lw->wk, &lw->wv,
		&lw->wo, &lw->rms_ffn, &lw->w1, &lw->w2, &lw->w3,
		&lw->rms_final, &lw->wcls,
	};

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
		double half = (norm ? 0.1 : 1.0 / sqrt(cols)) * sqrt(3.0);
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
	const struct row_codec *codec;
	bool separate;		/* output.weight written */
	float rope_base, rms_eps;
	const char *name;
	const struct tokenizer *tok;
};

/* One tensor of the file: which, of which layer. */
struct item {
	enum which w;
	uint32_t l;
};

/* The tensors in file order into it (room for 3 + 9 * layers); the
 * count. */
static size_t plan_items(const struct plan *p, struct item *it)
{
	size_t n = 0;

	it[n++] = (struct item){ W_EMBED, 0 };
	for (uint32_t l = 0; l < p->s.layers; l++)
		for (enum which w = W_RMS_ATT; w <= W_W3; w++)
			it[n++] = (struct item){ w, l };
	it[n++] = (struct item){ W_RMS_FINAL, 0 };
	if (p->separate)
		it[n++] = (struct item){ W_WCLS, 0 };
	return n;
}

static const struct row_codec *codec_of(const struct plan *p, enum which w)
{
	return w == W_RMS_ATT || w == W_RMS_FFN || w == W_RMS_FINAL ?
		&norm_codec : p->codec;
}

static int add_keys(struct gguf_writer *g, const struct plan *p)
{
	const struct shape *s = &p->s;

	gguf_write_str(g, "general.architecture", "llama", 5);
	gguf_write_str(g, "general.name", p->name, strlen(p->name));
	gguf_write_u32(g, "general.file_type", p->codec->file_type);
	gguf_write_u32(g, "llama.vocab_size", s->vocab);
	gguf_write_u32(g, "llama.context_length", s->seq_len);
	gguf_write_u32(g, "llama.embedding_length", s->dim);
	gguf_write_u32(g, "llama.block_count", s->layers);
	gguf_write_u32(g, "llama.feed_forward_length", s->hidden);
	gguf_write_u32(g, "llama.attention.head_count", s->heads);
	gguf_write_u32(g, "llama.attention.head_count_kv", s->kv_heads);
	gguf_write_f32(g, "llama.attention.layer_norm_rms_epsilon", p->rms_eps);
	gguf_write_f32(g, "llama.rope.freq_base", p->rope_base);
	return gguf_write_u32(g, "llama.rope.dimension_count",
			      s->dim / s->heads);
}

/* The llama2.c vocabulary as a GGUF "llama" one (see the file comment). */
static int add_tokenizer(struct gguf_writer *g, const struct tokenizer *t)
{
	uint32_t n = tokenizer_vocab_size(t);
	char **pieces = calloc(n, sizeof(*pieces));
	size_t *lens = calloc(n, sizeof(*lens));
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
		lens[i] = o;
		types[i] = i == 0 ? 2 : i < 3 ? 3 : i < TOKENIZER_MIN_VOCAB ? 6 : 1;
	}
	gguf_write_str(g, "tokenizer.ggml.model", "llama", 5);
	gguf_write_str_array(g, "tokenizer.ggml.tokens", n,
			     (const char *const *)pieces, lens);
	gguf_write_array(g, "tokenizer.ggml.scores", GGUF_VT_F32, n, scores);
	gguf_write_array(g, "tokenizer.ggml.token_type", GGUF_VT_I32, n, types);
	gguf_write_u32(g, "tokenizer.ggml.bos_token_id", 1);
	gguf_write_u32(g, "tokenizer.ggml.eos_token_id", 2);
	gguf_write_u32(g, "tokenizer.ggml.unknown_token_id", 0);
	rc = gguf_write_bool(g, "tokenizer.ggml.add_bos_token", true);
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
		gguf_write_tensor(g, name, codec_of(p, it[i].w)->type,
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
	const struct row_codec *c = codec_of(p, it.w);
	uint32_t rows, cols;
	uint64_t row_bytes, pad;

	tensor_shape(&p->s, it.w, &rows, &cols);
	gguf_type_bytes(c->type, cols, &row_bytes);
	for (uint32_t r = 0; r < rows; r++) {
		get_row(src, it.w, it.l, r, cols, row);
		c->encode(row, cols, enc);
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
	struct item *it = malloc((3 + 9 * (size_t)p->s.layers) * sizeof(*it));
	size_t n = it ? plan_items(p, it) : 0;
	FILE *f = NULL;
	int rc = gguf_writer_init(&g, alignment);

	if (!rc && !it)
		rc = -ENOMEM;
	if (!rc)
		rc = add_keys(&g, p);
	if (!rc && p->tok)
		rc = add_tokenizer(&g, p->tok);
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
		"       [--type f32|f16] [--tokenizer tokenizer.bin] [--alignment A]\n"
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

/* The codec named arg, or NULL after saying which there are. */
static const struct row_codec *find_codec(const char *arg)
{
	for (size_t i = 0; i < sizeof(codecs) / sizeof(codecs[0]); i++)
		if (strcmp(codecs[i].name, arg) == 0)
			return &codecs[i];
	fprintf(stderr, "make_gguf: unknown --type '%s' (f32 or f16)\n", arg);
	return NULL;
}

/* Every matrix row a whole number of the codec's blocks. */
static int rows_check(const struct plan *p)
{
	const struct gguf_type_info *ti = gguf_type_info(p->codec->type);

	if (p->s.dim % ti->block_elems || p->s.hidden % ti->block_elems) {
		fprintf(stderr, "make_gguf: --type %s needs --dim and --hidden multiples of %u\n",
			p->codec->name, ti->block_elems);
		return -1;
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
		{ "tokenizer", required_argument, NULL, 'T' },
		{ "alignment", required_argument, NULL, 'a' },
		{ "rope-base", required_argument, NULL, 'b' },
		{ "rms-eps", required_argument, NULL, 'e' },
		{ "name", required_argument, NULL, 'N' },
		{ "help", no_argument, NULL, 'H' },
		{ NULL, 0, NULL, 0 },
	};
	struct plan p = { .codec = &codecs[0], .rope_base = 10000.0f,
			  .rms_eps = 1e-5f, .name = "dynbatch-make_gguf" };
	struct source src = { NULL, 1 };
	struct llama_checkpoint ck = { 0 };
	struct tokenizer *tok = NULL;
	const char *out = NULL, *ckpt = NULL, *tok_path = NULL;
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
			if (!(p.codec = find_codec(optarg)))
				return 2;
			break;
		case 'T': tok_path = optarg; break;
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
	if (optind < argc || !out || (ckpt && (shape_given || p.separate))) {
		fprintf(stderr, "make_gguf: %s\n",
			!out ? "--out FILE is required" :
			optind < argc ? "unexpected argument" :
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
		printf("make_gguf: wrote %s (llama, %s, dim %u hidden %u layers %u heads %u kv_heads %u vocab %u seq_len %u, %s classifier%s) ",
		       out, p.codec->name, p.s.dim, p.s.hidden, p.s.layers,
		       p.s.heads, p.s.kv_heads, p.s.vocab, p.s.seq_len,
		       p.separate ? "separate" : "tied",
		       tok ? ", tokenizer" : "");
		if (ckpt)
			printf("from %s\n", ckpt);
		else
			printf("seed=%llu\n", (unsigned long long)src.seed);
	}
out:
	tokenizer_free(tok);
	llama_checkpoint_close(&ck);
	return rc;
}
