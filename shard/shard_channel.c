/*
 * shard_channel.c - the coordinator's side of one shard's rings; see
 * shard_channel.h.
 *
 * NOTES ON THE DESIGN (docs/DESIGN.md 7)
 *
 * Each field of a result is read from shared memory once, into a local,
 * before it is checked: the worker may change it meanwhile.  Whether a
 * checked row then commits depends on the slot it names (its generation,
 * its committed length), which only the scheduler knows: the channel
 * says what can be ours, the scheduler what is.
 *
 * Waking the worker.  After publishing a dispatch or handing result
 * entries back the coordinator wakes the worker (FUTEX_WAKE on its
 * channel's wake word, shm_wake_worker()) only when the worker has said
 * it sleeps (sleep_handshake_check()), and never calls a glibc semaphore
 * or waits on memory a worker can write.
 */
#include "shard/shard_channel.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/sleep_handshake.h"

int shard_channel_init(struct shard_channel *c, uint32_t index,
		       uint32_t first_slot, uint32_t n_slots, uint32_t depth,
		       uint32_t emit_per_row)
{
	*c = (struct shard_channel){ .index = index, .first_slot = first_slot,
				     .n_slots = n_slots, .depth = depth,
				     .max_rows = n_slots * (emit_per_row ? emit_per_row : 1),
				     .next_dispatch_id = 1 };
	c->sent = calloc((size_t)SHM_RING_DEPTH * n_slots, sizeof(*c->sent));
	c->seen = calloc(n_slots, sizeof(uint32_t));
	c->checked = calloc(c->max_rows ? c->max_rows : 1, sizeof(*c->checked));
	if (!c->sent || !c->seen || !c->checked)
		return -ENOMEM;
	return 0;
}

void shard_channel_destroy(struct shard_channel *c)
{
	if (!c)
		return;
	free(c->sent);
	free(c->seen);
	free(c->checked);
	c->sent = NULL;
	c->seen = NULL;
	c->checked = NULL;
}

/* ------------------------------------------------------------------------
 * The check
 * ---------------------------------------------------------------------- */

/* Copy the logprobs of a token row out of shared memory into *lp and
 * check them against what the slot's request asked for. */
static bool shard_channel_take_logprobs(const struct shard_row_rules *rules,
					uint32_t slot, const struct shm_logprobs *block,
					struct shm_logprobs *lp)
{
	lp->logprob = block->logprob;
	lp->n_top = block->n_top;
	if (!(lp->logprob <= 0.0f) || lp->n_top > rules->top_logprobs[slot])
		return false;	/* NaN fails <= too */
	memcpy(lp->top, block->top, lp->n_top * sizeof(lp->top[0]));
	for (uint32_t j = 0; j < lp->n_top; j++)
		if (!(lp->top[j].logprob <= 0.0f) || isinf(lp->top[j].logprob) ||
		    lp->top[j].token < 0 || (uint32_t)lp->top[j].token >= rules->vocab)
			return false;
	return !isinf(lp->logprob);
}

void shard_channel_check_rows(const struct shard_channel *c,
			      const struct shm_result_row *rows,
			      const struct shm_logprobs *blocks, uint32_t n,
			      const struct shard_row_rules *rules,
			      struct shard_checked_row *out)
{
	for (uint32_t i = 0; i < n; i++) {
		struct shard_checked_row *cr = &out[i];
		const struct shm_result_row row = rows[i];	/* one read */
		bool no_token = row.token == SHM_TOKEN_PREFILL ||
				row.token == SHM_TOKEN_REFUSED;

		cr->row = row;
		cr->ok = !(row.slot < c->first_slot ||
			   row.slot - c->first_slot >= c->n_slots ||
			   (!no_token && (row.token < 0 ||
					  (uint32_t)row.token >= rules->vocab)));
		cr->lp_ok = true;
		/* only a token row's logprobs, and only if asked: a block
		 * nobody asked for is never read */
		if (cr->ok && !no_token && rules->logprobs[row.slot])
			cr->lp_ok = shard_channel_take_logprobs(rules, row.slot,
								&blocks[i], &cr->lp);
	}
}

void shard_channel_check(const struct shard_channel *c, const struct shm_result *r,
			 uint64_t pos, uint64_t seq, const struct shm_logprobs *blocks,
			 const struct shard_row_rules *rules, struct shard_checked *out)
{
	struct shard_checked_row *rows = out->rows;

	*out = (struct shard_checked){ .pos = pos, .seq = seq, .rows = rows };
	if (seq != pos + 1) {
		out->verdict = SHARD_RESULT_BAD_SEQ;
		return;
	}
	out->id = r->dispatch_id;
	out->n_rows = r->n_rows;
	out->status = r->status;
	out->model_ns = r->model_ns;
	out->spec_drafted = r->spec_drafted;
	out->spec_accepted = r->spec_accepted;
	out->spec_emitted = r->spec_emitted;
	out->spec_rows = r->spec_rows;
	out->spec_draft_ns = r->spec_draft_ns;
	if (out->id < c->first_id || out->id > c->issued_id) {
		out->verdict = SHARD_RESULT_BAD_ID;
		return;
	}
	if (out->status) {
		out->verdict = SHARD_RESULT_FAILED;
		return;
	}
	/* a wrong n_rows is rejected before any row is read */
	if (out->n_rows > c->max_rows) {
		out->verdict = SHARD_RESULT_TOO_MANY_ROWS;
		return;
	}
	shard_channel_check_rows(c, r->rows, blocks, out->n_rows, rules, rows);
	out->verdict = SHARD_RESULT_OK;
}

uint32_t shard_channel_read(struct shard_channel *c, const struct shm_header *hdr,
			    struct shm_channel *ch, const struct shard_row_rules *rules,
			    struct shard_checked *out)
{
	struct shm_result *r = shm_result_at(hdr, ch, c->result_pos);
	uint64_t *last_seq = &c->ring_seq[c->result_pos & (c->depth - 1)];
	uint64_t seq;

	/* acquire: pairs with the release in the worker's
	 * shm_entry_publish() */
	seq = atomic_load_explicit(&r->seq, memory_order_acquire);
	out->rows = c->checked;
	if (seq == *last_seq) {
		out->verdict = SHARD_RESULT_NONE;
		return SHARD_RESULT_NONE;
	}
	*last_seq = seq;
	shard_channel_check(c, r, c->result_pos, seq,
			    shm_result_logprobs(hdr, ch, c->result_pos, 0), rules, out);
	c->result_pos++;
	return out->verdict;
}

bool shard_channel_result_ready(const struct shard_channel *c,
				const struct shm_header *hdr, struct shm_channel *ch)
{
	return shm_entry_ready(&shm_result_at(hdr, ch, c->result_pos)->seq,
			       c->result_pos);
}

void shard_channel_release(const struct shard_channel *c, struct shm_channel *ch)
{
	/* release: every entry before result_pos has been read */
	atomic_store_explicit(&ch->results_consumed, c->result_pos,
			      memory_order_release);
	/* pairs with the announcement in worker_wait(): a worker waiting
	 * for room either sees it or is seen asleep */
	if (sleep_handshake_check(&ch->worker_sleeping))
		shm_wake_worker(ch);
}

uint32_t shard_channel_drain(struct shard_channel *c, const struct shm_header *hdr,
			     struct shm_channel *ch)
{
	uint32_t n = 0;

	while (shm_entry_ready(&shm_result_at(hdr, ch, c->result_pos)->seq,
			       c->result_pos)) {
		c->result_pos++;
		n++;
	}
	/* the replacement's channel starts zeroed (shard_channel_new_epoch()) */
	memset(c->ring_seq, 0, sizeof(c->ring_seq));
	return n;
}

void shard_channel_new_stamp(struct shard_channel *c)
{
	if (++c->result_stamp == 0)	/* 0 means never seen */
		c->result_stamp = 1;
}

/* ------------------------------------------------------------------------
 * Dispatches
 * ---------------------------------------------------------------------- */

void shard_channel_new_epoch(struct shard_channel *c)
{
	c->first_pos = c->dispatch_pos;
	c->first_id = c->next_dispatch_id;
	c->issued_id = 0;
	memset(c->n_sent, 0, sizeof(c->n_sent));
	memset(c->sent_id, 0, sizeof(c->sent_id));
}

bool shard_channel_room(const struct shard_channel *c, struct shm_channel *ch)
{
	/* acquire: pairs with the worker's release in worker_adopt() */
	return c->dispatch_pos - atomic_load_explicit(&ch->dispatch_adopted,
						      memory_order_acquire) < c->depth - 1;
}

struct shm_dispatch_row *shard_channel_next_rows(struct shard_channel *c)
{
	return c->sent + (c->dispatch_pos & (c->depth - 1)) * c->n_slots;
}

uint64_t shard_channel_record(struct shard_channel *c, uint32_t n)
{
	c->n_sent[c->dispatch_pos & (c->depth - 1)] = n;
	c->sent_id[c->dispatch_pos & (c->depth - 1)] = c->next_dispatch_id;
	c->issued_id = c->next_dispatch_id++;
	return c->issued_id;
}

void shard_channel_publish(struct shard_channel *c, const struct shm_header *hdr,
			   struct shm_channel *ch, uint32_t flags)
{
	struct shm_dispatch *d = shm_dispatch_at(hdr, ch, c->dispatch_pos);
	uint32_t n = c->n_sent[c->dispatch_pos & (c->depth - 1)];

	d->dispatch_id = c->issued_id;
	d->n_rows = n;
	d->flags = flags;
	memcpy(d->rows, shard_channel_next_rows(c), n * sizeof(d->rows[0]));
	shm_entry_publish(&d->seq, c->dispatch_pos);
	c->dispatch_pos++;
	/* pairs with the worker's announcement in worker_wait() */
	if (sleep_handshake_check(&ch->worker_sleeping))
		shm_wake_worker(ch);
}

const struct shm_dispatch_row *shard_channel_sent_rows(const struct shard_channel *c,
							uint64_t id, uint32_t *n)
{
	uint32_t idx;

	if (!id || id < c->first_id)
		return NULL;
	/* ids and positions advance together within one worker's life */
	idx = (uint32_t)((c->first_pos + (id - c->first_id)) & (c->depth - 1));
	if (c->sent_id[idx] != id)
		return NULL;
	*n = c->n_sent[idx];
	return c->sent + (size_t)idx * c->n_slots;
}

const struct shm_dispatch_row *shard_channel_adopted_rows(const struct shard_channel *c,
							   struct shm_channel *ch,
							   uint32_t *n)
{
	uint64_t adopted = atomic_load(&ch->dispatch_adopted);

	/* untrusted: only a position we sent counts */
	if (adopted <= c->first_pos || adopted > c->dispatch_pos)
		return NULL;
	*n = c->n_sent[(adopted - 1) & (c->depth - 1)];
	return c->sent + ((adopted - 1) & (c->depth - 1)) * c->n_slots;
}
