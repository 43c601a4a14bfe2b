/*
 * shard_sched.h - the shard scheduler: which rows each shard's worker
 * extends, and which of its results are committed (docs/DESIGN.md 7).
 *
 * Per shard: say which free slots may take a request (shard_refill_next())
 * and place the ones the engine hands it, publish the rows when they
 * changed (shard_dispatch()), read the result ring and return each row
 * that continues exactly the committed prefix (shard_poll_next(),
 * shard_result_next()), reset the worker's rows after a garbled result,
 * run suspects alone after a fault, and keep the run-ahead bookkeeping
 * (the rows of the last dispatches, which slots are still draining).
 * The worker's life (starting, reaping, blame, timeouts) is
 * worker_supervisor.c's; the requests stay in engine/: the scheduler
 * returns each checked row as a struct shard_action for the engine to
 * apply, and is handed the requests to place as plain data (struct
 * sched_request).  It calls nothing in engine/.
 *
 * Everything here runs on the coordinator's loop thread.
 */
#ifndef DYNBATCH_SHARD_SCHED_H
#define DYNBATCH_SHARD_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "ipc/shm_segment.h"
#include "shard/shard_channel.h"
#include "sched/step_plan.h"
#include "shard/worker_supervisor.h"
#include "sched/sched_kv.h"
#include "sched/sched_spec.h"
#include "sched/slot_table.h"
#include "util/log_limit.h"

struct model_runner;
struct runner_result;
struct runner_row;
struct sampler_result;
struct sampling_params;
struct shard;

/*
 * What the scheduler needs of a request it places, as plain data (the
 * engine fills it from its live request): the prefix to put in the slot
 * and the sampling fields for the worker.  The pointers must stay valid
 * while the request holds the slot (in-process, the runner reads
 * sampling at every step).
 */
struct sched_request {
	const int32_t *prompt;		/* n_prompt tokens */
	uint32_t n_prompt;
	const int32_t *generated;	/* the tokens it has (a resume) */
	uint32_t n_generated;
	uint32_t max_tokens;
	uint32_t choice;		/* which of the request's n */
	bool needs_logits;		/* it samples, biases or reports
					 * logprobs (request_needs_logits()) */
	bool no_spec;			/* "speculate": false (DESIGN 2.7) */
	const struct sampling_params *sampling;
	/* its grammar (DESIGN 2.8; NULL: none): the source a worker
	 * compiles, and our compiled copy for the in-process runner, both
	 * alive as long as the request */
	const char *grammar_source;
	uint32_t grammar_len;
	const struct grammar *grammar;
	uint32_t fork_slot;		/* paged: an ACTIVE slot of the same
					 * shard whose request has the same
					 * prompt and has computed it, whose
					 * blocks this one shares (another
					 * choice of it); UINT32_MAX: none */
	bool hold_first;		/* paged: choice 0 of n > 1, whose
					 * choices wait to fork it: its worker
					 * stops after the first token until
					 * that token is committed */
};

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

/* Counts for the engine's stats (engine_sync_stats()). */
struct sched_counts {
	uint64_t n_stale;		/* rows and results rejected as garbage */
	uint64_t n_discarded;		/* rows the run-ahead made obsolete */
	uint64_t n_steps;		/* results applied */
	uint64_t n_step_rows;		/* their rows */
	uint64_t n_step_capacity;	/* their shards' slots */
	uint64_t model_ns;		/* time in the model (capped, untrusted) */
	uint64_t step_ns;		/* time between committing results */
	uint64_t n_dozes;		/* waits without spinning */
	struct sched_spec_counts spec;	/* speculation (sched_spec.h) */
};

/*
 * The scheduler: its shards, what it keeps per slot, and the in-process
 * runner's buffers.  The engine fills it at setup (sched_init()) and
 * reaches in only for the slot table it shares and the counts.
 */
struct sched {
	struct shm_segment *seg;
	struct slot_table *slots;	/* the engine's, trusted */
	struct worker_sup *sup;		/* the shards' workers */
	struct shard *shards;
	uint32_t n_shards;
	uint32_t vocab;
	bool in_process;		/* --workers 0 */
	bool policy_static;		/* refill only a fully free shard */
	uint64_t step_timeout_ms;	/* caps what a worker says model_ns is */
	uint64_t *slot_drain;		/* per slot: the worker may still write
					 * it until dispatch_adopted reaches
					 * this (0: free to reuse) */
	uint32_t *slot_limit;		/* per slot: prefix length at which its
					 * request is done (prompt + max_tokens) */
	uint32_t *slot_prefilled;	/* per slot: the most prefix tokens its
					 * worker said its model holds (prefill
					 * rows), since the request came, the
					 * worker started or the last reset:
					 * only more counts as progress */
	bool *slot_logprobs;		/* per slot: its request asked for
					 * logprobs (shard_write_sampling()) */
	uint32_t *slot_top_logprobs;	/* per slot: the alternatives it asked
					 * for (a result's checked bound) */
	/* the step plan (docs/DESIGN.md 11.2) */
	struct step_planner planner;
	struct sched_request *slot_rq;	/* per slot, in-process: what the
					 * runner reads of its request */
	/* in-process stepping, n_slots each */
	struct model_runner *runner;	/* the engine's (--workers 0) */
	struct runner_row *inproc_step;
	struct runner_result *inproc_outcomes;
	struct shm_result_row *inproc_rows;
	struct sampler_result *inproc_sampled;	/* rows that report logprobs */
	struct shm_logprobs *inproc_logprobs;	/* and those, as a worker's */
	uint32_t emit;			/* most tokens a row gets in one
					 * result (1 + speculation's guesses) */
	struct sched_counts counts;
	struct sched_kv kv;		/* paged models: the block tables
					 * (sched_kv_init() after sched_init()) */
};

/* 0 or -ENOMEM: the shards (n_shards over n_slots), their channels and
 * the per-slot arrays.  sched_destroy() frees them (also after a failure). */
int sched_init(struct sched *sc, struct shm_segment *seg, struct slot_table *slots,
	       struct worker_sup *sup, uint32_t n_shards, uint32_t n_slots,
	       uint32_t step_tokens);
void sched_destroy(struct sched *sc);

/* Does the shard's worker owe us results (rows it has been sent)? */
static inline bool shard_owes_results(const struct sched *sc, const struct shard *s)
{
	/* a starved shard's rows may all wait at their tables' ends: the
	 * worker then owes nothing until we give blocks (sched_kv.h) */
	return worker_sup_running(sc->sup, s->index) && s->n_active &&
	       shard_channel_sent_any(&s->chan) &&
	       !sched_kv_starved(&sc->kv, s->index);
}

/* What the engine is to do with one checked row of a result. */
enum shard_action_kind {
	SHARD_ACT_TOKEN,		/* commit token to the slot's request */
	SHARD_ACT_REFUSE,		/* the model refused the slot's request */
};

struct shard_action {
	uint32_t kind;			/* enum shard_action_kind */
	uint32_t slot;
	int32_t token;			/* TOKEN: in the vocabulary */
	uint32_t why;			/* REFUSE: the worker's enum
					 * dynbatch_refusal, any value */
	const struct shm_logprobs *lp;	/* TOKEN: checked private copy,
					 * read only when the request asked */
};

/*
 * One result being applied (shard_result_next()): the rows still to
 * look at and what the ones looked at did.  Filled by shard_poll_next()
 * or shard_step_in_process(); the engine only reads took_ns/timed.
 */
struct shard_result {
	uint64_t id;			/* the dispatch it ran (0: in-process) */
	const struct shard_checked_row *rows;	/* n_rows, private copies
						 * (shard_channel_check()) */
	uint32_t n_rows;
	uint32_t i;			/* next row to look at */
	uint32_t n_ok;			/* rows committed (refusals too) */
	uint32_t n_prefill;		/* prefill rows that got further */
	uint32_t last_slot;		/* the last row committed */
	bool garbled;			/* a row rejected as not ours */
	bool too_many;			/* more rows than the shard has */
	bool timed;			/* took_ns is a step time to record */
	uint64_t took_ns;		/* time between results, or the step */
};

/* A pass over one shard's result ring (shard_poll_begin() ... end()). */
struct shard_poll {
	uint64_t released;		/* result_pos last handed back */
	uint64_t now;			/* when the current entry was read */
	uint32_t n_read;		/* entries read: at most a ring */
	bool progress;			/* any entry read */
	bool done;			/* stop reading (a kill, a failure) */
};

/*
 * Refilling a shard (the engine places the requests, shard_place()):
 * shard_refill_begin() says whether the shard takes requests now, then
 * each shard_refill_next() gives the next slot that may be given one
 * (free, and no longer written by the worker), in slot order.
 */
bool shard_refill_begin(struct sched *sc, struct shard *s);

/*
 * Is a running request of the shard waiting for KV blocks the pool does
 * not have?  Gives back the blocks of drained slots and retries first.
 * While true the shard admits nobody, and the engine preempts
 * (sched_kv_victim()).
 */
bool shard_kv_starved(struct sched *sc, struct shard *s);

/* Could the shard take a request now (a free slot its worker no longer
 * touches, a ready worker, KV not starved)?  Changes nothing: for
 * routing. */
bool shard_has_room(const struct sched *sc, const struct shard *s);
/* The same but for the free slot: will it take one once a slot is free? */
bool shard_is_up(const struct sched *sc, const struct shard *s);
bool shard_refill_next(struct sched *sc, struct shard *s, uint32_t *cursor,
		       uint32_t *slot);

/* Put the request handle, described by rq, into free slot.  0, -EINVAL
 * when it does not fit, or -ENOSPC when the shard's KV pool has no room
 * for it now (nothing changed: it is to wait). */
int shard_place(struct sched *sc, uint32_t slot, uint32_t handle,
		const struct sched_request *rq);

/* Note the dispatch the shard's worker has adopted (before a refill). */
void shard_note_adopted(struct sched *sc, struct shard *s);

/* Publish the shard's rows to its worker if they changed (waking the
 * worker if it said it sleeps). */
void shard_dispatch(struct sched *sc, struct shard *s);

/*
 * Read the shard's published results, at most a ring of them per pass:
 *
 *	if (shard_poll_begin(sc, s, &p))
 *		while (shard_poll_next(sc, s, &p, &r)) {
 *			while (shard_result_next(sc, s, &r, &a))
 *				apply a;
 *			shard_result_end(sc, s, &r);
 *			shard_poll_after(sc, s, &p, &r);
 *		}
 *	progress = shard_poll_end(sc, s, &p);
 *
 * Rejects what does not match what we sent (counted stale or discarded,
 * a reset when the worker's rows drifted), kills a worker whose results
 * keep committing nothing (WORKER_MAX_FRUITLESS, no blame) or whose model
 * reported a failed step, and hands read entries back every half ring.
 */
bool shard_poll_begin(struct sched *sc, struct shard *s, struct shard_poll *p);
bool shard_poll_next(struct sched *sc, struct shard *s, struct shard_poll *p,
		     struct shard_result *r);
void shard_poll_after(struct sched *sc, struct shard *s, struct shard_poll *p,
		      struct shard_result *r);
bool shard_poll_end(struct sched *sc, struct shard *s, struct shard_poll *p);

/*
 * The next row of r to apply: true with *a set when a row commits (a
 * token or a refusal); rows rejected or of prefill are dealt with here.
 * One row at a time, applied before the next is checked: a row checks
 * against the slot as the rows before it left it (docs/DESIGN.md 7.2).
 */
bool shard_result_next(struct sched *sc, struct shard *s, struct shard_result *r,
		       struct shard_action *a);
/* After the last row: a reset when rows drifted, suspects, counts. */
void shard_result_end(struct sched *sc, struct shard *s, struct shard_result *r);

/*
 * --workers 0: run one model step on the shard's rows right here, after
 * the engine refilled it.  1 with *r to apply as a worker's result, 0 when
 * there was nothing to step, or the model's negative errno.
 */
int shard_step_in_process(struct sched *sc, struct shard *s, struct shard_result *r);

/*
 * Slot (ACTIVE until now) leaves its shard's rows: the engine is freeing
 * it.  The slot is reusable only once the worker can no longer write it
 * (it has adopted a dispatch without the row).
 */
void shard_drop_slot(struct sched *sc, uint32_t slot);

/* Write the sampling fields of rq, placed in slot, into the shard's
 * table (shm_segment.h), for its worker; in-process, keep them for the
 * runner. */
void shard_write_sampling(struct sched *sc, uint32_t slot,
			  const struct sched_request *rq);

/* Slot ran alone after a fault and is done with (finished or failed):
 * the next suspect runs. */
void shard_clear_suspect(struct shard *s, uint32_t slot);

/* A new worker starts on the shard, its channel renewed
 * (shard_channel_new_epoch()): the scheduler's part starts over. */
void shard_new_epoch(struct sched *sc, struct shard *s);

/* The n rows of the step a worker died in (n > 1) run alone one by one,
 * each for one step (suspects), so that a poison request shows itself. */
void shard_isolate(struct shard *s, const struct shm_dispatch_row *rows, uint32_t n);

/* The shard's requests moved away: no suspects. */
void shard_clear_suspects(struct shard *s);

/* The shard's worker is new or was reset: the prefill progress its rows
 * may claim starts over (slot_prefilled). */
void shard_forget_prefill(struct sched *sc, const struct shard *s);

#endif
