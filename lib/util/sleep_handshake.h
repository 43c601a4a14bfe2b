/*
 * sleep_handshake.h - "set the sleeping flag, fence, look again": the one
 * place that decides whether a sleeper may sleep and whether a publisher
 * must wake it.  Used by the worker (worker_wait(), sleeping on its
 * channel's futex word), the coordinator (sched_wait(), sleeping in
 * io_uring) and the parser thread (sleeping on its semaphore) and by the
 * sides that wake them.  Each site keeps its own wake mechanism (futex,
 * pipe, eventfd, semaphore); only the flag and the fences live here.
 *
 * The two halves:
 *
 *   sleeper                               publisher
 *   -------                               ---------
 *   flag = how        (relaxed)           data = new  (release, its own)
 *   fence seq_cst     (F1)                fence seq_cst           (F2)
 *   if ready(): don't sleep               if flag != 0: wake the sleeper
 *   else sleep
 *
 * Why no wake-up is lost: the two seq_cst fences F1 and F2 are totally
 * ordered.  If F1 comes first, the flag store (before F1) is visible to
 * the publisher's flag load (after F2): it wakes the sleeper.  If F2
 * comes first, the data store (before F2) is visible to the sleeper's
 * re-check (after F1): it does not sleep.  Either way one side sees the
 * other.  Without the fences a store may sit in a CPU's store buffer past
 * the following load (x86 does that too), so both could read the old
 * value: the sleeper sleeps on data it never saw and nobody wakes it.
 * The sleeper's mechanism must also not miss a wake that comes between
 * its re-check and its sleep (a futex compare word read before the
 * announcement, an eventfd's or a pipe's counter, a semaphore's count).
 *
 * A busy pair never enters the kernel: the publisher's cost is a fence
 * and a load of a flag that is 0 while the other side is awake.  Clearing
 * the flag (sleep_handshake_done()) needs no ordering: a publisher that
 * still sees it set only wakes a sleeper that is awake already.
 *
 * tests/unit/test_sleep_handshake.c drives both halves on two threads.
 */
#ifndef DYNBATCH_SLEEP_HANDSHAKE_H
#define DYNBATCH_SLEEP_HANDSHAKE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/*
 * Sleeper: announce how we sleep (any non-zero value; the publisher gets
 * it back from sleep_handshake_check()), fence, and look once more with
 * ready(arg).  Returns ready()'s answer: true means do not sleep (the
 * flag is still up: take it down with sleep_handshake_done()); false
 * means sleep now, a publisher from here on sees the flag.
 */
static inline bool sleep_handshake_announce(_Atomic uint32_t *flag, uint32_t how,
					    bool (*ready)(const void *arg),
					    const void *arg)
{
	atomic_store_explicit(flag, how, memory_order_relaxed);
	/* F1: pairs with F2 in sleep_handshake_check() */
	atomic_thread_fence(memory_order_seq_cst);
	return ready(arg);
}

/* Sleeper: awake again (or never slept). */
static inline void sleep_handshake_done(_Atomic uint32_t *flag)
{
	atomic_store_explicit(flag, 0, memory_order_relaxed);
}

/*
 * Publisher: call after publishing what the sleeper waits for.  Returns
 * the flag: 0 when the sleeper is awake (no wake-up needed), else what it
 * announced, and the caller wakes it through its own mechanism.
 */
static inline uint32_t sleep_handshake_check(_Atomic uint32_t *flag)
{
	/* F2: pairs with F1 in sleep_handshake_announce() */
	atomic_thread_fence(memory_order_seq_cst);
	return atomic_load_explicit(flag, memory_order_relaxed);
}

#endif
