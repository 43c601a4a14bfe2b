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
 *
 * step_plan() is the rule alone, on plain rows; struct step_planner is
 * the scheduler's state for it (ages, which slots decode, scratch) and
 * fills a dispatch's rows.
 */
#ifndef DYNBATCH_STEP_PLAN_H
#define DYNBATCH_STEP_PLAN_H

#include <stdbool.h>
#include <stdint.h>

struct shm_dispatch_row;

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

/*
 * The scheduler's planner: what it knows of each slot to plan dispatch
 * rows with, and the plan's scratch.  Owned by struct sched.
 */
struct step_planner {
	uint32_t step_tokens;		/* --step-tokens: budget a step; 0 none */
	uint64_t place_clock;		/* placements so far: ages */
	uint64_t *placed;		/* per slot: its request's placement
					 * (place_clock then): its age */
	bool *decoding;			/* per slot: a token was committed since
					 * it was placed or its prefill was
					 * forgotten: it consumes one a step */
	struct step_plan_row *rows;	/* n_slots scratch each */
	uint32_t *order;
	uint32_t *allow;
};

/* 0 or -ENOMEM (then step_planner_destroy() frees what was made). */
int step_planner_init(struct step_planner *p, uint32_t n_slots,
		      uint32_t step_tokens);
void step_planner_destroy(struct step_planner *p);

/* slot has a new request: the youngest, prefilling. */
void step_planner_place(struct step_planner *p, uint32_t slot);
/* Slots [first, first + n) prefill again (a new worker, a reset). */
void step_planner_forget(struct step_planner *p, uint32_t first, uint32_t n);
/* A token was committed for slot: true when it was its first since it
 * was placed or forgotten and a budget is on, so a new plan is due. */
bool step_planner_commit(struct step_planner *p, uint32_t slot);

/*
 * Each row's step_consume, for rows[0 .. n): what it has left is what
 * prefilled[slot] (the progress its worker reported) and the blocks'
 * kv_cached say, or only kv_cached when fresh (the worker starts over:
 * a reset).
 */
void step_planner_fill(struct step_planner *p, struct shm_dispatch_row *rows,
		       uint32_t n, const uint32_t *prefilled, bool fresh);

#endif /* DYNBATCH_STEP_PLAN_H */
