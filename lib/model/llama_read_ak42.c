/*
 * llama_read_ak42.c - the reader of llama2.c export.py's "ak42" layouts
 * (llama_checkpoint.h): version 1, fp32, and version 2, Q8_0 matrices
 * with fp32 norms.
 *
 * NOTES ON THE DESIGN
 *
 * Version 2 is laid out by one function run twice: first without the data
 * (it only adds up the size, with overflow checks), then, once the size
 * matches the file's, pointing into the mapping.  The norms come first,
 * so the Q8_0 values start 4-byte aligned; scales may not be (see
 * q8_0.c), so they are never read through a float pointer.
 */
#include "model/llama_checkpoint.h"
#include "model/llama_reader.h"
#include "kernels/tensor.h"

#include <errno.h>
#include <stdio.h>

/* The ak42 header fields after the version, common to versions 1 and 2. */
static int llama_ak42_header(struct llama_checkpoint *ck,
			     const unsigned char *data, size_t size,
			     const char *name, char *err, size_t err_len)
{
	int32_t h[LLAMA_H_N];
	unsigned shared;

	if (size < LLAMA_AK42_HEADER_BYTES) {
		snprintf(err, err_len,
			 "checkpoint '%s': %zu bytes, shorter than the %u-byte ak42 header",
			 name, size, LLAMA_AK42_HEADER_BYTES);
		return -EINVAL;
	}
	for (int i = 0; i < LLAMA_H_N; i++)
		h[i] = llama_read_i32(data + 8 + 4 * i);
	shared = data[8 + 4 * LLAMA_H_N];
	if (shared > 1) {
		snprintf(err, err_len,
			 "checkpoint '%s': shared_classifier byte is %u, must be 0 or 1",
			 name, shared);
		return -EINVAL;
	}
	ck->shared_classifier = shared == 1;
	return llama_config_check(&ck->cfg, h, name, err, err_len);
}

/* Point the weights at data, in ak42 version 1 order. */
static void llama_map_ak42(struct llama_checkpoint *ck, const float *p)
{
	const struct llama_config *c = &ck->cfg;
	struct llama_weights *w = &ck->w;
	uint32_t L = c->n_layers, dim = c->dim, hid = c->hidden_dim;
	uint32_t kvd = c->kv_dim;

	w->rms_att = llama_f32_take(&p, L, 1, dim);
	w->rms_ffn = llama_f32_take(&p, L, 1, dim);
	w->rms_final = llama_f32_take(&p, 1, 1, dim);
	w->token_embedding = llama_f32_take(&p, 1, c->vocab, dim);
	w->wq = llama_f32_take(&p, L, dim, dim);
	w->wk = llama_f32_take(&p, L, kvd, dim);
	w->wv = llama_f32_take(&p, L, kvd, dim);
	w->wo = llama_f32_take(&p, L, dim, dim);
	w->w1 = llama_f32_take(&p, L, hid, dim);
	w->w2 = llama_f32_take(&p, L, dim, hid);
	w->w3 = llama_f32_take(&p, L, hid, dim);
	w->wcls = ck->shared_classifier ? w->token_embedding :
					  llama_f32_take(&p, 1, c->vocab, dim);
}

static int llama_parse_ak42_v1(struct llama_checkpoint *ck,
			       const unsigned char *data, size_t size,
			       const char *name, char *err, size_t err_len)
{
	struct llama_config *c = &ck->cfg;
	struct llama_size s = { 0, false };
	uint64_t want;
	int rc;

	rc = llama_ak42_header(ck, data, size, name, err, err_len);
	if (rc)
		return rc;
	llama_size_add(&s, c->vocab, c->dim, ck->shared_classifier ? 1 : 2);
	llama_size_layers(&s, c);
	llama_size_add(&s, 1, c->dim, 1);
	if (s.overflow ||
	    !llama_size_bytes(s.floats, LLAMA_AK42_HEADER_BYTES, &want)) {
		snprintf(err, err_len,
			 "checkpoint '%s': header sizes overflow (dim %u, hidden_dim %u, n_layers %u, vocab_size %u)",
			 name, c->dim, c->hidden_dim, c->n_layers, c->vocab);
		return -EINVAL;
	}
	if (size != want)
		return llama_size_mismatch(name, "ak42", want, size, err,
					   err_len);
	ck->format_version = 1;
	llama_map_ak42(ck, (const float *)(data + LLAMA_AK42_HEADER_BYTES));
	return 0;
}

/*
 * Lay out the next Q8_0 tensor of n_layers [rows][cols] matrices at *at
 * (an offset from the file start): fills t and advances *at.  Returns
 * false on overflow.  With base NULL it only counts.
 */
static bool llama_q8_take(struct tensor *t, const unsigned char *base,
			  uint64_t *at, uint32_t n_layers, uint32_t rows,
			  uint32_t cols, uint32_t group)
{
	uint64_t one = dtype_matrix_bytes(DTYPE_Q8_0, rows, cols, group), all;

	if (!one || __builtin_mul_overflow(one, n_layers, &all) ||
	    __builtin_add_overflow(*at, all, &all) || all > SIZE_MAX)
		return false;
	*t = (struct tensor){
		.type = DTYPE_Q8_0, .data = base ? base + *at : NULL,
		.n_layers = n_layers, .rows = rows, .cols = cols,
		.group = group, .layer_bytes = (size_t)one,
	};
	*at = all;
	return true;
}

/*
 * Lay out a version 2 file of that group size after its header: the
 * norms as F32 tensors, the matrices as Q8_0 ones; *end gets the size
 * it implies.  With data NULL nothing points anywhere.  Returns false
 * on overflow.
 */
static bool llama_lay_out_v2(struct llama_checkpoint *ck,
			     const unsigned char *data, uint32_t gs,
			     uint64_t *end)
{
	const struct llama_config *c = &ck->cfg;
	struct llama_weights *w = &ck->w;
	struct llama_size s = { 0, false };
	uint64_t at;
	uint32_t L = c->n_layers, dim = c->dim, hid = c->hidden_dim;
	uint32_t kvd = c->kv_dim;
	bool ok;

	llama_size_add(&s, 2ull * L + 1, dim, 1);	/* rms_att, rms_ffn, final */
	if (s.overflow || !llama_size_bytes(s.floats, LLAMA_AK42_HEADER_BYTES,
					    &at))
		return false;
	if (data) {
		const float *p = (const float *)(data + LLAMA_AK42_HEADER_BYTES);

		w->rms_att = llama_f32_take(&p, L, 1, dim);
		w->rms_ffn = llama_f32_take(&p, L, 1, dim);
		w->rms_final = llama_f32_take(&p, 1, 1, dim);
	}
	ok = llama_q8_take(&w->token_embedding, data, &at, 1, c->vocab, dim, gs) &&
	     llama_q8_take(&w->wq, data, &at, L, dim, dim, gs) &&
	     llama_q8_take(&w->wk, data, &at, L, kvd, dim, gs) &&
	     llama_q8_take(&w->wv, data, &at, L, kvd, dim, gs) &&
	     llama_q8_take(&w->wo, data, &at, L, dim, dim, gs) &&
	     llama_q8_take(&w->w1, data, &at, L, hid, dim, gs) &&
	     llama_q8_take(&w->w2, data, &at, L, dim, hid, gs) &&
	     llama_q8_take(&w->w3, data, &at, L, hid, dim, gs);
	if (ok && ck->shared_classifier)
		w->wcls = w->token_embedding;
	else if (ok)
		ok = llama_q8_take(&w->wcls, data, &at, 1, c->vocab, dim, gs);
	*end = at;
	return ok;
}

static int llama_parse_ak42_v2(struct llama_checkpoint *ck,
			       const unsigned char *data, size_t size,
			       const char *name, char *err, size_t err_len)
{
	struct llama_config *c = &ck->cfg;
	int32_t group;
	uint64_t want;
	int rc;

	rc = llama_ak42_header(ck, data, size, name, err, err_len);
	if (rc)
		return rc;
	group = llama_read_i32(data + 8 + 4 * LLAMA_H_N + 1);
	if (group <= 0 || c->dim % (uint32_t)group ||
	    c->hidden_dim % (uint32_t)group) {
		snprintf(err, err_len,
			 "checkpoint '%s': group_size is %d, must be positive and divide dim %u and hidden_dim %u",
			 name, (int)group, c->dim, c->hidden_dim);
		return -EINVAL;
	}
	if (!llama_lay_out_v2(ck, NULL, (uint32_t)group, &want)) {
		snprintf(err, err_len,
			 "checkpoint '%s': header sizes overflow (dim %u, hidden_dim %u, n_layers %u, vocab_size %u)",
			 name, c->dim, c->hidden_dim, c->n_layers, c->vocab);
		return -EINVAL;
	}
	if (size != want)
		return llama_size_mismatch(name, "ak42 version 2", want, size,
					   err, err_len);
	ck->format_version = 2;
	llama_lay_out_v2(ck, data, (uint32_t)group, &want);
	return 0;
}

int llama_read_ak42(struct llama_checkpoint *ck, const unsigned char *data,
		    size_t size, const char *name, char *err, size_t err_len)
{
	int32_t version;

	if (size < 8) {
		snprintf(err, err_len,
			 "checkpoint '%s': %zu bytes, shorter than the %u-byte ak42 header",
			 name, size, LLAMA_AK42_HEADER_BYTES);
		return -EINVAL;
	}
	version = llama_read_i32(data + 4);

	if (version == 1)
		return llama_parse_ak42_v1(ck, data, size, name, err, err_len);
	if (version == 2)
		return llama_parse_ak42_v2(ck, data, size, name, err, err_len);
	snprintf(err, err_len,
		 "checkpoint '%s': unknown ak42 version %d (versions 1, fp32, and 2, Q8_0, are read)",
		 name, (int)version);
	return -EINVAL;
}
