/*
 * bench_llama_tp.c - bin/bench_llama_tp: decode speed of the llama model
 * split over a tensor-parallel group (lib/model/llama_tp.c) against the
 * unsplit model, the model alone (no engine, no sampling but argmax): how
 * much of P cores a batch-1 decode can use (issue 28's target: P = 2 at
 * least 1.6x P = 1).
 *
 *   bench_llama_tp --checkpoint PATH [--ranks P] [--prompt N] [--tokens N]
 *
 * For P = 1 (the unsplit model) and then P = 2 .. the given P, forked
 * ranks summing through lib/ipc/ring_allreduce.c (AUTO): a prefill of N
 * prompt tokens (default 16), then N decode steps (default 64) of one
 * sequence, each step's token the argmax of the last logits (every rank
 * computes the same ones).  Prints per P one line
 *   ranks=P decode_tok_s=X speedup=S prefill_ms=M
 * (S against P = 1 in the same run).  The checkpoint must be F32 with P
 * dividing n_kv_heads and hidden_dim (bin/make_checkpoint makes one).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc/ring_allreduce.h"
#include "model/llama_model.h"
#include "model/llama_tp.h"
#include "util/clock.h"
#include "util/parse_num.h"

#define MAX_TOKENS 4096u
#define TIMEOUT_NS 60000000000ull

struct timing {
	uint64_t prefill_ns;
	uint64_t decode_ns;
	int rc;
};

static int group_sum(void *ctx, float *v, uint64_t n)
{
	return ring_ar_reduce(ctx, v, n, RING_AR_AUTO, TIMEOUT_NS, NULL);
}

/* One rank's run; rank 0 fills *t.  0 or a negative errno. */
static int rank_run(const struct dynbatch_model_api *api, const char *args,
		    struct ring_ar *ar, uint32_t p, uint32_t n_prompt,
		    uint32_t n_tokens, struct timing *t)
{
	static int32_t toks[MAX_TOKENS * 2];
	char err[512] = "";
	void *m = api->create(args, err, sizeof(err));
	uint32_t vocab, refusal, n = n_prompt;
	float *logits;
	uint64_t t0;
	int rc = -EINVAL;

	if (!m) {
		fprintf(stderr, "bench_llama_tp: %s\n", err);
		return -EINVAL;
	}
	vocab = api->vocab(m);
	logits = malloc((size_t)vocab * sizeof(float));
	if (!logits ||
	    llama_tp_split(m, ar ? ar->rank : 0, p, group_sum, ar, err, sizeof(err)) ||
	    api->bind(m, 1, n_prompt + n_tokens, err, sizeof(err))) {
		fprintf(stderr, "bench_llama_tp: %s\n", err);
		goto out;
	}
	for (uint32_t i = 0; i < n_prompt; i++)
		toks[i] = (int32_t)((i * 7919u + 1) % vocab);
	t0 = clock_now_ns();
	for (uint32_t s = 0; s <= n_tokens; s++) {
		struct dynbatch_model_row row = {
			.tokens = toks, .n_tokens = n,
			.n_cached = s ? n - 1 : 0, .n_consume = s ? 1 : n,
			.want_output = 1 };
		uint32_t best = 0;

		rc = api->step(m, 1, &row, logits, &refusal);
		if (rc)
			goto out;
		if (s == 0) {
			t->prefill_ns = clock_now_ns() - t0;
			t0 = clock_now_ns();
		}
		for (uint32_t v = 1; v < vocab; v++)
			if (logits[v] > logits[best])
				best = v;
		toks[n++] = (int32_t)best;
	}
	t->decode_ns = clock_now_ns() - t0;
	rc = 0;
out:
	free(logits);
	api->destroy(m);
	return rc;
}

/* Group of p ranks (p = 1: in this process, unsplit); *t from rank 0. */
static int run_group(const char *args, uint32_t p, uint32_t n_prompt,
		     uint32_t n_tokens, struct timing *t)
{
	const struct dynbatch_model_api *api = llama_model_api();
	size_t bytes = ring_ar_segment_bytes(p, 64ull * 65536);
	void *seg;
	int rc = 0;

	if (p == 1)
		return rank_run(api, args, NULL, 1, n_prompt, n_tokens, t);
	seg = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (seg == MAP_FAILED || ring_ar_format(seg, bytes, p, 64ull * 65536, 0))
		return -ENOMEM;
	for (uint32_t r = 0; r < p; r++) {
		pid_t pid = fork();
		struct ring_ar ar;
		char err[128];

		if (pid < 0) {
			ring_ar_abort(seg, ECANCELED);
			rc = -errno;
			break;
		}
		if (pid > 0)
			continue;
		if (ring_ar_attach(&ar, seg, bytes, r, err, sizeof(err)))
			_exit(1);
		t[r].rc = rank_run(api, args, &ar, p, n_prompt, n_tokens, &t[r]);
		if (t[r].rc)
			ring_ar_abort(seg, ECANCELED);
		_exit(0);
	}
	while (wait(NULL) > 0)
		;
	munmap(seg, bytes);
	return rc ? rc : t[0].rc;
}

int main(int argc, char **argv)
{
	const char *ck = NULL;
	uint32_t p_max = 2, n_prompt = 16, n_tokens = 64;
	struct timing *t;
	double base = 0;
	char args[1024];

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--checkpoint"))
			ck = argv[i + 1];
		else if (!strcmp(argv[i], "--ranks") &&
			 !parse_u32(argv[i + 1], 1, 64, &p_max))
			;
		else if (!strcmp(argv[i], "--prompt") &&
			 !parse_u32(argv[i + 1], 1, MAX_TOKENS, &n_prompt))
			;
		else if (!strcmp(argv[i], "--tokens") &&
			 !parse_u32(argv[i + 1], 1, MAX_TOKENS, &n_tokens))
			;
		else
			ck = NULL, i = argc;
	}
	if (!ck || argc % 2 == 0) {
		fprintf(stderr, "usage: bench_llama_tp --checkpoint PATH [--ranks P] "
			"[--prompt N] [--tokens N]\n");
		return 2;
	}
	snprintf(args, sizeof(args), "%s,kernel=auto", ck);
	t = mmap(NULL, 64 * sizeof(*t), PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (t == MAP_FAILED)
		return 1;
	for (uint32_t p = 1; p <= p_max; p++) {
		double tok_s;
		int rc;

		memset(t, 0, 64 * sizeof(*t));
		rc = run_group(args, p, n_prompt, n_tokens, t);
		if (rc) {
			fprintf(stderr, "bench_llama_tp: ranks=%u: %s\n", p,
				strerror(-rc));
			return 1;
		}
		tok_s = n_tokens / (t[0].decode_ns / 1e9);
		if (p == 1)
			base = tok_s;
		printf("ranks=%u decode_tok_s=%.1f speedup=%.2f prefill_ms=%.1f\n",
		       p, tok_s, tok_s / base, t[0].prefill_ns / 1e6);
		fflush(stdout);
	}
	return 0;
}
