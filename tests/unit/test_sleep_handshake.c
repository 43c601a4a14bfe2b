/*
 * test_sleep_handshake.c - sleep_handshake.h on two threads: no wake-up
 * is ever lost.
 *
 * A publisher posts rounds 1..N (a release store of the round number);
 * after each it asks sleep_handshake_check() whether the sleeper needs
 * waking and, if so, bumps a futex word and FUTEX_WAKEs it, as the
 * coordinator wakes a worker.  The sleeper waits for each round: it spins
 * a random while, reads the futex word, announces with
 * sleep_handshake_announce() (whose re-check looks at the round), and
 * sleeps in FUTEX_WAIT on that word with a short timeout.  Random delays
 * on both sides move the two threads' steps across each other; every
 * 32nd round the sleeper first waits awake for up to a millisecond.
 *
 * A lost wake-up is a sleep that times out although the publisher has
 * already posted the round and made its decision (it has set `decided`
 * to that round): then nothing will wake the sleeper, and without the
 * timeout it would sleep for ever.  The test counts those and asserts
 * there are none; it also asserts that the sleeper did sleep and that
 * the publisher skipped the wake-up when the sleeper was awake (a busy
 * pair stays out of the kernel).
 *
 * HANDSHAKE_BREAK=fence (no fences, relaxed flag store) or
 * HANDSHAKE_BREAK=recheck (no look after the announcement) runs the same
 * test on a broken handshake, to show that the test can fail: it then
 * counts lost wake-ups and fails.  ROUNDS= sets N (default 50000).
 * Randomized: the seed is printed, SEED= replays the delays (not the
 * threads' timing).
 */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/clock.h"
#include "util/sleep_handshake.h"
#include "tests/unit/test_rng.h"

#define SLEEP_TIMEOUT_NS (20ull * 1000 * 1000)	/* a lost wake-up shows up */
#define MAX_LOST 20u		/* a broken handshake: stop counting */

/* The two halves, real or broken (HANDSHAKE_BREAK). */
struct handshake_ops {
	bool (*announce)(_Atomic uint32_t *flag, uint32_t how,
			 bool (*ready)(const void *), const void *arg);
	uint32_t (*check)(_Atomic uint32_t *flag);
};

static bool real_announce(_Atomic uint32_t *flag, uint32_t how,
			  bool (*ready)(const void *), const void *arg)
{
	return sleep_handshake_announce(flag, how, ready, arg);
}

static uint32_t real_check(_Atomic uint32_t *flag)
{
	return sleep_handshake_check(flag);
}

static bool nofence_announce(_Atomic uint32_t *flag, uint32_t how,
			     bool (*ready)(const void *), const void *arg)
{
	atomic_store_explicit(flag, how, memory_order_relaxed);
	return ready(arg);
}

static uint32_t nofence_check(_Atomic uint32_t *flag)
{
	return atomic_load_explicit(flag, memory_order_relaxed);
}

static bool norecheck_announce(_Atomic uint32_t *flag, uint32_t how,
			       bool (*ready)(const void *), const void *arg)
{
	atomic_store_explicit(flag, how, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
	return false;
}

struct pair {
	struct handshake_ops ops;
	uint64_t n_rounds;
	uint64_t seed;
	_Atomic uint64_t posted;	/* publisher: the round published */
	_Atomic uint64_t decided;	/* publisher: the round it decided
					 * to wake for or not */
	_Atomic uint64_t acked;		/* sleeper: the round it saw */
	_Atomic uint32_t sleeping;	/* sleeper: the handshake's flag */
	_Atomic uint32_t wake_word;	/* publisher bumps it to wake */
	/* results */
	uint64_t n_sleeps, n_wakes, n_skipped;	/* each by one thread */
	_Atomic uint64_t n_lost;	/* read by both: stop early */
	_Atomic bool stuck;
};

struct wait_for {
	struct pair *p;
	uint64_t round;
};

static bool round_posted(const void *arg)
{
	const struct wait_for *w = arg;

	return atomic_load_explicit(&w->p->posted, memory_order_acquire) >= w->round;
}

static void spin_for(struct rng *r, unsigned max)
{
	unsigned n = (unsigned)(rng_next(r) % max);

	for (volatile unsigned i = 0; i < n; i++)
		;
}

static void *sleeper_main(void *arg)
{
	struct pair *p = arg;
	struct rng r = rng_for(2);

	for (uint64_t k = 1; k <= p->n_rounds && p->n_lost < MAX_LOST; k++) {
		struct wait_for w = { p, k };
		uint64_t give_up = clock_now_ns() + 10ull * 1000 * 1000 * 1000;

		spin_for(&r, 200);
		/* every 32nd round, wait awake for a while first: the
		 * publisher should then find the flag down and skip the
		 * wake-up */
		if (k % 32 == 0) {
			uint64_t until = clock_now_ns() + 1000 * 1000;

			while (!round_posted(&w) && clock_now_ns() < until)
				sched_yield();
		}
		while (!round_posted(&w)) {
			uint32_t seen = atomic_load_explicit(&p->wake_word,
							     memory_order_acquire);
			struct timespec ts = { 0, (long)SLEEP_TIMEOUT_NS };
			long ret;

			if (p->ops.announce(&p->sleeping, 1, round_posted, &w))
				break;
			p->n_sleeps++;
			ret = syscall(SYS_futex, &p->wake_word, FUTEX_WAIT, seen,
				      &ts, NULL, 0);
			if (ret && errno == ETIMEDOUT &&
			    atomic_load(&p->decided) >= k &&
			    atomic_load(&p->wake_word) == seen)
				p->n_lost++;	/* posted, decided, never woken */
			sleep_handshake_done(&p->sleeping);
			if (clock_now_ns() > give_up) {
				p->stuck = true;
				return NULL;
			}
		}
		sleep_handshake_done(&p->sleeping);
		atomic_store_explicit(&p->acked, k, memory_order_release);
	}
	return NULL;
}

static void *publisher_main(void *arg)
{
	struct pair *p = arg;
	struct rng r = rng_for(3);

	for (uint64_t k = 1; k <= p->n_rounds && p->n_lost < MAX_LOST; k++) {
		uint64_t give_up = clock_now_ns() + 10ull * 1000 * 1000 * 1000;

		spin_for(&r, 400);
		atomic_store_explicit(&p->posted, k, memory_order_release);
		if (p->ops.check(&p->sleeping)) {
			atomic_fetch_add(&p->wake_word, 1);
			syscall(SYS_futex, &p->wake_word, FUTEX_WAKE, 1, NULL, NULL, 0);
			p->n_wakes++;
		} else {
			p->n_skipped++;
		}
		atomic_store(&p->decided, k);
		while (atomic_load_explicit(&p->acked, memory_order_acquire) < k) {
			if (p->stuck || p->n_lost >= MAX_LOST || clock_now_ns() > give_up)
				return NULL;
			sched_yield();
		}
	}
	return NULL;
}

static void test_no_lost_wakeup(void **state)
{
	const char *brk = getenv("HANDSHAKE_BREAK");
	const char *rounds = getenv("ROUNDS");
	struct pair *p = calloc(1, sizeof(*p));
	pthread_t sleeper, publisher;

	(void)state;
	assert_non_null(p);
	p->ops = (struct handshake_ops){ real_announce, real_check };
	if (brk && !strcmp(brk, "fence"))
		p->ops = (struct handshake_ops){ nofence_announce, nofence_check };
	else if (brk && !strcmp(brk, "recheck"))
		p->ops = (struct handshake_ops){ norecheck_announce, real_check };
	p->n_rounds = rounds ? strtoull(rounds, NULL, 10) : 50000;
	assert_int_equal(pthread_create(&sleeper, NULL, sleeper_main, p), 0);
	assert_int_equal(pthread_create(&publisher, NULL, publisher_main, p), 0);
	pthread_join(publisher, NULL);
	pthread_join(sleeper, NULL);
	printf("sleep_handshake%s%s: %llu rounds, %llu sleeps, %llu wake-ups, "
	       "%llu skipped, %llu lost\n", brk ? " broken=" : "", brk ? brk : "",
	       (unsigned long long)atomic_load(&p->acked),
	       (unsigned long long)p->n_sleeps, (unsigned long long)p->n_wakes,
	       (unsigned long long)p->n_skipped, (unsigned long long)atomic_load(&p->n_lost));
	assert_int_equal(atomic_load(&p->n_lost), 0);
	assert_false(atomic_load(&p->stuck));
	assert_int_equal(atomic_load(&p->acked), p->n_rounds);
	/* both paths were taken: the sleeper slept and was woken, and a
	 * publisher that found it awake stayed out of the kernel */
	assert_true(p->n_sleeps > 0);
	assert_true(p->n_wakes > 0);
	assert_true(p->n_skipped > 0);
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_lost_wakeup),
	};

	test_seed_init("sleep_handshake");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
