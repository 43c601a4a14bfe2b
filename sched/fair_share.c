/*
 * fair_share.c - see fair_share.h.  Two passes over the slots: count
 * each class's slots, then pick the shard's victim; a third puts the
 * counts back to zero, so a call costs O(slots) whatever the classes.
 */
#include "sched/fair_share.h"

/* Is slot i's request a better victim than the best so far? */
static bool fair_better(const struct fair_view *v, uint32_t i, uint32_t best)
{
	uint32_t ci = v->slots[i].class_id, cb = v->slots[best].class_id;

	if (v->counts[ci] != v->counts[cb])
		return v->counts[ci] > v->counts[cb];
	/* the newest; the lowest slot among equals (i > best) */
	return v->slots[i].admitted_ns > v->slots[best].admitted_ns;
}

bool fair_share_victim(const struct fair_view *v, uint32_t head_class,
		       uint32_t *victim)
{
	uint32_t best = UINT32_MAX, need;

	if (!head_class || head_class >= v->n_classes)
		return false;
	for (uint32_t i = 0; i < v->n_slots; i++)
		if (v->slots[i].class_id < v->n_classes)
			v->counts[v->slots[i].class_id]++;
	need = v->counts[head_class] + 2;
	for (uint32_t i = v->first; i < v->first + v->n_shard; i++) {
		uint32_t c = v->slots[i].class_id;

		if (!c || c >= v->n_classes || c == head_class || v->counts[c] < need)
			continue;
		if (best == UINT32_MAX || fair_better(v, i, best))
			best = i;
	}
	for (uint32_t i = 0; i < v->n_slots; i++)
		if (v->slots[i].class_id < v->n_classes)
			v->counts[v->slots[i].class_id] = 0;
	*victim = best;
	return best != UINT32_MAX;
}
