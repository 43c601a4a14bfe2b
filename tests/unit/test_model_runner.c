/*
 * test_model_runner.c - the scheduler's step plan (sched/step_plan.c) and
 * the model runner that follows it (lib/model/model_runner.c), together,
 * against a naive planner written here: which tokens each row consumes
 * under a step budget (decoding rows first, then prefill chunks oldest
 * request first), when a row gets its token, what the model may take
 * from its state after a new request, keep() and forget_all(); a row's
 * own allowance obeyed; and the greedy choice.
 *
 * The model is simkv (lib/model/simkv_model.c): it fails a step whose
 * n_cached is above what it consumed and gives a wrong token when the
 * state it is told to use is not the row's prefix, so a runner that
 * vouched for the wrong state shows up in the tokens.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/model_loader.h"
#include "model/model_runner.h"
#include "sched/step_plan.h"
#include "tests/unit/test_rng.h"

#define N_SLOTS 12
#define MAX_CTX 200
#define VOCAB 97

/* The naive planner's view of one slot. */
struct ref_slot {
	uint32_t generation;
	uint32_t consumed;
	uint64_t age;		/* order in which its request was first seen */
	int32_t tokens[MAX_CTX];
	uint32_t n_tokens;	/* the prefix */
	uint32_t limit;
};

static struct model *open_simkv(void)
{
	char err[256];
	struct model *m = model_open("simkv:vocab=97,seed=5", err, sizeof(err));

	assert_non_null(m);
	return m;
}

/*
 * What the naive planner says the step does for rows (slots in
 * rows_slot[0..n)): per row the tokens it holds after the step
 * (want[i]), and whether it gets a token (out[i]).
 */
static void ref_plan(struct ref_slot *rs, const uint32_t *rows_slot, uint32_t n,
		     uint32_t budget, uint32_t *want, bool *out)
{
	uint64_t left = budget ? budget : UINT64_MAX;
	uint32_t remaining[N_SLOTS], done[N_SLOTS] = { 0 };

	for (uint32_t i = 0; i < n; i++) {
		struct ref_slot *s = &rs[rows_slot[i]];
		uint32_t cached = s->consumed == s->n_tokens && s->n_tokens ?
				  s->consumed - 1 : s->consumed;

		remaining[i] = s->n_tokens - cached;
		want[i] = cached;
		out[i] = false;
	}
	for (uint32_t i = 0; i < n; i++) {	/* decoding rows, all of them */
		if (remaining[i] <= 1) {
			want[i] += remaining[i];
			out[i] = true;
			left = left > remaining[i] ? left - remaining[i] : 0;
			done[i] = 1;
		}
	}
	/* then the oldest prefill row, as long as the budget lasts: a full
	 * scan for the oldest each time, not a sort */
	while (left) {
		uint32_t best = UINT32_MAX;

		for (uint32_t i = 0; i < n; i++)
			if (!done[i] && (best == UINT32_MAX ||
					 rs[rows_slot[i]].age < rs[rows_slot[best]].age))
				best = i;
		if (best == UINT32_MAX)
			break;
		done[best] = 1;
		{
			uint32_t take = remaining[best] < left ? remaining[best] : (uint32_t)left;

			want[best] += take;
			out[best] = take == remaining[best];
			left -= take;
		}
	}
}

static void test_budget_against_naive_planner(void **state)
{
	struct rng r = rng_for(1);
	char err[256];

	for (int round = 0; round < 40; round++) {
		struct model *m = open_simkv();	/* bind() is once per model */
		uint32_t budget = rng_below(&r, 3) ? 1 + rng_below(&r, 40) : 0;
		struct model_runner *run = model_runner_create(m, N_SLOTS, MAX_CTX,
							       err, sizeof(err));
		struct ref_slot rs[N_SLOTS] = { { 0 } };
		uint64_t clock = 0;
		uint32_t gen = 0;

		assert_non_null(run);
		for (int step = 0; step < 300; step++) {
			struct runner_row rows[N_SLOTS];
			struct runner_result res[N_SLOTS];
			uint32_t slots[N_SLOTS], want[N_SLOTS], n = 0;
			bool out[N_SLOTS];

			/* now and then a slot gets a new request (a prompt of
			 * 1..120 tokens) or loses its own */
			for (uint32_t s = 0; s < N_SLOTS; s++) {
				if (!rs[s].generation ? rng_below(&r, 4) == 0 :
				    rng_below(&r, 40) == 0) {
					rs[s].generation = ++gen;
					rs[s].consumed = 0;
					rs[s].age = ++clock;
					rs[s].n_tokens = 1 + rng_below(&r, 120);
					rs[s].limit = rs[s].n_tokens + 1 + rng_below(&r, 30);
					for (uint32_t t = 0; t < rs[s].n_tokens; t++)
						rs[s].tokens[t] = (int32_t)rng_below(&r, VOCAB);
				} else if (rs[s].generation && rng_below(&r, 60) == 0) {
					rs[s].generation = 0;
				}
			}
			for (uint32_t s = 0; s < N_SLOTS; s++) {
				if (!rs[s].generation || rs[s].n_tokens >= rs[s].limit)
					continue;
				slots[n] = s;
				rows[n++] = (struct runner_row){
					.slot = s, .generation = rs[s].generation,
					.tokens = rs[s].tokens, .n_tokens = rs[s].n_tokens };
			}
			model_runner_keep(run, n, rows);
			if (rng_below(&r, 50) == 0) {	/* a reset */
				model_runner_forget_all(run);
				for (uint32_t s = 0; s < N_SLOTS; s++)
					rs[s].consumed = 0;
			}
			ref_plan(rs, slots, n, budget, want, out);
			/* the scheduler's plan, from what it knows: each row's
			 * age and what its model still has to consume */
			{
				struct step_plan_row pr[N_SLOTS];
				uint32_t order[N_SLOTS], allow[N_SLOTS];

				for (uint32_t i = 0; i < n; i++) {
					const struct ref_slot *s = &rs[slots[i]];
					uint32_t held = s->consumed == s->n_tokens &&
							s->n_tokens ? s->consumed - 1 :
							s->consumed;

					pr[i] = (struct step_plan_row){
						.remaining = s->n_tokens - held,
						.age = s->age };
				}
				step_plan(budget, pr, n, order, allow);
				for (uint32_t i = 0; i < n; i++)
					rows[i].step_consume = allow[i];
			}
			assert_int_equal(model_runner_step(run, n, rows, res), 0);
			for (uint32_t i = 0; i < n; i++) {
				struct ref_slot *s = &rs[slots[i]];

				if (out[i]) {
					assert_int_equal(res[i].outcome, RUNNER_TOKEN);
					assert_int_equal(res[i].token,
							 sim_next(s->tokens, s->n_tokens, VOCAB, 5));
					s->tokens[s->n_tokens++] = res[i].token;
				} else {
					assert_int_equal(res[i].outcome, RUNNER_PREFILL);
					assert_int_equal(res[i].detail, want[i]);
				}
				s->consumed = want[i];
			}
		}
		model_runner_destroy(run);
		model_close(m);
	}
}

static void test_refusal_and_empty_prompt(void **state)
{
	struct model *m = open_simkv();
	struct model_runner *run;
	struct runner_result res[3];
	int32_t ok[] = { 1, 2, 3 }, bad[] = { 4, 1000 };
	struct runner_row rows[3] = {
		{ .slot = 0, .generation = 1, .tokens = ok, .n_tokens = 0 },
		{ .slot = 1, .generation = 2, .tokens = bad, .n_tokens = 2 },
		{ .slot = 2, .generation = 3, .tokens = ok, .n_tokens = 3 },
	};
	char err[256];

	run = model_runner_create(m, 3, 16, err, sizeof(err));
	for (int i = 0; i < 3; i++)
		rows[i].step_consume = STEP_PLAN_ALL;
	assert_non_null(run);
	assert_int_equal(model_runner_step(run, 3, rows, res), 0);
	assert_int_equal(res[0].outcome, RUNNER_REFUSED);
	assert_int_equal(res[0].detail, DYNBATCH_REFUSE_EMPTY_PROMPT);
	assert_int_equal(res[1].outcome, RUNNER_REFUSED);
	assert_int_equal(res[1].detail, DYNBATCH_REFUSE_TOKEN);
	assert_int_equal(res[2].outcome, RUNNER_TOKEN);	/* its neighbours do not matter */
	assert_int_equal(res[2].token, sim_next(ok, 3, VOCAB, 5));
	model_runner_destroy(run);
	model_close(m);
}

/* A row consumes what it is allowed, never more: 3 a step of its 10,
 * then its token; allowed 0, it waits with nothing consumed. */
static void test_row_allowance_obeyed(void **state)
{
	struct model *m = open_simkv();
	struct model_runner *run;
	struct runner_result res[2];
	int32_t p[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
	struct runner_row rows[2] = {
		{ .slot = 0, .generation = 1, .tokens = p, .n_tokens = 10,
		  .step_consume = 3 },
		{ .slot = 1, .generation = 2, .tokens = p, .n_tokens = 10,
		  .step_consume = 0 },
	};
	static const uint32_t held[] = { 3, 6, 9 };
	char err[256];

	run = model_runner_create(m, 2, 16, err, sizeof(err));
	assert_non_null(run);
	for (int k = 0; k < 3; k++) {
		assert_int_equal(model_runner_step(run, 2, rows, res), 0);
		assert_int_equal(res[0].outcome, RUNNER_PREFILL);
		assert_int_equal(res[0].detail, held[k]);
		assert_int_equal(res[1].outcome, RUNNER_PREFILL);
		assert_int_equal(res[1].detail, 0);
	}
	assert_int_equal(model_runner_step(run, 2, rows, res), 0);
	assert_int_equal(res[0].outcome, RUNNER_TOKEN);
	assert_int_equal(res[0].token, sim_next(p, 10, VOCAB, 5));
	rows[1].step_consume = STEP_PLAN_ALL;
	assert_int_equal(model_runner_step(run, 1, rows + 1, res), 0);
	assert_int_equal(res[0].outcome, RUNNER_TOKEN);
	model_runner_destroy(run);
	model_close(m);
}

static void test_token_model_and_argmax(void **state)
{
	char err[256];
	struct model *m = model_open("sim:vocab=97,seed=5", err, sizeof(err));
	struct model_runner *run = model_runner_create(m, 2, 16, err, sizeof(err));
	int32_t p[] = { 9, 8, 7, 6, 5, 4 };
	struct runner_row rows[1] = {
		{ .slot = 0, .generation = 1, .tokens = p, .n_tokens = 6,
		  .step_consume = 3 } };
	struct runner_result res[1];

	/* a token model: the whole prefix at once, whatever the allowance */
	assert_non_null(run);
	assert_int_equal(model_runner_step(run, 1, rows, res), 0);
	assert_int_equal(res[0].outcome, RUNNER_TOKEN);
	assert_int_equal(res[0].token, sim_next(p, 6, VOCAB, 5));
	model_runner_destroy(run);
	model_close(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_budget_against_naive_planner),
		cmocka_unit_test(test_refusal_and_empty_prompt),
		cmocka_unit_test(test_row_allowance_obeyed),
		cmocka_unit_test(test_token_model_and_argmax),
	};

	test_seed_init("test_model_runner");
	return cmocka_run_group_tests_name("model_runner", tests, NULL, NULL);
}
