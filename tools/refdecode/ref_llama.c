/*
 * ref_llama.c - a naive llama forward pass, the reference decoder's model
 * for `refdecode --model llama:PATH`.
 *
 * NOTES ON THE DESIGN
 *
 * This file is an oracle for the engine's llama model (common/llama_*.c),
 * so it is written from the description of llama2.c's checkpoint formats
 * and transformer alone and shares no code with the engine:
 *
 *  - Loading: fread() into one float array.  The legacy format is seven
 *    int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
 *    seq_len; a negative vocab_size means a separate classifier at the
 *    end), then token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2,
 *    w3, rms_final, the RoPE tables freq_cis_real and freq_cis_imag
 *    ([seq_len][head_size / 2] each, skipped: RoPE is computed) and wcls
 *    when separate.  Version 1 ("ak42") is a 256-byte header (magic
 *    0x616b3432, version 1, the seven int32, a uint8 shared_classifier)
 *    then rms_att, rms_ffn, rms_final, token_embedding, wq, wk, wv, wo,
 *    w1, w2, w3 and wcls when not shared.  Version 2 (export.py's
 *    version2_export, int8 Q8_0) adds an int32 group_size after the
 *    shared byte; then fp32 rms_att, rms_ffn, rms_final; then
 *    token_embedding, wq, wk, wv, wo, w1, w2, w3 and wcls when not
 *    shared, each layer's matrix stored as its int8 values q then one
 *    fp32 scale s per group_size consecutive values.  It is dequantized
 *    (w = q * s, rounded to float) into the version 1 layout as it is
 *    read, so the forward below never sees int8: the engine's Q8_0
 *    kernels are checked against plain dequantized math.  The file size
 *    must be exactly what the header implies: a truncated or padded file
 *    is refused.
 *
 *  - Computing: every call starts from the token embeddings and runs all
 *    positions through all layers; nothing is kept between calls.  Every
 *    activation is a double and every dot product accumulates in double
 *    (weights stay float, as stored), so rounding in the reference is far
 *    below the engine's float32 rounding and a disagreement between the
 *    two is the engine's, or a genuine near-tie.
 *
 *  - The transformer: RMSNorm (eps 1e-5) before attention, before the
 *    feed-forward and at the end; RoPE on adjacent pairs (2i, 2i + 1)
 *    within each head with frequency 1 / 10000^((2i mod head_size) /
 *    head_size) and angle position x frequency, on q and k; grouped-query
 *    attention (query head h reads kv head h / (n_heads / n_kv_heads)),
 *    causal, scores scaled by 1 / sqrt(head_size); SwiGLU feed-forward
 *    w2(silu(w1 x) * w3 x); residual adds; the classifier (token_embedding
 *    when shared).
 *
 *  - Speed: matrix products go row by row over all positions at once, so
 *    a weight row is read once per call, not once per position; the dot
 *    product keeps four partial sums so the adds pipeline.  Nothing else
 *    is tuned: the reference must stay easy to read.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tools/refdecode/ref_llama.h"

#define REF_LLAMA_MAGIC 0x616b3432u	/* "ak42" as a little-endian uint32 */
#define REF_LLAMA_V1_HEADER 256
#define REF_LLAMA_RMS_EPS 1e-5
#define REF_LLAMA_ROPE_BASE 10000.0
/* Refuse shapes that cannot be real, before any size arithmetic. */
#define REF_LLAMA_MAX_DIM (1u << 20)

struct ref_llama {
	struct ref_llama_shape s;
	uint32_t head_size;
	uint32_t kv_dim;
	uint32_t group;		/* version 2: values per scale */
	float *data;		/* every weight, as read */
	/* Views into data; per-layer arrays are [n_layers][...]. */
	const float *token_embedding;	/* [vocab][dim] */
	const float *rms_att;		/* [L][dim] */
	const float *wq;		/* [L][dim][dim] */
	const float *wk;		/* [L][kv_dim][dim] */
	const float *wv;		/* [L][kv_dim][dim] */
	const float *wo;		/* [L][dim][dim] */
	const float *rms_ffn;		/* [L][dim] */
	const float *w1;		/* [L][hidden][dim] */
	const float *w2;		/* [L][dim][hidden] */
	const float *w3;		/* [L][hidden][dim] */
	const float *rms_final;		/* [dim] */
	const float *wcls;		/* [vocab][dim] */
};

const struct ref_llama_shape *ref_llama_shape(const struct ref_llama *m)
{
	return &m->s;
}

/* ------------------------------------------------------------------------
 * Loading
 */

/* Check the header's numbers; fills head_size and kv_dim. */
static int check_shape(struct ref_llama *m, const char *path, char *err,
		       size_t err_len)
{
	const struct ref_llama_shape *s = &m->s;

	if (!s->dim || !s->hidden_dim || !s->n_layers || !s->n_heads ||
	    !s->n_kv_heads || !s->vocab || !s->seq_len ||
	    s->dim > REF_LLAMA_MAX_DIM || s->hidden_dim > REF_LLAMA_MAX_DIM ||
	    s->n_layers > 4096 || s->vocab > (1u << 24) ||
	    s->seq_len > (1u << 24)) {
		snprintf(err, err_len,
			 "%s: implausible header (dim %u, hidden_dim %u, n_layers %u, n_heads %u, n_kv_heads %u, vocab %u, seq_len %u)",
			 path, s->dim, s->hidden_dim, s->n_layers, s->n_heads,
			 s->n_kv_heads, s->vocab, s->seq_len);
		return -EINVAL;
	}
	if (s->dim % s->n_heads || (s->dim / s->n_heads) % 2) {
		snprintf(err, err_len,
			 "%s: dim %u is not n_heads %u times an even head size",
			 path, s->dim, s->n_heads);
		return -EINVAL;
	}
	if (s->n_kv_heads > s->n_heads || s->n_heads % s->n_kv_heads) {
		snprintf(err, err_len,
			 "%s: n_heads %u is not a multiple of n_kv_heads %u",
			 path, s->n_heads, s->n_kv_heads);
		return -EINVAL;
	}
	m->head_size = s->dim / s->n_heads;
	m->kv_dim = m->head_size * s->n_kv_heads;
	return 0;
}

/* Read the header of either format; *offset gets where weights start. */
static int read_header(struct ref_llama *m, FILE *f, const char *path,
		       long *offset, char *err, size_t err_len)
{
	struct ref_llama_shape *s = &m->s;
	uint32_t magic;
	int32_t h[7], version;
	uint8_t shared;

	if (fread(&magic, sizeof(magic), 1, f) != 1)
		goto short_read;
	if (magic == REF_LLAMA_MAGIC) {
		if (fread(&version, sizeof(version), 1, f) != 1)
			goto short_read;
		if (version != 1 && version != 2) {
			snprintf(err, err_len,
				 "%s: ak42 checkpoint version %d is not supported (1: float32, 2: Q8_0)",
				 path, version);
			return -EINVAL;
		}
		if (fread(h, sizeof(h), 1, f) != 1 ||
		    fread(&shared, 1, 1, f) != 1)
			goto short_read;
		if (version == 2) {
			int32_t group;

			if (fread(&group, sizeof(group), 1, f) != 1)
				goto short_read;
			if (group <= 0 || h[0] <= 0 || h[1] <= 0 ||
			    h[0] % group || h[1] % group) {
				snprintf(err, err_len,
					 "%s: group_size %d does not divide dim %d and hidden_dim %d",
					 path, group, h[0], h[1]);
				return -EINVAL;
			}
			m->group = (uint32_t)group;
		}
		s->format = version;
		s->shared_classifier = shared != 0;
		*offset = REF_LLAMA_V1_HEADER;
	} else {
		if (fseek(f, 0, SEEK_SET) || fread(h, sizeof(h), 1, f) != 1)
			goto short_read;
		s->format = 0;
		s->shared_classifier = h[5] > 0;
		if (h[5] < 0 && h[5] != INT32_MIN)
			h[5] = -h[5];
		*offset = sizeof(h);
	}
	for (int i = 0; i < 7; i++) {
		if (h[i] <= 0) {
			snprintf(err, err_len,
				 "%s: header field %d is %d, not a positive size",
				 path, i, h[i]);
			return -EINVAL;
		}
	}
	s->dim = (uint32_t)h[0];
	s->hidden_dim = (uint32_t)h[1];
	s->n_layers = (uint32_t)h[2];
	s->n_heads = (uint32_t)h[3];
	s->n_kv_heads = (uint32_t)h[4];
	s->vocab = (uint32_t)h[5];
	s->seq_len = (uint32_t)h[6];
	return check_shape(m, path, err, err_len);
short_read:
	snprintf(err, err_len, "%s: too short for a checkpoint header", path);
	return -EINVAL;
}

/* Take the next n floats of data as a view (data NULL: count only). */
static const float *take(const struct ref_llama *m, uint64_t *at, uint64_t n)
{
	const float *v = m->data ? m->data + *at : NULL;

	*at += n;
	return v;
}

/*
 * Point the views into data in the file's order; returns the number of
 * floats the shape needs.  With data NULL it only counts.
 */
static uint64_t lay_out(struct ref_llama *m)
{
	const struct ref_llama_shape *s = &m->s;
	uint64_t dim = s->dim, hid = s->hidden_dim, L = s->n_layers;
	uint64_t kv = m->kv_dim, voc = s->vocab, at = 0;

	if (s->format == 0) {
		m->token_embedding = take(m, &at, voc * dim);
		m->rms_att = take(m, &at, L * dim);
		m->wq = take(m, &at, L * dim * dim);
		m->wk = take(m, &at, L * kv * dim);
		m->wv = take(m, &at, L * kv * dim);
		m->wo = take(m, &at, L * dim * dim);
		m->rms_ffn = take(m, &at, L * dim);
		m->w1 = take(m, &at, L * hid * dim);
		m->w2 = take(m, &at, L * dim * hid);
		m->w3 = take(m, &at, L * hid * dim);
		m->rms_final = take(m, &at, dim);
		/* freq_cis_real and freq_cis_imag: RoPE is computed instead. */
		take(m, &at, 2 * (uint64_t)s->seq_len * (m->head_size / 2));
	} else {
		m->rms_att = take(m, &at, L * dim);
		m->rms_ffn = take(m, &at, L * dim);
		m->rms_final = take(m, &at, dim);
		m->token_embedding = take(m, &at, voc * dim);
		m->wq = take(m, &at, L * dim * dim);
		m->wk = take(m, &at, L * kv * dim);
		m->wv = take(m, &at, L * kv * dim);
		m->wo = take(m, &at, L * dim * dim);
		m->w1 = take(m, &at, L * hid * dim);
		m->w2 = take(m, &at, L * dim * hid);
		m->w3 = take(m, &at, L * hid * dim);
	}
	m->wcls = s->shared_classifier ? m->token_embedding :
		  take(m, &at, voc * dim);
	return at;
}

/* A version 2 file's Q8_0 tensors, in file order: layers, rows, cols. */
static int q8_tensors(const struct ref_llama *m, uint64_t t[9][3])
{
	const struct ref_llama_shape *s = &m->s;
	uint64_t d = s->dim, h = s->hidden_dim, kv = m->kv_dim, L = s->n_layers;
	uint64_t list[9][3] = {
		{ 1, s->vocab, d }, { L, d, d }, { L, kv, d }, { L, kv, d },
		{ L, d, d }, { L, h, d }, { L, d, h }, { L, h, d },
		{ 1, s->vocab, d },
	};

	memcpy(t, list, sizeof(list));
	return s->shared_classifier ? 8 : 9;
}

/* Bytes of a version 2 file of m's shape (header included). */
static uint64_t q8_file_bytes(const struct ref_llama *m)
{
	uint64_t t[9][3], bytes = REF_LLAMA_V1_HEADER;
	int n = q8_tensors(m, t);

	bytes += (2 * (uint64_t)m->s.n_layers + 1) * m->s.dim * sizeof(float);
	for (int i = 0; i < n; i++) {
		uint64_t values = t[i][1] * t[i][2];

		bytes += t[i][0] * (values + values / m->group * sizeof(float));
	}
	return bytes;
}

/*
 * Read a version 2 file's weights (f just past the header) into m->data
 * in the version 1 order, dequantizing each Q8_0 matrix.
 */
static int q8_read(struct ref_llama *m, FILE *f)
{
	uint64_t t[9][3], at = (2 * (uint64_t)m->s.n_layers + 1) * m->s.dim;
	int n = q8_tensors(m, t);
	int8_t *q = NULL;
	float *scale = NULL;
	int rc = -EIO;

	if (fread(m->data, sizeof(float), at, f) != at)
		return -EIO;
	for (int i = 0; i < n; i++) {
		uint64_t values = t[i][1] * t[i][2], groups = values / m->group;

		free(q);
		free(scale);
		q = malloc(values);
		scale = malloc(groups * sizeof(float));
		if (!q || !scale) {
			rc = -ENOMEM;
			goto out;
		}
		for (uint64_t l = 0; l < t[i][0]; l++) {
			if (fread(q, 1, values, f) != values ||
			    fread(scale, sizeof(float), groups, f) != groups)
				goto out;
			for (uint64_t j = 0; j < values; j++)
				m->data[at + j] = (float)((double)q[j] *
							  scale[j / m->group]);
			at += values;
		}
	}
	rc = 0;
out:
	free(q);
	free(scale);
	return rc;
}

struct ref_llama *ref_llama_load(const char *path, char *err, size_t err_len)
{
	struct ref_llama *m = calloc(1, sizeof(*m));
	struct stat st;
	uint64_t n_floats, want;
	long offset;
	FILE *f;

	if (!m) {
		snprintf(err, err_len, "out of memory");
		return NULL;
	}
	/* a FIFO would block fopen() until a writer came */
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		snprintf(err, err_len, "%s: not a regular file", path);
		free(m);
		return NULL;
	}
	f = fopen(path, "rb");
	if (!f) {
		snprintf(err, err_len, "%s: %s", path, strerror(errno));
		free(m);
		return NULL;
	}
	if (fstat(fileno(f), &st)) {
		snprintf(err, err_len, "%s: %s", path, strerror(errno));
		goto fail;
	}
	if (read_header(m, f, path, &offset, err, err_len))
		goto fail;
	/* data is still NULL: this only counts the floats of the shape. */
	n_floats = lay_out(m);
	want = m->s.format == 2 ? q8_file_bytes(m) :
		(uint64_t)offset + n_floats * sizeof(float);
	if ((uint64_t)st.st_size != want) {
		snprintf(err, err_len,
			 "%s: %s checkpoint of this shape is %llu bytes, the file has %llu",
			 path, m->s.format == 2 ? "an ak42 version 2" :
			 m->s.format ? "an ak42 version 1" : "a legacy",
			 (unsigned long long)want,
			 (unsigned long long)st.st_size);
		goto fail;
	}
	m->data = malloc(n_floats * sizeof(float));
	if (!m->data) {
		snprintf(err, err_len, "%s: out of memory for %llu weights",
			 path, (unsigned long long)n_floats);
		goto fail;
	}
	if (fseek(f, offset, SEEK_SET) ||
	    (m->s.format == 2 ? q8_read(m, f) != 0 :
	     fread(m->data, sizeof(float), n_floats, f) != n_floats)) {
		snprintf(err, err_len, "%s: read error", path);
		goto fail;
	}
	fclose(f);
	lay_out(m);
	return m;
fail:
	fclose(f);
	ref_llama_free(m);
	return NULL;
}

void ref_llama_free(struct ref_llama *m)
{
	if (!m)
		return;
	free(m->data);
	free(m);
}

/* ------------------------------------------------------------------------
 * The forward pass
 */

/* sum w[i] * x[i], in double, four partial sums. */
static double dot(const float *w, const double *x, uint32_t n)
{
	double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
	uint32_t i = 0;

	for (; i + 4 <= n; i += 4) {
		a0 += (double)w[i] * x[i];
		a1 += (double)w[i + 1] * x[i + 1];
		a2 += (double)w[i + 2] * x[i + 2];
		a3 += (double)w[i + 3] * x[i + 3];
	}
	for (; i < n; i++)
		a0 += (double)w[i] * x[i];
	return (a0 + a1) + (a2 + a3);
}

/*
 * out[p][r] = W[r] . in[p] for n positions; W is [rows][cols], in is
 * [n][cols], out is [n][rows].
 */
static void matmul(double *out, const double *in, const float *w,
		   uint32_t n, uint32_t rows, uint32_t cols)
{
	for (uint32_t r = 0; r < rows; r++) {
		const float *wr = w + (uint64_t)r * cols;

		for (uint32_t p = 0; p < n; p++)
			out[(uint64_t)p * rows + r] =
				dot(wr, in + (uint64_t)p * cols, cols);
	}
}

/* out = weight * x / sqrt(mean(x^2) + eps), one vector of dim. */
static void rmsnorm(double *out, const double *x, const float *weight,
		    uint32_t dim)
{
	double ss = 0;

	for (uint32_t i = 0; i < dim; i++)
		ss += x[i] * x[i];
	ss = 1.0 / sqrt(ss / dim + REF_LLAMA_RMS_EPS);
	for (uint32_t i = 0; i < dim; i++)
		out[i] = (double)weight[i] * (x[i] * ss);
}

/* Rotate the pairs (2i, 2i + 1) of a vector of len (whole heads). */
static void rope(double *v, uint32_t len, uint32_t head_size, uint32_t pos)
{
	for (uint32_t i = 0; i < len; i += 2) {
		double freq = 1.0 / pow(REF_LLAMA_ROPE_BASE,
					(double)(i % head_size) / head_size);
		double angle = pos * freq, c = cos(angle), s = sin(angle);
		double a = v[i], b = v[i + 1];

		v[i] = a * c - b * s;
		v[i + 1] = a * s + b * c;
	}
}

/* Scratch for one call: every array holds all n positions. */
struct fwd {
	double *x, *xb, *q, *k, *v, *att, *h1, *h3, *scores;
};

static void fwd_free(struct fwd *f)
{
	free(f->x);
	free(f->xb);
	free(f->q);
	free(f->k);
	free(f->v);
	free(f->att);
	free(f->h1);
	free(f->h3);
	free(f->scores);
}

static int fwd_alloc(struct fwd *f, const struct ref_llama *m, uint32_t n)
{
	uint64_t dim = m->s.dim, kv = m->kv_dim, hid = m->s.hidden_dim;

	memset(f, 0, sizeof(*f));
	f->x = malloc(n * dim * sizeof(double));
	f->xb = malloc(n * (dim > hid ? dim : hid) * sizeof(double));
	f->q = malloc(n * dim * sizeof(double));
	f->k = malloc(n * kv * sizeof(double));
	f->v = malloc(n * kv * sizeof(double));
	f->att = malloc(n * dim * sizeof(double));
	f->h1 = malloc(n * hid * sizeof(double));
	f->h3 = malloc(n * hid * sizeof(double));
	f->scores = malloc(n * sizeof(double));
	if (!f->x || !f->xb || !f->q || !f->k || !f->v || !f->att || !f->h1 ||
	    !f->h3 || !f->scores) {
		fwd_free(f);
		return -ENOMEM;
	}
	return 0;
}

/* Causal attention of every position and head: att = softmax(qk) v. */
static void attention(const struct ref_llama *m, struct fwd *f, uint32_t n)
{
	uint32_t hs = m->head_size, dim = m->s.dim, kv = m->kv_dim;
	uint32_t group = m->s.n_heads / m->s.n_kv_heads;
	double scale = 1.0 / sqrt((double)hs);

	for (uint32_t p = 0; p < n; p++) {
		for (uint32_t h = 0; h < m->s.n_heads; h++) {
			const double *q = f->q + (uint64_t)p * dim + h * hs;
			uint32_t kv_off = (h / group) * hs;
			double *out = f->att + (uint64_t)p * dim + h * hs;
			double max = -INFINITY, sum = 0;

			for (uint32_t t = 0; t <= p; t++) {
				const double *k = f->k + (uint64_t)t * kv + kv_off;
				double s = 0;

				for (uint32_t i = 0; i < hs; i++)
					s += q[i] * k[i];
				f->scores[t] = s * scale;
				if (f->scores[t] > max)
					max = f->scores[t];
			}
			for (uint32_t t = 0; t <= p; t++) {
				f->scores[t] = exp(f->scores[t] - max);
				sum += f->scores[t];
			}
			for (uint32_t i = 0; i < hs; i++)
				out[i] = 0;
			for (uint32_t t = 0; t <= p; t++) {
				const double *v = f->v + (uint64_t)t * kv + kv_off;
				double a = f->scores[t] / sum;

				for (uint32_t i = 0; i < hs; i++)
					out[i] += a * v[i];
			}
		}
	}
}

static void layer(const struct ref_llama *m, struct fwd *f, uint32_t l,
		  uint32_t n)
{
	uint64_t dim = m->s.dim, kv = m->kv_dim, hid = m->s.hidden_dim;

	for (uint32_t p = 0; p < n; p++)
		rmsnorm(f->xb + p * dim, f->x + p * dim, m->rms_att + l * dim,
			(uint32_t)dim);
	matmul(f->q, f->xb, m->wq + l * dim * dim, n, dim, dim);
	matmul(f->k, f->xb, m->wk + l * kv * dim, n, kv, dim);
	matmul(f->v, f->xb, m->wv + l * kv * dim, n, kv, dim);
	for (uint32_t p = 0; p < n; p++) {
		rope(f->q + p * dim, dim, m->head_size, p);
		rope(f->k + p * kv, kv, m->head_size, p);
	}
	attention(m, f, n);
	/* x += wo att, through xb */
	matmul(f->xb, f->att, m->wo + l * dim * dim, n, dim, dim);
	for (uint64_t i = 0; i < n * dim; i++)
		f->x[i] += f->xb[i];

	for (uint32_t p = 0; p < n; p++)
		rmsnorm(f->xb + p * dim, f->x + p * dim, m->rms_ffn + l * dim,
			(uint32_t)dim);
	matmul(f->h1, f->xb, m->w1 + l * hid * dim, n, hid, dim);
	matmul(f->h3, f->xb, m->w3 + l * hid * dim, n, hid, dim);
	for (uint64_t i = 0; i < n * hid; i++) {
		double a = f->h1[i];

		f->h1[i] = a / (1.0 + exp(-a)) * f->h3[i];	/* silu(w1) * w3 */
	}
	matmul(f->xb, f->h1, m->w2 + l * dim * hid, n, dim, hid);
	for (uint64_t i = 0; i < n * dim; i++)
		f->x[i] += f->xb[i];
}

int ref_llama_forward(const struct ref_llama *m, const int32_t *tokens,
		      uint32_t n, uint32_t first_out, double *logits)
{
	uint64_t dim = m->s.dim;
	uint32_t n_out;
	struct fwd f;

	if (n < 1 || n > m->s.seq_len || first_out >= n)
		return -EINVAL;
	for (uint32_t p = 0; p < n; p++)
		if (tokens[p] < 0 || (uint32_t)tokens[p] >= m->s.vocab)
			return -EINVAL;
	if (fwd_alloc(&f, m, n))
		return -ENOMEM;
	for (uint32_t p = 0; p < n; p++)
		for (uint64_t i = 0; i < dim; i++)
			f.x[p * dim + i] =
				m->token_embedding[(uint64_t)tokens[p] * dim + i];
	for (uint32_t l = 0; l < m->s.n_layers; l++)
		layer(m, &f, l, n);
	n_out = n - first_out;
	for (uint32_t p = 0; p < n_out; p++)
		rmsnorm(f.xb + p * dim, f.x + (first_out + p) * dim,
			m->rms_final, (uint32_t)dim);
	matmul(logits, f.xb, m->wcls, n_out, m->s.vocab, (uint32_t)dim);
	fwd_free(&f);
	return 0;
}
