/*
 * block_pool.c - free list, reference counts, LRU and hash map of one
 * KV pool; the states and the reasons are in block_pool.h.
 */
#include "kv/block_pool.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Intrusive lists
 * ---------------------------------------------------------------------- */

static void list_init(struct pool_list *l)
{
	l->head = l->tail = POOL_NONE;
	l->n = 0;
}

static void list_push_tail(struct block_pool *p, struct pool_list *l,
			   uint32_t b)
{
	p->b[b].prev = l->tail;
	p->b[b].next = POOL_NONE;
	if (l->tail != POOL_NONE)
		p->b[l->tail].next = b;
	else
		l->head = b;
	l->tail = b;
	l->n++;
}

static void list_remove(struct block_pool *p, struct pool_list *l, uint32_t b)
{
	struct pool_block *x = &p->b[b];

	if (x->prev != POOL_NONE)
		p->b[x->prev].next = x->next;
	else
		l->head = x->next;
	if (x->next != POOL_NONE)
		p->b[x->next].prev = x->prev;
	else
		l->tail = x->prev;
	x->prev = x->next = POOL_NONE;
	l->n--;
}

/* ------------------------------------------------------------------------
 * The hash map
 * ---------------------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
	/* splitmix64's finaliser: every input bit reaches every output bit. */
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

uint64_t pool_hash(const struct block_pool *p, uint64_t parent_hash,
		   const int32_t *tokens)
{
	uint64_t h = mix64(parent_hash ^ mix64(p->model_id));

	for (uint32_t i = 0; i < p->block_tokens; i++)
		h = mix64(h ^ (uint32_t)tokens[i]);
	return h & p->hash_mask;
}

static uint32_t bucket_of(const struct block_pool *p, uint64_t hash)
{
	/* Fold the high half in: with a small mask only low bits vary. */
	return (uint32_t)(hash ^ (hash >> 32)) & p->bucket_mask;
}

static void hash_remove(struct block_pool *p, uint32_t b)
{
	struct pool_block *x = &p->b[b];

	if (x->hprev != POOL_NONE)
		p->b[x->hprev].hnext = x->hnext;
	else
		p->bucket[bucket_of(p, x->hash)] = x->hnext + 1;
	if (x->hnext != POOL_NONE)
		p->b[x->hnext].hprev = x->hprev;
	x->hprev = x->hnext = POOL_NONE;
}

/* b leaves the hash map; its generation goes up so its registered
 * children, if any, match no lookup from now on (block_pool.h). */
static void unregister(struct block_pool *p, uint32_t b)
{
	assert(p->b[b].registered);
	hash_remove(p, b);
	p->b[b].registered = false;
	p->b[b].gen++;
}

uint32_t pool_find(const struct block_pool *p, uint64_t hash, uint32_t parent,
		   const int32_t *tokens)
{
	uint32_t pgen = parent == POOL_NONE ? 0 : p->b[parent].gen;
	size_t bytes = (size_t)p->block_tokens * sizeof(*tokens);

	for (uint32_t b = p->bucket[bucket_of(p, hash)] - 1; b != POOL_NONE;
	     b = p->b[b].hnext) {
		const struct pool_block *x = &p->b[b];

		/* The hash only narrows; parent, its generation and the
		 * tokens decide, so a collision never hands out a block. */
		if (x->hash == hash && x->parent == parent &&
		    x->parent_gen == pgen &&
		    !memcmp(&p->tokens[(size_t)b * p->block_tokens], tokens,
			    bytes))
			return b;
	}
	return POOL_NONE;
}

void pool_register(struct block_pool *p, uint32_t b, uint64_t hash,
		   uint32_t parent, const int32_t *tokens)
{
	struct pool_block *x = &p->b[b];
	uint32_t k = bucket_of(p, hash);

	assert(x->refs > 0 && !x->registered);
	assert(parent == POOL_NONE || p->b[parent].registered);
	x->registered = true;
	x->hash = hash;
	x->parent = parent;
	x->parent_gen = parent == POOL_NONE ? 0 : p->b[parent].gen;
	memcpy(&p->tokens[(size_t)b * p->block_tokens], tokens,
	       (size_t)p->block_tokens * sizeof(*tokens));
	x->hprev = POOL_NONE;
	x->hnext = p->bucket[k] - 1;
	if (x->hnext != POOL_NONE)
		p->b[x->hnext].hprev = b;
	p->bucket[k] = b + 1;
}

/* ------------------------------------------------------------------------
 * Blocks
 * ---------------------------------------------------------------------- */

int pool_init(struct block_pool *p, uint32_t n_blocks, uint32_t block_tokens,
	      uint64_t model_id, uint64_t hash_mask)
{
	uint32_t nb = 1;

	memset(p, 0, sizeof(*p));
	if (n_blocks == 0 || block_tokens == 0 || n_blocks > (1u << 30))
		return -EINVAL;
	while (nb < 2 * n_blocks)
		nb <<= 1;
	p->n_blocks = n_blocks;
	p->block_tokens = block_tokens;
	p->model_id = model_id;
	p->hash_mask = hash_mask;
	p->bucket_mask = nb - 1;
	p->b = calloc(n_blocks, sizeof(*p->b));
	p->tokens = calloc((size_t)n_blocks * block_tokens, sizeof(*p->tokens));
	/* zeroed: nothing here is touched before it is used, so a pool of
	 * millions of blocks costs nothing up front */
	p->bucket = calloc(nb, sizeof(*p->bucket));
	if (!p->b || !p->tokens || !p->bucket) {
		pool_fini(p);
		return -ENOMEM;
	}
	list_init(&p->free);
	list_init(&p->lru);
	p->fresh = 0;
	return 0;
}

void pool_fini(struct block_pool *p)
{
	free(p->b);
	free(p->tokens);
	free(p->bucket);
	memset(p, 0, sizeof(*p));
}

uint32_t pool_available(const struct block_pool *p)
{
	return p->free.n + p->lru.n + (p->n_blocks - p->fresh);
}

uint32_t pool_alloc(struct block_pool *p)
{
	uint32_t b = p->free.head;

	if (b != POOL_NONE) {
		list_remove(p, &p->free, b);
	} else if (p->fresh < p->n_blocks) {
		/* a block never used: free, in no list */
		b = p->fresh++;
		p->b[b].hprev = p->b[b].hnext = POOL_NONE;
	} else {
		/* Only a block nobody references is on the LRU, so an
		 * eviction never takes a block from under a table. */
		b = p->lru.head;
		if (b == POOL_NONE)
			return POOL_NONE;
		list_remove(p, &p->lru, b);
		unregister(p, b);
		p->evictions++;
	}
	assert(p->b[b].refs == 0 && !p->b[b].registered);
	p->b[b].refs = 1;
	if (++p->used > p->peak_used)
		p->peak_used = p->used;
	return b;
}

void pool_incref(struct block_pool *p, uint32_t b)
{
	struct pool_block *x = &p->b[b];

	if (x->refs == 0) {
		/* Only a cached block is hittable: a free one is not
		 * registered, so no lookup returns it. */
		assert(x->registered);
		list_remove(p, &p->lru, b);
		if (++p->used > p->peak_used)
			p->peak_used = p->used;
	}
	x->refs++;
}

void pool_decref(struct block_pool *p, uint32_t b)
{
	struct pool_block *x = &p->b[b];

	assert(x->refs > 0);
	if (--x->refs > 0)
		return;
	p->used--;
	/* The most recent end: the LRU's head is what was released first. */
	list_push_tail(p, x->registered ? &p->lru : &p->free, b);
}

void pool_unregister(struct block_pool *p, uint32_t b)
{
	assert(p->b[b].refs > 0);	/* a cached block would stay on the LRU */
	unregister(p, b);
}

void pool_forget(struct block_pool *p)
{
	for (uint32_t b = 0; b < p->fresh; b++) {
		if (!p->b[b].registered)
			continue;
		unregister(p, b);
		if (p->b[b].refs == 0) {
			list_remove(p, &p->lru, b);
			list_push_tail(p, &p->free, b);
		}
	}
}
