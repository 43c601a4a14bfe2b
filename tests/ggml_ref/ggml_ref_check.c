/*
 * ggml_ref_check.c - build/tests/ggml_ref_check LIB: lib/kernels' GGUF
 * weight types against llama.cpp's own ggml (`make test-ggml-ref`,
 * which installs the npm package @node-llama-cpp/linux-x64 that ships
 * libggml-base.so, and runs this on it).
 *
 * The library is dlopen()ed and its exported row functions called
 * directly (dequantize_row_<type>, quantize_row_<type>_ref,
 * ggml_fp16_to_fp32, ggml_bf16_to_fp32), whose signatures are plain C
 * (a block pointer, a float pointer, an int64 count), so no struct of
 * that release's headers is assumed; ggml_type_name(), ggml_type_size()
 * and ggml_blck_size() confirm that its type numbers and block sizes
 * are ours.  Checks, each exiting 1 with the place of the first
 * difference:
 *  - all 65536 halves and bfloat16s convert to the same fp32 bits;
 *  - random blocks of every type (random bytes, random finite half
 *    scales including zeros and subnormals) dequantize to the same bits;
 *  - ggml's reference quantizer's blocks, read back by our dequantizer,
 *    equal ggml's own dequantization of them (the formats agree on
 *    real data too), and our quantizer's RMS error is printed beside
 *    ggml's on the same rows (ours is plain rounding; theirs searches).
 * Prints its seed; SEED=<n> replays.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fp16.h"
#include "kernels/ggml_quantize.h"
#include "kernels/ggml_quants.h"
#include "tests/unit/test_rng.h"

struct ggml_bf16 {
	uint16_t bits;
};

typedef void (*dequant_fn)(const void *blocks, float *y, int64_t k);
typedef void (*quant_fn)(const float *x, void *blocks, int64_t k);

struct ref_type {
	enum dtype ours;
	int ggml_id;		/* enum ggml_type */
	const char *ggml_name;	/* ggml_type_name() */
	const char *suffix;	/* of dequantize_row_ / quantize_row_..._ref */
	int half_at[2];		/* offsets of the half scales, -1 for none */
};

static const struct ref_type types[] = {
	{ DTYPE_GGML_Q4_0, 2, "q4_0", "q4_0", { 0, -1 } },
	{ DTYPE_GGML_Q4_1, 3, "q4_1", "q4_1", { 0, 2 } },
	{ DTYPE_GGML_Q5_0, 6, "q5_0", "q5_0", { 0, -1 } },
	{ DTYPE_GGML_Q5_1, 7, "q5_1", "q5_1", { 0, 2 } },
	{ DTYPE_GGML_Q8_0, 8, "q8_0", "q8_0", { 0, -1 } },
	{ DTYPE_GGML_Q4_K, 12, "q4_K", "q4_K", { 0, 2 } },
	{ DTYPE_GGML_Q5_K, 13, "q5_K", "q5_K", { 0, 2 } },
	{ DTYPE_GGML_Q6_K, 14, "q6_K", "q6_K", { 208, -1 } },
};
#define N_TYPES (sizeof(types) / sizeof(types[0]))
#define N_VALUES 4096	/* per row: 128 or 16 blocks */

static void *lib;

static void *sym(const char *name)
{
	void *p = dlsym(lib, name);

	if (!p) {
		fprintf(stderr, "ggml_ref_check: %s not in the library: %s\n",
			name, dlerror());
		exit(1);
	}
	return p;
}

static uint32_t bits_of(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static int check_conversions(void)
{
	float (*h2f)(uint16_t) = (float (*)(uint16_t))sym("ggml_fp16_to_fp32");
	float (*b2f)(struct ggml_bf16) =
		(float (*)(struct ggml_bf16))sym("ggml_bf16_to_fp32");

	for (uint32_t h = 0; h < 65536; h++) {
		struct ggml_bf16 b = { (uint16_t)h };

		if (bits_of(h2f((uint16_t)h)) != bits_of(fp16_to_fp32((uint16_t)h))) {
			fprintf(stderr, "half 0x%04x: ggml %08x ours %08x\n", h,
				bits_of(h2f((uint16_t)h)),
				bits_of(fp16_to_fp32((uint16_t)h)));
			return 1;
		}
		if (bits_of(b2f(b)) != bits_of(bf16_to_fp32((uint16_t)h))) {
			fprintf(stderr, "bf16 0x%04x: ggml %08x ours %08x\n", h,
				bits_of(b2f(b)), bits_of(bf16_to_fp32((uint16_t)h)));
			return 1;
		}
	}
	printf("fp16, bf16: all 65536 values equal\n");
	return 0;
}

static uint16_t random_half(struct rng *r)
{
	uint16_t s = (uint16_t)(rng_below(r, 2) << 15);

	switch (rng_below(r, 8)) {
	case 0:
		return s;
	case 1:
		return (uint16_t)(s | (1 + rng_below(r, 1023)));
	default:
		return (uint16_t)(s | (1 + rng_below(r, 30)) << 10 |
				  rng_below(r, 1024));
	}
}

static int same_floats(const char *what, const struct ref_type *t,
		       const float *ggml, const float *ours, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (bits_of(ggml[i]) != bits_of(ours[i])) {
			fprintf(stderr, "%s %s value %zu: ggml %a ours %a\n",
				t->ggml_name, what, i, ggml[i], ours[i]);
			return 1;
		}
	return 0;
}

static int check_type(const struct ref_type *t, struct rng *r)
{
	char name[64];
	const char *(*type_name)(int) = (const char *(*)(int))sym("ggml_type_name");
	size_t (*type_size)(int) = (size_t (*)(int))sym("ggml_type_size");
	int64_t (*blck_size)(int) = (int64_t (*)(int))sym("ggml_blck_size");
	size_t bytes = ggml_block_bytes(t->ours), qk = ggml_block_values(t->ours);
	size_t n_blocks = N_VALUES / qk;
	uint8_t *blocks = malloc(n_blocks * bytes), *mine = malloc(n_blocks * bytes);
	float *a = malloc(N_VALUES * sizeof(float)), *b = malloc(N_VALUES * sizeof(float));
	float *x = malloc(N_VALUES * sizeof(float));
	double err_ggml = 0, err_ours = 0;
	dequant_fn deq;
	quant_fn quant;
	int bad = 0;

	if (!blocks || !mine || !a || !b || !x)
		return 1;
	if (strcmp(type_name(t->ggml_id), t->ggml_name) ||
	    type_size(t->ggml_id) != bytes || (size_t)blck_size(t->ggml_id) != qk) {
		fprintf(stderr, "ggml type %d is %s (%zu bytes a %lld), not %s\n",
			t->ggml_id, type_name(t->ggml_id), type_size(t->ggml_id),
			(long long)blck_size(t->ggml_id), t->ggml_name);
		return 1;
	}
	snprintf(name, sizeof(name), "dequantize_row_%s", t->suffix);
	deq = (dequant_fn)sym(name);
	snprintf(name, sizeof(name), "quantize_row_%s_ref", t->suffix);
	quant = (quant_fn)sym(name);
	for (int round = 0; round < 200 && !bad; round++) {
		for (size_t i = 0; i < n_blocks * bytes; i++)
			blocks[i] = (uint8_t)rng_next(r);
		for (size_t k = 0; k < n_blocks; k++)
			for (int h = 0; h < 2; h++)
				if (t->half_at[h] >= 0) {
					uint16_t v = random_half(r);

					blocks[k * bytes + t->half_at[h]] = (uint8_t)v;
					blocks[k * bytes + t->half_at[h] + 1] = (uint8_t)(v >> 8);
				}
		deq(blocks, a, N_VALUES);
		ggml_dequant_row(t->ours, b, blocks, N_VALUES);
		bad = same_floats("random blocks", t, a, b, N_VALUES);
	}
	for (int round = 0; round < 50 && !bad; round++) {
		float mag = powf(10, (float)rng_below(r, 6) - 4);

		for (size_t i = 0; i < N_VALUES; i++)
			x[i] = (float)((double)(rng_next(r) >> 11) / 0x1p53 - 0.5) * mag *
			       (rng_below(r, 64) ? 1 : 8);
		quant(x, blocks, N_VALUES);
		deq(blocks, a, N_VALUES);
		ggml_dequant_row(t->ours, b, blocks, N_VALUES);
		bad = same_floats("ggml-quantized blocks", t, a, b, N_VALUES);
		ggml_quantize_row(t->ours, mine, x, N_VALUES);
		ggml_dequant_row(t->ours, b, mine, N_VALUES);
		for (size_t i = 0; i < N_VALUES; i++) {
			err_ggml += ((double)a[i] - x[i]) * ((double)a[i] - x[i]) / (mag * mag);
			err_ours += ((double)b[i] - x[i]) * ((double)b[i] - x[i]) / (mag * mag);
		}
	}
	if (!bad)
		printf("%-5s dequant equal bit for bit (random and ggml-quantized "
		       "blocks); quantizer RMS error ours/ggml %.3f\n",
		       t->ggml_name, sqrt(err_ours / err_ggml));
	free(blocks);
	free(mine);
	free(a);
	free(b);
	free(x);
	return bad;
}

int main(int argc, char **argv)
{
	const char *(*version)(void);
	int bad;

	if (argc != 2) {
		fprintf(stderr, "usage: ggml_ref_check PATH/libggml-base.so\n");
		return 2;
	}
	lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "ggml_ref_check: %s\n", dlerror());
		return 2;
	}
	test_seed_init("ggml_ref_check");
	version = (const char *(*)(void))sym("ggml_version");
	printf("ggml %s (%s)\n", version(),
	       ((const char *(*)(void))sym("ggml_commit"))());
	bad = check_conversions();
	for (size_t t = 0; t < N_TYPES && !bad; t++) {
		struct rng r = rng_for(t + 1);

		bad = check_type(&types[t], &r);
	}
	printf("ggml_ref_check: %s\n", bad ? "FAILED" : "ok");
	return bad;
}
