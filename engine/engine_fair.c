/*
 * engine_fair.c - tenants' shares of the batch (issue 27 s.2, with
 * --tenants): when the request the waiting queue serves next belongs to
 * a tenant holding fewer slots than another, and no slot is free, that
 * other tenant's newest running request gives its slot up
 * (sched/fair_share.c chooses) and goes back to the waiting queue with
 * the tokens it has.  It resumes exactly as a preempted request does
 * (engine_kv.c): by recompute of its prefix, with the same output.
 * Without tenants the queue has no classes and nothing here runs
 * (engine_fair_due() is one test).
 */
#include "engine/engine_internal.h"

#include <stdlib.h>

#include "sched/fair_share.h"
#include "util/clock.h"
#include "util/log.h"

bool engine_fair_due(const struct engine *e)
{
	/* a resumed request goes first (engine_refill()): not the queue's */
	return wait_queue_classed(&e->queue) && wait_queue_len(&e->queue) &&
	       !e->n_resume && e->slots.n_busy == e->slots.n_slots &&
	       !e->cfg->policy_static;
}

/* The view of the batch the choice reads, built in e's scratch arrays
 * (allocated on first use).  False when out of memory. */
static bool engine_fair_view(struct engine *e, const struct shard *s,
			     struct fair_view *v)
{
	uint32_t n = e->slots.n_slots;

	if (!e->fair_slots) {
		e->fair_slots = calloc(n, sizeof(*e->fair_slots));
		e->fair_counts = calloc(WAIT_QUEUE_CLASSES, sizeof(*e->fair_counts));
		if (!e->fair_slots || !e->fair_counts) {
			free(e->fair_slots);
			free(e->fair_counts);
			e->fair_slots = NULL;
			e->fair_counts = NULL;
			return false;
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct slot_state *st = &e->slots.slots[i];
		const struct live_request *lr = st->state == SHM_SLOT_ACTIVE ?
			request_pool_get(&e->pool, st->request_handle) : NULL;

		e->fair_slots[i] = lr ? (struct fair_slot){ lr->req.queue_class,
							    lr->admitted_ns } :
					(struct fair_slot){ 0, 0 };
	}
	*v = (struct fair_view){ .slots = e->fair_slots, .n_slots = n,
				 .first = s->first_slot, .n_shard = s->n_slots,
				 .n_classes = WAIT_QUEUE_CLASSES,
				 .counts = e->fair_counts };
	return true;
}

bool engine_fair_preempt(struct engine *e, struct shard *s)
{
	const struct live_request *head;
	struct live_request *lr;
	struct fair_view v;
	uint32_t handle, slot;

	/* room for it in the queue: the request it makes way for is
	 * still there */
	if (!engine_fair_due(e) || wait_queue_full(&e->queue) ||
	    wait_queue_peek(&e->queue, &handle) ||
	    !(head = request_pool_get(&e->pool, handle)) ||
	    !engine_fair_view(e, s, &v) ||
	    !fair_share_victim(&v, head->req.queue_class, &slot))
		return false;
	handle = e->slots.slots[slot].request_handle;
	if (!(lr = request_pool_get(&e->pool, handle)))
		return false;	/* the view saw it live: cannot happen */
	/* in-process its tokens are only in the slot it gives up */
	if (!lr->generated && engine_copy_generated(e, lr))
		return false;	/* no memory: it keeps its slot for now */
	engine_unplace(e, handle, lr, clock_now_ns());
	/* charged again what it may still take: it competes anew */
	wait_queue_push_class(&e->queue, handle, lr->req.queue_class,
			      (uint64_t)lr->req.n_prompt + lr->req.max_tokens);
	lr->place = LIVE_QUEUED;
	e->n_fair_preemptions++;
	LOG(LOG_DEBUG, "shard %u: the request in slot %u (tenant class %u) gave "
	    "way to tenant class %u", s->index, slot, lr->req.queue_class,
	    head->req.queue_class);
	return true;
}

void engine_fair_free(struct engine *e)
{
	free(e->fair_slots);
	free(e->fair_counts);
	e->fair_slots = NULL;
	e->fair_counts = NULL;
}
