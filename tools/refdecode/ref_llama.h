/*
 * ref_llama.h - a naive llama forward pass for the reference decoder
 * (refdecode --model llama:PATH), written apart from the engine's model.
 *
 * It reads a llama2.c checkpoint (the legacy format or export.py's
 * "ak42" version 1, fp32, or 2, Q8_0, dequantized on load) with plain
 * fread() and computes logits by
 * running every position of a token sequence from scratch: no KV cache,
 * no batching, plain loops with double accumulators.  See ref_llama.c.
 */
#ifndef DYNBATCH_REF_LLAMA_H
#define DYNBATCH_REF_LLAMA_H

#include <stddef.h>
#include <stdint.h>

struct ref_llama;

/* The shape of a checkpoint, as its header gives it. */
struct ref_llama_shape {
	uint32_t dim;
	uint32_t hidden_dim;
	uint32_t n_layers;
	uint32_t n_heads;
	uint32_t n_kv_heads;
	uint32_t vocab;
	uint32_t seq_len;
	int shared_classifier;	/* 1: the classifier is token_embedding */
	int format;		/* 0 legacy, 1 or 2 export.py's version */
};

/*
 * Load the checkpoint at path.  Returns the model, or NULL after writing a
 * one-line reason naming the file and what is wrong into err.
 */
struct ref_llama *ref_llama_load(const char *path, char *err, size_t err_len);

void ref_llama_free(struct ref_llama *m);

const struct ref_llama_shape *ref_llama_shape(const struct ref_llama *m);

/*
 * Run tokens[0 .. n) through the model from scratch and write the logits
 * that follow each position p in [first_out, n) to
 * logits[(p - first_out) * vocab ..].  Position p's logits depend only on
 * tokens[0 .. p], so the logits of p are the same numbers whatever n is:
 * one call over a whole sequence equals one call per prefix.
 * Needs 1 <= n <= seq_len, first_out < n and every token in [0, vocab):
 * -EINVAL otherwise; -ENOMEM; 0 on success.
 */
int ref_llama_forward(const struct ref_llama *m, const int32_t *tokens,
		      uint32_t n, uint32_t first_out, double *logits);

#endif /* DYNBATCH_REF_LLAMA_H */
