/*
 * fair_share.h - which running request gives its slot up so that a
 * waiting tenant gets its share of the batch (issue 27 s.2): the waiting
 * queue orders tenants fairly, but once one tenant holds every slot the
 * others would wait for a whole generation of its to end.
 *
 * The rule, tenants weighing the same: let h be the tenant of the request
 * the waiting queue serves next and r(c) the slots tenant c holds in the
 * whole batch.  Among the other tenants with a request in the shard, the
 * one holding the most slots, v, gives one up when r(v) >= r(h) + 2, so
 * that after the move h still holds fewer than v: each move makes the
 * split more even (r(v)^2 + r(h)^2 falls), so moves never undo each
 * other, and they stop at an even split among the tenants that want
 * slots.  v's request given up is the one admitted last (vLLM's order:
 * it has waited least), the lowest slot among equals; among tenants
 * holding as many slots, the one with that newest request.  Class 0 (no
 * tenant) neither takes nor gives.
 *
 * Plain data in, a slot out: the engine builds the view and applies the
 * choice (engine/engine_fair.c).
 */
#ifndef DYNBATCH_FAIR_SHARE_H
#define DYNBATCH_FAIR_SHARE_H

#include <stdbool.h>
#include <stdint.h>

/* One slot as the choice sees it. */
struct fair_slot {
	uint32_t class_id;		/* its request's tenant class; 0: free
					 * or a request of no tenant */
	uint64_t admitted_ns;		/* when its request was admitted */
};

/* The batch's slots [0, n_slots); the shard's are [first, first +
 * n_shard). */
struct fair_view {
	const struct fair_slot *slots;
	uint32_t n_slots;
	uint32_t first;
	uint32_t n_shard;
	uint32_t n_classes;		/* classes >= this count as 0 */
	uint32_t *counts;		/* n_classes zeros, scratch: zeros again
					 * on return */
};

/* The shard's slot whose request is to give way to a waiting request
 * of class head_class (*victim); false when none is to. */
bool fair_share_victim(const struct fair_view *v, uint32_t head_class,
		       uint32_t *victim);

#endif /* DYNBATCH_FAIR_SHARE_H */
