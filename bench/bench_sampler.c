/*
 * bench_sampler.c - the sampler's cost per row of logits, against a naive
 * full-sort sampler, and its share of a real batch decode step measured
 * in the same run.
 *
 *   bench_sampler [--model CHECKPOINT] [--batch N] [--min-ms MS]
 *
 * For vocabularies of 32000 and 128000 and the cases greedy, temperature
 * only, top_p 0.9, top_k 40 + top_p 0.9, min_p 0.05 and top_p 0.9 with 5
 * logprobs, prints the engine's microseconds per row (lib/sampling/sampler.c
 * as the engine runs it: AVX2 where the CPU has it), the same code on its
 * portable path, the naive sampler's (tools/refdecode/ref_sampler.c: a full stable
 * sort of the vocabulary per row), and the naive / engine ratio.
 * With --model (a llama2.c checkpoint; bench/bench_sampler.sh makes a
 * stories15M-shaped one), it first times decode steps of the built-in
 * llama model at batch N (default 64: N slots, 16-token prompts, then one
 * token per row per step) and prints, for the checkpoint's vocabulary,
 * the share of that step that sampling N rows takes; it also samples the
 * model's own logits (rows "model").  The target is <= 5% for
 * temperature-only and top_p sampling at batch 64.
 *
 * NOTES ON THE DESIGN
 * Two synthetic logit shapes: "peaked" is model-like (a normal spread of
 * sd 2 with one token in 200 raised by 6..12, so a few tokens hold most
 * of the mass), "flat" is the normal spread alone, where top_p 0.9 keeps
 * thousands of tokens: the histogram's worst realistic case.  Each case
 * cycles over 16 distinct rows (so a row is not always cache-hot) for at
 * least --min-ms of this thread's CPU time (wall time would count other
 * processes' turns on a shared machine), in batches of each row once,
 * and reports the best batch, since a shared machine only ever makes a
 * batch slower.  The step is timed the same way (thread CPU time, the
 * best of its steps: the model is single-threaded), in the same process,
 * so the share is a ratio of two figures of one run on one machine.  The
 * portable path is the sampler's own table of it, set by sampler_set_isa().
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/llama_model.h"
#include "util/parse_num.h"
#include "sampling/sampler.h"
#include "model/sim_model.h"

/* The naive sampler of the reference decoder, compiled in. */
#include "tools/refdecode/ref_sampler.h"

#define BENCH_ROWS 16

struct bench_case {
	const char *name;
	struct sampling_params p;
};

static double now_s(void)
{
	struct timespec ts;

	/* CPU time: on a shared machine wall time counts others' turns. */
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double unit(uint64_t *s)
{
	return (double)(sim_splitmix64(s) >> 11) * 0x1p-53;
}

static void make_rows(float *rows, uint32_t vocab, bool peaked, uint64_t seed)
{
	for (size_t i = 0; i < (size_t)BENCH_ROWS * vocab; i++) {
		/* Box-Muller: a normal of sd 2. */
		double u1 = unit(&seed), u2 = unit(&seed);
		double x = 2.0 * sqrt(-2.0 * log(u1 + 1e-300)) * cos(2 * M_PI * u2);

		if (peaked && sim_splitmix64(&seed) % 200 == 0)
			x += 6.0 + 6.0 * unit(&seed);
		rows[i] = (float)x;
	}
}

enum bench_path { PATH_ENGINE, PATH_PORTABLE, PATH_NAIVE };

/*
 * Microseconds per row: the rows sampled in batches of n_rows (each row
 * once a batch) for at least min_s of CPU time, and the best batch's
 * mean, the statistic the step's time is given by too.
 */
static double time_rows(struct sampler *s, const float *rows, uint32_t n_rows,
			uint32_t vocab, const struct sampling_params *p,
			enum bench_path path, double min_s)
{
	double best = INFINITY, start = now_s();
	enum sampler_isa engine_isa = sampler_get_isa(s);
	uint32_t k = 0;

	/* the portable path: its table, asked for (sampler.h) */
	if (path == PATH_PORTABLE)
		sampler_set_isa(s, SAMPLER_ISA_PORTABLE);
	do {
		double batch_start = now_s(), elapsed;

		for (uint32_t n = 0; n < n_rows; n++, k++) {
			struct sampler_result res;
			const float *row = rows + (size_t)n * vocab;
			int ret = path == PATH_NAIVE ?
				  ref_sample(row, vocab, p, k, 0, &res) :
				  sampler_sample(s, row, p, k, 0, &res);

			if (ret) {
				fprintf(stderr, "bench_sampler: sampling failed: %s\n",
					sampler_strerror(ret));
				exit(1);
			}
		}
		elapsed = (now_s() - batch_start) / n_rows;
		best = elapsed < best ? elapsed : best;
	} while (now_s() - start < min_s);
	sampler_set_isa(s, engine_isa);
	return best * 1e6;
}

#define STEP_PROMPT 16u		/* prompt tokens per row */
#define STEP_DECODE 24u		/* decode steps timed */

/* A batch decode step of the llama model, timed. */
struct bench_step {
	uint32_t vocab, batch;
	double best_us, median_us;
	float *logits;		/* the last step's batch x vocab logits */
};

/* The argmax, lowest id on ties. */
static int32_t greedy_token(const float *row, uint32_t vocab)
{
	uint32_t best = 0;

	for (uint32_t i = 1; i < vocab; i++)
		best = row[i] > row[best] ? i : best;
	return (int32_t)best;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/*
 * Open the checkpoint with the built-in llama model, prefill batch rows
 * of STEP_PROMPT random tokens, then time STEP_DECODE decode steps of one
 * token per row (each row's greedy token, as a decode would).
 */
static int time_model_step(const char *path, uint32_t batch,
			   struct bench_step *st)
{
	const struct dynbatch_model_api *api = llama_model_api();
	const uint32_t len = STEP_PROMPT + STEP_DECODE;
	struct dynbatch_model_row *rows = calloc(batch, sizeof(*rows));
	uint32_t *refusals = calloc(batch, sizeof(*refusals));
	int32_t *tokens = malloc(sizeof(*tokens) * batch * len);
	double times[STEP_DECODE];
	uint64_t seed = 1;
	char err[256];
	void *m;
	int ret = -1;

	memset(st, 0, sizeof(*st));
	m = api->create(path, err, sizeof(err));
	if (!m) {
		fprintf(stderr, "bench_sampler: --model %s: %s\n", path, err);
		goto out;
	}
	st->vocab = api->vocab(m);
	st->batch = batch;
	if (api->max_context(m) && api->max_context(m) < len) {
		fprintf(stderr, "bench_sampler: --model %s: a context of %u "
			"tokens is under the %u this benchmark needs\n", path,
			api->max_context(m), len);
		goto out;
	}
	if (api->bind(m, batch, len, err, sizeof(err))) {
		fprintf(stderr, "bench_sampler: --model %s: %s\n", path, err);
		goto out;
	}
	st->logits = malloc(sizeof(float) * batch * st->vocab);
	if (!rows || !refusals || !tokens || !st->logits) {
		fprintf(stderr, "bench_sampler: out of memory\n");
		goto out;
	}
	for (uint32_t i = 0; i < batch * len; i++)
		tokens[i] = (int32_t)(sim_splitmix64(&seed) % st->vocab);
	for (uint32_t step = 0; step <= STEP_DECODE; step++) {
		uint32_t n = STEP_PROMPT + step;
		double start;

		for (uint32_t i = 0; i < batch; i++) {
			/* The previous step's greedy token continues the row. */
			if (step)
				tokens[i * len + n - 1] = greedy_token(
					st->logits + (size_t)i * st->vocab, st->vocab);
			rows[i] = (struct dynbatch_model_row){
				.slot = i, .generation = 1,
				.tokens = tokens + (size_t)i * len, .n_tokens = n,
				.n_cached = step ? n - 1 : 0,
				.n_consume = step ? 1 : n, .want_output = 1 };
		}
		start = now_s();
		ret = api->step(m, batch, rows, st->logits, refusals);
		if (step)
			times[step - 1] = (now_s() - start) * 1e6;
		if (ret) {
			fprintf(stderr, "bench_sampler: --model %s: step failed: %s\n",
				path, strerror(-ret));
			goto out;
		}
		for (uint32_t i = 0; i < batch; i++)
			if (refusals[i]) {
				fprintf(stderr, "bench_sampler: --model %s: row %u "
					"refused (%u)\n", path, i, refusals[i]);
				ret = -1;
				goto out;
			}
	}
	qsort(times, STEP_DECODE, sizeof(times[0]), cmp_double);
	st->best_us = times[0];
	st->median_us = times[STEP_DECODE / 2];
	ret = 0;
out:
	if (m)
		api->destroy(m);
	free(rows);
	free(refusals);
	free(tokens);
	if (ret) {
		free(st->logits);
		st->logits = NULL;
	}
	return ret;
}

static void usage(void)
{
	fprintf(stderr, "usage: bench_sampler [--model CHECKPOINT] [--batch N] "
		"[--min-ms MS]\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'M' },
		{ "batch", required_argument, NULL, 'b' },
		{ "min-ms", required_argument, NULL, 'm' },
		{ NULL, 0, NULL, 0 },
	};
	const struct bench_case cases[] = {
		{ "greedy", SAMPLING_PARAMS_GREEDY },
		{ "temperature 0.8", { .temperature = 0.8f, .top_p = 1.0f } },
		{ "top_p 0.9", { .temperature = 0.8f, .top_p = 0.9f } },
		{ "top_k 40 + top_p 0.9",
		  { .temperature = 0.8f, .top_p = 0.9f, .top_k = 40 } },
		{ "min_p 0.05", { .temperature = 0.8f, .top_p = 1.0f,
				  .min_p = 0.05f } },
		{ "top_p 0.9 + 5 logprobs",
		  { .temperature = 0.8f, .top_p = 0.9f, .logprobs = true,
		    .top_logprobs = 5 } },
	};
	const uint32_t vocabs[] = { 32000, 128000 };
	const char *model = NULL;
	struct bench_step st = { 0 };
	double min_s = 0.2;
	uint32_t batch = 64;
	int c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		double v;

		switch (c) {
		case 'M':
			model = optarg;
			break;
		case 'm':
			v = strtod(optarg, NULL);
			if (!(v > 0)) {
				fprintf(stderr, "bench_sampler: --min-ms %s: want a "
					"positive number of ms\n", optarg);
				return 2;
			}
			min_s = v / 1000.0;
			break;
		case 'b':
			if (parse_u32(optarg, 1, 1u << 16, &batch)) {
				fprintf(stderr, "bench_sampler: --batch %s: want "
					"an integer in [1, 65536]\n", optarg);
				return 2;
			}
			break;
		default:
			usage();
			return 2;
		}
	}
	if (optind != argc) {
		usage();
		return 2;
	}
	if (model) {
		if (time_model_step(model, batch, &st))
			return 1;
		printf("step: llama model %s (vocab %u), batch %u, contexts "
		       "%u..%u: best %.1f ms, median %.1f ms (%u decode steps, "
		       "thread CPU time)\n", model, st.vocab, batch,
		       STEP_PROMPT + 1, STEP_PROMPT + STEP_DECODE, st.best_us / 1e3,
		       st.median_us / 1e3, STEP_DECODE);
	}
	printf("sampler kernels: %s\n", sampler_isa_supported(SAMPLER_ISA_AVX2) ?
	       "avx2 (engine) and portable" : "portable only (engine)");
	printf("%-7s %-6s %-24s %9s %11s %9s %7s %6s %s\n", "vocab", "logits",
	       "case", "engine_us", "portable_us", "naive_us", "naive/", "port/",
	       "share of the step");
	printf("%-7s %-6s %-24s %9s %11s %9s %7s %6s %s\n", "", "", "", "", "",
	       "", "engine", "engine", model ? "(sampling the batch's rows)" : "(no --model)");
	for (size_t v = 0; v < sizeof(vocabs) / sizeof(vocabs[0]) + 1; v++) {
		/* Last: the model's own logits, when there is a model. */
		bool own = v == sizeof(vocabs) / sizeof(vocabs[0]);
		uint32_t vocab = own ? st.vocab : vocabs[v];
		uint32_t n_rows = own ? batch : BENCH_ROWS;
		float *rows = own ? st.logits :
			      malloc(sizeof(float) * BENCH_ROWS * vocab);
		struct sampler *s;

		if (own && !model)
			break;
		s = sampler_create(vocab);
		if (!rows || !s) {
			fprintf(stderr, "bench_sampler: out of memory\n");
			return 1;
		}
		for (int shape = own ? 2 : 1; shape >= 0 && shape <= 2;
		     shape = own ? -1 : shape - 1) {
			const char *shape_name = shape == 2 ? "model" :
						 shape == 1 ? "peaked" : "flat";

			if (!own)
				make_rows(rows, vocab, shape == 1, 42 + vocab);
			for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
				struct sampling_params p = cases[i].p;
				double eng, port, nai;

				p.seed = 7;
				eng = time_rows(s, rows, n_rows, vocab, &p,
						PATH_ENGINE, min_s);
				port = time_rows(s, rows, n_rows, vocab, &p,
						 PATH_PORTABLE, min_s / 2);
				nai = time_rows(s, rows, n_rows, vocab, &p,
						PATH_NAIVE, min_s / 4);
				printf("%-7u %-6s %-24s %9.1f %11.1f %9.1f %6.1fx "
				       "%5.2fx", vocab, shape_name, cases[i].name,
				       eng, port, nai, nai / eng, port / eng);
				/* Sampling the batch's rows, against the step. */
				if (model && vocab == st.vocab)
					printf(" %5.2f%% (%.2f of %.1f ms)",
					       100.0 * eng * batch / st.best_us,
					       eng * batch / 1e3, st.best_us / 1e3);
				printf("\n");
				fflush(stdout);
			}
		}
		sampler_destroy(s);
		free(rows);
	}
	return 0;
}
