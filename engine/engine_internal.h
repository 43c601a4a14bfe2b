/*
 * engine_internal.h - the engine's private state: struct engine and
 * struct shard, shared by the seven files that make up the engine,
 * engine.c (a request's place and answer, the loop), engine_admit.c
 * (admission, choices, cancel, pause, resume), engine_commit.c (committed
 * tokens), engine_model.c (the model at start), worker_supervisor.c
 * (workers' lives), shard_sched.c (the shard scheduler) and
 * wait_policy.c (spin, doze, sleep).  Only those seven may include it;
 * every other file, tests included, goes through engine.h.
 *
 * Besides the structs it declares the functions the engine's files call
 * of each other (engine_fail(), engine_finish(), engine_commit_token(),
 * engine_refuse(); engine_unplace() and engine_finish_all() for
 * worker_supervisor.c), engine_give_up() (worker_supervisor.c, also called
 * by shard_sched.c) and two one-line questions about a shard that all
 * ask.
 */
#ifndef DYNBATCH_ENGINE_INTERNAL_H
#define DYNBATCH_ENGINE_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/signalfd.h>
#include <sys/types.h>

#include "engine/engine.h"
#include "engine/frontend.h"
#include "io/io_ring.h"
#include "util/log_limit.h"
#include "engine/metrics.h"
#include "model/model_runner.h"
#include "engine/request_pool.h"
#include "ipc/shm_segment.h"
#include "sched/shard_sched.h"
#include "sched/slot_table.h"
#include "shard/shard_channel.h"
#include "shard/worker_supervisor.h"
#include "engine/stats.h"
#include "engine/wait_queue.h"

struct shard {
	uint32_t index;
	uint32_t first_slot;		/* slots [first_slot, first_slot+n_slots) */
	uint32_t n_slots;
	uint32_t n_active;		/* of which ACTIVE */
	uint64_t committing_id;		/* dispatch id of the result being
					 * committed now (0: none) */
	struct shard_channel chan;	/* the rings: what we sent, what we read */
	bool redispatch;		/* the worker's rows are out of date */
	uint32_t n_draining;		/* slots waiting in slot_drain */
	uint64_t adopted_seen;		/* dispatch_adopted when last looked at */
	bool reset;			/* next dispatch: take our lengths */
	uint64_t reset_id;		/* the last dispatch sent with reset */
	uint32_t resets_unanswered;	/* resets sent since a row of a result
					 * run after a reset was committed */
	uint32_t lockstep;		/* dispatches left in which each row
					 * gets one step only (SHARD_LOCKSTEP) */
	bool sent_lockstep;		/* the newest dispatch was one of them */
	uint64_t suspect_id;		/* dispatch running a suspect alone */
	uint64_t step_ewma_ns;		/* typical time between results */
	struct log_limit warn_limit;	/* this shard's per-result warnings */
	/* isolation after a fault: slots (and generations) to run alone */
	uint32_t *suspect_slot;
	uint32_t *suspect_gen;
	uint32_t n_suspects;
};

struct engine {
	const struct engine_config *cfg;
	struct model *model;
	uint32_t vocab;
	bool has_logits;		/* requests may sample (model_has_logits) */
	struct tokenizer *tok;		/* --tokenizer, or NULL: requests then
					 * carry no text (engine_set_tokenizer) */
	uint32_t max_context;		/* resolved: engine_set_max_context() */
	char *worker_spec;		/* --model for workers: pinned to the
					 * file we opened (model_worker_spec()) */
	struct model_runner *runner;	/* --workers 0: the model's steps */
	struct shm_segment seg;
	struct slot_table slots;
	struct wait_queue queue;
	struct request_pool pool;
	struct shard *shards;
	uint32_t n_shards;
	struct worker_sup sup;		/* the shards' worker processes */
	bool in_process;
	char worker_path[PATH_MAX];
	struct io_ring io;
	int sig_fd;
	struct signalfd_siginfo sig_buf;
	struct io_op sig_op;		/* arg: the engine */
	struct frontend fe;		/* where requests come from and go */
	/* state */
	int n_signals;
	bool failed;
	char fail_msg[256];
	bool progress_on;
	uint64_t last_progress_ns;
	uint64_t *slot_freed_ns;	/* per slot: when it last became free */
	uint32_t *slot_limit;		/* per slot: prefix length at which its
					 * request is done (prompt + max_tokens) */
	bool *slot_logprobs;		/* per slot: its request asked for
					 * logprobs (shard_write_sampling()) */
	uint32_t *slot_top_logprobs;	/* per slot: the alternatives it asked
					 * for (a result's checked bound) */
	struct sched_request *slot_rq;	/* per slot, in-process: what the
					 * runner reads of its request (the
					 * sampling fields when it samples) */
	uint32_t *slot_prefilled;	/* per slot: the most prefix tokens its
					 * worker said its model holds (prefill
					 * rows), since the request came, the
					 * worker started or the last reset:
					 * only more counts as progress */
	uint64_t *slot_drain;		/* per slot: the worker may still write
					 * it until dispatch_adopted reaches
					 * this (0: free to reuse) */
	/* in-process stepping buffers, n_slots each */
	struct runner_row *inproc_step;
	struct runner_result *inproc_outcomes;
	struct shm_result_row *inproc_rows;
	struct sampler_result *inproc_sampled;	/* rows that report logprobs */
	struct shm_logprobs *inproc_logprobs;	/* and those, as a worker's */
	uint64_t seed_state;		/* seeds for requests that sample
					 * without one (engine_submit) */
	struct engine_stats stats;
	uint32_t *at_once;		/* AT_ONCE handles (max_tokens 0), oldest
					 * first: finished on the next round */
	uint32_t n_at_once;
	/* pausing: a front end whose client reads slowly */
	uint32_t *resume;		/* RESUMING handles, oldest first */
	uint32_t n_resume;
	uint32_t n_paused;		/* PAUSED or RESUMING requests */
	bool workers_lost;		/* every shard failed its last starts */
	uint64_t abandon_at_ns;		/* after a second signal: the loop ends
					 * then even if the front end still has
					 * output it cannot write (0: none) */
	bool gave_up;			/* run: workers_lost for good; every
					 * request from now on gets an error
					 * line and the run exits 1 */
	struct histogram step_hist;	/* a shard's time between results */
	struct histogram request_hist;	/* admission -> finish (stop, length) */
	struct histogram ttft_hist;	/* admission -> first token */
	uint64_t n_prompt_tokens;	/* of requests admitted */
};

/* ---- engine_model.c, for engine.c ---- */

/* Open the model (or probe a plugin), set vocab, worker_spec and
 * max_context.  Returns an exit status, the reason printed on stderr. */
int engine_open_model(struct engine *e);

/* ---- engine.c and engine_commit.c, for the engine's other files ---- */

/* Fail the whole engine (once: the first message is kept and logged). */
void engine_fail(struct engine *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Answer live request handle (the front end's on_finish) and free it and
 * its place: a slot goes back through shard_drop_slot(). */
void engine_finish(struct engine *e, uint32_t handle,
		   enum finish_reason reason, const char *error);
/* Commit a validated token (and, when its request asked, its checked
 * logprobs lp) to the request in slot, release the tokens that became
 * final, and finish the request if it is done. */
void engine_commit_token(struct engine *e, uint32_t slot, int32_t token,
			 const struct shm_logprobs *lp);
/* The model refused the request in slot (why: enum dynbatch_refusal, any
 * value: it comes from a worker): answer it with an error naming why. */
void engine_refuse(struct engine *e, uint32_t slot, uint32_t why);

/* Take handle out of the resume line (it is RESUMING); engine_admit.c
 * (pause) and engine_unplace(). */
void engine_unresume(struct engine *e, uint32_t handle);

/* ---- engine.c, for the engine's other files ---- */

/* Take the live request out of wherever it is (queue, slot, lists),
 * freeing its slot; it stays live (engine_admit.c: pause). */
void engine_unplace(struct engine *e, uint32_t handle,
		    struct live_request *lr, uint64_t now);

/* Does the shard's worker owe us results (rows it has been sent)? */
static inline bool shard_owes_results(const struct engine *e, const struct shard *s)
{
	return worker_sup_running(&e->sup, s->index) && s->n_active &&
	       shard_channel_sent_any(&s->chan);
}

#endif
