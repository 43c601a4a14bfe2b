/*
 * bench_grammar.c - the grammar mask's cost per decode step, against one
 * unconstrained sampler step on the same vocabulary.
 *
 *   bench_grammar [--steps N] [--seed S]
 *
 * For synthetic vocabularies of 32000 and 150000 tokens (single bytes,
 * then random words with and without a leading space, capitalised,
 * digits, JSON punctuation runs and a few multi-byte words, so a trie
 * looks like a BPE vocabulary's) and JSON-schema grammars of three sizes
 * (3, 12 and 40 properties), runs batch rows (1 and 64) in lock step:
 * each step computes every row's mask, then advances each row by a
 * random allowed token (half the time among "closing" ones so documents
 * end; a finished row starts over).  Prints per step:
 *   miss_us   one mask computed from scratch (the trie walk), mean
 *   warm_us   the batch's masks with a shared cache, mean over the
 *             warm-up steps (the cache's tables and states being built)
 *   step_us   the same over as many steps after the warm-up, and the
 *             hit rate of the cache's masks by state
 *   split%    misses served by the per-suffix tables (the rest walk the
 *             trie whole)
 *   chk/miss  tokens no table decided, fed to the whole state, a miss
 *   bld_us    of step_us, the part spent building tables (the lazy
 *             precompute, on the first state that needs each one)
 *   tables    per-suffix tables built, and build_ms the CPU time spent
 *             building them, over all steps
 *   states    matcher states in the cache's automaton at the end, and
 *             cache_mb the memory of tables and automaton together
 *   samp_us   the batch's rows through sampler_sample() (temperature 1,
 *             top_p 0.9) on random logits
 *   ratio     step_us / samp_us
 * Timings are this thread's CPU time.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"
#include "sampling/sampler.h"

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rs = 88172645463325252ull;

static uint32_t rnd(uint32_t n)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (uint32_t)(rs % n);
}

struct vocab {
	uint8_t **b;
	uint32_t *len;
	uint32_t n;
};

static const char *const PUNCT[] = { "\":", "\",", "{\"", "},", "\n  ", "\":\"",
	"\"}", "\"]", "[", "]", ",\n", " {", "\":[", "null", "true", "false",
	"\\n", "\\\"", ".", "-", "0.", "e+" };

static void make_vocab(struct vocab *v, uint32_t n)
{
	uint32_t i, k;

	v->n = n;
	v->b = calloc(n, sizeof(*v->b));
	v->len = calloc(n, sizeof(uint32_t));
	for (i = 0; i < n; i++) {
		char w[32];
		size_t l = 0;
		uint32_t kind = rnd(100);

		if (i == 0) {
			l = 0;		/* EOS */
		} else if (i < 256 - 32 + 1) {
			w[0] = (char)(0x20 + (i - 1) % 95);
			l = 1;
		} else if (kind < 70) {
			uint32_t wl = 2 + rnd(7);

			if (rnd(2))
				w[l++] = ' ';
			for (k = 0; k < wl; k++)
				w[l++] = (char)('a' + rnd(26));
			if (rnd(10) == 0)
				w[l - wl] = (char)(w[l - wl] - 32);
		} else if (kind < 80) {
			uint32_t dl = 1 + rnd(3);

			for (k = 0; k < dl; k++)
				w[l++] = (char)('0' + rnd(10));
		} else if (kind < 95) {
			const char *p = PUNCT[rnd(sizeof(PUNCT) / sizeof(PUNCT[0]))];

			l = strlen(p);
			memcpy(w, p, l);
		} else {
			static const char *const mb[] = { "\xc3\xa9", "\xe4\xb8\xad",
							  "\xc3\xbc", "\xf0\x9f\x98\x80" };
			const char *p = mb[rnd(4)];

			if (rnd(2))
				w[l++] = 'a' + (char)rnd(26);
			memcpy(w + l, p, strlen(p));
			l += strlen(p);
		}
		v->len[i] = (uint32_t)l;
		v->b[i] = malloc(l + 1);
		memcpy(v->b[i], w, l);
	}
}

/* An object schema of n properties of mixed types. */
static char *make_schema(uint32_t n)
{
	size_t cap = 256 + n * 200, o = 0;
	char *s = malloc(cap);
	uint32_t i;

	o += (size_t)snprintf(s + o, cap - o, "{\"type\": \"object\", "
			      "\"additionalProperties\": false, \"properties\": {");
	for (i = 0; i < n; i++) {
		static const char *const types[] = {
			"{\"type\": \"string\", \"maxLength\": 24}",
			"{\"type\": \"integer\"}",
			"{\"type\": \"number\"}",
			"{\"type\": \"boolean\"}",
			"{\"enum\": [\"low\", \"mid\", \"high\"]}",
			"{\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"maxItems\": 4}",
			("{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"number\"},"
			 " \"y\": {\"type\": \"number\"}}, \"required\": [\"x\", \"y\"]}"),
		};

		o += (size_t)snprintf(s + o, cap - o, "%s\"field_%u\": %s", i ? ", " : "",
				      i, types[i % 7]);
	}
	o += (size_t)snprintf(s + o, cap - o, "}, \"required\": [");
	for (i = 0; i < n; i += 2)
		o += (size_t)snprintf(s + o, cap - o, "%s\"field_%u\"", i ? ", " : "", i);
	snprintf(s + o, cap - o, "]}");
	return s;
}

static int closing(const struct vocab *v, uint32_t t)
{
	return t == 0 || (v->len[t] && strchr("\"]}0123456789el,", v->b[t][0]));
}

/* Advance m by a random allowed token of mask; restart when finished. */
static void advance(const struct vocab *v, struct grammar_vocab *gv,
		    const struct grammar *g, struct grammar_matcher **m,
		    const uint64_t *mask)
{
	uint32_t t, n_all = 0, n_close = 0, pick;
	int only;

	for (t = 0; t < v->n; t++)
		if (mask[t / 64] >> (t % 64) & 1) {
			n_all++;
			n_close += closing(v, t);
		}
	if (!n_all) {
		fprintf(stderr, "bench_grammar: dead end\n");
		exit(1);
	}
	only = n_close && rnd(2);
	pick = rnd(only ? n_close : n_all);
	for (t = 0; t < v->n; t++)
		if ((mask[t / 64] >> (t % 64) & 1) && (!only || closing(v, t)) &&
		    !pick--)
			break;
	if (t == 0) {
		grammar_matcher_destroy(*m);
		*m = grammar_matcher_create(g);
		return;
	}
	if (grammar_matcher_accept_token(*m, gv, t)) {
		fprintf(stderr, "bench_grammar: an allowed token was refused\n");
		exit(1);
	}
}

int main(int argc, char **argv)
{
	static const uint32_t vocabs[] = { 32000, 150000 };
	static const uint32_t sizes[] = { 3, 12, 40 };
	static const uint32_t batches[] = { 1, 64 };
	uint32_t steps = 30, vi, si, bi, i, k;

	for (i = 1; i + 1 < (uint32_t)argc; i += 2) {
		if (!strcmp(argv[i], "--steps"))
			steps = (uint32_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--seed"))
			rs = strtoull(argv[i + 1], NULL, 0) | 1;
	}
	printf("%-7s %-6s %-5s %9s %9s %9s %6s %6s %8s %7s %6s %8s %6s %8s %9s %7s\n",
	       "vocab", "props", "batch", "miss_us", "warm_us", "step_us", "hit%",
	       "split%", "chk/miss", "bld_us", "tables", "build_ms", "states",
	       "cache_mb", "samp_us", "ratio");
	for (vi = 0; vi < 2; vi++) {
		struct vocab v;
		struct grammar_vocab *gv;
		struct sampler *smp;
		float *logits;
		size_t words;
		uint64_t *mask, *masks;

		make_vocab(&v, vocabs[vi]);
		gv = grammar_vocab_create((const uint8_t *const *)v.b, v.len, v.n, 0);
		smp = sampler_create(v.n);
		logits = malloc((size_t)v.n * sizeof(float));
		words = grammar_mask_words(v.n);
		mask = malloc(words * 8);
		masks = malloc(words * 8 * 64);
		for (i = 0; i < v.n; i++)
			logits[i] = (float)rnd(1000) / 100.0f;
		for (si = 0; si < 3; si++) {
			char err[256], *schema = make_schema(sizes[si]);
			char *src = json_schema_to_gbnf(schema, strlen(schema), err,
							sizeof(err));
			struct grammar *g = src ? grammar_parse(src, strlen(src), err,
								sizeof(err)) : NULL;

			if (!g) {
				fprintf(stderr, "bench_grammar: %s\n", err);
				return 1;
			}
			for (bi = 0; bi < 2; bi++) {
				uint32_t b = batches[bi];
				struct grammar_matcher **ms = calloc(b, sizeof(*ms));
				struct grammar_mask_cache *cache =
					grammar_mask_cache_create(v.n, 256u << 20);
				double t0, miss = 0, cached = 0, warm = 0, samp;
				struct grammar_mask_stats st0, st1;
				uint32_t n_miss = 0;
				uint64_t h0, m0, h1, m1;
				struct sampling_params p = { .temperature = 1.0f,
							     .top_p = 0.9f, .seed = 7 };

				for (k = 0; k < b; k++)
					ms[k] = grammar_matcher_create(g);
				/* uncached masks: a few rows' worth */
				for (k = 0; k < (b > 4 ? 4 : b) * 3; k++) {
					t0 = cpu_s();
					grammar_mask_compute(gv, ms[k % b], NULL, mask);
					miss += cpu_s() - t0;
					n_miss++;
					advance(&v, gv, g, &ms[k % b], mask);
				}
				/* warm-up, then timed steps, with the cache */
				for (i = 0; i < 2 * steps; i++) {
					if (i == steps) {
						grammar_mask_cache_stats(cache, &h0, &m0);
						grammar_mask_cache_get_stats(cache, &st0);
					}
					/* the batch's masks timed as one (a clock
					 * read per row would cost more than a hit) */
					t0 = cpu_s();
					for (k = 0; k < b; k++)
						grammar_mask_compute(gv, ms[k], cache,
								     masks + k * words);
					if (i >= steps)
						cached += cpu_s() - t0;
					else
						warm += cpu_s() - t0;
					for (k = 0; k < b; k++)
						advance(&v, gv, g, &ms[k], masks + k * words);
				}
				grammar_mask_cache_stats(cache, &h1, &m1);
				grammar_mask_cache_get_stats(cache, &st1);
				t0 = cpu_s();
				for (i = 0; i < steps; i++)
					for (k = 0; k < b; k++) {
						struct sampler_result res;

						sampler_sample(smp, logits, &p, i, k, &res);
					}
				samp = (cpu_s() - t0) / steps;
				cached /= steps;
				warm /= steps;
				printf("%-7u %-6u %-5u %9.1f %9.1f %9.1f %6.1f %6.1f %8.1f %7.1f %6u %8.1f %6u %8.1f %9.1f %7.2f\n",
				       v.n, sizes[si], b, miss / n_miss * 1e6,
				       warm * 1e6, cached * 1e6,
				       100.0 * (double)(h1 - h0) /
				       (double)(h1 - h0 + m1 - m0 ? h1 - h0 + m1 - m0 : 1),
				       100.0 * (double)(st1.n_split - st0.n_split) /
				       (double)(m1 - m0 ? m1 - m0 : 1),
				       (double)(st1.n_checked - st0.n_checked) /
				       (double)(m1 - m0 ? m1 - m0 : 1),
				       (st1.build_s - st0.build_s) / steps * 1e6,
				       st1.n_tables, st1.build_s * 1e3, st1.n_states,
				       (double)(st1.table_bytes + st1.dfa_bytes) / (1 << 20),
				       samp * 1e6, cached / samp);
				fflush(stdout);
				for (k = 0; k < b; k++)
					grammar_matcher_destroy(ms[k]);
				free(ms);
				grammar_mask_cache_destroy(cache);
			}
			grammar_destroy(g);
			free(src);
			free(schema);
		}
		for (i = 0; i < v.n; i++)
			free(v.b[i]);
		free(v.b);
		free(v.len);
		free(mask);
		free(masks);
		free(logits);
		sampler_destroy(smp);
		grammar_vocab_destroy(gv);
	}
	return 0;
}
