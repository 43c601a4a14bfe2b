/*
 * test_llama_ckpt.h - a legacy llama2.c checkpoint (7 int32 header,
 * F32 weights, shared classifier, no RoPE tables) of any shape from
 * random weights, for the llama model's tests (test_llama_paged.c,
 * test_llama_tp.c).  Header-only: one test program each, included after
 * cmocka.h.
 */
#ifndef DYNBATCH_TEST_LLAMA_CKPT_H
#define DYNBATCH_TEST_LLAMA_CKPT_H

#include <math.h>
#include <stdio.h>

#include "tests/unit/test_rng.h"

struct test_ckpt_shape {
	int dim, hidden, layers, heads, kv_heads, vocab, seq_len;
};

/* n floats uniform with the given mean and standard deviation. */
static inline void test_ckpt_put_rand(FILE *f, struct rng *r, size_t n,
				      double mean, double std)
{
	for (size_t i = 0; i < n; i++) {
		double u = (double)(rng_next(r) >> 11) / 9007199254740992.0;
		float v = (float)(mean + (2 * u - 1) * std * sqrt(3.0));

		assert_int_equal(fwrite(&v, sizeof(v), 1, f), 1);
	}
}

/* Write the checkpoint of shape s to path, weights drawn from r in file
 * order (scaled so that activations stay near 1 through the layers). */
static inline void test_ckpt_write(const char *path,
				   const struct test_ckpt_shape *s,
				   struct rng *r)
{
	int32_t hdr[7] = { s->dim, s->hidden, s->layers, s->heads,
			   s->kv_heads, s->vocab, s->seq_len };
	size_t L = s->layers, d = s->dim, h = s->hidden;
	size_t kvd = (size_t)s->kv_heads * (s->dim / s->heads);
	double sq = 3 / sqrt(d);
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(hdr, sizeof(hdr), 1, f), 1);
	test_ckpt_put_rand(f, r, s->vocab * d, 0, 2.5 / sqrt(d));	/* embedding */
	test_ckpt_put_rand(f, r, L * d, 1, 0.05);		/* rms_att */
	test_ckpt_put_rand(f, r, L * d * d, 0, sq);		/* wq */
	test_ckpt_put_rand(f, r, L * kvd * d, 0, sq);		/* wk */
	test_ckpt_put_rand(f, r, L * kvd * d, 0, 1 / sqrt(d));	/* wv */
	test_ckpt_put_rand(f, r, L * d * d, 0, 1 / sqrt(d));	/* wo */
	test_ckpt_put_rand(f, r, L * d, 1, 0.05);		/* rms_ffn */
	test_ckpt_put_rand(f, r, L * h * d, 0, 1 / sqrt(d));	/* w1 */
	test_ckpt_put_rand(f, r, L * d * h, 0, 1 / sqrt(h));	/* w2 */
	test_ckpt_put_rand(f, r, L * h * d, 0, 1 / sqrt(d));	/* w3 */
	test_ckpt_put_rand(f, r, d, 1, 0.05);			/* rms_final */
	assert_int_equal(fclose(f), 0);
}

#endif /* DYNBATCH_TEST_LLAMA_CKPT_H */
