/*
 * test_llama_tp.c - unit tests of the llama model split over a
 * tensor-parallel group (lib/model/llama_tp.c, the sums in
 * llama_forward.c), its ranks forked processes summing through the ring
 * all-reduce (lib/ipc/ring_allreduce.c), as a group of workers would.
 *
 * A checkpoint with 12 query heads over 6 KV heads and an FFN of 120
 * (written here from random weights, legacy llama2.c layout) runs a
 * fixed, teacher-forced workload: three rows, prompts crossing a
 * 64-token chunk, then decode steps, every step's logits kept.  The
 * unsplit model (no llama_tp_split) is the reference.  For P = 2, 3 and
 * 6, portable and AVX2 kernels: every rank's logits are the same bits;
 * a second run gives the same bits; each logit is within the declared
 * bound of the unsplit one (llama_tp.h: the wo and w2 sums are cut in P
 * pieces, so not bit-identical; the largest difference is printed), and
 * the argmax is the same unless the unsplit top two are within twice the
 * bound (a near-tie).  P = 1 through llama_tp_split is the unsplit
 * model bit for bit.  Refusals: P not dividing n_kv_heads, a bad rank,
 * a bound or quantized model, the paged mode after a split.  A member
 * that dies makes the survivor's step fail, not hang.
 *
 * Seeds: SEED= replays a run (test_rng.h).
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
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ipc/ring_allreduce.h"
#include "kernels/llama_kernels.h"
#include "model/llama_model.h"
#include "model/llama_tp.h"
#include "util/clock.h"
#include "tests/unit/test_llama_ckpt.h"
#include "tests/unit/test_rng.h"

enum { DIM = 96, HIDDEN = 120, LAYERS = 2, HEADS = 12, KV_HEADS = 6,
       VOCAB = 97, SEQ = 128 };
#define ROWS 3u
#define DECODE 6u		/* decode steps after the prefill */
#define STEPS (1u + DECODE)
#define MAX_P 6u
/* |split - unsplit| <= TOL x (1 + the row's largest |logit|) */
#define TOL 1e-5

static char tmp_dir[] = "/tmp/test_llama_tp.XXXXXX";
static char ck_path[128];
static const struct dynbatch_model_api *api;
static int32_t tokens[ROWS][SEQ];
static uint32_t n_prompt[ROWS];

/* ------------------------------------------------------------ fixture */

/* The checkpoint of this test's shape, weights drawn from r. */
static void write_checkpoint(const char *path, struct rng *r)
{
	const struct test_ckpt_shape shape = { DIM, HIDDEN, LAYERS, HEADS, KV_HEADS,
						 VOCAB, SEQ };

	test_ckpt_write(path, &shape, r);
}

static int setup(void **state)
{
	struct rng r = rng_for(1);

	api = llama_model_api();
	assert_non_null(mkdtemp(tmp_dir));
	snprintf(ck_path, sizeof(ck_path), "%s/tp.bin", tmp_dir);
	write_checkpoint(ck_path, &r);
	/* prompts of 1, 40..63 and 65..90 tokens: one crosses a chunk */
	n_prompt[0] = 1;
	n_prompt[1] = 40 + rng_below(&r, 24);
	n_prompt[2] = 65 + rng_below(&r, 26);
	for (uint32_t i = 0; i < ROWS; i++)
		for (uint32_t k = 0; k < SEQ; k++)
			tokens[i][k] = (int32_t)rng_below(&r, VOCAB);
	return 0;
}

static int teardown(void **state)
{
	unlink(ck_path);
	rmdir(tmp_dir);
	return 0;
}

/* -------------------------------------------------------------- runs */

/* Every step's logits: (step, row, vocab). */
typedef float run_logits[STEPS][ROWS][VOCAB];

/* The workload on m (bound here): a prefill step of every prompt, then
 * DECODE steps of one token each.  0 or the first step's error. */
static int run_workload(void *m, run_logits *out)
{
	char err[256];
	uint32_t refusals[ROWS];

	if (api->bind(m, ROWS, SEQ, err, sizeof(err)))
		fail_msg("bind: %s", err);
	for (uint32_t s = 0; s < STEPS; s++) {
		struct dynbatch_model_row rows[ROWS];
		int rc;

		for (uint32_t i = 0; i < ROWS; i++) {
			uint32_t n = n_prompt[i] + s;

			rows[i] = (struct dynbatch_model_row){
				.slot = i, .tokens = tokens[i], .n_tokens = n,
				.n_cached = s ? n - 1 : 0,
				.n_consume = s ? 1 : n, .want_output = 1 };
		}
		rc = api->step(m, ROWS, rows, &(*out)[s][0][0], refusals);
		if (rc)
			return rc;
	}
	return 0;
}

static void *must_create(const char *kernel)
{
	char args[256], err[512] = "";
	void *m;

	snprintf(args, sizeof(args), "%s,kernel=%s", ck_path, kernel);
	m = api->create(args, err, sizeof(err));
	if (!m)
		fail_msg("create('%s'): %s", args, err);
	return m;
}

/* The unsplit model's logits. */
static void run_unsplit(const char *kernel, run_logits *out)
{
	void *m = must_create(kernel);

	assert_int_equal(run_workload(m, out), 0);
	api->destroy(m);
}

struct group_sum {
	struct ring_ar ar;
	uint64_t timeout_ns;
};

static int tp_sum(void *ctx, float *v, uint64_t n)
{
	struct group_sum *g = ctx;

	return ring_ar_reduce(&g->ar, v, n, RING_AR_AUTO, g->timeout_ns, NULL);
}

/*
 * The workload on a group of p forked ranks; rank r's logits into
 * out[r], its rc into rcs[r].  die_rank < p exits before it steps.
 */
static void run_group(const char *kernel, uint32_t p, run_logits *out,
		      int *rcs, uint32_t die_rank, uint64_t timeout_ns)
{
	size_t bytes = ring_ar_segment_bytes(p, (uint64_t)SEQ * DIM);
	void *seg = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pid[MAX_P];

	assert_true(seg != MAP_FAILED);
	assert_int_equal(ring_ar_format(seg, bytes, p, (uint64_t)SEQ * DIM, 0), 0);
	for (uint32_t r = 0; r < p; r++) {
		pid[r] = fork();
		assert_true(pid[r] >= 0);
		if (pid[r] == 0) {
			struct group_sum g = { .timeout_ns = timeout_ns };
			void *m = must_create(kernel);
			char err[256];

			if (ring_ar_attach(&g.ar, seg, bytes, r, err, sizeof(err)) ||
			    llama_tp_split(m, r, p, tp_sum, &g, err, sizeof(err))) {
				fprintf(stderr, "rank %u: %s\n", r, err);
				_exit(3);
			}
			if (r == die_rank)
				_exit(0);
			rcs[r] = run_workload(m, &out[r]);
			api->destroy(m);
			_exit(0);
		}
	}
	for (uint32_t r = 0; r < p; r++) {
		int st;

		assert_int_equal(waitpid(pid[r], &st, 0), pid[r]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	munmap(seg, bytes);
}

/* The shared mapping for p ranks' logits and rcs. */
static run_logits *map_logits(uint32_t p, int **rcs)
{
	size_t bytes = sizeof(run_logits) * p + sizeof(int) * p;
	void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	assert_true(mem != MAP_FAILED);
	*rcs = (int *)((run_logits *)mem + p);
	return mem;
}

static void unmap_logits(run_logits *l, uint32_t p)
{
	munmap(l, sizeof(run_logits) * p + sizeof(int) * p);
}

static uint32_t argmax(const float *l)
{
	uint32_t best = 0;

	for (uint32_t i = 1; i < VOCAB; i++)
		if (l[i] > l[best])
			best = i;
	return best;
}

/* split within the bound of ref, argmax the same but for near-ties;
 * returns the largest |difference| over the row's scale. */
static double check_close(const run_logits *split, const run_logits *ref,
			  uint32_t p, const char *kernel)
{
	double worst = 0;

	for (uint32_t s = 0; s < STEPS; s++) {
		for (uint32_t i = 0; i < ROWS; i++) {
			const float *a = (*split)[s][i], *b = (*ref)[s][i];
			double scale = 0, diff = 0, top = -INFINITY, second = -INFINITY;
			uint32_t best = argmax(b);

			for (uint32_t v = 0; v < VOCAB; v++) {
				scale = fmax(scale, fabs(b[v]));
				diff = fmax(diff, fabs((double)a[v] - b[v]));
			}
			for (uint32_t v = 0; v < VOCAB; v++) {
				if (b[v] > top) {
					second = top;
					top = b[v];
				} else if (b[v] > second) {
					second = b[v];
				}
			}
			if (diff > TOL * (1 + scale))
				fail_msg("P=%u %s step %u row %u: |split - unsplit| %g over %g",
					 p, kernel, s, i, diff, TOL * (1 + scale));
			if (argmax(a) != best && top - second > 2 * TOL * (1 + scale))
				fail_msg("P=%u %s step %u row %u: argmax %u, unsplit %u",
					 p, kernel, s, i, argmax(a), best);
			worst = fmax(worst, diff / (1 + scale));
		}
	}
	return worst;
}

/* -------------------------------------------------------------- tests */

static void split_matches(const char *kernel)
{
	static const uint32_t ps[] = { 2, 3, 6 };
	static run_logits ref;

	run_unsplit(kernel, &ref);
	for (uint32_t k = 0; k < sizeof(ps) / sizeof(ps[0]); k++) {
		uint32_t p = ps[k];
		int *rcs, *rcs2;
		run_logits *l = map_logits(p, &rcs), *again = map_logits(p, &rcs2);
		double worst;

		run_group(kernel, p, l, rcs, UINT32_MAX, 20000000000ull);
		run_group(kernel, p, again, rcs2, UINT32_MAX, 20000000000ull);
		for (uint32_t r = 0; r < p; r++) {
			assert_int_equal(rcs[r], 0);
			assert_int_equal(rcs2[r], 0);
			/* the same bits on every rank and in every run */
			assert_memory_equal(l[r], l[0], sizeof(run_logits));
			assert_memory_equal(again[r], l[0], sizeof(run_logits));
		}
		worst = check_close(&l[0], &ref, p, kernel);
		printf("P=%u kernel=%s: max |split - unsplit| / (1 + max|logit|) = %.3g%s\n",
		       p, kernel, worst,
		       memcmp(l[0], ref, sizeof(ref)) ? "" : " (bit-identical)");
		unmap_logits(l, p);
		unmap_logits(again, p);
	}
}

static void test_split_portable(void **state)
{
	split_matches("portable");
}

static void test_split_avx2(void **state)
{
	if (!llama_kernels_have_avx2())
		skip();
	split_matches("avx2");
}

/* P = 1 through the split is the unsplit model. */
static void test_one_rank_is_unsplit(void **state)
{
	static run_logits ref, one;
	void *m = must_create("auto");
	char err[256];

	run_unsplit("auto", &ref);
	assert_int_equal(llama_tp_split(m, 0, 1, NULL, NULL, err, sizeof(err)), 0);
	assert_int_equal(run_workload(m, &one), 0);
	assert_memory_equal(one, ref, sizeof(ref));
	api->destroy(m);
}

static void test_refusals(void **state)
{
	void *m = must_create("auto");
	char args[256], err[256] = "";
	float pool[4096];
	int dummy = 0;

	assert_int_equal(llama_tp_split(m, 0, 4, tp_sum, &dummy, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "must divide n_kv_heads 6"));
	assert_int_equal(llama_tp_split(m, 2, 2, tp_sum, &dummy, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "rank 2 of 2"));
	assert_int_equal(llama_tp_split(m, 0, 2, NULL, NULL, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(llama_tp_split(m, 0, 0, tp_sum, &dummy, err, sizeof(err)),
			 -EINVAL);
	/* split, then the paged mode is refused */
	assert_int_equal(llama_tp_split(m, 1, 2, tp_sum, &dummy, err, sizeof(err)), 0);
	assert_int_equal(api->bind_paged(m, pool, 2, 4, 8, 1, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "tensor parallel"));
	api->destroy(m);
	/* bound before the split */
	m = must_create("auto");
	assert_int_equal(api->bind(m, 1, 8, err, sizeof(err)), 0);
	assert_int_equal(llama_tp_split(m, 0, 2, tp_sum, &dummy, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "bound"));
	api->destroy(m);
	/* quantized: no F32 slices */
	snprintf(args, sizeof(args), "%s,quant=q4", ck_path);
	m = api->create(args, err, sizeof(err));
	assert_non_null(m);
	assert_int_equal(llama_tp_split(m, 0, 2, tp_sum, &dummy, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "not F32"));
	api->destroy(m);
}

/* Rank 1 of 2 dies before its first step: rank 0's step fails. */
static void test_dead_member_fails_step(void **state)
{
	int *rcs;
	run_logits *l = map_logits(2, &rcs);
	uint64_t t0 = clock_now_ns();

	run_group("auto", 2, l, rcs, 1, 300000000ull);
	assert_true(rcs[0] == -ETIMEDOUT || rcs[0] == -ECANCELED);
	assert_true(clock_now_ns() - t0 < 10000000000ull);
	unmap_logits(l, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_split_portable),
		cmocka_unit_test(test_split_avx2),
		cmocka_unit_test(test_one_rank_is_unsplit),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_dead_member_fails_step),
	};

	test_seed_init("test_llama_tp");
	return cmocka_run_group_tests(tests, setup, teardown);
}
