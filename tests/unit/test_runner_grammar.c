/*
 * test_runner_grammar.c - a row's grammar as the runner follows it
 * (lib/grammar/grammar_seq.c, lib/model/runner_grammar.c; docs/DESIGN.md
 * 2.8), against the naive reference: a fresh matcher fed every generated
 * token from the root, and each token's bytes tried on a copy of it.
 *
 * Rows grow a token at a time, are sent back to a shorter length, are
 * rewritten past a shared prefix (another choice of the walk), move to
 * a new generation or another grammar, and lose their grammar; the mask
 * the runner would apply must be the naive one after every change.  The
 * vocabulary has multi-byte pieces, byte tokens and two end tokens (EOS
 * and an end of turn) with bytes of their own, which must never be taken
 * for them.  SEED=N replays.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "grammar/grammar.h"
#include "grammar/grammar_pool.h"
#include "grammar/grammar_seq.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"
#include "model/runner_grammar.h"
#include "tests/unit/test_rng.h"

#define N_VOCAB 200
#define EOS 2
#define EOT 3	/* a second end token, as a chat's end of turn */
#define IS_END(t) ((t) == EOS || (t) == EOT)
#define MAX_LEN 80

struct vocab {
	uint8_t *b[N_VOCAB];
	uint32_t len[N_VOCAB];
};

/* Pieces of JSON, single bytes, and an EOS that spells "</s>". */
static void make_vocab(struct vocab *v, struct rng *r)
{
	static const char *const pieces[] = {
		"{", "}", "[", "]", ":", ",", "\"", " ", "\n", "\"a\"", "\"b\": ",
		"true", "false", "null", "1", "23", "-", ".5", "e1", "{\"", "\"}",
		"abc", "\\", "\\n", "\\u00", "\xc3\xa9", "\xe2\x82", "\xac", ", \"",
	};
	uint32_t t = 0;

	v->b[t] = NULL, v->len[t++] = 0;		/* <unk>: empty */
	v->b[t] = NULL, v->len[t++] = 0;		/* BOS: empty */
	v->b[t] = (uint8_t *)strdup("</s>"), v->len[t++] = 4;	/* EOS */
	v->b[t] = (uint8_t *)strdup("<|im_end|>"), v->len[t++] = 10;	/* EOT */
	for (uint32_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++, t++) {
		v->len[t] = (uint32_t)strlen(pieces[i]);
		v->b[t] = (uint8_t *)strdup(pieces[i]);
	}
	for (; t < N_VOCAB; t++) {	/* single bytes, some ASCII, some not */
		v->b[t] = malloc(1);
		v->b[t][0] = (uint8_t)(rng_below(r, 2) ? 32 + rng_below(r, 95) :
				       128 + rng_below(r, 128));
		v->len[t] = 1;
	}
}

static void free_vocab(struct vocab *v)
{
	for (uint32_t t = 0; t < N_VOCAB; t++)
		free(v->b[t]);
}

/* The naive mask after gen[0 .. n): replay from the root, then every
 * token tried.  -1 when gen itself breaks the grammar. */
static int naive_mask(const struct grammar *g, const struct vocab *v,
		      const int32_t *gen, uint32_t n, uint64_t *mask)
{
	struct grammar_matcher *m = grammar_matcher_create(g);

	memset(mask, 0, grammar_mask_words(N_VOCAB) * sizeof(*mask));
	for (uint32_t i = 0; i < n; i++) {
		if (IS_END(gen[i]) || !v->len[gen[i]] ||
		    grammar_matcher_accept_bytes(m, v->b[gen[i]], v->len[gen[i]])) {
			grammar_matcher_destroy(m);
			return -1;
		}
	}
	for (uint32_t t = 0; t < N_VOCAB; t++) {
		struct grammar_matcher *c = grammar_matcher_clone(m);
		int ok = IS_END(t) ? grammar_matcher_is_accepting(m) :
			 v->len[t] && !grammar_matcher_accept_bytes(c, v->b[t], v->len[t]);

		if (ok)
			mask[t / 64] |= 1ull << (t % 64);
		grammar_matcher_destroy(c);
	}
	grammar_matcher_destroy(m);
	return 0;
}

/* A random walk of up to n tokens after gen[0 .. from), each one the
 * naive mask allows (never EOS); its length. */
static uint32_t walk(const struct grammar *g, const struct vocab *v,
		     struct rng *r, int32_t *gen, uint32_t from, uint32_t n)
{
	uint64_t mask[4];

	while (from < n) {
		uint32_t allowed[N_VOCAB], k = 0;

		assert_int_equal(naive_mask(g, v, gen, from, mask), 0);
		for (uint32_t t = 0; t < N_VOCAB; t++)
			if (!IS_END(t) && (mask[t / 64] >> (t % 64) & 1))
				allowed[k++] = t;
		if (!k)
			break;
		gen[from++] = (int32_t)allowed[rng_below(r, k)];
	}
	return from;
}

static struct grammar *compile(const char *src)
{
	char err[256];
	struct grammar *g = grammar_parse(src, strlen(src), err, sizeof(err));

	if (!g)
		fail_msg("test grammar refused: %s", err);
	return g;
}

/* grammar_seq against the replay, through growth, send-backs and
 * rewrites. */
static void test_seq_follows_rows(void **state)
{
	struct rng r = rng_for(1);
	struct vocab v;
	struct grammar_vocab *gv;
	char *json = json_mode_gbnf();
	struct grammar *g = compile(json);
	int32_t gen[MAX_LEN], other[MAX_LEN];
	uint64_t want[4], got[4];
	uint32_t checks = 0, replays = 0;

	(void)state;
	make_vocab(&v, &r);
	gv = grammar_vocab_create_ends((const uint8_t *const *)v.b, v.len, N_VOCAB,
				       (const int32_t[]){ EOS, EOT }, 2);
	assert_non_null(gv);
	for (uint32_t round = 0; round < 40; round++) {
		struct grammar_seq *s = grammar_seq_create(g, gv, round % 2 ? 1 << 16 : 0);
		uint32_t n = walk(g, &v, &r, gen, 0, 1 + rng_below(&r, MAX_LEN - 1)), at = 0;

		assert_non_null(s);
		while (at <= n) {
			uint32_t op = rng_below(&r, 6);

			if (op == 0 && at > 0) {		/* sent back */
				at = rng_below(&r, at);
			} else if (op == 1 && at > 1) {	/* rewritten past a prefix */
				uint32_t keep = rng_below(&r, at);

				memcpy(other, gen, keep * sizeof(*gen));
				n = walk(g, &v, &r, other, keep, n);
				memcpy(gen, other, n * sizeof(*gen));
				if (at > n)
					at = n;
				replays++;
			} else {
				at++;	/* grown (past n ends the round) */
				if (at > n)
					break;
			}
			assert_int_equal(grammar_seq_sync(s, gen, at), 0);
			assert_int_equal(grammar_seq_length(s), at);
			assert_int_equal(grammar_seq_mask(s, got), 0);
			assert_int_equal(naive_mask(g, &v, gen, at, want), 0);
			if (memcmp(want, got, grammar_mask_words(N_VOCAB) * 8))
				fail_msg("round %u, %u tokens: the mask differs from the "
					 "replay's", round, at);
			checks++;
		}
		/* a token the grammar refuses: an error, and the seq stays at
		 * the longest prefix that held */
		if (n < MAX_LEN) {
			assert_int_equal(naive_mask(g, &v, gen, n, want), 0);
			for (uint32_t t = EOT + 1; t < N_VOCAB; t++)
				if (!(want[t / 64] >> (t % 64) & 1)) {
					gen[n] = (int32_t)t;
					assert_int_equal(grammar_seq_sync(s, gen, n + 1), -ENOENT);
					assert_int_equal(grammar_seq_length(s), n);
					break;
				}
		}
		grammar_seq_destroy(s);
	}
	printf("grammar_seq: %u masks checked, %u rewrites\n", checks, replays);
	assert_true(replays > 10);
	grammar_vocab_destroy(gv);
	grammar_destroy(g);
	free(json);
	free_vocab(&v);
}

/* runner_grammar: per slot, a new generation or grammar starts over,
 * no grammar means no mask, no vocabulary refuses. */
static void test_runner_slots(void **state)
{
	struct rng r = rng_for(2);
	struct vocab v;
	struct grammar_vocab *gv;
	struct grammar *ga = compile("root ::= \"{\" [a-c]* \"}\"");
	struct grammar_mask_cache *shared = grammar_mask_cache_create(N_VOCAB, 1 << 18);
	char *json = json_mode_gbnf();
	struct grammar *gb = compile(json);
	struct runner_grammar rg;
	int32_t tokens[4 + MAX_LEN] = { 9, 9, 9, 9 };	/* a prompt of 4 */
	uint64_t want[4];
	const uint64_t *got;

	(void)state;
	make_vocab(&v, &r);
	gv = grammar_vocab_create_ends((const uint8_t *const *)v.b, v.len, N_VOCAB,
				       (const int32_t[]){ EOS, EOT }, 2);
	runner_grammar_init(&rg, 4, N_VOCAB);
	/* no vocabulary: a constrained row is refused */
	assert_ptr_equal(runner_grammar_row(&rg, 1, 1, ga, NULL, tokens, 4, 4),
			 runner_grammar_failed);
	rg.vocab = gv;
	for (uint32_t step = 0; step < 300; step++) {
		uint32_t slot = rng_below(&r, 4), gen_no = 1 + rng_below(&r, 3);
		const struct grammar *g = rng_below(&r, 5) ? (rng_below(&r, 2) ? ga : gb) : NULL;
		uint32_t n = g ? walk(g, &v, &r, tokens + 4, 0, rng_below(&r, 12)) : 0;

		/* ga's rows share one cache half the time, as a pool's do */
		got = runner_grammar_row(&rg, slot, gen_no, g,
					 g == ga && step % 2 ? shared : NULL,
					 tokens, 4 + n, 4);
		if (!g) {
			assert_null(got);
			assert_null(rg.allowed[slot]);
			continue;
		}
		assert_int_equal(naive_mask(g, &v, tokens + 4, n, want), 0);
		assert_non_null(got);
		assert_ptr_equal(rg.allowed[slot], got);
		if (memcmp(want, got, grammar_mask_words(N_VOCAB) * 8))
			fail_msg("step %u slot %u: the runner's mask differs", step, slot);
	}
	/* a row shorter than its prompt is refused, not read before it */
	assert_ptr_equal(runner_grammar_row(&rg, 0, 9, ga, NULL, tokens, 3, 4),
			 runner_grammar_failed);
	runner_grammar_free(&rg);
	grammar_mask_cache_destroy(shared);
	grammar_vocab_destroy(gv);
	grammar_destroy(ga);
	grammar_destroy(gb);
	free(json);
	free_vocab(&v);
}

/* The pool: one entry per source (compared in full), kept while held
 * and, idle, until max_idle others are idle. */
static void test_pool(void **state)
{
	struct grammar_pool *p = grammar_pool_create(N_VOCAB, 1 << 16, 2);
	const char *a = "root ::= \"a\"", *b = "root ::= \"b\"";
	const struct grammar_pool_entry *e1, *e2, *e3, *eb;
	char err[128];

	(void)state;
	e1 = grammar_pool_get(p, a, (uint32_t)strlen(a), err, sizeof(err));
	e2 = grammar_pool_get(p, a, (uint32_t)strlen(a), err, sizeof(err));
	eb = grammar_pool_get(p, b, (uint32_t)strlen(b), err, sizeof(err));
	assert_non_null(e1);
	assert_ptr_equal(e1, e2);
	assert_ptr_not_equal(e1, eb);
	assert_non_null(e1->cache);
	/* a prefix of a source is another source */
	e3 = grammar_pool_get(p, a, (uint32_t)strlen(a) - 1, err, sizeof(err));
	assert_null(e3);	/* 'root ::= "a' does not compile */
	assert_non_null(strstr(err, "line 1"));
	grammar_pool_put(p, e1);
	grammar_pool_put(p, e2);	/* idle now, kept */
	assert_ptr_equal(grammar_pool_get(p, a, (uint32_t)strlen(a), err, sizeof(err)), e1);
	grammar_pool_put(p, e1);
	grammar_pool_put(p, eb);
	grammar_pool_destroy(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_seq_follows_rows),
		cmocka_unit_test(test_runner_slots),
		cmocka_unit_test(test_pool),
	};

	test_seed_init("test_runner_grammar");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
