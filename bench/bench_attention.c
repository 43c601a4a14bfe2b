/*
 * bench_attention.c - bin/bench_attention: one decode step of the built-in
 * llama model over the paged pool (model.h step_paged()) with many rows
 * at a long context, in attention=exact, attention=split,cascade=off and
 * attention=split (cascade on), for bench/bench_cascade.sh.
 *
 *   bench_attention --checkpoint PATH [--rows N] [--context C]
 *                   [--block-tokens B] [--reps R]
 *
 * Each row decodes the token at position C (C cached positions, one
 * consumed, logits wanted).  Two layouts of the same pool: "shared",
 * every row's table naming the same blocks for the first C / B whole
 * blocks (a prefix held once, as the prefix cache and n > 1 forks leave
 * it) and blocks of its own after; "unique", every row all its own
 * blocks.  The pool holds random floats, not a prefill's K/V: attention
 * does the same work whatever the values, and a 1000-token prefill of
 * the 110M shape would cost seconds a row.  The attention's share of a
 * step is taken as the step at context C less the same step at context 0
 * (one key a row): nothing else in a step depends on the context.
 *
 * Rounds interleave the modes and layouts (so that the machine's drift
 * hits all of them) and the best of R rounds is kept.  The logits of
 * split with cascade on and off are compared (memcmp): they must be the
 * same bits; a difference exits 1.  Prints key=value lines.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "dynbatch/model.h"
#include "model/llama_model.h"
#include "util/parse_num.h"

enum { MODES = 3, CASES = 3 };	/* cases: shared, unique, context 0 */
static const char *const mode_opt[MODES] = {
	"", ",attention=split,cascade=off", ",attention=split",
};
static const char *const mode_name[MODES] = {
	"exact", "split", "split+cascade",
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	const struct dynbatch_model_api *api = llama_model_api();
	const char *ck = NULL;
	uint32_t rows = 64, context = 1000, bt = 16, reps = 3, nb, shared_nb;
	uint32_t vocab, *tables[2], *refusals;
	struct dynbatch_paged_row *prow[CASES];
	void *m[MODES];
	double best[MODES][CASES];
	float *pool, *logits[MODES];
	int32_t *tokens;
	uint64_t state = 7;
	size_t pool_floats, kvb;
	char err[512], args[1200];

	for (int i = 1; i + 1 < argc; i += 2) {
		uint32_t *dst = !strcmp(argv[i], "--rows") ? &rows :
				!strcmp(argv[i], "--context") ? &context :
				!strcmp(argv[i], "--block-tokens") ? &bt :
				!strcmp(argv[i], "--reps") ? &reps : NULL;

		if (!strcmp(argv[i], "--checkpoint")) {
			ck = argv[i + 1];
			continue;
		}
		if (!dst || parse_u32(argv[i + 1], 1, 1u << 20, dst)) {
			fprintf(stderr, "bench_attention: bad option %s %s\n",
				argv[i], argv[i + 1]);
			return 2;
		}
	}
	if (!ck || argc % 2 == 0 || strlen(ck) > 1000) {
		fprintf(stderr, "usage: bench_attention --checkpoint PATH [--rows N] "
			"[--context C] [--block-tokens B] [--reps R]\n");
		return 2;
	}
	for (int v = 0; v < MODES; v++) {
		snprintf(args, sizeof(args), "%s%s", ck, mode_opt[v]);
		m[v] = api->create(args, err, sizeof(err));
		if (!m[v]) {
			fprintf(stderr, "bench_attention: %s\n", err);
			return 1;
		}
	}
	vocab = api->vocab(m[0]);
	if (context + 1 > api->max_context(m[0])) {
		fprintf(stderr, "bench_attention: context %u + 1 is past the checkpoint's seq_len %u\n",
			context, api->max_context(m[0]));
		return 2;
	}
	kvb = api->kv_bytes_per_token(m[0]);
	nb = (context + 1 + bt - 1) / bt;	/* blocks a row's table needs */
	shared_nb = context / bt;		/* whole blocks of the prefix */
	pool_floats = (size_t)rows * nb * bt * (kvb / sizeof(float));
	pool = mmap(NULL, pool_floats * sizeof(float), PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	tokens = calloc(context + 1, sizeof(*tokens));
	tables[0] = calloc((size_t)rows * nb, sizeof(uint32_t));
	tables[1] = calloc((size_t)rows * nb, sizeof(uint32_t));
	refusals = calloc(rows, sizeof(*refusals));
	for (int c = 0; c < CASES; c++)
		prow[c] = calloc(rows, sizeof(**prow));
	for (int v = 0; v < MODES; v++)
		logits[v] = malloc((size_t)rows * vocab * sizeof(float));
	if (pool == MAP_FAILED || !tokens || !tables[0] || !tables[1] ||
	    !refusals || !prow[0] || !prow[1] || !prow[2] || !logits[0] ||
	    !logits[1] || !logits[2]) {
		fprintf(stderr, "bench_attention: out of memory (pool of %zu MiB)\n",
			pool_floats * sizeof(float) >> 20);
		return 1;
	}
	for (size_t i = 0; i < pool_floats; i++) {
		state = state * 6364136223846793005ull + 1442695040888963407ull;
		pool[i] = (float)((state >> 40) & 0xffff) / 65536.0f - 0.5f;
	}
	for (uint32_t p = 0; p <= context; p++)
		tokens[p] = (int32_t)(p * 7919u % vocab);
	/* row r owns blocks [r nb, (r + 1) nb); "shared" names row 0's
	 * for the prefix's whole blocks */
	for (uint32_t r = 0; r < rows; r++)
		for (uint32_t b = 0; b < nb; b++) {
			tables[1][(size_t)r * nb + b] = r * nb + b;
			tables[0][(size_t)r * nb + b] = b < shared_nb ? b : r * nb + b;
		}
	for (int c = 0; c < CASES; c++)
		for (uint32_t r = 0; r < rows; r++)
			prow[c][r] = (struct dynbatch_paged_row){
				.row = { .slot = r, .tokens = tokens,
					 .n_tokens = c == 2 ? 1 : context + 1,
					 .n_cached = c == 2 ? 0 : context,
					 .n_consume = 1, .want_output = 1 },
				.blocks = tables[c == 0 ? 0 : 1] + (size_t)r * nb,
				.n_blocks = nb,
			};
	for (int v = 0; v < MODES; v++) {
		if (api->bind_paged(m[v], pool, rows * nb, bt, context + 1, rows,
				    err, sizeof(err))) {
			fprintf(stderr, "bench_attention: %s\n", err);
			return 1;
		}
		for (int c = 0; c < CASES; c++)
			best[v][c] = 1e30;
	}
	for (uint32_t rep = 0; rep <= reps; rep++)	/* round 0 warms up */
		for (int c = 0; c < CASES; c++)
			for (int v = 0; v < MODES; v++) {
				double t0 = now_s(), t;

				if (api->step_paged(m[v], rows, prow[c], logits[v],
						    refusals)) {
					fprintf(stderr, "bench_attention: step_paged failed\n");
					return 1;
				}
				t = now_s() - t0;
				if (rep && t < best[v][c])
					best[v][c] = t;
				if (c == 0 && v == 2 &&
				    memcmp(logits[1], logits[2],
					   (size_t)rows * vocab * sizeof(float))) {
					fprintf(stderr, "bench_attention: split's logits with cascade on and off differ\n");
					return 1;
				}
			}
	printf("rows=%u context=%u block_tokens=%u reps=%u kv_bytes_per_token=%zu\n",
	       rows, context, bt, reps, kvb);
	printf("kv_read_mib_unique=%.1f kv_read_mib_shared_once=%.1f\n",
	       (double)rows * context * kvb / (1 << 20),
	       ((double)shared_nb * bt + (double)rows * (context - shared_nb * bt)) *
		       kvb / (1 << 20));
	/* context 0 is the same work in every mode: the best of them all
	 * is the baseline, the least disturbed by the machine's noise */
	for (int v = 1; v < MODES; v++)
		if (best[v][2] < best[0][2])
			best[0][2] = best[v][2];
	for (int v = 1; v < MODES; v++)
		best[v][2] = best[0][2];
	for (int v = 0; v < MODES; v++)
		printf("mode=%s step_ms_shared=%.2f step_ms_unique=%.2f step_ms_context0=%.2f attn_ms_shared=%.2f attn_ms_unique=%.2f\n",
		       mode_name[v], best[v][0] * 1e3, best[v][1] * 1e3,
		       best[v][2] * 1e3, (best[v][0] - best[v][2]) * 1e3,
		       (best[v][1] - best[v][2]) * 1e3);
	printf("cascade_logits=identical\n");
	for (int v = 0; v < MODES; v++)
		api->destroy(m[v]);
	munmap(pool, pool_floats * sizeof(float));
	return 0;
}
