/*
 * ref_kv.c - the naive model of the KV block bookkeeping (ref_kv.h):
 * arrays and linear scans, prefixes compared whole.
 */
#include "ref_kv.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct ref_block {
	uint32_t refs;
	bool reg;		/* registered */
	bool reach;		/* registered and its whole chain still there */
	uint64_t stamp;		/* when its last reference went */
	uint32_t plen;		/* the prefix it ends, when registered */
	int32_t *prefix;
};

struct ref_table {
	uint32_t *ids;
	uint32_t count, reg;
	bool open;
};

struct ref_kv {
	uint32_t n_blocks, bt, n_tables, max_blocks;
	struct ref_block *b;
	struct ref_table *t;
	uint64_t clock;
	struct ref_kv_counts c;
};

struct ref_kv *ref_kv_create(uint32_t n_blocks, uint32_t block_tokens,
			     uint32_t n_tables, uint32_t max_blocks)
{
	struct ref_kv *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->n_blocks = n_blocks;
	r->bt = block_tokens;
	r->n_tables = n_tables;
	r->max_blocks = max_blocks;
	r->b = calloc(n_blocks, sizeof(*r->b));
	r->t = calloc(n_tables, sizeof(*r->t));
	if (!r->b || !r->t) {
		ref_kv_destroy(r);
		return NULL;
	}
	for (uint32_t i = 0; i < n_blocks; i++)
		if (!(r->b[i].prefix = calloc((size_t)max_blocks * block_tokens,
					      sizeof(int32_t)))) {
			ref_kv_destroy(r);
			return NULL;
		}
	for (uint32_t i = 0; i < n_tables; i++)
		if (!(r->t[i].ids = calloc(max_blocks, sizeof(uint32_t)))) {
			ref_kv_destroy(r);
			return NULL;
		}
	return r;
}

void ref_kv_destroy(struct ref_kv *r)
{
	if (!r)
		return;
	for (uint32_t i = 0; r->b && i < r->n_blocks; i++)
		free(r->b[i].prefix);
	for (uint32_t i = 0; r->t && i < r->n_tables; i++)
		free(r->t[i].ids);
	free(r->b);
	free(r->t);
	free(r);
}

uint32_t ref_kv_available(const struct ref_kv *r)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < r->n_blocks; i++)
		n += r->b[i].refs == 0;
	return n;
}

static void note_peak(struct ref_kv *r)
{
	uint32_t used = r->n_blocks - ref_kv_available(r);

	if (used > r->c.peak_used)
		r->c.peak_used = used;
}

/* The reachable registered block ending prefix tokens[0 .. len). */
static uint32_t find(const struct ref_kv *r, const int32_t *tokens,
		     uint32_t len)
{
	for (uint32_t i = 0; i < r->n_blocks; i++) {
		const struct ref_block *x = &r->b[i];

		if (x->reg && x->reach && x->plen == len &&
		    !memcmp(x->prefix, tokens, len * sizeof(*tokens)))
			return i;
	}
	return UINT32_MAX;
}

static void unreg(struct ref_kv *r, uint32_t i)
{
	struct ref_block *x = &r->b[i];

	if (x->reach)
		for (uint32_t j = 0; j < r->n_blocks; j++) {
			struct ref_block *y = &r->b[j];

			if (y->reg && y->plen > x->plen &&
			    !memcmp(y->prefix, x->prefix,
				    x->plen * sizeof(int32_t)))
				y->reach = false;
		}
	x->reg = x->reach = false;
}

static uint32_t alloc(struct ref_kv *r)
{
	uint32_t best = UINT32_MAX;

	for (uint32_t i = 0; i < r->n_blocks; i++)
		if (r->b[i].refs == 0 && !r->b[i].reg) {
			best = i;
			goto got;
		}
	for (uint32_t i = 0; i < r->n_blocks; i++)
		if (r->b[i].refs == 0 &&
		    (best == UINT32_MAX || r->b[i].stamp < r->b[best].stamp))
			best = i;
	if (best == UINT32_MAX)
		return best;
	unreg(r, best);
	r->c.evictions++;
got:
	r->b[best].refs = 1;
	note_peak(r);
	return best;
}

static void decref(struct ref_kv *r, uint32_t i)
{
	if (--r->b[i].refs == 0 && r->b[i].reg)
		r->b[i].stamp = ++r->clock;
}

static uint32_t blocks_for(const struct ref_kv *r, uint32_t positions)
{
	return (positions + r->bt - 1) / r->bt;
}

uint32_t ref_kv_lookup(const struct ref_kv *r, const int32_t *tokens,
		       uint32_t n, uint32_t max_tokens)
{
	uint32_t lim = (n < max_tokens ? n : max_tokens) / r->bt, k;

	if (lim > r->max_blocks)
		lim = r->max_blocks;
	for (k = 0; k < lim; k++)
		if (find(r, tokens, (k + 1) * r->bt) == UINT32_MAX)
			break;
	return k * r->bt;
}

int ref_kv_open(struct ref_kv *r, uint32_t t, const int32_t *tokens,
		uint32_t n, uint32_t max_hit, uint32_t reserve, uint32_t *hit)
{
	struct ref_table *tb;
	uint32_t hb, need, avail;

	if (t >= r->n_tables || r->t[t].open)
		return -EINVAL;
	tb = &r->t[t];
	need = blocks_for(r, reserve);
	if (need > r->max_blocks)
		return -EINVAL;
	hb = ref_kv_lookup(r, tokens, n, max_hit) / r->bt;
	if (need < hb)
		need = hb;
	avail = ref_kv_available(r);
	for (uint32_t k = 0; k < hb; k++)
		avail -= r->b[find(r, tokens, (k + 1) * r->bt)].refs == 0;
	if (need - hb > avail)
		return -ENOSPC;
	for (uint32_t k = 0; k < hb; k++) {
		uint32_t i = find(r, tokens, (k + 1) * r->bt);

		r->b[i].refs++;
		tb->ids[k] = i;
	}
	note_peak(r);
	for (uint32_t k = hb; k < need; k++)
		tb->ids[k] = alloc(r);
	tb->count = need;
	tb->reg = hb;
	tb->open = true;
	r->c.hit_tokens += hb * r->bt;
	*hit = hb * r->bt;
	return 0;
}

int ref_kv_fork(struct ref_kv *r, uint32_t dst, uint32_t src,
		uint32_t n_tokens)
{
	uint32_t nb = blocks_for(r, n_tokens);
	struct ref_table *d, *s;

	if (dst >= r->n_tables || src >= r->n_tables || dst == src ||
	    r->t[dst].open || !r->t[src].open || nb > r->t[src].count)
		return -EINVAL;
	d = &r->t[dst];
	s = &r->t[src];
	for (uint32_t k = 0; k < nb; k++) {
		d->ids[k] = s->ids[k];
		r->b[s->ids[k]].refs++;
	}
	d->count = nb;
	d->reg = s->reg < n_tokens / r->bt ? s->reg : n_tokens / r->bt;
	d->open = true;
	return 0;
}

int ref_kv_grow(struct ref_kv *r, uint32_t t, uint32_t positions)
{
	uint32_t need = blocks_for(r, positions);
	struct ref_table *tb;

	if (t >= r->n_tables || !r->t[t].open || need > r->max_blocks)
		return -EINVAL;
	tb = &r->t[t];
	if (need <= tb->count)
		return 0;
	if (need - tb->count > ref_kv_available(r))
		return -ENOSPC;
	while (tb->count < need)
		tb->ids[tb->count++] = alloc(r);
	return 0;
}

int ref_kv_make_writable(struct ref_kv *r, uint32_t t, uint32_t from,
			 uint32_t to, uint32_t *n_copies)
{
	struct ref_table *tb;
	uint32_t shared = 0;

	if (t >= r->n_tables || !r->t[t].open || to > r->t[t].count * r->bt)
		return -EINVAL;
	if (from >= to)
		return 0;
	tb = &r->t[t];
	for (uint32_t k = from / r->bt; k < blocks_for(r, to); k++)
		shared += r->b[tb->ids[k]].refs > 1;
	if (shared > ref_kv_available(r))
		return -ENOSPC;
	for (uint32_t k = from / r->bt; k < blocks_for(r, to); k++) {
		if (r->b[tb->ids[k]].refs < 2) {
			/* Rewritten in place: no longer what it recorded. */
			if (r->b[tb->ids[k]].reg) {
				unreg(r, tb->ids[k]);
				if (k < tb->reg)
					tb->reg = k;
			}
			continue;
		}
		r->b[tb->ids[k]].refs--;
		tb->ids[k] = alloc(r);
		(*n_copies)++;
		r->c.cow_copies++;
		if (k < tb->reg)
			tb->reg = k;
	}
	return 0;
}

void ref_kv_commit(struct ref_kv *r, uint32_t t, const int32_t *tokens,
		   uint32_t n_computed)
{
	struct ref_table *tb = &r->t[t];
	uint32_t full = n_computed / r->bt;

	if (full > tb->count)
		full = tb->count;
	for (; tb->reg < full; tb->reg++) {
		uint32_t len = (tb->reg + 1) * r->bt;
		struct ref_block *x = &r->b[tb->ids[tb->reg]];

		if (x->reg) {
			/* Ours when it is the live block of our prefix. */
			if (!x->reach || x->plen != len ||
			    memcmp(x->prefix, tokens, len * sizeof(*tokens)))
				return;
			continue;
		}
		if (find(r, tokens, len) != UINT32_MAX)
			return;
		x->reg = x->reach = true;
		x->plen = len;
		memcpy(x->prefix, tokens, len * sizeof(*tokens));
	}
}

void ref_kv_close(struct ref_kv *r, uint32_t t)
{
	struct ref_table *tb = &r->t[t];

	if (t >= r->n_tables || !tb->open)
		return;
	while (tb->count)
		decref(r, tb->ids[--tb->count]);
	tb->reg = 0;
	tb->open = false;
}

void ref_kv_forget(struct ref_kv *r)
{
	for (uint32_t i = 0; i < r->n_blocks; i++)
		r->b[i].reg = r->b[i].reach = false;
	for (uint32_t t = 0; t < r->n_tables; t++)
		r->t[t].reg = 0;
}

void ref_kv_counts(const struct ref_kv *r, struct ref_kv_counts *out)
{
	*out = r->c;
	out->used = r->n_blocks - ref_kv_available(r);
	out->cached = 0;
	for (uint32_t i = 0; i < r->n_blocks; i++)
		out->cached += r->b[i].refs == 0 && r->b[i].reg;
}
