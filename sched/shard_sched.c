/*
 * shard_sched.c - the shard scheduler; see shard_sched.h.
 *
 * NOTES ON THE DESIGN (docs/DESIGN.md 7)
 *
 * Run-ahead.  A shard's worker is sent the rows to extend (slot,
 * generation, committed length, limit = prompt + max_tokens) only when
 * they change, and steps on its own, writing each new token after its
 * prefix in the shard's token buffers and posting one result per step, up
 * to ring_depth results ahead of what we have read.  We commit a row only
 * at the slot's committed length, so results are applied strictly in
 * order.  Reusing a slot waits until the worker can no longer write it
 * (shard_drop_slot, shard_slot_reusable); a rejected row makes the next
 * dispatch a reset to our committed lengths (shard_reset_after_garble).
 *
 * Each field of a result is read from shared memory once, into private
 * memory, before it is checked: the worker may change it meanwhile.  The
 * channel (shard/shard_channel.c) does that and checks what can be ours
 * (sequence number, dispatch id, row count, slot and token ranges,
 * logprobs); here each checked row is held to its slot.  A shard that
 * keeps rejecting results right after resets runs in lockstep for a
 * while (SHARD_LOCKSTEP).
 *
 * Data flows one way.  The engine calls in here and applies what comes
 * back: the slots a refill may fill (shard_refill_next(); the engine picks
 * the requests and hands them over as plain data, shard_place()), and a
 * result's rows as actions (shard_result_next()).  Nothing here calls
 * engine/.
 *
 * Waking the worker.  After publishing a dispatch (shard_dispatch()) or
 * handing result entries back (shard_release_results()) the coordinator
 * wakes the worker (FUTEX_WAKE on its channel's wake word,
 * shm_wake_worker()) only when the worker has said it sleeps
 * (sleep_handshake_check()), and never calls a glibc semaphore or waits
 * on memory a worker can write.
 */
#include "sched/shard_sched.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "model/model_runner.h"
#include "sampling/sampler.h"
#include "shard/shard_channel.h"
#include "shard/worker_supervisor.h"
#include "util/log.h"
#include "model/model_loader.h"
#include "util/sleep_handshake.h"

/*
 * A worker whose results are rejected again right after a reset (a worker
 * that garbles most of them) would lose every step it ran ahead; for this
 * many dispatches the shard then runs like a lockstep engine, each row
 * one step per dispatch, so that every good result counts.
 */
#define SHARD_LOCKSTEP 64u

/* (A worker whose results keep committing nothing is killed after
 * WORKER_MAX_FRUITLESS of them: worker_supervisor.h.) */

/* Resets in a row with no committed row between them before the worker
 * is killed (no blame).  Lockstep (SHARD_LOCKSTEP) makes an honest but
 * faulty worker commit between resets long before this. */
#define SHARD_MAX_RESETS 64u

static void shard_warn(struct shard *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------------
 * Setup
 * ---------------------------------------------------------------------- */

int sched_init(struct sched *sc, struct shm_segment *seg, struct slot_table *slots,
	       struct worker_sup *sup, uint32_t n_shards, uint32_t n_slots,
	       uint32_t step_tokens)
{
	uint32_t n = n_shards, b = n_slots;

	sc->seg = seg;
	sc->slots = slots;
	sc->sup = sup;
	sc->shards = calloc(n, sizeof(*sc->shards));
	if (!sc->shards)
		return -ENOMEM;
	sc->n_shards = n;
	for (uint32_t i = 0; i < n; i++) {
		struct shard *s = &sc->shards[i];

		s->index = i;
		s->first_slot = (uint32_t)((uint64_t)b * i / n);
		s->n_slots = (uint32_t)((uint64_t)b * (i + 1) / n) - s->first_slot;
		s->suspect_slot = calloc(s->n_slots, sizeof(uint32_t));
		s->suspect_gen = calloc(s->n_slots, sizeof(uint32_t));
		if (shard_channel_init(&s->chan, i, s->first_slot, s->n_slots,
				       seg->hdr->ring_depth,
				       seg->hdr->result_rows / seg->hdr->shard_capacity) ||
		    !s->suspect_slot || !s->suspect_gen)
			return -ENOMEM;
	}
	sc->slot_limit = calloc(b, sizeof(uint32_t));
	sc->slot_drain = calloc(b, sizeof(uint64_t));
	sc->slot_prefilled = calloc(b, sizeof(uint32_t));
	sc->slot_logprobs = calloc(b, sizeof(bool));
	sc->slot_top_logprobs = calloc(b, sizeof(uint32_t));
	sc->slot_rq = calloc(b, sizeof(*sc->slot_rq));
	sc->inproc_step = calloc(b, sizeof(*sc->inproc_step));
	sc->inproc_outcomes = calloc(b, sizeof(*sc->inproc_outcomes));
	/* a row may get several tokens a step (speculation: 5.4) */
	sc->emit = seg->hdr->result_rows / seg->hdr->shard_capacity;
	sc->inproc_rows = calloc((size_t)b * sc->emit, sizeof(*sc->inproc_rows));
	sc->inproc_sampled = calloc((size_t)b * sc->emit, sizeof(*sc->inproc_sampled));
	sc->inproc_logprobs = calloc((size_t)b * sc->emit, sizeof(*sc->inproc_logprobs));
	if (!sc->slot_limit || !sc->slot_drain || !sc->slot_prefilled ||
	    !sc->slot_logprobs || !sc->slot_top_logprobs || !sc->slot_rq ||
	    !sc->inproc_step || !sc->inproc_outcomes || !sc->inproc_rows ||
	    !sc->inproc_sampled || !sc->inproc_logprobs ||
	    step_planner_init(&sc->planner, b, step_tokens))
		return -ENOMEM;
	return 0;
}

void sched_destroy(struct sched *sc)
{
	for (uint32_t i = 0; sc->shards && i < sc->n_shards; i++) {
		struct shard *s = &sc->shards[i];

		shard_channel_destroy(&s->chan);
		free(s->suspect_slot);
		free(s->suspect_gen);
	}
	free(sc->shards);
	free(sc->slot_limit);
	free(sc->slot_drain);
	free(sc->slot_prefilled);
	free(sc->slot_logprobs);
	free(sc->slot_top_logprobs);
	free(sc->slot_rq);
	step_planner_destroy(&sc->planner);
	free(sc->inproc_step);
	free(sc->inproc_outcomes);
	free(sc->inproc_rows);
	free(sc->inproc_sampled);
	free(sc->inproc_logprobs);
	sched_kv_destroy(&sc->kv);
	sc->shards = NULL;
}

/* ------------------------------------------------------------------------
 * Slots and refill
 * ---------------------------------------------------------------------- */

static struct shard *shard_of_slot(struct sched *sc, uint32_t slot)
{
	return &sc->shards[shm_slot_shard(sc->seg->hdr, slot)];
}

/* What a result's rows are held to (shard_channel_check()). */
static void shard_row_rules(const struct sched *sc, struct shard_row_rules *rules)
{
	*rules = (struct shard_row_rules){ .vocab = sc->vocab,
					   .logprobs = sc->slot_logprobs,
					   .top_logprobs = sc->slot_top_logprobs };
}

/*
 * Slot leaves its shard's rows.  A row that ends before its limit (a stop,
 * a cancel, a pause, a failure) goes on being extended until the worker
 * adopts a dispatch without it, so the slot may be reused only then
 * (slot_drain).  A row that reached its limit is left alone by the worker
 * by itself, but only if the result that took it there was run under the
 * newest dispatch we sent: an older dispatch the worker has yet to adopt
 * (a reset, or the rows after an isolation) would send it back to an
 * earlier position, to extend the row again over the slot's next request.
 */
void shard_drop_slot(struct sched *sc, uint32_t slot)
{
	struct shard *s = shard_of_slot(sc, slot);

	s->n_active--;
	if (sc->in_process) {
		sched_kv_close(&sc->kv, slot);
		return;
	}
	s->redispatch = true;
	if (sc->slots->slots[slot].n_tokens < sc->slot_limit[slot] ||
	    s->committing_id != s->chan.issued_id) {
		/* its blocks too go back once the worker is past it */
		sc->slot_drain[slot] = s->chan.dispatch_pos + 1;
		s->n_draining++;
	} else {
		sched_kv_close(&sc->kv, slot);
	}
}

/* Put the request rq describes into slot: its prompt, and the tokens it
 * had when it paused.  0, or -EINVAL when it does not fit. */
int shard_place(struct sched *sc, uint32_t slot, uint32_t handle,
		const struct sched_request *rq)
{
	uint32_t limit = rq->n_prompt + rq->max_tokens;
	struct shard *s = shard_of_slot(sc, slot);
	int ret;

	/* admission checked that the request fits the context */
	if (limit > sc->slots->max_context)
		limit = sc->slots->max_context;
	if (rq->fork_slot != UINT32_MAX && !rq->n_generated)
		ret = sched_kv_fork(&sc->kv, s->index, slot, rq->fork_slot, rq->prompt,
				    rq->n_prompt, limit);
	else
		ret = sched_kv_place(&sc->kv, s->index, slot, rq->prompt, rq->n_prompt,
				     rq->generated, rq->n_generated, limit);
	if (ret)
		return ret;
	if (rq->hold_first && !rq->n_generated)
		sched_kv_hold_first(&sc->kv, slot);
	if (slot_table_assign(sc->slots, slot, handle, rq->prompt, rq->n_prompt)) {
		sched_kv_close(&sc->kv, slot);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < rq->n_generated; i++) {
		if (slot_table_append(sc->slots, slot, rq->generated[i])) {
			slot_table_release(sc->slots, slot);
			sched_kv_close(&sc->kv, slot);
			return -EINVAL;
		}
	}
	sc->slot_limit[slot] = limit;
	sc->slot_prefilled[slot] = 0;
	step_planner_place(&sc->planner, slot);
	shard_write_sampling(sc, slot, rq);
	s->n_active++;
	s->redispatch = true;
	return 0;
}

/* May slot be given a new request?  Not while the worker can still write
 * it (shard_drop_slot). */
static bool shard_slot_reusable(struct sched *sc, struct shard *s, uint32_t slot)
{
	if (sc->slots->slots[slot].state != SHM_SLOT_FREE)
		return false;
	if (sc->slot_drain[slot]) {
		/* acquire: pairs with the worker's release in worker_adopt() */
		if (atomic_load_explicit(&shm_channel_at(sc->seg, s->index)->dispatch_adopted,
					 memory_order_acquire) < sc->slot_drain[slot])
			return false;
		sc->slot_drain[slot] = 0;
		s->n_draining--;
	}
	/* the worker is past the slot's last request: so are its blocks */
	sched_kv_close(&sc->kv, slot);
	return true;
}

/* Close the block tables of the shard's slots that have drained, so that
 * a starved shard gets their blocks back without waiting for a refill. */
static void shard_kv_reclaim(struct sched *sc, struct shard *s)
{
	for (uint32_t i = 0; i < s->n_slots; i++)
		if (sched_kv_is_open(&sc->kv, s->first_slot + i))
			(void)shard_slot_reusable(sc, s, s->first_slot + i);
}

bool shard_kv_starved(struct sched *sc, struct shard *s)
{
	if (!sched_kv_on(&sc->kv) || !sc->kv.starved[s->index])
		return false;
	shard_kv_reclaim(sc, s);
	if (sched_kv_grow(&sc->kv, s->index))
		s->redispatch = true;
	return sc->kv.starved[s->index];
}

/* Does the shard take requests now?  (FIFO refill: shard_refill_next().) */
bool shard_refill_begin(struct sched *sc, struct shard *s)
{
	/* A worker not yet ready gets no request: one that never says it
	 * is (a slow model load, or a worker that scribbled its own flag)
	 * holds nobody's request until the start timeout ends it. */
	if (s->n_active == s->n_slots || worker_sup_lost(sc->sup, s->index) ||
	    (!sc->in_process && !worker_sup_ready(sc->sup, s->index)))
		return false;
	/* no admission while a running request waits for blocks (a step
	 * that preempts admits nobody: docs/DESIGN.md 11) */
	if (shard_kv_starved(sc, s))
		return false;
	if (sc->policy_static)
		for (uint32_t i = 0; i < s->n_slots; i++)
			if (!shard_slot_reusable(sc, s, s->first_slot + i))
				return false;
	return true;
}

bool shard_is_up(const struct sched *sc, const struct shard *s)
{
	return !worker_sup_lost(sc->sup, s->index) &&
	       (sc->in_process || worker_sup_ready(sc->sup, s->index)) &&
	       !sched_kv_starved(&sc->kv, s->index);
}

bool shard_has_room(const struct sched *sc, const struct shard *s)
{
	return s->n_active + s->n_draining < s->n_slots && shard_is_up(sc, s);
}

/* The next reusable slot at or after *cursor (a shard slot index, 0 to
 * begin), or false when there is none. */
bool shard_refill_next(struct sched *sc, struct shard *s, uint32_t *cursor,
		       uint32_t *slot)
{
	while (*cursor < s->n_slots) {
		uint32_t i = (*cursor)++;

		if (shard_slot_reusable(sc, s, s->first_slot + i)) {
			*slot = s->first_slot + i;
			return true;
		}
	}
	return false;
}

/* ------------------------------------------------------------------------
 * Dispatch
 * ---------------------------------------------------------------------- */

/* The shard's worker holds no model state that we count on any more (it
 * is new, or was sent back by a reset): its prefill starts over. */
void shard_forget_prefill(struct sched *sc, const struct shard *s)
{
	memset(sc->slot_prefilled + s->first_slot, 0,
	       s->n_slots * sizeof(sc->slot_prefilled[0]));
	step_planner_forget(&sc->planner, s->first_slot, s->n_slots);
}

/* A new worker starts on the shard (its channel has started over): a
 * first dispatch with every ACTIVE slot, nothing draining (the old worker
 * writes nothing any more), no reset or lockstep pending. */
void shard_new_epoch(struct sched *sc, struct shard *s)
{
	s->redispatch = true;
	s->reset = false;
	s->reset_id = 0;
	s->resets_unanswered = 0;
	shard_forget_prefill(sc, s);
	s->lockstep = 0;
	s->sent_lockstep = false;
	s->n_draining = 0;
	s->adopted_seen = s->chan.dispatch_pos;
	for (uint32_t i = 0; i < s->n_slots; i++)
		sc->slot_drain[s->first_slot + i] = 0;
	sched_kv_new_epoch(&sc->kv, s->index);
}

/* The rows of a step its worker died in, to run alone one by one. */
void shard_isolate(struct shard *s, const struct shm_dispatch_row *rows, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		s->suspect_slot[i] = rows[i].slot;
		s->suspect_gen[i] = rows[i].generation;
	}
	s->n_suspects = n;
	LOG(LOG_WARN, "shard %u: isolating the %u requests of the failed step",
	    s->index, n);
}

/* Its requests moved away: nobody is under suspicion any more. */
void shard_clear_suspects(struct shard *s)
{
	s->n_suspects = 0;
}

/* Drop the first suspect (it ran alone cleanly, finished, or was failed). */
static void shard_pop_suspect(struct shard *s)
{
	s->n_suspects--;
	memmove(s->suspect_slot, s->suspect_slot + 1, s->n_suspects * sizeof(uint32_t));
	memmove(s->suspect_gen, s->suspect_gen + 1, s->n_suspects * sizeof(uint32_t));
}

/*
 * Collect the rows of the shard's next dispatch into rows: every ACTIVE
 * slot, to be extended up to its request's limit; or, while requests are
 * under suspicion after a worker died, the first suspect alone for one
 * step (limit one past its prefix).  Sets s->suspect_id accordingly.
 * Each row carries the step plan.
 */
static uint32_t shard_collect_rows(struct sched *sc, struct shard *s,
				   struct shm_dispatch_row *rows)
{
	uint32_t n = 0;

	s->suspect_id = 0;
	while (s->n_suspects) {
		uint32_t slot = s->suspect_slot[0];
		const struct slot_state *st = &sc->slots->slots[slot];

		if (st->state == SHM_SLOT_ACTIVE && st->generation == s->suspect_gen[0]) {
			rows[0] = (struct shm_dispatch_row){
				.slot = slot, .generation = st->generation,
				.n_tokens = st->n_tokens, .limit = st->n_tokens + 1 };
			sched_kv_row(&sc->kv, slot, &rows[0]);
			step_planner_fill(&sc->planner, rows, 1, sc->slot_prefilled, s->reset);
			s->suspect_id = s->chan.next_dispatch_id;
			return 1;
		}
		shard_pop_suspect(s);
	}
	for (uint32_t i = 0; i < s->n_slots; i++) {
		uint32_t slot = s->first_slot + i;
		const struct slot_state *st = &sc->slots->slots[slot];

		if (st->state != SHM_SLOT_ACTIVE)
			continue;
		rows[n] = (struct shm_dispatch_row){
			.slot = slot, .generation = st->generation,
			.n_tokens = st->n_tokens,
			.limit = s->lockstep ? st->n_tokens + 1 : sc->slot_limit[slot] };
		sched_kv_row(&sc->kv, slot, &rows[n++]);
	}
	step_planner_fill(&sc->planner, rows, n, sc->slot_prefilled, s->reset);
	return n;
}

/*
 * Publish the shard's rows to its worker when they changed.  At most
 * ring_depth - 1 dispatches are ahead of the one the worker has adopted,
 * so no entry is overwritten while the worker may be reading it, and
 * s->chan.sent still holds the adopted one's rows (for blame).
 */
void shard_dispatch(struct sched *sc, struct shard *s)
{
	struct shm_channel *ch;
	struct shm_dispatch_row *rows;
	uint32_t n;

	if (!s->redispatch || !worker_sup_running(sc->sup, s->index) || sc->in_process)
		return;
	ch = shm_channel_at(sc->seg, s->index);
	if (!shard_channel_room(&s->chan, ch))
		return;	/* the worker is behind: send the latest rows later */
	rows = shard_channel_next_rows(&s->chan);
	n = shard_collect_rows(sc, s, rows);
	shard_channel_record(&s->chan, n);
	s->redispatch = false;
	if (n)	/* the worker owes results from now on */
		worker_sup_note_dispatch(sc->sup, s->index, clock_now_ns());
	s->sent_lockstep = s->lockstep > 0;
	if (s->lockstep)
		s->lockstep--;
	if (s->reset) {
		s->reset_id = s->chan.issued_id;
		/* the worker re-prefills every row from nothing now */
		shard_forget_prefill(sc, s);
		if (++s->resets_unanswered >= 2 && !s->lockstep) {
			shard_warn(s, "the worker's results keep being rejected; "
				   "one step per dispatch for a while");
			s->lockstep = SHARD_LOCKSTEP;
		}
		/* Each reset renews the progress a prefill row may claim
		 * (slot_prefilled): a worker that garbles a result, claims
		 * prefill progress, and again, would never end otherwise. */
		if (s->resets_unanswered > SHARD_MAX_RESETS)
			worker_sup_kill_misbehaving(sc->sup, s->index,
						    " for resets that commit nothing");
	}
	shard_channel_publish(&s->chan, sc->seg->hdr, ch,
			      s->reset ? SHM_DISPATCH_RESET : 0);
	s->reset = false;
}

/* Remove slot from the head of the suspects after it ran alone cleanly. */
void shard_clear_suspect(struct shard *s, uint32_t slot)
{
	if (s->n_suspects && s->suspect_slot[0] == slot)
		shard_pop_suspect(s);
}

/* ------------------------------------------------------------------------
 * Commit
 * ---------------------------------------------------------------------- */

/*
 * We rejected a row that was not merely stale (garbled, or ahead of what we
 * committed because of an earlier garbled one): the worker's rows have run
 * past what we hold, so the next dispatch sends it back to our committed
 * lengths (reset), at once rather than when its next rows turn up ahead.
 * A result run before the worker took our last reset needs no new one: the
 * reset already covers it.
 */
static void shard_reset_after_garble(struct shard *s, uint64_t id)
{
	if (id >= s->reset_id)
		s->reset = s->redispatch = true;
}

/*
 * The worker extends every row of the dispatch it runs in every result,
 * until the row reaches its limit; we commit rows in order, so a row of
 * that dispatch that is still active here (same generation: not finished,
 * not reused) must be in this result.  One that is missing means the
 * worker believes it done (its last rows were garbled and rejected, or it
 * kept a longer prefix of its own): without a reset it would never be
 * extended again.  False when the dispatch's rows are no longer kept.
 */
static bool shard_result_lacks_rows(struct sched *sc, struct shard *s, uint64_t id)
{
	const struct shm_dispatch_row *want;
	uint32_t n;

	want = shard_channel_sent_rows(&s->chan, id, &n);
	if (!want)
		return false;
	for (uint32_t i = 0; i < n; i++) {
		const struct slot_state *st = &sc->slots->slots[want[i].slot];

		/* below the dispatch's limit: a paged row at the end of its
		 * table waits for it to grow, and is rightly missing */
		if (st->state == SHM_SLOT_ACTIVE && st->generation == want[i].generation &&
		    st->n_tokens < want[i].limit &&
		    s->chan.seen[want[i].slot - s->first_slot] != s->chan.result_stamp)
			return true;
	}
	return false;
}

/*
 * A warning about something the shard's worker sent: the worker can send
 * it on every result, so at most a few, then one a second with a count.
 */
static void shard_warn(struct shard *s, const char *fmt, ...)
{
	uint64_t n_held;
	char msg[256];
	va_list ap;

	if (LOG_WARN > log_level_current ||
	    !log_limit_pass(&s->warn_limit, clock_now_ns(), &n_held))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n_held)
		LOG(LOG_WARN, "shard %u: %s (and %llu such warnings held back)",
		    s->index, msg, (unsigned long long)n_held);
	else
		LOG(LOG_WARN, "shard %u: %s", s->index, msg);
}

/*
 * Sort one rejected row: discarded (made obsolete by the run-ahead: its
 * request ended, or a reset sent the worker back; not a fault) or stale
 * (a generation or a position no dispatch of ours can have produced).
 * st is the slot's private state.
 */
static void shard_count_rejected_row(struct sched *sc, const struct shard *s,
				     uint64_t id, const struct shm_result_row *row,
				     const struct slot_state *st)
{
	bool obsolete;

	if (st->state != SHM_SLOT_ACTIVE || st->generation != row->generation)
		/* a request that held the slot before, or still holds it
		 * but ended (a free slot keeps its last generation) */
		obsolete = row->generation && row->generation <= st->generation;
	else if (row->n_tokens < st->n_tokens)
		obsolete = true;	/* re-run after a reset: committed */
	else	/* ahead: fine only while a reset is on its way */
		obsolete = s->reset || id < s->reset_id;
	if (obsolete)
		sc->counts.n_discarded++;
	else
		sc->counts.n_stale++;
}

/*
 * The rows of one result of dispatch id, one by one (shard_result_next()):
 * rows/n_rows come from
 * shared memory: each row is copied once and checked against the private
 * slot table.  A row is committed only when its slot is ACTIVE with the
 * row's generation and its position is the slot's committed length (the
 * token continues exactly the committed prefix).  A row past that length
 * means we rejected one of the worker's earlier rows: the next dispatch
 * tells the worker to go back (reset).  A stateful model's row may carry
 * no token yet (a prefill chunk) or a refusal instead (docs/DESIGN.md
 * 7.2).  Each row that commits is returned to the engine as a struct
 * shard_action and applied before the next row is checked, so a second
 * row for the same slot sees what the first did.  r->n_ok counts the
 * rows committed (refusals included), r->n_prefill the prefill rows that
 * got further than before.
 */
/* Begin applying the rows of one result of dispatch id (0: in-process). */
static void shard_result_start(struct sched *sc, struct shard *s,
			       struct shard_result *r, uint64_t id,
			       const struct shard_checked_row *rows, uint32_t n_rows,
			       bool too_many)
{
	*r = (struct shard_result){ .id = id, .rows = rows, .n_rows = n_rows };
	shard_channel_new_stamp(&s->chan);

	if (too_many) {
		sc->counts.n_stale++;
		shard_warn(s, "result with %u rows for a shard of %u: rejected",
			   n_rows, s->n_slots);
		shard_reset_after_garble(s, id);
		r->too_many = true;
	}
}

bool shard_result_next(struct sched *sc, struct shard *s, struct shard_result *r,
		       struct shard_action *a)
{
	s->committing_id = 0;	/* the row before is applied */
	if (r->too_many)
		return false;
	while (r->i < r->n_rows) {
		const struct shard_checked_row *cr = &r->rows[r->i++];
		const struct shm_result_row *row = &cr->row;	/* the copy */
		const struct slot_state *st;

		if (!cr->ok) {	/* a slot not of the shard, or no token */
			sc->counts.n_stale++;
			r->garbled = true;
			continue;
		}
		st = &sc->slots->slots[row->slot];
		if (st->state != SHM_SLOT_ACTIVE || st->generation != row->generation) {
			shard_count_rejected_row(sc, s, r->id, row, st);
			continue;
		}
		s->chan.seen[row->slot - s->first_slot] = s->chan.result_stamp;
		if (row->n_tokens != st->n_tokens) {
			shard_count_rejected_row(sc, s, r->id, row, st);
			/* Ahead of what we committed: we rejected one of its
			 * earlier rows. */
			if (row->n_tokens > st->n_tokens)
				r->garbled = true;
			continue;
		}
		if (row->token == SHM_TOKEN_PREFILL) {
			/* A model that holds the whole prefix has a token
			 * for it: this one cannot be. */
			if (row->detail >= row->n_tokens) {
				sc->counts.n_stale++;
				r->garbled = true;
			} else if (row->detail > sc->slot_prefilled[row->slot]) {
				sc->slot_prefilled[row->slot] = row->detail;
				r->n_prefill++;
			}
			continue;
		}
		if (row->token == SHM_TOKEN_REFUSED) {
			s->committing_id = r->id;
			*a = (struct shard_action){ .kind = SHARD_ACT_REFUSE,
						    .slot = row->slot, .why = row->detail };
			r->n_ok++;
			return true;
		}
		if (!cr->lp_ok) {	/* garbage logprobs: rejected like a
					 * garbled row */
			sc->counts.n_stale++;
			r->garbled = true;
			continue;
		}
		s->committing_id = r->id;
		*a = (struct shard_action){ .kind = SHARD_ACT_TOKEN, .slot = row->slot,
					    .token = row->token, .lp = &cr->lp };
		if (step_planner_commit(&sc->planner, row->slot))
			s->redispatch = true;	/* a new plan (step_plan.h) */
		if (sched_kv_commit(&sc->kv, s->index, row->slot, row->token))
			s->redispatch = true;	/* its hold ended */
		r->last_slot = row->slot;
		r->n_ok++;
		return true;
	}
	return false;
}

void shard_result_end(struct sched *sc, struct shard *s, struct shard_result *r)
{
	if (r->too_many)
		return;
	if (r->garbled || shard_result_lacks_rows(sc, s, r->id))
		shard_reset_after_garble(s, r->id);
	else if (r->n_ok && r->id >= s->reset_id)
		s->resets_unanswered = 0;
	if (s->sent_lockstep)	/* every row waits for its next step */
		s->redispatch = true;
	/* (several rows: the suspect's speculated tokens) */
	if (r->id && r->id == s->suspect_id && r->n_ok >= 1) {
		shard_clear_suspect(s, r->last_slot);
		s->redispatch = true;
	}
	/* tables near their end grow before the worker reaches it */
	if (sched_kv_grow(&sc->kv, s->index))
		s->redispatch = true;
	sc->counts.n_steps++;
	sc->counts.n_step_rows += r->n_rows;
	sc->counts.n_step_capacity += s->n_slots;
}

/*
 * Before a refill: what the worker has adopted (wait_policy.c compares).
 * Slots it is now past give their blocks back at once, not at the next
 * refill: a shard left idle after cancellations would hold them (and
 * /metrics would count them used) until a request came.
 */
void shard_note_adopted(struct sched *sc, struct shard *s)
{
	if (sc->in_process)
		return;
	s->adopted_seen = atomic_load_explicit(
		&shm_channel_at(sc->seg, s->index)->dispatch_adopted,
		memory_order_acquire);
	if (s->n_draining && sched_kv_on(&sc->kv))
		shard_kv_reclaim(sc, s);
}

/* ------------------------------------------------------------------------
 * Reading results
 * ---------------------------------------------------------------------- */

/* Track how long the shard takes per result, to know when to expect the
 * next one (sched_wait() spins only around that moment). */
static void shard_note_step_time(struct shard *s, uint64_t ns)
{
	s->step_ewma_ns = s->step_ewma_ns ? s->step_ewma_ns - s->step_ewma_ns / 8 + ns / 8 : ns;
}

/*
 * Hand the result entries read so far back to the worker, and wake it if
 * it sleeps waiting for room.
 */
static void shard_release_results(const struct shard *s, struct shm_channel *ch)
{
	shard_channel_release(&s->chan, ch);
}

/*
 * A result entry that cannot be applied at all (a sequence number or a
 * dispatch id we did not send): the worker's rows are no longer ours, so
 * the next dispatch is a reset, whatever dispatch it ran.
 */
static void shard_reject_result(struct sched *sc, struct shard *s)
{
	sc->counts.n_stale++;
	s->reset = s->redispatch = true;
}

/*
 * Read the shard's published results, at most a ring of them (a worker
 * that floods the ring must not keep us from the other shards and the
 * input): shard_sched.h shows the calls in order.
 */
bool shard_poll_begin(struct sched *sc, struct shard *s, struct shard_poll *p)
{
	*p = (struct shard_poll){ .released = s->chan.result_pos };
	return !(sc->in_process || !worker_sup_running(sc->sup, s->index) ||
		 worker_sup_misbehaved(sc->sup, s->index));
}


/* The next result entry whose rows are to be applied, or false. */
bool shard_poll_next(struct sched *sc, struct shard *s, struct shard_poll *p,
		     struct shard_result *r)
{
	struct shm_channel *ch = shm_channel_at(sc->seg, s->index);
	uint64_t step_cap = sc->step_timeout_ms * 1000000ull;
	uint32_t depth = sc->seg->hdr->ring_depth;
	struct shard_row_rules rules;
	struct shard_checked c;

	shard_row_rules(sc, &rules);
	for (; !p->done && p->n_read < depth; p->n_read++) {
		uint32_t verdict = shard_channel_read(&s->chan, sc->seg->hdr, ch, &rules, &c);

		if (verdict == SHARD_RESULT_NONE)
			break;		/* not written since we last read it */
		p->progress = true;
		p->now = clock_now_ns();
		switch (verdict) {
		case SHARD_RESULT_BAD_SEQ:
			shard_warn(s, "result at ring position %llu has sequence "
				   "number %llu: rejected",
				   (unsigned long long)c.pos, (unsigned long long)c.seq);
			shard_reject_result(sc, s);
			if (worker_sup_note_fruitless(sc->sup, s->index, p->now))
				p->done = true;
			continue;
		case SHARD_RESULT_BAD_ID:
			/* garbled: the rows it carries may be anyone's */
			shard_warn(s, "result with dispatch id %llu, not one of "
				   "ours (%llu..%llu): rejected",
				   (unsigned long long)c.id,
				   (unsigned long long)s->chan.first_id,
				   (unsigned long long)s->chan.issued_id);
			shard_reject_result(sc, s);
			if (worker_sup_note_fruitless(sc->sup, s->index, p->now))
				p->done = true;
			continue;
		case SHARD_RESULT_FAILED:
			shard_warn(s, "model failed a step (%s); restarting the "
				   "worker", strerror(-c.status));
			worker_sup_kill_failed_step(sc->sup, s->index, c.status);
			p->done = true;
			return false;
		}
		sc->counts.model_ns += c.model_ns < step_cap ? c.model_ns : step_cap;
		sched_spec_count_result(&sc->counts.spec, s->n_slots, sc->emit, &c, step_cap);
		shard_result_start(sc, s, r, c.id, c.rows, c.n_rows,
				   verdict == SHARD_RESULT_TOO_MANY_ROWS);
		return true;	/* shard_poll_after() ends the entry */
	}
	p->done = true;
	return false;
}

/* The entry's rows are applied: count progress, hand entries back. */
void shard_poll_after(struct sched *sc, struct shard *s, struct shard_poll *p,
		      struct shard_result *r)
{
	uint32_t depth = sc->seg->hdr->ring_depth;
	uint32_t n_ok = r->too_many ? 0 : r->n_ok;
	uint64_t now = p->now;

	p->n_read++;	/* shard_channel_read() moved result_pos on */
	r->timed = false;
	if (!n_ok && !r->n_prefill &&
	    worker_sup_note_fruitless(sc->sup, s->index, now)) {
		p->done = true;
		return;
	}
	if (!n_ok && r->n_prefill) {
		/* a prefill chunk that got further is progress: each
		 * slot can claim it only up to its prefix length per
		 * worker life or reset (slot_prefilled) */
		worker_sup_note_progress(sc->sup, s->index, now, false);
	}
	if (n_ok) {
		/* Progress is a committed row: only that restarts
		 * the step timeout's clock. */
		r->took_ns = now - worker_sup_progress_ns(sc->sup, s->index);
		r->timed = true;
		worker_sup_note_progress(sc->sup, s->index, now, true);
		shard_note_step_time(s, r->took_ns);
		sc->counts.step_ns += r->took_ns;
	}
	/* A worker that got a whole ring ahead sleeps until we make
	 * room: give back half a ring at a time, so that it runs
	 * (its wake-up included) while we commit the other half,
	 * instead of after. */
	if (s->chan.result_pos - p->released >= depth / 2) {
		shard_release_results(s, shm_channel_at(sc->seg, s->index));
		p->released = s->chan.result_pos;
	}
}

/* Hand back what is left; true when any result was read. */
bool shard_poll_end(struct sched *sc, struct shard *s, struct shard_poll *p)
{
	if (!p->progress)
		return false;
	if (s->chan.result_pos != p->released)	/* else just handed back */
		shard_release_results(s, shm_channel_at(sc->seg, s->index));
	return true;	/* engine_loop() refills and dispatches next */
}


/* --workers 0: run the shard's step right here, as a worker would. */
int shard_step_in_process(struct sched *sc, struct shard *s, struct shard_result *r)
{
	struct shm_result_row *rows = sc->inproc_rows;
	struct shm_dispatch_row *step = s->chan.sent;
	struct shard_row_rules rules;
	uint32_t n, k;
	uint64_t t0;
	int ret;

	n = shard_collect_rows(sc, s, step);
	/* like a worker, only the rows below their limit (a paged row at
	 * the end of its table waits for it to grow) */
	k = 0;
	for (uint32_t i = 0; i < n; i++)
		if (step[i].n_tokens < step[i].limit)
			step[k++] = step[i];
	n = k;
	if (!n)
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		/* set when the slot was given its request */
		const struct sched_request *rq = &sc->slot_rq[step[i].slot];

		sc->inproc_step[i] = (struct runner_row){
			.slot = step[i].slot, .generation = step[i].generation,
			.tokens = sc->slots->tokens[step[i].slot],
			.n_tokens = step[i].n_tokens,
			.step_consume = step[i].step_consume };
		if (sched_kv_on(&sc->kv)) {
			sc->inproc_step[i].blocks = shm_kv_table_at(sc->seg, step[i].slot);
			sc->inproc_step[i].n_blocks = step[i].kv_blocks;
			sc->inproc_step[i].kv_cached = step[i].kv_cached;
		}
		if (rq->needs_logits) {	/* greedy: the step never reads it */
			sc->inproc_step[i].sampling = rq->sampling;
			sc->inproc_step[i].k = step[i].n_tokens - rq->n_prompt;
			sc->inproc_step[i].n_prompt = rq->n_prompt;
			sc->inproc_step[i].choice = rq->choice;
			sc->inproc_step[i].sampled = &sc->inproc_sampled[(size_t)i * sc->emit];
		}
		sc->inproc_step[i].room = step[i].limit - step[i].n_tokens;
		sc->inproc_step[i].no_spec = rq->no_spec;
		sc->inproc_step[i].grammar = rq->grammar;
	}
	/* slots that left since the last step: their state goes */
	model_runner_keep(sc->runner, n, sc->inproc_step);
	t0 = clock_now_ns();
	ret = model_runner_step(sc->runner, n, sc->inproc_step, sc->inproc_outcomes);
	t0 = clock_now_ns() - t0;
	sched_spec_count_runner(&sc->counts.spec, sc->runner);
	sc->counts.model_ns += t0;	/* in-process, the step is the model call */
	sc->counts.step_ns += t0;
	if (ret) {	/* no worker to isolate the request in: the engine
			 * gives up */
		r->took_ns = t0;
		r->timed = true;
		return ret;
	}
	k = 0;	/* result rows: a row's tokens at its next positions */
	for (uint32_t i = 0; i < n; i++) {
		const struct runner_result *o = &sc->inproc_outcomes[i];
		uint32_t extra = o->outcome == RUNNER_TOKEN ? o->n_more : 0;

		if (step[i].n_tokens + 1 + extra > step[i].limit)
			extra = step[i].limit - step[i].n_tokens - 1;
		for (uint32_t j = 0; j <= extra; j++, k++) {
			int32_t tok = j ? o->more[j - 1] : o->token;

			rows[k] = (struct shm_result_row){
				.slot = step[i].slot, .generation = step[i].generation,
				.n_tokens = step[i].n_tokens + j, .detail = o->detail,
				.token = o->outcome == RUNNER_TOKEN ? tok :
					 o->outcome == RUNNER_PREFILL ? SHM_TOKEN_PREFILL :
					 SHM_TOKEN_REFUSED };
			/* the worker's part: the token goes right after its
			 * prefix */
			if (o->outcome == RUNNER_TOKEN)
				sc->slots->tokens[step[i].slot][step[i].n_tokens + j] = tok;
			if (o->outcome == RUNNER_TOKEN && sc->inproc_step[i].sampled)
				shm_logprobs_set(&sc->inproc_logprobs[k],
						 &sc->inproc_step[i].sampled[j]);
		}
	}
	/* the same checked rows a worker's result gives */
	shard_row_rules(sc, &rules);
	shard_channel_check_rows(&s->chan, rows, sc->inproc_logprobs, k, &rules,
				 s->chan.checked);
	shard_result_start(sc, s, r, 0, s->chan.checked, k, false);
	r->took_ns = t0;
	r->timed = true;
	return 1;
}
