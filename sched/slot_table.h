/*
 * slot_table.h - the batch slots: which request each slot serves, its
 * generation and its token buffer.
 *
 * The coordinator keeps the trusted copy here in private memory and
 * mirrors every change into the segment's struct shm_slot array, which
 * workers and observers read.  Slot lifecycle:
 *
 *        slot_table_assign()                slot_table_release()
 *   FREE ---------------------> ACTIVE ------------------------> FREE
 *        generation++,                |  ^
 *        prompt copied into the       |  | slot_table_commit(): one token
 *        slot's token buffer          +--+ its worker wrote; or
 *                                          slot_table_append(): one the
 *                                          coordinator holds (a resume)
 *
 * A result may only commit to a slot whose generation equals the one the
 * dispatch carried; the bump on assignment is what makes results for a
 * slot's previous request stale.  The engine gives a FREE slot a new
 * request only once its worker can no longer write it (docs/DESIGN.md 6).
 */
#ifndef DYNBATCH_SLOT_TABLE_H
#define DYNBATCH_SLOT_TABLE_H

#include <stdint.h>

#include "ipc/shm_segment.h"

struct slot_state {
	uint32_t state;			/* enum shm_slot_state */
	uint32_t generation;		/* bumped on every assignment */
	uint32_t request_handle;	/* request_pool handle while ACTIVE */
	uint32_t n_tokens;		/* prompt + committed tokens */
	uint32_t n_prompt;
};

struct slot_table {
	const struct shm_segment *seg;
	struct slot_state *slots;	/* n_slots, private */
	int32_t **tokens;		/* n_slots: each slot's shared buffer
					 * (shm_tokens_at, computed once) */
	uint32_t n_slots;
	uint32_t max_context;
	uint32_t n_busy;		/* ACTIVE slots */
};

/* 0 or -ENOMEM. */
int slot_table_init(struct slot_table *t, const struct shm_segment *seg);
void slot_table_release_all(struct slot_table *t);

/* Give FREE slot to request handle with this prompt.  0, or -EINVAL when
 * the slot is not free or the prompt does not fit. */
int slot_table_assign(struct slot_table *t, uint32_t slot, uint32_t handle,
		      const int32_t *prompt, uint32_t n_prompt);
/* Append one token (the coordinator writes it: placing a resumed
 * request).  0, or -ENOSPC at the context limit. */
int slot_table_append(struct slot_table *t, uint32_t slot, int32_t token);
/* Commit the token the shard's worker already wrote after the prefix
 * (only the length moves).  0, or -ENOSPC at the context limit. */
int slot_table_commit(struct slot_table *t, uint32_t slot);
/* Return an ACTIVE slot to FREE. */
void slot_table_release(struct slot_table *t, uint32_t slot);

/* The slot's committed tokens (prompt first), in the shared buffer. */
static inline const int32_t *slot_table_tokens(const struct slot_table *t,
					       uint32_t slot)
{
	return t->tokens[slot];
}

/* 0 when every invariant holds (busy count, shared mirror, lengths). */
int slot_table_check(const struct slot_table *t);

#endif /* DYNBATCH_SLOT_TABLE_H */
