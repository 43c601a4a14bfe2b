/*
 * shard_channel.h - the coordinator's side of one shard's rings
 * (docs/DESIGN.md 5, 7): what it sent (dispatch ids, the rows of the
 * last ring_depth dispatches, ring positions), what it has read (the
 * seq last found in each result entry), and the check of what the
 * worker posted.
 *
 * Everything in the channel's shared memory is written by the worker,
 * so it is input, not truth: shard_channel_check() reads a result entry
 * once, field by field, into private memory and says what of it can be
 * ours (struct shard_checked).  It is a pure function of the entry, the
 * channel's expectations and the rules the caller passes (the
 * vocabulary, the logprobs each slot asked for); it decides nothing
 * about the slots' requests, which is the scheduler's part
 * (sched/shard_sched.c).  Nothing here calls sched/ or engine/.
 *
 * Everything here runs on the coordinator's loop thread.
 */
#ifndef DYNBATCH_SHARD_CHANNEL_H
#define DYNBATCH_SHARD_CHANNEL_H

#include <stdbool.h>
#include <stdint.h>

#include "ipc/shm_segment.h"

/* What a result entry is, as far as the channel can tell. */
enum shard_verdict {
	SHARD_RESULT_NONE,		/* not written since we last read it */
	SHARD_RESULT_OK,		/* its rows are to be looked at */
	SHARD_RESULT_BAD_SEQ,		/* a sequence number we did not expect */
	SHARD_RESULT_BAD_ID,		/* a dispatch id we never sent this
					 * worker: its rows may be anyone's */
	SHARD_RESULT_FAILED,		/* the model failed the step (status) */
	SHARD_RESULT_TOO_MANY_ROWS,	/* more rows than the shard has: none
					 * is read */
};

/* One row of a result, copied out of shared memory once. */
struct shard_checked_row {
	struct shm_result_row row;	/* the copy: every later check reads it */
	bool ok;			/* slot in the shard, and a token in the
					 * vocabulary (or PREFILL, REFUSED) */
	bool lp_ok;			/* logprobs as asked (true when the
					 * slot asked none: nothing read) */
	struct shm_logprobs lp;		/* the copy, when the slot asked */
};

/* A result entry, checked (shard_channel_check()). */
struct shard_checked {
	uint32_t verdict;		/* enum shard_verdict */
	uint64_t pos;			/* its ring position */
	uint64_t seq;			/* as read */
	uint64_t id;			/* dispatch id, as read */
	int32_t status;			/* FAILED: the worker's errno, < 0 */
	uint64_t model_ns;		/* untrusted: for stats only */
	/* untrusted, for stats only: speculation in the step, as read */
	uint32_t spec_drafted, spec_accepted, spec_emitted, spec_rows;
	uint64_t spec_draft_ns;
	uint32_t n_rows;		/* as read; rows filled when OK */
	struct shard_checked_row *rows;	/* max_rows, the channel's */
};

/*
 * What the check holds a row to (plain data from the scheduler, indexed
 * by global slot id): a token below vocab; logprobs only where the slot's
 * request asked, every logprob finite and <= 0, at most top_logprobs
 * alternatives, each a token of the vocabulary.
 */
struct shard_row_rules {
	uint32_t vocab;
	const bool *logprobs;		/* per slot: its request asked */
	const uint32_t *top_logprobs;	/* per slot: alternatives asked */
};

/* The coordinator's private copy of what one shard's rings should hold. */
struct shard_channel {
	uint32_t index;			/* the shard */
	uint32_t first_slot;		/* slots [first_slot, first_slot+n_slots) */
	uint32_t n_slots;
	/* rows a result may carry: n_slots x the tokens a row may get in
	 * one (speculation: shm_params.emit_per_row); a slot's rows come
	 * in position order */
	uint32_t max_rows;
	uint32_t depth;			/* ring entries (a power of two) */
	/* dispatches to the current worker: private, trusted copies */
	uint64_t next_dispatch_id;	/* starts at 1, never reused */
	uint64_t first_id;		/* first id sent to the current worker */
	uint64_t issued_id;		/* the newest dispatch sent (0: none) */
	uint64_t first_pos;		/* first dispatch position of the worker */
	/* the rows of the last depth dispatches, by ring index: the one the
	 * worker runs is among them (for blame when it dies) */
	struct shm_dispatch_row *sent;	/* SHM_RING_DEPTH * n_slots */
	uint32_t n_sent[SHM_RING_DEPTH];
	uint64_t sent_id[SHM_RING_DEPTH]; /* the dispatch id of each */
	/* per shard slot: the result (result_stamp) that last carried a row of
	 * the slot's current generation (the scheduler stamps it) */
	uint32_t *seen;
	uint32_t result_stamp;
	uint64_t dispatch_pos;		/* next dispatch ring position */
	uint64_t result_pos;		/* next result ring position */
	/* per result ring entry: the seq we found there when we last
	 * consumed it (0 after a channel reset), which is what it holds
	 * until the worker writes it again; any other value but the
	 * position we expect is garbage */
	uint64_t ring_seq[SHM_RING_DEPTH];
	struct shard_checked_row *checked; /* max_rows: the last checked rows */
};

/* 0 or -ENOMEM; shard_channel_destroy() undoes it (also after a failure). */
int shard_channel_init(struct shard_channel *c, uint32_t index,
		       uint32_t first_slot, uint32_t n_slots, uint32_t depth,
		       uint32_t emit_per_row);
void shard_channel_destroy(struct shard_channel *c);

/* ---- results ---- */

/*
 * The check, pure: entry r at ring position pos, whose seq was read (with
 * acquire) as seq, and its logprob blocks (row i's at blocks[i]), against
 * the channel's expectations and rules.  Reads each field of shared
 * memory once and writes only *out and out->rows (n_slots of them).
 * Order: the seq, the dispatch id, the status, the row count, then each
 * row (shard_channel_check_rows()).
 */
void shard_channel_check(const struct shard_channel *c, const struct shm_result *r,
			 uint64_t pos, uint64_t seq, const struct shm_logprobs *blocks,
			 const struct shard_row_rules *rules, struct shard_checked *out);

/* Check n rows (n <= n_slots) and their blocks into out[]: the row part of
 * shard_channel_check(), also what --workers 0 runs its private rows
 * through, so that one commit path serves both. */
void shard_channel_check_rows(const struct shard_channel *c,
			      const struct shm_result_row *rows,
			      const struct shm_logprobs *blocks, uint32_t n,
			      const struct shard_row_rules *rules,
			      struct shard_checked_row *out);

/* Read the next result entry into *out (out->rows: c->checked) and, unless
 * it is SHARD_RESULT_NONE, consume it (result_pos moves on).  Returns the
 * verdict. */
uint32_t shard_channel_read(struct shard_channel *c, const struct shm_header *hdr,
			    struct shm_channel *ch, const struct shard_row_rules *rules,
			    struct shard_checked *out);

/* Is a result waiting to be read (for the wait policy)? */
bool shard_channel_result_ready(const struct shard_channel *c,
				const struct shm_header *hdr, struct shm_channel *ch);

/* Hand the entries read so far back to the worker; wake it if it sleeps. */
void shard_channel_release(const struct shard_channel *c, struct shm_channel *ch);

/* The worker is gone: skip what it left in the ring.  Returns the entries
 * dropped; the replacement's channel starts zeroed. */
uint32_t shard_channel_drain(struct shard_channel *c, const struct shm_header *hdr,
			     struct shm_channel *ch);

/* A new result is being looked at: a new stamp for the seen marks. */
void shard_channel_new_stamp(struct shard_channel *c);

/* ---- dispatches ---- */

/* A new worker: ids and positions start from here, nothing sent yet. */
void shard_channel_new_epoch(struct shard_channel *c);

/* Does the current worker owe results for a dispatch we sent it? */
static inline bool shard_channel_sent_any(const struct shard_channel *c)
{
	return c->issued_id >= c->first_id && c->issued_id;
}

/* May a dispatch be published?  At most depth - 1 ahead of the one the
 * worker adopted, so none is overwritten while the worker may read it. */
bool shard_channel_room(const struct shard_channel *c, struct shm_channel *ch);

/* Where the next dispatch's rows go (n_slots of them): kept for blame. */
struct shm_dispatch_row *shard_channel_next_rows(struct shard_channel *c);

/* Record the next dispatch (its n rows at shard_channel_next_rows()):
 * returns its id, now issued_id. */
uint64_t shard_channel_record(struct shard_channel *c, uint32_t n);

/* Publish the recorded dispatch with flags (SHM_DISPATCH_RESET) and wake
 * the worker if it said it sleeps. */
void shard_channel_publish(struct shard_channel *c, const struct shm_header *hdr,
			   struct shm_channel *ch, uint32_t flags);

/* The rows of dispatch id if still kept (*n of them), else NULL. */
const struct shm_dispatch_row *shard_channel_sent_rows(const struct shard_channel *c,
							uint64_t id, uint32_t *n);

/* The rows of the dispatch the worker says it adopted last, if that is
 * one we sent this worker (*n of them), else NULL. */
const struct shm_dispatch_row *shard_channel_adopted_rows(const struct shard_channel *c,
							   struct shm_channel *ch,
							   uint32_t *n);

#endif
