/*
 * bench_matmul.c - bin/bench_matmul: the llama model's batched matmul
 * alone (one weight type's AVX2 kernel, asked of tensor.h's table as the
 * model asks it; lib/kernels/), in GFLOP/s, for the weight matrices of a
 * model shape, so that bench/bench_llama.sh can set it against the FMA
 * peak bin/machine_limits measures in the same run.
 *
 *   bench_matmul --dim D --hidden H --vocab V [--rows N] [--seconds S]
 *                [--type T] [--matrix OUTxIN]
 *
 * One pass is what a step of N token rows does with one layer's matrices
 * (wq, wk, wv, wo: D x D; w1, w3: H x D; w2: D x H) and the classifier
 * (V x D), each read from memory once for all N rows.  The weights are
 * random and larger than the caches together (the layer set is repeated
 * in distinct copies until it is), as in a real model; passes repeat for
 * about S seconds (default 2).  T is a type name of tensor.h's table
 * (f32, the default; f16, bf16, ggml_q8_0, q4_0, q4_1, q5_0, q5_1, q4_k,
 * q5_k, q6_k, q4g; the ggml types quantize random floats with
 * ggml_quantize.h, q4g with q4g.h in groups of 32 as quant=q4 does; D
 * and H must be multiples of the ggml types' block size, any for q4g).
 * --matrix OUTxIN times that one matrix instead of the layer set (e.g.
 * 768x768, 2048x768; still repeated past 64 MiB).
 * Prints one line:
 *   matmul_gflops=X rows=N type=T rows_per_s=R weight_gb_s=G cpu_gflops=C
 *   cpu_weight_gb_s=W [matrix=OUTxIN]
 * (R: activation rows through the whole pass a second; G: weight bytes
 * read a second, each once a pass; C and W the same over the process's
 * CPU time, not the wall's: on cores other work shares, the kernel's own
 * speed).  Run two at once to see both cores (bench_llama.sh does).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/fp16.h"
#include "kernels/ggml_quantize.h"
#include "kernels/q4g.h"
#include "kernels/tensor.h"
#include "util/parse_num.h"

static double clock_s(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double now_s(void)
{
	return clock_s(CLOCK_MONOTONIC);
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

/* out = x W^T for the [n_out][n_in] matrix of type at w, as the model
 * calls it. */
/* The group a type's matrices are made with: quant=q4's for Q4G. */
static uint32_t type_group(enum dtype type)
{
	return type == DTYPE_Q4G ? Q4G_GROUP : 0;
}

/* Bytes of one [rows][cols] matrix of type as the bench makes it. */
static size_t matrix_bytes(enum dtype type, uint32_t rows, uint32_t cols)
{
	return (size_t)dtype_matrix_bytes(type, rows, cols, type_group(type));
}

static void bench_matmul(const struct tensor_ops *k, enum dtype type,
			 float *out, const float *x, uint32_t rows,
			 const unsigned char *w, uint32_t n_in, uint32_t n_out)
{
	struct tensor t = {
		.type = type, .data = w, .n_layers = 1, .rows = n_out,
		.cols = n_in, .group = type_group(type),
		.layer_bytes = matrix_bytes(type, n_out, n_in),
	};

	k->matmul(out, x, rows, &t);
}

/* The type named name, or DTYPE_COUNT; Q8_0 (llama2.c's layout, which
 * needs a group) is not offered. */
static enum dtype type_named(const char *name)
{
	for (int t = 0; t < DTYPE_COUNT; t++)
		if (t != DTYPE_Q8_0 && !strcmp(dtype_name((enum dtype)t), name))
			return (enum dtype)t;
	return DTYPE_COUNT;
}

/* One [n_out][n_in] matrix of type at p from random floats: its bytes. */
static size_t fill_matrix(unsigned char *p, enum dtype type, uint32_t n_out,
			  uint32_t n_in, uint64_t *state)
{
	float *f = random_floats(n_in, state);
	size_t at = 0;

	if (!f)
		return 0;
	for (uint32_t o = 0; o < n_out; o++) {
		if (o % 64 == 0) {	/* fresh values now and then: enough */
			free(f);
			f = random_floats(n_in, state);
			if (!f)
				return 0;
		}
		if (type == DTYPE_F32) {
			memcpy(p + at, f, n_in * sizeof(float));
			at += n_in * sizeof(float);
		} else if (type == DTYPE_F16 || type == DTYPE_BF16) {
			for (uint32_t i = 0; i < n_in; i++, at += 2) {
				uint16_t h = type == DTYPE_F16 ? fp32_to_fp16(f[i]) :
								 fp32_to_bf16(f[i]);

				p[at] = (unsigned char)h;
				p[at + 1] = (unsigned char)(h >> 8);
			}
		} else if (type == DTYPE_Q4G) {
			q4g_quantize_row(p + at, f, n_in, Q4G_GROUP);
			at += matrix_bytes(type, 1, n_in);
		} else {
			at += ggml_quantize_row(type, p + at, f, n_in);
		}
	}
	free(f);
	return at;
}

int main(int argc, char **argv)
{
	uint32_t dim = 0, hidden = 0, vocab = 0, rows = 64, seconds = 2;
	const char *type_name = "f32";
	enum dtype type;
	const struct tensor_ops *k;
	uint64_t state = 1;
	size_t layer, layer_bytes, copies, flops_pass;
	unsigned char *w;
	float *x, *out;
	double t0, t, c0, passes = 0;
	uint32_t m_out = 0, m_in = 0;	/* --matrix */

	for (int i = 1; i + 1 < argc; i += 2) {
		uint32_t *dst = !strcmp(argv[i], "--dim") ? &dim :
				!strcmp(argv[i], "--hidden") ? &hidden :
				!strcmp(argv[i], "--vocab") ? &vocab :
				!strcmp(argv[i], "--rows") ? &rows :
				!strcmp(argv[i], "--seconds") ? &seconds : NULL;

		if (!strcmp(argv[i], "--type")) {
			type_name = argv[i + 1];
			continue;
		}
		if (!strcmp(argv[i], "--matrix")) {
			char o[16] = "", in[16] = "";

			if (sscanf(argv[i + 1], "%15[0-9]x%15[0-9]", o, in) != 2 ||
			    parse_u32(o, 1, 1u << 20, &m_out) ||
			    parse_u32(in, 1, 1u << 20, &m_in)) {
				fprintf(stderr, "bench_matmul: bad --matrix %s (OUTxIN)\n",
					argv[i + 1]);
				return 2;
			}
			continue;
		}
		if (!dst || parse_u32(argv[i + 1], 1, 1u << 20, dst)) {
			fprintf(stderr, "bench_matmul: bad option %s %s\n", argv[i],
				argv[i + 1]);
			return 2;
		}
	}
	if (m_out) {	/* one matrix: the layer set's code with only it */
		dim = m_in;
		hidden = m_out;
		vocab = 1;
	}
	if (!dim || !hidden || !vocab || argc % 2 == 0) {
		fprintf(stderr, "usage: bench_matmul --dim D --hidden H --vocab V "
			"[--rows N] [--seconds S] [--type T] [--matrix OUTxIN]\n");
		return 2;
	}
	type = type_named(type_name);
	if (type == DTYPE_COUNT) {
		fprintf(stderr, "bench_matmul: no type %s\n", type_name);
		return 2;
	}
	if (!matrix_bytes(type, 1, dim) || !matrix_bytes(type, 1, hidden)) {
		fprintf(stderr, "bench_matmul: %s needs --dim and --hidden a "
			"multiple of its block size\n", type_name);
		return 2;
	}
	k = tensor_ops_get(type, LLAMA_KERNEL_AVX2);
	if (!k) {
		fprintf(stderr, "bench_matmul: this CPU has no AVX2+FMA\n");
		return 1;
	}
	/* one layer's matrices and the classifier, repeated past 64 MiB */
	layer = (size_t)4 * dim * dim + (size_t)3 * hidden * dim + (size_t)vocab * dim;
	layer_bytes = 4 * matrix_bytes(type, dim, dim) +
		      2 * matrix_bytes(type, hidden, dim) +
		      matrix_bytes(type, dim, hidden) +
		      matrix_bytes(type, vocab, dim);
	if (m_out) {
		layer = (size_t)m_out * m_in;
		layer_bytes = matrix_bytes(type, m_out, m_in);
	}
	copies = 1 + ((size_t)64 << 20) / layer_bytes;
	w = malloc(layer_bytes * copies);
	x = random_floats((size_t)rows * (hidden > dim ? hidden : dim), &state);
	out = malloc((size_t)rows * (vocab > hidden ? vocab : hidden) * sizeof(float));
	if (!w || !x || !out) {
		fprintf(stderr, "bench_matmul: out of memory\n");
		return 1;
	}
	{
		size_t at = 0;

		if (m_out)
			at += fill_matrix(w, type, m_out, m_in, &state);
		for (int m = 0; !m_out && m < 4; m++)
			at += fill_matrix(w + at, type, dim, dim, &state);
		if (!m_out) {
			at += fill_matrix(w + at, type, hidden, dim, &state);
			at += fill_matrix(w + at, type, hidden, dim, &state);
			at += fill_matrix(w + at, type, dim, hidden, &state);
			at += fill_matrix(w + at, type, vocab, dim, &state);
		}
		if (at != layer_bytes) {
			fprintf(stderr, "bench_matmul: out of memory\n");
			return 1;
		}
		for (size_t c = 1; c < copies; c++)	/* distinct memory */
			memcpy(w + c * layer_bytes, w, layer_bytes);
	}
	flops_pass = 2 * (size_t)rows * layer;
	t0 = now_s();
	c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
	do {
		const unsigned char *p = w + (size_t)((size_t)passes % copies) * layer_bytes;

		if (m_out) {
			bench_matmul(k, type, out, x, rows, p, m_in, m_out);
			passes++;
			t = now_s() - t0;
			continue;
		}
		for (int m = 0; m < 4; m++, p += matrix_bytes(type, dim, dim))
			bench_matmul(k, type, out, x, rows, p, dim, dim);
		bench_matmul(k, type, out, x, rows, p, dim, hidden);	/* w1 */
		p += matrix_bytes(type, hidden, dim);
		bench_matmul(k, type, out, x, rows, p, dim, hidden);	/* w3 */
		p += matrix_bytes(type, hidden, dim);
		bench_matmul(k, type, out, x, rows, p, hidden, dim);	/* w2 */
		p += matrix_bytes(type, dim, hidden);
		bench_matmul(k, type, out, x, rows, p, dim, vocab);	/* classifier */
		passes++;
		t = now_s() - t0;
	} while (t < seconds);
	c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
	printf("matmul_gflops=%.2f rows=%u type=%s rows_per_s=%.0f weight_gb_s=%.2f cpu_gflops=%.2f cpu_weight_gb_s=%.2f",
	       passes * (double)flops_pass / t / 1e9, rows, type_name,
	       passes * rows / t, passes * (double)layer_bytes / t / 1e9,
	       passes * (double)flops_pass / c0 / 1e9,
	       passes * (double)layer_bytes / c0 / 1e9);
	if (m_out)
		printf(" matrix=%ux%u", m_out, m_in);
	printf("\n");
	free(w);
	free(x);
	free(out);
	return 0;
}
