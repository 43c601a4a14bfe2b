/*
 * worker_loop.c - one worker process serving one shard.
 *
 * The worker owns no request state beyond the rows it is running.  A
 * dispatch record from the coordinator gives it a set of rows (slot,
 * generation, prefix length, limit); it then runs step after step on its
 * own: hand the model pointers straight into the shard's token buffers (no
 * copy of any prefix; through a read-only view, so a stray write of the
 * model faults), write each new token right after its prefix, and
 * post one result record per step tagged with the dispatch id and each
 * row's slot, generation and position.  A row leaves the set when it
 * reaches its limit (max_tokens), or when the coordinator publishes a
 * newer dispatch without it (a stop, a cancel, a refill), which the worker
 * adopts before its next step.  So the worker never waits for the
 * coordinator between steps: committing a step overlaps the next one.
 * The coordinator decides whether each result row is still current.
 *
 * The worker runs at most ring_depth results ahead of what the
 * coordinator has read (results_consumed), so a stopped row costs at most
 * a few wasted rows, and a result entry is never overwritten unread.
 *
 * Waiting (for a dispatch when it has no rows, or for room in the result
 * ring): spin for a while, then announce worker_sleeping, fence, re-check
 * (sleep_handshake.h), and sleep in FUTEX_WAIT on the channel's wake_seq
 * word.  The coordinator bumps the word and wakes it only when it sees the
 * flag (after its own fence), so a busy shard never enters the kernel.
 * The wait wakes every 200 ms to check that the coordinator still exists
 * (PR_SET_PDEATHSIG covers the usual case; the check covers a coordinator
 * that died before the prctl took effect).
 */
#include "worker/worker_loop.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"
#include "util/log_escape.h"
#include "dynbatch/model.h"
#include "model/kv_pool.h"
#include "model/model_loader.h"
#include "model/model_runner.h"
#include "ipc/shm_segment.h"
#include "util/sleep_handshake.h"
#include "worker/worker_sampling.h"

struct worker {
	const struct worker_options *opt;
	struct shm_segment seg;
	struct shm_channel *ch;
	struct model *model;
	struct model_runner *runner;	/* the model's steps, and its state */
	struct kv_pool pool;		/* a paged model's KV (our memory) */
	uint32_t *kv_gen;		/* per shard slot: the generation whose
					 * block copy is done (0: none) */
	uint32_t first_slot;		/* our shard: [first_slot, end_slot) */
	uint32_t end_slot;
	uint64_t dispatch_pos;		/* next dispatch position to look at */
	uint64_t dispatch_id;		/* the dispatch we run (0: none yet) */
	uint64_t result_pos;		/* next result position to write */
	int32_t **buffers;		/* per shard slot: its token buffer */
	const int32_t **views;		/* per shard slot: the same, read-only */
	struct runner_row *step_rows;	/* this step's rows, for the runner */
	struct runner_result *outcomes;	/* and what became of each */
	struct sampler_result *sampled;	/* and their logprobs, when asked */
	struct worker_sampling sampling; /* per shard slot: its request's
					 * sampling fields, our copy */
	const struct worker_slot_sampling **step_sampling; /* per step row */
	bool *step_grammar_bad;		/* per step row: its grammar entry
					 * could not be compiled */
	uint32_t *step_index;		/* step row -> its index in rows */
	struct shm_dispatch_row *rows;	/* the rows we run, private */
	uint32_t n_rows;
	struct shm_dispatch_row *step;	/* this step's rows (below their limit) */
	struct shm_dispatch_row *incoming; /* private copy of a new dispatch */
	/* scratch for worker_adopt(), per shard slot: the prefix length and
	 * generation of the row we run for it (generation 0: none; a slot's
	 * first request has generation 1) */
	uint32_t *ahead;
	uint32_t *ahead_gen;
	uint64_t n_results;
	uint64_t gap_ewma_ns;		/* typical wait for a dispatch */
};

/*
 * How long to spin for the next dispatch.  The coordinator answers a
 * result after it has committed the step (tens of microseconds for a big
 * batch); sleeping instead costs a 50-150 us wake-up on a small VM
 * (docs/DESIGN.md 8.1).  So
 * the worker spins for about twice the usual answer time, learned from
 * the gaps it saw (at least spin_ns, at most WORKER_SPIN_MAX_NS).  Gaps
 * longer than WORKER_GAP_IDLE_NS are an idle shard, not an answer time.
 */
#define WORKER_SPIN_MAX_NS (300ull * 1000)
#define WORKER_GAP_IDLE_NS (1000ull * 1000)
/* Longest sleep before checking that the coordinator still exists. */
#define WORKER_SLEEP_NS (200ull * 1000 * 1000)

static uint64_t worker_spin_budget(const struct worker *w)
{
	uint64_t budget = 2 * w->gap_ewma_ns;

	if (budget > WORKER_SPIN_MAX_NS)
		budget = WORKER_SPIN_MAX_NS;
	return budget > w->opt->spin_ns ? budget : w->opt->spin_ns;
}

static void worker_note_gap(struct worker *w, uint64_t gap_ns, bool slept)
{
	/* A gap that included a wake-up is inflated by it: count only the
	 * part we could have spun through, capped. */
	if (gap_ns > WORKER_GAP_IDLE_NS)
		return;
	if (slept && gap_ns > WORKER_SPIN_MAX_NS)
		gap_ns = WORKER_SPIN_MAX_NS;
	w->gap_ewma_ns = w->gap_ewma_ns - w->gap_ewma_ns / 8 + gap_ns / 8;
}

static bool coordinator_alive(const struct worker *w)
{
	return getppid() == (pid_t)w->seg.hdr->coordinator_pid;
}

/* What the worker waits for: a new dispatch, or room for a result. */
static bool worker_dispatch_ready(const struct worker *w)
{
	return shm_entry_ready(&shm_dispatch_at(w->seg.hdr, w->ch,
						w->dispatch_pos)->seq,
			       w->dispatch_pos);
}

static bool worker_result_room(const struct worker *w)
{
	/* acquire: pairs with the release store in the coordinator's
	 * shard_channel_release() (shard/shard_channel.c): it has read the
	 * entry we are about to reuse */
	return w->result_pos - atomic_load_explicit(&w->ch->results_consumed,
						    memory_order_acquire) <
	       w->seg.hdr->ring_depth;
}

/* What worker_wait() waits for, in the form the handshake re-checks. */
struct worker_wait_for {
	const struct worker *w;
	bool (*ready)(const struct worker *);
};

static bool worker_wait_recheck(const void *arg)
{
	const struct worker_wait_for *f = arg;

	return f->ready(f->w);
}

/*
 * Wait until ready(w).  Returns 0, or -EPIPE when the coordinator is gone.
 * Waiting for a dispatch spins for the learnt budget (the coordinator
 * answers within microseconds).  Waiting for room in the result ring
 * means the coordinator is behind us: spinning would only take a CPU it
 * needs, so that wait sleeps after a few quick checks, and the
 * coordinator wakes us once it has read half the ring.
 */
static int worker_wait(struct worker *w, bool (*ready)(const struct worker *))
{
	bool for_dispatch = ready == worker_dispatch_ready;
	uint64_t begin = clock_now_ns(), start = begin;
	uint64_t spin_ns = for_dispatch ? worker_spin_budget(w) : 0;
	struct worker_wait_for wait_for = { w, ready };
	bool slept = false;
	unsigned spins = 0;
	uint32_t seen;

	while (!ready(w)) {
		if (++spins < 64 || clock_now_ns() - start < spin_ns) {
			/* Yield while spinning: with more workers than CPUs a
			 * spinner must not keep the coordinator (or the worker
			 * whose result it waits for) off the CPU. */
			if ((spins & 15) == 0)
				sched_yield();
			else
				cpu_relax();
			continue;
		}
		/* Read before the flag goes up: a wake-up after this
		 * point changes the word, so the wait below returns. */
		seen = atomic_load_explicit(&w->ch->wake_seq, memory_order_acquire);
		/* pairs with sleep_handshake_check() in the coordinator's
		 * shard_dispatch() and shard_release_results(): either it
		 * sees our flag or we see its dispatch (or the room it made) */
		if (!sleep_handshake_announce(&w->ch->worker_sleeping, 1,
					      worker_wait_recheck, &wait_for)) {
			shm_worker_sleep(w->ch, seen, WORKER_SLEEP_NS);
			slept = true;
		}
		sleep_handshake_done(&w->ch->worker_sleeping);
		if (!coordinator_alive(w))
			return -EPIPE;
		start = clock_now_ns();
		spins = 0;
	}
	if (for_dispatch)
		worker_note_gap(w, clock_now_ns() - begin, slept);
	return 0;
}

/*
 * Fill a deliberately broken result (test mode): wrong slots, stale
 * generations, absurd counts, out-of-range tokens, dispatch ids never
 * sent, sequence numbers for another position.  Returns the ring position
 * whose seq to publish (the entry's own, w->result_pos, unless garbled).
 */
static uint64_t worker_fill_garbage(struct worker *w, struct shm_result *r,
				    uint32_t n_rows)
{
	const struct shm_header *hdr = w->seg.hdr;
	uint32_t kind = (uint32_t)(w->n_results / w->opt->garbage_every) % 6;
	uint64_t seq_pos = w->result_pos;

	r->n_rows = n_rows;
	for (uint32_t i = 0; i < n_rows; i++) {
		r->rows[i].slot = w->step[i].slot;
		r->rows[i].generation = w->step[i].generation;
		r->rows[i].token = w->outcomes[i].token;
		r->rows[i].n_tokens = w->step[i].n_tokens;
		r->rows[i].detail = 0;
	}
	switch (kind) {
	case 0:	/* slots far out of range */
		for (uint32_t i = 0; i < n_rows; i++)
			r->rows[i].slot = 0xfffffff0u - i;
		break;
	case 1:	/* generations from the past */
		for (uint32_t i = 0; i < n_rows; i++)
			r->rows[i].generation -= 1;
		break;
	case 2:	/* an absurd row count */
		r->n_rows = 0xffffffffu;
		break;
	case 3:	/* tokens outside the vocabulary */
		for (uint32_t i = 0; i < n_rows; i++)
			r->rows[i].token = (int32_t)(hdr->vocab + i) * (i & 1 ? -1 : 1);
		break;
	case 4:	/* a dispatch id never sent: far ahead, or 0 */
		r->dispatch_id = w->n_results & 1 ? 0 : r->dispatch_id + (1ull << 40);
		break;
	default: /* the sequence number of a position laps ahead or behind */
		seq_pos = w->n_results & 1 ? w->result_pos + 3 * hdr->ring_depth :
					     w->result_pos - 1;
		break;
	}
	return seq_pos;
}

/*
 * Write our notification pipe if the coordinator sleeps and wants to hear
 * of this:
 * a dozing coordinator (long steps) reads the rings on its own timer and
 * is woken only when urgent.  Call after publishing what it is to see:
 * the handshake's fence pairs with the one after the coordinator sets
 * coordinator_sleeping in sched_wait(), so either it sees what we
 * published or we see it asleep.
 */
static void worker_wake_coordinator(const struct worker *w, bool urgent)
{
	uint32_t sleeping = sleep_handshake_check(shm_coordinator_sleeping(&w->seg));
	uint8_t one = 1;

	if (sleeping == SHM_COORD_AWAKE ||
	    (sleeping == SHM_COORD_DOZING && !urgent))
		return;
	/* EAGAIN: the pipe is full, so the coordinator has a wake-up
	 * waiting already */
	if (write(w->opt->notify_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		LOG(LOG_WARN, "notify write: %s", strerror(errno));
}

/*
 * The paged part of adopting dispatch id (its rows in w->incoming): each
 * row's table within bounds, and the block copy of a request we see for
 * the first time done now, before any step writes its blocks (it is the
 * copy-on-write of a block the request shares).  0, or -EPROTO.
 */
static int worker_adopt_kv(struct worker *w, uint64_t id, uint32_t n_rows)
{
	const struct shm_header *hdr = w->seg.hdr;

	for (uint32_t i = 0; i < n_rows; i++) {
		const struct shm_dispatch_row *r = &w->incoming[i];
		uint32_t local = r->slot - w->first_slot;

		if (!hdr->kv_block_tokens)
			continue;
		if (r->slot < w->first_slot || r->slot >= w->end_slot ||
		    r->kv_blocks > hdr->kv_max_blocks || r->kv_cached > r->n_tokens ||
		    r->limit > (uint64_t)r->kv_blocks * hdr->kv_block_tokens + 1) {
			LOG(LOG_ERROR, "dispatch %llu row %u: block table out of range",
			    (unsigned long long)id, i);
			return -EPROTO;
		}
		if (w->kv_gen[local] == r->generation)
			continue;
		w->kv_gen[local] = r->generation;
		if (r->copy_dst != UINT32_MAX &&
		    kv_pool_copy(&w->pool, r->copy_src, r->copy_dst)) {
			LOG(LOG_ERROR, "dispatch %llu row %u: copy of block %u to %u "
			    "outside the pool", (unsigned long long)id, i,
			    r->copy_src, r->copy_dst);
			return -EPROTO;
		}
	}
	return 0;
}

/*
 * Adopt the newest published dispatch, if there is one: its rows replace
 * ours.  A row we already run (same slot and generation) keeps our own,
 * longer prefix unless the dispatch says reset: the coordinator has not
 * yet read the results that took us there.  Called only between steps,
 * so dispatch_adopted also tells the coordinator that we will not touch
 * the rows the dispatch leaves out.  0, or -EPROTO on a bad record.
 */
static int worker_adopt(struct worker *w)
{
	const struct shm_header *hdr = w->seg.hdr;
	struct shm_dispatch *d;
	uint64_t pos = w->dispatch_pos;
	uint32_t n_rows, flags = 0;
	uint64_t id;

	/* A reset in a dispatch we skip still holds: the newest one may
	 * have been sent before the coordinator saw us take the reset. */
	while (shm_entry_ready(&shm_dispatch_at(hdr, w->ch, pos)->seq, pos)) {
		flags |= shm_dispatch_at(hdr, w->ch, pos)->flags;
		pos++;
	}
	if (pos == w->dispatch_pos)
		return 0;
	d = shm_dispatch_at(hdr, w->ch, pos - 1);
	id = d->dispatch_id;
	n_rows = d->n_rows;
	if (n_rows > hdr->shard_capacity) {
		LOG(LOG_ERROR, "dispatch %llu has %u rows (capacity %u)",
		    (unsigned long long)id, n_rows, hdr->shard_capacity);
		return -EPROTO;
	}
	memcpy(w->incoming, d->rows, n_rows * sizeof(w->incoming[0]));
	if (worker_adopt_kv(w, id, n_rows))
		return -EPROTO;
	for (uint32_t i = 0; i < w->n_rows; i++) {
		w->ahead[w->rows[i].slot - w->first_slot] = w->rows[i].n_tokens;
		w->ahead_gen[w->rows[i].slot - w->first_slot] = w->rows[i].generation;
	}
	for (uint32_t i = 0; i < n_rows; i++) {
		struct shm_dispatch_row *r = &w->incoming[i];
		uint32_t local;

		if (r->slot < w->first_slot || r->slot >= w->end_slot ||
		    r->limit > hdr->max_context || r->n_tokens > r->limit) {
			LOG(LOG_ERROR, "dispatch %llu row %u out of range",
			    (unsigned long long)id, i);
			return -EPROTO;
		}
		local = r->slot - w->first_slot;
		if (!(flags & SHM_DISPATCH_RESET) && r->generation &&
		    w->ahead_gen[local] == r->generation &&
		    w->ahead[local] > r->n_tokens && w->ahead[local] <= r->limit)
			r->n_tokens = w->ahead[local];
	}
	for (uint32_t i = 0; i < w->n_rows; i++)	/* scratch clean again */
		w->ahead_gen[w->rows[i].slot - w->first_slot] = 0;
	memcpy(w->rows, w->incoming, n_rows * sizeof(w->rows[0]));
	w->n_rows = n_rows;
	/* The model's state: a reset rewinds rows to what the coordinator
	 * committed, and it may have rejected what we computed past that,
	 * so nothing is vouched for (docs/DESIGN.md 2.2); rows the dispatch
	 * leaves out have ended, and their state goes. */
	if (flags & SHM_DISPATCH_RESET)
		model_runner_forget_all(w->runner);
	for (uint32_t i = 0; i < n_rows; i++)	/* step_rows: scratch here */
		w->step_rows[i] = (struct runner_row){
			.slot = w->rows[i].slot - w->first_slot,
			.generation = w->rows[i].generation };
	model_runner_keep(w->runner, n_rows, w->step_rows);
	w->dispatch_id = id;
	w->dispatch_pos = pos;
	/* release: every token we wrote for a row we now leave is written */
	atomic_store_explicit(&w->ch->dispatch_adopted, pos, memory_order_release);
	/* The coordinator may be asleep waiting for exactly this (a slot it
	 * wants to reuse).  Not urgent: a dozing one looks again within a
	 * quarter step, before our next step can take a refill, and a
	 * wake-up per dispatch would cost us a few microseconds each. */
	worker_wake_coordinator(w, false);
	return 0;
}

/* Gather this step's rows: ours that are still below their limit. */
static uint32_t worker_collect_step(struct worker *w)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < w->n_rows; i++) {
		if (w->rows[i].n_tokens < w->rows[i].limit) {
			w->step_index[n] = i;
			w->step[n++] = w->rows[i];
		}
	}
	return n;
}

/* The most tokens a row gets in one result: 1, or 1 + the guesses
 * speculation may confirm (the coordinator sized the results for it). */
static uint32_t worker_emit(const struct worker *w)
{
	return w->seg.hdr->result_rows / w->seg.hdr->shard_capacity;
}

/* The result row of step row i, from what the runner made of it. */
static struct shm_result_row worker_result_row(const struct worker *w,
					       uint32_t i, int status)
{
	const struct runner_result *o = &w->outcomes[i];
	struct shm_result_row row = {
		.slot = w->step[i].slot, .generation = w->step[i].generation,
		.n_tokens = w->step[i].n_tokens, .token = -1 };

	if (status)
		return row;
	switch (o->outcome) {
	case RUNNER_TOKEN:
		row.token = o->token;
		break;
	case RUNNER_PREFILL:
		row.token = SHM_TOKEN_PREFILL;
		row.detail = o->detail;
		break;
	default:
		row.token = SHM_TOKEN_REFUSED;
		row.detail = o->detail;
		break;
	}
	return row;
}

/*
 * The result rows of a step: each step row's, and after a row given
 * several tokens (speculation) one more row per token, at the next
 * positions, each with its logprobs when asked.  Returns how many.
 */
static uint32_t worker_post_rows(struct worker *w, struct shm_result *r,
				 uint32_t n_rows, int status)
{
	const struct shm_header *hdr = w->seg.hdr;
	uint32_t n = 0;

	for (uint32_t i = 0; i < n_rows; i++) {
		const struct runner_result *o = &w->outcomes[i];
		const struct shm_dispatch_row *row = &w->rows[w->step_index[i]];
		uint32_t extra = status || o->outcome != RUNNER_TOKEN ? 0 : o->n_more;

		if (row->n_tokens + 1 + extra > row->limit)	/* never past it */
			extra = row->limit > row->n_tokens ? row->limit - row->n_tokens - 1 : 0;
		for (uint32_t j = 0; j <= extra && n < hdr->result_rows; j++, n++) {
			r->rows[n] = worker_result_row(w, i, status);
			r->rows[n].n_tokens += j;
			if (j)
				r->rows[n].token = o->more[j - 1];
			if (!status && o->outcome == RUNNER_TOKEN &&
			    w->step_rows[i].sampled)
				shm_logprobs_set(shm_result_logprobs(hdr, w->ch,
								     w->result_pos, n),
						 &w->step_rows[i].sampled[j]);
		}
	}
	return n;
}

/*
 * Run one step on the n_rows rows in w->step, write each new token after
 * its prefix, advance the rows that got one and post the result (room is
 * there).  Every row of the step is in the result, with its token, or
 * with no token yet (a prefill chunk), or refused.
 */
static void worker_step(struct worker *w, uint32_t n_rows)
{
	const struct shm_header *hdr = w->seg.hdr;
	struct shm_result *r = shm_result_at(hdr, w->ch, w->result_pos);
	bool rows_left = false, urgent;
	struct runner_spec_counts spec0, spec1;
	uint64_t t0, seq_pos = w->result_pos;
	int status = 0;

	for (uint32_t i = 0; i < n_rows; i++) {
		uint32_t local = w->step[i].slot - w->first_slot;
		const struct worker_slot_sampling *ws;

		ws = worker_sampling_get(&w->sampling, &w->seg, w->step[i].slot,
					 local, w->step[i].generation);
		w->step_sampling[i] = ws;
		w->step_rows[i] = (struct runner_row){
			.slot = local, .generation = w->step[i].generation,
			.tokens = w->views[local], .n_tokens = w->step[i].n_tokens,
			.step_consume = w->step[i].step_consume };
		if (hdr->kv_block_tokens) {
			w->step_rows[i].blocks = shm_kv_table_at(&w->seg,
								  w->step[i].slot);
			w->step_rows[i].n_blocks = w->step[i].kv_blocks;
			w->step_rows[i].kv_cached = w->step[i].kv_cached;
		}
		if (ws->valid && ws->needs_logits) {
			w->step_rows[i].sampling = &ws->params;
			w->step_rows[i].k = w->step[i].n_tokens > ws->n_prompt ?
					    w->step[i].n_tokens - ws->n_prompt : 0;
			w->step_rows[i].n_prompt = ws->n_prompt;
			w->step_rows[i].choice = ws->choice;
			w->step_rows[i].sampled = ws->params.logprobs ?
						  &w->sampled[(size_t)i * worker_emit(w)] :
						  NULL;
		}
		w->step_rows[i].room = w->step[i].limit - w->step[i].n_tokens;
		w->step_rows[i].no_spec = ws->valid && ws->no_spec;
		w->step_grammar_bad[i] = ws->valid && ws->grammar_bad;
		if (ws->valid && ws->grammar) {
			w->step_rows[i].grammar = ws->grammar->grammar;
			w->step_rows[i].grammar_cache = ws->grammar->cache;
		}
	}
	/* built with the first grammar a slot brought */
	model_runner_set_grammar_vocab(w->runner, w->sampling.vocab);
	spec0 = model_runner_spec_counts(w->runner);
	t0 = clock_now_ns();
	/* relaxed: the coordinator reads it only to decide blame */
	atomic_store_explicit(&w->ch->in_model_call, 1, memory_order_relaxed);
	status = model_runner_step(w->runner, n_rows, w->step_rows, w->outcomes);
	atomic_store_explicit(&w->ch->in_model_call, 0, memory_order_relaxed);
	r->model_ns = clock_now_ns() - t0;
	spec1 = model_runner_spec_counts(w->runner);
	r->spec_drafted = (uint32_t)(spec1.drafted - spec0.drafted);
	r->spec_accepted = (uint32_t)(spec1.accepted - spec0.accepted);
	r->spec_emitted = (uint32_t)(spec1.emitted - spec0.emitted);
	r->spec_rows = (uint32_t)(spec1.verify_rows - spec0.verify_rows);
	r->spec_draft_ns = spec1.draft_ns - spec0.draft_ns;

	r->dispatch_id = w->dispatch_id;
	r->status = status;
	w->n_results++;
	for (uint32_t i = 0; i < n_rows && !status; i++) {
		if (!w->step_sampling[i]->valid &&
		    w->outcomes[i].outcome != RUNNER_REFUSED)
			w->outcomes[i] = (struct runner_result){ .token = -1,
				.outcome = RUNNER_REFUSED,
				.detail = RUNNER_REFUSE_SAMPLING };
		else if (w->step_grammar_bad[i] &&
			 w->outcomes[i].outcome != RUNNER_REFUSED)
			w->outcomes[i] = (struct runner_result){ .token = -1,
				.outcome = RUNNER_REFUSED,
				.detail = RUNNER_REFUSE_GRAMMAR };
	}
	if (w->opt->garbage_every && w->n_results % w->opt->garbage_every == 0) {
		seq_pos = worker_fill_garbage(w, r, n_rows);
	} else {
		r->n_rows = worker_post_rows(w, r, n_rows, status);
	}
	for (uint32_t i = 0; i < n_rows && !status; i++) {
		struct shm_dispatch_row *row = &w->rows[w->step_index[i]];
		const struct runner_result *o = &w->outcomes[i];
		int32_t *buf = w->buffers[row->slot - w->first_slot];

		if (o->outcome == RUNNER_REFUSED) {
			/* its request ends: extend it no more */
			row->limit = row->n_tokens;
			continue;
		}
		if (o->outcome != RUNNER_TOKEN)
			continue;
		/* our shard's buffer, below the row's limit <= max_context
		 * (the runner gives no more than the row's room) */
		buf[row->n_tokens++] = o->token;
		for (uint32_t j = 0; j < o->n_more && row->n_tokens < row->limit; j++)
			buf[row->n_tokens++] = o->more[j];
	}
	if (w->opt->result_hook) {
		w->opt->result_hook->publish(w->opt->result_hook->arg, hdr, w->ch,
					     &w->result_pos);
	} else {
		shm_entry_publish(&r->seq, seq_pos);
		w->result_pos++;
	}
	/* A failed step leaves our rows where they were: the coordinator
	 * restarts us. */
	for (uint32_t i = 0; i < w->n_rows && !status; i++)
		rows_left |= w->rows[i].n_tokens < w->rows[i].limit;
	/* Urgent for a dozing coordinator: we failed, we are about to wait
	 * for a dispatch, or we will soon wait for room in the ring. */
	urgent = status || !rows_left ||
		 w->result_pos - atomic_load_explicit(&w->ch->results_consumed,
						      memory_order_relaxed) >=
		 hdr->ring_depth / 2;
	worker_wake_coordinator(w, urgent);
}

/*
 * The runner for our shard: a paged model gets the pool the coordinator
 * sized (shm_header.kv_blocks), mapped here in our own memory.  0, or -1
 * after logging why.
 */
static int worker_make_runner(struct worker *w, char *err, size_t err_len)
{
	const struct shm_header *hdr = w->seg.hdr;
	int ret;

	if (model_is_paged(w->model) != (hdr->kv_block_tokens > 0)) {
		LOG(LOG_ERROR, "the model is %spaged but the coordinator %s",
		    model_is_paged(w->model) ? "" : "not ",
		    hdr->kv_block_tokens ? "made block tables" : "made no KV pool");
		return -1;
	}
	if (hdr->kv_block_tokens) {
		ret = kv_pool_map(&w->pool, hdr->kv_blocks, hdr->kv_block_tokens,
				  model_kv_bytes_per_token(w->model), err, err_len);
		if (ret) {
			LOG(LOG_ERROR, "%s", err);
			return -1;
		}
		w->runner = model_runner_create_paged(w->model, hdr->shard_capacity,
						      hdr->max_context, &w->pool,
						      err, err_len);
	} else {
		w->runner = model_runner_create(w->model, hdr->shard_capacity,
						hdr->max_context, err, err_len);
	}
	if (!w->runner) {
		LOG(LOG_ERROR, "model: %s", LOG_STR(err));	/* a plugin's words */
		return -1;
	}
	return 0;
}

static void worker_free(struct worker *w)
{
	free(w->step_rows);
	free(w->outcomes);
	free(w->sampled);
	worker_sampling_free(&w->sampling);
	free(w->step_sampling);
	free(w->step_grammar_bad);
	free(w->step_index);
	free(w->buffers);
	free(w->views);
	free(w->rows);
	free(w->step);
	free(w->incoming);
	free(w->ahead);
	free(w->ahead_gen);
	free(w->kv_gen);
	model_runner_destroy(w->runner);
	kv_pool_unmap(&w->pool);
	model_close(w->model);
	shm_segment_detach(&w->seg);
}

int worker_run(const struct worker_options *opt)
{
	struct worker w = { .opt = opt };
	char err[256];
	uint32_t cap;
	int ret = 1;

	ret = shm_segment_attach(&w.seg, opt->shared_fd, opt->shard_fd,
				 opt->shard, err, sizeof(err));
	/* The mappings are all we need: a descriptor kept open is only
	 * something more to reach through /proc. */
	close(opt->shared_fd);
	close(opt->shard_fd);
	if (ret) {
		LOG(LOG_ERROR, "cannot attach: %s", err);
		return 1;
	}
	ret = 1;
	if (!coordinator_alive(&w)) {
		LOG(LOG_ERROR, "coordinator %d is gone", w.seg.hdr->coordinator_pid);
		goto out;
	}
	w.model = model_open(opt->model_spec, err, sizeof(err));
	if (!w.model) {
		LOG(LOG_ERROR, "model: %s", LOG_STR(err));	/* a plugin's words */
		goto out;
	}
	if (model_vocab(w.model) != w.seg.hdr->vocab) {
		LOG(LOG_ERROR, "model vocab %u differs from the coordinator's %u",
		    model_vocab(w.model), w.seg.hdr->vocab);
		goto out;
	}
	cap = w.seg.hdr->shard_capacity;
	w.step_rows = calloc(cap, sizeof(*w.step_rows));
	w.outcomes = calloc(cap, sizeof(*w.outcomes));
	w.sampled = calloc((size_t)cap * worker_emit(&w), sizeof(*w.sampled));
	w.step_sampling = calloc(cap, sizeof(*w.step_sampling));
	w.step_grammar_bad = calloc(cap, sizeof(*w.step_grammar_bad));
	w.step_index = calloc(cap, sizeof(*w.step_index));
	w.buffers = calloc(cap, sizeof(*w.buffers));
	w.views = calloc(cap, sizeof(*w.views));
	w.rows = calloc(cap, sizeof(*w.rows));
	w.step = calloc(cap, sizeof(*w.step));
	w.incoming = calloc(cap, sizeof(*w.incoming));
	w.ahead = calloc(cap, sizeof(*w.ahead));
	w.ahead_gen = calloc(cap, sizeof(*w.ahead_gen));
	w.kv_gen = calloc(cap, sizeof(*w.kv_gen));
	if (!w.kv_gen ||!w.step_rows || !w.outcomes || !w.step_index || !w.sampled ||
	    worker_sampling_init(&w.sampling, cap) || !w.step_sampling ||
	    !w.step_grammar_bad ||
	    !w.buffers || !w.views || !w.rows || !w.step ||
	    !w.incoming || !w.ahead || !w.ahead_gen) {
		LOG(LOG_ERROR, "out of memory");
		goto out;
	}
	/* before the sandbox: binding a stateful model reserves its state */
	if (worker_make_runner(&w, err, sizeof(err)))
		goto out;
	if (worker_emit(&w) > 1) {
		/* results sized for guesses: the coordinator speculates
		 * (docs/DESIGN.md 2.7) */
		struct spec_config sc = { .mode = SPEC_NGRAM,
					  .max_draft = worker_emit(&w) - 1,
					  .ngram_min = SPEC_NGRAM_MIN,
					  .ngram_max = SPEC_NGRAM_MAX };

		model_runner_set_spec(w.runner, &sc);
	}
	w.ch = shm_channel_at(&w.seg, opt->shard);
	w.first_slot = shm_shard_first_slot(w.seg.hdr, opt->shard);
	w.end_slot = opt->shard + 1 < w.seg.hdr->n_shards ?
		     shm_shard_first_slot(w.seg.hdr, opt->shard + 1) : w.seg.hdr->n_slots;
	for (uint32_t slot = w.first_slot; slot < w.end_slot; slot++) {
		w.buffers[slot - w.first_slot] = shm_tokens_at(&w.seg, slot);
		w.views[slot - w.first_slot] = w.seg.tokens_ro +
			(size_t)(slot - w.first_slot) * w.seg.hdr->max_context;
	}
	if (opt->before_serving && opt->before_serving(opt, err, sizeof(err))) {
		LOG(LOG_ERROR, "%s", err);
		goto out;
	}
	w.dispatch_pos = w.ch->start_dispatch_pos;
	w.result_pos = w.ch->start_result_pos;
	atomic_store(&w.ch->worker_ready_pid, (int32_t)getpid());
	/* The coordinator gives a shard requests only once its worker is
	 * ready: tell it now rather than at its next look.  The pipe is
	 * non-blocking; a full one means a wake-up is pending anyway. */
	if (write(opt->notify_fd, "r", 1) < 0 && errno != EAGAIN)
		LOG(LOG_WARN, "waking the coordinator: %s", strerror(errno));
	LOG(LOG_INFO, "serving shard %u", opt->shard);
	for (;;) {
		uint32_t n;

		if (worker_adopt(&w))
			break;
		n = worker_collect_step(&w);
		if (!n) {	/* nothing to run: wait for a dispatch */
			if (worker_wait(&w, worker_dispatch_ready)) {
				ret = 0;	/* coordinator gone */
				break;
			}
			continue;
		}
		if (!worker_result_room(&w) && worker_wait(&w, worker_result_room)) {
			ret = 0;
			break;
		}
		worker_step(&w, n);
	}
out:
	worker_free(&w);
	return ret;
}
