/*
 * shard_sched.h - the shard scheduler: which rows each shard's worker
 * extends, and which of its results are committed (docs/DESIGN.md 7).
 *
 * Per shard: refill free slots from the resume line and the waiting
 * queue (shard_advance()), publish the rows when they changed, read the
 * result ring and commit each row that continues exactly the committed
 * prefix (shard_poll()), reset the worker's rows after a garbled result,
 * run suspects alone after a fault, and keep the run-ahead bookkeeping
 * (the rows of the last dispatches, which slots are still draining).
 * The worker's life (starting, reaping, blame, timeouts) is
 * worker_supervisor.c's; the requests stay in engine.c: the scheduler
 * hands each committed token to engine_commit_token() and finishes a
 * request it cannot place with engine_finish() (both in
 * engine_internal.h).
 *
 * Everything here runs on the coordinator's loop thread.
 */
#ifndef DYNBATCH_SHARD_SCHED_H
#define DYNBATCH_SHARD_SCHED_H

#include <stdbool.h>
#include <stdint.h>

struct engine;
struct live_request;
struct shard;

/*
 * One engine round for a shard with a worker, after its results were read
 * (shard_poll()): refill the shard's reusable free slots, oldest request
 * first, and publish its rows to the worker if they changed (waking the
 * worker if it said it sleeps).
 */
void shard_advance(struct engine *e, struct shard *s);

/*
 * Read and commit the shard's published results, at most a ring of them
 * per call.  Rejects what does not match what we sent (counted stale or
 * discarded, a reset when the worker's rows drifted), kills a worker whose
 * results keep committing nothing (SHARD_MAX_FRUITLESS, no blame) or whose
 * model reported a failed step, and hands read entries back every half
 * ring.  Returns true when any result was read.
 */
bool shard_poll(struct engine *e, struct shard *s);

/*
 * --workers 0: refill the shard and run one model step on its rows right
 * here, committing the tokens.  Returns true when a step ran.
 */
bool shard_step_in_process(struct engine *e, struct shard *s);

/*
 * Slot (ACTIVE until now) leaves its shard's rows: the engine is freeing
 * it.  The slot is reusable only once the worker can no longer write it
 * (it has adopted a dispatch without the row).
 */
void shard_drop_slot(struct engine *e, uint32_t slot);

/* Write the sampling fields of lr, placed in slot, into the shard's table
 * (shm_segment.h), for its worker; nothing in-process. */
void shard_write_sampling(struct engine *e, uint32_t slot,
			  const struct live_request *lr);

/* Slot ran alone after a fault and is done with (finished or failed):
 * the next suspect runs. */
void shard_clear_suspect(struct shard *s, uint32_t slot);

/* The shard's worker is new or was reset: the prefill progress its rows
 * may claim starts over (engine->slot_prefilled). */
void shard_forget_prefill(struct engine *e, const struct shard *s);

/* SIGKILL the shard's worker, if any; its exit arrives on the pidfd. */
void shard_kill(struct shard *s);

/* SIGKILL it for what it did, not for its requests: nobody is blamed and
 * its rows move to other shards when it exits. */
void shard_kill_misbehaving(struct shard *s, const char *why);

#endif
