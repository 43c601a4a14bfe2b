/*
 * step_plan.h - the step plan under --step-tokens N: how many of its
 * prefix tokens each row may consume per model step (docs/DESIGN.md
 * 11.2).  The scheduler makes it for every dispatch from what it knows
 * of each row (its age, the prefix its worker still has to consume) and
 * the dispatch carries it (shm_dispatch_row.step_consume); the worker's
 * runner only obeys it, as vLLM V1's scheduler decides each request's
 * tokens and its workers execute.
 *
 * The plan: every decoding row (one token or none left to consume) is
 * allowed its token and counts what it has left against N; then rows
 * still consuming their prefix, the oldest request first, each as much
 * of what it has left as the budget still holds, until N is spent; the
 * rest 0 (they wait).  N = 0: no budget, every row all it has.
 *
 * A plan stays in force for every step the worker runs ahead on that
 * dispatch: a prefill row that finishes consumes 1 a step from then on,
 * never more than its allowance, so a step never spends more than N.
 * The scheduler dispatches a new plan when a planned prefill row gets
 * its first token, so the budget it freed goes to the next row.
 */
#ifndef DYNBATCH_STEP_PLAN_H
#define DYNBATCH_STEP_PLAN_H

#include <stdint.h>

/* No budget: a row may consume all it has in one step. */
#define STEP_PLAN_ALL UINT32_MAX

struct step_plan_row {
	uint32_t remaining;	/* prefix tokens still to consume (the
				 * newest committed token included) */
	uint64_t age;		/* admission order: lower is older */
};

/*
 * allow[i] for rows[0 .. n) as above (order: n entries of scratch).
 * Ties in age go to the lower index.
 */
void step_plan(uint32_t step_tokens, const struct step_plan_row *rows,
	       uint32_t n, uint32_t *order, uint32_t *allow);

#endif /* DYNBATCH_STEP_PLAN_H */
