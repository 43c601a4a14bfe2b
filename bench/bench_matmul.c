/*
 * bench_matmul.c - bin/bench_matmul: the llama model's batched matmul
 * alone (the F32 type's AVX2 kernel, asked of tensor.h's table as the
 * model asks it; lib/kernels/llama_kernels.c), in GFLOP/s, for the
 * weight matrices of a model shape, so that bench/bench_llama.sh can set
 * it against the FMA peak bin/machine_limits measures in the same run.
 *
 *   bench_matmul --dim D --hidden H --vocab V [--rows N] [--seconds S]
 *
 * One pass is what a step of N token rows does with one layer's matrices
 * (wq, wk, wv, wo: D x D; w1, w3: H x D; w2: D x H) and the classifier
 * (V x D), each read from memory once for all N rows.  The weights are
 * random and larger than the caches together (the layer set is repeated
 * in distinct copies until it is), as in a real model; passes repeat for
 * about S seconds (default 2).  Prints one line:
 *   matmul_gflops=X rows=N
 * Run two at once to see both cores (bench_llama.sh does).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/tensor.h"
#include "util/parse_num.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static float *random_floats(size_t n, uint64_t *state)
{
	float *p = malloc(n * sizeof(float));

	if (!p)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		*state = *state * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = (float)((*state >> 40) & 0xffff) / 65536.0f - 0.5f;
	}
	return p;
}

/* out = x W^T for the [n_out][n_in] F32 matrix at w, as the model calls it. */
static void bench_matmul(const struct tensor_ops *k, float *out, const float *x,
			 uint32_t rows, const float *w, uint32_t n_in,
			 uint32_t n_out)
{
	struct tensor t = {
		.type = DTYPE_F32, .data = w, .n_layers = 1, .rows = n_out,
		.cols = n_in, .layer_bytes = (size_t)n_out * n_in * sizeof(float),
	};

	k->matmul(out, x, rows, &t);
}

int main(int argc, char **argv)
{
	uint32_t dim = 0, hidden = 0, vocab = 0, rows = 64, seconds = 2;
	const struct tensor_ops *k = tensor_ops_get(DTYPE_F32, LLAMA_KERNEL_AVX2);
	uint64_t state = 1;
	size_t layer, copies, flops_pass;
	float *w, *x, *out;
	double t0, t, passes = 0;

	for (int i = 1; i + 1 < argc; i += 2) {
		uint32_t *dst = !strcmp(argv[i], "--dim") ? &dim :
				!strcmp(argv[i], "--hidden") ? &hidden :
				!strcmp(argv[i], "--vocab") ? &vocab :
				!strcmp(argv[i], "--rows") ? &rows :
				!strcmp(argv[i], "--seconds") ? &seconds : NULL;

		if (!dst || parse_u32(argv[i + 1], 1, 1u << 20, dst)) {
			fprintf(stderr, "bench_matmul: bad option %s %s\n", argv[i],
				argv[i + 1]);
			return 2;
		}
	}
	if (!dim || !hidden || !vocab || argc % 2 == 0) {
		fprintf(stderr, "usage: bench_matmul --dim D --hidden H --vocab V "
			"[--rows N] [--seconds S]\n");
		return 2;
	}
	if (!k) {
		fprintf(stderr, "bench_matmul: this CPU has no AVX2+FMA\n");
		return 1;
	}
	/* one layer's matrices and the classifier, repeated past 64 MiB */
	layer = (size_t)4 * dim * dim + (size_t)3 * hidden * dim + (size_t)vocab * dim;
	copies = 1 + ((size_t)64 << 20) / (layer * sizeof(float));
	w = random_floats(layer * copies, &state);
	x = random_floats((size_t)rows * (hidden > dim ? hidden : dim), &state);
	out = malloc((size_t)rows * (vocab > hidden ? vocab : hidden) * sizeof(float));
	if (!w || !x || !out) {
		fprintf(stderr, "bench_matmul: out of memory\n");
		return 1;
	}
	flops_pass = 2 * (size_t)rows * layer;
	t0 = now_s();
	do {
		const float *p = w + (size_t)((size_t)passes % copies) * layer;

		for (int m = 0; m < 4; m++, p += (size_t)dim * dim)
			bench_matmul(k, out, x, rows, p, dim, dim);
		bench_matmul(k, out, x, rows, p, dim, hidden);	/* w1 */
		p += (size_t)hidden * dim;
		bench_matmul(k, out, x, rows, p, dim, hidden);	/* w3 */
		p += (size_t)hidden * dim;
		bench_matmul(k, out, x, rows, p, hidden, dim);	/* w2 */
		p += (size_t)hidden * dim;
		bench_matmul(k, out, x, rows, p, dim, vocab);	/* classifier */
		passes++;
		t = now_s() - t0;
	} while (t < seconds);
	printf("matmul_gflops=%.2f rows=%u\n", passes * (double)flops_pass / t / 1e9, rows);
	free(w);
	free(x);
	free(out);
	return 0;
}
