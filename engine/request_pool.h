/*
 * request_pool.h - the coordinator's live requests: storage by handle and
 * the set of live ids.
 *
 * A request is live from admission (it entered the waiting queue) until
 * its result line is written.  The pool has a fixed capacity (queue
 * capacity + batch slots), so memory is bounded by the queue, not by the
 * input.  Handles are small integers, stored in the shared waiting queue
 * and slot table; the pool itself is private to the coordinator, so a
 * handle read back from shared memory is always bounds-checked here.
 */
#ifndef DYNBATCH_REQUEST_POOL_H
#define DYNBATCH_REQUEST_POOL_H

#include <stdbool.h>
#include <stdint.h>

struct grammar_matcher;

#include "engine/request.h"
#include "text/text_stop.h"

#define REQUEST_NONE UINT32_MAX

/* Where a live request is (a front end can park one and resume it). */
enum live_place {
	LIVE_QUEUED = 0,		/* in the waiting queue */
	LIVE_UNPLACED,			/* taken off the queue, not (yet) in a slot */
	LIVE_ACTIVE,			/* in a slot */
	LIVE_PAUSED,			/* gave up its slot: its client reads slowly */
	LIVE_RESUMING,			/* paused, now first in line for a slot */
	LIVE_AT_ONCE,			/* nothing to generate (max_tokens 0):
					 * answered on the engine's next round */
};

/*
 * Fields in order of use: what every committed token touches first, the
 * request (its own hot fields lead it), then the text state, which only a
 * request with a tokenizer reads.
 */
struct live_request {
	enum live_place place;
	uint32_t slot;			/* batch slot, or REQUEST_NONE when not ACTIVE */
	uint32_t n_generated;		/* tokens committed so far */
	uint32_t matcher_state;		/* stop_matcher cursor */
	uint32_t stop_len;		/* matched stop sequence length at finish */
	uint32_t n_final;		/* tokens handed to the front end as
					 * final (on_tokens) */
	int32_t *generated;		/* malloc'd max_tokens: every committed
					 * token, kept off the slot (a worker can
					 * write the slot's copy) so the request
					 * can pause and resume; NULL in-process
					 * until it pauses */
	uint64_t cookie;		/* the front end's, from engine_submit */
	bool in_use;
	bool has_text;			/* a tokenizer: text below is live */
	bool id_held;			/* see next_choice */
	uint32_t n_failed_alone;	/* failed steps (a worker died or the model
					 * failed) with it as the only row */
	uint64_t admitted_ns;		/* entered the waiting queue */
	uint64_t started_ns;		/* got a slot */
	uint64_t held_ns;		/* first passed over for a request
					 * computing its prefix (ROUTE_HOLD),
					 * 0 when never */
	/* "n" > 1: the choices of one request are live requests of their
	 * own, in a ring by next_choice (a request of one choice: itself).
	 * Only one of them holds the id in the id table (id_held); it hands
	 * it on when it ends before the others. */
	uint32_t next_choice;
	uint32_t logprobs_cap;		/* tokens logprobs has room for */
	/* The request asked for logprobs: a row of 1 + top_logprobs entries
	 * per generated token (result.logprobs in jsonl_result.h), room for
	 * logprobs_cap tokens, grown as they come */
	struct sampler_logprob *logprobs;
	struct request req;		/* parsed input */
	/* req.grammar's matcher over the committed tokens: each must be
	 * one it allows (engine_grammar_check()); NULL until the first */
	struct grammar_matcher *grammar_check;
	/* With a tokenizer (request_text.h): the request's text */
	int32_t prev_token;		/* decodes the next piece (BOS rule) */
	uint64_t text_pushed;		/* text bytes pushed so far */
	size_t text_given;		/* final text handed to on_tokens */
	uint64_t *text_ends;		/* per token: text bytes up to its end */
	struct text_stream text;
};

struct request_pool {
	struct live_request *items;	/* capacity entries */
	uint32_t capacity;
	uint32_t n_live;
	uint32_t *free_handles;		/* stack of unused handles */
	uint32_t n_free;
	uint32_t *id_table;		/* open addressing: handle + 1, 0 empty */
	uint32_t id_mask;		/* id_table size - 1 */
};

/* 0 or -ENOMEM (nothing allocated). */
int request_pool_init(struct request_pool *pool, uint32_t capacity);
/* Release every live request and the pool's memory. */
void request_pool_release(struct request_pool *pool);

/* A free handle, marked in use with a zeroed entry; REQUEST_NONE when full. */
uint32_t request_pool_alloc(struct request_pool *pool);
/* Release the request's members, drop its id, and free the handle. */
void request_pool_free(struct request_pool *pool, uint32_t handle);

/* The live request with handle, or NULL if out of range or not in use. */
struct live_request *request_pool_get(struct request_pool *pool, uint32_t handle);

/* Handle of the live request whose id is id, or REQUEST_NONE. */
uint32_t request_pool_find_id(const struct request_pool *pool, const char *id);
/* Record handle's id as live (caller checked it is not). */
void request_pool_add_id(struct request_pool *pool, uint32_t handle);

static inline bool request_pool_full(const struct request_pool *pool)
{
	return pool->n_free == 0;
}

/* Verify every invariant; 0 or -EINVAL. */
int request_pool_check(const struct request_pool *pool);

#endif /* DYNBATCH_REQUEST_POOL_H */
