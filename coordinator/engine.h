/*
 * engine.h - the coordinator's scheduler: one run of `dynbatch run`.
 *
 * Request flow:
 *
 *   input -> line_reader -> parser thread (request_parse) -> admission
 *         -> waiting queue (FIFO, shm)
 *         -> free slot of a shard (slot_table_assign, generation++)
 *         -> dispatch ring -> worker -> model_next -> result ring
 *         -> validate (dispatch id, slot, generation, token range)
 *         -> commit token, stop matcher, max_tokens -> output line
 *
 * Each shard (a fixed range of slots served by one worker) has at most
 * one step in flight and steps on its own: when its result arrives the
 * coordinator commits it, refills the shard's freed slots from the
 * queue and dispatches the shard's next step at once, whatever the other
 * shards are doing.  With zero workers the same loop calls the model
 * in-process on a single shard.
 */
#ifndef DYNBATCH_ENGINE_H
#define DYNBATCH_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

struct engine_config {
	uint32_t n_workers;		/* worker processes; 0 = in-process */
	uint32_t n_slots;		/* batch capacity B */
	const char *model_spec;		/* --model */
	uint32_t max_context;		/* most tokens in one sequence */
	const char *input_path;		/* "-" for stdin */
	const char *output_path;	/* "-" for stdout */
	const char *stats_path;		/* --stats FILE, or NULL */
	uint32_t queue_capacity;	/* waiting queue bound */
	uint64_t step_timeout_ms;	/* a step past this kills its worker */
	uint64_t start_timeout_ms;	/* a worker not ready by then is killed */
	bool policy_static;		/* refill a shard only when it is empty */
	uint32_t spin_us;		/* spin this long before sleeping */
	uint32_t garbage_every;		/* test: worker garbles every Nth result */
	uint32_t poison_attempts;	/* lone failures before a request fails */
	uint32_t worker_nice;		/* workers' nice value, 0..19 */
	int progress;			/* 1 on, 0 off, -1 when stderr is a tty */
};

#define ENGINE_EXIT_OK 0
#define ENGINE_EXIT_FAILED 1
#define ENGINE_EXIT_USAGE 2

/* Run to completion.  Returns the process exit status (DESIGN 4.1). */
int engine_run(const struct engine_config *cfg);

#endif /* DYNBATCH_ENGINE_H */
