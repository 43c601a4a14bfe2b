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
 * The random test prints its seed; SEED=<n> replays a run.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty_and_full),
		cmocka_unit_test(test_check_detects_corruption),
		cmocka_unit_test(test_random_vs_fifo),
		cmocka_unit_test(test_full_laps),
	};

	test_seed_init("wait_queue");
	return cmocka_run_group_tests_name("wait_queue", tests, NULL, NULL);
}
