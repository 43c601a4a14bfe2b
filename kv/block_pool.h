/*
 * block_pool.h - the blocks of one shard's KV pool: free list, reference
 * counts, the LRU of cached free blocks and the hash map of registered
 * full blocks (docs/DESIGN.md 11.1).  kv/kv_manager.c builds the block
 * tables on top; nothing else uses this header.
 *
 * Every block is in exactly one state:
 *   free     refs 0, not registered, on the free list;
 *   cached   refs 0, registered, on the LRU (least recent at the head);
 *   used     refs > 0, registered or not, on no list.
 * A registered block is in the hash map under its hash and records its
 * parent block, the parent's generation and its block_tokens tokens, so a
 * lookup can check all three and a colliding hash is never taken.
 *
 * Generations.  A block's generation goes up every time it is
 * unregistered (evicted or forgotten).  A child records its parent's
 * generation when it registers, so once the parent is gone (and maybe
 * reused for another prefix, perhaps under the same hash when the mask
 * is small) the child no longer matches any lookup: an orphan.  Orphans
 * stay registered and cached until the LRU evicts them, which is cheaper
 * than finding and unregistering every descendant.
 *
 * Every operation is O(1) but the hash lookups, which walk one bucket
 * chain (buckets: a power of two >= 2 * n_blocks).
 */
#ifndef DYNBATCH_KV_BLOCK_POOL_H
#define DYNBATCH_KV_BLOCK_POOL_H

#include <stdbool.h>
#include <stdint.h>

/* No block: the end of a list, a first block's parent.  The same value
 * as kv_manager.h's KV_NO_BLOCK (kv_manager.c checks), defined here so
 * that the pool does not include the manager that includes it. */
#define POOL_NONE UINT32_MAX

/* The parent hash of a sequence's first block (any odd constant). */
#define POOL_ROOT_HASH 0x9E3779B97F4A7C15ull

/* One block's bookkeeping; the lists are intrusive, by block index. */
struct pool_block {
	uint32_t refs;
	uint32_t prev, next;	/* free list or LRU, POOL_NONE at the ends */
	uint32_t hprev, hnext;	/* its hash bucket's chain, when registered */
	uint32_t parent;	/* POOL_NONE for a sequence's first block */
	uint32_t parent_gen;	/* the parent's generation when registered */
	uint32_t gen;		/* goes up at every unregistration */
	uint64_t hash;		/* masked, when registered */
	bool registered;
};

/* A doubly linked list of block indices. */
struct pool_list {
	uint32_t head, tail;
	uint32_t n;
};

struct block_pool {
	uint32_t n_blocks;
	uint32_t block_tokens;
	uint64_t model_id;
	uint64_t hash_mask;
	struct pool_block *b;
	int32_t *tokens;	/* block_tokens per block, when registered */
	uint32_t *bucket;	/* chain heads + 1, 0 when empty */
	uint32_t bucket_mask;	/* buckets - 1 */
	struct pool_list free;	/* order does not matter */
	uint32_t fresh;		/* blocks [fresh, n_blocks) were never used:
				 * free too, in no list (allocated first
				 * after the free list) */
	struct pool_list lru;	/* head: least recently released */
	uint32_t used;
	uint32_t peak_used;
	uint64_t evictions;
};

/* A pool of n_blocks free blocks (both arguments > 0).  0, or -ENOMEM. */
int pool_init(struct block_pool *p, uint32_t n_blocks, uint32_t block_tokens,
	      uint64_t model_id, uint64_t hash_mask);
void pool_fini(struct block_pool *p);

/* Free plus cached: how many pool_alloc() calls can succeed now. */
uint32_t pool_available(const struct block_pool *p);

/*
 * A block with one reference: the free list's first, else the LRU's
 * least recent cached block, unregistered first (an eviction).
 * POOL_NONE when neither list has one.
 */
uint32_t pool_alloc(struct block_pool *p);

/* One more reference to block b; a cached block leaves the LRU (a hit). */
void pool_incref(struct block_pool *p, uint32_t b);

/* One reference less (b has one); at none, b goes to the LRU's most
 * recent end when registered, else to the free list. */
void pool_decref(struct block_pool *p, uint32_t b);

/* The hash of a block holding tokens (block_tokens of them) whose parent
 * has hash parent_hash (POOL_ROOT_HASH for a first block), masked. */
uint64_t pool_hash(const struct block_pool *p, uint64_t parent_hash,
		   const int32_t *tokens);

/* The registered block with this hash, parent (POOL_NONE or a
 * registered block) and tokens that registered under the parent's current
 * generation, or POOL_NONE. */
uint32_t pool_find(const struct block_pool *p, uint64_t hash, uint32_t parent,
		   const int32_t *tokens);

/* Register block b (used, not registered) under hash, as parent's child
 * (POOL_NONE or a registered block), holding tokens. */
void pool_register(struct block_pool *p, uint32_t b, uint64_t hash,
		   uint32_t parent, const int32_t *tokens);

/* Unregister block b (registered, used): it is about to be written, so
 * its recorded tokens would no longer be its content.  Its children, if
 * any, become orphans. */
void pool_unregister(struct block_pool *p, uint32_t b);

/* Unregister every block: cached blocks become free, used blocks just
 * lose their registration.  Generations go up, so nothing matches. */
void pool_forget(struct block_pool *p);

#endif /* DYNBATCH_KV_BLOCK_POOL_H */
