/*
 * test_slot_table.c - the slot table over a real shared segment, against
 * a reference model of every slot: state, generation, request handle,
 * prompt length and the committed tokens.
 *
 * Random assign / append / release, valid and invalid, on segments of a
 * few shapes.  After every operation: slot_table_check() passes, the
 * private copy and the shared mirror (shm_slot_at) both equal the model,
 * the generation has moved by exactly one for an assignment and not at
 * all otherwise, and every active slot's shared token buffer
 * (shm_tokens_at, slot_table_tokens) holds its prompt then its appended
 * tokens - so the buffers of neighbouring slots do not overlap either.
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

#include "ipc/shm_segment.h"
#include "sched/slot_table.h"
#include "tests/unit/test_rng.h"

/* ------------------------------------------------------------------ */
/* Fixture: a segment and a slot table over it                         */
/* ------------------------------------------------------------------ */

struct fixture {
	struct shm_segment seg;
	struct slot_table t;
};

/* The open fixture's segment, destroyed by teardown if a test failed
 * before fixture_close(): a failed run leaves no name in /dev/shm. */
static struct shm_segment *open_seg;

static int teardown(void **state)
{
	(void)state;
	if (open_seg)
		shm_segment_destroy(open_seg);
	open_seg = NULL;
	return 0;
}

static void fixture_open(struct fixture *f, uint32_t n_slots,
			 uint32_t n_shards, uint32_t max_context)
{
	struct shm_params p = {
		.n_slots = n_slots, .n_shards = n_shards,
		.max_context = max_context,
		.vocab = 1000,
	};

	assert_int_equal(shm_segment_create(&f->seg, &p), 0);
	open_seg = &f->seg;
	/* garbage in the shared table: init must publish every slot */
	memset(shm_slot_at(&f->seg, 0), 0xa5,
	       (size_t)n_slots * sizeof(struct shm_slot));
	assert_int_equal(slot_table_init(&f->t, &f->seg), 0);
	assert_int_equal(f->t.n_slots, n_slots);
	assert_int_equal(f->t.max_context, max_context);
}

static void fixture_close(struct fixture *f)
{
	slot_table_release_all(&f->t);
	shm_segment_destroy(&f->seg);
	open_seg = NULL;
}

/* ------------------------------------------------------------------ */
/* Reference model                                                     */
/* ------------------------------------------------------------------ */

struct ref_slot {
	uint32_t state;
	uint32_t generation;
	uint32_t handle;
	uint32_t n_prompt;
	uint32_t n_tokens;
	int32_t *tokens;	/* max_context */
};

struct model {
	struct fixture f;
	struct ref_slot *slots;
	uint32_t n_slots, max_context, n_busy;
	int32_t *prompt;	/* scratch, max_context + 1 */
};

static void model_compare(const struct model *m, const char *what, uint32_t slot)
{
	const struct slot_table *t = &m->f.t;

	if (slot_table_check(t) != 0 || t->n_busy != m->n_busy) {
		print_error("after %s of slot %u: check %d, n_busy %u (want %u) "
			    "(SEED=%llu)\n", what, slot, slot_table_check(t),
			    t->n_busy, m->n_busy, test_seed);
		fail();
	}
	for (uint32_t i = 0; i < m->n_slots; i++) {
		const struct ref_slot *rs = &m->slots[i];
		const struct slot_state *p = &t->slots[i];
		const struct shm_slot *s = shm_slot_at(&m->f.seg, i);

		if (p->state != rs->state || p->generation != rs->generation ||
		    s->state != rs->state ||
		    atomic_load(&s->generation) != rs->generation) {
			print_error("after %s of slot %u: slot %u state %u/%u "
				    "generation %u/%u (private/shared), want "
				    "state %u generation %u (SEED=%llu)\n", what,
				    slot, i, p->state, s->state, p->generation,
				    atomic_load(&s->generation), rs->state,
				    rs->generation, test_seed);
			fail();
		}
		if (rs->state != SHM_SLOT_ACTIVE)
			continue;
		assert_int_equal(p->request_handle, rs->handle);
		assert_int_equal(s->request_handle, rs->handle);
		assert_int_equal(p->n_prompt, rs->n_prompt);
		assert_int_equal(s->n_prompt, rs->n_prompt);
		assert_int_equal(p->n_tokens, rs->n_tokens);
		assert_int_equal(s->n_tokens, rs->n_tokens);
		assert_ptr_equal(slot_table_tokens(t, i), shm_tokens_at(&m->f.seg, i));
		if (rs->n_tokens &&
		    memcmp(shm_tokens_at(&m->f.seg, i), rs->tokens,
			   rs->n_tokens * sizeof(int32_t))) {
			print_error("after %s of slot %u: slot %u tokens differ "
				    "(SEED=%llu)\n", what, slot, i, test_seed);
			fail();
		}
	}
}

static void model_open(struct model *m, uint32_t n_slots, uint32_t n_shards,
		       uint32_t max_context)
{
	memset(m, 0, sizeof(*m));
	fixture_open(&m->f, n_slots, n_shards, max_context);
	m->n_slots = n_slots;
	m->max_context = max_context;
	m->slots = calloc(n_slots, sizeof(*m->slots));
	m->prompt = calloc(max_context + 1, sizeof(int32_t));
	assert_non_null(m->slots);
	assert_non_null(m->prompt);
	for (uint32_t i = 0; i < n_slots; i++) {
		m->slots[i].tokens = calloc(max_context, sizeof(int32_t));
		assert_non_null(m->slots[i].tokens);
	}
	model_compare(m, "init", 0);
}

static void model_close(struct model *m)
{
	for (uint32_t i = 0; i < m->n_slots; i++)
		free(m->slots[i].tokens);
	free(m->slots);
	free(m->prompt);
	fixture_close(&m->f);
}

/* Assign a random slot (free or not) a random prompt (fitting or not). */
static void model_assign(struct model *m, struct rng *r)
{
	uint32_t slot = rng_below(r, m->n_slots);
	uint32_t handle = (uint32_t)rng_next(r);
	uint32_t n_prompt;
	bool active;
	int rc, want;

	switch (rng_below(r, 10)) {
	case 0:
		n_prompt = 0;
		break;
	case 1:
		n_prompt = m->max_context;
		break;
	case 2:
		n_prompt = m->max_context + 1;	/* does not fit */
		break;
	default:
		n_prompt = rng_below(r, m->max_context + 1);
		break;
	}
	if (rng_below(r, 40) == 0)
		slot = m->n_slots + rng_below(r, 3);	/* out of range */
	for (uint32_t i = 0; i < n_prompt; i++)
		m->prompt[i] = (int32_t)rng_next(r);
	active = slot < m->n_slots && m->slots[slot].state == SHM_SLOT_ACTIVE;
	want = slot >= m->n_slots || active || n_prompt > m->max_context ?
	       -EINVAL : 0;
	rc = slot_table_assign(&m->f.t, slot, handle, m->prompt, n_prompt);
	if (rc != want) {
		print_error("assign slot %u (n_slots %u, %s) prompt %u (max %u): "
			    "%d, want %d (SEED=%llu)\n", slot, m->n_slots,
			    active ? "active" : "free", n_prompt,
			    m->max_context, rc, want, test_seed);
		fail();
	}
	if (!rc) {
		struct ref_slot *rs = &m->slots[slot];

		rs->state = SHM_SLOT_ACTIVE;
		rs->generation++;
		rs->handle = handle;
		rs->n_prompt = rs->n_tokens = n_prompt;
		memcpy(rs->tokens, m->prompt, n_prompt * sizeof(int32_t));
		m->n_busy++;
	}
	model_compare(m, "assign", slot);
}

/* Append a token to a random active slot. */
static void model_append(struct model *m, struct rng *r)
{
	uint32_t slot = rng_below(r, m->n_slots);
	struct ref_slot *rs;
	int32_t token = (int32_t)rng_next(r);
	int rc;

	for (uint32_t i = 0; i < m->n_slots; i++, slot = (slot + 1) % m->n_slots)
		if (m->slots[slot].state == SHM_SLOT_ACTIVE)
			break;
	rs = &m->slots[slot];
	if (rs->state != SHM_SLOT_ACTIVE)
		return;
	rc = slot_table_append(&m->f.t, slot, token);
	if (rs->n_tokens == m->max_context) {
		assert_int_equal(rc, -ENOSPC);
	} else {
		assert_int_equal(rc, 0);
		rs->tokens[rs->n_tokens++] = token;
	}
	model_compare(m, "append", slot);
}

/* Release a random slot, active or (a no-op) free. */
static void model_release(struct model *m, struct rng *r)
{
	uint32_t slot = rng_below(r, m->n_slots);
	struct ref_slot *rs = &m->slots[slot];

	slot_table_release(&m->f.t, slot);
	if (rs->state == SHM_SLOT_ACTIVE) {
		rs->state = SHM_SLOT_FREE;
		m->n_busy--;
	}
	model_compare(m, "release", slot);
}

static void model_run(struct rng *r, uint32_t n_slots, uint32_t n_shards,
		      uint32_t max_context, unsigned n_ops)
{
	struct model m;

	model_open(&m, n_slots, n_shards, max_context);
	for (unsigned op = 0; op < n_ops; op++) {
		uint32_t k = rng_below(r, 100);

		if (k < 25)
			model_assign(&m, r);
		else if (k < 85)
			model_append(&m, r);
		else
			model_release(&m, r);
	}
	/* release everything: generations stay, states go back to FREE */
	for (uint32_t i = 0; i < n_slots; i++) {
		slot_table_release(&m.f.t, i);
		if (m.slots[i].state == SHM_SLOT_ACTIVE) {
			m.slots[i].state = SHM_SLOT_FREE;
			m.n_busy--;
		}
	}
	model_compare(&m, "release all", 0);
	assert_int_equal(m.f.t.n_busy, 0);
	model_close(&m);
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */
/* ------------------------------------------------------------------ */

static void test_lifecycle(void **state)
{
	struct fixture f;
	const int32_t prompt[3] = { 5, -1, INT32_MAX };
	const struct shm_slot *s;

	(void)state;
	fixture_open(&f, 4, 2, 5);
	s = shm_slot_at(&f.seg, 2);
	assert_int_equal(slot_table_check(&f.t), 0);
	assert_int_equal(s->state, SHM_SLOT_FREE);
	assert_int_equal(s->generation, 0);
	assert_int_equal(f.t.n_busy, 0);

	assert_int_equal(slot_table_assign(&f.t, 2, 17, prompt, 3), 0);
	assert_int_equal(s->state, SHM_SLOT_ACTIVE);
	assert_int_equal(s->generation, 1);
	assert_int_equal(s->request_handle, 17);
	assert_int_equal(s->n_prompt, 3);
	assert_int_equal(s->n_tokens, 3);
	assert_memory_equal(slot_table_tokens(&f.t, 2), prompt, sizeof(prompt));
	assert_int_equal(f.t.n_busy, 1);
	/* a busy slot cannot be given away */
	assert_int_equal(slot_table_assign(&f.t, 2, 18, prompt, 1), -EINVAL);
	assert_int_equal(s->generation, 1);
	assert_int_equal(s->request_handle, 17);

	assert_int_equal(slot_table_append(&f.t, 2, 7), 0);
	assert_int_equal(slot_table_append(&f.t, 2, 8), 0);
	assert_int_equal(slot_table_append(&f.t, 2, 9), -ENOSPC);
	assert_int_equal(s->n_tokens, 5);
	assert_int_equal(slot_table_tokens(&f.t, 2)[3], 7);
	assert_int_equal(slot_table_tokens(&f.t, 2)[4], 8);
	assert_int_equal(s->generation, 1);
	assert_int_equal(slot_table_check(&f.t), 0);

	slot_table_release(&f.t, 2);
	assert_int_equal(s->state, SHM_SLOT_FREE);
	assert_int_equal(s->generation, 1);
	assert_int_equal(f.t.n_busy, 0);
	slot_table_release(&f.t, 2);	/* twice: no-op */
	assert_int_equal(f.t.n_busy, 0);
	assert_int_equal(slot_table_check(&f.t), 0);

	/* reuse: generation 2, fresh prompt, empty prompt allowed */
	assert_int_equal(slot_table_assign(&f.t, 2, 19, NULL, 0), 0);
	assert_int_equal(s->generation, 2);
	assert_int_equal(s->n_tokens, 0);
	/* too long a prompt, a slot out of range */
	assert_int_equal(slot_table_assign(&f.t, 1, 1, prompt, 6), -EINVAL);
	assert_int_equal(slot_table_assign(&f.t, 4, 1, prompt, 1), -EINVAL);
	assert_int_equal(slot_table_assign(&f.t, UINT32_MAX, 1, prompt, 1), -EINVAL);
	assert_int_equal(shm_slot_at(&f.seg, 1)->generation, 0);
	assert_int_equal(slot_table_check(&f.t), 0);
	fixture_close(&f);
}

/* commit: the worker already wrote the token after the prefix; only the
 * committed length moves (in the table and its shared mirror). */
static void test_commit_worker_token(void **state)
{
	struct fixture f;
	const int32_t prompt[2] = { 11, 12 };
	const struct shm_slot *s;
	int32_t *buf;

	(void)state;
	fixture_open(&f, 4, 2, 4);
	s = shm_slot_at(&f.seg, 3);
	assert_int_equal(slot_table_assign(&f.t, 3, 5, prompt, 2), 0);
	buf = shm_tokens_at(&f.seg, 3);
	buf[2] = 40;			/* as the shard's worker would */
	buf[3] = 41;			/* run ahead: not committed yet */
	assert_int_equal(slot_table_commit(&f.t, 3), 0);
	assert_int_equal(s->n_tokens, 3);
	assert_int_equal(slot_table_tokens(&f.t, 3)[2], 40);
	assert_int_equal(slot_table_check(&f.t), 0);
	assert_int_equal(slot_table_commit(&f.t, 3), 0);
	assert_int_equal(s->n_tokens, 4);
	assert_int_equal(slot_table_tokens(&f.t, 3)[3], 41);
	/* the context is full: nothing moves */
	assert_int_equal(slot_table_commit(&f.t, 3), -ENOSPC);
	assert_int_equal(s->n_tokens, 4);
	assert_int_equal(slot_table_check(&f.t), 0);
	fixture_close(&f);
}

/* slot_table_check() must notice a mirror that disagrees. */
static void test_check_detects_corruption(void **state)
{
	struct fixture f;
	const int32_t prompt[1] = { 1 };
	struct shm_slot *s;

	(void)state;
	fixture_open(&f, 3, 1, 4);
	assert_int_equal(slot_table_assign(&f.t, 1, 0, prompt, 1), 0);
	s = shm_slot_at(&f.seg, 1);
	atomic_fetch_add(&s->generation, 1);
	assert_int_equal(slot_table_check(&f.t), -EINVAL);
	atomic_fetch_sub(&s->generation, 1);
	s->state = SHM_SLOT_FREE;
	assert_int_equal(slot_table_check(&f.t), -EINVAL);
	s->state = SHM_SLOT_ACTIVE;
	assert_int_equal(slot_table_check(&f.t), 0);
	f.t.n_busy++;
	assert_int_equal(slot_table_check(&f.t), -EINVAL);
	f.t.n_busy--;
	f.t.slots[1].n_prompt = 2;	/* more prompt than tokens */
	assert_int_equal(slot_table_check(&f.t), -EINVAL);
	f.t.slots[1].n_prompt = 1;
	assert_int_equal(slot_table_check(&f.t), 0);
	fixture_close(&f);
}

/* Fill one slot to the limit token by token. */
static void test_fill_to_context(void **state)
{
	struct fixture f;
	const uint32_t max_context = 257;

	(void)state;
	fixture_open(&f, 3, 3, max_context);
	assert_int_equal(slot_table_assign(&f.t, 0, 0, NULL, 0), 0);
	assert_int_equal(slot_table_assign(&f.t, 1, 0, NULL, 0), 0);
	for (uint32_t i = 0; i < max_context; i++) {
		assert_int_equal(slot_table_append(&f.t, 1, (int32_t)i), 0);
		assert_int_equal(slot_table_append(&f.t, 0, -(int32_t)i), 0);
	}
	assert_int_equal(slot_table_append(&f.t, 1, 0), -ENOSPC);
	assert_int_equal(slot_table_append(&f.t, 0, 0), -ENOSPC);
	for (uint32_t i = 0; i < max_context; i++) {
		assert_int_equal(slot_table_tokens(&f.t, 1)[i], (int32_t)i);
		assert_int_equal(slot_table_tokens(&f.t, 0)[i], -(int32_t)i);
	}
	assert_int_equal(shm_slot_at(&f.seg, 1)->n_tokens, max_context);
	assert_int_equal(slot_table_check(&f.t), 0);
	fixture_close(&f);
}

static void test_random_vs_model(void **state)
{
	static const struct { uint32_t slots, shards, ctx; unsigned ops; } shapes[] = {
		{ 1, 1, 1, 400 },
		{ 1, 1, 6, 600 },
		{ 5, 2, 3, 1500 },
		{ 8, 3, 8, 2000 },
		{ 17, 4, 12, 3000 },
		{ 40, 8, 24, 4000 },
		{ 64, 1, 64, 4000 },
	};
	struct rng r = rng_for(1);

	(void)state;
	for (unsigned i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
		model_run(&r, shapes[i].slots, shapes[i].shards, shapes[i].ctx,
			  shapes[i].ops * 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_lifecycle, teardown),
		cmocka_unit_test_teardown(test_commit_worker_token, teardown),
		cmocka_unit_test_teardown(test_check_detects_corruption, teardown),
		cmocka_unit_test_teardown(test_fill_to_context, teardown),
		cmocka_unit_test_teardown(test_random_vs_model, teardown),
	};

	test_seed_init("slot_table");
	return cmocka_run_group_tests_name("slot_table", tests, NULL, NULL);
}
