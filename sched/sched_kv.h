/*
 * sched_kv.h - the scheduler's use of each shard's paged KV cache
 * (docs/DESIGN.md 11): a block table per slot, opened on the request's
 * cached prefix when it is placed, grown ahead of its committed tokens as
 * they come, its full blocks registered for later requests, and closed
 * once the worker can no longer touch it; and which request a shard
 * whose pool ran dry preempts.
 *
 * The bookkeeping is kv/kv_manager.h's, one manager per shard; this file
 * decides when to ask it what, and writes the tables into the shard's
 * object for its worker (shm_kv_table_at()).  It reads only trusted data:
 * its own copy of each slot's tokens (the prompt, the tokens a resumed
 * request had, and each token the scheduler commits), never a buffer a
 * worker can write.
 *
 * Everything here runs on the coordinator's loop thread.  Off (no field
 * touched, every call a no-op) when the model is not paged.
 */
#ifndef DYNBATCH_SCHED_KV_H
#define DYNBATCH_SCHED_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/kv_manager.h"

struct kv_pool;
struct shm_dispatch_row;
struct shm_segment;
struct slot_table;

struct sched_kv_config {
	const struct shm_segment *seg;	/* the shards' objects: the tables */
	const struct slot_table *slots;	/* the scheduler's, trusted: which
					 * slots are ACTIVE */
	uint32_t block_tokens;		/* 0: the model is not paged */
	uint32_t blocks;		/* per shard pool */
	bool prefix_cache;		/* --prefix-cache */
	uint64_t model_id;		/* goes into every block hash */
	uint64_t hash_mask;		/* UINT64_MAX; tests force collisions */
	struct kv_pool *inproc_pool;	/* --workers 0: the engine's pool, for
					 * the block copies; else NULL */
};

/* The run's KV counts (stats, /metrics; docs/usage.md). */
struct sched_kv_counts {
	uint32_t block_tokens;
	uint32_t blocks;		/* per shard pool */
	uint32_t used_blocks;		/* now, all shards */
	uint32_t peak_used_blocks;	/* the most any one shard used at once */
	uint64_t prompt_tokens;		/* prompt tokens of placed requests */
	uint64_t prefix_hit_tokens;	/* of which taken from the cache */
	uint64_t fork_tokens;		/* of which shared by a fork (n > 1) */
	uint64_t cow_copies;
	uint64_t preemptions;
	uint64_t evictions;
};

struct sched_kv {
	const struct shm_segment *seg;
	const struct slot_table *slots;
	uint32_t n_shards;
	uint32_t *first_slot;		/* per shard: its first slot, and */
	uint32_t *n_slots;		/* its count (the segment's split) */
	uint32_t block_tokens;		/* 0: off */
	uint32_t blocks;		/* per shard */
	uint32_t max_blocks;		/* entries per table (max_context) */
	uint32_t lookahead;		/* positions a table covers past the
					 * committed prefix, for run-ahead */
	bool prefix_cache;
	struct kv_pool *inproc_pool;
	struct kv_manager **mgr;	/* per shard */
	/* per slot */
	int32_t **seq;			/* its request's tokens, our copy
					 * (max_context each) */
	uint32_t *n_seq;
	uint32_t *limit;		/* prefix length its request ends at */
	uint32_t *cached;		/* kv_cached of its dispatch rows */
	uint32_t *computed;		/* positions its blocks are known to
					 * hold: the hit, then what its commits
					 * prove (a fork may share only these) */
	struct kv_copy *copy;		/* its block copy (src KV_NO_BLOCK:
					 * none) */
	uint64_t *admitted;		/* placement stamp: preemption takes
					 * the newest */
	uint32_t *written;		/* table entries written to shm */
	bool *hold;			/* sched_kv_hold_first() until the
					 * first token is committed */
	/* per shard */
	bool *starved;			/* a table could not grow: preempt, and
					 * admit nothing until it can */
	uint64_t clock;
	uint64_t prompt_tokens;
	uint64_t fork_tokens;		/* positions forks shared */
	uint64_t preemptions;
};

/* 0, or -ENOMEM (sched_kv_destroy() frees what was made). */
int sched_kv_init(struct sched_kv *kv, const struct sched_kv_config *cfg);
void sched_kv_destroy(struct sched_kv *kv);

/* Is the model paged (block tables in use)? */
bool sched_kv_on(const struct sched_kv *kv);

/* Did shard's last grow leave a running request without blocks? */
bool sched_kv_starved(const struct sched_kv *kv, uint32_t shard);

/*
 * Open slot's table for its new request, whose tokens are tokens[0 .. n)
 * (the prompt, then what a resumed request had) and which ends at limit:
 * the cached prefix (at most n - 1 positions: the last token's logits
 * are computed), and blocks for what it is to compute next.  0, or
 * -ENOSPC when the shard's pool has no room for it now (nothing changed).
 */
int sched_kv_place(struct sched_kv *kv, uint32_t shard, uint32_t slot,
		   const int32_t *prompt, uint32_t n_prompt,
		   const int32_t *generated, uint32_t n_generated, uint32_t limit);

/* Slot's request (just placed) is choice 0 of several, whose others wait
 * to fork it: its dispatch rows stop one token past the prompt until
 * that token is committed (sched_kv_commit() then says so), so the
 * others fork it before it writes past its prompt. */
void sched_kv_hold_first(struct sched_kv *kv, uint32_t slot);

/*
 * Open slot's table as a fork of src's (an ACTIVE slot of shard whose
 * request has the same n_prompt prompt tokens): when src's blocks are
 * known to hold them (a commit since src was placed proves it; a request
 * that was preempted and placed again may not have recomputed them yet),
 * it shares src's blocks for positions [0, n_prompt - 1) and gets its
 * own copy of the block it writes first (copy-on-write: the copy goes
 * in its dispatch rows, or is done at once in-process).  Nothing is
 * computed twice but the last prompt token, whose logits the choice
 * draws from.  0, or -ENOSPC (nothing changed).
 */
int sched_kv_fork(struct sched_kv *kv, uint32_t shard, uint32_t slot, uint32_t src,
		  const int32_t *prompt, uint32_t n_prompt, uint32_t limit);

/* The slot's request committed token: our copy grows, and the blocks it
 * fills are registered for later requests.  True when that ended a hold
 * (sched_kv_hold_first()): the rows are to be dispatched again. */
bool sched_kv_commit(struct sched_kv *kv, uint32_t shard, uint32_t slot,
		     int32_t token);

/*
 * After a result of shard: grow every active table that is within a
 * lookahead of its capacity.  When the pool has no block left for one,
 * the shard is starved (sched_kv_victim()).  True when a table grew (the
 * worker's rows are to be redispatched).
 */
bool sched_kv_grow(struct sched_kv *kv, uint32_t shard);

/* The kv fields of the dispatch row of slot, and its limit capped at
 * what its table holds. */
void sched_kv_row(const struct sched_kv *kv, uint32_t slot,
		  struct shm_dispatch_row *row);

/* The worker can no longer touch slot's blocks: close its table. */
void sched_kv_close(struct sched_kv *kv, uint32_t slot);
bool sched_kv_is_open(const struct sched_kv *kv, uint32_t slot);

/*
 * Shard s is starved: the slot of the request to preempt (the one placed
 * last), or false when none is to be (not starved, nothing active, or a
 * table is still waiting to be closed: its blocks are on their way back).
 */
bool sched_kv_victim(struct sched_kv *kv, uint32_t shard, uint32_t *slot);

/* Shard s's worker is new: its pool is empty, so nothing registered is
 * hittable, no slot's blocks hold anything, and every table goes to the
 * new shard object. */
void sched_kv_new_epoch(struct sched_kv *kv, uint32_t shard);

/* Positions of tokens[0 .. n) shard holds in its cache (routing). */
uint32_t sched_kv_lookup(const struct sched_kv *kv, uint32_t shard,
			 const int32_t *tokens, uint32_t n);

/*
 * Positions of tokens[0 .. n) (at most n - 1, whole blocks) that an
 * ACTIVE request of shard is computing now and will register in the
 * cache once its next token is committed: its common prefix with
 * tokens, past what it already had when it was placed.  0 when none, or
 * the prefix cache is off.  The engine holds a request back for it
 * rather than compute the same prefix twice (docs/DESIGN.md 11.2).
 */
uint32_t sched_kv_lookup_inflight(const struct sched_kv *kv, uint32_t shard,
				  const int32_t *tokens, uint32_t n);

/* Blocks a request of n_tokens positions (prompt + max_tokens) needs. */
uint32_t sched_kv_blocks_for(const struct sched_kv *kv, uint32_t n_tokens);

void sched_kv_counts(const struct sched_kv *kv, struct sched_kv_counts *out);

#endif /* DYNBATCH_SCHED_KV_H */
