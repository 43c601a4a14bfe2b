/*
 * test_fair_share.c - which running request gives way to a waiting
 * tenant (sched/fair_share.h), against a naive reference written from
 * the rule: count each tenant's slots, keep the tenants of the shard
 * holding at least two more than the waiting one, take the one holding
 * most (its newest request first among equals), then its newest request
 * (the lowest slot among equals).
 *
 * Random batches (1..64 slots, a random shard among them, classes out of
 * range and class 0 mixed in, few distinct admission stamps so that ties
 * are common) against the reference; the scratch counts must be zeros
 * again after each call.  Then the rule's promise: applying the choice
 * over and over, for random waiting tenants, never undoes a move (the
 * sum of squared counts falls each time) and ends within a bounded
 * number of moves with no tenant holding two more than a waiting one.
 *
 * The random tests print their seed; SEED=<n> replays a run.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "sched/fair_share.h"
#include "tests/unit/test_rng.h"

#define MAX_SLOTS 64
#define MAX_CLASSES 12

/* The rule, the slow way: a tenant first, then its request. */
static bool ref_victim(const struct fair_slot *slots, uint32_t n_slots,
		       uint32_t first, uint32_t n_shard, uint32_t n_classes,
		       uint32_t head, uint32_t *victim)
{
	uint32_t count[MAX_CLASSES + 2] = { 0 };
	uint32_t best_class = 0, best_slot = UINT32_MAX;

	if (head == 0 || head >= n_classes)
		return false;
	for (uint32_t i = 0; i < n_slots; i++)
		if (slots[i].class_id < n_classes)
			count[slots[i].class_id]++;
	for (uint32_t c = 1; c < n_classes; c++) {
		uint32_t newest = UINT32_MAX;

		if (c == head || count[c] < count[head] + 2)
			continue;
		/* c's newest request in the shard, the lowest slot of equals */
		for (uint32_t i = first; i < first + n_shard; i++)
			if (slots[i].class_id == c &&
			    (newest == UINT32_MAX ||
			     slots[i].admitted_ns > slots[newest].admitted_ns))
				newest = i;
		if (newest == UINT32_MAX)
			continue;	/* none of c's requests is in the shard */
		if (best_slot == UINT32_MAX || count[c] > count[best_class] ||
		    (count[c] == count[best_class] &&
		     (slots[newest].admitted_ns > slots[best_slot].admitted_ns ||
		      (slots[newest].admitted_ns == slots[best_slot].admitted_ns &&
		       newest < best_slot)))) {
			best_class = c;
			best_slot = newest;
		}
	}
	*victim = best_slot;
	return best_slot != UINT32_MAX;
}

static void random_batch(struct rng *rng, struct fair_slot *slots,
			 uint32_t n_slots, uint32_t n_classes)
{
	uint32_t n_stamps = 1 + rng_below(rng, 6);

	for (uint32_t i = 0; i < n_slots; i++) {
		/* mostly tenants, some free or of no tenant, a few beyond
		 * the classes (counted as none) */
		uint32_t what = rng_below(rng, 10);

		slots[i].class_id = what < 7 ? 1 + rng_below(rng, n_classes - 1) :
				    what < 9 ? 0 : n_classes + rng_below(rng, 2);
		slots[i].admitted_ns = 1000 + rng_below(rng, n_stamps);
	}
}

static void assert_zeros(const uint32_t *counts, uint32_t n)
{
	for (uint32_t c = 0; c < n; c++)
		assert_int_equal(counts[c], 0);
}

static void test_vs_reference(void **state)
{
	struct rng rng = rng_for(1);
	struct fair_slot slots[MAX_SLOTS];
	uint32_t counts[MAX_CLASSES + 2] = { 0 };
	uint32_t n_chosen = 0;

	(void)state;
	for (int round = 0; round < 20000; round++) {
		uint32_t n_slots = 1 + rng_below(&rng, MAX_SLOTS);
		uint32_t n_classes = 2 + rng_below(&rng, MAX_CLASSES - 1);
		uint32_t first = rng_below(&rng, n_slots);
		uint32_t n_shard = 1 + rng_below(&rng, n_slots - first);
		uint32_t head = rng_below(&rng, n_classes + 2);
		struct fair_view v = { slots, n_slots, first, n_shard, n_classes, counts };
		uint32_t got = 7777, want = 8888;
		bool got_one, want_one;

		random_batch(&rng, slots, n_slots, n_classes);
		got_one = fair_share_victim(&v, head, &got);
		want_one = ref_victim(slots, n_slots, first, n_shard, n_classes,
				      head, &want);
		if (got_one != want_one || (want_one && got != want))
			fail_msg("round %d: %u slots, shard [%u, %u), %u classes, "
				 "head %u: got %d slot %u, want %d slot %u", round,
				 n_slots, first, first + n_shard, n_classes, head,
				 got_one, got, want_one, want);
		assert_zeros(counts, n_classes);
		if (got_one) {
			n_chosen++;
			assert_true(got >= first && got < first + n_shard);
			assert_int_not_equal(slots[got].class_id, 0);
			assert_int_not_equal(slots[got].class_id, head);
		}
	}
	/* the random batches must exercise both answers */
	assert_true(n_chosen > 1000 && n_chosen < 19000);
}

/* Hand-worked: one tenant holds all 8 slots, another waits. */
static void test_flood_gives_way(void **state)
{
	struct fair_slot slots[8];
	uint32_t counts[4] = { 0 }, victim;
	struct fair_view v = { slots, 8, 0, 8, 4, counts };

	(void)state;
	for (uint32_t i = 0; i < 8; i++)
		slots[i] = (struct fair_slot){ 1, 100 + i * 7 % 8 };
	/* 100 + 7*i mod 8: slot 1 is newest (107) */
	assert_true(fair_share_victim(&v, 2, &victim));
	assert_int_equal(victim, 1);
	/* the waiting tenant holds 6: no move (8 - 6 < 2 after one) */
	for (uint32_t i = 0; i < 6; i++)
		slots[i].class_id = 2;
	assert_false(fair_share_victim(&v, 2, &victim));
	/* 5 against 3: one move, to 4 each, of tenant 2's newest (slot 1,
	 * 107, of slots 0..4) */
	slots[5].class_id = 1;
	assert_true(fair_share_victim(&v, 1, &victim));
	assert_int_equal(victim, 1);
	slots[1].class_id = 1;
	assert_false(fair_share_victim(&v, 1, &victim));
	assert_false(fair_share_victim(&v, 2, &victim));
	/* no tenant, or the tenant itself, never takes */
	assert_false(fair_share_victim(&v, 0, &victim));
	assert_false(fair_share_victim(&v, 4, &victim));
	/* a batch of one slot never moves */
	v.n_slots = v.n_shard = 1;
	assert_false(fair_share_victim(&v, 2, &victim));
	assert_zeros(counts, 4);
}

/* Applying the choice for random waiting tenants: every move lowers the
 * sum of squared counts, and the moves end with no tenant of the shard
 * holding two more than any tenant that waits. */
static void test_moves_converge(void **state)
{
	struct rng rng = rng_for(2);
	struct fair_slot slots[MAX_SLOTS];
	uint32_t counts[MAX_CLASSES + 2] = { 0 };

	(void)state;
	for (int round = 0; round < 2000; round++) {
		uint32_t n_slots = 1 + rng_below(&rng, MAX_SLOTS);
		uint32_t n_classes = 2 + rng_below(&rng, MAX_CLASSES - 1);
		struct fair_view v = { slots, n_slots, 0, n_slots, n_classes, counts };
		uint64_t stamp = 5000, moves = 0;
		bool moved = true;

		random_batch(&rng, slots, n_slots, n_classes);
		while (moved) {
			uint64_t before = 0, after = 0;
			uint32_t c[MAX_CLASSES + 2] = { 0 }, victim;

			moved = false;
			/* every tenant waits: any may be served next */
			for (uint32_t h = 1; h < n_classes && !moved; h++) {
				uint32_t head = 1 + (h + (uint32_t)round) % (n_classes - 1);

				if (!fair_share_victim(&v, head, &victim))
					continue;
				for (uint32_t i = 0; i < n_slots; i++)
					if (slots[i].class_id < n_classes)
						c[slots[i].class_id]++;
				for (uint32_t k = 1; k < n_classes; k++)
					before += (uint64_t)c[k] * c[k];
				slots[victim] = (struct fair_slot){ head, stamp++ };
				memset(c, 0, sizeof(c));
				for (uint32_t i = 0; i < n_slots; i++)
					if (slots[i].class_id < n_classes)
						c[slots[i].class_id]++;
				for (uint32_t k = 1; k < n_classes; k++)
					after += (uint64_t)c[k] * c[k];
				assert_true(after < before);
				moved = true;
				moves++;
			}
			assert_true(moves <= (uint64_t)n_slots * n_slots);
		}
		/* at rest: for every pair of tenants, no move is due */
		for (uint32_t h = 1; h < n_classes; h++) {
			uint32_t victim;

			assert_false(fair_share_victim(&v, h, &victim));
		}
		assert_zeros(counts, n_classes);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_flood_gives_way),
		cmocka_unit_test(test_vs_reference),
		cmocka_unit_test(test_moves_converge),
	};

	test_seed_init("test_fair_share");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
