/*
 * slot_table.c - see slot_table.h.
 */
#include "sched/slot_table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void slot_publish(struct slot_table *t, uint32_t slot)
{
	struct shm_slot *s = shm_slot_at(t->seg, slot);
	const struct slot_state *p = &t->slots[slot];

	s->state = p->state;
	s->request_handle = p->request_handle;
	s->n_tokens = p->n_tokens;
	s->n_prompt = p->n_prompt;
	atomic_store_explicit(&s->generation, p->generation, memory_order_release);
}

int slot_table_init(struct slot_table *t, const struct shm_segment *seg)
{
	memset(t, 0, sizeof(*t));
	t->seg = seg;
	t->n_slots = seg->hdr->n_slots;
	t->max_context = seg->hdr->max_context;
	t->slots = calloc(t->n_slots, sizeof(*t->slots));
	t->tokens = calloc(t->n_slots, sizeof(*t->tokens));
	if (!t->slots || !t->tokens) {
		slot_table_release_all(t);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < t->n_slots; i++) {
		t->tokens[i] = shm_tokens_at(seg, i);
		slot_publish(t, i);
	}
	return 0;
}

void slot_table_release_all(struct slot_table *t)
{
	free(t->slots);
	free(t->tokens);
	t->slots = NULL;
	t->tokens = NULL;
}

int slot_table_assign(struct slot_table *t, uint32_t slot, uint32_t handle,
		      const int32_t *prompt, uint32_t n_prompt)
{
	struct slot_state *p;

	if (slot >= t->n_slots || t->slots[slot].state != SHM_SLOT_FREE ||
	    n_prompt > t->max_context)
		return -EINVAL;
	p = &t->slots[slot];
	if (n_prompt)
		memcpy(t->tokens[slot], prompt, n_prompt * sizeof(int32_t));
	p->state = SHM_SLOT_ACTIVE;
	p->generation++;
	p->request_handle = handle;
	p->n_tokens = n_prompt;
	p->n_prompt = n_prompt;
	t->n_busy++;
	slot_publish(t, slot);
	return 0;
}

int slot_table_append(struct slot_table *t, uint32_t slot, int32_t token)
{
	struct slot_state *p = &t->slots[slot];

	if (p->n_tokens >= t->max_context)
		return -ENOSPC;
	t->tokens[slot][p->n_tokens++] = token;
	shm_slot_at(t->seg, slot)->n_tokens = p->n_tokens;
	return 0;
}

int slot_table_commit(struct slot_table *t, uint32_t slot)
{
	struct slot_state *p = &t->slots[slot];

	if (p->n_tokens >= t->max_context)
		return -ENOSPC;
	p->n_tokens++;
	shm_slot_at(t->seg, slot)->n_tokens = p->n_tokens;
	return 0;
}

void slot_table_release(struct slot_table *t, uint32_t slot)
{
	struct slot_state *p = &t->slots[slot];

	if (p->state != SHM_SLOT_ACTIVE)
		return;
	p->state = SHM_SLOT_FREE;
	p->request_handle = UINT32_MAX;
	t->n_busy--;
	slot_publish(t, slot);
}

int slot_table_check(const struct slot_table *t)
{
	uint32_t busy = 0;

	for (uint32_t i = 0; i < t->n_slots; i++) {
		const struct slot_state *p = &t->slots[i];
		const struct shm_slot *s = shm_slot_at(t->seg, i);

		if (p->state == SHM_SLOT_ACTIVE)
			busy++;
		else if (p->state != SHM_SLOT_FREE)
			return -EINVAL;
		if (p->n_prompt > p->n_tokens || p->n_tokens > t->max_context ||
		    s->state != p->state || s->generation != p->generation)
			return -EINVAL;
	}
	return busy == t->n_busy ? 0 : -EINVAL;
}
