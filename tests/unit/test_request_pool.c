/*
 * test_request_pool.c - the pool of live requests and its id set against
 * a reference: a plain array of (handle, id) for every live request.
 *
 * Random alloc / free / add_id / find_id, with request_pool_check() and a
 * full comparison after every operation: every live id is found at its
 * handle, dead and never-used ids are not, the handle of every live
 * request is in use and every other handle is not, a full pool refuses
 * with REQUEST_NONE.  Frees pick a random live request, so the id table
 * loses entries from the middle of probe chains and its backward-shift
 * deletion must keep every other id reachable.  To make long chains on
 * purpose some rounds draw ids whose hash lands in the same few buckets,
 * chosen next to the end of the table so that chains wrap around it (the
 * FNV-1a hash below mirrors request_pool.c; if it ever changes these
 * rounds only lose their collisions, they do not fail).
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/request_pool.h"
#include "tests/unit/test_rng.h"

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	while (*s)
		h = (h ^ (uint8_t)*s++) * 0x100000001b3ull;
	return h;
}

/* ------------------------------------------------------------------ */
/* Reference                                                           */
/* ------------------------------------------------------------------ */

struct ref_req {
	uint32_t handle;
	char *id;		/* our own copy; NULL: allocated without an id */
};

struct model {
	struct request_pool pool;
	struct ref_req *live;	/* n_live entries, any order */
	uint32_t n_live;
	uint32_t capacity;
	uint64_t next_serial;	/* makes every generated id unique */
	uint32_t cluster_mask;	/* nonzero: generate colliding ids */
	uint32_t cluster_base;	/* home buckets cluster_base + 0..2 */
};

static void model_compare(struct model *m, const char *what)
{
	struct request_pool *pool = &m->pool;
	bool *live = calloc(m->capacity + 1, sizeof(bool));

	assert_non_null(live);
	if (request_pool_check(pool) != 0 || pool->n_live != m->n_live ||
	    request_pool_full(pool) != (m->n_live == m->capacity)) {
		print_error("after %s: check %d, n_live %u (want %u), full %d "
			    "(SEED=%llu)\n", what, request_pool_check(pool),
			    pool->n_live, m->n_live, request_pool_full(pool),
			    test_seed);
		fail();
	}
	for (uint32_t i = 0; i < m->n_live; i++) {
		const struct ref_req *rr = &m->live[i];
		struct live_request *lr = request_pool_get(pool, rr->handle);

		assert_non_null(lr);
		assert_true(lr->in_use);
		live[rr->handle] = true;
		if (!rr->id) {
			assert_null(lr->req.id);
			continue;
		}
		assert_string_equal(lr->req.id, rr->id);
		if (request_pool_find_id(pool, rr->id) != rr->handle) {
			print_error("after %s: id %s of handle %u found at %u "
				    "(SEED=%llu)\n", what, rr->id, rr->handle,
				    request_pool_find_id(pool, rr->id), test_seed);
			fail();
		}
	}
	for (uint32_t h = 0; h < m->capacity; h++)
		if (!live[h])
			assert_null(request_pool_get(pool, h));
	assert_null(request_pool_get(pool, m->capacity));
	assert_null(request_pool_get(pool, REQUEST_NONE));
	free(live);
}

/* A fresh id; in cluster mode one whose home bucket is in the cluster. */
static char *model_new_id(struct model *m, struct rng *r)
{
	char buf[64];

	for (;;) {
		snprintf(buf, sizeof(buf), "req-%llx-%llu",
			 (unsigned long long)(rng_next(r) & 0xffff),
			 (unsigned long long)m->next_serial++);
		if (!m->cluster_mask ||
		    (((uint32_t)fnv1a(buf) - m->cluster_base) & m->cluster_mask) < 3)
			break;
	}
	char *id = strdup(buf);

	assert_non_null(id);
	return id;
}

static void model_alloc(struct model *m, struct rng *r)
{
	uint32_t h = request_pool_alloc(&m->pool);
	struct live_request *lr;
	struct ref_req *rr;

	if (m->n_live == m->capacity) {
		assert_int_equal(h, REQUEST_NONE);
		return;
	}
	assert_true(h < m->capacity);
	for (uint32_t i = 0; i < m->n_live; i++)
		assert_int_not_equal(m->live[i].handle, h);
	lr = request_pool_get(&m->pool, h);
	assert_non_null(lr);
	/* a zeroed entry that waits for a slot */
	assert_null(lr->req.id);
	assert_null(lr->req.prompt);
	assert_int_equal(lr->slot, REQUEST_NONE);
	assert_int_equal(lr->n_generated, 0);
	assert_int_equal(lr->n_failed_alone, 0);

	rr = &m->live[m->n_live++];
	rr->handle = h;
	rr->id = NULL;
	if (rng_below(r, 10)) {		/* mostly with an id */
		char *id = model_new_id(m, r);

		/* find_id before add_id: not live yet */
		assert_int_equal(request_pool_find_id(&m->pool, id), REQUEST_NONE);
		lr->req.id = strdup(id);
		assert_non_null(lr->req.id);
		request_pool_add_id(&m->pool, h);
		rr->id = id;
	}
	/* other members the pool must release with the request */
	lr->req.n_prompt = 1 + rng_below(r, 4);
	lr->req.prompt = calloc(lr->req.n_prompt, sizeof(int32_t));
	assert_non_null(lr->req.prompt);
	lr->n_generated = rng_below(r, 100);
	lr->slot = rng_below(r, 8);
}

static void model_free(struct model *m, struct rng *r)
{
	uint32_t i;
	struct ref_req rr;

	if (!m->n_live)
		return;
	i = rng_below(r, m->n_live);
	rr = m->live[i];
	m->live[i] = m->live[--m->n_live];
	request_pool_free(&m->pool, rr.handle);
	assert_null(request_pool_get(&m->pool, rr.handle));
	if (rr.id) {
		assert_int_equal(request_pool_find_id(&m->pool, rr.id), REQUEST_NONE);
		free(rr.id);
	}
	/* freeing a free handle changes nothing */
	if (rng_below(r, 8) == 0)
		request_pool_free(&m->pool, rr.handle);
}

static void model_probe(struct model *m, struct rng *r)
{
	char *id = model_new_id(m, r);	/* never added: must be absent */

	assert_int_equal(request_pool_find_id(&m->pool, id), REQUEST_NONE);
	free(id);
	if (m->n_live) {
		const struct ref_req *rr = &m->live[rng_below(r, m->n_live)];

		if (rr->id)
			assert_int_equal(request_pool_find_id(&m->pool, rr->id),
					 rr->handle);
	}
}

static void model_run(struct rng *r, uint32_t capacity, unsigned n_ops,
		      bool cluster)
{
	struct model m = { .capacity = capacity };
	unsigned alloc_pct = 50;

	assert_int_equal(request_pool_init(&m.pool, capacity), 0);
	m.live = calloc(capacity, sizeof(*m.live));
	assert_non_null(m.live);
	if (cluster) {
		m.cluster_mask = m.pool.id_mask;
		/* straddle the end of the table half of the time */
		m.cluster_base = rng_below(r, 2) ? m.pool.id_mask - 1 :
			rng_below(r, m.pool.id_mask + 1);
	}
	model_compare(&m, "init");
	for (unsigned op = 0; op < n_ops; op++) {
		uint32_t k = rng_below(r, 100);

		if (rng_below(r, 50) == 0)
			alloc_pct = (unsigned[]){ 20, 50, 80 }[rng_below(r, 3)];
		if (k < alloc_pct * 9 / 10)
			model_alloc(&m, r);
		else if (k < 90)
			model_free(&m, r);
		else
			model_probe(&m, r);
		model_compare(&m, k < alloc_pct * 9 / 10 ? "alloc" :
			      k < 90 ? "free" : "find");
	}
	/* drain in random order, then refill completely */
	while (m.n_live) {
		model_free(&m, r);
		model_compare(&m, "drain");
	}
	for (uint32_t i = 0; i < capacity; i++)
		model_alloc(&m, r);
	model_compare(&m, "refill");
	assert_true(request_pool_full(&m.pool));
	assert_int_equal(request_pool_alloc(&m.pool), REQUEST_NONE);
	/* release with everything live: the pool frees ids and prompts */
	request_pool_release(&m.pool);
	for (uint32_t i = 0; i < m.n_live; i++)
		free(m.live[i].id);
	free(m.live);
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */
/* ------------------------------------------------------------------ */

static void test_basic(void **state)
{
	struct request_pool pool;
	uint32_t a, b;

	(void)state;
	assert_int_equal(request_pool_init(&pool, 2), 0);
	assert_int_equal(request_pool_check(&pool), 0);
	assert_int_equal(request_pool_find_id(&pool, "x"), REQUEST_NONE);
	a = request_pool_alloc(&pool);
	b = request_pool_alloc(&pool);
	assert_true(a < 2 && b < 2 && a != b);
	assert_true(request_pool_full(&pool));
	assert_int_equal(request_pool_alloc(&pool), REQUEST_NONE);
	request_pool_get(&pool, a)->req.id = strdup("x");
	request_pool_add_id(&pool, a);
	request_pool_get(&pool, b)->req.id = strdup("y");
	request_pool_add_id(&pool, b);
	assert_int_equal(request_pool_check(&pool), 0);
	assert_int_equal(request_pool_find_id(&pool, "x"), a);
	assert_int_equal(request_pool_find_id(&pool, "y"), b);
	assert_int_equal(request_pool_find_id(&pool, ""), REQUEST_NONE);
	request_pool_free(&pool, a);
	assert_int_equal(request_pool_find_id(&pool, "x"), REQUEST_NONE);
	assert_int_equal(request_pool_find_id(&pool, "y"), b);
	assert_false(request_pool_full(&pool));
	assert_int_equal(pool.n_live, 1);
	/* out of range and double frees are ignored */
	request_pool_free(&pool, a);
	request_pool_free(&pool, 2);
	request_pool_free(&pool, REQUEST_NONE);
	assert_int_equal(request_pool_check(&pool), 0);
	assert_int_equal(pool.n_live, 1);
	/* an id can be reused once its request is gone */
	a = request_pool_alloc(&pool);
	request_pool_get(&pool, a)->req.id = strdup("x");
	request_pool_add_id(&pool, a);
	assert_int_equal(request_pool_find_id(&pool, "x"), a);
	assert_int_equal(request_pool_check(&pool), 0);
	request_pool_release(&pool);
	/* release of a released pool is harmless */
	request_pool_release(&pool);
}

/* request_pool_check() must notice a broken id table. */
static void test_check_detects_corruption(void **state)
{
	struct request_pool pool;
	uint32_t h;

	(void)state;
	assert_int_equal(request_pool_init(&pool, 4), 0);
	h = request_pool_alloc(&pool);
	request_pool_get(&pool, h)->req.id = strdup("abc");
	request_pool_add_id(&pool, h);
	assert_int_equal(request_pool_check(&pool), 0);
	/* an entry for a handle that is not in use */
	for (uint32_t i = 0; i <= pool.id_mask; i++) {
		if (!pool.id_table[i]) {
			pool.id_table[i] = (h + 1) % 4 + 1;
			assert_int_equal(request_pool_check(&pool), -EINVAL);
			pool.id_table[i] = 0;
			break;
		}
	}
	assert_int_equal(request_pool_check(&pool), 0);
	pool.n_live++;
	assert_int_equal(request_pool_check(&pool), -EINVAL);
	pool.n_live--;
	request_pool_release(&pool);
}

/* Ids with one home bucket, freed from the middle of their chain. */
static void test_collisions_by_hand(void **state)
{
	struct request_pool pool;
	char ids[6][32];
	uint32_t handles[6];
	uint32_t n = 0, serial = 0, home;

	(void)state;
	assert_int_equal(request_pool_init(&pool, 6), 0);
	home = pool.id_mask;	/* the last bucket: the chain wraps */
	while (n < 6) {
		snprintf(ids[n], sizeof(ids[n]), "c%u", serial++);
		if (((uint32_t)fnv1a(ids[n]) & pool.id_mask) == home)
			n++;
	}
	for (uint32_t i = 0; i < 6; i++) {
		handles[i] = request_pool_alloc(&pool);
		request_pool_get(&pool, handles[i])->req.id = strdup(ids[i]);
		request_pool_add_id(&pool, handles[i]);
	}
	assert_int_equal(request_pool_check(&pool), 0);
	/* free 1, 3, 0 from the chain; the others must stay reachable */
	request_pool_free(&pool, handles[1]);
	request_pool_free(&pool, handles[3]);
	request_pool_free(&pool, handles[0]);
	assert_int_equal(request_pool_check(&pool), 0);
	for (uint32_t i = 0; i < 6; i++)
		assert_int_equal(request_pool_find_id(&pool, ids[i]),
				 i == 0 || i == 1 || i == 3 ? REQUEST_NONE : handles[i]);
	request_pool_release(&pool);
}

static void test_random_vs_reference(void **state)
{
	static const uint32_t caps[] = { 1, 2, 3, 5, 8, 16, 33, 100, 257 };
	struct rng r = rng_for(1);

	(void)state;
	for (unsigned i = 0; i < sizeof(caps) / sizeof(caps[0]); i++)
		for (unsigned rep = 0; rep < 4; rep++)
			model_run(&r, caps[i], caps[i] > 100 ? 3000 : 1500, false);
}

static void test_random_collisions(void **state)
{
	static const uint32_t caps[] = { 2, 4, 7, 8, 12, 30 };
	struct rng r = rng_for(2);

	(void)state;
	for (unsigned i = 0; i < sizeof(caps) / sizeof(caps[0]); i++)
		for (unsigned rep = 0; rep < 6; rep++)
			model_run(&r, caps[i], 1500, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_basic),
		cmocka_unit_test(test_check_detects_corruption),
		cmocka_unit_test(test_collisions_by_hand),
		cmocka_unit_test(test_random_vs_reference),
		cmocka_unit_test(test_random_collisions),
	};

	test_seed_init("request_pool");
	return cmocka_run_group_tests_name("request_pool", tests, NULL, NULL);
}
