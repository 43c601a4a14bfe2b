/*
 * kv_pool.c - one shard's KV memory; see kv_pool.h.
 */
#include "model/kv_pool.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

int kv_pool_map(struct kv_pool *p, uint32_t n_blocks, uint32_t block_tokens,
		uint64_t bytes_per_token, char *err, size_t err_len)
{
	uint64_t block_bytes = (uint64_t)block_tokens * bytes_per_token;
	void *base;

	*p = (struct kv_pool){ 0 };
	if (!n_blocks || !block_tokens || !bytes_per_token ||
	    block_bytes / block_tokens != bytes_per_token ||
	    block_bytes > SIZE_MAX / n_blocks) {
		snprintf(err, err_len, "KV pool of %u blocks of %u tokens x %llu "
			 "bytes does not fit the address space", n_blocks,
			 block_tokens, (unsigned long long)bytes_per_token);
		return -EOVERFLOW;
	}
	base = mmap(NULL, (size_t)block_bytes * n_blocks, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED) {
		int ret = -errno;

		snprintf(err, err_len, "cannot map a KV pool of %zu bytes (%u "
			 "blocks): %s", (size_t)block_bytes * n_blocks, n_blocks,
			 strerror(-ret));
		return ret;
	}
	*p = (struct kv_pool){ .base = base, .size = (size_t)block_bytes * n_blocks,
			       .block_bytes = (size_t)block_bytes,
			       .n_blocks = n_blocks, .block_tokens = block_tokens };
	return 0;
}

void kv_pool_unmap(struct kv_pool *p)
{
	if (p->base)
		munmap(p->base, p->size);
	*p = (struct kv_pool){ 0 };
}

int kv_pool_copy(struct kv_pool *p, uint32_t src, uint32_t dst)
{
	if (src >= p->n_blocks || dst >= p->n_blocks)
		return -EINVAL;
	if (src != dst)
		memcpy((char *)p->base + (size_t)dst * p->block_bytes,
		       (char *)p->base + (size_t)src * p->block_bytes,
		       p->block_bytes);
	return 0;
}
