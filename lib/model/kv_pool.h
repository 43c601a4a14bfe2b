/*
 * kv_pool.h - the memory of one shard's paged KV cache (docs/DESIGN.md
 * 11): n_blocks blocks of block_bytes each, in the process that runs the
 * model (the worker, or the engine with --workers 0), and the block
 * copies the coordinator asks for (copy-on-write).
 *
 * The pool is one private anonymous MAP_NORESERVE mapping made before
 * the worker enters its sandbox: pages are touched only as blocks are
 * written, and no other process can reach it, so a shard's KV bytes are
 * written only by its own worker.  Which block holds what is the
 * coordinator's business (kv/kv_manager.h); this module only holds bytes.
 */
#ifndef DYNBATCH_KV_POOL_H
#define DYNBATCH_KV_POOL_H

#include <stddef.h>
#include <stdint.h>

struct kv_pool {
	void *base;		/* n_blocks * block_bytes, page-aligned */
	size_t size;		/* the mapping's length */
	size_t block_bytes;	/* block_tokens * the model's KV bytes per token */
	uint32_t n_blocks;
	uint32_t block_tokens;
};

/*
 * Map a pool of n_blocks blocks of block_tokens positions of
 * bytes_per_token each.  0, or a negative errno with a one-line reason
 * in err (a size that overflows, a mapping the kernel refuses).
 */
int kv_pool_map(struct kv_pool *p, uint32_t n_blocks, uint32_t block_tokens,
		uint64_t bytes_per_token, char *err, size_t err_len);

/* Unmap.  Accepts a zeroed pool; idempotent. */
void kv_pool_unmap(struct kv_pool *p);

/*
 * Copy block src's bytes over block dst's.  -EINVAL (nothing copied)
 * when either is not a block of the pool: the ids come from shared
 * memory.  src == dst is a no-op.
 */
int kv_pool_copy(struct kv_pool *p, uint32_t src, uint32_t dst);

#endif /* DYNBATCH_KV_POOL_H */
