/*
 * token_mask.c - the vocabulary trie, the masking walk and the mask
 * cache; see token_mask.h.
 *
 * The trie is built from the tokens sorted by their bytes: each token
 * shares the path of its longest common prefix with the one before, so
 * nodes are appended in depth-first order and a node's children are
 * chained in byte order.  A node's tokens (several ids may have the same
 * bytes) are a run of the sorted id array.
 *
 * The walk keeps one matcher per depth, so the matcher of a node is its
 * parent's plus one byte: the cost is one byte step per live trie node.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/token_mask.h"

#define NONE UINT32_MAX
/* Keys longer than this many words are not cached (bounds a slot). */
#define KEY_MAX 256

struct tnode {
	uint32_t first_child, next_sibling;
	uint32_t tok_begin, tok_end;	/* into ids */
	uint8_t byte;
};

struct grammar_vocab {
	uint32_t n_vocab;
	/* the tokens that end a sentence (EOS, a chat's end of turn):
	 * allowed iff the matcher accepts; never in the trie */
	uint32_t ends[GRAMMAR_MAX_ENDS];
	uint32_t n_ends;
	struct tnode *nodes;
	uint32_t n_nodes;
	uint32_t *ids;		/* non-empty tokens sorted by bytes */
	uint32_t max_len;
	const uint8_t **bytes;	/* copies */
	uint32_t *lens;
};

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
	v->nodes[0] = (struct tnode){ NONE, NONE, 0, 0, 0 };
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

			v->nodes[c] = (struct tnode){ NONE, NONE, i, i,
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

	key = grammar_matcher_key(m, &key_n);
	if (cache && cache->n_vocab == v->n_vocab && key_n <= KEY_MAX) {
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
	memset(mask, 0, words * sizeof(uint64_t));
	rc = walk(v, m, mask);
	if (rc)
		return rc;
	if (grammar_matcher_is_accepting(m))
		for (uint32_t e = 0; e < v->n_ends; e++)
			mask[v->ends[e] / 64] |= 1ull << (v->ends[e] % 64);
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

struct grammar_mask_cache *grammar_mask_cache_create(uint32_t n_vocab,
						     size_t max_bytes)
{
	struct grammar_mask_cache *c = calloc(1, sizeof(*c));
	size_t per = sizeof(struct slot) + KEY_MAX * sizeof(uint32_t) +
		     grammar_mask_words(n_vocab) * sizeof(uint64_t);

	if (!c)
		return NULL;
	c->n_vocab = n_vocab;
	c->n_slots = max_bytes / per > 0 ? (uint32_t)(max_bytes / per < 1u << 20
						      ? max_bytes / per : 1u << 20)
					 : 1;
	c->slots = calloc(c->n_slots, sizeof(struct slot));
	if (!c->slots) {
		free(c);
		return NULL;
	}
	return c;
}

void grammar_mask_cache_destroy(struct grammar_mask_cache *c)
{
	uint32_t i;

	if (!c)
		return;
	for (i = 0; i < c->n_slots; i++) {
		free(c->slots[i].key);
		free(c->slots[i].mask);
	}
	free(c->slots);
	free(c);
}

void grammar_mask_cache_stats(const struct grammar_mask_cache *c,
			      uint64_t *hits, uint64_t *misses)
{
	*hits = c->hits;
	*misses = c->misses;
}
