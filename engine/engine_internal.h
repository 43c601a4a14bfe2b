/*
 * engine_internal.h - the engine's private state, struct engine, shared
 * by the four files that make up the engine: engine.c (a request's place
 * and answer, applying what the scheduler and the supervisor return, the
 * loop), engine_admit.c (admission, choices, cancel, pause, resume),
 * engine_commit.c (committed tokens) and engine_model.c (the model at
 * start).  Only those four include it; every other file, tests included,
 * goes through engine.h.  The layers below own their state: the
 * scheduler (sched/shard_sched.h, struct sched), the shards' channels
 * (shard/shard_channel.h) and the workers (shard/worker_supervisor.h);
 * none of them includes this file or calls back up.
 *
 * Besides the struct it declares the functions the engine's files call
 * of each other (engine_fail(), engine_finish(), engine_commit_token(),
 * engine_refuse(), engine_unresume(), engine_unplace()).
 */
#ifndef DYNBATCH_ENGINE_INTERNAL_H
#define DYNBATCH_ENGINE_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/signalfd.h>

#include "engine/engine.h"
#include "engine/frontend.h"
#include "io/io_ring.h"
#include "engine/metrics.h"
#include "model/model_runner.h"
#include "engine/request_pool.h"
#include "ipc/shm_segment.h"
#include "sched/shard_sched.h"
#include "sched/slot_table.h"
#include "shard/worker_supervisor.h"
#include "engine/stats.h"
#include "engine/wait_queue.h"
#include "model/kv_pool.h"

struct fair_slot;

struct engine {
	const struct engine_config *cfg;
	struct model *model;
	uint32_t vocab;
	bool has_logits;		/* requests may sample (model_has_logits) */
	struct text_tokenizer *tok;	/* or NULL: requests then carry no
					 * text (engine_open_tokenizer) */
	char *chat_template;		/* a GGUF file's, or NULL */
	uint32_t max_context;		/* resolved: engine_set_max_context() */
	char *worker_spec;		/* --model for workers: pinned to the
					 * file we opened (model_worker_spec()) */
	struct model_runner *runner;	/* --workers 0: the model's steps */
	uint32_t kv_bytes_per_token;	/* a paged model's; 0: not paged */
	uint32_t spec_emit;		/* most tokens a row gets in one result:
					 * 1 + --draft-tokens with --speculate
					 * (as the model allows), else 1 */
	uint32_t kv_blocks;		/* per shard pool (engine_size_kv()) */
	struct grammar_vocab *grammar_vocab;	/* what each token spells, for
					 * grammars; NULL: grammars refused */
	struct request_grammar *default_grammar;	/* --grammar-file's */
	struct kv_pool kv_pool;		/* --workers 0: the pool itself */
	struct shm_segment seg;
	struct slot_table slots;
	struct wait_queue queue;
	struct request_pool pool;
	struct sched sched;		/* placement, refill, step plan; its
					 * shards (sched.shards) */
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
	/* tenants' shares (engine_fair.c): scratch, NULL until first used */
	struct fair_slot *fair_slots;	/* n_slots: the choice's view */
	uint32_t *fair_counts;		/* WAIT_QUEUE_CLASSES zeros */
	uint64_t n_fair_preemptions;	/* requests that gave way */
};

/* ---- engine_model.c, for engine.c ---- */

/* Open the model (or probe a plugin), set vocab, worker_spec and
 * max_context.  Returns an exit status, the reason printed on stderr. */
/* --speculate against the model: e->spec_emit (engine_model.c). */
int engine_spec_setup(struct engine *e, bool stateful, uint32_t max_outputs);
int engine_open_model(struct engine *e);

/* A paged model: size each shard's KV pool (kv_blocks) from --kv-memory,
 * or the batch at full context capped at half the machine's memory, and
 * log what was chosen.  An exit status, the reason printed on stderr. */
int engine_size_kv(struct engine *e);


/* ---- engine.c, for engine_workers.c and engine_kv.c ---- */

/* Finish every live request (waiting, active or paused) with reason. */
void engine_finish_all(struct engine *e, enum finish_reason reason,
			const char *error);
/* What the scheduler needs of lr, as plain data. */
struct sched_request;
void engine_sched_request(const struct live_request *lr,
			  struct sched_request *rq);
/* One round for a shard with a worker: refill, then dispatch. */
void engine_advance(struct engine *e, struct shard *s);

/* ---- engine_grammar.c: structured output (DESIGN 2.8) ---- */

/* The shared vocabulary table's bytes (0: no grammars). */
uint64_t engine_grammar_table_bytes(const struct engine *e);
/* Fill the table, build our vocabulary (and the in-process runner's).
 * 0 or -ENOMEM. */
int engine_setup_grammar(struct engine *e);
void engine_grammar_free(struct engine *e);
/* --grammar-file into e->default_grammar.  Returns an exit status. */
int engine_load_grammar_file(struct engine *e);
/* Does lr's grammar allow token next (0), or not (-ENOENT)?  -ENOMEM. */
int engine_grammar_check(struct engine *e, struct live_request *lr,
			 int32_t token);

/* ---- engine_refill.c, for engine.c ---- */

/* Fill the shard's free slots from the line (FIFO, but for holds). */
void engine_refill(struct engine *e, struct shard *s);

/* ---- engine_workers.c, for engine.c ---- */

/* Stop stepping but keep answering: every request gets its error line,
 * and the run exits 1. */
void engine_give_up(struct engine *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Start a worker for the shard on a fresh shard object.  0 or -errno. */
int engine_start_worker(struct engine *e, struct shard *s);
/* A worker's pidfd became readable: apply its exit. */
void engine_on_exit_poll(struct io_op *op, int32_t res);
/* Start due replacements, kill workers past their timeouts; the next
 * deadline. */
uint64_t engine_check_workers(struct engine *e, uint64_t now);

/* ---- engine_kv.c, for engine.c: the paged KV cache (DESIGN 11.2) ---- */

/* Where engine_route() sends the request at the head of the line. */
enum engine_route {
	ROUTE_HERE,		/* place it in this shard */
	ROUTE_ELSEWHERE,	/* leave it for a shard that holds more of it */
	ROUTE_HOLD,		/* another request is computing its prefix
				 * (its choice 0, or one with the same
				 * first blocks): the line goes on past it */
};

/* Where the head request lr (handle) goes; *fork_slot: the slot of
 * choice 0 to fork, or UINT32_MAX. */
enum engine_route engine_route(struct engine *e, struct shard *s,
			       uint32_t handle, const struct live_request *lr,
			       uint32_t *fork_slot);
/* Put unplaced handle at the head of the line (the resume line). */
void engine_requeue_front(struct engine *e, uint32_t handle,
			  struct live_request *lr);
/* A starved shard preempts its newest request: true when one was. */
bool engine_preempt(struct engine *e, struct shard *s);
/* Positions per KV block, 0 when the model is not paged. */
uint32_t engine_block_tokens(const struct engine *e);
/* The scheduler's block tables.  0 or -ENOMEM. */
int engine_setup_kv(struct engine *e);
/* The kv counts into e->stats.kv. */
void engine_sync_kv_stats(struct engine *e);
/* The dynbatch_kv_* metrics (none when not paged).  0 or -ENOMEM. */
int engine_kv_metrics(const struct engine *e, struct strbuf *out);

/* ---- engine_fair.c, for engine.c: tenants' shares of the batch ---- */

/* Could a tenant's waiting request take a slot from another tenant now
 * (fair queueing on, the queue's turn, every slot busy)?  O(1). */
bool engine_fair_due(const struct engine *e);
/* Preempt the shard's request that gives way to the waiting request
 * served next, if one is to (sched/fair_share.h): back to the waiting
 * queue with its tokens.  True when one was. */
bool engine_fair_preempt(struct engine *e, struct shard *s);
/* Free the scratch arrays. */
void engine_fair_free(struct engine *e);

/* ---- engine_admit.c, for engine.c ---- */

/* Keep a copy of the tokens ACTIVE lr has in its slot (in-process, where
 * the slot's copy is the only one), before it gives the slot up (a pause,
 * a preemption).  0 or -ENOMEM. */
int engine_copy_generated(struct engine *e, struct live_request *lr);

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

#endif
