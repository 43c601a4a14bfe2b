/*
 * request_pool.c - see request_pool.h.  The id set is linear probing with
 * backward-shift deletion (no tombstones), sized at twice the capacity so
 * probes stay short.
 */
#include "engine/request_pool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

/* Free a live request's text state (request_text.h fills it); idempotent.
 * The pool frees every member of a live request it gave out, its text
 * too, so that request_text.c is above the pool and the pool calls
 * nothing of it. */
static void live_text_release(struct live_request *lr)
{
	if (!lr->has_text)
		return;
	text_stream_release(&lr->text);
	free(lr->text_ends);
	lr->text_ends = NULL;
	lr->has_text = false;
}

static uint64_t id_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;	/* FNV-1a */

	while (*s)
		h = (h ^ (uint8_t)*s++) * 0x100000001b3ull;
	return h;
}

int request_pool_init(struct request_pool *pool, uint32_t capacity)
{
	uint32_t table = 16;

	memset(pool, 0, sizeof(*pool));
	while (table < capacity * 2)
		table *= 2;
	pool->items = calloc(capacity, sizeof(*pool->items));
	pool->free_handles = calloc(capacity, sizeof(*pool->free_handles));
	pool->id_table = calloc(table, sizeof(*pool->id_table));
	if (!pool->items || !pool->free_handles || !pool->id_table) {
		request_pool_release(pool);
		return -ENOMEM;
	}
	pool->capacity = capacity;
	pool->id_mask = table - 1;
	for (uint32_t i = 0; i < capacity; i++)
		pool->free_handles[i] = capacity - 1 - i;
	pool->n_free = capacity;
	return 0;
}

void request_pool_release(struct request_pool *pool)
{
	if (pool->items)
		for (uint32_t i = 0; i < pool->capacity; i++) {
			request_release(&pool->items[i].req);
			grammar_matcher_destroy(pool->items[i].grammar_check);
			free(pool->items[i].generated);
			free(pool->items[i].logprobs);
			live_text_release(&pool->items[i]);
		}
	free(pool->items);
	free(pool->free_handles);
	free(pool->id_table);
	memset(pool, 0, sizeof(*pool));
}

uint32_t request_pool_alloc(struct request_pool *pool)
{
	uint32_t h;

	if (!pool->n_free)
		return REQUEST_NONE;
	h = pool->free_handles[--pool->n_free];
	memset(&pool->items[h], 0, sizeof(pool->items[h]));
	pool->items[h].in_use = true;
	pool->items[h].slot = REQUEST_NONE;
	pool->n_live++;
	return h;
}

struct live_request *request_pool_get(struct request_pool *pool, uint32_t handle)
{
	if (handle >= pool->capacity || !pool->items[handle].in_use)
		return NULL;
	return &pool->items[handle];
}

uint32_t request_pool_find_id(const struct request_pool *pool, const char *id)
{
	uint32_t i = (uint32_t)id_hash(id) & pool->id_mask;

	for (; pool->id_table[i]; i = (i + 1) & pool->id_mask) {
		uint32_t h = pool->id_table[i] - 1;

		if (!strcmp(pool->items[h].req.id, id))
			return h;
	}
	return REQUEST_NONE;
}

void request_pool_add_id(struct request_pool *pool, uint32_t handle)
{
	uint32_t i = (uint32_t)id_hash(pool->items[handle].req.id) & pool->id_mask;

	while (pool->id_table[i])
		i = (i + 1) & pool->id_mask;
	pool->id_table[i] = handle + 1;
}

/* Remove handle from the id table, shifting later probes back. */
static void id_remove(struct request_pool *pool, uint32_t handle)
{
	uint32_t i = (uint32_t)id_hash(pool->items[handle].req.id) & pool->id_mask;
	uint32_t j;

	while (pool->id_table[i] && pool->id_table[i] != handle + 1)
		i = (i + 1) & pool->id_mask;
	if (!pool->id_table[i])
		return;
	pool->id_table[i] = 0;
	for (j = (i + 1) & pool->id_mask; pool->id_table[j];
	     j = (j + 1) & pool->id_mask) {
		uint32_t h = pool->id_table[j] - 1;
		uint32_t home = (uint32_t)id_hash(pool->items[h].req.id) & pool->id_mask;

		/* Move j back to the hole i unless its home lies in (i, j]. */
		if (((j - home) & pool->id_mask) >= ((j - i) & pool->id_mask)) {
			pool->id_table[i] = pool->id_table[j];
			pool->id_table[j] = 0;
			i = j;
		}
	}
}

void request_pool_free(struct request_pool *pool, uint32_t handle)
{
	struct live_request *lr = request_pool_get(pool, handle);

	if (!lr)
		return;
	if (lr->req.id)
		id_remove(pool, handle);
	request_release(&lr->req);
	grammar_matcher_destroy(lr->grammar_check);
	lr->grammar_check = NULL;
	free(lr->generated);
	lr->generated = NULL;
	free(lr->logprobs);
	lr->logprobs = NULL;
	live_text_release(lr);
	lr->in_use = false;
	pool->free_handles[pool->n_free++] = handle;
	pool->n_live--;
}

int request_pool_check(const struct request_pool *pool)
{
	uint32_t n_ids = 0, n_in_use = 0;

	for (uint32_t i = 0; i <= pool->id_mask; i++) {
		uint32_t h;

		if (!pool->id_table[i])
			continue;
		h = pool->id_table[i] - 1;
		if (h >= pool->capacity || !pool->items[h].in_use ||
		    !pool->items[h].req.id ||
		    request_pool_find_id(pool, pool->items[h].req.id) != h)
			return -EINVAL;
		n_ids++;
	}
	for (uint32_t h = 0; h < pool->capacity; h++)
		n_in_use += pool->items[h].in_use;
	if (n_in_use != pool->n_live || n_in_use + pool->n_free != pool->capacity ||
	    n_ids > n_in_use)
		return -EINVAL;
	return 0;
}
