/*
 * test_grammar.c - the GBNF parser, the byte matcher and the token mask.
 *
 * Random grammars are built here as small expression trees, printed as
 * GBNF, and judged by an independent recognizer over the tree (the set
 * of end positions of each node, from the definition of each operator).
 * On them: the matcher accepts exactly what the recognizer accepts; the
 * trie mask equals a naive mask (every token's bytes fed to a fresh
 * copy) on every path a mask can take: uncached (an automaton of the
 * call), through a cache's per-suffix tables, with the tables or the
 * automaton capped so that they fill and fall back, and with a one-byte
 * cache (plain walk, one shared slot); and random walks, choosing
 * uniformly among allowed tokens, end only in sentences of the grammar.
 * The same masks are held to the naive one on JSON mode with a BPE-like
 * vocabulary, and next to the matcher's caps (stacks that multiply past
 * 1024, nesting past depth 512).  Parser errors are checked for their
 * line and column.
 *
 * SEED=<n> replays a run (tests/unit/test_rng.h).
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
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"
#include "tests/unit/test_rng.h"

/* ------------------------------------------------------------------ */
/* UTF-8 and helpers                                                   */
/* ------------------------------------------------------------------ */

static size_t put_utf8(uint8_t *o, uint32_t c)
{
	if (c < 0x80) {
		o[0] = (uint8_t)c;
		return 1;
	}
	if (c < 0x800) {
		o[0] = (uint8_t)(0xc0 | c >> 6);
		o[1] = (uint8_t)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		o[0] = (uint8_t)(0xe0 | c >> 12);
		o[1] = (uint8_t)(0x80 | (c >> 6 & 0x3f));
		o[2] = (uint8_t)(0x80 | (c & 0x3f));
		return 3;
	}
	o[0] = (uint8_t)(0xf0 | c >> 18);
	o[1] = (uint8_t)(0x80 | (c >> 12 & 0x3f));
	o[2] = (uint8_t)(0x80 | (c >> 6 & 0x3f));
	o[3] = (uint8_t)(0x80 | (c & 0x3f));
	return 4;
}

/* Strict UTF-8 decode (naive, from the definition); -1 if invalid. */
static int decode_utf8(const uint8_t *s, size_t n, uint32_t *cps, size_t max)
{
	size_t i = 0, k = 0;

	while (i < n) {
		uint32_t c = s[i], need, min;

		if (c < 0x80) {
			need = 0; min = 0;
		} else if ((c & 0xe0) == 0xc0) {
			need = 1; c &= 0x1f; min = 0x80;
		} else if ((c & 0xf0) == 0xe0) {
			need = 2; c &= 0x0f; min = 0x800;
		} else if ((c & 0xf8) == 0xf0) {
			need = 3; c &= 0x07; min = 0x10000;
		} else {
			return -1;
		}
		if (i + need >= n + (need ? 0 : 1) && need)
			return -1;
		for (i++; need; need--, i++) {
			if (i >= n || (s[i] & 0xc0) != 0x80)
				return -1;
			c = c << 6 | (s[i] & 0x3f);
		}
		if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
			return -1;
		if (k >= max)
			return -1;
		cps[k++] = c;
	}
	return (int)k;
}

static const uint32_t alphabet[] = { 'a', 'b', 'c', '-', '"', ']', 0xe9,
				     0x4e2d, 0x1f600 };
#define N_ALPHA (sizeof(alphabet) / sizeof(alphabet[0]))

/* ------------------------------------------------------------------ */
/* Random grammars and their recognizer                                */
/* ------------------------------------------------------------------ */

enum { N_LIT, N_CLASS, N_SEQ, N_ALT, N_REP, N_RULE };

struct node {
	int type;
	uint32_t lit[3], n_lit;
	uint32_t lo[3], hi[3], n_rng;
	int negated;
	struct node *kid[3];
	uint32_t n_kid;
	uint32_t m, n;		/* REP; n = UINT32_MAX: no bound */
	int op;			/* REP: '*', '+', '?', '{' */
	uint32_t rule_id;	/* N_RULE */
};

static int nullable(const struct node *x)
{
	uint32_t i;

	switch (x->type) {
	case N_LIT:
	case N_CLASS:
		return 0;
	case N_SEQ:
		for (i = 0; i < x->n_kid; i++)
			if (!nullable(x->kid[i]))
				return 0;
		return 1;
	case N_ALT:
		for (i = 0; i < x->n_kid; i++)
			if (nullable(x->kid[i]))
				return 1;
		return 0;
	case N_REP:
		return x->m == 0 || nullable(x->kid[0]);
	default:
		return nullable(x->kid[0]);
	}
}

static uint32_t n_rules_made;

static struct node *gen(struct rng *r, int depth)
{
	struct node *x = calloc(1, sizeof(*x));
	uint32_t i, t = depth <= 0 ? rng_below(r, 2) : rng_below(r, 6);

	x->type = (int)t;
	switch (t) {
	case N_LIT:
		x->n_lit = 1 + rng_below(r, 3);
		for (i = 0; i < x->n_lit; i++)
			x->lit[i] = alphabet[rng_below(r, N_ALPHA)];
		break;
	case N_CLASS:
		x->n_rng = 1 + rng_below(r, 3);
		for (i = 0; i < x->n_rng; i++) {
			uint32_t a = alphabet[rng_below(r, N_ALPHA)];
			uint32_t b = alphabet[rng_below(r, N_ALPHA)];

			x->lo[i] = a < b ? a : b;
			x->hi[i] = a < b ? b : a;
		}
		x->negated = rng_below(r, 4) == 0;
		break;
	case N_SEQ:
	case N_ALT:
		x->n_kid = 2 + rng_below(r, 2);
		for (i = 0; i < x->n_kid; i++)
			x->kid[i] = gen(r, depth - 1);
		break;
	case N_REP:
		x->n_kid = 1;
		x->kid[0] = gen(r, depth - 1);
		x->op = "*+?{"[rng_below(r, 4)];
		if ((x->op == '*' || x->op == '+') && nullable(x->kid[0]))
			x->op = '?';
		if (x->op == '*') {
			x->m = 0; x->n = UINT32_MAX;
		} else if (x->op == '+') {
			x->m = 1; x->n = UINT32_MAX;
		} else if (x->op == '?') {
			x->m = 0; x->n = 1;
		} else {
			x->m = rng_below(r, 3);
			x->n = x->m + rng_below(r, 3);
			if (!nullable(x->kid[0]) && rng_below(r, 3) == 0)
				x->n = UINT32_MAX;
		}
		break;
	default:
		x->n_kid = 1;
		x->kid[0] = gen(r, depth - 1);
		x->rule_id = n_rules_made++;
		break;
	}
	return x;
}

static void free_node(struct node *x)
{
	uint32_t i;

	if (!x)
		return;
	for (i = 0; i < x->n_kid; i++)
		free_node(x->kid[i]);
	free(x);
}

struct text {
	char *s;
	size_t n, cap;
};

static void tput(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int k;

	for (;;) {
		va_start(ap, fmt);
		k = vsnprintf(t->s ? t->s + t->n : NULL, t->cap - t->n, fmt, ap);
		va_end(ap);
		if ((size_t)k < t->cap - t->n)
			break;
		t->cap = t->cap * 2 + (size_t)k + 64;
		t->s = realloc(t->s, t->cap);
	}
	t->n += (size_t)k;
}

/* One character inside "..." or [...]: escaped, raw or as \u. */
static void put_char(struct text *t, struct rng *r, uint32_t c)
{
	uint8_t b[5] = { 0 };

	if (c == '"' || c == ']' || c == '-' || c == '\\')
		tput(t, "\\%c", (int)c);
	else if (c < 0x80)
		tput(t, rng_below(r, 2) ? "%c" : "\\x%02x", (int)c);
	else if (c > 0xffff)
		tput(t, "\\U%08x", c);
	else if (rng_below(r, 2))
		tput(t, "\\u%04x", c);
	else {
		put_utf8(b, c);
		tput(t, "%s", (char *)b);
	}
}

/* x as GBNF into t; named rules go to rules. */
static void emit(const struct node *x, struct rng *r, struct text *t,
		 struct text *rules)
{
	uint32_t i;

	switch (x->type) {
	case N_LIT:
		tput(t, "\"");
		for (i = 0; i < x->n_lit; i++)
			put_char(t, r, x->lit[i]);
		tput(t, "\"");
		break;
	case N_CLASS:
		tput(t, x->negated ? "[^" : "[");
		for (i = 0; i < x->n_rng; i++) {
			put_char(t, r, x->lo[i]);
			if (x->hi[i] != x->lo[i]) {
				tput(t, "-");
				put_char(t, r, x->hi[i]);
			}
		}
		tput(t, "]");
		break;
	case N_SEQ:
	case N_ALT:
		tput(t, "(");
		for (i = 0; i < x->n_kid; i++) {
			if (i)
				tput(t, x->type == N_ALT ? " |\n  " : " ");
			emit(x->kid[i], r, t, rules);
		}
		tput(t, ")");
		break;
	case N_REP:
		tput(t, "(");
		emit(x->kid[0], r, t, rules);
		tput(t, ")");
		if (x->op != '{')
			tput(t, "%c", x->op);
		else if (x->n == UINT32_MAX)
			tput(t, "{%u,}", x->m);
		else if (x->n == x->m)
			tput(t, "{%u}", x->m);
		else if (!x->m && rng_below(r, 2))
			tput(t, "{ ,%u }", x->n);
		else
			tput(t, "{%u,%u}", x->m, x->n);
		break;
	default: {
		struct text body = { 0 };

		tput(t, "r_%u", x->rule_id);
		tput(&body, "r_%u ::= ", x->rule_id);
		emit(x->kid[0], r, &body, rules);
		tput(rules, "%s  # rule %u\n", body.s, x->rule_id);
		free(body.s);
	}
	}
}

static int class_has(const struct node *x, uint32_t c)
{
	uint32_t i;
	int in = 0;

	for (i = 0; i < x->n_rng; i++)
		in |= c >= x->lo[i] && c <= x->hi[i];
	return in != x->negated;
}

/* Positions after matching x from any position in s (bit p: p cps). */
static uint64_t reach(const struct node *x, const uint32_t *in, uint32_t n,
		      uint64_t s)
{
	uint64_t o = 0, cur;
	uint32_t i, p, k;

	switch (x->type) {
	case N_LIT:
		for (p = 0; p <= n; p++) {
			if (!(s >> p & 1) || p + x->n_lit > n)
				continue;
			for (k = 0; k < x->n_lit && in[p + k] == x->lit[k]; k++)
				;
			if (k == x->n_lit)
				o |= 1ull << (p + k);
		}
		return o;
	case N_CLASS:
		for (p = 0; p < n; p++)
			if ((s >> p & 1) && class_has(x, in[p]))
				o |= 1ull << (p + 1);
		return o;
	case N_SEQ:
		for (i = 0; i < x->n_kid; i++)
			s = reach(x->kid[i], in, n, s);
		return s;
	case N_ALT:
		for (i = 0; i < x->n_kid; i++)
			o |= reach(x->kid[i], in, n, s);
		return o;
	case N_REP:
		for (i = 0; i < x->m; i++)
			s = reach(x->kid[0], in, n, s);
		o = s;
		cur = s;
		for (i = x->m; i < x->n; i++) {
			cur = reach(x->kid[0], in, n, cur);
			if ((cur | o) == o)
				break;
			o |= cur;
		}
		return o;
	default:
		return reach(x->kid[0], in, n, s);
	}
}

static int recognizes(const struct node *x, const uint8_t *b, size_t nb)
{
	uint32_t cps[64];
	int n = decode_utf8(b, nb, cps, 63);

	if (n < 0)
		return 0;
	return reach(x, cps, (uint32_t)n, 1) >> n & 1;
}

/* A random grammar: its tree, and its GBNF text in *src. */
static struct node *random_grammar(struct rng *r, char **src)
{
	struct text t = { 0 }, rules = { 0 };
	struct node *x;

	n_rules_made = 0;
	x = gen(r, 1 + (int)rng_below(r, 4));
	/* half the time, nest it in up to 5 rules each followed by a
	 * literal, so stacks are deeper than the mask's tables */
	if (rng_below(r, 2)) {
		uint32_t levels = 1 + rng_below(r, 5), i;

		for (i = 0; i < levels; i++) {
			struct node *rule = calloc(1, sizeof(*rule));
			struct node *lit = calloc(1, sizeof(*lit));
			struct node *seq = calloc(1, sizeof(*seq));

			rule->type = N_RULE;
			rule->n_kid = 1;
			rule->kid[0] = x;
			rule->rule_id = n_rules_made++;
			lit->type = N_LIT;
			lit->n_lit = 1;
			lit->lit[0] = alphabet[rng_below(r, N_ALPHA)];
			seq->type = N_SEQ;
			seq->n_kid = 2;
			seq->kid[0] = rule;
			seq->kid[1] = lit;
			x = seq;
		}
	}
	tput(&rules, "# a random grammar\n");
	tput(&t, "root ::= ");
	emit(x, r, &t, &rules);
	tput(&t, "\n%s", rules.s);
	free(rules.s);
	*src = t.s;
	return x;
}

/* ------------------------------------------------------------------ */
/* Random vocabularies                                                 */
/* ------------------------------------------------------------------ */

struct vocab {
	uint8_t **b;
	uint32_t *len;
	uint32_t n;
};

/*
 * Token 0 is EOS, token 1 an empty special token, then every alphabet
 * character, then random byte strings: runs of alphabet characters cut
 * at any byte (so tokens end and start inside a code point), and a few
 * arbitrary bytes.
 */
static struct vocab random_vocab(struct rng *r, uint32_t n)
{
	struct vocab v = { calloc(n, sizeof(uint8_t *)), calloc(n, 4), n };
	uint32_t i, k;

	for (i = 0; i < n; i++) {
		uint8_t buf[64];
		size_t bl = 0, from, to;

		if (i >= 2 && i < 2 + N_ALPHA) {
			bl = put_utf8(buf, alphabet[i - 2]);
			from = 0;
			to = bl;
		} else if (i >= 2) {
			uint32_t nc = 1 + rng_below(r, 4);

			for (k = 0; k < nc; k++)
				bl += put_utf8(buf + bl,
					       alphabet[rng_below(r, N_ALPHA)]);
			if (rng_below(r, 10) == 0)
				buf[rng_below(r, (uint32_t)bl)] =
					(uint8_t)rng_below(r, 256);
			from = rng_below(r, (uint32_t)bl);
			to = from + 1 + rng_below(r, (uint32_t)(bl - from));
		} else {
			from = to = 0;
		}
		v.len[i] = (uint32_t)(to - from);
		v.b[i] = malloc(v.len[i] + 1);
		memcpy(v.b[i], buf + from, v.len[i]);
	}
	return v;
}

static void free_vocab(struct vocab *v)
{
	uint32_t i;

	for (i = 0; i < v->n; i++)
		free(v->b[i]);
	free(v->b);
	free(v->len);
}

/* The naive mask: every token's bytes into a fresh copy of m. */
static void naive_mask(const struct vocab *v, const struct grammar_matcher *m,
		       uint64_t *mask)
{
	uint32_t t;

	memset(mask, 0, grammar_mask_words(v->n) * 8);
	for (t = 0; t < v->n; t++) {
		struct grammar_matcher *c;
		int ok;

		if (t == 0) {
			ok = grammar_matcher_is_accepting(m);
		} else if (!v->len[t]) {
			ok = 0;
		} else {
			c = grammar_matcher_clone(m);
			assert_non_null(c);
			ok = grammar_matcher_accept_bytes(c, v->b[t],
							  v->len[t]) == 0;
			grammar_matcher_destroy(c);
		}
		if (ok)
			mask[t / 64] |= 1ull << (t % 64);
	}
}

/* ------------------------------------------------------------------ */
/* Every path to a mask, against the naive one                         */
/* ------------------------------------------------------------------ */

enum { C_TABLES, C_TABLES1, C_TABLES2, C_FEW_TABLES, C_FEW_STATES,
       C_ONE_BYTE, N_CACHES };

/* The caches of one (grammar, vocabulary), one per path a miss can take. */
struct mask_paths {
	const struct grammar_vocab *gv;
	struct grammar_mask_cache *c[N_CACHES];
	uint32_t n_vocab;
	uint64_t *want, *got;
	/* what the states checked were like */
	uint32_t n_states, n_deep, n_partial, n_accepting;
};

/* Totals over a test's caches, for coverage asserts. */
static struct grammar_mask_stats totals;

static void paths_init(struct mask_paths *p, const struct grammar_vocab *gv)
{
	uint32_t n_vocab = grammar_vocab_size(gv);
	size_t words = grammar_mask_words(n_vocab);

	memset(p, 0, sizeof(*p));
	p->gv = gv;
	p->n_vocab = n_vocab;
	/* tables and states with room to spare */
	p->c[C_TABLES] = grammar_mask_cache_create_limits(n_vocab, 1 << 20,
							  4 << 20, 4 << 20);
	/* tables of the top position alone, then of two: far more tokens
	 * are left undecided, and far more stacks are split */
	p->c[C_TABLES1] = grammar_mask_cache_create_limits(n_vocab, 1 << 20,
							   4 << 20, 4 << 20);
	p->c[C_TABLES2] = grammar_mask_cache_create_limits(n_vocab, 1 << 20,
							   4 << 20, 4 << 20);
	/* room for about two tables: later states walk the automaton */
	p->c[C_FEW_TABLES] = grammar_mask_cache_create_limits(
		n_vocab, 1 << 20, 4 << 20, 2 * (words * 8 + 200) + words * 8);
	/* about 12 states: walks fill it, reset it, and fall back */
	p->c[C_FEW_STATES] = grammar_mask_cache_create_limits(
		n_vocab, 1 << 20, 12 * 1200, 4 << 20);
	/* one slot every state shares (keys must be compared), no room for
	 * states or tables: the plain walk */
	p->c[C_ONE_BYTE] = grammar_mask_cache_create(n_vocab, 1);
	p->want = malloc(words * 8);
	p->got = malloc(words * 8);
	for (int i = 0; i < N_CACHES; i++)
		assert_non_null(p->c[i]);
	grammar_mask_cache_set_split_depth(p->c[C_TABLES1], 1);
	grammar_mask_cache_set_split_depth(p->c[C_TABLES2], 2);
}

static void paths_free(struct mask_paths *p)
{
	for (int i = 0; i < N_CACHES; i++) {
		struct grammar_mask_stats st;

		grammar_mask_cache_get_stats(p->c[i], &st);
		totals.n_split += st.n_split;
		totals.n_dfa += st.n_dfa;
		totals.n_plain += st.n_plain;
		totals.n_checked += st.n_checked;
		totals.dfa_full += st.dfa_full;
		totals.n_tables += st.n_tables;
		grammar_mask_cache_destroy(p->c[i]);
	}
	free(p->want);
	free(p->got);
}

static void describe(const struct grammar_matcher *m, char *out, size_t n)
{
	const uint32_t *k;
	uint32_t kn, i, o = 3;
	size_t w;

	k = grammar_matcher_key(m, &kn);
	w = (size_t)snprintf(out, n, "cp %x need %x, %u stacks:", k[0], k[1],
			     k[2]);
	for (i = 0; i < k[2] && w < n; i++) {
		w += (size_t)snprintf(out + w, n - w, " [%u]", k[o]);
		o += k[o] + 1;
	}
}

/*
 * want = the naive mask of m; every path's mask must equal it (each
 * cache is asked twice: the second answer is its slot's).
 */
static void check_paths(struct mask_paths *p, const struct vocab *v,
			const struct grammar_matcher *m, const char *src)
{
	size_t words = grammar_mask_words(p->n_vocab);
	const uint32_t *k;
	uint32_t kn, i, o = 3, deepest = 0;
	char why[256];
	int c, rep;

	k = grammar_matcher_key(m, &kn);
	for (i = 0; i < k[2]; i++) {
		if (k[o] > deepest)
			deepest = k[o];
		o += k[o] + 1;
	}
	p->n_states++;
	p->n_deep += deepest > 3;
	p->n_partial += k[1] != 0;
	p->n_accepting += grammar_matcher_is_accepting(m);
	naive_mask(v, m, p->want);
	for (c = -1; c < N_CACHES; c++)
		for (rep = 0; rep < (c < 0 ? 1 : 2); rep++) {
			struct grammar_mask_cache *cache = c < 0 ? NULL : p->c[c];

			assert_int_equal(grammar_mask_compute(p->gv, m, cache,
							      p->got), 0);
			if (!memcmp(p->want, p->got, words * 8))
				continue;
			describe(m, why, sizeof(why));
			for (i = 0; i < p->n_vocab; i++)
				if ((p->want[i / 64] ^ p->got[i / 64]) >> (i % 64) & 1)
					break;
			fail_msg("mask differs from naive (cache %d, pass %d) at "
				 "token %u '%.*s' (naive %d); state %s\n%s", c, rep,
				 i, (int)v->len[i], v->b[i],
				 (int)(p->want[i / 64] >> (i % 64) & 1), why, src);
		}
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */
/* ------------------------------------------------------------------ */

static struct grammar *parse_ok(const char *src)
{
	char err[256];
	struct grammar *g = grammar_parse(src, strlen(src), err, sizeof(err));

	if (!g)
		fail_msg("grammar refused: %s\n%s", err, src);
	return g;
}

static int accepts(const struct grammar *g, const char *s)
{
	struct grammar_matcher *m = grammar_matcher_create(g);
	int ok;

	assert_non_null(m);
	ok = grammar_matcher_accept_bytes(m, (const uint8_t *)s, strlen(s)) == 0 &&
	     grammar_matcher_is_accepting(m);
	grammar_matcher_destroy(m);
	return ok;
}

static void test_hand_cases(void **state)
{
	static const struct {
		const char *g, *yes[4], *no[4];
	} cases[] = {
		{ "root ::= \"ab\" | \"c\"", { "ab", "c" }, { "", "a", "abc", "b" } },
		{ "root ::= [a-c]+ \"!\"", { "a!", "cab!" }, { "!", "d!", "a" } },
		{ "root ::= x{2,3}\nx ::= \"ab\"", { "abab", "ababab" },
		  { "ab", "abababab" } },
		{ "root ::= [^a]", { "b", "\xc3\xa9", "\xf0\x9f\x98\x80" },
		  { "a", "\xc3", "\xed\xa0\x80", "\xc0\xaf" } },
		{ "root ::= \"(\" root \")\" | \"x\"  # nesting", { "x", "((x))" },
		  { "(x", "()" } },
		{ "root ::= \"\\x41\\u00e9\\n\" . [\\]\\-]", { "A\xc3\xa9\n" "z]",
		  "A\xc3\xa9\n" "\xe4\xb8\xad-" }, { "A\xc3\xa9\n" "z" } },
		{ "root ::= \"\"{1,2} \"\"* \"x\"", { "x" }, { "" } },
		{ "root ::= a?\n\na ::= \"q\" # c\n  | \"r\"", { "", "q", "r" },
		  { "qr" } },
		{ "root ::= (\"a\" | \"b\"){0,2} \"c\"{3}", { "ccc", "abccc" },
		  { "abaccc", "cc" } },
	};
	size_t i, k;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct grammar *g = parse_ok(cases[i].g);

		for (k = 0; k < 4; k++) {
			if (cases[i].yes[k] && !accepts(g, cases[i].yes[k]))
				fail_msg("%s should accept '%s'", cases[i].g,
					 cases[i].yes[k]);
			if (cases[i].no[k] && accepts(g, cases[i].no[k]))
				fail_msg("%s should refuse '%s'", cases[i].g,
					 cases[i].no[k]);
		}
		grammar_destroy(g);
	}
}

static void test_parse_errors(void **state)
{
	static const struct {
		const char *src, *want;
	} cases[] = {
		{ "", "line 1 column 1: no rule named root" },
		{ "root ::= x", "line 1 column 10: undefined rule 'x'" },
		{ "root ::= \"a\"\nroot ::= \"b\"", "line 2 column 1: rule 'root' defined twice" },
		{ "root ::= \"abc", "line 1 column 10: unterminated string literal" },
		{ "root ::= [a-", "line 1 column 10: unterminated" },
		{ "root ::= [z-a]", "line 1 column 12: range end U+61 before its start U+7A" },
		{ "root ::= (\"a\"", "line 1 column 10: ( without its )" },
		{ "root ::= \"a\" )", "line 1 column 14: ) without its (" },
		{ "root ::= \"\\q\"", "line 1 column 11: unknown escape \\q" },
		{ "root ::= \"\\x4\"", "line 1 column 11: escape \\x needs hex digits" },
		{ "root ::= \"a\"{3,1}", "line 1 column 13: repetition {3,1}" },
		{ "root ::= \"a\"{99999}", "line 1 column 14: repetition count over" },
		{ "root ::= root \"a\"", "line 1 column 1: rule 'root' is left-recursive" },
		{ "root ::= a\na ::= b \"x\"\nb ::= \"\" | a", "line 2 column 1: rule 'a' is left-recursive" },
		{ "root ::= (\"a\"?)*", "left-recursive" },
		{ "root ::= \"a\"\n  @", "line 2 column 3: unexpected '@'" },
		{ "root ::= \"\xff\"", "line 1 column 11: invalid UTF-8" },
		{ "root = \"a\"", "line 1 column 6: expected ::=" },
		{ "root ::= \"a\"{2", "line 1 column 15: expected , or }" },
		{ "root ::= \"a\"\x01", "line 1 column 13: unexpected byte 0x01" },
	};
	char err[256], deep[4096];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct grammar *g = grammar_parse(cases[i].src,
						  strlen(cases[i].src), err,
						  sizeof(err));

		if (g)
			fail_msg("accepted: %s", cases[i].src);
		if (!strstr(err, cases[i].want))
			fail_msg("'%s': got '%s', want '%s'", cases[i].src,
				 err, cases[i].want);
	}
	/* deep nesting: refused, not recursed into */
	strcpy(deep, "root ::= ");
	for (i = 0; i < 1000; i++)
		strcat(deep, "(");
	assert_null(grammar_parse(deep, strlen(deep), err, sizeof(err)));
	assert_non_null(strstr(err, "groups nested deeper than 64"));
	/* expansion past the element cap */
	strcpy(deep, "root ::= ");
	for (i = 0; i < 120; i++)
		strcat(deep, "\"a\"{9999} ");
	assert_null(grammar_parse(deep, strlen(deep), err, sizeof(err)));
	assert_non_null(strstr(err, "grammar too large"));
	/* NULL error buffer, NULL source */
	assert_null(grammar_parse("x", 1, NULL, 0));
	assert_null(grammar_parse(NULL, 5, err, sizeof(err)));
}

/* Random bytes: never a crash; a grammar that parses can run. */
static void test_hostile_bytes(void **state)
{
	struct rng r = rng_for(3);
	static const char pieces[][8] = { "root", " ::= ", "\"", "[", "]",
					  "(", ")", "|", "*", "{1,2}", "\\",
					  "a", "\n", "#", "^", "-", "x" };
	uint32_t it, k;
	char src[256], err[256];

	(void)state;
	for (it = 0; it < 20000; it++) {
		size_t n = 0;
		struct grammar *g;

		while (n < 200) {
			if (rng_below(&r, 3)) {
				const char *p = pieces[rng_below(&r, 17)];

				memcpy(src + n, p, strlen(p));
				n += strlen(p);
			} else {
				src[n++] = (char)rng_below(&r, 256);
			}
			if (rng_below(&r, 20) == 0)
				break;
		}
		g = grammar_parse(src, n, err, sizeof(err));
		if (!g) {
			assert_non_null(strstr(err, "line "));
			continue;
		}
		{
			struct grammar_matcher *m = grammar_matcher_create(g);

			for (k = 0; m && k < 50; k++)
				grammar_matcher_accept_byte(m, (uint8_t)rng_below(&r, 256));
			grammar_matcher_destroy(m);
		}
		grammar_destroy(g);
	}
}

/* The matcher accepts a string iff the tree recognizer does. */
static void test_random_languages(void **state)
{
	struct rng r = rng_for(1);
	uint32_t it, k, i;

	(void)state;
	for (it = 0; it < 300; it++) {
		char *src;
		struct node *x = random_grammar(&r, &src);
		struct grammar *g = parse_ok(src);

		for (k = 0; k < 200; k++) {
			uint8_t b[64];
			size_t n = 0;
			uint32_t nc = rng_below(&r, 7);

			for (i = 0; i < nc; i++)
				n += put_utf8(b + n, alphabet[rng_below(&r, N_ALPHA)]);
			b[n] = 0;
			if (accepts(g, (const char *)b) != recognizes(x, b, n))
				fail_msg("grammar:\n%s\nstring '%.*s': matcher %d, "
					 "recognizer %d", src, (int)n, b,
					 accepts(g, (char *)b), recognizes(x, b, n));
		}
		grammar_destroy(g);
		free_node(x);
		free(src);
	}
}

/*
 * Random walks with masks checked against the naive masker at every
 * step on every path (check_paths); a walk that picks EOS must have
 * produced a sentence the recognizer accepts.  Every other grammar's EOS
 * token has bytes (EOS is still decided by the state alone).
 */
static void test_masks_and_walks(void **state)
{
	struct rng r = rng_for(2);
	uint32_t it, finished = 0, steps_total = 0, deep = 0, partial = 0;

	(void)state;
	memset(&totals, 0, sizeof(totals));
	for (it = 0; it < 150; it++) {
		char *src;
		struct node *x = random_grammar(&r, &src);
		struct grammar *g = parse_ok(src);
		struct vocab v = random_vocab(&r, 20 + rng_below(&r, 300));
		struct grammar_vocab *gv;
		struct mask_paths p;
		uint32_t walk;

		if (it % 2) {
			free(v.b[0]);
			v.b[0] = malloc(1);
			v.b[0][0] = (uint8_t)alphabet[rng_below(&r, 6)];
			v.len[0] = 1;
		}
		gv = grammar_vocab_create((const uint8_t *const *)v.b, v.len,
					  v.n, 0);
		assert_non_null(gv);
		paths_init(&p, gv);
		for (walk = 0; walk < 6; walk++) {
			struct grammar_matcher *m = grammar_matcher_create(g);
			uint8_t out[256];
			size_t n_out = 0;
			uint32_t step;

			for (step = 0; step < 40; step++) {
				uint32_t t, n_allowed = 0, pick;

				check_paths(&p, &v, m, src);
				steps_total++;
				for (t = 0; t < v.n; t++)
					n_allowed += p.want[t / 64] >> (t % 64) & 1;
				if (!n_allowed)
					break;
				pick = rng_below(&r, n_allowed);
				for (t = 0; t < v.n; t++)
					if ((p.want[t / 64] >> (t % 64) & 1) && !pick--)
						break;
				assert_int_equal(grammar_matcher_accept_token(m, gv, t), 0);
				if (t == 0) {
					if (!recognizes(x, out, n_out))
						fail_msg("walk ended in a non-sentence "
							 "'%.*s'\n%s", (int)n_out, out, src);
					finished++;
					break;
				}
				if (n_out + v.len[t] > 200)
					break;
				memcpy(out + n_out, v.b[t], v.len[t]);
				n_out += v.len[t];
			}
			grammar_matcher_destroy(m);
		}
		deep += p.n_deep;
		partial += p.n_partial;
		paths_free(&p);
		grammar_vocab_destroy(gv);
		free_vocab(&v);
		grammar_destroy(g);
		free_node(x);
		free(src);
	}
	printf("masks: %u steps checked (%u with a stack deeper than 3, %u "
	       "inside a code point), %u walks finished; misses by tables "
	       "%llu, whole walks %llu, plain walks %llu; %llu tokens checked "
	       "whole, automaton full %llu times\n", steps_total, deep,
	       partial, finished, (unsigned long long)totals.n_split,
	       (unsigned long long)totals.n_dfa,
	       (unsigned long long)totals.n_plain,
	       (unsigned long long)totals.n_checked,
	       (unsigned long long)totals.dfa_full);
	assert_true(finished > 100);
	/* every path was taken, on the states that make it hard */
	assert_true(deep > 100);
	assert_true(partial > 100);
	assert_true(totals.n_split > 1000);
	assert_true(totals.n_checked > 1000);
	assert_true(totals.n_dfa > 100);
	assert_true(totals.n_plain > 1000);
	assert_true(totals.dfa_full > 10);
}

/* A vocabulary of the given strings; token 0 is EOS (empty). */
static struct vocab strings_vocab(const char *const *strs, uint32_t n)
{
	struct vocab v = { calloc(n + 1, sizeof(uint8_t *)), calloc(n + 1, 4),
			   n + 1 };
	uint32_t i;

	v.b[0] = malloc(1);
	for (i = 0; i < n; i++) {
		v.len[i + 1] = (uint32_t)strlen(strs[i]);
		v.b[i + 1] = malloc(v.len[i + 1] + 1);
		memcpy(v.b[i + 1], strs[i], v.len[i + 1]);
	}
	return v;
}

/*
 * Walk the byte string path a token at a time (token ids in toks),
 * checking every path's mask against the naive one at each step from
 * step from on, until a token is refused (that must be a cap: -E2BIG).
 */
static uint32_t walk_to_cap(const char *src, const char *const *strs,
			    uint32_t n_strs, uint32_t tok, uint32_t from,
			    uint32_t max_steps)
{
	struct grammar *g = parse_ok(src);
	struct vocab v = strings_vocab(strs, n_strs);
	struct grammar_vocab *gv = grammar_vocab_create(
		(const uint8_t *const *)v.b, v.len, v.n, 0);
	struct grammar_matcher *m = grammar_matcher_create(g);
	struct mask_paths p;
	uint32_t step;
	int rc = 0;

	assert_non_null(gv);
	assert_non_null(m);
	paths_init(&p, gv);
	for (step = 0; step < max_steps; step++) {
		if (step >= from)
			check_paths(&p, &v, m, src);
		rc = grammar_matcher_accept_token(m, gv, tok);
		if (rc)
			break;
	}
	assert_int_equal(rc, -E2BIG);
	paths_free(&p);
	grammar_matcher_destroy(m);
	grammar_vocab_destroy(gv);
	free_vocab(&v);
	grammar_destroy(g);
	return step;
}

/*
 * States whose stacks each take "b" alone while the state refuses it:
 * one stack's expansion of "b" passes the raw-output cap beside one that
 * accepts "b" and "bc" (so a table's acceptance must be overruled by the
 * whole-state check), or two stacks' expansions pass it together though
 * each stays under it and their outputs are few distinct stacks.
 */
static void check_overruled(void)
{
	static const char *const strs[] = { "a", "b", "bc", "bcd", "c", "d",
					    "z", "ab", "cdz", "cz", "bcz" };
	static const char *const srcs[] = {
		"root ::= w \"z\"\n"
		"w ::= \"a\" \"b\" \"c\" \"d\" | \"a\" q\n"
		"q ::= \"b\" e\n"
		"e ::= f | f | f | f\nf ::= g | g | g | g\ng ::= h | h | h | h\n"
		"h ::= i | i | i | i\ni ::= j | j | j | j\nj ::= k | k | k | k\n"
		"k ::= \"c\" | \"c\"\n",
		"root ::= w \"z\"\n"
		"w ::= \"a\" qa | \"a\" qb\n"
		"qa ::= \"b\" e\nqb ::= \"b\" e\n"
		"e ::= f | f | f\nf ::= g | g | g | g\ng ::= h | h | h | h\n"
		"h ::= i | i | i | i\ni ::= j | j | j | j\n"
		"j ::= \"c\" | \"c\" | \"c\" | \"c\"\n",
	};
	uint32_t i;

	for (i = 0; i < 2; i++) {
		struct grammar *g = parse_ok(srcs[i]);
		struct vocab v = strings_vocab(strs, 11);
		struct grammar_vocab *gv = grammar_vocab_create(
			(const uint8_t *const *)v.b, v.len, v.n, 0);
		struct grammar_matcher *m = grammar_matcher_create(g);
		struct mask_paths p;

		assert_non_null(gv);
		paths_init(&p, gv);
		check_paths(&p, &v, m, srcs[i]);
		assert_int_equal(grammar_matcher_accept_token(m, gv, 1), 0);
		check_paths(&p, &v, m, srcs[i]);
		assert_int_equal(grammar_matcher_accept_token(m, gv, 2), -E2BIG);
		paths_free(&p);
		grammar_matcher_destroy(m);
		grammar_vocab_destroy(gv);
		free_vocab(&v);
		grammar_destroy(g);
	}
}

/*
 * Next to the caps a state's stacks, each fine alone, blow up together
 * (stacks that multiply, or one stack's expansion beside another that
 * accepts), or a stack is too deep for a token that its table alone
 * accepts (nesting): the fast paths must see it coming.
 */
static void test_masks_near_caps(void **state)
{
	static const char *const ab[] = { "a", "aa", "aaa", "aaaa", "aaaaaaaa",
					  "b", "bb", "ab", "ba", "aab", "abb" };
	static const char *const par[] = { "(", "((", "(((", "((((((((", ")",
					   "))", ")))", "x", "x)", "x))", "(x",
					   "(x)", "((x" };
	uint32_t n;

	(void)state;
	memset(&totals, 0, sizeof(totals));
	check_overruled();
	n = walk_to_cap("root ::= x*\nx ::= \"a\" | \"a\" \"a\" | \"a\" x \"b\"",
			ab, 11, 1, 185, 5000);
	printf("caps: stacks blew up after %u a's; ", n);
	n = walk_to_cap("root ::= \"(\" root \")\" | \"x\"", par, 13, 1, 490,
			5000);
	printf("nesting refused after %u ('s; misses by tables %llu, "
	       "plain walks %llu\n", n, (unsigned long long)totals.n_split,
	       (unsigned long long)totals.n_plain);
	assert_true(totals.n_split > 10);
}

/*
 * A BPE-like vocabulary for JSON: EOS, the printable bytes, punctuation
 * runs, words with and without a leading space, digits, escapes, and
 * multi-byte characters whole and cut (so tokens end inside one).
 */
static struct vocab json_vocab(struct rng *r, uint32_t n)
{
	static const char *const punct[] = { "\":", "\",", "{\"", "},", "\n  ",
		"\":\"", "\"}", "\"]", "[", "]", ",\n", " {", "\":[", "null",
		"true", "false", "\\n", "\\\"", ".", "-", "0.", "e+", "\\u00",
		"\\u", "\"\"", "{}", "[]", " \"", "\"\n" };
	static const char *const mb[] = { "\xc3\xa9", "\xe4\xb8\xad",
					  "\xf0\x9f\x98\x80", "\xc3", "\xa9",
					  "\xe4\xb8", "\xad\"", "\xf0\x9f" };
	struct vocab v = { calloc(n, sizeof(uint8_t *)), calloc(n, 4), n };
	uint32_t i, k;

	for (i = 0; i < n; i++) {
		char w[32];
		size_t l = 0;
		uint32_t kind = rng_below(r, 100);

		if (i == 0) {
			l = 0;
		} else if (i <= 95) {
			w[l++] = (char)(0x20 + i - 1);
		} else if (kind < 50) {
			uint32_t wl = 1 + rng_below(r, 6);

			if (rng_below(r, 2))
				w[l++] = ' ';
			for (k = 0; k < wl; k++)
				w[l++] = (char)('a' + rng_below(r, 26));
		} else if (kind < 62) {
			uint32_t dl = 1 + rng_below(r, 3);

			for (k = 0; k < dl; k++)
				w[l++] = (char)('0' + rng_below(r, 10));
		} else if (kind < 80) {
			const char *q = punct[rng_below(r, sizeof(punct) /
							sizeof(punct[0]))];

			l = strlen(q);
			memcpy(w, q, l);
		} else {
			const char *q = mb[rng_below(r, sizeof(mb) / sizeof(mb[0]))];

			if (rng_below(r, 2))
				w[l++] = (char)('a' + rng_below(r, 26));
			memcpy(w + l, q, strlen(q));
			l += strlen(q);
		}
		v.len[i] = (uint32_t)l;
		v.b[i] = malloc(l + 1);
		memcpy(v.b[i], w, l);
	}
	return v;
}

/* JSON mode: every path's mask equals the naive one along random walks. */
static void test_masks_json(void **state)
{
	struct rng r = rng_for(4);
	char *src = json_mode_gbnf();
	struct grammar *g = parse_ok(src);
	struct vocab v = json_vocab(&r, 700);
	struct grammar_vocab *gv = grammar_vocab_create(
		(const uint8_t *const *)v.b, v.len, v.n, 0);
	struct grammar_matcher *m = grammar_matcher_create(g);
	struct mask_paths p;
	uint32_t walk, step, finished = 0;

	(void)state;
	assert_non_null(gv);
	memset(&totals, 0, sizeof(totals));
	paths_init(&p, gv);
	/* documents one after the other: long ones, closing more often as
	 * they grow, a new one when one ends */
	for (walk = 0, step = 0; step < 300; step++, walk++) {
		uint32_t t, n_allowed = 0, n_close = 0, pick;
		int close;

		check_paths(&p, &v, m, "json mode");
		for (t = 0; t < v.n; t++)
			if (p.want[t / 64] >> (t % 64) & 1) {
				n_allowed++;
				n_close += v.len[t] && strchr("\"]}", v.b[t][0]);
			}
		assert_true(n_allowed > 0);
		close = n_close && rng_below(&r, 100) < walk;
		pick = rng_below(&r, close ? n_close : n_allowed);
		for (t = 0; t < v.n; t++)
			if ((p.want[t / 64] >> (t % 64) & 1) &&
			    (!close || (v.len[t] && strchr("\"]}", v.b[t][0]))) &&
			    !pick--)
				break;
		assert_int_equal(grammar_matcher_accept_token(m, gv, t), 0);
		if (t == 0) {
			finished++;
			walk = 0;
			grammar_matcher_destroy(m);
			m = grammar_matcher_create(g);
		}
	}
	grammar_matcher_destroy(m);
	paths_free(&p);
	printf("json: %u states (%u deeper than 3, %u inside a code point), "
	       "%u documents ended; misses by tables %llu, %llu tokens "
	       "checked whole\n", p.n_states, p.n_deep, p.n_partial, finished,
	       (unsigned long long)totals.n_split,
	       (unsigned long long)totals.n_checked);
	assert_true(p.n_deep > 50);
	assert_true(p.n_partial > 0);
	assert_true(finished > 0);
	assert_true(totals.n_split > 50);
	assert_true(totals.n_checked > 50);
	grammar_vocab_destroy(gv);
	free_vocab(&v);
	grammar_destroy(g);
	free(src);
}

/* Transactional steps: a refused byte or token leaves the state. */
static void test_refusal_keeps_state(void **state)
{
	struct grammar *g = parse_ok("root ::= \"ab\" [\\u00e9] \"c\"");
	struct grammar_matcher *m = grammar_matcher_create(g);
	uint32_t n1, n2;
	uint64_t h;

	(void)state;
	assert_int_equal(grammar_matcher_accept_bytes(m, (const uint8_t *)"a", 1), 0);
	h = grammar_matcher_hash(m);
	grammar_matcher_key(m, &n1);
	assert_int_equal(grammar_matcher_accept_bytes(m, (const uint8_t *)"bx", 2), -ENOENT);
	assert_int_equal(grammar_matcher_accept_byte(m, 'z'), -ENOENT);
	grammar_matcher_key(m, &n2);
	assert_int_equal(n1, n2);
	assert_true(h == grammar_matcher_hash(m));
	assert_int_equal(grammar_matcher_accept_bytes(m, (const uint8_t *)"b\xc3", 2), 0);
	assert_false(grammar_matcher_is_accepting(m));
	assert_int_equal(grammar_matcher_accept_byte(m, 0xa8), -ENOENT);	/* e8 */
	assert_int_equal(grammar_matcher_accept_bytes(m, (const uint8_t *)"\xa9" "c", 2), 0);
	assert_true(grammar_matcher_is_accepting(m));
	grammar_matcher_destroy(m);
	grammar_destroy(g);
}

/* A grammar whose parses multiply is refused with -E2BIG, not grown. */
static void test_explosion_capped(void **state)
{
	struct grammar *g = parse_ok("root ::= x*\nx ::= \"a\" | \"a\" \"a\" | \"a\" x \"b\"");
	struct grammar_matcher *m = grammar_matcher_create(g);
	int rc = 0, i;

	(void)state;
	assert_non_null(m);
	for (i = 0; i < 5000 && !rc; i++)
		rc = grammar_matcher_accept_byte(m, 'a');
	assert_int_equal(rc, -E2BIG);
	grammar_matcher_destroy(m);
	grammar_destroy(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hand_cases),
		cmocka_unit_test(test_parse_errors),
		cmocka_unit_test(test_hostile_bytes),
		cmocka_unit_test(test_random_languages),
		cmocka_unit_test(test_masks_and_walks),
		cmocka_unit_test(test_masks_near_caps),
		cmocka_unit_test(test_masks_json),
		cmocka_unit_test(test_refusal_keeps_state),
		cmocka_unit_test(test_explosion_capped),
	};

	test_seed_init("test_grammar");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
