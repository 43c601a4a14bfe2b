/*
 * engine_refill.c - which waiting request takes a shard's free slot
 * (docs/DESIGN.md 11.2): the resume line first, then the waiting queue,
 * each request routed (engine_kv.c's engine_route()) and placed through
 * the scheduler (shard_place()), or passed over while another request
 * computes its prefix.  The engine's loop (engine.c) calls
 * engine_refill() for each shard that may take requests.
 */
#include "engine/engine_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/request_pool.h"
#include "sched/shard_sched.h"
#include "text/stop_matcher.h"
#include "util/clock.h"

/* The next request for a free slot: a resumed one first (it held a slot
 * before), then the waiting queue.  -ENOENT when there is none. */
static int engine_next_waiting(struct engine *e, uint32_t *handle)
{
	if (e->n_resume) {
		*handle = e->resume[0];
		e->n_resume--;
		memmove(e->resume, e->resume + 1, e->n_resume * sizeof(uint32_t));
		e->n_paused--;
		return 0;
	}
	return wait_queue_pop(&e->queue, handle);
}

void engine_sched_request(const struct live_request *lr,
			  struct sched_request *rq)
{
	*rq = (struct sched_request){
		.prompt = lr->req.prompt, .n_prompt = lr->req.n_prompt,
		.generated = lr->generated, .n_generated = lr->n_generated,
		.max_tokens = lr->req.max_tokens, .choice = lr->req.choice,
		.needs_logits = request_needs_logits(&lr->req),
		.no_spec = lr->req.no_spec || lr->req.grammar,
		.sampling = &lr->req.sampling, .fork_slot = UINT32_MAX };
	if (lr->req.grammar) {
		rq->grammar_source = lr->req.grammar->source;
		rq->grammar_len = lr->req.grammar->len;
		rq->grammar = lr->req.grammar->compiled;
	}
}

/* Put lr into slot (shard_place()).  0, -EINVAL when it does not fit,
 * -ENOMEM. */
static int engine_place(struct engine *e, uint32_t slot, uint32_t handle,
			struct live_request *lr, uint32_t fork_slot)
{
	struct sched_request rq;

	/* with workers, run allocates the private token copy here, when it
	 * is needed; serve has one from submission */
	if (!lr->generated && !e->in_process) {
		lr->generated = malloc((size_t)lr->req.max_tokens * sizeof(int32_t));
		if (!lr->generated)
			return -ENOMEM;
	}
	engine_sched_request(lr, &rq);
	rq.fork_slot = fork_slot;
	/* its other choices wait to fork it (engine_route()) */
	rq.hold_first = lr->req.choice == 0 && lr->req.n_choices > 1;
	return shard_place(&e->sched, slot, handle, &rq);
}

/* Requests one refill may pass over while another request computes
 * their prefix (ROUTE_HOLD): a bound on its work, whatever the queue. */
#define ENGINE_HOLD_SCAN 64
/* A request is held this long at most, whatever it waits for: past it,
 * computing its prefix a second time is the lesser cost (and a bug in
 * the wait can only cost time, never a hang). */
#define ENGINE_HOLD_MAX_NS (5 * 1000000000ull)

/* Slot is lr's now (engine_place() said yes). */
static void engine_note_placed(struct engine *e, uint32_t slot,
			       struct live_request *lr, uint64_t *now)
{
	if (!*now)
		*now = clock_now_ns();
	lr->slot = slot;
	lr->place = LIVE_ACTIVE;
	lr->held_ns = 0;	/* a new wait if it is preempted */
	if (e->slot_freed_ns[slot]) {
		e->stats.refill_ns_sum += *now - e->slot_freed_ns[slot];
		e->stats.n_refills++;
	}
	if (lr->started_ns)	/* resumed: its stop cursor carries on */
		return;
	lr->started_ns = *now;
	lr->matcher_state = STOP_MATCHER_ROOT;
}

/*
 * Fill the shard's free slots from the resume line and the waiting
 * queue, in the slots the scheduler names: FIFO, except that a request
 * another one is computing the prefix of is passed over (ROUTE_HOLD,
 * up to ENGINE_HOLD_SCAN a call) and goes back to the head of the line,
 * in its order, ahead of everyone it was passed for: it waits only until
 * that request's next commit (docs/DESIGN.md 11.2).
 */
void engine_refill(struct engine *e, struct shard *s)
{
	uint32_t held[ENGINE_HOLD_SCAN], n_held = 0;
	uint32_t cursor = 0, slot, handle, fork_slot;
	enum engine_route way;
	uint64_t now = 0;
	bool have_slot;
	int ret;

	if (!shard_refill_begin(&e->sched, s))
		return;
	have_slot = shard_refill_next(&e->sched, s, &cursor, &slot);
	while (have_slot) {
		struct live_request *lr;

		if (engine_next_waiting(e, &handle))
			break;
		lr = request_pool_get(&e->pool, handle);
		if (!lr) {
			engine_fail(e, "waiting queue held a bad handle %u", handle);
			break;
		}
		lr->place = LIVE_UNPLACED;	/* off the queue, not yet in a slot */
		way = engine_route(e, s, handle, lr, &fork_slot);
		if (way == ROUTE_HOLD) {
			if (!now)
				now = clock_now_ns();
			if (!lr->held_ns)
				lr->held_ns = now;
			if (now - lr->held_ns > ENGINE_HOLD_MAX_NS)
				way = ROUTE_HERE;
		}
		if (way == ROUTE_HOLD && n_held < ENGINE_HOLD_SCAN) {
			held[n_held++] = handle;	/* the slot goes to the next */
			continue;
		}
		ret = way == ROUTE_HERE ? engine_place(e, slot, handle, lr, fork_slot) :
		      -ENOSPC;
		if (ret == -ENOSPC) {	/* no KV blocks for it now, or it is to
					 * go elsewhere or wait: first in line
					 * still (FIFO holds) */
			engine_requeue_front(e, handle, lr);
			break;
		}
		if (ret) {
			engine_finish(e, handle, FINISH_ERROR, ret == -ENOMEM ?
				      "out of memory placing the request" :
				      "prompt does not fit a slot");
			continue;
		}
		engine_note_placed(e, slot, lr, &now);
		have_slot = shard_refill_next(&e->sched, s, &cursor, &slot);
	}
	/* the held are older than whoever is at the head now */
	while (n_held--)
		engine_requeue_front(e, held[n_held],
				     request_pool_get(&e->pool, held[n_held]));
}

