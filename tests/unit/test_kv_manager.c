/*
 * test_kv_manager.c - kv/kv_manager.c (and kv/block_pool.c under it)
 * against the naive model tools/refdecode/ref_kv.c, with oracles of its
 * own (docs/DESIGN.md 11.1).
 *
 * The harness drives the manager and the model with the same calls and
 * after each one checks: the same return codes, hit lengths, counts and
 * kv_available(); every block's reference count equal to the number of
 * table entries that name it, no block twice in one table; and the
 * content oracle.  The test keeps a simulated pool, the token "written"
 * at every (block, offset), and writes a table's positions only after
 * kv_table_make_writable() and its copies, as a worker would; every open
 * table must then read its own tokens back through its block table at
 * each computed position.  A fork that aliases a writable tail, a hit on
 * a block with other tokens, an eviction of a referenced block all show
 * up there.
 *
 * The random tests print their seed; SEED=<n> replays a run.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kv/kv_manager.h"
#include "tests/unit/test_rng.h"
#include "tools/refdecode/ref_kv.h"

#define MAX_T 8u		/* tables at most */
#define MAX_CAP 64u		/* positions a table may hold at most */
#define ALPHABET 4		/* few token values: equal blocks are common */
#define N_BASES 4u		/* shared sequences the prompts start with */

/* ------------------------------------------------------------------------
 * The harness: manager, model, simulated pool, each table's sequence
 * ---------------------------------------------------------------------- */

struct h {
	struct kv_manager *m;
	struct ref_kv *r;
	uint32_t nb, bt, nt, mb, cap;
	int32_t *pool;			/* nb * bt tokens "written", or -1 */
	int32_t seq[MAX_T][MAX_CAP];	/* each table's sequence */
	uint32_t computed[MAX_T];
	bool open[MAX_T];
	int32_t base[N_BASES][MAX_CAP];
	char ctx[96];			/* the run and op, for messages */
};

static void h_init(struct h *h, uint32_t nb, uint32_t bt, uint32_t nt,
		   uint32_t mb, uint64_t mask)
{
	memset(h, 0, sizeof(*h));
	assert_true(nt <= MAX_T && mb * bt <= MAX_CAP);
	h->nb = nb;
	h->bt = bt;
	h->nt = nt;
	h->mb = mb;
	h->cap = mb * bt;
	h->m = kv_manager_create(nb, bt, nt, mb, 42, mask);
	h->r = ref_kv_create(nb, bt, nt, mb);
	h->pool = malloc((size_t)nb * bt * sizeof(*h->pool));
	assert_non_null(h->m);
	assert_non_null(h->r);
	assert_non_null(h->pool);
	for (uint32_t i = 0; i < nb * bt; i++)
		h->pool[i] = -1;
}

/* What the random runs met, to show they reach the cases that matter. */
static struct {
	uint64_t enospc, hit_tokens, evictions, copies;
} seen;

static void h_fini(struct h *h)
{
	struct kv_counts c;

	kv_counts(h->m, &c);
	seen.hit_tokens += c.hit_tokens;
	seen.evictions += c.evictions;
	seen.copies += c.cow_copies;
	kv_manager_destroy(h->m);
	ref_kv_destroy(h->r);
	free(h->pool);
}

#define H_FAIL(h, ...) do { \
	char msg_[160]; \
	snprintf(msg_, sizeof(msg_), __VA_ARGS__); \
	fail_msg("%s: %s (SEED=%llu)", (h)->ctx, msg_, test_seed); \
} while (0)

/* The token at position p of table t as its blocks hold it. */
static int32_t h_read(const struct h *h, uint32_t t, uint32_t p)
{
	uint32_t n;
	const uint32_t *b = kv_table_blocks(h->m, t, &n);

	if (!b || p / h->bt >= n)
		return -2;
	return h->pool[(size_t)b[p / h->bt] * h->bt + p % h->bt];
}

/* Every oracle, after every call. */
static void h_check(struct h *h)
{
	struct kv_counts c;
	struct ref_kv_counts rc;
	uint32_t refs[256] = { 0 }, used = 0;

	assert_true(h->nb <= 256);
	kv_counts(h->m, &c);
	ref_kv_counts(h->r, &rc);
#define SAME(f) if (c.f != rc.f) \
	H_FAIL(h, "counts: " #f " %llu, the model %llu", \
	       (unsigned long long)c.f, (unsigned long long)rc.f)
	SAME(used); SAME(cached); SAME(peak_used);
	SAME(hit_tokens); SAME(cow_copies); SAME(evictions);
#undef SAME
	assert_int_equal(c.blocks, h->nb);
	if (kv_available(h->m) != ref_kv_available(h->r))
		H_FAIL(h, "available %u, the model %u", kv_available(h->m),
		       ref_kv_available(h->r));
	for (uint32_t t = 0; t < h->nt; t++) {
		uint32_t n;
		const uint32_t *b = kv_table_blocks(h->m, t, &n);

		if (kv_table_is_open(h->m, t) != h->open[t] ||
		    (b != NULL) != h->open[t])
			H_FAIL(h, "table %u open %d, want %d", t,
			       kv_table_is_open(h->m, t), h->open[t]);
		if (!b)
			continue;
		for (uint32_t i = 0; i < n; i++) {
			if (b[i] >= h->nb)
				H_FAIL(h, "table %u block %u is %u", t, i, b[i]);
			refs[b[i]]++;
			for (uint32_t j = 0; j < i; j++)
				if (b[j] == b[i])
					H_FAIL(h, "table %u holds block %u "
					       "twice", t, b[i]);
		}
		if (h->computed[t] > n * h->bt)
			H_FAIL(h, "table %u computed %u past capacity %u", t,
			       h->computed[t], n * h->bt);
		for (uint32_t p = 0; p < h->computed[t]; p++)
			if (h_read(h, t, p) != h->seq[t][p])
				H_FAIL(h, "table %u position %u reads %d, "
				       "its token is %d", t, p, h_read(h, t, p),
				       h->seq[t][p]);
	}
	for (uint32_t b = 0; b < h->nb; b++) {
		if (kv_block_refs(h->m, b) != refs[b])
			H_FAIL(h, "block %u has %u references, tables hold %u",
			       b, kv_block_refs(h->m, b), refs[b]);
		used += refs[b] > 0;
	}
	if (used != c.used || c.used + kv_available(h->m) != h->nb ||
	    c.cached > kv_available(h->m))
		H_FAIL(h, "used %u (blocks referenced %u) + available %u != %u"
		       " or cached %u", c.used, used, kv_available(h->m),
		       h->nb, c.cached);
}

static void h_rc(struct h *h, const char *what, int got, int want)
{
	seen.enospc += got == -ENOSPC;
	if (got != want)
		H_FAIL(h, "%s returned %d, the model %d", what, got, want);
}

/* Open table t on seq[t][0 .. n); computed is then the hit. */
static int h_open(struct h *h, uint32_t t, uint32_t n, uint32_t max_hit,
		  uint32_t reserve)
{
	uint32_t hit = 7, rhit = 7;
	int rc = kv_table_open(h->m, t, h->seq[t], n, max_hit, reserve, &hit);
	int rr = ref_kv_open(h->r, t, h->seq[t], n, max_hit, reserve, &rhit);

	h_rc(h, "open", rc, rr);
	if (rc == 0) {
		if (hit != rhit)
			H_FAIL(h, "open: hit %u, the model %u", hit, rhit);
		h->open[t] = true;
		h->computed[t] = hit;
	}
	h_check(h);
	return rc;
}

/* Make [computed, to) writable, do the copies, write, commit. */
static int h_commit(struct h *h, uint32_t t, uint32_t to, uint32_t *copies_out)
{
	struct kv_copy copies[MAX_CAP + 2];
	uint32_t from = h->computed[t], n = 0, rn = 0, bt = h->bt;
	int rc, rr;

	rc = kv_table_make_writable(h->m, t, from, to, copies, &n);
	rr = ref_kv_make_writable(h->r, t, from, to, &rn);
	h_rc(h, "make_writable", rc, rr);
	if (n != rn)
		H_FAIL(h, "make_writable: %u copies, the model %u", n, rn);
	if (n > (to - from) / bt + 2)
		H_FAIL(h, "make_writable: %u copies, room for %u", n,
		       (to - from) / bt + 2);
	if (copies_out)
		*copies_out = n;
	if (rc)
		return rc;
	for (uint32_t i = 0; i < n; i++) {
		if (kv_block_refs(h->m, copies[i].dst) != 1 ||
		    kv_block_refs(h->m, copies[i].src) == 0)
			H_FAIL(h, "copy %u -> %u: references %u, %u",
			       copies[i].src, copies[i].dst,
			       kv_block_refs(h->m, copies[i].src),
			       kv_block_refs(h->m, copies[i].dst));
		memcpy(&h->pool[(size_t)copies[i].dst * bt],
		       &h->pool[(size_t)copies[i].src * bt],
		       bt * sizeof(*h->pool));
	}
	/* The worker's step: the tokens' KV lands in the table's blocks. */
	for (uint32_t p = from; p < to; p++) {
		uint32_t nblk;
		const uint32_t *b = kv_table_blocks(h->m, t, &nblk);

		h->pool[(size_t)b[p / bt] * bt + p % bt] = h->seq[t][p];
	}
	h->computed[t] = to;
	kv_table_commit(h->m, t, h->seq[t], to);
	ref_kv_commit(h->r, t, h->seq[t], to);
	h_check(h);
	return 0;
}

static void h_close(struct h *h, uint32_t t)
{
	kv_table_close(h->m, t);
	ref_kv_close(h->r, t);
	h->open[t] = false;
	h->computed[t] = 0;
	h_check(h);
}

static int h_fork(struct h *h, uint32_t dst, uint32_t src, uint32_t n_tokens)
{
	int rc = kv_table_fork(h->m, dst, src, n_tokens);

	h_rc(h, "fork", rc, ref_kv_fork(h->r, dst, src, n_tokens));
	if (rc == 0) {
		/* dst shares what src computed up to n_tokens; after that
		 * its own sequence (another sample, say) goes elsewhere. */
		h->open[dst] = true;
		h->computed[dst] = h->computed[src] < n_tokens ?
				   h->computed[src] : n_tokens;
		memcpy(h->seq[dst], h->seq[src], sizeof(h->seq[dst]));
		for (uint32_t p = h->computed[dst]; p < MAX_CAP; p++)
			h->seq[dst][p] = (h->seq[src][p] + 1) % ALPHABET;
	}
	h_check(h);
	return rc;
}

static int h_grow(struct h *h, uint32_t t, uint32_t positions)
{
	int rc = kv_table_grow(h->m, t, positions);

	h_rc(h, "grow", rc, ref_kv_grow(h->r, t, positions));
	h_check(h);
	return rc;
}

static void h_forget(struct h *h)
{
	kv_forget_cache(h->m);
	ref_kv_forget(h->r);
	h_check(h);
}

static uint32_t h_capacity(const struct h *h, uint32_t t)
{
	uint32_t n;

	kv_table_blocks(h->m, t, &n);
	return n * h->bt;
}

/* ------------------------------------------------------------------------
 * Random runs
 * ---------------------------------------------------------------------- */

static uint32_t pick(struct rng *r, const struct h *h, bool open)
{
	uint32_t start = rng_below(r, h->nt);

	for (uint32_t i = 0; i < h->nt; i++) {
		uint32_t t = (start + i) % h->nt;

		if (h->open[t] == open)
			return t;
	}
	return UINT32_MAX;
}

/* A sequence: a shared base's prefix, or (weak) none, then noise. */
static void draw_seq(struct rng *r, struct h *h, int32_t *seq, bool varied)
{
	uint32_t b = rng_below(r, N_BASES);
	uint32_t keep = rng_below(r, 3) ? rng_below(r, h->cap + 1) : h->cap;

	if (varied && rng_below(r, 2))
		keep = 0;	/* a fresh sequence: weak hashes collide */
	for (uint32_t p = 0; p < MAX_CAP; p++)
		seq[p] = p < keep ? h->base[b][p] :
			 (int32_t)rng_below(r, ALPHABET);
}

static void random_op(struct rng *r, struct h *h, bool varied)
{
	uint32_t op = rng_below(r, 100), t, s;

	if (op < 25) {			/* open */
		uint32_t n, max_hit, reserve;

		if ((t = pick(r, h, false)) == UINT32_MAX)
			return;
		draw_seq(r, h, h->seq[t], varied);
		n = rng_below(r, h->cap + 1);
		max_hit = rng_below(r, 2) ? (n ? n - 1 : 0) : rng_below(r, n + 1);
		reserve = rng_below(r, h->cap + 1);
		if (rng_below(r, 20) == 0)
			reserve = h->cap + h->bt;	/* past max_blocks */
		snprintf(h->ctx + 40, sizeof(h->ctx) - 40, "open %u n %u", t, n);
		h_open(h, t, n, max_hit, reserve);
	} else if (op < 55) {		/* write and commit */
		uint32_t cap;

		if ((t = pick(r, h, true)) == UINT32_MAX)
			return;
		cap = h_capacity(h, t);
		if (cap <= h->computed[t])
			return;
		snprintf(h->ctx + 40, sizeof(h->ctx) - 40, "commit %u", t);
		h_commit(h, t, h->computed[t] + 1 +
			 rng_below(r, cap - h->computed[t]), NULL);
	} else if (op < 65) {		/* grow */
		if ((t = pick(r, h, true)) == UINT32_MAX)
			return;
		snprintf(h->ctx + 40, sizeof(h->ctx) - 40, "grow %u", t);
		h_grow(h, t, rng_below(r, h->cap + h->bt + 1));
	} else if (op < 75) {		/* fork */
		if ((s = pick(r, h, true)) == UINT32_MAX ||
		    (t = pick(r, h, false)) == UINT32_MAX)
			return;
		snprintf(h->ctx + 40, sizeof(h->ctx) - 40, "fork %u<-%u", t, s);
		h_fork(h, t, s, rng_below(r, h_capacity(h, s) + 1));
	} else if (op < 94) {		/* close */
		if ((t = pick(r, h, true)) == UINT32_MAX)
			return;
		snprintf(h->ctx + 40, sizeof(h->ctx) - 40, "close %u", t);
		h_close(h, t);
	} else if (op < 99) {		/* lookup: changes nothing */
		int32_t seq[MAX_CAP];
		uint32_t n = rng_below(r, h->cap + 1), mx = rng_below(r, 80);
		uint32_t got, want;

		draw_seq(r, h, seq, varied);
		got = kv_lookup(h->m, seq, n, mx);
		want = ref_kv_lookup(h->r, seq, n, mx);
		if (got != want)
			H_FAIL(h, "lookup %u, the model %u", got, want);
		h_check(h);
	} else {
		snprintf(h->ctx + 40, sizeof(h->ctx) - 40, "forget");
		h_forget(h);
	}
}

static void random_runs(uint64_t test_id, uint32_t runs, uint32_t ops,
			uint64_t mask, bool varied)
{
	struct rng r = rng_for(test_id);
	struct h h;

	for (uint32_t run = 0; run < runs; run++) {
		uint32_t bt = 1 + rng_below(&r, 4), mb = 2 + rng_below(&r, 5);
		uint32_t nt = 2 + rng_below(&r, 5);
		uint32_t nb = 2 + rng_below(&r, nt * mb);

		h_init(&h, nb, bt, nt, mb, mask);
		for (uint32_t b = 0; b < N_BASES; b++)
			for (uint32_t p = 0; p < MAX_CAP; p++)
				h.base[b][p] = (int32_t)rng_below(&r, ALPHABET);
		for (uint32_t op = 0; op < ops; op++) {
			snprintf(h.ctx, 40, "run %u op %u", run, op);
			memset(h.ctx + strlen(h.ctx), ' ', 40 - strlen(h.ctx));
			random_op(&r, &h, varied);
		}
		h_fini(&h);
	}
	printf("kv_manager: %u runs x %u ops, hash_mask %#llx: %llu -ENOSPC, "
	       "%llu hit tokens, %llu evictions, %llu copies\n", runs, ops,
	       (unsigned long long)mask, (unsigned long long)seen.enospc,
	       (unsigned long long)seen.hit_tokens,
	       (unsigned long long)seen.evictions,
	       (unsigned long long)seen.copies);
	memset(&seen, 0, sizeof(seen));
}

static void test_against_model(void **state)
{
	random_runs(1, 1000, 400, UINT64_MAX, false);
}

/* Four hash values: nearly every lookup meets blocks of other content
 * under its hash; the parent and token checks must turn them down. */
static void test_weak_hash(void **state)
{
	random_runs(2, 500, 400, 0x3, true);
	random_runs(3, 200, 400, 0, true);	/* one hash for all */
}

/* ------------------------------------------------------------------------
 * The classic bugs, as short sequences
 * ---------------------------------------------------------------------- */

static void set_seq(struct h *h, uint32_t t, const int32_t *tok, uint32_t n)
{
	for (uint32_t p = 0; p < MAX_CAP; p++)
		h->seq[t][p] = p < n ? tok[p] : (int32_t)(100 + t);
}

/* A copy-on-write whose allocation fails must lose no reference and
 * change no table; once a block is free the same call succeeds. */
static void test_cow_failure_keeps_references(void **state)
{
	static const int32_t a[] = { 1, 2, 3, 4, 5, 6 };
	struct kv_copy copies[4] = { { 77, 77 }, { 77, 77 }, { 77, 77 },
				     { 77, 77 } };
	uint32_t n_copies = 0, n, before[2];
	const uint32_t *b;
	struct h h;

	h_init(&h, 4, 4, 3, 4, UINT64_MAX);
	snprintf(h.ctx, sizeof(h.ctx), "cow failure");
	set_seq(&h, 0, a, 6);
	assert_int_equal(h_open(&h, 0, 6, 5, 8), 0);
	assert_int_equal(h_commit(&h, 0, 6, NULL), 0);
	assert_int_equal(h_fork(&h, 1, 0, 8), 0);
	set_seq(&h, 2, a, 0);
	assert_int_equal(h_open(&h, 2, 0, 0, 8), 0);	/* the pool is full */
	assert_int_equal(kv_available(h.m), 0);
	b = kv_table_blocks(h.m, 1, &n);
	assert_int_equal(n, 2);
	memcpy(before, b, sizeof(before));
	assert_int_equal(kv_block_refs(h.m, before[1]), 2);

	assert_int_equal(kv_table_make_writable(h.m, 1, 6, 8, copies, &n_copies),
			 -ENOSPC);
	assert_int_equal(n_copies, 0);
	assert_int_equal(copies[0].src, 77);		/* nothing written */
	b = kv_table_blocks(h.m, 1, &n);
	assert_int_equal(n, 2);
	assert_memory_equal(b, before, sizeof(before));
	assert_int_equal(kv_block_refs(h.m, before[0]), 2);
	assert_int_equal(kv_block_refs(h.m, before[1]), 2);
	ref_kv_make_writable(h.r, 1, 6, 8, &n_copies);	/* keep in step */
	h_check(&h);

	h_close(&h, 2);
	assert_int_equal(kv_table_make_writable(h.m, 1, 6, 8, copies, &n_copies),
			 0);
	assert_int_equal(n_copies, 1);
	assert_int_equal(copies[0].src, before[1]);
	assert_int_equal(kv_block_refs(h.m, before[1]), 1);
	assert_int_equal(kv_block_refs(h.m, copies[0].dst), 1);
	assert_int_equal(kv_table_blocks(h.m, 1, &n)[1], copies[0].dst);
	h_fini(&h);
}

/* A fork shares a partial tail block: a write through one table must not
 * show in the other, and the last sharer writes in place. */
static void test_fork_does_not_alias_tail(void **state)
{
	static const int32_t a[] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	static const int32_t b[] = { 1, 2, 3, 4, 5, 6, 9, 9 };
	uint32_t n_copies;
	struct h h;

	h_init(&h, 8, 4, 2, 2, UINT64_MAX);
	snprintf(h.ctx, sizeof(h.ctx), "fork tail");
	set_seq(&h, 0, a, 8);
	assert_int_equal(h_open(&h, 0, 6, 5, 8), 0);
	assert_int_equal(h_commit(&h, 0, 6, &n_copies), 0);
	assert_int_equal(n_copies, 0);			/* nothing shared */
	assert_int_equal(h_fork(&h, 1, 0, 8), 0);
	memcpy(h.seq[1], b, sizeof(b));			/* another sample */
	assert_int_equal(h_commit(&h, 1, 8, &n_copies), 0);
	assert_int_equal(n_copies, 1);			/* the tail only */
	assert_int_equal(h_read(&h, 0, 6), -1);		/* not written */
	assert_int_equal(h_read(&h, 1, 6), 9);
	/* Table 0 is now its tail's last holder: in place, no copy. */
	assert_int_equal(h_commit(&h, 0, 8, &n_copies), 0);
	assert_int_equal(n_copies, 0);
	assert_int_equal(h_read(&h, 0, 7), 8);
	assert_int_equal(h_read(&h, 1, 7), 9);
	h_fini(&h);
}

/* LRU order: a closed sequence's tail goes before its head, a hit block
 * leaves the LRU (and comes back as the most recent), a referenced block
 * is never taken. */
static void test_eviction_order(void **state)
{
	static const int32_t a[] = { 1, 1, 2, 2, 3, 3 };
	static const int32_t b[] = { 5, 5, 6, 6, 7, 7 };
	struct kv_counts c;
	struct h h;

	h_init(&h, 6, 2, 4, 3, UINT64_MAX);
	snprintf(h.ctx, sizeof(h.ctx), "eviction order");
	set_seq(&h, 0, a, 6);
	set_seq(&h, 1, b, 6);
	assert_int_equal(h_open(&h, 0, 6, 6, 6), 0);
	assert_int_equal(h_commit(&h, 0, 6, NULL), 0);
	h_close(&h, 0);				/* LRU: a2 a1 a0 */
	assert_int_equal(h_open(&h, 1, 6, 6, 6), 0);
	assert_int_equal(h.computed[1], 0);
	assert_int_equal(h_commit(&h, 1, 6, NULL), 0);
	h_close(&h, 1);				/* a2 a1 a0 b2 b1 b0 */
	kv_counts(h.m, &c);
	assert_int_equal(c.cached, 6);
	assert_int_equal(c.evictions, 0);

	assert_int_equal(h_open(&h, 0, 6, 4, 4), 0);	/* hits a0 a1 */
	assert_int_equal(h.computed[0], 4);
	kv_counts(h.m, &c);
	assert_int_equal(c.cached, 4);
	h_close(&h, 0);				/* a2 b2 b1 b0 a1 a0 */
	assert_int_equal(h_open(&h, 1, 6, 2, 2), 0);	/* holds b0 */
	assert_int_equal(h.computed[1], 2);		/* a2 b2 b1 a1 a0 */

	set_seq(&h, 3, a, 0);
	assert_int_equal(h_open(&h, 3, 0, 0, 2), 0);	/* evicts a2 */
	assert_int_equal(kv_lookup(h.m, a, 6, 6), 4);
	assert_int_equal(kv_lookup(h.m, b, 6, 6), 6);
	assert_int_equal(h_grow(&h, 3, 4), 0);		/* b2 */
	assert_int_equal(kv_lookup(h.m, b, 6, 6), 4);
	assert_int_equal(h_grow(&h, 3, 6), 0);		/* b1 */
	assert_int_equal(kv_lookup(h.m, b, 6, 6), 2);
	assert_int_equal(kv_lookup(h.m, a, 6, 6), 4);
	set_seq(&h, 2, a, 0);
	assert_int_equal(h_open(&h, 2, 0, 0, 2), 0);	/* a1 */
	assert_int_equal(kv_lookup(h.m, a, 6, 6), 2);
	set_seq(&h, 0, b, 0);
	assert_int_equal(h_open(&h, 0, 0, 0, 2), 0);	/* a0 */
	assert_int_equal(kv_lookup(h.m, a, 6, 6), 0);
	/* Only b0 is left cached-or-free, and table 1 holds it. */
	assert_int_equal(kv_available(h.m), 0);
	assert_int_equal(h_grow(&h, 1, 4), -ENOSPC);
	assert_int_equal(kv_lookup(h.m, b, 6, 6), 2);
	kv_counts(h.m, &c);
	assert_int_equal(c.evictions, 5);
	h_fini(&h);
}

/*
 * A block rewritten in place leaves the hash map, and the blocks chained
 * from it must go with it: with every hash equal, the old child would
 * otherwise hang off the new content of its parent block and hand out
 * KV computed after other tokens.
 */
static void test_rewritten_parent_orphans_children(void **state)
{
	static const int32_t a[] = { 1, 1, 2, 2 };
	static const int32_t b[] = { 1, 3, 2, 2 };
	struct h h;

	h_init(&h, 8, 2, 3, 3, 0);
	snprintf(h.ctx, sizeof(h.ctx), "rewritten parent");
	set_seq(&h, 0, a, 4);
	assert_int_equal(h_open(&h, 0, 4, 4, 4), 0);
	assert_int_equal(h_commit(&h, 0, 4, NULL), 0);	/* a0 <- a1 */
	assert_int_equal(kv_lookup(h.m, a, 4, 4), 4);
	assert_int_equal(h_fork(&h, 1, 0, 1), 0);	/* a0, cut inside */
	h_close(&h, 0);					/* a1 cached */
	memcpy(h.seq[1], b, sizeof(b));
	assert_int_equal(h_commit(&h, 1, 2, NULL), 0);	/* a0 now 1 3 */
	assert_int_equal(kv_lookup(h.m, a, 4, 4), 0);
	assert_int_equal(kv_lookup(h.m, b, 4, 4), 2);	/* not a1 */
	set_seq(&h, 2, b, 4);
	assert_int_equal(h_open(&h, 2, 4, 4, 4), 0);
	assert_int_equal(h.computed[2], 2);
	h_fini(&h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_against_model),
		cmocka_unit_test(test_weak_hash),
		cmocka_unit_test(test_cow_failure_keeps_references),
		cmocka_unit_test(test_fork_does_not_alias_tail),
		cmocka_unit_test(test_eviction_order),
		cmocka_unit_test(test_rewritten_parent_orphans_children),
	};

	test_seed_init("kv_manager");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
