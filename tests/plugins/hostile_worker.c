/*
 * hostile_worker.c - dynbatch-hostile-worker: a worker that attacks its
 * coordinator, for tests/e2e/e2e_hostile.sh (DYNBATCH_WORKER=<this>).
 *
 *   DYNBATCH_HOSTILE="MODE[,shard=N][,lives=L]"
 *
 * It attacks only on shard N (default 0) and only in the first L worker
 * processes started for that shard in one coordinator's life (default 2,
 * counted in a file under $DYNBATCH_HOSTILE_DIR, else $TMPDIR or /tmp);
 * everywhere else it is the honest worker (worker_run()), so a run has
 * honest shards to compare with bin/refdecode, and every request is still
 * answered once the attacker has spent its lives.  An attacker attacks
 * for as long as it lives.
 *
 * Result-level modes rewrite what the worker posts (a worker_result_hook
 * around the honest loop):
 *   wrong-generation  every row's generation wrong (ahead, behind, 0)
 *   empty             every result without rows
 *   bad-dispatch-id   every 3rd result (the first of a life too) with a
 *                     dispatch id never sent
 *   seq-jump          every 3rd result (the first too) with a sequence
 *                     number for another position, or posted positions
 *                     ahead
 *   flood             after its first honest result, copies of it into
 *                     every entry the coordinator frees, as fast as it can
 *   prefill-forever   every row a prefill row (no token yet) that claims
 *                     to be a little further along each time
 *   refuse            every row refused, with reasons in range or not:
 *                     the requests on its shard fail with an error that
 *                     says the model refused them, no other request does
 *   logprobs          every logprob block of a row that asked for them
 *                     invalid (NaN, +-inf, positive, n_top past the
 *                     request's top_logprobs or huge, alternatives out
 *                     of the vocabulary or with NaN / positive logprobs);
 *                     the other rows' blocks filled with 0xff
 *   sampling          scribbles its shard's sampling table (other
 *                     generations, huge n_bias, NaN temperature / top_p,
 *                     bias tokens out of the vocabulary, top_logprobs
 *                     past the limit) and posts every result empty, so
 *                     it is killed; the workers after it must sample as
 *                     the coordinator wrote the table, not as scribbled
 *   kv-tables         (a paged model) scribbles the KV block tables of its
 *                     shard (the uint32 entries after the sampling table,
 *                     shm_kv_table_at()) and the kv fields of every
 *                     dispatch row in its ring (kv_blocks, kv_cached,
 *                     copy_src, copy_dst), before every result: mostly
 *                     block ids inside its pool (its rows read and write
 *                     the wrong blocks: wrong tokens), now and then ids
 *                     outside it (its step fails) or a table too short
 *                     (its adoption fails); otherwise it is honest, so
 *                     its wrong tokens are committed.  Its pool is its own
 *                     private memory, so no other shard may change.  It
 *                     writes "hostile-kv: prompt <hash>" to standard
 *                     error for each request it runs (FNV-1a 64 of the
 *                     prompt's token ids as 4-byte little-endian words),
 *                     so the test knows which answers it may have spoilt
 *   grammar           scribbles its shard's grammar entries (the source
 *                     after the block tables, shm_grammar_at(): lengths
 *                     past the entry, random bytes) and turns every
 *                     token it posts into another (a token the request's
 *                     grammar mostly refuses): the coordinator must end
 *                     a constrained request rather than answer a token
 *                     its grammar refuses, and the workers after it must
 *                     compile the grammars the coordinator wrote
 * Channel-level modes attack whatever the process can reach, found the
 * generic way (/proc/self/maps, /proc/self/fd), from a thread beside the
 * honest loop, so they keep working whatever the segment's layout:
 *   scribble          random bytes over every writable shared mapping
 *                     (its channel, wake-up words included), again and
 *                     again; the worker posts nothing itself
 *   steal-wakeups     reads every readable descriptor it holds, in a loop
 *   write-fds         writes a forged JSON result line to every descriptor
 *   mprotect          makes every shared mapping writable (mprotect) and
 *                     writes garbage over it (the header, other shards'
 *                     prompts), and reopens the segment O_RDWR through
 *                     /proc/self/fd and /dev/shm to do the same
 * A write that faults (a read-only mapping) is skipped, not fatal: once
 * the coordinator gives a worker nothing it may not write, these modes
 * do no harm.  What an attack achieved (bytes stolen, mappings made
 * writable, objects reopened for writing) is written, now and then, to
 * $DYNBATCH_HOSTILE_DIR/report-<pid> as "stolen=N writable=N reopened=N".
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"
#include "util/parse_num.h"
#include "ipc/shm_segment.h"
#include "model/sim_model.h"
#include "worker/worker_args.h"
#include "worker/worker_loop.h"

#define HOSTILE_DEFAULT_LIVES 2u
#define HOSTILE_MAX_MAPS 64u

struct hostile {
	uint64_t n_results;		/* results the hook has seen */
	uint64_t rng;			/* splitmix64 state */
	const char *forge_id;		/* id of the forged result lines */
	int own_shard_fd;		/* the descriptor of its own shard's
					 * object (it may write that) */
	char report_path[PATH_MAX];	/* "" when there is no report */
	/* what the attack thread achieved */
	uint64_t n_stolen;		/* bytes read from descriptors */
	uint64_t n_writable;		/* read-only mappings made writable */
	uint64_t n_reopened;		/* shared objects reopened O_RDWR */
	uint64_t reported_ns;		/* when the report was last written */
};

static struct hostile hostile;

/* ------------------------------------------------------------------------
 * Result-level modes: worker_result_hook publishers
 * ---------------------------------------------------------------------- */

static void publish_at(struct shm_channel *ch, const struct shm_header *hdr,
		       uint64_t pos, uint64_t seq_value)
{
	/* release, as shm_entry_publish() (seq_value - 1 is a position) */
	shm_entry_publish(&shm_result_at(hdr, ch, pos)->seq, seq_value - 1);
}

static void publish_wrong_generation(void *arg, const struct shm_header *hdr,
				     struct shm_channel *ch, uint64_t *pos)
{
	struct hostile *h = arg;
	struct shm_result *r = shm_result_at(hdr, ch, *pos);
	uint32_t n = r->n_rows <= hdr->shard_capacity ? r->n_rows : 0;

	for (uint32_t i = 0; i < n; i++) {
		switch ((h->n_results + i) % 3) {
		case 0: r->rows[i].generation += 1 + (uint32_t)(h->n_results % 1000); break;
		case 1: r->rows[i].generation -= 1; break;
		default: r->rows[i].generation = 0; break;
		}
	}
	h->n_results++;
	publish_at(ch, hdr, *pos, *pos + 1);
	(*pos)++;
}

static void publish_empty(void *arg, const struct shm_header *hdr,
			  struct shm_channel *ch, uint64_t *pos)
{
	struct hostile *h = arg;

	shm_result_at(hdr, ch, *pos)->n_rows = 0;
	h->n_results++;
	publish_at(ch, hdr, *pos, *pos + 1);
	(*pos)++;
}

/* prefill-forever: every row claims a prefill chunk (no token), each
 * claim a little further along, for as long as it lives. */
static void publish_prefill_forever(void *arg, const struct shm_header *hdr,
				    struct shm_channel *ch, uint64_t *pos)
{
	struct hostile *h = arg;
	struct shm_result *r = shm_result_at(hdr, ch, *pos);
	uint32_t n = r->n_rows <= hdr->shard_capacity ? r->n_rows : 0;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t len = r->rows[i].n_tokens ? r->rows[i].n_tokens : 1;

		r->rows[i].token = SHM_TOKEN_PREFILL;
		r->rows[i].detail = (uint32_t)((h->n_results + i) % len);
	}
	h->n_results++;
	publish_at(ch, hdr, *pos, *pos + 1);
	(*pos)++;
}

/* refuse: every row refused, with reasons in range and out of it. */
static void publish_refuse(void *arg, const struct shm_header *hdr,
			   struct shm_channel *ch, uint64_t *pos)
{
	struct hostile *h = arg;
	struct shm_result *r = shm_result_at(hdr, ch, *pos);
	uint32_t n = r->n_rows <= hdr->shard_capacity ? r->n_rows : 0;

	for (uint32_t i = 0; i < n; i++) {
		r->rows[i].token = SHM_TOKEN_REFUSED;
		r->rows[i].detail = (uint32_t)(h->n_results + i) % 7 == 6 ?
				    UINT32_MAX : (uint32_t)(h->n_results + i) % 7;
	}
	h->n_results++;
	publish_at(ch, hdr, *pos, *pos + 1);
	(*pos)++;
}

static void publish_bad_dispatch_id(void *arg, const struct shm_header *hdr,
				    struct shm_channel *ch, uint64_t *pos)
{
	struct hostile *h = arg;
	struct shm_result *r = shm_result_at(hdr, ch, *pos);

	/* the 1st, 4th, 7th...: a life starts with one, so a request run
	 * alone after an attack meets the next attack at once */
	if (++h->n_results % 3 == 1) {
		switch (h->n_results / 3 % 3) {
		case 0: r->dispatch_id += 1000000; break;	/* never sent */
		case 1: r->dispatch_id = 0; break;		/* never used */
		default: r->dispatch_id = UINT64_MAX; break;
		}
	}
	publish_at(ch, hdr, *pos, *pos + 1);
	(*pos)++;
}

static void publish_seq_jump(void *arg, const struct shm_header *hdr,
			     struct shm_channel *ch, uint64_t *pos)
{
	struct hostile *h = arg;
	size_t size = shm_result_size(hdr->shard_capacity);
	struct shm_result *r = shm_result_at(hdr, ch, *pos);

	if (++h->n_results % 3 != 1) {	/* the 1st, 4th, 7th... jump */
		publish_at(ch, hdr, *pos, *pos + 1);
		(*pos)++;
		return;
	}
	if (h->n_results / 3 % 2) {
		/* this entry, but a sequence number laps ahead */
		publish_at(ch, hdr, *pos, *pos + 1 + 5ull * hdr->ring_depth);
		(*pos)++;
		return;
	}
	/* positions ahead: the ones in between are never written */
	memcpy((char *)shm_result_at(hdr, ch, *pos + 3) + sizeof(r->seq),
	       (char *)r + sizeof(r->seq), size - sizeof(r->seq));
	publish_at(ch, hdr, *pos + 3, *pos + 4);
	*pos += 4;
}

static void publish_flood(void *arg, const struct shm_header *hdr,
			  struct shm_channel *ch, uint64_t *pos)
{
	struct hostile *h = arg;
	size_t size = shm_result_size(hdr->shard_capacity);
	const char *src = (const char *)shm_result_at(hdr, ch, *pos);

	h->n_results++;
	publish_at(ch, hdr, *pos, *pos + 1);
	(*pos)++;
	/* then copies of it into every entry the coordinator hands back,
	 * for ever: no more steps */
	for (;;) {
		char *dst;

		if (*pos - atomic_load_explicit(&ch->results_consumed,
						memory_order_acquire) >= hdr->ring_depth) {
			sched_yield();
			continue;
		}
		dst = (char *)shm_result_at(hdr, ch, *pos);
		memcpy(dst + sizeof(uint64_t), src + sizeof(uint64_t),
		       size - sizeof(uint64_t));
		publish_at(ch, hdr, *pos, *pos + 1);
		(*pos)++;
	}
}

/* The sampling entry of a slot of our shard (the hook has no segment). */
static struct shm_slot_sampling *own_sampling(const struct shm_header *hdr,
					      struct shm_channel *ch, uint32_t slot)
{
	uint32_t shard = shm_slot_shard(hdr, slot);

	return (struct shm_slot_sampling *)((char *)ch + hdr->channel_size +
		hdr->shard_tokens_size) + (slot - shm_shard_first_slot(hdr, shard));
}

/*
 * logprobs: every row whose request asked for logprobs gets a block the
 * coordinator must refuse, cycling through the ways a block can be bad;
 * the blocks of the other rows get garbage too (nobody may read them).
 */
static void publish_logprobs(void *arg, const struct shm_header *hdr,
			     struct shm_channel *ch, uint64_t *pos)
{
	struct hostile *h = arg;
	struct shm_result *r = shm_result_at(hdr, ch, *pos);
	uint32_t n = r->n_rows <= hdr->shard_capacity ? r->n_rows : 0;

	for (uint32_t i = 0; i < n; i++) {
		struct shm_logprobs *b = shm_result_logprobs(hdr, ch, *pos, i);
		uint32_t slot = r->rows[i].slot;
		const struct shm_slot_sampling *t;
		uint32_t k = (uint32_t)(h->n_results + i);

		if (shm_slot_shard(hdr, slot) >= hdr->n_shards || r->rows[i].token < 0)
			continue;
		t = own_sampling(hdr, ch, slot);
		if (!t->logprobs) {	/* nobody may read it: anything goes */
			memset(b, 0xff, sizeof(*b));
			continue;
		}
		switch (k % 11) {
		case 0: b->logprob = NAN; break;
		case 1: b->logprob = INFINITY; break;
		case 2: b->logprob = 0.5f; break;
		case 3: b->logprob = -INFINITY; break;
		case 4: b->n_top = UINT32_MAX; break;
		case 5: b->n_top = t->top_logprobs + 1; break;
		case 6: b->n_top = SAMPLER_MAX_LOGPROBS;	/* past its top_logprobs */
			if (t->top_logprobs < SAMPLER_MAX_LOGPROBS)
				break;
			/* fall through */
		case 7: b->n_top = 1; b->top[0].token = (int32_t)hdr->vocab; break;
		case 8: b->n_top = 1; b->top[0].token = -1; break;
		case 9: b->n_top = 1; b->top[0].logprob = NAN; break;
		default: b->n_top = 1; b->top[0].logprob = 1e30f; break;
		}
		if (k % 11 >= 7 && t->top_logprobs == 0)
			b->logprob = NAN;	/* no alternatives allowed: still bad */
	}
	h->n_results++;
	publish_at(ch, hdr, *pos, *pos + 1);
	(*pos)++;
}

/*
 * sampling: scribble the sampling table of the shard (the worker's own
 * object) with entries no worker may use, and post the result empty:
 * the worker is killed for results that commit nothing, and the next
 * one must find the table as the coordinator wrote it (the rows it
 * refuses would fail their requests).
 */
static void publish_sampling(void *arg, const struct shm_header *hdr,
			     struct shm_channel *ch, uint64_t *pos)
{
	struct hostile *h = arg;
	struct shm_result *r = shm_result_at(hdr, ch, *pos);
	uint32_t n = r->n_rows <= hdr->shard_capacity ? r->n_rows : 0;
	uint32_t shard = n ? shm_slot_shard(hdr, r->rows[0].slot) : hdr->n_shards;

	if (shard < hdr->n_shards) {
		uint32_t first = shm_shard_first_slot(hdr, shard);
		uint32_t end = shard + 1 < hdr->n_shards ?
			       shm_shard_first_slot(hdr, shard + 1) : hdr->n_slots;

		for (uint32_t slot = first; slot < end; slot++) {
			struct shm_slot_sampling *t = own_sampling(hdr, ch, slot);
			uint32_t k = (uint32_t)(h->n_results + slot);

			switch (k % 9) {
			case 0: t->generation += 1 + k % 3; break;
			case 1: t->n_bias = UINT32_MAX - k % 5; break;
			case 2: t->needs_logits = 1; t->temperature = NAN; break;
			case 3: t->needs_logits = 1; t->top_p = NAN; break;
			case 4: t->needs_logits = 1; t->n_bias = 1;
				t->bias[0].token = (int32_t)hdr->vocab + (int32_t)k % 3; break;
			case 5: t->needs_logits = 1; t->top_logprobs = 1000; t->logprobs = 1; break;
			case 6: t->needs_logits = 1; t->presence_penalty = NAN; break;
			case 7: t->needs_logits = 1; t->repetition_penalty = -1.0f; break;
			default: t->needs_logits = 1; t->n_bias = 2; t->bias[0] = t->bias[1];
				t->bias[0].bias = NAN; break;
			}
		}
	}
	r->n_rows = 0;
	h->n_results++;
	publish_at(ch, hdr, *pos, *pos + 1);
	(*pos)++;
}

/*
 * grammar: scribble the shard's grammar entries, then post the result
 * with every token replaced by its neighbour (one the row's grammar
 * mostly refuses: a constrained request must end, never be answered).
 */
static void publish_grammar(void *arg, const struct shm_header *hdr,
			    struct shm_channel *ch, uint64_t *pos)
{
	struct hostile *h = arg;
	struct shm_result *r = shm_result_at(hdr, ch, *pos);
	uint32_t n = r->n_rows <= hdr->result_rows ? r->n_rows : 0;

	if (hdr->grammar_slot_bytes)
		for (uint32_t i = 0; i < hdr->shard_capacity; i++) {
			struct shm_slot_grammar *g = (struct shm_slot_grammar *)
				((char *)ch + hdr->channel_size + hdr->shard_tokens_size +
				 hdr->shard_sampling_size + hdr->shard_kv_size +
				 (size_t)i * hdr->grammar_slot_bytes);
			uint32_t k = (uint32_t)(h->n_results + i);

			if (k % 3 == 0)
				g->len = UINT32_MAX - k % 7;
			else if (g->len && g->len < hdr->grammar_slot_bytes)
				g->source[k % g->len] ^= (char)(1 + k % 251);
		}
	for (uint32_t i = 0; i < n; i++)
		if (r->rows[i].token >= 0)
			r->rows[i].token = (int32_t)(((uint32_t)r->rows[i].token + 1 +
						      (uint32_t)(h->n_results + i) % 5) %
						     hdr->vocab);
	h->n_results++;
	publish_at(ch, hdr, *pos, *pos + 1);
	(*pos)++;
}

/* FNV-1a 64 of n tokens as 4-byte little-endian words. */
static uint64_t prompt_hash(const int32_t *t, uint32_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (uint32_t i = 0; i < n; i++)
		for (unsigned b = 0; b < 4; b++) {
			h ^= ((uint32_t)t[i] >> (8 * b)) & 0xffu;
			h *= 0x100000001b3ull;
		}
	return h;
}

/*
 * kv-tables: name every request of the dispatches in the ring (the one
 * the worker ran is among them: the coordinator overwrites none it has
 * not adopted), then scribble the shard's block tables and the kv fields
 * of every dispatch row, then post the result as computed.
 */
static void publish_kv_tables(void *arg, const struct shm_header *hdr,
			      struct shm_channel *ch, uint64_t *pos)
{
	static uint32_t seen[4096];	/* generation + 1 named, per slot */
	struct hostile *h = arg;
	uint32_t *tables = (uint32_t *)((char *)ch + hdr->channel_size +
		hdr->shard_tokens_size + hdr->shard_sampling_size);
	size_t n_entries = hdr->shard_kv_size / sizeof(uint32_t);
	uint32_t phase = (uint32_t)(h->n_results % 64);
	uint32_t pool = hdr->kv_blocks ? hdr->kv_blocks : 1;

	for (uint32_t d = 0; d < hdr->ring_depth; d++) {
		struct shm_dispatch *disp = shm_dispatch_at(hdr, ch, d);
		uint32_t n = disp->n_rows <= hdr->shard_capacity ? disp->n_rows : 0;

		if (!atomic_load_explicit(&disp->seq, memory_order_acquire))
			continue;
		for (uint32_t i = 0; i < n; i++) {
			struct shm_dispatch_row *r = &disp->rows[i];
			uint32_t shard = shm_slot_shard(hdr, r->slot), local;
			const struct shm_slot_sampling *t;

			if (shard >= hdr->n_shards)
				continue;
			local = r->slot - shm_shard_first_slot(hdr, shard);
			/* a slot's generations only grow: older dispatches in
			 * the ring name requests named already */
			if (local >= hdr->shard_capacity || local >= 4096 ||
			    seen[local] >= r->generation + 1)
				continue;
			seen[local] = r->generation + 1;
			t = own_sampling(hdr, ch, r->slot);
			if (t->n_prompt > hdr->max_context)
				continue;
			fprintf(stderr, "hostile-kv: prompt %016llx\n", (unsigned long long)
				prompt_hash((const int32_t *)((char *)ch + hdr->channel_size) +
					    (size_t)local * hdr->max_context, t->n_prompt));
		}
		/* the kv fields of its rows: within the bounds the worker
		 * checks, but for a table too short now and then */
		for (uint32_t i = 0; i < hdr->shard_capacity; i++) {
			struct shm_dispatch_row *r = &disp->rows[i];

			r->kv_cached = (uint32_t)(sim_splitmix64(&h->rng) % (r->n_tokens + 1u));
			r->copy_src = (uint32_t)(sim_splitmix64(&h->rng) % pool);
			r->copy_dst = sim_splitmix64(&h->rng) % 2 ? UINT32_MAX :
				      (uint32_t)(sim_splitmix64(&h->rng) % pool);
			if (phase == 31)
				r->kv_blocks = (uint32_t)(sim_splitmix64(&h->rng) %
							  (hdr->kv_max_blocks + 2u));
		}
	}
	/* the tables: blocks of its own pool, and out of it now and then */
	for (size_t i = 0; i < n_entries; i++) {
		uint64_t v = sim_splitmix64(&h->rng);

		if (phase == 63 && v % 64 == 0)
			tables[i] = v % 128 == 0 ? UINT32_MAX : pool + (uint32_t)(v >> 8) % 3;
		else
			tables[i] = (uint32_t)(v % pool);
	}
	h->n_results++;
	publish_at(ch, hdr, *pos, *pos + 1);
	(*pos)++;
}

/* scribble: the worker posts nothing; the attack thread does the rest. */
static void publish_nothing(void *arg, const struct shm_header *hdr,
			    struct shm_channel *ch, uint64_t *pos)
{
	for (;;)
		pause();
}

/* ------------------------------------------------------------------------
 * Channel-level modes: an attack thread
 * ---------------------------------------------------------------------- */

static void hostile_report(bool now_please);

/* A fault in the attack thread skips the write that faulted. */
static __thread sigjmp_buf *fault_guard;

static void on_fault(int signo)
{
	if (fault_guard)
		siglongjmp(*fault_guard, 1);
	signal(signo, SIG_DFL);	/* not ours: fault again, and die of it */
}

struct mapping {
	char *start;
	size_t len;
	bool writable;
	unsigned long inode;
	char path[PATH_MAX];
};

/* The process's shared mappings (the 's' in the permissions). */
static unsigned shared_mappings(struct mapping *m, unsigned max)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[PATH_MAX + 128];
	unsigned n = 0;

	if (!f)
		return 0;
	while (n < max && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char perms[8];
		int path_at = 0;

		unsigned long inode = 0;

		if (sscanf(line, "%lx-%lx %7s %*s %*s %lu %n", &lo, &hi, perms,
			   &inode, &path_at) < 4 || perms[3] != 's')
			continue;
		m[n].inode = inode;
		m[n].start = (char *)lo;
		m[n].len = hi - lo;
		m[n].writable = perms[1] == 'w';
		snprintf(m[n].path, sizeof(m[n].path), "%s", path_at ? line + path_at : "");
		m[n].path[strcspn(m[n].path, "\n")] = '\0';
		n++;
	}
	fclose(f);
	return n;
}

/* Fill [p, p+len) with random bytes; false if it faulted. */
static bool scribble_range(char *p, size_t len)
{
	sigjmp_buf jb;

	if (sigsetjmp(jb, 1)) {
		fault_guard = NULL;
		return false;
	}
	fault_guard = &jb;
	for (size_t i = 0; i + 8 <= len; i += 8) {
		uint64_t v = sim_splitmix64(&hostile.rng);

		memcpy(p + i, &v, 8);
	}
	fault_guard = NULL;
	return true;
}

static void attack_scribble(void)
{
	struct mapping m[HOSTILE_MAX_MAPS];
	unsigned n = shared_mappings(m, HOSTILE_MAX_MAPS);

	for (unsigned i = 0; i < n; i++)
		if (m[i].writable)
			scribble_range(m[i].start, m[i].len);
}

/* Every descriptor in /proc/self/fd but the directory's own. */
static unsigned open_fds(int *fds, unsigned max)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	unsigned n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d)) && n < max) {
		int fd = atoi(de->d_name);

		if (de->d_name[0] == '.' || fd == dirfd(d))
			continue;
		fds[n++] = fd;
	}
	closedir(d);
	return n;
}

static void attack_steal_wakeups(void)
{
	int fds[256];
	unsigned n = open_fds(fds, 256);
	char buf[4096];

	for (unsigned i = 0; i < n; i++) {
		struct pollfd p = { .fd = fds[i], .events = POLLIN };
		struct stat st;
		bool channel;

		/* Only what reads a wake-up away from someone counts: a pipe, a
		 * socket or an anonymous inode (eventfd).  Reading the shared
		 * object's descriptor (it may still hold it, read-only, before
		 * the honest loop closes it) reads what it maps anyway. */
		if (fstat(fds[i], &st))
			continue;
		channel = S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) ||
			  (st.st_mode & S_IFMT) == 0;
		if (poll(&p, 1, 0) == 1 && (p.revents & POLLIN)) {
			ssize_t got = read(fds[i], buf, sizeof(buf));

			if (got > 0 && channel)
				hostile.n_stolen += (uint64_t)got;
		}
	}
}

static void attack_write_fds(void)
{
	int fds[256];
	unsigned n = open_fds(fds, 256);
	char line[256];
	int len = snprintf(line, sizeof(line), "{\"id\":\"%s\",\"tokens\":[1,2,3],"
			   "\"finish_reason\":\"length\"}\n", hostile.forge_id);

	for (unsigned i = 0; i < n; i++) {
		struct stat st;

		/* not the log: that only fills the test's stderr */
		if (fds[i] == STDERR_FILENO || fstat(fds[i], &st))
			continue;
		if (write(fds[i], line, (size_t)len) < 0)
			continue;
	}
}

/* Map what fd refers to read-write and scribble over it. */
static void scribble_fd(int fd)
{
	struct stat st;
	void *p;

	if (fstat(fd, &st) || st.st_size <= 0)
		return;
	p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return;
	hostile.n_reopened++;
	hostile_report(true);	/* the damage may end us */
	scribble_range(p, (size_t)st.st_size);
	munmap(p, (size_t)st.st_size);
}

/* Is inode that of an object the worker maps writable already (its own
 * shard object: writing it is scribble's business, not a way in)? */
static bool own_writable(const struct mapping *m, unsigned n, unsigned long inode)
{
	for (unsigned i = 0; i < n; i++)
		if (m[i].writable && m[i].inode == inode)
			return true;
	return false;
}

static void attack_mprotect(void)
{
	struct mapping m[HOSTILE_MAX_MAPS];
	unsigned n = shared_mappings(m, HOSTILE_MAX_MAPS);
	int fds[256];
	unsigned n_fds = open_fds(fds, 256);

	for (unsigned i = 0; i < n; i++) {
		int fd;

		if (!m[i].writable &&
		    !mprotect(m[i].start, m[i].len, PROT_READ | PROT_WRITE)) {
			hostile.n_writable++;
			hostile_report(true);
			scribble_range(m[i].start, m[i].len);
		}
		/* the object behind it, opened again for writing */
		if (m[i].path[0] == '/' && strncmp(m[i].path, "/dev/zero", 9) &&
		    !own_writable(m, n, m[i].inode)) {
			char path[PATH_MAX];

			snprintf(path, sizeof(path), "%s", m[i].path);
			if (strstr(path, " (deleted)"))
				*strstr(path, " (deleted)") = '\0';
			fd = open(path, O_RDWR | O_CLOEXEC);
			if (fd >= 0) {
				scribble_fd(fd);
				close(fd);
			}
		}
	}
	for (unsigned i = 0; i < n_fds; i++) {
		char path[64], target[PATH_MAX];
		ssize_t len;
		int fd;

		/* its own shard's object, before the honest loop has mapped
		 * (and closed) it: writing that is allowed, not a way in */
		if (fds[i] == hostile.own_shard_fd)
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fds[i]);
		len = readlink(path, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = '\0';
		if (!strstr(target, "/dev/shm/") && !strstr(target, "memfd:"))
			continue;
		{
			struct stat st;

			if (stat(path, &st) || own_writable(m, n, st.st_ino))
				continue;
		}
		fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd >= 0) {
			scribble_fd(fd);
			close(fd);
		}
	}
}

/* ------------------------------------------------------------------------
 * Modes and main
 * ---------------------------------------------------------------------- */

struct mode {
	const char *name;
	void (*publish)(void *arg, const struct shm_header *hdr,
			struct shm_channel *ch, uint64_t *pos);
	void (*attack)(void);		/* one round of the attack thread */
	unsigned round_us;		/* pause between rounds */
};

static const struct mode modes[] = {
	{ "wrong-generation", publish_wrong_generation, NULL, 0 },
	{ "empty", publish_empty, NULL, 0 },
	{ "bad-dispatch-id", publish_bad_dispatch_id, NULL, 0 },
	{ "seq-jump", publish_seq_jump, NULL, 0 },
	{ "flood", publish_flood, NULL, 0 },
	{ "prefill-forever", publish_prefill_forever, NULL, 0 },
	{ "refuse", publish_refuse, NULL, 0 },
	{ "logprobs", publish_logprobs, NULL, 0 },
	{ "sampling", publish_sampling, NULL, 0 },
	{ "kv-tables", publish_kv_tables, NULL, 0 },
	{ "grammar", publish_grammar, NULL, 0 },
	{ "scribble", publish_nothing, attack_scribble, 100 },
	{ "steal-wakeups", NULL, attack_steal_wakeups, 0 },
	{ "write-fds", NULL, attack_write_fds, 20000 },
	{ "mprotect", NULL, attack_mprotect, 10000 },
};

/* Write what the attack achieved: now, or at most every 100 ms. */
static void hostile_report(bool now_please)
{
	struct timespec ts;
	uint64_t now;
	FILE *f;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	if (!hostile.report_path[0] ||
	    (!now_please && now - hostile.reported_ns < 100000000ull))
		return;
	hostile.reported_ns = now;
	f = fopen(hostile.report_path, "w");
	if (!f)
		return;
	fprintf(f, "stolen=%llu writable=%llu reopened=%llu\n",
		(unsigned long long)hostile.n_stolen,
		(unsigned long long)hostile.n_writable,
		(unsigned long long)hostile.n_reopened);
	fclose(f);
}

static void *attack_thread(void *arg)
{
	const struct mode *m = arg;

	for (;;) {
		m->attack();
		hostile_report(false);
		if (m->round_us)
			usleep(m->round_us);
		else
			sched_yield();
	}
	return NULL;
}

/*
 * Is this process one of the first lives attackers of shard in this
 * coordinator's life?  Counts starts in a file named for both.
 */
static const char *hostile_dir(void)
{
	const char *dir = getenv("DYNBATCH_HOSTILE_DIR");

	if (!dir || !*dir)
		dir = getenv("TMPDIR");
	return dir && *dir ? dir : "/tmp";
}

static bool hostile_life_left(uint32_t shard, uint32_t lives)
{
	const char *dir = hostile_dir();
	char path[PATH_MAX];
	unsigned n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/dynbatch-hostile-%d-%u", dir, (int)getppid(),
		 shard);
	f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%u", &n) != 1)
			n = 0;
		fclose(f);
	}
	f = fopen(path, "w");
	if (f) {
		fprintf(f, "%u\n", n + 1);
		fclose(f);
	}
	return n < lives;
}

/* DYNBATCH_HOSTILE="MODE[,shard=N][,lives=L]"; NULL mode on a bad spec. */
static const struct mode *parse_spec(const char *spec, uint32_t *shard, uint32_t *lives)
{
	char buf[256], *save = NULL, *tok;
	const struct mode *mode = NULL;
	uint64_t v;

	snprintf(buf, sizeof(buf), "%s", spec);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (!strncmp(tok, "shard=", 6) && !parse_u64(tok + 6, 0, 1u << 16, &v)) {
			*shard = (uint32_t)v;
		} else if (!strncmp(tok, "lives=", 6) && !parse_u64(tok + 6, 0, 1u << 30, &v)) {
			*lives = (uint32_t)v;
		} else {
			for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
				if (!strcmp(tok, modes[i].name))
					mode = &modes[i];
			if (!mode) {
				fprintf(stderr, "dynbatch-hostile-worker: bad DYNBATCH_HOSTILE "
					"part '%s'\n", tok);
				return NULL;
			}
		}
	}
	if (!mode)
		fprintf(stderr, "dynbatch-hostile-worker: DYNBATCH_HOSTILE names no mode\n");
	return mode;
}

int main(int argc, char **argv)
{
	struct worker_args args;
	struct worker_options opt;
	struct worker_result_hook hook = { .arg = &hostile };
	uint32_t shard = 0, lives = HOSTILE_DEFAULT_LIVES;
	const char *spec = getenv("DYNBATCH_HOSTILE");
	const struct mode *mode;
	char role[48], err[160];

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	signal(SIGINT, SIG_IGN);
	log_init_from_env();
	/* the attacker keeps its priority (--nice) and is never a probe */
	if (worker_args_parse(argc, argv, &args, err, sizeof(err)) || args.help ||
	    args.probe_fd >= 0) {
		fprintf(stderr, "dynbatch-hostile-worker: %s\n",
			args.help || args.probe_fd >= 0 ? "serves a shard only" : err);
		return 2;
	}
	opt = args.opt;
	mode = parse_spec(spec ? spec : "", &shard, &lives);
	if (!mode)
		return 2;
	if (opt.shard != shard || !hostile_life_left(shard, lives)) {
		snprintf(role, sizeof(role), "worker %u", opt.shard);
		log_set_role(role);
		return worker_run(&opt);
	}
	snprintf(role, sizeof(role), "hostile worker %u (%s)", opt.shard, mode->name);
	log_set_role(role);
	LOG(LOG_WARN, "attacking");
	hostile.rng = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL);
	hostile.own_shard_fd = opt.shard_fd;
	hostile.forge_id = getenv("DYNBATCH_HOSTILE_FORGE_ID");
	if (!hostile.forge_id)
		hostile.forge_id = "forged";
	if (getenv("DYNBATCH_HOSTILE_DIR"))
		snprintf(hostile.report_path, sizeof(hostile.report_path),
			 "%s/report-%d", hostile_dir(), (int)getpid());
	if (mode->publish) {
		hook.publish = mode->publish;
		opt.result_hook = &hook;
	}
	if (mode->attack) {
		struct sigaction sa = { .sa_handler = on_fault, .sa_flags = SA_NODEFER };
		pthread_t t;

		sigaction(SIGSEGV, &sa, NULL);
		sigaction(SIGBUS, &sa, NULL);
		if (pthread_create(&t, NULL, attack_thread, (void *)mode)) {
			fprintf(stderr, "dynbatch-hostile-worker: cannot start the attack\n");
			return 1;
		}
	}
	worker_run(&opt);
	/* The attack goes on until the coordinator ends us. */
	for (;;)
		pause();
}
