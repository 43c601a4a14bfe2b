/*
 * machine_limits.c - what one core of this machine can do at best: the
 * bounds the llama benchmark (bench/bench_llama.sh) measures the engine
 * against.
 *
 *   machine_limits [--mib N]
 *
 * Prints one machine-parsable line, then a human one:
 *
 *   fma_gflops_per_core=X read_gbs=Y
 *
 * fma_gflops_per_core: float32 FMA throughput of one core, counting two
 * flops per lane per FMA, from a loop that only touches registers.
 * read_gbs: how fast one core can stream a buffer much larger than the
 * caches (N MiB, default 512) into registers, in GB/s (10^9 bytes).
 *
 * NOTES ON THE DESIGN
 *
 * Each figure is the best of several short runs: the question is what the
 * hardware allows, and a shared machine only ever makes a run slower.
 * The FMA loop keeps 12 independent accumulators, more than FMA latency
 * times FMA ports on current x86 cores (4 x 2), so the loop is bound by
 * throughput, not by a dependency chain.  The read loop sums with plain
 * adds into 4 accumulators (the adds are far from the limit; the loads
 * are the point).  Both use AVX2 when the CPU has it (checked at run
 * time); otherwise scalar loops run and the output says so, since the
 * figures are then not the machine's peak.  The whole run takes about
 * two seconds.
 */
#include <errno.h>
#include <getopt.h>
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/parse_num.h"

#define FMA_RUNS 7
#define FMA_ITERS (20u * 1000 * 1000)	/* about 60 ms per run on AVX2 */
#define READ_RUNS 4
#define N_ACC 12

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Defeats dead-code elimination of the results. */
static volatile float sink;

/* ------------------------------------------------------------------------
 * FMA peak
 */

/* iters rounds of N_ACC 8-lane FMAs; returns flops done. */
__attribute__((target("avx2,fma")))
static double fma_avx2(uint32_t iters)
{
	__m256 acc[N_ACC], mul = _mm256_set1_ps(0.999999f),
			   add = _mm256_set1_ps(1e-6f);
	__m256 sum = _mm256_setzero_ps();
	float out[8];

	for (int i = 0; i < N_ACC; i++)
		acc[i] = _mm256_set1_ps((float)i);
	for (uint32_t n = 0; n < iters; n++) {
		/* Written out so every accumulator stays in a register. */
		acc[0] = _mm256_fmadd_ps(acc[0], mul, add);
		acc[1] = _mm256_fmadd_ps(acc[1], mul, add);
		acc[2] = _mm256_fmadd_ps(acc[2], mul, add);
		acc[3] = _mm256_fmadd_ps(acc[3], mul, add);
		acc[4] = _mm256_fmadd_ps(acc[4], mul, add);
		acc[5] = _mm256_fmadd_ps(acc[5], mul, add);
		acc[6] = _mm256_fmadd_ps(acc[6], mul, add);
		acc[7] = _mm256_fmadd_ps(acc[7], mul, add);
		acc[8] = _mm256_fmadd_ps(acc[8], mul, add);
		acc[9] = _mm256_fmadd_ps(acc[9], mul, add);
		acc[10] = _mm256_fmadd_ps(acc[10], mul, add);
		acc[11] = _mm256_fmadd_ps(acc[11], mul, add);
	}
	for (int i = 0; i < N_ACC; i++)
		sum = _mm256_add_ps(sum, acc[i]);
	_mm256_storeu_ps(out, sum);
	sink = out[0];
	return (double)iters * N_ACC * 8 * 2;
}

/* The same without AVX2: N_ACC scalar chains. */
static double fma_scalar(uint32_t iters)
{
	float acc[N_ACC], mul = 0.999999f, add = 1e-6f, sum = 0;

	for (int i = 0; i < N_ACC; i++)
		acc[i] = (float)i;
	for (uint32_t n = 0; n < iters; n++)
		for (int i = 0; i < N_ACC; i++)
			acc[i] = acc[i] * mul + add;
	for (int i = 0; i < N_ACC; i++)
		sum += acc[i];
	sink = sum;
	return (double)iters * N_ACC * 2;
}

static double fma_peak(bool avx2)
{
	double best = 0;

	for (int r = 0; r < FMA_RUNS; r++) {
		double t0 = now_s(), flops, dt;

		flops = avx2 ? fma_avx2(FMA_ITERS) : fma_scalar(FMA_ITERS / 8);
		dt = now_s() - t0;
		if (dt > 0 && flops / dt > best)
			best = flops / dt;
	}
	return best / 1e9;
}

/* ------------------------------------------------------------------------
 * Read bandwidth
 */

/* Sum n floats (n a multiple of 32) with 256-bit loads. */
__attribute__((target("avx2")))
static float sum_avx2(const float *p, size_t n)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	float out[8];

	for (size_t i = 0; i < n; i += 32) {
		a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
		a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
		a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
		a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
	}
	_mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1),
					    _mm256_add_ps(a2, a3)));
	return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] +
	       out[7];
}

static float sum_scalar(const float *p, size_t n)
{
	float a0 = 0, a1 = 0, a2 = 0, a3 = 0;

	for (size_t i = 0; i < n; i += 4) {
		a0 += p[i];
		a1 += p[i + 1];
		a2 += p[i + 2];
		a3 += p[i + 3];
	}
	return a0 + a1 + a2 + a3;
}

/* Best GB/s over READ_RUNS sums of a buffer of mib MiB; < 0: no memory. */
static double read_bw(bool avx2, uint32_t mib)
{
	size_t bytes = (size_t)mib << 20, n = bytes / sizeof(float);
	double best = 0;
	float *buf;

	if (posix_memalign((void **)&buf, 64, bytes))
		return -1;
	/* Touch every page first: the runs must not count page faults. */
	for (size_t i = 0; i < n; i++)
		buf[i] = (float)(i & 1023) * 1e-3f;
	for (int r = 0; r < READ_RUNS; r++) {
		double t0 = now_s(), dt;

		sink = avx2 ? sum_avx2(buf, n) : sum_scalar(buf, n);
		dt = now_s() - t0;
		if (dt > 0 && bytes / dt > best)
			best = bytes / dt;
	}
	free(buf);
	return best / 1e9;
}

/* ------------------------------------------------------------------------
 * Command line
 */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: machine_limits [--mib N]\n"
		"  --mib N   buffer for the read bandwidth, MiB (default 512, at\n"
		"            least 64: it must dwarf the caches)\n"
		"Prints 'fma_gflops_per_core=X read_gbs=Y', then a line for people.\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "mib", required_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint32_t mib = 512;
	bool avx2;
	double gflops, gbs;
	int c;

	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'm':
			if (parse_u32(optarg, 64, 1u << 20, &mib)) {
				fprintf(stderr, "machine_limits: bad value '%s' for --mib (64 or more)\n",
					optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "machine_limits: unexpected argument '%s'\n",
			argv[optind]);
		return 2;
	}
	__builtin_cpu_init();
	avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
	gflops = fma_peak(avx2);
	gbs = read_bw(avx2, mib);
	if (gbs < 0) {
		fprintf(stderr, "machine_limits: cannot allocate %u MiB for the read test\n",
			mib);
		return 1;
	}
	printf("fma_gflops_per_core=%.1f read_gbs=%.2f\n", gflops, gbs);
	printf("one core: %.1f GFLOP/s of float32 FMA (%s), %.2f GB/s streaming reads of %u MiB%s\n",
		gflops, avx2 ? "AVX2, 12 accumulators" : "scalar", gbs, mib,
		avx2 ? "" : " -- AVX2/FMA missing: scalar figures, not the machine's peak");
	return 0;
}
