/*
 * llama_read_legacy.c - the reader of llama2.c run.c's legacy layout
 * (llama_checkpoint.h): fp32 weights after 7 int32, no magic.
 *
 * NOTES ON THE DESIGN
 *
 * The layout carries RoPE tables nobody reads (run.c skips them).  A
 * file without them is accepted too: whether vocab_size is negative
 * fixes whether wcls is there, so the two candidate sizes differ by the
 * tables' size (seq_len x head_size floats, never 0) and the file size
 * picks one without ambiguity.
 */
#include "model/llama_checkpoint.h"
#include "model/llama_reader.h"
#include "kernels/tensor.h"

#include <errno.h>
#include <stdio.h>

/* Point the weights at data, in legacy order; sizes already checked. */
static void llama_map_legacy(struct llama_checkpoint *ck, const float *p,
			     bool with_rope)
{
	const struct llama_config *c = &ck->cfg;
	struct llama_weights *w = &ck->w;
	uint32_t L = c->n_layers, dim = c->dim, hid = c->hidden_dim;
	uint32_t kvd = c->kv_dim;

	w->token_embedding = llama_f32_take(&p, 1, c->vocab, dim);
	w->rms_att = llama_f32_take(&p, L, 1, dim);
	w->wq = llama_f32_take(&p, L, dim, dim);
	w->wk = llama_f32_take(&p, L, kvd, dim);
	w->wv = llama_f32_take(&p, L, kvd, dim);
	w->wo = llama_f32_take(&p, L, dim, dim);
	w->rms_ffn = llama_f32_take(&p, L, 1, dim);
	w->w1 = llama_f32_take(&p, L, hid, dim);
	w->w2 = llama_f32_take(&p, L, dim, hid);
	w->w3 = llama_f32_take(&p, L, hid, dim);
	w->rms_final = llama_f32_take(&p, 1, 1, dim);
	if (with_rope)
		p += (size_t)c->seq_len * c->head_size;	/* real + imag */
	w->wcls = ck->shared_classifier ? w->token_embedding :
					  llama_f32_take(&p, 1, c->vocab, dim);
}

int llama_read_legacy(struct llama_checkpoint *ck, const unsigned char *data,
		      size_t size, const char *name, char *err,
		      size_t err_len)
{
	struct llama_config *c = &ck->cfg;
	struct llama_size s = { 0, false };
	int32_t h[LLAMA_H_N];
	uint64_t base, with_rope;
	int rc;

	if (size < LLAMA_LEGACY_HEADER_BYTES) {
		snprintf(err, err_len,
			 "checkpoint '%s': %zu bytes, shorter than the %u-byte llama2.c header",
			 name, size, LLAMA_LEGACY_HEADER_BYTES);
		return -EINVAL;
	}
	for (int i = 0; i < LLAMA_H_N; i++)
		h[i] = llama_read_i32(data + 4 * i);
	ck->shared_classifier = h[LLAMA_H_VOCAB] > 0;
	if (h[LLAMA_H_VOCAB] < 0) {
		if (h[LLAMA_H_VOCAB] == INT32_MIN) {
			snprintf(err, err_len,
				 "checkpoint '%s': vocab_size is %d, out of range",
				 name, (int)h[LLAMA_H_VOCAB]);
			return -EINVAL;
		}
		h[LLAMA_H_VOCAB] = -h[LLAMA_H_VOCAB];
	}
	rc = llama_config_check(c, h, name, err, err_len);
	if (rc)
		return rc;
	llama_size_add(&s, c->vocab, c->dim, ck->shared_classifier ? 1 : 2);
	llama_size_layers(&s, c);
	llama_size_add(&s, 1, c->dim, 1);
	base = s.floats;
	llama_size_add(&s, c->seq_len, c->head_size, 1);	/* RoPE tables */
	if (s.overflow ||
	    !llama_size_bytes(s.floats, LLAMA_LEGACY_HEADER_BYTES, &with_rope) ||
	    !llama_size_bytes(base, LLAMA_LEGACY_HEADER_BYTES, &base)) {
		snprintf(err, err_len,
			 "checkpoint '%s': header sizes overflow (dim %u, hidden_dim %u, n_layers %u, vocab_size %u, seq_len %u)",
			 name, c->dim, c->hidden_dim, c->n_layers, c->vocab,
			 c->seq_len);
		return -EINVAL;
	}
	if (size != with_rope && size != base)
		return llama_size_mismatch(name, "legacy", with_rope, size,
					   err, err_len);
	ck->format_version = 0;
	llama_map_legacy(ck, (const float *)(data + LLAMA_LEGACY_HEADER_BYTES),
			 size == with_rope);
	return 0;
}
