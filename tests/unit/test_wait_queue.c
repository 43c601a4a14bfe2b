/*
 * test_wait_queue.c - the waiting queue against a trivial FIFO reference.
 *
 * The queue's ring is private to the coordinator (no worker can reach
 * it) and exactly capacity entries long, so AddressSanitizer sees any
 * index that escapes the capacity.  For every capacity 1..64 a random
 * mix of pushes and pops, biased in phases towards filling and towards
 * draining so that the queue is often full, often empty and wraps many
 * times, is applied to the queue and to a plain array with two counters;
 * after every operation the results, the length, fullness, the ring's
 * contents and wait_queue_check() must agree with the reference.
 *
 * Fair queueing between classes against a per-class reference
 * (test_fair_vs_reference: peek too) and under a flood (test_fair_flood).
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

#include "engine/wait_queue.h"
#include "tests/unit/test_rng.h"

/* A queue of capacity, its indexes garbage first: init must reset them. */
static void queue_init(struct wait_queue *q, uint32_t capacity)
{
	q->head = 12345;
	q->tail = 678;
	assert_int_equal(wait_queue_init(q, capacity), 0);
}

/* ------------------------------------------------------------------ */
/* Hand-worked cases                                                   */
/* ------------------------------------------------------------------ */

static void test_empty_and_full(void **state)
{
	struct wait_queue q;
	uint32_t h = 99;

	(void)state;
	queue_init(&q, 3);
	assert_int_equal(wait_queue_check(&q), 0);
	assert_int_equal(q.head, 0);
	assert_int_equal(q.tail, 0);
	assert_int_equal(wait_queue_len(&q), 0);
	assert_false(wait_queue_full(&q));
	assert_int_equal(wait_queue_pop(&q, &h), -ENOENT);
	assert_int_equal(h, 99);

	assert_int_equal(wait_queue_push(&q, 7), 0);
	assert_int_equal(wait_queue_push(&q, UINT32_MAX), 0);
	assert_int_equal(wait_queue_push(&q, 0), 0);
	assert_true(wait_queue_full(&q));
	assert_int_equal(wait_queue_push(&q, 5), -ENOSPC);
	assert_int_equal(wait_queue_len(&q), 3);
	assert_int_equal(wait_queue_check(&q), 0);

	assert_int_equal(wait_queue_pop(&q, &h), 0);
	assert_int_equal(h, 7);
	assert_int_equal(wait_queue_push(&q, 8), 0);	/* wraps */
	assert_int_equal(wait_queue_pop(&q, &h), 0);
	assert_int_equal(h, UINT32_MAX);
	assert_int_equal(wait_queue_pop(&q, &h), 0);
	assert_int_equal(h, 0);
	assert_int_equal(wait_queue_pop(&q, &h), 0);
	assert_int_equal(h, 8);
	assert_int_equal(wait_queue_pop(&q, &h), -ENOENT);
	assert_int_equal(q.head, 4);
	assert_int_equal(q.tail, 4);
	assert_int_equal(wait_queue_check(&q), 0);
	wait_queue_release(&q);
	wait_queue_release(&q);	/* twice: harmless */
}

/* wait_queue_check() must notice indexes that cannot be. */
static void test_check_detects_corruption(void **state)
{
	struct wait_queue q;

	(void)state;
	queue_init(&q, 4);
	assert_int_equal(wait_queue_push(&q, 1), 0);
	assert_int_equal(wait_queue_push(&q, 2), 0);
	assert_int_equal(wait_queue_check(&q), 0);
	/* indexes further apart than the capacity */
	q.tail += 3;
	assert_int_equal(wait_queue_check(&q), -EINVAL);
	q.tail -= 3;
	/* head past tail */
	q.head = q.tail + 1;
	assert_int_equal(wait_queue_check(&q), -EINVAL);
	q.head = q.tail - 2;
	assert_int_equal(wait_queue_check(&q), 0);
	wait_queue_release(&q);
	/* a released queue has no ring */
	assert_int_equal(wait_queue_check(&q), -EINVAL);
}

/* ------------------------------------------------------------------ */
/* Randomized model test                                               */
/* ------------------------------------------------------------------ */

struct ref_fifo {
	uint32_t *items;	/* never wraps: big enough for every push */
	size_t head, tail;
};

static void compare(const struct wait_queue *q, const struct ref_fifo *ref,
		    uint32_t capacity, unsigned op)
{
	size_t len = ref->tail - ref->head;

	if (wait_queue_check(q) != 0 || wait_queue_len(q) != len ||
	    wait_queue_full(q) != (len == capacity) ||
	    q->head != ref->head || q->tail != ref->tail) {
		print_error("capacity %u op %u: len %u (want %zu) full %d "
			    "head/tail %llu/%llu (want %zu/%zu) check %d "
			    "(SEED=%llu)\n", capacity, op, wait_queue_len(q), len,
			    wait_queue_full(q),
			    (unsigned long long)q->head,
			    (unsigned long long)q->tail, ref->head,
			    ref->tail, wait_queue_check(q), test_seed);
		fail();
	}
	/* the ring holds the live handles in order */
	for (size_t i = ref->head; i < ref->tail; i++)
		assert_int_equal(q->handles[i % capacity], ref->items[i]);
}

static void run_random(struct rng *r, uint32_t capacity)
{
	unsigned n_ops = 400 + capacity * 40;
	struct ref_fifo ref = { calloc(n_ops + 3 * capacity, sizeof(uint32_t)), 0, 0 };
	struct wait_queue q;
	unsigned push_pct = 50;

	assert_non_null(ref.items);
	queue_init(&q, capacity);
	compare(&q, &ref, capacity, 0);
	for (unsigned op = 1; op <= n_ops; op++) {
		size_t len = ref.tail - ref.head;

		/* phases: mostly filling, mostly draining, balanced */
		if (rng_below(r, 64) == 0)
			push_pct = (unsigned[]){ 15, 50, 85 }[rng_below(r, 3)];
		if (rng_below(r, 100) < push_pct) {
			uint32_t h = (uint32_t)rng_next(r);
			int rc = wait_queue_push(&q, h);

			if (len == capacity) {
				assert_int_equal(rc, -ENOSPC);
			} else {
				assert_int_equal(rc, 0);
				ref.items[ref.tail++] = h;
			}
		} else {
			uint32_t h = 0xdeadbeef;
			int rc = wait_queue_pop(&q, &h);

			if (!len) {
				assert_int_equal(rc, -ENOENT);
				assert_int_equal(h, 0xdeadbeef);
			} else {
				assert_int_equal(rc, 0);
				if (h != ref.items[ref.head]) {
					print_error("capacity %u op %u: popped %u, "
						    "want %u (SEED=%llu)\n",
						    capacity, op, h,
						    ref.items[ref.head], test_seed);
					fail();
				}
				ref.head++;
			}
		}
		compare(&q, &ref, capacity, op);
	}
	/* make sure every capacity has wrapped the ring at least three times */
	while (ref.tail < 3 * (size_t)capacity) {
		uint32_t h = (uint32_t)rng_next(r);

		if (wait_queue_full(&q)) {
			assert_int_equal(wait_queue_pop(&q, &h), 0);
			assert_int_equal(h, ref.items[ref.head]);
			ref.head++;
		} else {
			assert_int_equal(wait_queue_push(&q, h), 0);
			ref.items[ref.tail++] = h;
		}
		compare(&q, &ref, capacity, n_ops);
	}
	assert_true(ref.tail >= 3 * (size_t)capacity);
	free(ref.items);
	wait_queue_release(&q);
}

static void test_random_vs_fifo(void **state)
{
	struct rng r = rng_for(1);

	(void)state;
	for (uint32_t capacity = 1; capacity <= 64; capacity++)
		run_random(&r, capacity);
}

/* Fill and drain completely, many laps, for a few capacities. */
static void test_full_laps(void **state)
{
	struct rng r = rng_for(2);

	(void)state;
	for (uint32_t capacity = 1; capacity <= 64; capacity += 7) {
		struct wait_queue q;
		uint32_t base = (uint32_t)rng_next(&r);

		queue_init(&q, capacity);
		for (uint32_t lap = 0; lap < 10; lap++) {
			for (uint32_t i = 0; i < capacity; i++)
				assert_int_equal(wait_queue_push(&q, base + lap * capacity + i), 0);
			assert_true(wait_queue_full(&q));
			assert_int_equal(wait_queue_push(&q, 0), -ENOSPC);
			assert_int_equal(wait_queue_check(&q), 0);
			for (uint32_t i = 0; i < capacity; i++) {
				uint32_t h;

				assert_int_equal(wait_queue_pop(&q, &h), 0);
				assert_int_equal(h, base + lap * capacity + i);
			}
			assert_int_equal(wait_queue_len(&q), 0);
			assert_int_equal(wait_queue_check(&q), 0);
		}
		assert_int_equal(q.tail, 10ull * capacity);
		wait_queue_release(&q);
	}
}

/* ------------------------------------------------------------------ */
/* Fair queueing between classes                                       */
/* ------------------------------------------------------------------ */

/*
 * The reference: one FIFO list per class, each entry's start tag from
 * the definition (max of the virtual time and the class's last tag +
 * cost), pop takes the class head with the smallest tag (the earliest
 * pushed among equals).  Random pushes of 1..5 classes (class 0 too),
 * pops and removals; every pop must give the reference's handle.
 */
#define FQ_CAP 48
#define FQ_CLASSES 6

struct fq_ref {
	uint32_t h[FQ_CLASSES][FQ_CAP * 4];
	uint64_t tag[FQ_CLASSES][FQ_CAP * 4], seq[FQ_CLASSES][FQ_CAP * 4];
	uint32_t n[FQ_CLASSES];
	uint64_t end[FQ_CLASSES], vtime, next_seq;
	bool fair;			/* a class > 0 was pushed */
};

static void fq_ref_del(struct fq_ref *r, uint32_t c, uint32_t i)
{
	memmove(&r->h[c][i], &r->h[c][i + 1], (r->n[c] - i - 1) * sizeof(uint32_t));
	memmove(&r->tag[c][i], &r->tag[c][i + 1], (r->n[c] - i - 1) * sizeof(uint64_t));
	memmove(&r->seq[c][i], &r->seq[c][i + 1], (r->n[c] - i - 1) * sizeof(uint64_t));
	r->n[c]--;
}

static void test_fair_vs_reference(void **state)
{
	struct rng rng = rng_for(40);
	struct wait_queue q;
	static struct fq_ref r;
	uint32_t next_handle = 1, len = 0;

	(void)state;
	for (int round = 0; round < 200; round++) {
		memset(&r, 0, sizeof(r));
		queue_init(&q, FQ_CAP);
		len = 0;
		for (int step = 0; step < 400; step++) {
			uint32_t what = rng_below(&rng, 10);

			if (what < 5 && len < FQ_CAP) {
				uint32_t c = rng_below(&rng, FQ_CLASSES);
				uint64_t cost = rng_below(&rng, 4) ? 1 + rng_below(&rng, 100) : 0;
				uint64_t t = r.vtime > r.end[c] ? r.vtime : r.end[c];

				assert_int_equal(wait_queue_push_class(&q, next_handle, c, cost), 0);
				r.h[c][r.n[c]] = next_handle++;
				r.seq[c][r.n[c]] = r.next_seq++;
				/* before the first class push the queue is FIFO:
				 * those entries are older than any tag */
				r.fair = r.fair || c;
				r.tag[c][r.n[c]] = r.fair ? t : 0;
				if (r.fair)
					r.end[c] = t + (cost ? cost : 1);
				r.n[c]++;
				len++;
			} else if (what < 9) {
				uint32_t got, peeked = 0, best_c = FQ_CLASSES;
				uint32_t len_before = wait_queue_len(&q);
				int peek_ret = wait_queue_peek(&q, &peeked);
				int ret;

				/* peek leaves the queue as it was and names
				 * what pop serves */
				assert_int_equal(wait_queue_len(&q), len_before);
				ret = wait_queue_pop(&q, &got);
				assert_int_equal(peek_ret, ret);
				if (!ret)
					assert_int_equal(peeked, got);

				for (uint32_t c = 0; c < FQ_CLASSES; c++)
					if (r.n[c] && (best_c == FQ_CLASSES ||
						       r.tag[c][0] < r.tag[best_c][0] ||
						       (r.tag[c][0] == r.tag[best_c][0] &&
							r.seq[c][0] < r.seq[best_c][0])))
						best_c = c;
				if (best_c == FQ_CLASSES) {
					assert_int_equal(ret, -ENOENT);
					continue;
				}
				assert_int_equal(ret, 0);
				assert_int_equal(got, r.h[best_c][0]);
				if (r.tag[best_c][0] > r.vtime)
					r.vtime = r.tag[best_c][0];
				fq_ref_del(&r, best_c, 0);
				len--;
			} else if (len) {	/* a client gives up while waiting */
				uint32_t c, i;

				do
					c = rng_below(&rng, FQ_CLASSES);
				while (!r.n[c]);
				i = rng_below(&rng, r.n[c]);
				assert_int_equal(wait_queue_remove(&q, r.h[c][i]), 0);
				fq_ref_del(&r, c, i);
				len--;
			}
			assert_int_equal(wait_queue_len(&q), len);
			assert_int_equal(wait_queue_check(&q), 0);
		}
		wait_queue_release(&q);
	}
}

/* A flood of class 1 queued first; class 2's requests, pushed one at a
 * time, each wait at most one pop. */
static void test_fair_flood(void **state)
{
	struct wait_queue q;
	uint32_t got;

	(void)state;
	queue_init(&q, 256);
	for (uint32_t i = 0; i < 200; i++)
		assert_int_equal(wait_queue_push_class(&q, i, 1, 50), 0);
	for (int k = 0; k < 20; k++) {
		assert_int_equal(wait_queue_push_class(&q, 1000 + k, 2, 50), 0);
		assert_int_equal(wait_queue_pop(&q, &got), 0);
		if (got != 1000u + k) {
			assert_true(got < 200);
			assert_int_equal(wait_queue_pop(&q, &got), 0);
			assert_int_equal(got, 1000 + k);
		}
	}
	wait_queue_release(&q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty_and_full),
		cmocka_unit_test(test_check_detects_corruption),
		cmocka_unit_test(test_random_vs_fifo),
		cmocka_unit_test(test_full_laps),
		cmocka_unit_test(test_fair_vs_reference),
		cmocka_unit_test(test_fair_flood),
	};

	test_seed_init("wait_queue");
	return cmocka_run_group_tests_name("wait_queue", tests, NULL, NULL);
}
