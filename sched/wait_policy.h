/*
 * wait_policy.h - how the coordinator waits when a round made no progress
 * (docs/DESIGN.md 8): spin on the result rings, doze on a timer, or sleep
 * in io_uring until a worker, the front end or a deadline wakes it.
 *
 * The choice: when every shard that owes results takes a millisecond or
 * more per step, doze for a quarter of the shortest step without spinning
 * (a dozing coordinator is woken only for urgent results); otherwise, when
 * a result is due soon (a shard's typical time between results), spin
 * from just before it; else spin --spin-us.  Then announce
 * coordinator_sleeping through the sleep handshake (sleep_handshake.h),
 * let the front end arrange its own wake-up (before_sleep), and sleep.
 */
#ifndef DYNBATCH_WAIT_POLICY_H
#define DYNBATCH_WAIT_POLICY_H

#include <stdbool.h>
#include <stdint.h>

struct io_ring;
struct sched;

/* What a wait needs besides the scheduler: the loop's ring, how long to
 * spin, and the front end's own wake-up (frontend.h's before_sleep and
 * after_sleep, or NULL), handed down by the engine. */
struct sched_waiter {
	struct io_ring *io;
	uint32_t spin_us;		/* --spin-us */
	bool (*before_sleep)(void *ctx);
	void (*after_sleep)(void *ctx);
	void *ctx;
};

/*
 * Wait for something to do, at most until deadline_ns (clock_now_ns()
 * time): a result or an adoption in a channel, an io_uring completion (a
 * worker's notification pipe, a pidfd, the front end's I/O, a signal),
 * the front end's before_sleep() saying it has work, or the deadline.
 * Dispatches the completions it woke for.  0, or io_uring's negative
 * errno (the engine fails).
 */
int sched_wait(struct sched *sc, const struct sched_waiter *w, uint64_t deadline_ns);

#endif
