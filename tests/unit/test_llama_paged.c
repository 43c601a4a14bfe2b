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
 * attention=split (lib/model/llama_split.c): the same promise between its
 * paged runs, cascade on and off, and its contiguous run, prompts over
 * several chunks of keys and forks of one prefix; its kernels against a
 * naive double softmax (empty and fully masked chunks included) and the
 * whole model against tools/refdecode's double-precision forward pass.
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
#include "tests/unit/test_llama_ckpt.h"
#include "tests/unit/test_rng.h"
#include "tools/refdecode/ref_llama.h"

static char tmp_dir[] = "/tmp/test_llama_paged.XXXXXX";
static char ck_path[128];
static const struct dynbatch_model_api *api;

/* The checkpoint's shape: GQA (2 query heads a KV head), two layers. */
enum { DIM = 64, HIDDEN = 96, LAYERS = 2, HEADS = 4, KV_HEADS = 2,
       VOCAB = 97, SEQ = 256 };
#define KV_DIM (KV_HEADS * (DIM / HEADS))
#define SPLIT_POS 64	/* llama_run.h's LLAMA_SPLIT_POS */
#define PASS_TOKENS 64	/* llama_run.h's LLAMA_CHUNK */

/* ------------------------------------------------------------ helpers */

/* The checkpoint of this test's shape, weights drawn from r. */
static void write_checkpoint(const char *path, struct rng *r)
{
	const struct test_ckpt_shape shape = { DIM, HIDDEN, LAYERS, HEADS, KV_HEADS,
						 VOCAB, SEQ };

	test_ckpt_write(path, &shape, r);
}

static void *must_create(const char *args)
{
	char err[512] = "";
	void *m = api->create(args, err, sizeof(err));

	if (!m)
		fail_msg("create('%s'): %s", args, err);
	return m;
}

/* A zeroed pool of the given bytes, as the engine maps it. */
static float *pool_map(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	assert_true(p != MAP_FAILED);
	return p;
}

static void must_bind_paged(void *m, float *pool, uint32_t n_blocks,
			    uint32_t bt, uint32_t max_context, uint32_t max_rows)
{
	char err[512] = "";

	if (api->bind_paged(m, pool, n_blocks, bt, max_context, max_rows, err,
			    sizeof(err)))
		fail_msg("bind_paged(%u, %u, %u, %u): %s", n_blocks, bt,
			 max_context, max_rows, err);
}

static int32_t argmax(const float *l, uint32_t n)
{
	uint32_t best = 0;

	for (uint32_t i = 1; i < n; i++)
		if (l[i] > l[best])
			best = i;
	return (int32_t)best;
}

static void shuffle(struct rng *r, uint32_t *a, uint32_t n)
{
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = rng_below(r, i), t = a[i - 1];

		a[i - 1] = a[j];
		a[j] = t;
	}
}

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

/*
 * The split kernels against a naive double-precision softmax attention
 * over the same float scores: keys cut every SPLIT_POS positions, each
 * chunk through attn_chunk_exp() (its max exactly the chunk's, its exps
 * within 1e-6 of exp's and its sum within 1e-6 relative) and attn_mix(),
 * merged in order by attn_merge(), divided by the sum at the end: every
 * output element within 1e-5 x sum_p w_p |v_p[i]| (+ 1e-30) of the
 * reference.  Between chunks, empty chunks (no keys) are merged at
 * random and must leave the running state's bits as they were, without
 * NaN; some chunks have only -inf scores (masked keys): the identity too.
 */
static void test_split_kernels(void **state)
{
	enum { MAXP = 300, MAXH = 150 };
	struct rng r = rng_for(4);
	enum llama_kernel_kind kinds[] = { LLAMA_KERNEL_PORTABLE,
					   LLAMA_KERNEL_AVX2 };
	static float keys[MAXP * (MAXH + 8)], vals[MAXP * (MAXH + 8)];
	static float sc[MAXP], buf[SPLIT_POS], acc[MAXH], o[MAXH], o2[MAXH];
	static double w[MAXP];
	uint32_t n_empty = 0, n_masked = 0;

	(void)state;
	for (size_t ki = 0; ki < 2; ki++) {
		const struct llama_kernels *k = llama_kernels_get(kinds[ki]);

		if (!k)
			continue;
		for (int iter = 0; iter < 300; iter++) {
			size_t hs = 1 + rng_below(&r, MAXH), n_pos = 1 + rng_below(&r, MAXP);
			size_t stride = hs + rng_below(&r, 9);
			float q[MAXH], mrun = -INFINITY, lrun = 0.0f, m2, l2, mx;
			double dmax = -INFINITY, dsum = 0;

			for (size_t i = 0; i < hs; i++)
				q[i] = (float)rng_below(&r, 2001) / 500.0f - 2.0f;
			for (size_t i = 0; i < n_pos * stride; i++) {
				keys[i] = (float)rng_below(&r, 20001) / 7777.0f - 1.3f;
				vals[i] = (float)rng_below(&r, 20001) / 9999.0f - 1.0f;
			}
			k->attn_scores(sc, q, keys, stride, n_pos, hs, sqrtf((float)hs));
			/* mask a later chunk now and then (never all of them) */
			for (size_t lo = SPLIT_POS; lo < n_pos; lo += SPLIT_POS)
				if (!rng_below(&r, 4)) {
					for (size_t p = lo; p < n_pos && p < lo + SPLIT_POS; p++)
						sc[p] = -INFINITY;
					n_masked++;
				}
			for (size_t p = 0; p < n_pos; p++)
				dmax = sc[p] > dmax ? sc[p] : dmax;
			for (size_t p = 0; p < n_pos; p++)
				dsum += (w[p] = exp((double)sc[p] - dmax));
			memset(o, 0, hs * sizeof(float));
			for (size_t lo = 0; lo < n_pos; lo += SPLIT_POS) {
				size_t n = n_pos - lo < SPLIT_POS ? n_pos - lo : SPLIT_POS;
				float cmax = -INFINITY, l;
				double csum = 0;

				if (!rng_below(&r, 3)) {	/* an empty chunk */
					memcpy(o2, o, hs * sizeof(float));
					m2 = mrun;
					l2 = lrun;
					l = k->attn_chunk_exp(buf, 0, &mx);
					assert_true(mx == -INFINITY && l == 0.0f);
					k->attn_merge(o, &mrun, &lrun, acc, mx, l, hs);
					if (memcmp(o, o2, hs * sizeof(float)) ||
					    memcmp(&mrun, &m2, sizeof(m2)) ||
					    memcmp(&lrun, &l2, sizeof(l2)))
						fail_msg("seed=%llu %s: merging an empty chunk changed the running state",
							 test_seed, k->name);
					n_empty++;
				}
				memcpy(buf, sc + lo, n * sizeof(float));
				l = k->attn_chunk_exp(buf, n, &mx);
				for (size_t p = 0; p < n; p++)
					cmax = sc[lo + p] > cmax ? sc[lo + p] : cmax;
				if (mx != cmax)
					fail_msg("seed=%llu %s: chunk max %g, want %g",
						 test_seed, k->name, mx, cmax);
				for (size_t p = 0; p < n; p++) {
					double e = cmax == -INFINITY ? 0 :
						   exp((double)sc[lo + p] - cmax);

					csum += e;
					if (fabs(buf[p] - e) > 1e-6 * e || isnan(buf[p]))
						fail_msg("seed=%llu %s: exp %.9g, want %.9g",
							 test_seed, k->name, buf[p], e);
				}
				if (fabs(l - csum) > 1e-6 * csum || isnan(l))
					fail_msg("seed=%llu %s: chunk sum %.9g, want %.9g",
						 test_seed, k->name, l, csum);
				k->attn_mix(acc, buf, vals + lo * stride, stride, n, hs);
				k->attn_merge(o, &mrun, &lrun, acc, mx, l, hs);
			}
			for (size_t i = 0; i < hs; i++) {
				double want = 0, mag = 0, got = o[i] / lrun;

				for (size_t p = 0; p < n_pos; p++) {
					want += w[p] / dsum * vals[p * stride + i];
					mag += w[p] / dsum * fabs(vals[p * stride + i]);
				}
				if (!(fabs(got - want) <= 1e-5 * mag + 1e-30))
					fail_msg("seed=%llu %s: split output %zu = %.9g, naive softmax %.9g (hs %zu, %zu positions)",
						 test_seed, k->name, i, got, want, hs, n_pos);
			}
		}
	}
	printf("split kernels against a double softmax: %u empty chunks merged, %u masked chunks\n",
	       n_empty, n_masked);
	assert_true(n_empty > 0 && n_masked > 0);
}

/* ------------------------------------------- paged against contiguous */

#define N_REQ 8		/* requests a trial */
#define N_OUT 8		/* outputs compared per request */
/* prompts up to max_prompt tokens: 70 for the exact mode's trials, up to
 * PROMPT_CAP for the split mode's (several chunks of LLAMA_SPLIT_POS) */
#define PROMPT_CAP 200
static uint32_t max_prompt = 70;

/* One request: its tokens (the prompt, then the contiguous run's
 * outputs), the paged run's progress, its block table. */
struct preq {
	int32_t tokens[PROMPT_CAP + 40 + N_OUT];
	uint32_t n_prompt;
	int parent;		/* -1, or the request whose prefix it shares */
	uint32_t shared;	/* positions taken from the parent's blocks */
	bool copy;		/* copies of them (copy-on-write), not them */
	uint32_t n_tokens, n_cached, n_out;
	bool started, done;
	uint32_t blocks[PROMPT_CAP + 40 + N_OUT];
	uint32_t n_blocks;
};

static struct preq reqs[N_REQ];
static float want[N_REQ][N_OUT][VOCAB];
/* what the trials covered, printed: outputs compared, requests started on
 * shared blocks and on copies of them */
static uint32_t n_compared, n_shared, n_copied;
/* pairs of rows of one forward pass (LLAMA_CHUNK tokens) whose tables
 * share a whole chunk of LLAMA_SPLIT_POS positions (a cascade group), and
 * pairs that share the chunk's first block only (the check must part
 * them) */
static uint32_t n_cascade_pairs, n_near_pairs;

/* The contiguous mode's logits of every output of q, into want[i], and its
 * tokens appended (greedy); prefill in random chunks. */
static void run_contiguous(void *m, uint32_t i, struct rng *r)
{
	struct preq *q = &reqs[i];
	uint32_t n_tokens = q->n_prompt, n_cached = 0, k = 0, refusal;

	api->release(m, 0);
	while (k < N_OUT) {
		uint32_t left = n_tokens - n_cached;
		uint32_t n = rng_below(r, 2) ? left : 1 + rng_below(r, left);
		struct dynbatch_model_row row = {
			.slot = 0, .tokens = q->tokens, .n_tokens = n_tokens,
			.n_cached = n_cached, .n_consume = n,
			.want_output = n_cached + n == n_tokens,
		};

		assert_int_equal(api->step(m, 1, &row, want[i][k], &refusal), 0);
		assert_int_equal(refusal, DYNBATCH_REFUSE_NONE);
		n_cached += n;
		if (row.want_output)
			q->tokens[n_tokens++] = argmax(want[i][k++], VOCAB);
	}
}

/* Make the trial's requests: random prompts, some sharing a prefix of an
 * earlier one's prompt.  fork: a long first prompt, and every later
 * request shares a prefix of random length (often under a chunk), mostly
 * of the first's: many rows on one prefix, as n > 1 choices make. */
static void make_requests(struct rng *r, bool fork)
{
	for (uint32_t i = 0; i < N_REQ; i++) {
		struct preq *q = &reqs[i];
		uint32_t from = 0;

		memset(q, 0, sizeof(*q));
		q->parent = -1;
		q->n_prompt = fork && i == 0 ?
			max_prompt / 2 + 1 + rng_below(r, max_prompt / 2) :
			1 + rng_below(r, max_prompt);
		if (i > 0 && (fork || rng_below(r, 2))) {
			struct preq *p = &reqs[fork && rng_below(r, 3) ? 0 :
					       rng_below(r, i)];

			q->parent = (int)(p - reqs);
			/* at most max_prompt: a chain of sharers stays in tokens[] */
			from = 1 + rng_below(r, p->n_prompt < max_prompt ?
						p->n_prompt : max_prompt);
			q->n_prompt = from + 1 + rng_below(r, 40);
			memcpy(q->tokens, p->tokens, from * sizeof(int32_t));
		}
		for (uint32_t t = from; t < q->n_prompt; t++)
			q->tokens[t] = (int32_t)rng_below(r, VOCAB);
		q->shared = from;	/* tokens in common, for now */
	}
}

/*
 * The paged run of the trial's requests with blocks of bt positions:
 * tables from a random permutation of the pool; a sharing request takes
 * its parent's leading full blocks (or copies of them) once the parent
 * computed them, and starts with n_cached there; random batches, orders
 * and chunks.  Every output's logits memcmp'd against the contiguous
 * run's.
 */
/*
 * Count the step's cascade chances as the model's passes see them: its
 * rows' tokens flattened in order, LLAMA_CHUNK at a time; in each pass,
 * two tokens of different rows whose chunk at lo is whole for both and
 * whose tables name the same blocks over it (or the same block at lo
 * only).  Written from the definition, apart from llama_split.c.
 */
static void count_cascade(const struct dynbatch_paged_row *rows,
			  uint32_t n_rows, uint32_t bt)
{
	uint32_t row_of[N_REQ * (PROMPT_CAP + 40 + N_OUT)], pos_of[N_REQ * (PROMPT_CAP + 40 + N_OUT)];
	uint32_t n_flat = 0;

	for (uint32_t j = 0; j < n_rows; j++)
		for (uint32_t k = 0; k < rows[j].row.n_consume; k++) {
			row_of[n_flat] = j;
			pos_of[n_flat++] = rows[j].row.n_cached + k;
		}
	for (uint32_t s = 0; s < n_flat; s += PASS_TOKENS) {
		uint32_t e = s + PASS_TOKENS < n_flat ? s + PASS_TOKENS : n_flat;

		for (uint32_t a = s; a < e; a++)
			for (uint32_t b = a + 1; b < e; b++) {
				const uint32_t *ta = rows[row_of[a]].blocks;
				const uint32_t *tb = rows[row_of[b]].blocks;

				if (row_of[a] == row_of[b])
					continue;
				for (uint32_t lo = 0; lo + SPLIT_POS <= pos_of[a] + 1 &&
						      lo + SPLIT_POS <= pos_of[b] + 1;
				     lo += SPLIT_POS) {
					bool all = true;

					if (ta[lo / bt] != tb[lo / bt])
						continue;
					for (uint32_t p = lo; p < lo + SPLIT_POS; p++)
						all = all && ta[p / bt] == tb[p / bt];
					*(all ? &n_cascade_pairs : &n_near_pairs) += 1;
				}
			}
	}
}

static void run_paged(void *m, uint32_t bt, struct rng *r, const char *what)
{
	uint32_t need = 0, n_pool, *perm, next = 0, left = N_REQ;
	size_t bytes, block_bytes = bt * api->kv_bytes_per_token(m);
	static float got[N_REQ * VOCAB];
	float *pool;

	for (uint32_t i = 0; i < N_REQ; i++) {
		struct preq *q = &reqs[i];
		uint32_t len = q->n_prompt + N_OUT - 1;

		/* a second run over the same requests starts afresh */
		q->started = q->done = false;
		q->n_tokens = q->n_cached = q->n_out = 0;

		q->n_blocks = (len + bt - 1) / bt + rng_below(r, 2);
		need += q->n_blocks;
		/* whole blocks of the common prefix, fewer than the prompt */
		q->shared = q->parent < 0 ? 0 : q->shared / bt * bt;
		q->copy = rng_below(r, 2);
	}
	n_pool = need + rng_below(r, 5);
	perm = malloc(n_pool * sizeof(*perm));
	assert_non_null(perm);
	for (uint32_t b = 0; b < n_pool; b++)
		perm[b] = b;
	shuffle(r, perm, n_pool);
	for (uint32_t i = 0; i < N_REQ; i++) {
		struct preq *q = &reqs[i];

		for (uint32_t b = 0; b < q->n_blocks; b++)
			q->blocks[b] = perm[next++];
		if (q->shared && !q->copy)
			memcpy(q->blocks, reqs[q->parent].blocks,
			       q->shared / bt * sizeof(uint32_t));
	}
	bytes = n_pool * block_bytes;
	pool = pool_map(bytes);
	must_bind_paged(m, pool, n_pool, bt, SEQ, N_REQ);
	while (left) {
		struct dynbatch_paged_row rows[N_REQ];
		uint32_t cand[N_REQ], n_cand = 0, n_rows, out = 0, ref[N_REQ];

		for (uint32_t i = 0; i < N_REQ; i++) {
			const struct preq *q = &reqs[i];

			if (!q->done && (q->started || q->parent < 0 ||
					 reqs[q->parent].n_cached >= q->shared))
				cand[n_cand++] = i;
		}
		assert_true(n_cand > 0);
		shuffle(r, cand, n_cand);
		n_rows = 1 + rng_below(r, n_cand);
		for (uint32_t j = 0; j < n_rows; j++) {
			struct preq *q = &reqs[cand[j]];
			uint32_t rest, n;

			if (!q->started) {
				q->started = true;
				q->n_tokens = q->n_prompt;
				q->n_cached = q->shared;
				if (q->shared)
					*(q->copy ? &n_copied : &n_shared) += 1;
				/* the engine's copy-on-write: whole blocks */
				for (uint32_t b = 0; q->copy && b < q->shared / bt; b++)
					memcpy((char *)pool + q->blocks[b] * block_bytes,
					       (char *)pool + reqs[q->parent].blocks[b] * block_bytes,
					       block_bytes);
			}
			rest = q->n_tokens - q->n_cached;
			n = rng_below(r, 2) ? rest : 1 + rng_below(r, rest);
			rows[j] = (struct dynbatch_paged_row){
				.row = { .slot = cand[j], .tokens = q->tokens,
					 .n_tokens = q->n_tokens,
					 .n_cached = q->n_cached, .n_consume = n,
					 .want_output = q->n_cached + n == q->n_tokens },
				.blocks = q->blocks, .n_blocks = q->n_blocks,
			};
		}
		count_cascade(rows, n_rows, bt);
		assert_int_equal(api->step_paged(m, n_rows, rows, got, ref), 0);
		for (uint32_t j = 0; j < n_rows; j++) {
			struct preq *q = &reqs[cand[j]];

			assert_int_equal(ref[j], DYNBATCH_REFUSE_NONE);
			q->n_cached += rows[j].row.n_consume;
			if (!rows[j].row.want_output)
				continue;
			if (memcmp(got + (size_t)out++ * VOCAB, want[cand[j]][q->n_out],
				   VOCAB * sizeof(float)))
				fail_msg("seed=%llu %s, blocks of %u: request %u (prompt %u, shared %u%s) output %u differs from the contiguous mode's (batch of %u, row %u, chunk %u)",
					 test_seed, what, bt, cand[j], q->n_prompt,
					 q->shared, q->copy ? " copied" : "",
					 q->n_out, n_rows, j, rows[j].row.n_consume);
			n_compared++;
			if (++q->n_out == N_OUT) {
				q->done = true;
				left--;
			} else {
				q->n_tokens++;
			}
		}
	}
	munmap(pool, bytes);
	free(perm);
}

/*
 * n_trials trials, block sizes in turn, the two kernel kinds in turn:
 * the contiguous run of the requests with options mode, then for each of
 * paged[0 .. n_paged) a paged run of the same requests with those
 * options (a fresh model, its own random schedule), every output
 * memcmp'd against the contiguous run's.
 */
static void run_trials(struct rng *r, uint32_t n_trials, bool fork,
		       const char *mode, const char *const *paged,
		       uint32_t n_paged)
{
	static const uint32_t sizes[] = { 1, 2, 3, 7, 16, 64, 300 };

	for (uint32_t trial = 0; trial < n_trials; trial++) {
		uint32_t bt = sizes[trial % 7];
		bool portable = trial % 2 || !llama_kernels_have_avx2();
		const char *kind = portable ? "portable" : "avx2";
		char args[300], what[200];
		void *v2, *pg;

		snprintf(args, sizeof(args), "%s,kernel=%s%s", ck_path, kind, mode);
		v2 = must_create(args);
		assert_int_equal(api->bind(v2, 1, SEQ, args, sizeof(args)), 0);
		make_requests(r, fork);
		for (uint32_t i = 0; i < N_REQ; i++)
			run_contiguous(v2, i, r);
		api->destroy(v2);
		for (uint32_t v = 0; v < n_paged; v++) {
			snprintf(args, sizeof(args), "%s,kernel=%s%s", ck_path,
				 kind, paged[v]);
			snprintf(what, sizeof(what), "%s%s", kind, paged[v]);
			pg = must_create(args);
			run_paged(pg, bt, r, what);
			api->destroy(pg);
		}
	}
}

static void test_paged_matches_contiguous(void **state)
{
	static const char *const exact[] = { "" };
	struct rng r = rng_for(2);

	(void)state;
	n_compared = n_shared = n_copied = 0;
	max_prompt = 70;
	run_trials(&r, 4 * 7, false, "", exact, 1);
	printf("paged against contiguous: %u outputs memcmp-equal; %u requests started on shared blocks, %u on copies\n",
	       n_compared, n_shared, n_copied);
	assert_true(n_shared > 0 && n_copied > 0);
}

/*
 * attention=split: the paged run, cascade on and off, bit for bit the
 * contiguous run's, for every block size, table, batch, row order and
 * prefill chunking, prompts over several chunks; half the trials fork
 * one prefix at random lengths (cascade groups in the same pass, and
 * rows that share a chunk's first block but not the rest).
 */
static void test_split_matches_contiguous(void **state)
{
	static const char *const split[] = { ",attention=split",
					     ",attention=split,cascade=off" };
	struct rng r = rng_for(3);

	(void)state;
	n_compared = n_shared = n_copied = 0;
	n_cascade_pairs = n_near_pairs = 0;
	max_prompt = PROMPT_CAP;
	run_trials(&r, 2 * 7, false, ",attention=split", split, 2);
	run_trials(&r, 2 * 7, true, ",attention=split", split, 2);
	max_prompt = 70;
	printf("split, paged (cascade on, off) against contiguous: %u outputs memcmp-equal; %u requests started on shared blocks, %u on copies; %u row pairs in one pass sharing a whole chunk, %u its first block only\n",
	       n_compared, n_shared, n_copied, n_cascade_pairs, n_near_pairs);
	assert_true(n_shared > 0 && n_copied > 0);
	assert_true(n_cascade_pairs > 0 && n_near_pairs > 0);
}

/* Logits of the last of tokens[0 .. n) from a fresh contiguous model
 * made with args, prefilled in one step. */
static void last_logits(const char *args, const int32_t *tokens, uint32_t n,
			float *out)
{
	void *m = must_create(args);
	char err[256];
	uint32_t refusal;
	struct dynbatch_model_row row = { .tokens = tokens, .n_tokens = n,
					  .n_consume = n, .want_output = 1 };

	assert_int_equal(api->bind(m, 1, SEQ, err, sizeof(err)), 0);
	assert_int_equal(api->step(m, 1, &row, out, &refusal), 0);
	assert_int_equal(refusal, DYNBATCH_REFUSE_NONE);
	api->destroy(m);
}

/*
 * The whole model in split mode against the naive double-precision
 * reference (tools/refdecode/ref_llama.c: plain softmax attention, double
 * accumulators), prompts of 1 to SEQ tokens: every logit within 5e-5 x
 * (1 + the largest |logit|) of the reference, as the exact mode is; and
 * past one chunk of keys split's bits differ from exact's somewhere (the
 * option really takes effect).
 */
static void test_split_against_reference(void **state)
{
	struct rng r = rng_for(5);
	static int32_t toks[SEQ];
	static float got[VOCAB], exact[VOCAB];
	static double ref_logits[VOCAB];
	double worst_split = 0, worst_exact = 0;
	uint32_t n_differ = 0;
	struct ref_llama *ref;
	char err[256], path[160], cbuf[4096];
	size_t got_n;
	FILE *in, *outf;

	(void)state;
	/* the reference reads the layout with its RoPE tables (unread by
	 * either model): the same weights, zero tables appended */
	snprintf(path, sizeof(path), "%s/rope.bin", tmp_dir);
	in = fopen(ck_path, "rb");
	outf = fopen(path, "wb");
	assert_true(in && outf);
	while ((got_n = fread(cbuf, 1, sizeof(cbuf), in)) > 0)
		assert_int_equal(fwrite(cbuf, 1, got_n, outf), got_n);
	memset(cbuf, 0, sizeof(cbuf));
	for (size_t left = (size_t)SEQ * (DIM / HEADS) * sizeof(float); left;
	     left -= got_n) {
		got_n = left < sizeof(cbuf) ? left : sizeof(cbuf);
		assert_int_equal(fwrite(cbuf, 1, got_n, outf), got_n);
	}
	fclose(in);
	assert_int_equal(fclose(outf), 0);
	ref = ref_llama_load(path, err, sizeof(err));
	if (!ref)
		fail_msg("ref_llama_load: %s", err);
	for (uint32_t trial = 0; trial < 16; trial++) {
		uint32_t n = trial < 4 ? 1 + rng_below(&r, 64) :
				 64 + rng_below(&r, SEQ - 63);
		bool portable = trial % 2 || !llama_kernels_have_avx2();
		char args[300];
		double top = 0, e_split = 0, e_exact = 0;

		for (uint32_t i = 0; i < n; i++)
			toks[i] = (int32_t)rng_below(&r, VOCAB);
		snprintf(args, sizeof(args), "%s,kernel=%s,attention=split",
			 path, portable ? "portable" : "avx2");
		last_logits(args, toks, n, got);
		snprintf(args, sizeof(args), "%s,kernel=%s", path,
			 portable ? "portable" : "avx2");
		last_logits(args, toks, n, exact);
		assert_int_equal(ref_llama_forward(ref, toks, n, n - 1, ref_logits), 0);
		for (uint32_t v = 0; v < VOCAB; v++) {
			double d = ref_logits[v];

			top = fabs(d) > top ? fabs(d) : top;
			e_split = fmax(e_split, fabs(got[v] - d));
			e_exact = fmax(e_exact, fabs(exact[v] - d));
		}
		if (!(e_split <= 5e-5 * (1 + top)))
			fail_msg("seed=%llu %s: split logits off the reference by %g (exact mode: %g; %u tokens, largest |logit| %g)",
				 test_seed, portable ? "portable" : "avx2",
				 e_split, e_exact, n, top);
		worst_split = fmax(worst_split, e_split / (1 + top));
		worst_exact = fmax(worst_exact, e_exact / (1 + top));
		n_differ += n > SPLIT_POS && memcmp(got, exact, sizeof(got)) != 0;
	}
	ref_llama_free(ref);
	printf("split against the double reference: worst error %.3g x (1 + max |logit|) (exact mode %.3g); %u of 12 long prompts differ from exact in bits\n",
	       worst_split, worst_exact, n_differ);
	assert_true(n_differ > 0);
}

/* ------------------------------------------------- the step's checks */

static bool all_zero(const void *p, size_t n)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++)
		if (c[i])
			return false;
	return true;
}

/*
 * Bad tables fail the step with -EINVAL and nothing written; refusals
 * as in the contiguous mode; the two modes are never mixed; and a step
 * writes exactly the positions it consumes, where model.h's block rule
 * and the [layer][K|V][offset][kv_dim] layout put them.
 */
static void test_paged_checks(void **state)
{
	enum { BT = 3, NB = 8 };
	static int32_t toks[10] = { 5, 9, 1, 0, 96, 33, 2, 7, 7, 60 };
	static float logits[3 * VOCAB];
	uint64_t kvb;
	size_t block_bytes, bytes, kvf = KV_DIM;
	uint32_t blocks[4] = { 5, 2, 7, 0 }, bad[4] = { 5, 2, 7, 0 }, ref[3];
	struct dynbatch_paged_row rows[3];
	struct dynbatch_model_row v2row = { .tokens = toks, .n_tokens = 1,
					    .n_consume = 1, .want_output = 1 };
	char err[512];
	float *pool;
	void *m;

	(void)state;
	m = must_create(ck_path);
	kvb = api->kv_bytes_per_token(m);
	assert_int_equal(kvb, (uint64_t)LAYERS * 2 * KV_DIM * sizeof(float));
	block_bytes = BT * kvb;
	bytes = NB * block_bytes;
	pool = pool_map(bytes);

	/* bind_paged's arguments */
	assert_int_equal(api->bind_paged(m, NULL, NB, BT, SEQ, 3, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "llama: bind_paged"));
	assert_int_equal(api->bind_paged(m, pool, 0, BT, SEQ, 3, err, sizeof(err)), -EINVAL);
	assert_int_equal(api->bind_paged(m, pool, NB, 0, SEQ, 3, err, sizeof(err)), -EINVAL);
	assert_int_equal(api->bind_paged(m, pool, NB, BT, SEQ + 1, 3, err, sizeof(err)), -EINVAL);
	assert_int_equal(api->bind_paged(m, pool, NB, BT, SEQ, 0, err, sizeof(err)), -EINVAL);
	assert_int_equal(api->step_paged(m, 0, NULL, NULL, NULL), -EINVAL);	/* unbound */
	must_bind_paged(m, pool, NB, BT, 9, 3);
	/* bound paged: step() is refused, release() harmless */
	assert_int_equal(api->step(m, 1, &v2row, logits, ref), -EINVAL);
	api->release(m, 0);

	rows[0] = (struct dynbatch_paged_row){
		.row = { .tokens = toks, .n_tokens = 5, .n_consume = 5,
			 .want_output = 1 },
		.blocks = blocks, .n_blocks = 2,
	};
	rows[1] = rows[0];
	rows[1].blocks = bad;
	rows[1].row.slot = 1;
	/* an id at n_blocks, or far past it, in any entry: -EINVAL, nothing
	 * written (row 0 of the step is fine and comes first) */
	for (uint32_t e = 0; e < 2; e++) {
		bad[e] = NB;
		assert_int_equal(api->step_paged(m, 2, rows, logits, ref), -EINVAL);
		bad[e] = UINT32_MAX;
		assert_int_equal(api->step_paged(m, 2, rows, logits, ref), -EINVAL);
		bad[e] = blocks[e];
	}
	/* an entry past what the step uses is checked too */
	rows[1].n_blocks = 3;
	bad[2] = NB + 5;
	assert_int_equal(api->step_paged(m, 2, rows, logits, ref), -EINVAL);
	bad[2] = blocks[2];
	/* too few blocks: 5 positions need 2 blocks of 3 */
	rows[1].n_blocks = 1;
	assert_int_equal(api->step_paged(m, 2, rows, logits, ref), -EINVAL);
	rows[1].n_blocks = 2;
	rows[1].blocks = NULL;
	assert_int_equal(api->step_paged(m, 2, rows, logits, ref), -EINVAL);
	rows[1].blocks = bad;
	/* n_cached + n_consume one past the table: 7 positions, 2 blocks */
	rows[1].row.n_tokens = 7;
	rows[1].row.n_cached = 1;
	rows[1].row.n_consume = 6;
	assert_int_equal(api->step_paged(m, 2, rows, logits, ref), -EINVAL);
	/* more rows than bind_paged's max_rows */
	rows[2] = rows[0];
	rows[1] = rows[0];
	assert_int_equal(api->step_paged(m, 4, rows, logits, ref), -EINVAL);
	if (!all_zero(pool, bytes))
		fail_msg("a failed step wrote into the pool");

	/* refusals: an empty prompt (no blocks at all), a row past
	 * max_context (9), a token outside the vocabulary */
	rows[0].row = (struct dynbatch_model_row){ .tokens = toks, .want_output = 1 };
	rows[0].n_blocks = 0;
	rows[1].row = (struct dynbatch_model_row){ .tokens = toks, .n_tokens = 10,
						   .n_consume = 10, .want_output = 1 };
	rows[2].row = (struct dynbatch_model_row){ .tokens = toks + 4, .n_tokens = 1,
						   .n_consume = 1, .want_output = 1 };
	memset(logits, 0xff, sizeof(logits));
	toks[4] = VOCAB;	/* a bad token, for this step */
	assert_int_equal(api->step_paged(m, 3, rows, logits, ref), 0);
	toks[4] = 96;
	assert_int_equal(ref[0], DYNBATCH_REFUSE_EMPTY_PROMPT);
	assert_int_equal(ref[1], DYNBATCH_REFUSE_CONTEXT);
	assert_int_equal(ref[2], DYNBATCH_REFUSE_TOKEN);
	assert_true(all_zero(logits, sizeof(logits)));
	if (!all_zero(pool, bytes))
		fail_msg("a refused row wrote into the pool");

	/* 5 positions through blocks {5, 2} of 3: block 5 full, offsets 0
	 * and 1 of block 2, nothing else */
	rows[0] = (struct dynbatch_paged_row){
		.row = { .tokens = toks, .n_tokens = 5, .n_consume = 5,
			 .want_output = 1 },
		.blocks = blocks, .n_blocks = 2,
	};
	assert_int_equal(api->step_paged(m, 1, rows, logits, ref), 0);
	assert_int_equal(ref[0], DYNBATCH_REFUSE_NONE);
	for (uint32_t b = 0; b < NB; b++) {
		uint32_t filled = b == 5 ? 3 : b == 2 ? 2 : 0;
		const float *blk = pool + b * (block_bytes / sizeof(float));

		for (uint32_t lw = 0; lw < LAYERS * 2; lw++)	/* layer, K|V */
			for (uint32_t o = 0; o < BT; o++) {
				const float *v = blk + ((size_t)lw * BT + o) * kvf;
				bool z = all_zero(v, kvf * sizeof(float));

				if (z != (o >= filled))
					fail_msg("block %u, layer %u %s, offset %u: %s",
						 b, lw / 2, lw % 2 ? "V" : "K", o,
						 z ? "not written" : "written");
			}
	}
	/* bound with bind(): step_paged() is refused */
	assert_int_equal(api->bind(m, 1, SEQ, err, sizeof(err)), 0);
	assert_int_equal(api->step_paged(m, 1, rows, logits, ref), -EINVAL);
	api->destroy(m);
	munmap(pool, bytes);
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
		cmocka_unit_test(test_split_kernels),
		cmocka_unit_test(test_split_against_reference),
		cmocka_unit_test(test_paged_matches_contiguous),
		cmocka_unit_test(test_split_matches_contiguous),
		cmocka_unit_test(test_paged_checks),
	};
	struct rng r;
	int rc;

	test_seed_init("test_llama_paged");
	api = llama_model_api();
	if (!mkdtemp(tmp_dir)) {
		perror("mkdtemp");
		return 1;
	}
	r = rng_for(0);
	snprintf(ck_path, sizeof(ck_path), "%s/m.bin", tmp_dir);
	write_checkpoint(ck_path, &r);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	if (remove_tmp() != 0)
		fprintf(stderr, "test_llama_paged: could not remove %s\n", tmp_dir);
	return rc;
}
