/*
 * test_simkv_paged.c - "simkv" in paged mode (lib/model/simkv_model.c,
 * model.h ABI version 4), through the loader's calls (model_loader.h) as
 * the engine makes them.
 *
 * What the engine-level tests rely on: paged simkv gives exactly the
 * sim's tokens and logits (sim_next(), sim_logits()) whatever the block
 * size, the table, the batch and the chunking, and rows that take shared
 * leading blocks; but a table that points at another row's blocks, at a
 * block never written or at the right tokens in the wrong places gives a
 * wrong token (not a failed step), as it computes only from what it
 * reads back.  Bad tables fail the step with -EINVAL and nothing written;
 * context=N and the crash and hang tokens act as in the contiguous mode.
 *
 * Seeds: SEED= replays a run (test_rng.h).
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
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

#include "dynbatch/model.h"
#include "model/model_loader.h"
#include "model/sim_model.h"
#include "tests/unit/test_rng.h"

#define VOCAB 97
#define SEED 5
#define MAX_CTX 160

static struct model *must_open(const char *spec)
{
	char err[256] = "";
	struct model *m = model_open(spec, err, sizeof(err));

	if (!m)
		fail_msg("%s: %s", spec, err);
	return m;
}

/* A zeroed pool, as the engine maps it. */
static void *pool_map(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	assert_true(p != MAP_FAILED);
	return p;
}

static void must_bind_paged(struct model *m, void *pool, uint32_t n_blocks,
			    uint32_t bt, uint32_t max_context, uint32_t max_rows)
{
	char err[256] = "";

	if (model_bind_paged(m, pool, n_blocks, bt, max_context, max_rows, err,
			     sizeof(err)))
		fail_msg("bind_paged(%u, %u): %s", n_blocks, bt, err);
}

static int32_t argmax(const float *l, uint32_t n)
{
	uint32_t best = 0;

	for (uint32_t i = 1; i < n; i++)
		if (l[i] > l[best])
			best = i;
	return (int32_t)best;
}

/* One step of one row; its refusal; -errno of the step. */
static int step1(struct model *m, const int32_t *tokens, uint32_t n_tokens,
		 uint32_t n_cached, const uint32_t *blocks, uint32_t n_blocks,
		 float *logits, uint32_t *refusal)
{
	struct dynbatch_paged_row row = {
		.row = { .tokens = tokens, .n_tokens = n_tokens,
			 .n_cached = n_cached, .n_consume = n_tokens - n_cached,
			 .want_output = 1 },
		.blocks = blocks, .n_blocks = n_blocks,
	};

	return model_step_paged(m, 1, &row, logits, refusal);
}

/* ------------------------------------------------------------ the sim's */

#define N_ROWS 6

struct srow {
	int32_t tokens[MAX_CTX];
	uint32_t n_tokens, n_cached, n_prompt, limit;
	uint32_t blocks[MAX_CTX];
	uint32_t n_blocks;
	int parent;		/* shares the parent's first `shared` positions */
	uint32_t shared;
	bool started, done;
};

/*
 * Random rows, tables from a shuffled pool, some rows on their parent's
 * leading blocks from n_cached = those positions, random batches and
 * chunks: every output is the sim's token, and its logits sim_logits().
 */
static void test_paged_gives_sim_tokens(void **state)
{
	static const uint32_t sizes[] = { 1, 2, 3, 7, 16, 200 };
	struct rng r = rng_for(1);
	static struct srow rows[N_ROWS];
	static float logits[N_ROWS * VOCAB], want[VOCAB];
	uint32_t outputs = 0, shared_rows = 0;

	(void)state;
	for (uint32_t trial = 0; trial < 24; trial++) {
		uint32_t bt = sizes[trial % 6], n_pool = 0, next = 0, left = N_ROWS;
		struct model *m = must_open("simkv:vocab=97,seed=5");
		uint32_t *perm;
		size_t bytes;
		void *pool;

		assert_true(model_is_paged(m));
		assert_int_equal(model_kv_bytes_per_token(m), 8);
		for (uint32_t i = 0; i < N_ROWS; i++) {
			struct srow *q = &rows[i];
			uint32_t from = 0;

			memset(q, 0, sizeof(*q));
			q->parent = -1;
			q->n_prompt = 1 + rng_below(&r, 60);
			if (i && rng_below(&r, 2)) {
				q->parent = (int)rng_below(&r, i);
				from = rows[q->parent].n_prompt;
				from = 1 + rng_below(&r, from);
				q->n_prompt = from + 1 + rng_below(&r, 40);
				memcpy(q->tokens, rows[q->parent].tokens,
				       from * sizeof(int32_t));
				q->shared = from / bt * bt;
			}
			for (uint32_t t = from; t < q->n_prompt; t++)
				q->tokens[t] = (int32_t)rng_below(&r, VOCAB);
			q->limit = q->n_prompt + 1 + rng_below(&r, 12);
			q->n_blocks = (q->limit + bt - 1) / bt;
			n_pool += q->n_blocks;
		}
		n_pool += rng_below(&r, 4);
		perm = malloc(n_pool * sizeof(*perm));
		assert_non_null(perm);
		for (uint32_t b = 0; b < n_pool; b++)
			perm[b] = b;
		for (uint32_t b = n_pool; b > 1; b--) {
			uint32_t j = rng_below(&r, b), t = perm[b - 1];

			perm[b - 1] = perm[j];
			perm[j] = t;
		}
		for (uint32_t i = 0; i < N_ROWS; i++) {
			struct srow *q = &rows[i];

			for (uint32_t b = 0; b < q->n_blocks; b++)
				q->blocks[b] = perm[next++];
			if (q->shared)
				memcpy(q->blocks, rows[q->parent].blocks,
				       q->shared / bt * sizeof(uint32_t));
		}
		bytes = (size_t)n_pool * bt * 8;
		pool = pool_map(bytes);
		must_bind_paged(m, pool, n_pool, bt, MAX_CTX, N_ROWS);
		while (left) {
			struct dynbatch_paged_row step[N_ROWS];
			uint32_t who[N_ROWS], n = 0, ref[N_ROWS], out = 0;

			for (uint32_t i = 0; i < N_ROWS; i++) {
				struct srow *q = &rows[i];

				if (q->done)
					continue;
				if (!q->started && q->parent >= 0 &&
				    rows[q->parent].n_cached < q->shared)
					continue;
				if (rng_below(&r, 3) == 0 && n)
					continue;
				if (!q->started) {
					q->started = true;
					q->n_tokens = q->n_prompt;
					q->n_cached = q->shared;
					shared_rows += q->shared > 0;
				}
				who[n] = i;
				step[n].row = (struct dynbatch_model_row){
					.slot = i, .tokens = q->tokens,
					.n_tokens = q->n_tokens, .n_cached = q->n_cached,
					.n_consume = rng_below(&r, 2) ?
						q->n_tokens - q->n_cached :
						1 + rng_below(&r, q->n_tokens - q->n_cached),
				};
				step[n].row.want_output = q->n_cached +
					step[n].row.n_consume == q->n_tokens;
				step[n].blocks = q->blocks;
				step[n].n_blocks = q->n_blocks;
				n++;
			}
			assert_true(n > 0);
			assert_int_equal(model_step_paged(m, n, step, logits, ref), 0);
			for (uint32_t j = 0; j < n; j++) {
				struct srow *q = &rows[who[j]];
				int32_t tok;

				assert_int_equal(ref[j], DYNBATCH_REFUSE_NONE);
				q->n_cached += step[j].row.n_consume;
				if (!step[j].row.want_output)
					continue;
				tok = argmax(logits + (size_t)out * VOCAB, VOCAB);
				if (tok != sim_next(q->tokens, q->n_tokens, VOCAB, SEED))
					fail_msg("seed=%llu blocks of %u: row %u at %u tokens (shared %u): %d, the sim says %d",
						 test_seed, bt, who[j], q->n_tokens, q->shared,
						 tok, sim_next(q->tokens, q->n_tokens, VOCAB, SEED));
				sim_logits(q->tokens, q->n_tokens, VOCAB, SEED, want);
				assert_memory_equal(logits + (size_t)out * VOCAB, want,
						    sizeof(want));
				out++;
				outputs++;
				if (q->n_tokens < q->limit)
					q->tokens[q->n_tokens++] = tok;
				else {
					q->done = true;
					left--;
				}
			}
		}
		model_close(m);
		munmap(pool, bytes);
		free(perm);
	}
	printf("paged simkv: %u outputs the sim's, %u rows on shared blocks\n",
	       outputs, shared_rows);
	assert_true(shared_rows > 0);
}

/* ----------------------------------------------------- wrong tables */

/*
 * Tables the engine got wrong: another row's blocks, a block never
 * written (zeros, which read as token 0), the right tokens in the wrong
 * places.  Each gives a token that is not the sim's, and the step
 * succeeds.
 */
static void test_paged_wrong_tables(void **state)
{
	enum { BT = 4, NB = 8 };
	int32_t a[12], b[12], zeros[9] = { 0 }, same[9];
	uint32_t ta[3] = { 0, 1, 2 }, tb[3] = { 3, 4, 5 }, mixed[3] = { 0, 4, 5 };
	uint32_t ref;
	static float logits[VOCAB];
	struct model *m = must_open("simkv:vocab=97,seed=5");
	size_t bytes = NB * BT * 8;
	void *pool = pool_map(bytes);

	(void)state;
	must_bind_paged(m, pool, NB, BT, MAX_CTX, 2);
	for (int i = 0; i < 12; i++) {
		a[i] = 10 + i;
		b[i] = 50 + i;
	}
	/* a computes 9 positions into blocks 0, 1, 2: the sim's token */
	assert_int_equal(step1(m, a, 9, 0, ta, 3, logits, &ref), 0);
	assert_int_equal(argmax(logits, VOCAB), sim_next(a, 9, VOCAB, SEED));
	/* b claims its first 4 positions are in block 0 (a's): wrong token */
	assert_int_equal(step1(m, b, 9, 4, mixed, 3, logits, &ref), 0);
	assert_int_equal(ref, DYNBATCH_REFUSE_NONE);
	assert_int_not_equal(argmax(logits, VOCAB), sim_next(b, 9, VOCAB, SEED));
	/* from scratch in its own blocks, b is right again */
	assert_int_equal(step1(m, b, 9, 0, tb, 3, logits, &ref), 0);
	assert_int_equal(argmax(logits, VOCAB), sim_next(b, 9, VOCAB, SEED));
	/* a prefix of zeros "cached" in block 6, never written: the zero
	 * page holds token 0 everywhere, but no check word */
	{
		uint32_t t[3] = { 6, 7, 3 };

		assert_int_equal(step1(m, zeros, 9, 8, t, 3, logits, &ref), 0);
		assert_int_not_equal(argmax(logits, VOCAB),
				     sim_next(zeros, 9, VOCAB, SEED));
	}
	/* the same token everywhere: blocks 6 and 7 written, then handed
	 * over swapped: every token read is right, its position is not */
	for (int i = 0; i < 9; i++)
		same[i] = 42;
	{
		uint32_t t[3] = { 6, 7, 3 }, swapped[3] = { 7, 6, 3 };

		assert_int_equal(step1(m, same, 9, 0, t, 3, logits, &ref), 0);
		assert_int_equal(argmax(logits, VOCAB), sim_next(same, 9, VOCAB, SEED));
		assert_int_equal(step1(m, same, 9, 8, swapped, 3, logits, &ref), 0);
		assert_int_not_equal(argmax(logits, VOCAB),
				     sim_next(same, 9, VOCAB, SEED));
	}
	model_close(m);
	munmap(pool, bytes);
}

/* ------------------------------------------------------- the checks */

static bool all_zero(const void *p, size_t n)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++)
		if (c[i])
			return false;
	return true;
}

/* -EINVAL with nothing written; refusals; the modes never mixed. */
static void test_paged_checks(void **state)
{
	enum { BT = 3, NB = 4 };
	int32_t toks[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	uint32_t good[3] = { 2, 0, 3 }, bad[3] = { 2, 0, 3 }, ref[3];
	static float logits[3 * VOCAB];
	struct dynbatch_paged_row rows[3];
	struct model *m = must_open("simkv:vocab=97,seed=5,context=7");
	size_t bytes = NB * BT * 8;
	void *pool = pool_map(bytes);
	char err[256];

	(void)state;
	assert_int_equal(model_bind_paged(m, NULL, NB, BT, 7, 2, err, sizeof(err)), -EINVAL);
	assert_int_equal(model_bind_paged(m, pool, NB, 0, 7, 2, err, sizeof(err)), -EINVAL);
	assert_int_equal(model_step_paged(m, 0, NULL, NULL, NULL), -EINVAL);	/* unbound */
	must_bind_paged(m, pool, NB, BT, 7, 2);
	rows[0] = (struct dynbatch_paged_row){
		.row = { .tokens = toks, .n_tokens = 6, .n_consume = 6,
			 .want_output = 1 },
		.blocks = good, .n_blocks = 2,
	};
	rows[1] = rows[0];
	rows[1].blocks = bad;
	for (uint32_t e = 0; e < 3; e++) {	/* the third entry too */
		rows[1].n_blocks = 3;
		bad[e] = NB;
		assert_int_equal(model_step_paged(m, 2, rows, logits, ref), -EINVAL);
		bad[e] = UINT32_MAX;
		assert_int_equal(model_step_paged(m, 2, rows, logits, ref), -EINVAL);
		bad[e] = good[e];
	}
	rows[1].n_blocks = 1;		/* 6 positions, 3 of room */
	assert_int_equal(model_step_paged(m, 2, rows, logits, ref), -EINVAL);
	rows[1].n_blocks = 2;
	rows[1].row.n_tokens = 7;	/* 7 positions, 6 of room */
	rows[1].row.n_consume = 7;
	assert_int_equal(model_step_paged(m, 2, rows, logits, ref), -EINVAL);
	rows[2] = rows[0];
	assert_int_equal(model_step_paged(m, 3, rows, logits, ref), -EINVAL);	/* max_rows */
	if (!all_zero(pool, bytes))
		fail_msg("a failed step wrote into the pool");
	/* refusals: past context=7 (and no room either), an empty prompt */
	rows[0].row.n_tokens = 8;
	rows[0].row.n_consume = 8;
	rows[1].row = (struct dynbatch_model_row){ .tokens = toks, .want_output = 1 };
	rows[1].n_blocks = 0;
	assert_int_equal(model_step_paged(m, 2, rows, logits, ref), 0);
	assert_int_equal(ref[0], DYNBATCH_REFUSE_CONTEXT);
	assert_int_equal(ref[1], DYNBATCH_REFUSE_EMPTY_PROMPT);
	toks[2] = VOCAB;
	assert_int_equal(step1(m, toks, 3, 0, good, 1, logits, ref), 0);
	assert_int_equal(ref[0], DYNBATCH_REFUSE_TOKEN);
	toks[2] = 3;
	if (!all_zero(pool, bytes))
		fail_msg("a refused row wrote into the pool");
	/* the contiguous calls on a paged model */
	assert_int_equal(model_step(m, 1, &rows[0].row, logits, ref), -EINVAL);
	assert_int_equal(model_bind(m, 2, 7, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "simkv: bind() after bind_paged()"));
	model_release(m, 0);
	model_close(m);
	munmap(pool, bytes);
}

/* The crash and hang tokens, in a child: they act on the last token a
 * row reads back from its blocks (a hang: still running after 300 ms). */
static void test_paged_faults(void **state)
{
	static const char *const specs[2] = {
		"simkv:vocab=97,seed=5,crash_token=33",
		"simkv:vocab=97,seed=5,hang_token=33",
	};

	(void)state;
	for (int k = 0; k < 2; k++) {
		int status = 0;
		pid_t pid, got = 0;

		fflush(NULL);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			int32_t toks[4] = { 1, 2, 3, 33 };
			uint32_t blocks[2] = { 1, 0 }, ref;
			static float logits[VOCAB];
			struct model *m = model_open(specs[k], NULL, 0);
			void *pool = pool_map(4 * 2 * 8);

			signal(SIGABRT, SIG_DFL);	/* whatever the runner set */
			if (!m || model_bind_paged(m, pool, 4, 2, 16, 1, NULL, 0))
				_exit(3);
			/* 33 not yet the last token: nothing happens */
			if (step1(m, toks, 3, 0, blocks, 2, logits, &ref))
				_exit(4);
			step1(m, toks, 4, 3, blocks, 2, logits, &ref);
			_exit(0);
		}
		for (int ms = 0; ms < 300 && got == 0; ms++) {
			got = waitpid(pid, &status, WNOHANG);
			assert_true(got >= 0);
			if (!got)
				usleep(1000);
		}
		if (k == 0 && !(got == pid && WIFSIGNALED(status) &&
				WTERMSIG(status) == SIGABRT))
			fail_msg("%s: no abort (status 0x%x)", specs[k], status);
		if (k == 1 && got != 0)
			fail_msg("%s: ended (status 0x%x) instead of hanging",
				 specs[k], status);
		if (!got) {
			kill(pid, SIGKILL);
			assert_int_equal(waitpid(pid, &status, 0), pid);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_paged_gives_sim_tokens),
		cmocka_unit_test(test_paged_wrong_tables),
		cmocka_unit_test(test_paged_checks),
		cmocka_unit_test(test_paged_faults),
	};

	test_seed_init("test_simkv_paged");
	return cmocka_run_group_tests_name("simkv_paged", tests, NULL, NULL);
}
