/*
 * kv_manager.h - the coordinator's picture of one shard's KV pool: which
 * block holds what (docs/DESIGN.md 11).
 *
 * A shard's KV bytes live in its worker (lib/model); this module owns
 * only the bookkeeping, the way vLLM V1 splits it: a block pool (free
 * list, reference counts, the LRU of cached free blocks, the hash map of
 * full blocks; kv/block_pool.h) under a manager of block tables, one per
 * table id (the scheduler uses the shard's slot index).  Nothing here
 * touches shared memory or calls up: the scheduler asks, and gets data
 * back (block ids, copies to do, hit lengths).
 *
 * Positions.  Table t maps position p of its sequence to block
 * blocks[p / block_tokens], offset p % block_tokens.  A table's capacity
 * is n_blocks * block_tokens positions; the caller decides how far ahead
 * of its computed tokens it grows it (run-ahead lookahead).
 *
 * The prefix cache.  A full block of committed tokens is registered under
 * a hash chained from its parent's (hash of (parent hash, model id, the
 * block's tokens)).  A lookup walks the chain from the first block and
 * accepts a block only when its recorded tokens and its recorded parent
 * block equal what the lookup expects, so a colliding hash never hands
 * out another sequence's KV (kv_manager_create()'s hash_mask makes
 * collisions on purpose, for tests).  A block whose last reference goes
 * stays registered in the LRU of cached free blocks and can be hit again
 * until an allocation needs it (an eviction).  Tables release their
 * blocks tail first, so the LRU evicts tails before heads.
 *
 * Sharing and copy-on-write.  kv_table_fork() makes a table that
 * references another's first blocks (reference counts go up, nothing is
 * copied).  Before a worker may write positions [from, to) of a table,
 * kv_table_make_writable() gives the table a private copy of every block
 * in that range that another table also references: a new block, and a
 * kv_copy for the worker to do before its next step.  The last sharer of
 * a block writes it in place.  A failed allocation changes nothing (no
 * reference is lost, no table is half updated).
 *
 * Every function runs on the coordinator's loop thread.
 */
#ifndef DYNBATCH_KV_MANAGER_H
#define DYNBATCH_KV_MANAGER_H

#include <stdbool.h>
#include <stdint.h>

#define KV_NO_BLOCK UINT32_MAX

/* One block copy the worker is to do before its next step: the bytes of
 * block src into block dst (same pool). */
struct kv_copy {
	uint32_t src;
	uint32_t dst;
};

/* What the manager counts (stats; docs/usage.md's kv object). */
struct kv_counts {
	uint32_t blocks;		/* the pool */
	uint32_t used;			/* referenced by some table */
	uint32_t cached;		/* free, but registered (hittable) */
	uint32_t peak_used;		/* most used at once */
	uint64_t hit_tokens;		/* positions taken from the cache */
	uint64_t cow_copies;		/* blocks copied on write */
	uint64_t evictions;		/* cached blocks reused for others */
};

struct kv_manager;

/*
 * A manager of n_blocks blocks of block_tokens positions each, with
 * n_tables tables of at most max_blocks blocks each.  model_id goes into
 * every hash (two models never share a chain).  hash_mask is ANDed onto
 * every hash: UINT64_MAX in use, a few bits in tests to force
 * collisions.  NULL when out of memory or when an argument is 0.
 */
struct kv_manager *kv_manager_create(uint32_t n_blocks, uint32_t block_tokens,
				     uint32_t n_tables, uint32_t max_blocks,
				     uint64_t model_id, uint64_t hash_mask);
void kv_manager_destroy(struct kv_manager *m);	/* accepts NULL */

uint32_t kv_block_tokens(const struct kv_manager *m);

/* Blocks an allocation could get now: free plus cached free. */
uint32_t kv_available(const struct kv_manager *m);

/*
 * The longest cached prefix of tokens[0 .. n) in whole blocks, limited to
 * at most max_tokens positions: the number of positions a table opened
 * on these tokens would take from the cache (a multiple of block_tokens).
 * Changes nothing (routing asks every shard).
 */
uint32_t kv_lookup(const struct kv_manager *m, const int32_t *tokens, uint32_t n,
		   uint32_t max_tokens);

/*
 * Open table t (closed) for a sequence whose tokens are tokens[0 .. n):
 * take the cached prefix kv_lookup(m, tokens, n, max_hit) would give
 * (each block's reference count goes up; a cached free block leaves the
 * LRU), then allocate fresh blocks until the capacity covers `reserve`
 * positions (reserve >= the hit).  *hit gets the positions taken from the
 * cache.  0, or -ENOSPC when the blocks are not there (nothing changed).
 * Counts the hit in kv_counts.hit_tokens.
 */
int kv_table_open(struct kv_manager *m, uint32_t t, const int32_t *tokens,
		  uint32_t n, uint32_t max_hit, uint32_t reserve, uint32_t *hit);

/*
 * Open table dst (closed) as a fork of open table src: dst references
 * src's blocks that cover positions [0, n_tokens) (n_tokens <= src's
 * capacity); nothing is copied.  dst's capacity is then those blocks.
 * Cannot fail for a valid call (-EINVAL otherwise).
 */
int kv_table_fork(struct kv_manager *m, uint32_t dst, uint32_t src,
		  uint32_t n_tokens);

/* Grow open table t until its capacity covers `positions`.  0, or
 * -ENOSPC (nothing changed), -EINVAL past max_blocks. */
int kv_table_grow(struct kv_manager *m, uint32_t t, uint32_t positions);

/*
 * Table t is about to be written at positions [from, to) (to <= its
 * capacity): every block there that another table also references is
 * replaced by a fresh one, and the copy appended to copies[*n_copies ..]
 * (room for (to - from) / block_tokens + 2 entries).  0, or -ENOSPC
 * with nothing changed (copies and *n_copies as they were).
 */
int kv_table_make_writable(struct kv_manager *m, uint32_t t, uint32_t from,
			   uint32_t to, struct kv_copy *copies, uint32_t *n_copies);

/*
 * Tokens[0 .. n_computed) of open table t are committed and their KV is
 * in its blocks: register every full block among them that is not yet
 * registered, chained from its parent.  A block whose content is already
 * registered under another block stays unregistered (the first one is
 * the one lookups find).
 */
void kv_table_commit(struct kv_manager *m, uint32_t t, const int32_t *tokens,
		     uint32_t n_computed);

/* Close table t: every block loses one reference, tail first; a block
 * left with none joins the LRU when registered, else the free list. */
void kv_table_close(struct kv_manager *m, uint32_t t);

/* The blocks of table t (NULL when closed); *n gets their count. */
const uint32_t *kv_table_blocks(const struct kv_manager *m, uint32_t t,
				uint32_t *n);

bool kv_table_is_open(const struct kv_manager *m, uint32_t t);

/* The pool's contents are gone (its worker died): nothing registered is
 * hittable any more.  Tables keep their blocks. */
void kv_forget_cache(struct kv_manager *m);

/* The counts so far. */
void kv_counts(const struct kv_manager *m, struct kv_counts *out);

/* Reference count of block b (tests and assertions). */
uint32_t kv_block_refs(const struct kv_manager *m, uint32_t b);

#endif /* DYNBATCH_KV_MANAGER_H */
