/*
 * bench_allreduce.c - bin/bench_allreduce: the cost of one group sum
 * (lib/ipc/ring_allreduce.c), RING against DIRECT, for vectors of 64 B
 * to 4 MiB, and the size where RING starts to win: the figure behind
 * RING_AR_DIRECT_MAX_BYTES, AUTO's threshold.
 *
 *   bench_allreduce [--ranks P] [--rounds R]
 *
 * P (default 2) forked ranks share one segment, as a tensor-parallel
 * group's workers do; every rank runs the same fixed schedule of calls
 * (so none needs to learn the others' timing), rank 0 times it.  For each
 * size and mode, R rounds (default 5) of a batch of calls sized to take a
 * few milliseconds; the median round's time per call is printed with the
 * bytes rank 0 sent per call.  Prints a table, then one line
 *   crossover_bytes=B ranks=P
 * where B is the smallest size from which RING is faster at every size
 * measured (0 when it never is).  On a machine others share the figures
 * move between runs: take the threshold from several.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc/ring_allreduce.h"
#include "util/clock.h"
#include "util/parse_num.h"

#define MIN_BYTES 64u
#define MAX_BYTES (4u << 20)
#define N_SIZES 17u		/* 64 B .. 4 MiB, doubling */
#define MAX_ROUNDS 31u
#define TIMEOUT_NS 30000000000ull

/* Calls a round makes at size bytes: about 4 MiB moved, 8 at least. */
static uint32_t calls_per_round(uint64_t bytes)
{
	uint64_t c = (4ull << 20) / bytes;

	return c < 8 ? 8 : c > 4000 ? 4000 : (uint32_t)c;
}

/* One rank's whole schedule; rank 0 fills ns[size][mode][round] and
 * sent[size][mode].  0 or the first failing call's negative errno. */
static int run_rank(struct ring_ar *ar, float *v, uint32_t rounds,
		    uint64_t (*ns)[2][MAX_ROUNDS], uint64_t (*sent)[2])
{
	static const enum ring_ar_mode modes[2] = { RING_AR_RING, RING_AR_DIRECT };

	for (uint32_t s = 0; s < N_SIZES; s++) {
		uint64_t bytes = (uint64_t)MIN_BYTES << s, n = bytes / 4;
		uint32_t calls = calls_per_round(bytes);

		for (uint32_t round = 0; round < rounds; round++) {
			for (uint32_t m = 0; m < 2; m++) {
				uint64_t t0 = clock_now_ns(), b = 0;
				int rc;

				for (uint32_t c = 0; c < calls; c++) {
					rc = ring_ar_reduce(ar, v, n, modes[m],
							    TIMEOUT_NS, &b);
					if (rc)
						return rc;
				}
				if (ar->rank == 0) {
					ns[s][m][round] = (clock_now_ns() - t0) / calls;
					sent[s][m] = b;
				}
			}
		}
	}
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *x, uint32_t n)
{
	qsort(x, n, sizeof(*x), cmp_u64);
	return x[n / 2];
}

static void report(uint64_t (*ns)[2][MAX_ROUNDS], uint64_t (*sent)[2],
		   uint32_t p, uint32_t rounds)
{
	uint64_t ring[N_SIZES], direct[N_SIZES], cross = 0;

	printf("%10s %12s %12s %14s %14s %8s\n", "bytes", "ring_us",
	       "direct_us", "ring_sent", "direct_sent", "faster");
	for (uint32_t s = 0; s < N_SIZES; s++) {
		ring[s] = median(ns[s][0], rounds);
		direct[s] = median(ns[s][1], rounds);
		printf("%10llu %12.2f %12.2f %14llu %14llu %8s\n",
		       (unsigned long long)MIN_BYTES << s, ring[s] / 1e3,
		       direct[s] / 1e3, (unsigned long long)sent[s][0],
		       (unsigned long long)sent[s][1],
		       ring[s] < direct[s] ? "ring" : "direct");
	}
	for (uint32_t s = N_SIZES; s-- > 0 && ring[s] < direct[s];)
		cross = (uint64_t)MIN_BYTES << s;
	printf("crossover_bytes=%llu ranks=%u\n", (unsigned long long)cross, p);
}

static int usage(void)
{
	fprintf(stderr, "usage: bench_allreduce [--ranks P] [--rounds R]\n");
	return 2;
}

int main(int argc, char **argv)
{
	uint32_t p = 2, rounds = 5;
	uint64_t (*ns)[2][MAX_ROUNDS], (*sent)[2];
	size_t bytes;
	void *seg;
	float *v;
	int rc = 0;

	for (int i = 1; i < argc; i++) {
		if (i + 1 < argc && !strcmp(argv[i], "--ranks")) {
			if (parse_u32(argv[++i], 2, 64, &p))
				return usage();
		} else if (i + 1 < argc && !strcmp(argv[i], "--rounds")) {
			if (parse_u32(argv[++i], 1, MAX_ROUNDS, &rounds))
				return usage();
		} else {
			return usage();
		}
	}
	bytes = ring_ar_segment_bytes(p, MAX_BYTES / 4);
	seg = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ns = mmap(NULL, sizeof(*ns) * N_SIZES + sizeof(*sent) * N_SIZES,
		  PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	v = calloc(MAX_BYTES / 4, sizeof(float));
	if (seg == MAP_FAILED || ns == MAP_FAILED || !v ||
	    ring_ar_format(seg, bytes, p, MAX_BYTES / 4, 0)) {
		fprintf(stderr, "bench_allreduce: no memory for %u ranks\n", p);
		return 1;
	}
	sent = (uint64_t (*)[2])(ns + N_SIZES);
	for (uint32_t r = p; r-- > 0;) {
		struct ring_ar ar;
		char err[128];
		pid_t pid = r ? fork() : 0;

		if (pid < 0) {
			perror("bench_allreduce: fork");
			ring_ar_abort(seg, ECANCELED);
			rc = 1;
			break;
		}
		if (pid > 0)
			continue;
		if (ring_ar_attach(&ar, seg, bytes, r, err, sizeof(err))) {
			fprintf(stderr, "bench_allreduce: %s\n", err);
			ring_ar_abort(seg, EPROTO);
			_exit(1);
		}
		rc = run_rank(&ar, v, rounds, ns, sent);
		if (rc) {
			fprintf(stderr, "bench_allreduce: rank %u: %s\n", r,
				strerror(-rc));
			rc = 1;
		}
		if (r)
			_exit(rc);
		break;
	}
	while (wait(NULL) > 0)
		;
	if (rc == 0)
		report(ns, sent, p, rounds);
	return rc;
}
