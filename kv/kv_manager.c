/*
 * kv_manager.c - the block tables of one shard's KV pool over
 * kv/block_pool.c: lookups, opens, forks, growth, copy-on-write, commits
 * (docs/DESIGN.md 11.1).  The contracts are in kv_manager.h.
 */
#include "kv/kv_manager.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>

#include "kv/block_pool.h"

static_assert(POOL_NONE == KV_NO_BLOCK, "one value for no block");

struct kv_table {
	uint32_t *blocks;	/* max_blocks of them, count in use */
	uint32_t count;
	/* blocks[0 .. registered) are registered, each chained from the one
	 * before: where kv_table_commit() goes on from. */
	uint32_t registered;
	bool open;
};

struct kv_manager {
	struct block_pool pool;
	uint32_t n_tables;
	uint32_t max_blocks;
	struct kv_table *tables;
	uint32_t *ids;		/* n_tables * max_blocks, carved into tables */
	uint32_t *scratch;	/* max_blocks: a lookup's blocks */
	uint64_t hit_tokens;
	uint64_t cow_copies;
};

struct kv_manager *kv_manager_create(uint32_t n_blocks, uint32_t block_tokens,
				     uint32_t n_tables, uint32_t max_blocks,
				     uint64_t model_id, uint64_t hash_mask)
{
	struct kv_manager *m;

	if (!n_blocks || !block_tokens || !n_tables || !max_blocks ||
	    (uint64_t)max_blocks * block_tokens > UINT32_MAX)
		return NULL;	/* positions are uint32_t */
	m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->n_tables = n_tables;
	m->max_blocks = max_blocks;
	m->tables = calloc(n_tables, sizeof(*m->tables));
	m->ids = calloc((size_t)n_tables * max_blocks, sizeof(*m->ids));
	m->scratch = calloc(max_blocks, sizeof(*m->scratch));
	if (!m->tables || !m->ids || !m->scratch ||
	    pool_init(&m->pool, n_blocks, block_tokens, model_id, hash_mask)) {
		kv_manager_destroy(m);
		return NULL;
	}
	for (uint32_t t = 0; t < n_tables; t++)
		m->tables[t].blocks = &m->ids[(size_t)t * max_blocks];
	return m;
}

void kv_manager_destroy(struct kv_manager *m)
{
	if (!m)
		return;
	pool_fini(&m->pool);
	free(m->tables);
	free(m->ids);
	free(m->scratch);
	free(m);
}

uint32_t kv_block_tokens(const struct kv_manager *m)
{
	return m->pool.block_tokens;
}

uint32_t kv_available(const struct kv_manager *m)
{
	return pool_available(&m->pool);
}

/* Blocks that cover `positions` positions. */
static uint32_t blocks_for(const struct kv_manager *m, uint32_t positions)
{
	uint32_t bt = m->pool.block_tokens;

	return positions / bt + (positions % bt != 0);
}

/*
 * The cached chain of tokens[0 .. n) into out[], at most max_tokens
 * positions and max_blocks blocks: walk from the first block, each found
 * by its hash, its parent (the block found before) and its tokens.
 */
static uint32_t walk(const struct kv_manager *m, const int32_t *tokens,
		     uint32_t n, uint32_t max_tokens, uint32_t *out)
{
	const struct block_pool *p = &m->pool;
	uint32_t bt = p->block_tokens;
	uint32_t lim = (n < max_tokens ? n : max_tokens) / bt;
	uint32_t parent = POOL_NONE;
	uint64_t h = POOL_ROOT_HASH;
	uint32_t k;

	if (lim > m->max_blocks)
		lim = m->max_blocks;	/* no table could hold more */
	for (k = 0; k < lim; k++) {
		const int32_t *tk = &tokens[(size_t)k * bt];
		uint32_t b;

		h = pool_hash(p, h, tk);
		b = pool_find(p, h, parent, tk);
		if (b == POOL_NONE)
			break;
		out[k] = b;
		parent = b;
	}
	return k;
}

uint32_t kv_lookup(const struct kv_manager *m, const int32_t *tokens, uint32_t n,
		   uint32_t max_tokens)
{
	/* scratch is the manager's own and is not part of its state. */
	return walk(m, tokens, n, max_tokens, m->scratch) * m->pool.block_tokens;
}

static struct kv_table *closed_table(struct kv_manager *m, uint32_t t)
{
	return t < m->n_tables && !m->tables[t].open ? &m->tables[t] : NULL;
}

static struct kv_table *open_table(struct kv_manager *m, uint32_t t)
{
	return t < m->n_tables && m->tables[t].open ? &m->tables[t] : NULL;
}

/* Append `fresh` new blocks to table tb; the caller checked that the pool
 * has them, so no allocation fails half way. */
static void append_fresh(struct kv_manager *m, struct kv_table *tb,
			 uint32_t fresh)
{
	for (uint32_t i = 0; i < fresh; i++) {
		uint32_t b = pool_alloc(&m->pool);

		assert(b != POOL_NONE);
		tb->blocks[tb->count++] = b;
	}
}

int kv_table_open(struct kv_manager *m, uint32_t t, const int32_t *tokens,
		  uint32_t n, uint32_t max_hit, uint32_t reserve, uint32_t *hit)
{
	struct kv_table *tb = closed_table(m, t);
	uint32_t hb, need, taken = 0;

	if (!tb || (!tokens && n))
		return -EINVAL;
	need = blocks_for(m, reserve);
	if (need > m->max_blocks)
		return -EINVAL;
	hb = walk(m, tokens, n, max_hit, m->scratch);
	if (need < hb)
		need = hb;	/* the capacity covers the hit at least */
	/* A hit on a cached block takes it off the LRU, so it no longer
	 * counts as available for the fresh blocks. */
	for (uint32_t k = 0; k < hb; k++)
		taken += m->pool.b[m->scratch[k]].refs == 0;
	if (need - hb > pool_available(&m->pool) - taken)
		return -ENOSPC;
	/* The hits first: referenced, they cannot be evicted for the rest. */
	for (uint32_t k = 0; k < hb; k++) {
		pool_incref(&m->pool, m->scratch[k]);
		tb->blocks[k] = m->scratch[k];
	}
	tb->count = hb;
	tb->registered = hb;
	tb->open = true;
	append_fresh(m, tb, need - hb);
	m->hit_tokens += (uint64_t)hb * m->pool.block_tokens;
	if (hit)
		*hit = hb * m->pool.block_tokens;
	return 0;
}

int kv_table_fork(struct kv_manager *m, uint32_t dst, uint32_t src,
		  uint32_t n_tokens)
{
	struct kv_table *d = closed_table(m, dst);
	struct kv_table *s = open_table(m, src);
	uint32_t nb, nfull;

	if (!d || !s || dst == src)
		return -EINVAL;
	nb = blocks_for(m, n_tokens);
	if (nb > s->count)
		return -EINVAL;
	for (uint32_t k = 0; k < nb; k++) {
		pool_incref(&m->pool, s->blocks[k]);
		d->blocks[k] = s->blocks[k];
	}
	d->count = nb;
	/* The shared head is registered for dst as it is for src, up to the
	 * last block dst holds whole (its sequence may differ after). */
	nfull = n_tokens / m->pool.block_tokens;
	d->registered = s->registered < nfull ? s->registered : nfull;
	d->open = true;
	return 0;
}

int kv_table_grow(struct kv_manager *m, uint32_t t, uint32_t positions)
{
	struct kv_table *tb = open_table(m, t);
	uint32_t need;

	if (!tb)
		return -EINVAL;
	need = blocks_for(m, positions);
	if (need > m->max_blocks)
		return -EINVAL;
	if (need <= tb->count)
		return 0;
	if (need - tb->count > pool_available(&m->pool))
		return -ENOSPC;
	append_fresh(m, tb, need - tb->count);
	return 0;
}

int kv_table_make_writable(struct kv_manager *m, uint32_t t, uint32_t from,
			   uint32_t to, struct kv_copy *copies, uint32_t *n_copies)
{
	struct kv_table *tb = open_table(m, t);
	uint32_t bt = m->pool.block_tokens;
	uint32_t first, end, shared = 0;

	if (!tb || to > tb->count * bt || (from < to && (!copies || !n_copies)))
		return -EINVAL;
	if (from >= to)
		return 0;
	first = from / bt;
	end = blocks_for(m, to);
	/*
	 * Count before allocating.  Each replacement allocates one block and
	 * frees none (the old block keeps its other sharers), so this is
	 * exact: either every allocation succeeds, or none is tried and
	 * nothing (not a reference, not a cached block) is lost.  Undoing
	 * after a failure could not bring back a cached block that an
	 * allocation had already evicted.
	 */
	for (uint32_t k = first; k < end; k++)
		shared += m->pool.b[tb->blocks[k]].refs > 1;
	if (shared > pool_available(&m->pool))
		return -ENOSPC;
	for (uint32_t k = first; k < end; k++) {
		uint32_t old = tb->blocks[k], b;

		if (m->pool.b[old].refs == 1) {
			/* The last sharer writes in place.  A registered
			 * block here (a fork cut inside it, its source
			 * gone since) must leave the hash map first: a hit
			 * would hand out the rewritten content. */
			if (m->pool.b[old].registered) {
				pool_unregister(&m->pool, old);
				if (k < tb->registered)
					tb->registered = k;
			}
			continue;
		}
		b = pool_alloc(&m->pool);
		assert(b != POOL_NONE);
		copies[(*n_copies)++] = (struct kv_copy){ .src = old, .dst = b };
		tb->blocks[k] = b;
		pool_decref(&m->pool, old);	/* others still hold it */
		m->cow_copies++;
		if (k < tb->registered)
			tb->registered = k;	/* the copy is not registered */
	}
	return 0;
}

/*
 * Registration goes block by block from the table's first unregistered
 * one and stops at the first block it cannot chain: block k registers
 * only as the child of block k-1 of the same table, registered.  When an
 * equal block (same parent, same tokens) is registered already, this
 * table stops there for now: the lookups find the first one, and the
 * blocks after this one could chain only from it, which this table does
 * not hold.  A later commit tries again (the twin may have been evicted).
 */
void kv_table_commit(struct kv_manager *m, uint32_t t, const int32_t *tokens,
		     uint32_t n_computed)
{
	struct kv_table *tb = open_table(m, t);
	struct block_pool *p = &m->pool;
	uint32_t bt = p->block_tokens;
	uint32_t full;

	if (!tb || !tokens)
		return;
	full = n_computed / bt;
	if (full > tb->count)
		full = tb->count;
	while (tb->registered < full) {
		uint32_t k = tb->registered;
		uint32_t b = tb->blocks[k];
		uint32_t parent = k ? tb->blocks[k - 1] : POOL_NONE;
		const int32_t *tk = &tokens[(size_t)k * bt];
		uint64_t h;

		if (p->b[b].registered) {
			/* Shared with a table that registered it (a fork's
			 * source): ours too when it hangs off our parent. */
			if (p->b[b].parent != parent ||
			    (k && p->b[b].parent_gen != p->b[parent].gen))
				return;
			tb->registered++;
			continue;
		}
		h = pool_hash(p, k ? p->b[parent].hash : POOL_ROOT_HASH, tk);
		if (pool_find(p, h, parent, tk) != POOL_NONE)
			return;		/* an equal block is registered */
		pool_register(p, b, h, parent, tk);
		tb->registered++;
	}
}

void kv_table_close(struct kv_manager *m, uint32_t t)
{
	struct kv_table *tb = open_table(m, t);

	if (!tb)
		return;
	/* Tail first: the head, released last, is the more recent in the
	 * LRU, so evictions take a sequence's tail before its head. */
	while (tb->count > 0)
		pool_decref(&m->pool, tb->blocks[--tb->count]);
	tb->registered = 0;
	tb->open = false;
}

const uint32_t *kv_table_blocks(const struct kv_manager *m, uint32_t t,
				uint32_t *n)
{
	if (t >= m->n_tables || !m->tables[t].open) {
		if (n)
			*n = 0;
		return NULL;
	}
	if (n)
		*n = m->tables[t].count;
	return m->tables[t].blocks;
}

bool kv_table_is_open(const struct kv_manager *m, uint32_t t)
{
	return t < m->n_tables && m->tables[t].open;
}

void kv_forget_cache(struct kv_manager *m)
{
	pool_forget(&m->pool);
	for (uint32_t t = 0; t < m->n_tables; t++)
		m->tables[t].registered = 0;
}

void kv_counts(const struct kv_manager *m, struct kv_counts *out)
{
	out->blocks = m->pool.n_blocks;
	out->used = m->pool.used;
	out->cached = m->pool.lru.n;
	out->peak_used = m->pool.peak_used;
	out->hit_tokens = m->hit_tokens;
	out->cow_copies = m->cow_copies;
	out->evictions = m->pool.evictions;
}

uint32_t kv_block_refs(const struct kv_manager *m, uint32_t b)
{
	return b < m->pool.n_blocks ? m->pool.b[b].refs : 0;
}
