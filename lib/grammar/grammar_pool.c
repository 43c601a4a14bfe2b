/*
 * grammar_pool.c - see grammar_pool.h.  A list: a worker holds at most
 * its shard's slots' grammars and max_idle more, so a scan is enough.
 */
#include "grammar/grammar_pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pool_item {
	struct grammar_pool_entry e;	/* first: entries are items */
	char *source;
	uint32_t len;
	uint32_t refs;
	uint64_t last_put;		/* when it went idle (the pool's clock) */
	struct pool_item *next;
};

struct grammar_pool {
	uint32_t n_vocab;
	size_t cache_bytes;
	uint32_t max_idle, n_idle;
	uint64_t clock;
	struct pool_item *items;
};

struct grammar_pool *grammar_pool_create(uint32_t n_vocab, size_t cache_bytes,
					 uint32_t max_idle)
{
	struct grammar_pool *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->n_vocab = n_vocab;
	p->cache_bytes = cache_bytes;
	p->max_idle = max_idle;
	return p;
}

static void item_free(struct pool_item *it)
{
	grammar_mask_cache_destroy(it->e.cache);
	grammar_destroy((struct grammar *)it->e.grammar);
	free(it->source);
	free(it);
}

void grammar_pool_destroy(struct grammar_pool *p)
{
	if (!p)
		return;
	while (p->items) {
		struct pool_item *it = p->items;

		p->items = it->next;
		item_free(it);
	}
	free(p);
}

const struct grammar_pool_entry *grammar_pool_get(struct grammar_pool *p,
						  const char *source, uint32_t len,
						  char *err, size_t err_len)
{
	struct pool_item *it;

	for (it = p->items; it; it = it->next)
		if (it->len == len && !memcmp(it->source, source, len)) {
			if (!it->refs++)
				p->n_idle--;
			return &it->e;
		}
	it = calloc(1, sizeof(*it));
	if (!it || !(it->source = malloc(len ? len : 1))) {
		free(it);
		snprintf(err, err_len, "out of memory");
		return NULL;
	}
	memcpy(it->source, source, len);
	it->len = len;
	it->e.grammar = grammar_parse(it->source, len, err, err_len);
	if (it->e.grammar)
		it->e.cache = grammar_mask_cache_create(p->n_vocab, p->cache_bytes);
	if (!it->e.grammar || !it->e.cache) {
		if (it->e.grammar)
			snprintf(err, err_len, "out of memory");
		item_free(it);
		return NULL;
	}
	it->refs = 1;
	it->next = p->items;
	p->items = it;
	return &it->e;
}

void grammar_pool_put(struct grammar_pool *p, const struct grammar_pool_entry *e)
{
	struct pool_item *it = (struct pool_item *)e, **pp, **oldest = NULL;

	if (!e || --it->refs)
		return;
	it->last_put = ++p->clock;
	if (++p->n_idle <= p->max_idle)
		return;
	/* too many idle: the least recently used goes */
	for (pp = &p->items; *pp; pp = &(*pp)->next)
		if (!(*pp)->refs && (!oldest || (*pp)->last_put < (*oldest)->last_put))
			oldest = pp;
	it = *oldest;
	*oldest = it->next;
	p->n_idle--;
	item_free(it);
}
