/*
 * worker_supervisor.h - the workers' lives (docs/DESIGN.md 9): starting a
 * shard's worker, its start and step timeouts, its death, blame and
 * restarts, lost shards, giving up.  What engine.c calls; engine_give_up()
 * is declared in engine_internal.h (shard_sched.c calls it too).
 *
 * Everything here runs on the coordinator's loop thread.
 */
#ifndef DYNBATCH_WORKER_SUPERVISOR_H
#define DYNBATCH_WORKER_SUPERVISOR_H

#include <stdint.h>

struct engine;
struct shard;

/* Start a worker for the shard (none runs now) on a fresh shard object
 * and notification pipe, and watch its pidfd.  0 or a negative errno (a
 * failed start counts towards losing the shard). */
int shard_start_worker(struct engine *e, struct shard *s);

/* Shard index's pidfd became readable: reap its worker, blame, schedule
 * a restart (or poll again if it has not exited). */
void engine_handle_pidfd(struct engine *e, uint32_t index);

/* Start due replacements; kill workers past the start or step timeout.
 * Returns the time of the next such deadline (UINT64_MAX: none). */
uint64_t engine_check_workers(struct engine *e, uint64_t now);

#endif
