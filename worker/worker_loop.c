/*
 * worker_loop.c - one worker process serving one shard.
 *
 * The worker is a pure function server: it owns no request state.  Each
 * step it reads one dispatch record from its channel (slot, generation,
 * prefix length per row), hands the model pointers straight into the
 * read-only token buffers (no copy of any prefix), and posts one result
 * record tagged with the dispatch id and each row's slot and generation.
 * The coordinator decides whether the result is still current.
 *
 * Waiting: spin for spin_ns on the next dispatch's sequence number, then
 * announce worker_sleeping, fence, re-check, and sleep on the channel's
 * semaphore.  The coordinator posts the semaphore only when it sees the
 * flag (after its own fence), so a busy shard never enters the kernel.
 * The wait wakes every 200 ms to check that the coordinator still exists
 * (PR_SET_PDEATHSIG covers the usual case; the check covers a coordinator
 * that died before the prctl took effect).
 */
#include "worker_loop.h"

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

#include "clock.h"
#include "log.h"
#include "model_loader.h"
#include "shm_segment.h"

struct worker {
	const struct worker_options *opt;
	struct shm_segment seg;
	struct shm_channel *ch;
	struct model *model;
	uint64_t dispatch_pos;		/* next dispatch position to read */
	uint64_t result_pos;		/* next result position to write */
	const int32_t **prefixes;	/* shard_capacity pointers */
	uint32_t *lengths;
	int32_t *next_tokens;
	struct shm_dispatch_row *rows;	/* private copy of the dispatch */
	uint64_t n_results;
	uint64_t gap_ewma_ns;		/* typical result -> next dispatch time */
};

/*
 * How long to spin for the next dispatch.  The coordinator answers a
 * result after it has committed the step (tens of microseconds for a big
 * batch); sleeping instead costs a 50-150 us wake-up on a small VM
 * (DESIGN.md 7).  So
 * the worker spins for about twice the usual answer time, learned from
 * the gaps it saw (at least spin_ns, at most WORKER_SPIN_MAX_NS).  Gaps
 * longer than WORKER_GAP_IDLE_NS are an idle shard, not an answer time.
 */
#define WORKER_SPIN_MAX_NS (300ull * 1000)
#define WORKER_GAP_IDLE_NS (1000ull * 1000)

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

/*
 * Wait until the dispatch at w->dispatch_pos is published.  Returns 0, or
 * -EPIPE when the coordinator is gone.
 */
static int worker_wait_dispatch(struct worker *w, struct shm_dispatch *d)
{
	uint64_t begin = clock_now_ns(), start = begin;
	uint64_t spin_ns = worker_spin_budget(w);
	bool slept = false;
	unsigned spins = 0;

	while (!shm_entry_ready(&d->seq, w->dispatch_pos)) {
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
		atomic_store(&w->ch->worker_sleeping, 1);
		/* seq_cst: pairs with the fence in dispatch_publish() in the
		 * coordinator: either it sees our flag or we see its entry. */
		atomic_thread_fence(memory_order_seq_cst);
		if (!shm_entry_ready(&d->seq, w->dispatch_pos)) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 200 * 1000 * 1000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			sem_timedwait(&w->ch->dispatch_sem, &ts);
			slept = true;
		}
		atomic_store(&w->ch->worker_sleeping, 0);
		if (!coordinator_alive(w))
			return -EPIPE;
		start = clock_now_ns();
		spins = 0;
	}
	worker_note_gap(w, clock_now_ns() - begin, slept);
	return 0;
}

/* Fill a deliberately broken result (test mode): wrong slots, stale
 * generations, absurd counts, out-of-range tokens. */
static void worker_fill_garbage(struct worker *w, struct shm_result *r,
				uint32_t n_rows)
{
	const struct shm_header *hdr = w->seg.hdr;
	uint32_t kind = (uint32_t)(w->n_results / w->opt->garbage_every) % 4;

	r->n_rows = n_rows;
	for (uint32_t i = 0; i < n_rows; i++) {
		r->rows[i].slot = w->rows[i].slot;
		r->rows[i].generation = w->rows[i].generation;
		r->rows[i].token = w->next_tokens[i];
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
	default: /* tokens outside the vocabulary */
		for (uint32_t i = 0; i < n_rows; i++)
			r->rows[i].token = (int32_t)(hdr->vocab + i) * (i & 1 ? -1 : 1);
		break;
	}
}

/* Run one dispatch and post its result.  0, or -EPROTO on a bad record. */
static int worker_step(struct worker *w, struct shm_dispatch *d)
{
	const struct shm_header *hdr = w->seg.hdr;
	struct shm_result *r = shm_result_at(hdr, w->ch, w->result_pos);
	uint64_t dispatch_id = d->dispatch_id;
	uint32_t n_rows = d->n_rows;
	int status = 0;
	uint64_t t0;

	if (n_rows > hdr->shard_capacity) {
		LOG(LOG_ERROR, "dispatch %llu has %u rows (capacity %u)",
		    (unsigned long long)dispatch_id, n_rows, hdr->shard_capacity);
		return -EPROTO;
	}
	memcpy(w->rows, d->rows, n_rows * sizeof(w->rows[0]));
	for (uint32_t i = 0; i < n_rows; i++) {
		if (w->rows[i].slot >= hdr->n_slots ||
		    w->rows[i].n_tokens > hdr->max_context) {
			LOG(LOG_ERROR, "dispatch %llu row %u out of range",
			    (unsigned long long)dispatch_id, i);
			return -EPROTO;
		}
		w->prefixes[i] = shm_tokens_at(&w->seg, w->rows[i].slot);
		w->lengths[i] = w->rows[i].n_tokens;
		/* The newest tokens were just written by the coordinator on
		 * another CPU: start every row's transfer now, not one at a
		 * time inside the model. */
		if (w->lengths[i])
			__builtin_prefetch(w->prefixes[i] + w->lengths[i] - 1);
	}
	t0 = clock_now_ns();
	if (n_rows)
		status = model_next(w->model, n_rows, w->prefixes, w->lengths,
				    w->next_tokens);
	r->model_ns = clock_now_ns() - t0;

	r->dispatch_id = dispatch_id;
	r->status = status;
	w->n_results++;
	if (w->opt->garbage_every && w->n_results % w->opt->garbage_every == 0) {
		worker_fill_garbage(w, r, n_rows);
	} else {
		r->n_rows = n_rows;
		for (uint32_t i = 0; i < n_rows; i++) {
			r->rows[i].slot = w->rows[i].slot;
			r->rows[i].generation = w->rows[i].generation;
			r->rows[i].token = status ? -1 : w->next_tokens[i];
		}
	}
	shm_entry_publish(&r->seq, w->result_pos);
	w->result_pos++;
	w->dispatch_pos++;
	/* seq_cst: pairs with the fence after the coordinator sets
	 * coordinator_sleeping: either it sees our result or we see it asleep. */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&w->seg.hdr->coordinator_sleeping,
				 memory_order_relaxed)) {
		uint64_t one = 1;

		if (write(w->opt->notify_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			LOG(LOG_WARN, "notify write: %s", strerror(errno));
	}
	return 0;
}

static void worker_free(struct worker *w)
{
	free(w->prefixes);
	free(w->lengths);
	free(w->next_tokens);
	free(w->rows);
	model_close(w->model);
	shm_segment_detach(&w->seg);
}

int worker_run(const struct worker_options *opt)
{
	struct worker w = { .opt = opt };
	char err[256];
	uint32_t cap;
	int ret = 1;

	if (shm_segment_attach(&w.seg, opt->shm_name, opt->shard, err, sizeof(err))) {
		LOG(LOG_ERROR, "cannot attach: %s", err);
		return 1;
	}
	if (!coordinator_alive(&w)) {
		LOG(LOG_ERROR, "coordinator %d is gone", w.seg.hdr->coordinator_pid);
		goto out;
	}
	w.model = model_open(opt->model_spec, err, sizeof(err));
	if (!w.model) {
		LOG(LOG_ERROR, "model: %s", err);
		goto out;
	}
	if (model_vocab(w.model) != w.seg.hdr->vocab) {
		LOG(LOG_ERROR, "model vocab %u differs from the coordinator's %u",
		    model_vocab(w.model), w.seg.hdr->vocab);
		goto out;
	}
	cap = w.seg.hdr->shard_capacity;
	w.prefixes = calloc(cap, sizeof(*w.prefixes));
	w.lengths = calloc(cap, sizeof(*w.lengths));
	w.next_tokens = calloc(cap, sizeof(*w.next_tokens));
	w.rows = calloc(cap, sizeof(*w.rows));
	if (!w.prefixes || !w.lengths || !w.next_tokens || !w.rows) {
		LOG(LOG_ERROR, "out of memory");
		goto out;
	}
	w.ch = shm_channel_at(&w.seg, opt->shard);
	w.dispatch_pos = w.ch->start_dispatch_pos;
	w.result_pos = w.ch->start_result_pos;
	atomic_store(&w.ch->worker_ready_pid, (int32_t)getpid());
	LOG(LOG_INFO, "serving shard %u of %s", opt->shard, opt->shm_name);
	for (;;) {
		struct shm_dispatch *d = shm_dispatch_at(w.seg.hdr, w.ch, w.dispatch_pos);

		if (worker_wait_dispatch(&w, d)) {
			ret = 0;	/* coordinator gone: nothing left to serve */
			break;
		}
		if (worker_step(&w, d))
			break;
	}
out:
	worker_free(&w);
	return ret;
}
