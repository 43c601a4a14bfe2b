/*
 * token_mask.c - the vocabulary trie, the mask cache and the choice of
 * how a mask is computed; see token_mask.h.
 *
 * The trie is built from the tokens sorted by their bytes: each token
 * shares the path of its longest common prefix with the one before, so
 * nodes are appended in depth-first order and a node's children are
 * chained in byte order.  A node's tokens (several ids may have the same
 * bytes) are a run of the sorted id array, and so are its subtree's.
 *
 * A mask comes, fastest first, from the cache's slot for the state, from
 * the per-suffix tables (mask_split.c), from a walk of the whole trie
 * over the cache's state automaton (mask_dfa.c; without a cache, over
 * one made for the call), or, when the automaton's memory cap is
 * reached, from the plain walk: one matcher per depth, so the matcher of
 * a node is its parent's plus one byte.  All give the same mask.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/mask_internal.h"
#include "grammar/token_mask.h"

#define NONE MASK_NONE

_Static_assert(MASK_MAX_ENDS == GRAMMAR_MAX_ENDS, "end tokens");
/* Keys longer than this many words are not cached (bounds a slot). */
#define KEY_MAX 256
/* The automaton of an uncached mask: one call's states. */
#define LOCAL_DFA_BYTES (16u << 20)

struct slot {
	uint64_t hash;
	uint32_t key_n;		/* 0: empty */
	uint32_t *key;
	uint64_t *mask;
};

struct grammar_mask_cache {
	uint32_t n_vocab;
	uint32_t n_slots;
	struct slot *slots;
	uint64_t hits, misses;
	const struct grammar *g;	/* of dfa and split; NULL: none yet */
	struct mask_dfa *dfa;
	struct mask_split *split;	/* made on first use (needs the vocab) */
	size_t table_bytes;
	uint32_t split_depth;	/* 0: the default */
	uint64_t n_split, n_dfa, n_plain;
};

/* ------------------------------------------------------------------ */
/* The vocabulary trie                                                 */
/* ------------------------------------------------------------------ */

static int cmp_tok(const void *a, const void *b, void *arg)
{
	const struct grammar_vocab *v = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	uint32_t n = v->lens[x] < v->lens[y] ? v->lens[x] : v->lens[y];
	int c = memcmp(v->bytes[x], v->bytes[y], n);

	if (c)
		return c;
	if (v->lens[x] != v->lens[y])
		return v->lens[x] < v->lens[y] ? -1 : 1;
	return x < y ? -1 : x > y;
}

void grammar_vocab_destroy(struct grammar_vocab *v)
{
	uint32_t i;

	if (!v)
		return;
	if (v->bytes)
		for (i = 0; i < v->n_vocab; i++)
			free((void *)v->bytes[i]);
	free(v->bytes);
	free(v->lens);
	free(v->nodes);
	free(v->ids);
	free(v);
}

struct grammar_vocab *grammar_vocab_create(const uint8_t *const *bytes,
					   const uint32_t *lens,
					   uint32_t n_vocab, int32_t eos_id)
{
	return grammar_vocab_create_ends(bytes, lens, n_vocab, &eos_id,
					 eos_id >= 0);
}

/* Is t one of v's end tokens? */
static bool vocab_is_end(const struct grammar_vocab *v, uint32_t t)
{
	for (uint32_t i = 0; i < v->n_ends; i++)
		if (v->ends[i] == t)
			return true;
	return false;
}

struct grammar_vocab *grammar_vocab_create_ends(const uint8_t *const *bytes,
						const uint32_t *lens,
						uint32_t n_vocab,
						const int32_t *ends,
						uint32_t n_ends)
{
	struct grammar_vocab *v = calloc(1, sizeof(*v));
	uint32_t i, n_ids = 0, cap, *path = NULL, *last = NULL, prev = NONE;
	size_t total = 1;

	if (!v)
		return NULL;
	v->n_vocab = n_vocab;
	for (i = 0; i < n_ends && v->n_ends < GRAMMAR_MAX_ENDS; i++)
		if (ends[i] >= 0 && (uint32_t)ends[i] < n_vocab &&
		    !vocab_is_end(v, (uint32_t)ends[i]))
			v->ends[v->n_ends++] = (uint32_t)ends[i];
	v->bytes = calloc(n_vocab ? n_vocab : 1, sizeof(*v->bytes));
	v->lens = calloc(n_vocab ? n_vocab : 1, sizeof(uint32_t));
	v->ids = malloc((n_vocab ? n_vocab : 1) * sizeof(uint32_t));
	if (!v->bytes || !v->lens || !v->ids)
		goto fail;
	for (i = 0; i < n_vocab; i++) {
		v->lens[i] = lens[i];
		v->bytes[i] = malloc(lens[i] ? lens[i] : 1);
		if (!v->bytes[i])
			goto fail;
		if (lens[i])	/* an empty token may have no bytes at all */
			memcpy((void *)v->bytes[i], bytes[i], lens[i]);
		/* an end token is the matcher's accepting, never its bytes */
		if (lens[i] && !vocab_is_end(v, i)) {
			v->ids[n_ids++] = i;
			total += lens[i];
			if (lens[i] > v->max_len)
				v->max_len = lens[i];
		}
	}
	qsort_r(v->ids, n_ids, sizeof(uint32_t), cmp_tok, v);
	cap = total < UINT32_MAX ? (uint32_t)total : UINT32_MAX;
	v->nodes = malloc((size_t)cap * sizeof(struct tnode));
	path = malloc(((size_t)v->max_len + 1) * sizeof(uint32_t));
	last = malloc((size_t)cap * sizeof(uint32_t));
	if (!v->nodes || !path || !last)
		goto fail;
	v->n_ids = n_ids;
	v->nodes[0] = (struct tnode){ NONE, NONE, 0, 0, n_ids, 0 };
	last[0] = NONE;
	v->n_nodes = 1;
	path[0] = 0;
	for (i = 0; i < n_ids; i++) {
		uint32_t t = v->ids[i], l = 0, d;

		if (prev != NONE) {
			uint32_t n = v->lens[prev] < v->lens[t] ? v->lens[prev]
							       : v->lens[t];

			while (l < n && v->bytes[prev][l] == v->bytes[t][l])
				l++;
		}
		for (d = l; d < v->lens[t]; d++) {
			uint32_t p = path[d], c = v->n_nodes++;

			v->nodes[c] = (struct tnode){ NONE, NONE, i, i, i + 1,
						      v->bytes[t][d] };
			last[c] = NONE;
			if (last[p] == NONE)
				v->nodes[p].first_child = c;
			else
				v->nodes[last[p]].next_sibling = c;
			last[p] = c;
			path[d + 1] = c;
		}
		/* t ends at path[len]; equal strings extend the run */
		if (v->nodes[path[v->lens[t]]].tok_end == i &&
		    v->nodes[path[v->lens[t]]].tok_begin != i)
			v->nodes[path[v->lens[t]]].tok_end = i + 1;
		else {
			v->nodes[path[v->lens[t]]].tok_begin = i;
			v->nodes[path[v->lens[t]]].tok_end = i + 1;
		}
		/* the subtrees t is in now end after it */
		for (d = 1; d <= l && d <= v->lens[t]; d++)
			v->nodes[path[d]].sub_end = i + 1;
		prev = t;
	}
	free(path);
	free(last);
	return v;
fail:
	free(path);
	free(last);
	grammar_vocab_destroy(v);
	return NULL;
}

uint32_t grammar_vocab_size(const struct grammar_vocab *v)
{
	return v->n_vocab;
}

/* ------------------------------------------------------------------ */
/* The walk                                                            */
/* ------------------------------------------------------------------ */

static int walk(const struct grammar_vocab *v, const struct grammar_matcher *m,
		uint64_t *mask)
{
	uint32_t depth = v->max_len + 1, d = 0, i;
	struct grammar_matcher **ms = calloc(depth, sizeof(*ms));
	uint32_t *it = malloc((size_t)depth * sizeof(uint32_t));
	int rc = -ENOMEM;

	if (!ms || !it)
		goto out;
	ms[0] = grammar_matcher_clone(m);
	if (!ms[0])
		goto out;
	it[0] = v->nodes[0].first_child;
	for (;;) {
		uint32_t c = it[d];
		const struct tnode *nd;

		if (c == NONE) {
			if (!d)
				break;
			d--;
			continue;
		}
		nd = &v->nodes[c];
		it[d] = nd->next_sibling;
		if (!ms[d + 1]) {
			ms[d + 1] = grammar_matcher_clone(ms[d]);
			if (!ms[d + 1])
				goto out;
		} else if (grammar_matcher_copy(ms[d + 1], ms[d])) {
			goto out;
		}
		if (grammar_matcher_accept_byte(ms[d + 1], nd->byte))
			continue;
		for (i = nd->tok_begin; i < nd->tok_end; i++)
			mask[v->ids[i] / 64] |= 1ull << (v->ids[i] % 64);
		if (nd->first_child != NONE) {
			d++;
			it[d] = nd->first_child;
		}
	}
	rc = 0;
out:
	if (ms)
		for (i = 0; i < depth; i++)
			grammar_matcher_destroy(ms[i]);
	free(ms);
	free(it);
	return rc;
}

/* A whole walk over d from key: 0, -ENOSPC (d full, even empty), -ENOMEM. */
static int dfa_walk(const struct grammar_vocab *v, struct mask_dfa *d,
		    const uint32_t *key, uint32_t key_n, uint64_t *mask)
{
	size_t words = grammar_mask_words(v->n_vocab);
	uint32_t root, try;
	int rc = -ENOSPC;

	for (try = 0; try < 2 && rc == -ENOSPC; try++) {
		if (try)
			mask_dfa_reset(d);	/* full: this state alone */
		memset(mask, 0, words * sizeof(uint64_t));
		rc = mask_dfa_intern(d, key, key_n, &root);
		if (!rc)
			rc = mask_walk(v, d, root, mask, NULL);
	}
	return rc;
}

/* The mask of m without its slot: 0, -ENOSPC (walk it plainly), -ENOMEM. */
static int fast_mask(const struct grammar_vocab *v,
		     const struct grammar_matcher *m,
		     struct grammar_mask_cache *c, const uint32_t *key,
		     uint32_t key_n, uint64_t *mask)
{
	struct mask_dfa *local;
	int rc;

	if (!c) {
		local = mask_dfa_create(LOCAL_DFA_BYTES);
		if (!local)
			return -ENOMEM;
		rc = mask_dfa_bind(local, m);
		if (!rc)
			rc = dfa_walk(v, local, key, key_n, mask);
		mask_dfa_destroy(local);
		return rc;
	}
	if (c->g != grammar_matcher_grammar(m)) {
		c->g = NULL;
		if (c->split)
			mask_split_reset(c->split);
		rc = mask_dfa_bind(c->dfa, m);
		if (rc)
			return rc;
		c->g = grammar_matcher_grammar(m);
	}
	if (!c->split) {
		c->split = mask_split_create(v->n_vocab, v->n_ids, c->table_bytes);
		if (!c->split)
			return -ENOMEM;
		if (c->split_depth)
			mask_split_set_depth(c->split, c->split_depth);
	}
	memset(mask, 0, grammar_mask_words(v->n_vocab) * sizeof(uint64_t));
	rc = mask_split_compute(c->split, v, c->dfa, key, key_n, mask);
	if (!rc) {
		c->n_split++;
		return 0;
	}
	if (rc != -ENOSPC)
		return rc;
	rc = dfa_walk(v, c->dfa, key, key_n, mask);
	if (!rc)
		c->n_dfa++;
	return rc;
}

int grammar_mask_compute(const struct grammar_vocab *v,
			 const struct grammar_matcher *m,
			 struct grammar_mask_cache *cache, uint64_t *mask)
{
	size_t words = grammar_mask_words(v->n_vocab);
	struct slot *s = NULL;
	const uint32_t *key;
	uint32_t key_n;
	uint64_t h = 0;
	int rc;

	if (cache && cache->n_vocab != v->n_vocab)
		cache = NULL;	/* not this vocabulary's: unusable */
	key = grammar_matcher_key(m, &key_n);
	if (cache && key_n <= KEY_MAX) {
		h = grammar_matcher_hash(m);
		s = &cache->slots[h % cache->n_slots];
		if (s->key_n == key_n && s->hash == h &&
		    !memcmp(s->key, key, (size_t)key_n * sizeof(uint32_t))) {
			cache->hits++;
			memcpy(mask, s->mask, words * sizeof(uint64_t));
			return 0;
		}
		cache->misses++;
	}
	rc = fast_mask(v, m, cache, key, key_n, mask);
	if (rc == -ENOSPC) {
		if (cache)
			cache->n_plain++;
		memset(mask, 0, words * sizeof(uint64_t));
		rc = walk(v, m, mask);
	}
	if (rc)
		return rc;
	/* the end tokens by the state alone, whatever their bytes */
	for (uint32_t e = 0; e < v->n_ends; e++) {
		mask[v->ends[e] / 64] &= ~(1ull << (v->ends[e] % 64));
		if (grammar_matcher_is_accepting(m))
			mask_set(mask, v->ends[e]);
	}
	if (s) {
		if (!s->key)
			s->key = malloc(KEY_MAX * sizeof(uint32_t));
		if (!s->mask)
			s->mask = malloc(words * sizeof(uint64_t));
		if (s->key && s->mask) {
			memcpy(s->key, key, (size_t)key_n * sizeof(uint32_t));
			memcpy(s->mask, mask, words * sizeof(uint64_t));
			s->key_n = key_n;
			s->hash = h;
		}
	}
	return 0;
}

int grammar_matcher_accept_token(struct grammar_matcher *m,
				 const struct grammar_vocab *v, uint32_t t)
{
	if (t >= v->n_vocab)
		return -ENOENT;
	if (vocab_is_end(v, t))
		return grammar_matcher_is_accepting(m) ? 0 : -ENOENT;
	if (!v->lens[t])
		return -ENOENT;
	return grammar_matcher_accept_bytes(m, v->bytes[t], v->lens[t]);
}

/* ------------------------------------------------------------------ */
/* The cache                                                           */
/* ------------------------------------------------------------------ */

struct grammar_mask_cache *grammar_mask_cache_create_limits(
	uint32_t n_vocab, size_t slot_bytes, size_t dfa_bytes,
	size_t table_bytes)
{
	struct grammar_mask_cache *c = calloc(1, sizeof(*c));
	size_t per = sizeof(struct slot) + KEY_MAX * sizeof(uint32_t) +
		     grammar_mask_words(n_vocab) * sizeof(uint64_t);

	if (!c)
		return NULL;
	c->n_vocab = n_vocab;
	c->n_slots = slot_bytes / per > 0 ? (uint32_t)(slot_bytes / per < 1u << 20
						       ? slot_bytes / per : 1u << 20)
					  : 1;
	c->slots = calloc(c->n_slots, sizeof(struct slot));
	c->dfa = mask_dfa_create(dfa_bytes);
	c->table_bytes = table_bytes;
	if (!c->slots || !c->dfa) {
		grammar_mask_cache_destroy(c);
		return NULL;
	}
	return c;
}

struct grammar_mask_cache *grammar_mask_cache_create(uint32_t n_vocab,
						     size_t max_bytes)
{
	/* half for masks by state, the rest for what makes misses cheap */
	return grammar_mask_cache_create_limits(n_vocab, max_bytes / 2,
						max_bytes / 4, max_bytes / 4);
}

void grammar_mask_cache_destroy(struct grammar_mask_cache *c)
{
	uint32_t i;

	if (!c)
		return;
	for (i = 0; c->slots && i < c->n_slots; i++) {
		free(c->slots[i].key);
		free(c->slots[i].mask);
	}
	free(c->slots);
	mask_dfa_destroy(c->dfa);
	mask_split_destroy(c->split);
	free(c);
}

void grammar_mask_cache_stats(const struct grammar_mask_cache *c,
			      uint64_t *hits, uint64_t *misses)
{
	*hits = c->hits;
	*misses = c->misses;
}

void grammar_mask_cache_set_split_depth(struct grammar_mask_cache *c,
					uint32_t depth)
{
	c->split_depth = depth ? depth : SPLIT_DEPTH;
	if (c->split)
		mask_split_set_depth(c->split, c->split_depth);
}

void grammar_mask_cache_get_stats(const struct grammar_mask_cache *c,
				  struct grammar_mask_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->hits = c->hits;
	st->misses = c->misses;
	st->n_split = c->n_split;
	st->n_dfa = c->n_dfa;
	st->n_plain = c->n_plain;
	mask_split_counts(c->split, &st->n_tables, &st->table_bytes,
			  &st->build_s, &st->n_checked);
	st->n_states = c->dfa->n_states;
	st->dfa_bytes = c->dfa->used;
	st->dfa_full = c->dfa->n_full;
}
