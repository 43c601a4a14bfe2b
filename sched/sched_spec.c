/*
 * sched_spec.c - speculation's counts; see sched_spec.h.
 */
#include "sched/sched_spec.h"

#include "model/model_runner.h"
#include "shard/shard_channel.h"

/*
 * A worker's word on what speculation did in a step: stats only, each
 * figure capped by what the step could have done, so a lying worker
 * skews its own numbers and nothing else.
 */
void sched_spec_count_result(struct sched_spec_counts *sp, uint32_t n_slots,
			     uint32_t emit, const struct shard_checked *c,
			     uint64_t step_cap)
{
	uint64_t rows = c->spec_rows < n_slots ? c->spec_rows : n_slots;
	uint64_t most = rows * (emit - 1);
	uint64_t drafted = c->spec_drafted < most ? c->spec_drafted : most;

	if (!rows || !drafted)
		return;
	sp->rows += rows;
	sp->drafted += drafted;
	sp->accepted += c->spec_accepted < drafted ? c->spec_accepted : drafted;
	sp->emitted += c->spec_emitted < drafted + rows ? c->spec_emitted :
						      drafted + rows;
	sp->steps++;
	sp->verify_ns += c->model_ns < step_cap ? c->model_ns : step_cap;
	sp->draft_ns += c->spec_draft_ns < step_cap ? c->spec_draft_ns : step_cap;
}

void sched_spec_count_runner(struct sched_spec_counts *sp,
			     const struct model_runner *r)
{
	struct runner_spec_counts c = model_runner_spec_counts(r);

	*sp = (struct sched_spec_counts){
		.drafted = c.drafted, .accepted = c.accepted, .emitted = c.emitted,
		.rows = c.verify_rows, .steps = c.steps, .draft_ns = c.draft_ns,
		.verify_ns = c.verify_ns };
}
