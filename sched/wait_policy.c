/*
 * wait_policy.c - how the coordinator waits when a round made no
 * progress; see wait_policy.h.
 *
 * NOTES ON THE DESIGN (docs/DESIGN.md 8)
 *
 * After a round with no progress the coordinator spins on the result
 * rings (around the time the next result is due, else for spin_us), then
 * sets coordinator_sleeping, fences, looks once more (sleep_handshake.h),
 * and sleeps in io_uring; a worker that publishes a result while the flag
 * is set writes a byte to its own notification pipe (each worker holds
 * the write end of its own pipe only, so none can read, and steal,
 * another's wake-ups), and the front end's before_sleep() arranges its
 * own wake-up (the parser thread's eventfd).  When every step takes a
 * millisecond or more it dozes instead: no spinning, a timer of a quarter
 * step, and only urgent results wake it (engine_doze_ns()).
 *
 * Only sched_wait() is called from outside (by the engine, with the front
 * end's before_sleep/after_sleep as a struct sched_waiter); the rest reads the shards'
 * rings and timings and changes nothing but the coordinator_sleeping
 * flag and the doze count.
 */
#include "sched/wait_policy.h"

#include <sched.h>
#include <string.h>

#include "util/clock.h"
#include "sched/shard_sched.h"
#include "util/sleep_handshake.h"

#define ENGINE_SPIN_AHEAD_NS (250ull * 1000)	/* spin this early for a due result */
#define ENGINE_DOZE_STEP_NS (1000ull * 1000)	/* steps this long: doze, no spin */

/*
 * Has the worker adopted a dispatch we have not acted on, while we wait
 * for exactly that: a slot to drain, or room to send newer rows?
 */
static bool shard_adoption_news(const struct sched *sc, const struct shard *s)
{
	return (s->n_draining || s->redispatch) &&
	       atomic_load_explicit(&shm_channel_at(sc->seg, s->index)->dispatch_adopted,
				    memory_order_acquire) != s->adopted_seen;
}

/* Is there anything for the coordinator in a channel: a result, or an
 * adoption it waits for? */
static bool sched_any_result_ready(const struct sched *sc)
{
	for (uint32_t i = 0; i < sc->n_shards; i++) {
		const struct shard *s = &sc->shards[i];

		if (worker_sup_running(sc->sup, i) && (shard_channel_result_ready(&s->chan, sc->seg->hdr,
				shm_channel_at(sc->seg, i)) || shard_adoption_news(sc, s)))
			return true;
	}
	return false;
}

/* sched_any_result_ready() in the form the handshake re-checks. */
static bool sched_recheck_rings(const void *sc)
{
	return sched_any_result_ready(sc);
}

/*
 * When is the next result due?  The earliest over the shards whose worker
 * owes results (last result or dispatch + typical time between results),
 * or UINT64_MAX when none does or nothing is known yet.
 */
static uint64_t engine_next_result_due(const struct sched *sc)
{
	uint64_t due = UINT64_MAX;

	for (uint32_t i = 0; i < sc->n_shards; i++) {
		const struct shard *s = &sc->shards[i];
		uint64_t progress_ns = worker_sup_progress_ns(sc->sup, i);

		if (shard_owes_results(sc, s) && s->step_ewma_ns &&
		    progress_ns + s->step_ewma_ns < due)
			due = progress_ns + s->step_ewma_ns;
	}
	return due;
}

/* Spin on the result rings until one is ready, an event waits, or until. */
static bool engine_spin_until(struct sched *sc, struct io_ring *io, uint64_t until)
{
	unsigned n = 0;

	while (clock_now_ns() < until) {
		if (sched_any_result_ready(sc) || io_ring_has_event(io))
			return true;
		/* Yield now and then: on a small machine a worker may need
		 * this CPU to finish the very step we are waiting for. */
		if ((++n & 63) == 0)
			sched_yield();
		else
			cpu_relax();
	}
	return false;
}

/*
 * Does the shard's next result bring every row to its limit, so that the
 * worker then waits for our next dispatch?  That result we want at once
 * (spinning for it as for short steps); it is the one a refill waits on.
 */
static bool shard_runs_dry_next(const struct sched *sc, const struct shard *s)
{
	for (uint32_t i = 0; i < s->n_slots; i++) {
		uint32_t slot = s->first_slot + i;
		const struct slot_state *st = &sc->slots->slots[slot];

		if (st->state == SHM_SLOT_ACTIVE && st->n_tokens + 1 < sc->slot_limit[slot])
			return false;
	}
	return true;
}

/*
 * How long to doze, or 0.  When every shard that owes results takes
 * ENGINE_DOZE_STEP_NS or more per step, the coordinator does not spin and
 * is not woken for every result: its workers run ahead of it, so a result
 * read a quarter of a step late costs them nothing, while spinning (and
 * up to a wake-up per result) on a machine with fewer CPUs than workers
 * takes the CPU that a worker needs the moment its own model call ends.
 * Results that need an answer at once still wake it (SHM_COORD_DOZING).
 */
static uint64_t engine_doze_ns(const struct sched *sc)
{
	uint64_t shortest = UINT64_MAX;

	for (uint32_t i = 0; i < sc->n_shards; i++) {
		const struct shard *s = &sc->shards[i];

		if (!shard_owes_results(sc, s))
			continue;
		if (s->step_ewma_ns < ENGINE_DOZE_STEP_NS ||	/* 0: not known yet */
		    shard_runs_dry_next(sc, s))
			return 0;
		if (s->step_ewma_ns < shortest)
			shortest = s->step_ewma_ns;
	}
	return shortest == UINT64_MAX ? 0 : shortest / 4;
}

/*
 * Nothing to do right now.  With long steps the coordinator dozes
 * (engine_doze_ns()).  Otherwise: a wake-up from sleep costs 50-150 us on
 * a small VM (docs/DESIGN.md 8.1), so with a result due soon the coordinator
 * sleeps until just before it and then spins (ENGINE_SPIN_AHEAD_NS);
 * otherwise it spins for spin_us, then announces coordinator_sleeping and
 * sleeps in io_uring until a worker's pipe write, an I/O event or the
 * deadline.
 */
int sched_wait(struct sched *sc, const struct sched_waiter *w, uint64_t deadline_ns)
{
	uint64_t now = clock_now_ns();
	uint64_t doze_ns = sc->in_process ? 0 : engine_doze_ns(sc);
	bool want_fe;
	uint64_t timeout;
	int ret;

	if (doze_ns) {
		/* no spinning: the rings are read when the timer fires */
		if (now + doze_ns < deadline_ns)
			deadline_ns = now + doze_ns;
	} else if (!sc->in_process) {
		uint64_t due = engine_next_result_due(sc);

		if (due != UINT64_MAX && due < now + ENGINE_SPIN_AHEAD_NS) {
			if (engine_spin_until(sc, w->io, due + ENGINE_SPIN_AHEAD_NS))
				return 0;
		} else if (engine_spin_until(sc, w->io, now + (uint64_t)w->spin_us * 1000)) {
			return 0;
		}
		if (due != UINT64_MAX && due > now + ENGINE_SPIN_AHEAD_NS &&
		    due - ENGINE_SPIN_AHEAD_NS < deadline_ns)
			deadline_ns = due - ENGINE_SPIN_AHEAD_NS;
	}
	if (!sc->in_process) {
		/* pairs with sleep_handshake_check() in the worker's
		 * worker_wake_coordinator(), after a result or an adoption */
		if (sleep_handshake_announce(shm_coordinator_sleeping(sc->seg),
					     doze_ns ? SHM_COORD_DOZING : SHM_COORD_SLEEPING,
					     sched_recheck_rings, sc)) {
			sleep_handshake_done(shm_coordinator_sleeping(sc->seg));
			return 0;
		}
	}
	/* The front end's work off the loop (the parser thread) wakes us
	 * through the ring, or is ready now. */
	want_fe = w->before_sleep != NULL;
	if (want_fe && w->before_sleep(w->ctx)) {
		w->after_sleep(w->ctx);
		if (!sc->in_process)
			sleep_handshake_done(shm_coordinator_sleeping(sc->seg));
		return 0;
	}
	now = clock_now_ns();
	timeout = deadline_ns <= now ? 1 : deadline_ns - now;
	sc->counts.n_dozes += doze_ns != 0;
	ret = io_ring_wait(w->io, timeout);
	if (want_fe)
		w->after_sleep(w->ctx);
	if (!sc->in_process)
		sleep_handshake_done(shm_coordinator_sleeping(sc->seg));
	if (ret > 0)
		io_ring_dispatch(w->io);
	return ret < 0 ? ret : 0;
}

