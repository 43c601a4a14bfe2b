/*
 * mask_split.c - masks from per-suffix tables: the tokens decided by a
 * stack's top positions alone, computed once, and a check of the rest
 * against the whole state.
 *
 * A state's stacks evolve independently (a step maps each stack to its
 * successors and takes the union), so without the caps a token is
 * allowed iff some stack allows it.  A stack's fate on a token is decided
 * by its top SPLIT_DEPTH positions (its suffix) unless the token, walked
 * from the suffix alone, empties it (the rule below would take over) at
 * a character boundary, or passes a cap.  So a table per suffix (and
 * partial code point) holds:
 *
 *   acc    tokens the suffix accepts without emptying: allowed
 *   unc    tokens that empty it or pass a cap: undecided, ranges of ids
 *   max    the dearest step taken: expansion outputs, stack length, and
 *          the most stacks of one state
 *
 * and a state's mask is the union of its stacks' acc, then every token
 * undecided by any stack fed to the whole state (mask_walk_select), which
 * is exact whatever the caps do.  A token no stack leaves undecided
 * evolves in the whole state as the union of its suffix walks under
 * their bases, so it passes no cap when the sums of the max fields and
 * the deepest base plus its max length stay within the matcher's caps;
 * a state where they might not is handed back (-ENOSPC: walk it whole).
 * A suffix that is the whole stack has no base: emptying it is the end
 * of the sentence, not undecided.
 *
 * Tables are built lazily, on the first state that needs one; their
 * memory is capped (past it, -ENOSPC for states needing a new table).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/mask_internal.h"

/* a table's key: w0, w1, whole, n positions, the positions */
#define TKEY_MAX (GR_KEY_HDR + 2 + SPLIT_DEPTH_MAX)

struct table {
	uint64_t hash;
	uint32_t key[TKEY_MAX];
	uint32_t key_len;
	uint64_t *acc;		/* n_vocab bits */
	uint32_t *unc;		/* [begin, end) pairs into ids */
	uint32_t n_unc;
	struct grammar_step_stats max;
	uint32_t max_stacks;
};

struct mask_split {
	uint32_t n_vocab, n_ids;
	uint32_t depth;		/* positions a table holds */
	struct table *t;
	uint32_t n_t, cap_t;
	uint32_t *tab;		/* open addressing: table + 1, 0 empty */
	uint32_t tab_mask;
	uint64_t *sel;		/* n_ids bits: tokens to check whole */
	uint32_t *rng;		/* sel as [begin, end) runs */
	uint32_t cap_rng;	/* in pairs */
	size_t max_bytes, used;
	double build_s;		/* CPU time spent building tables */
	uint64_t n_checked;	/* undecided tokens fed to whole states */
};

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct mask_split *mask_split_create(uint32_t n_vocab, uint32_t n_ids,
				     size_t max_bytes)
{
	struct mask_split *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->n_vocab = n_vocab;
	s->n_ids = n_ids;
	s->depth = SPLIT_DEPTH;
	s->max_bytes = max_bytes;
	s->sel = calloc((n_ids + 63) / 64 + 1, sizeof(uint64_t));
	if (!s->sel) {
		free(s);
		return NULL;
	}
	s->used = ((size_t)n_ids + 63) / 64 * sizeof(uint64_t);
	return s;
}

void mask_split_reset(struct mask_split *s)
{
	uint32_t i;

	for (i = 0; i < s->n_t; i++) {
		free(s->t[i].acc);
		free(s->t[i].unc);
	}
	s->n_t = 0;
	if (s->tab)
		memset(s->tab, 0, ((size_t)s->tab_mask + 1) * sizeof(uint32_t));
	s->used = ((size_t)s->n_ids + 63) / 64 * sizeof(uint64_t) +
		  (size_t)s->cap_t * sizeof(struct table) +
		  (s->tab ? ((size_t)s->tab_mask + 1) * sizeof(uint32_t) : 0);
}

void mask_split_set_depth(struct mask_split *s, uint32_t depth)
{
	/* tables of another depth have other keys: they may stay */
	s->depth = depth < 1 ? 1 : depth > SPLIT_DEPTH_MAX ? SPLIT_DEPTH_MAX
							  : depth;
}

void mask_split_destroy(struct mask_split *s)
{
	if (!s)
		return;
	mask_split_reset(s);
	free(s->t);
	free(s->tab);
	free(s->sel);
	free(s->rng);
	free(s);
}

void mask_split_counts(const struct mask_split *s, uint32_t *n_tables,
		       size_t *bytes, double *build_s, uint64_t *n_checked)
{
	*n_tables = s ? s->n_t : 0;
	*bytes = s ? s->used : 0;
	*build_s = s ? s->build_s : 0;
	*n_checked = s ? s->n_checked : 0;
}

static void tab_insert(struct mask_split *s, uint32_t i)
{
	uint32_t p = (uint32_t)s->t[i].hash & s->tab_mask;

	while (s->tab[p])
		p = (p + 1) & s->tab_mask;
	s->tab[p] = i + 1;
}

/* Room for one more table of acc_bytes: 0, -ENOSPC or -ENOMEM. */
static int reserve(struct mask_split *s, size_t acc_bytes)
{
	size_t extra = acc_bytes + sizeof(struct table);

	if (s->used + extra > s->max_bytes)
		return -ENOSPC;
	if (s->n_t == s->cap_t) {
		uint32_t nc = s->cap_t ? 2 * s->cap_t : 16, i;
		struct table *p = realloc(s->t, (size_t)nc * sizeof(*p));

		if (!p)
			return -ENOMEM;
		s->t = p;
		s->used += (size_t)(nc - s->cap_t) * sizeof(*p);
		s->cap_t = nc;
		if (2 * (size_t)nc > (size_t)s->tab_mask + 1 || !s->tab) {
			uint32_t *tab = calloc(4 * (size_t)nc, sizeof(uint32_t));

			if (!tab)
				return -ENOMEM;
			s->used += 4 * (size_t)nc * sizeof(uint32_t) -
				   (s->tab ? ((size_t)s->tab_mask + 1) *
				    sizeof(uint32_t) : 0);
			free(s->tab);
			s->tab = tab;
			s->tab_mask = 4 * nc - 1;
			for (i = 0; i < s->n_t; i++)
				tab_insert(s, i);
		}
	}
	return 0;
}

/* The table of key tk (n words, a suffix of length tk[3]), built if new. */
static int get_table(struct mask_split *s, const struct grammar_vocab *v,
		     struct mask_dfa *d, const uint32_t *tk, uint32_t n,
		     const struct table **out)
{
	size_t words = mask_words(s->n_vocab);
	uint64_t h = grammar_key_hash(tk, n);
	struct walk_split ws = { 0 };
	struct table *t;
	uint32_t p, root, sk[TKEY_MAX];
	double t0;
	int rc;

	if (s->tab)
		for (p = (uint32_t)h & s->tab_mask; s->tab[p];
		     p = (p + 1) & s->tab_mask) {
			t = &s->t[s->tab[p] - 1];
			if (t->hash == h && t->key_len == n &&
			    !memcmp(t->key, tk, n * sizeof(uint32_t))) {
				*out = t;
				return 0;
			}
		}
	rc = reserve(s, words * sizeof(uint64_t));
	if (rc)
		return rc;
	/* the suffix as a state of one stack */
	sk[0] = tk[0];
	sk[1] = tk[1];
	sk[2] = 1;
	memcpy(sk + GR_KEY_HDR, tk + GR_KEY_HDR, (n - GR_KEY_HDR) * sizeof(uint32_t));
	rc = mask_dfa_intern(d, sk, n, &root);
	if (rc)
		return rc;
	t = &s->t[s->n_t];
	memset(t, 0, sizeof(*t));
	t->acc = calloc(words ? words : 1, sizeof(uint64_t));
	if (!t->acc)
		return -ENOMEM;
	ws.whole = tk[2];
	t0 = cpu_s();
	rc = mask_walk(v, d, root, t->acc, &ws);
	s->build_s += cpu_s() - t0;
	if (rc) {
		free(t->acc);
		free(ws.unc);
		return rc;
	}
	t->hash = h;
	memcpy(t->key, tk, n * sizeof(uint32_t));
	t->key_len = n;
	t->unc = ws.unc;
	t->n_unc = ws.n_unc;
	t->max = ws.max;
	t->max_stacks = ws.max_stacks;
	s->used += words * sizeof(uint64_t) + (size_t)ws.cap_unc * 2 *
		   sizeof(uint32_t);
	tab_insert(s, s->n_t);
	s->n_t++;
	*out = t;
	return 0;
}

static void sel_range(uint64_t *sel, uint32_t b, uint32_t e)
{
	while (b < e && (b % 64)) {
		sel[b / 64] |= 1ull << (b % 64);
		b++;
	}
	while (b + 64 <= e) {
		sel[b / 64] = ~0ull;
		b += 64;
	}
	while (b < e) {
		sel[b / 64] |= 1ull << (b % 64);
		b++;
	}
}

/* s->rng = the runs of set bits of s->sel, counted into n_checked. */
static int sel_runs(struct mask_split *s, size_t sel_words, uint32_t *n_rng)
{
	uint32_t n = 0, b = MASK_NONE;
	size_t w;

	for (w = 0; w <= sel_words; w++) {
		/* a word past the end, all clear, closes the last run */
		uint64_t x = w < sel_words ? s->sel[w] : 0;
		uint32_t bit = 0;

		s->n_checked += (uint64_t)__builtin_popcountll(x);
		while (bit < 64) {
			/* the next change from the current run state */
			uint64_t y = b == MASK_NONE ? x >> bit : ~x >> bit;
			uint32_t k = y ? (uint32_t)__builtin_ctzll(y) : 64 - bit;

			bit += k;
			if (bit >= 64)
				break;
			if (b == MASK_NONE) {
				b = (uint32_t)(w * 64 + bit);
				continue;
			}
			if (n == s->cap_rng) {
				uint32_t nc = s->cap_rng ? 2 * s->cap_rng : 256;
				uint32_t *p = realloc(s->rng, (size_t)nc * 2 *
						      sizeof(uint32_t));

				if (!p)
					return -ENOMEM;
				s->rng = p;
				s->cap_rng = nc;
			}
			s->rng[2 * n] = b;
			s->rng[2 * n + 1] = (uint32_t)(w * 64 + bit);
			n++;
			b = MASK_NONE;
		}
	}
	*n_rng = n;
	return 0;
}

int mask_split_compute(struct mask_split *s, const struct grammar_vocab *v,
		       struct mask_dfa *d, const uint32_t *key,
		       uint32_t n_words, uint64_t *mask)
{
	size_t words = mask_words(s->n_vocab), sel_words, w;
	uint32_t i, j, o = GR_KEY_HDR, tk[TKEY_MAX], root, n_rng;
	uint64_t sum_raw = 0, sum_stacks = 0;
	bool any_unc = false;
	int rc;

	sel_words = ((size_t)s->n_ids + 63) / 64;
	memset(s->sel, 0, sel_words * sizeof(uint64_t));
	for (i = 0; i < key[2]; i++) {
		uint32_t len = key[o], k = len < s->depth ? len : s->depth;
		const uint32_t *pos = key + o + 1;
		const struct table *t;

		o += len + 1;
		if (!len)
			continue;	/* a finished parse takes no byte */
		tk[0] = key[0];
		tk[1] = key[1];
		tk[2] = k == len;
		tk[3] = k;
		memcpy(tk + 4, pos + len - k, k * sizeof(uint32_t));
		rc = get_table(s, v, d, tk, 4 + k, &t);
		if (rc)
			return rc;
		sum_raw += t->max.n_raw;
		sum_stacks += t->max_stacks;
		if (len - k + t->max.max_len > GRAMMAR_MAX_DEPTH)
			return -ENOSPC;
		for (w = 0; w < words; w++)
			mask[w] |= t->acc[w];
		for (j = 0; j < t->n_unc; j++)
			sel_range(s->sel, t->unc[2 * j], t->unc[2 * j + 1]);
		any_unc |= t->n_unc > 0;
	}
	if (sum_raw > GR_MAX_RAW || sum_stacks > GRAMMAR_MAX_STACKS)
		return -ENOSPC;
	if (!any_unc)
		return 0;
	rc = sel_runs(s, sel_words, &n_rng);
	if (rc)
		return rc;
	rc = mask_dfa_intern(d, key, n_words, &root);
	if (rc)
		return rc;
	return mask_walk_ranges(v, d, root, s->rng, n_rng, mask);
}
