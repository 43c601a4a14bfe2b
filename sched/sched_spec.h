/*
 * sched_spec.h - speculation's counts (docs/DESIGN.md 2.7) as the
 * scheduler keeps them: from a worker's result (untrusted, for stats
 * only, each figure capped) or from the in-process runner (trusted).
 */
#ifndef DYNBATCH_SCHED_SPEC_H
#define DYNBATCH_SCHED_SPEC_H

#include <stdint.h>

struct shard_checked;
struct model_runner;

struct sched_spec_counts {
	uint64_t drafted, accepted, emitted;	/* tokens */
	uint64_t rows;			/* row-steps that checked guesses */
	uint64_t steps;			/* steps in which some row guessed */
	uint64_t draft_ns, verify_ns;
};

/* Add what checked result c says its step guessed, for a shard of
 * n_slots whose rows get at most emit tokens a result; step_cap caps
 * its times. */
void sched_spec_count_result(struct sched_spec_counts *sp, uint32_t n_slots,
			     uint32_t emit, const struct shard_checked *c,
			     uint64_t step_cap);

/* --workers 0: take the runner's counts as they are. */
void sched_spec_count_runner(struct sched_spec_counts *sp,
			     const struct model_runner *r);

#endif /* DYNBATCH_SCHED_SPEC_H */
