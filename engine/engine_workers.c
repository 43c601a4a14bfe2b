/*
 * engine_workers.c - the engine's side of its workers' lives: the
 * supervisor (shard/worker_supervisor.c) reports each start, death or
 * timeout as a struct worker_event, and this file applies it to the
 * requests (move them, blame and isolate, a new epoch for the shard) or
 * gives the run up when no worker can be kept alive (docs/DESIGN.md 9).
 */
#include "engine/engine_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine/frontend.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/log_escape.h"

/*
 * A run that can no longer step stops trying but goes on answering:
 * every request, live or still to be read, gets its error line (the front
 * end's -EIO from engine_submit()), and the run exits 1.
 */
void engine_give_up(struct engine *e, const char *fmt, ...)
{
	char msg[sizeof(e->fail_msg) + 32];
	va_list ap;

	if (e->gave_up)
		return;
	va_start(ap, fmt);
	vsnprintf(e->fail_msg, sizeof(e->fail_msg), fmt, ap);
	va_end(ap);
	LOG(LOG_ERROR, "%s", e->fail_msg);
	snprintf(msg, sizeof(msg), "engine failed: %s", e->fail_msg);
	e->gave_up = e->workers_lost = true;
	engine_finish_all(e, FINISH_ERROR, msg);
}

/*
 * Move the shard's active requests to other shards: back to the head of
 * the line (the resume line, ahead of the waiting queue), with the tokens
 * they have, for any live shard to take (the model is a pure function of
 * the prefix, so they go on exactly).  For a shard that cannot keep a
 * worker alive (waiting for it would leave them waiting forever), and
 * after a worker was killed for its own misbehaviour (the next one may be
 * no better).  While draining they are cancelled instead, so that a shard
 * whose workers keep failing cannot hold the drain up.
 */
static void engine_move_requests(struct engine *e, struct shard *s, const char *why)
{
	uint64_t now = clock_now_ns();
	uint32_t moved = 0;

	for (uint32_t i = 0; i < s->n_slots; i++) {
		const struct slot_state *st = &e->slots.slots[s->first_slot + i];
		uint32_t handle = st->request_handle;
		struct live_request *lr;

		if (st->state != SHM_SLOT_ACTIVE ||
		    !(lr = request_pool_get(&e->pool, handle)))
			continue;
		if (e->n_signals) {
			engine_finish(e, handle, FINISH_CANCELLED, e->cfg->keep_running ?
				      "the server is shutting down" : NULL);
			continue;
		}
		engine_unplace(e, handle, lr, now);
		lr->place = LIVE_RESUMING;
		e->resume[e->n_resume++] = handle;	/* room: one per live request */
		e->n_paused++;
		moved++;
	}
	shard_clear_suspects(s);
	if (moved)
		LOG(LOG_WARN, "shard %u: %s; its %u requests move to the other "
		    "shards", s->index, why, moved);
}

/*
 * Blame the rows of the dispatch the dead worker was running (the last
 * one it adopted): several are isolated (run alone, one by one); one that
 * failed alone too often is failed as poison.
 */
static void engine_blame(struct engine *e, struct shard *s,
			 const struct shm_dispatch_row *rows, uint32_t n,
			 const char *why)
{
	if (n > 1) {
		shard_isolate(s, rows, n);
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct slot_state *st = &e->slots.slots[rows[i].slot];
		uint32_t handle = st->request_handle;
		struct live_request *lr = request_pool_get(&e->pool, handle);
		char msg[256];

		if (!lr || st->state != SHM_SLOT_ACTIVE ||
		    st->generation != rows[i].generation)
			continue;
		lr->n_failed_alone++;
		if (lr->n_failed_alone < e->cfg->poison_attempts)
			continue;
		snprintf(msg, sizeof(msg), "line %llu: request failed %u model steps "
			 "on its own (last: worker %s); giving up on it",
			 (unsigned long long)lr->req.line_no, lr->n_failed_alone, why);
		LOG(LOG_WARN, "poison request '%s': %s", LOG_STR(lr->req.id), msg);
		e->stats.n_poisoned++;
		shard_clear_suspect(s, rows[i].slot);
		engine_finish(e, handle, FINISH_ERROR, msg);
	}
}

/* What a worker's start or death means for the shard's requests, in the
 * supervisor's order: blame, move, lost (and when every shard is lost,
 * give up, or a server keeps trying). */
static void engine_apply_worker_event(struct engine *e, struct shard *s,
				      const struct worker_event *ev)
{
	e->sched.counts.n_discarded += ev->n_discarded;
	if (ev->n_blame)
		engine_blame(e, s, ev->blame_rows, ev->n_blame, ev->blame);
	if (ev->move)
		engine_move_requests(e, s, "killed for its results, or stalled "
				     "outside the model");
	if (!ev->lost)
		return;
	engine_move_requests(e, s, ev->lost_why);
	if (!ev->all_lost)
		return;
	if (!e->cfg->keep_running && !e->gave_up) {
		engine_give_up(e, "no worker can be kept alive: %u starts in a row "
			       "failed on every shard (last: %s); check --model and "
			       "the worker's messages above", ev->n_failed_starts, ev->why);
		return;
	}
	if (e->gave_up)
		return;
	/* A server stays up (GET /health says 503) and keeps trying, but
	 * nobody should wait on it meanwhile. */
	if (!e->workers_lost) {
		char msg[256];

		LOG(LOG_ERROR, "no worker can be kept alive (last: %s); failing "
		    "requests until one starts", ev->why);
		snprintf(msg, sizeof(msg), "no worker can be kept alive (last: %s)",
			 ev->why);
		e->workers_lost = true;
		engine_finish_all(e, FINISH_ERROR, msg);
	}
}

/*
 * Before a new worker starts on the shard (none runs now), once the shard
 * has a fresh object (shm_shard_renew: an empty channel, zeroed buffers):
 * the channel and the scheduler start over (nothing draining, a first
 * dispatch with every ACTIVE slot), and the shard's token buffers are
 * rewritten from our own copies of every active request's prompt and
 * committed tokens (the old worker could write them, so they are not
 * trusted).
 */
static void engine_new_epoch(struct engine *e, struct shard *s)
{
	shard_channel_new_epoch(&s->chan);
	shard_new_epoch(&e->sched, s);
	for (uint32_t i = 0; i < s->n_slots; i++) {
		uint32_t slot = s->first_slot + i;
		const struct slot_state *st = &e->slots.slots[slot];
		const struct live_request *lr;
		struct sched_request rq;

		if (st->state != SHM_SLOT_ACTIVE)
			continue;
		lr = request_pool_get(&e->pool, st->request_handle);
		if (!lr || !lr->generated || st->n_prompt != lr->req.n_prompt ||
		    st->n_tokens != st->n_prompt + lr->n_generated) {
			engine_fail(e, "slot %u does not match its request", slot);
			continue;
		}
		/* the whole prefix: only a buggy worker writes below the
		 * committed length, but then the shard's next worker must
		 * not inherit it */
		if (st->n_prompt)
			memcpy(e->slots.tokens[slot], lr->req.prompt,
			       st->n_prompt * sizeof(int32_t));
		memcpy(e->slots.tokens[slot] + st->n_prompt, lr->generated,
		       lr->n_generated * sizeof(int32_t));
		engine_sched_request(lr, &rq);
		shard_write_sampling(&e->sched, slot, &rq);
	}
}

/* Start a worker for the shard (none runs now) on a fresh shard object,
 * and send it what waits.  0 or a negative errno. */
int engine_start_worker(struct engine *e, struct shard *s)
{
	struct worker_event ev;
	int shard_fd, ret;

	ret = worker_sup_renew(&e->sup, s->index, &shard_fd);
	if (!ret)
		engine_new_epoch(e, s);
	ret = worker_sup_spawn(&e->sup, s->index, ret, shard_fd, &ev);
	if (ret) {
		engine_apply_worker_event(e, s, &ev);
		return ret;
	}
	/* Anything already waiting for this shard goes out now. */
	engine_advance(e, s);
	return 0;
}

/* A worker's pidfd became readable (or the poll failed): if it exited,
 * apply what its death means. */
void engine_on_exit_poll(struct io_op *op, int32_t res)
{
	struct shard_worker *w = io_op_owner(op, struct shard_worker, exit_op);
	struct engine *e = op->arg;
	struct worker_event ev;
	struct shard *s;

	if (w->index >= e->n_shards)
		return;
	s = &e->sched.shards[w->index];
	if (worker_sup_reap(&e->sup, w->index, shard_owes_results(&e->sched, s), &ev))
		engine_apply_worker_event(e, s, &ev);
}

/* Start due replacements; kill workers past the start or step timeout.
 * Returns the time of the next such deadline (UINT64_MAX: none). */
uint64_t engine_check_workers(struct engine *e, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	for (uint32_t i = 0; i < e->n_shards && !e->in_process; i++) {
		struct shard *s = &e->sched.shards[i];
		struct worker_check wc;
		bool ready;

		if (!e->failed && !e->gave_up && !(e->n_signals && !e->pool.n_live) &&
		    worker_sup_start_due(&e->sup, i, now) && engine_start_worker(e, s))
			worker_sup_retry_later(&e->sup, i, now);
		wc = (struct worker_check){
			.may_plan = !e->failed && !e->gave_up,
			.owes = shard_owes_results(&e->sched, s),
			.n_active = s->n_active, .n_draining = s->n_draining,
			.redispatch = s->redispatch, .reset = s->reset };
		worker_sup_check(&e->sup, i, now, &wc, &ready, &next);
		if (ready)
			e->workers_lost = false;
	}
	return next;
}
