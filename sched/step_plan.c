/*
 * step_plan.c - see step_plan.h.
 */
#include "sched/step_plan.h"

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
