/*
 * step_plan.c - see step_plan.h.
 */
#include "sched/step_plan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/shm_segment.h"

void step_plan(uint32_t step_tokens, const struct step_plan_row *rows,
	       uint32_t n, uint32_t *order, uint32_t *allow)
{
	uint64_t left = step_tokens ? step_tokens : UINT64_MAX;
	uint32_t n_prefill = 0;

	for (uint32_t i = 0; i < n; i++) {
		if (!step_tokens) {
			allow[i] = STEP_PLAN_ALL;
		} else if (rows[i].remaining <= 1) {	/* decoding */
			allow[i] = 1;
			left = left > rows[i].remaining ? left - rows[i].remaining : 0;
		} else {
			/* insertion by age: a handful of prefill rows a plan */
			uint32_t j = n_prefill++;

			while (j && rows[order[j - 1]].age > rows[i].age) {
				order[j] = order[j - 1];
				j--;
			}
			order[j] = i;
			allow[i] = 0;
		}
	}
	for (uint32_t k = 0; k < n_prefill && left; k++) {
		uint32_t i = order[k];
		uint32_t take = rows[i].remaining < left ? rows[i].remaining :
			       (uint32_t)left;

		allow[i] = take;
		left -= take;
	}
}

int step_planner_init(struct step_planner *p, uint32_t n_slots,
		      uint32_t step_tokens)
{
	size_t n = n_slots ? n_slots : 1;

	memset(p, 0, sizeof(*p));
	p->step_tokens = step_tokens;
	p->placed = calloc(n, sizeof(*p->placed));
	p->decoding = calloc(n, sizeof(*p->decoding));
	p->rows = calloc(n, sizeof(*p->rows));
	p->order = calloc(n, sizeof(*p->order));
	p->allow = calloc(n, sizeof(*p->allow));
	return p->placed && p->decoding && p->rows && p->order && p->allow ?
	       0 : -ENOMEM;
}

void step_planner_destroy(struct step_planner *p)
{
	free(p->placed);
	free(p->decoding);
	free(p->rows);
	free(p->order);
	free(p->allow);
	memset(p, 0, sizeof(*p));
}

void step_planner_place(struct step_planner *p, uint32_t slot)
{
	p->placed[slot] = ++p->place_clock;
	p->decoding[slot] = false;
}

void step_planner_forget(struct step_planner *p, uint32_t first, uint32_t n)
{
	memset(p->decoding + first, 0, n * sizeof(p->decoding[0]));
}

bool step_planner_commit(struct step_planner *p, uint32_t slot)
{
	if (p->decoding[slot])
		return false;
	/* its prefill is done: a new plan gives the budget it had to the
	 * next prefill row */
	p->decoding[slot] = true;
	return p->step_tokens != 0;
}

void step_planner_fill(struct step_planner *p, struct shm_dispatch_row *rows,
		       uint32_t n, const uint32_t *prefilled, bool fresh)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t slot = rows[i].slot, held = rows[i].kv_cached;

		if (!fresh && prefilled[slot] > held)
			held = prefilled[slot];
		if (held >= rows[i].n_tokens)	/* the last one is consumed again */
			held = rows[i].n_tokens ? rows[i].n_tokens - 1 : 0;
		p->rows[i] = (struct step_plan_row){
			.remaining = !fresh && p->decoding[slot] ?
				     1 : rows[i].n_tokens - held,
			.age = p->placed[slot] };
	}
	step_plan(p->step_tokens, p->rows, n, p->order, p->allow);
	for (uint32_t i = 0; i < n; i++)
		rows[i].step_consume = p->allow[i];
}
