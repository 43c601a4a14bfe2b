/*
 * shm_segment.h - the memory the coordinator shares with its workers, its
 * layout, who may write what, and its lifetime.
 *
 * NOTES ON THE DESIGN
 *
 * Workers run a model plugin, which may be buggy or hostile, so the
 * memory is split by who may write it, and the kernel enforces the split:
 *
 *   object          held by                          worker's access
 *   shared object   coordinator (RW mapping), every  read only
 *                   worker (an O_RDONLY descriptor)
 *   shard object i  coordinator (RW mapping),        read-write, its own
 *                   worker i only                    shard only
 *
 * Both are unnamed (memfd_create): there is no /dev/shm name to find,
 * steal, delete or clean up, and a worker gets them only as the
 * descriptors it is spawned with (shard/worker_pool.c).
 *
 * The shared object (header, slot table) is sealed once the coordinator
 * has mapped it writable: F_SEAL_FUTURE_WRITE (no new writable mapping,
 * no write(), no hole punching, from anyone, even through a descriptor
 * reopened O_RDWR via /proc/self/fd; a read-only mapping cannot be
 * mprotect'ed writable), F_SEAL_SHRINK and F_SEAL_GROW (its size never
 * changes under the coordinator, so it never takes a SIGBUS) and
 * F_SEAL_SEAL.  The descriptor workers get is also opened O_RDONLY.
 *
 * A shard object (its channel and its token buffers) is created afresh
 * for every worker the shard starts (shm_shard_renew), and mapped by the
 * coordinator over the old one at the same address: whatever a dead
 * worker (or a process it left behind) still holds is a different object
 * from then on.  Sealed F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL, so the
 * worker, which holds it writable, cannot truncate it (a SIGBUS in the
 * coordinator) or seal it against its successor.
 *
 * The coordinator trusts nothing it reads from a shard object: results
 * are validated field by field (engine/engine.c), the flags it reads
 * (worker_sleeping, worker_ready_pid, dispatch_adopted) only decide
 * whether to wake a worker, when it is ready and which slots it may reuse
 * in that shard; the layout it uses comes from its private copy of the
 * header (struct shm_segment.layout), never from shared memory.
 *
 * Who writes a slot's token buffer: the coordinator writes the prompt
 * (and, for a resumed request, the tokens it already had) when it assigns
 * the slot; the shard's worker writes each token it generates right after
 * the prefix, before it posts the result, so it can run its next step
 * without waiting for the coordinator to commit the last one.  The
 * worker hands the model pointers into a second, read-only view of the
 * same buffers (shm_segment.tokens_ro): a stray write of the model faults
 * instead of silently changing a prompt.  A hostile worker can still
 * rewrite its own shard's buffers through its writable view; that changes
 * nothing but its own shard's output, which it decides anyway (it can
 * post any token), and the coordinator never reads a buffer back: it keeps
 * its own copy of every prompt and committed token and rewrites the
 * buffers from them for each new worker.  No worker can read or write
 * another shard's buffers.
 *
 * Waking.  The coordinator wakes a sleeping worker with FUTEX_WAKE on the
 * channel's wake_seq word (shm_wake_worker): that is safe whatever value
 * the worker left in the word, and the coordinator never waits on memory
 * a worker can write.  A worker wakes the coordinator by writing a byte
 * to the write end of a pipe of its own (the coordinator reads the other
 * end): it cannot read it, so it cannot steal anyone's wake-ups.
 *
 * The shared object, each region starting on a page:
 *
 *   offset     size           region               writer
 *   0          4096           struct shm_header    coordinator
 *   off_slots  n_slots * 32   slot table (mirror)  coordinator
 *   off_vocab  vocab_table_size  vocabulary table  coordinator, at start
 *
 * The vocabulary table (struct shm_vocab_table) holds each token's bytes,
 * for the workers' grammar masks (docs/DESIGN.md 2.8): the coordinator's
 * tokenizer is the one truth of what a token spells.
 *
 * struct shm_header (offsets pinned by static_assert in shm_segment.c):
 *
 *   offset  size  field                 writer
 *   0       8     magic                 coordinator, once
 *   8       4     layout_version        coordinator, once
 *   12      4     header_size           coordinator, once
 *   16      8     segment_size          coordinator, once
 *   24      4     n_slots               coordinator, once
 *   28      4     n_shards              coordinator, once
 *   32      4     max_context           coordinator, once
 *   36      4     shard_capacity        coordinator, once
 *   40      4     ring_depth            coordinator, once
 *   44      4     coordinator_pid       coordinator, once
 *   48      4     vocab                 coordinator, once
 *   52      4     grammar_slot_bytes    coordinator, once
 *   56      8     off_slots             coordinator, once
 *   64      8     channel_size          coordinator, once
 *   72      8     shard_tokens_size     coordinator, once
 *   80      8     shard_size            coordinator, once
 *   120     8     shard_grammar_size    coordinator, once
 *   128     8     vocab_table_size      coordinator, once
 *   136     8     off_vocab             coordinator, once
 *   192     4     coordinator_sleeping  coordinator (own cache line)
 *
 * A shard object:
 *
 *   offset        size               region         writer
 *   0             channel_size       struct shm_channel + rings  see below
 *   channel_size  shard_tokens_size  token buffers  see above
 *   + tokens      shard_sampling_size sampling table coordinator
 *                                    (struct shm_slot_sampling per slot)
 *   + sampling    shard_kv_size      block tables   coordinator
 *                                    (kv_max_blocks uint32 per slot)
 *   + tables      shard_grammar_size grammar entries coordinator
 *                                    (grammar_slot_bytes per slot)
 *
 * A slot's block table says which block of the shard's KV pool (in the
 * worker's private memory, model/kv_pool.h) holds each run of
 * kv_block_tokens positions of its sequence (docs/DESIGN.md 11).  The
 * coordinator writes entry k before it publishes a dispatch whose row
 * may use it (kv_blocks > k), and never changes an entry a dispatch the
 * worker may still run lets it use, while the slot keeps its request:
 * a table only grows.  A worker that rewrites its own tables reaches
 * only its own pool.
 *
 * A channel holds the two single-producer single-consumer rings of the
 * shard: dispatches (coordinator -> worker) and results (worker ->
 * coordinator), ring_depth entries each.  An entry for ring position p
 * sits at index p % ring_depth and is published by writing the payload
 * and then storing seq = p + 1 with release order; the reader loads seq
 * with acquire order and accepts the entry only when it equals the p + 1
 * it expects.  A writer killed mid-record leaves a record nobody accepts.
 * Neither side overwrites an entry the other may still read: the worker
 * posts result p only once results_consumed > p - ring_depth, and the
 * coordinator keeps at most ring_depth - 1 dispatches ahead of the one
 * the worker has adopted (dispatch_adopted).
 *
 * Slots are split into shards as first_slot(i) = n_slots * i / n_shards;
 * slot k of a shard has its buffer at channel_size + k * max_context * 4
 * in the shard's object.
 */
#ifndef DYNBATCH_SHM_SEGMENT_H
#define DYNBATCH_SHM_SEGMENT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sampling/sampler.h"

#define SHM_MAGIC 0x48435441424e5944ull	/* "DYNBATCH" little-endian */
#define SHM_LAYOUT_VERSION 9u	/* 9: grammars (a source per slot, the
				 * vocabulary's bytes) */
#define SHM_CACHE_LINE 64
#define SHM_PAGE 4096u
#define SHM_RING_DEPTH 64u		/* positions per ring, power of two */

/*
 * coordinator_sleeping.  DOZING is for long model steps (a millisecond
 * and more): the coordinator sleeps on a timer a fraction of a step long
 * and reads the rings when it fires, so a result it need not act on at
 * once (a token of a row that goes on) must not wake it; with many
 * workers on few CPUs those wake-ups and the spinning before them take the
 * CPU that the workers need to come back from their own sleeps on time.
 */
#define SHM_COORD_AWAKE		0	/* reading the rings: no wake-up */
#define SHM_COORD_SLEEPING	1	/* wake it for every result and adoption */
#define SHM_COORD_DOZING	2	/* wake it only for an urgent result: a
					 * failed step, the last of the worker's
					 * rows, a half-full ring */

struct shm_header {
	uint64_t magic;			/* SHM_MAGIC */
	uint32_t layout_version;	/* SHM_LAYOUT_VERSION */
	uint32_t header_size;		/* sizeof(struct shm_header) */
	uint64_t segment_size;		/* bytes in the shared object */
	uint32_t n_slots;		/* batch capacity B, all shards */
	uint32_t n_shards;		/* shard objects (worker processes) */
	uint32_t max_context;		/* tokens per slot buffer */
	uint32_t shard_capacity;	/* most slots (rows) in one shard */
	uint32_t ring_depth;		/* entries per ring */
	int32_t coordinator_pid;	/* workers exit when it is gone */
	uint32_t vocab;			/* model vocabulary, for checks */
	uint32_t grammar_slot_bytes;	/* bytes of a slot's grammar entry
					 * (struct shm_slot_grammar + source);
					 * 0: no grammars */
	uint64_t off_slots;		/* byte offset of the slot table */
	uint64_t channel_size;		/* bytes of a shard object's channel,
					 * page multiple: its token buffers
					 * start at this offset */
	uint64_t shard_tokens_size;	/* bytes of a shard object's token
					 * buffers, page multiple */
	uint64_t shard_size;		/* bytes in a shard object */
	uint64_t shard_sampling_size;	/* bytes of a shard object's sampling
					 * table (after its token buffers),
					 * page multiple */
	uint32_t kv_block_tokens;	/* positions per KV block; 0: the
					 * model is not paged (no tables) */
	uint32_t kv_blocks;		/* blocks in each shard's pool (the
					 * worker maps the pool itself) */
	uint32_t kv_max_blocks;		/* entries of a slot's block table:
					 * max_context in blocks, rounded up */
	uint32_t result_rows;		/* rows one result entry holds:
					 * shard_capacity x (1 + the most
					 * tokens a row may guess a step) */
	uint64_t shard_kv_size;		/* bytes of a shard object's block
					 * tables (after its sampling table),
					 * page multiple; 0 when not paged */
	uint64_t shard_grammar_size;	/* bytes of a shard object's grammar
					 * entries (after its block tables),
					 * page multiple; 0: no grammars */
	uint64_t vocab_table_size;	/* bytes of the vocabulary table in
					 * the shared object (after the slot
					 * table), page multiple; 0: none */
	uint64_t off_vocab;		/* its byte offset */
	uint8_t pad0[192 - 144];
	/* SHM_COORD_*: whether the coordinator sleeps in io_uring and for
	 * which results a worker that has just published one (or adopted a
	 * dispatch) writes its notification pipe to wake it.  Set and read
	 * through sleep_handshake.h (sched_wait(), worker_wake_coordinator()). */
	_Atomic uint32_t coordinator_sleeping;
	uint8_t pad1[SHM_CACHE_LINE - 4];
};

/*
 * One batch slot, as mirrored for readers of the shared object (the
 * coordinator's own copy is private: sched/slot_table.h).
 * Lifecycle (sched/slot_table.c):
 *
 *      slot_table_assign()          slot_table_release()
 *   FREE ------------------> ACTIVE ------------------> FREE
 *         generation++                (request finished,
 *                                      failed or cancelled)
 */
enum shm_slot_state { SHM_SLOT_FREE = 0, SHM_SLOT_ACTIVE = 1 };

struct shm_slot {
	_Atomic uint32_t generation;	/* bumped on every assignment */
	uint32_t state;			/* enum shm_slot_state */
	uint32_t request_handle;	/* coordinator's request index */
	uint32_t n_tokens;		/* tokens in this slot's buffer */
	uint32_t n_prompt;		/* of which prompt */
	uint32_t pad[3];
};

/*
 * One row of a dispatch: a slot the worker is to extend, step after step,
 * until its prefix reaches limit tokens or a newer dispatch leaves it out.
 */
struct shm_dispatch_row {
	uint32_t slot;			/* slot id, in the worker's shard */
	uint32_t generation;		/* slot generation when dispatched */
	uint32_t n_tokens;		/* committed prefix length (see reset) */
	uint32_t limit;			/* stop extending at this length
					 * (prompt + max_tokens, <= max_context;
					 * paged: also <= kv_blocks *
					 * kv_block_tokens + 1) */
	/* paged models only (shm_header.kv_block_tokens > 0), else 0 */
	uint32_t kv_blocks;		/* entries of the slot's block table
					 * the row may use */
	uint32_t kv_cached;		/* positions [0, kv_cached) are in the
					 * blocks already (a prefix-cache hit
					 * or a fork), once copy_src is copied */
	uint32_t copy_src;		/* before the request's first step
					 * here: copy block copy_src over */
	uint32_t copy_dst;		/* copy_dst (copy-on-write of a shared
					 * tail); UINT32_MAX: no copy */
	/* the step plan (sched/step_plan.h): at most this many prefix
	 * tokens per step while the row prefills, for every step run on
	 * this dispatch; UINT32_MAX: no budget; 0: wait */
	uint32_t step_consume;
};

/*
 * One row of a result: the token that continues one prefix, or, from a
 * stateful model (model.h), no token yet (a prefill chunk) or a refusal.
 * docs/DESIGN.md 7.2 says how the coordinator checks each kind.
 */
struct shm_result_row {
	uint32_t slot;			/* copied from the dispatch row */
	uint32_t generation;		/* copied from the dispatch row */
	int32_t token;			/* the model's next token, or one of
					 * SHM_TOKEN_PREFILL, SHM_TOKEN_REFUSED */
	uint32_t n_tokens;		/* length of the prefix it continues
					 * (the token sits at this index) */
	uint32_t detail;		/* PREFILL: prefix tokens the model
					 * holds now (< n_tokens); REFUSED:
					 * the enum dynbatch_refusal; else 0 */
};

/*
 * The logprobs of one result row, when its request asked for them: the
 * block of row i of a result, in a region after both rings
 * (shm_result_logprobs()).
 * Written by the worker, so the coordinator checks every field before it
 * keeps one (docs/DESIGN.md 7.2).
 */
struct shm_logprobs {
	float logprob;			/* the row's token's */
	uint32_t n_top;			/* alternatives filled, <= the
					 * request's top_logprobs */
	struct sampler_logprob top[SAMPLER_MAX_LOGPROBS];
};

/* A row's logprobs as the sampler gave them, into its block. */
static inline void shm_logprobs_set(struct shm_logprobs *b,
				    const struct sampler_result *sr)
{
	b->logprob = sr->logprob;
	b->n_top = sr->n_top;
	memcpy(b->top, sr->top, sr->n_top * sizeof(sr->top[0]));
}

/*
 * How the worker picks a slot's tokens (docs/DESIGN.md 2.4): one entry
 * per slot of the shard, after its token buffers.  Written by the
 * coordinator when it places a request in the slot (and again for each
 * new worker), before the dispatch that carries the slot; the worker
 * copies and validates it once per generation, and a row whose entry
 * is for another generation or invalid is refused.
 */
struct shm_slot_sampling {
	uint32_t generation;		/* the request the fields are for */
	uint32_t needs_logits;		/* 0: the model's greedy token, and
					 * nothing below is read */
	uint32_t n_prompt;		/* token k sits at n_prompt + k */
	uint32_t choice;		/* which of the request's n */
	uint64_t seed;
	float temperature;
	float top_p;
	float min_p;
	uint32_t top_k;
	uint32_t logprobs;		/* 1: report logprobs */
	uint32_t top_logprobs;
	uint32_t n_bias;
	/* the penalties (sampling_params.h): the worker validates them with
	 * the rest, and counts over its own view of the slot's tokens,
	 * n_prompt splitting prompt from generated */
	float presence_penalty;		/* [-2, 2], 0 = off */
	float frequency_penalty;	/* [-2, 2], 0 = off */
	float repetition_penalty;	/* > 0, 1 (or 0) = off */
	uint32_t no_spec;		/* 1: the request asked for no
					 * speculation (read even when greedy;
					 * also keeps the bias 8-aligned) */
	struct sampling_bias bias[SAMPLER_MAX_BIAS];
};

/*
 * A slot's grammar (docs/DESIGN.md 2.8): the GBNF source its request's
 * tokens must follow, grammar_slot_bytes per slot after the block
 * tables.  Written by the coordinator with the slot's sampling entry;
 * the worker copies it once per generation (worker_sampling.c), checks
 * len and compiles its copy, so a stray write reaches only its own rows.
 */
struct shm_slot_grammar {
	uint32_t generation;		/* the request it is for */
	uint32_t len;			/* source bytes; 0: unconstrained */
	char source[];			/* len bytes, any bytes */
};

/*
 * The vocabulary table: n_tokens, then n_tokens + 1 offsets into the
 * bytes that follow them (token t spells bytes[off[t] .. off[t + 1]);
 * empty for a control token and for an end token).  The coordinator writes it before it
 * starts a worker; a worker maps it read-only and checks the offsets.
 */
#define SHM_VOCAB_MAX_ENDS 16u	/* GRAMMAR_MAX_ENDS */
struct shm_vocab_table {
	uint32_t n_tokens;
	uint32_t n_ends;		/* <= SHM_VOCAB_MAX_ENDS */
	int32_t ends[SHM_VOCAB_MAX_ENDS];	/* the tokens that end a request
					 * (EOS, end of turn): a grammar
					 * allows them when it is complete */
	uint32_t off[];			/* n_tokens + 1, then the bytes */
};

/* Bytes of a table of n tokens spelling total_bytes in all. */
static inline uint64_t shm_vocab_table_bytes(uint32_t n, uint64_t total_bytes)
{
	return sizeof(struct shm_vocab_table) + ((uint64_t)n + 1) * 4 + total_bytes;
}

/* The row consumed a chunk of its prefix and has no token yet. */
#define SHM_TOKEN_PREFILL (-2)
/* The model refused the row (detail says why): its request ends. */
#define SHM_TOKEN_REFUSED (-3)

/* The longest grammar source a slot may take (--grammar-max-bytes). */
#define SHM_MAX_GRAMMAR (1u << 24)
/* The largest vocabulary table (a 1M-token vocabulary of long pieces). */
#define SHM_MAX_VOCAB_TABLE (1ull << 28)

/* The longest --max-context a slot's buffer may have. */
#define SHM_MAX_CONTEXT (1u << 24)
/* The most tokens a row may get in one result (shm_params.emit_per_row):
 * its next one and the guesses speculation confirmed (spec.h). */
#define SHM_MAX_EMIT 16u

/* The worker takes every row's n_tokens as given (after the coordinator
 * rejected a result), instead of keeping its own, longer prefix for a row
 * it already has. */
#define SHM_DISPATCH_RESET 1u

struct shm_dispatch {
	_Atomic uint64_t seq;		/* position + 1 once published */
	uint64_t dispatch_id;		/* unique per shard, increasing, never 0 */
	uint32_t n_rows;		/* <= shard_capacity */
	uint32_t flags;			/* SHM_DISPATCH_RESET */
	struct shm_dispatch_row rows[];
};

struct shm_result {
	_Atomic uint64_t seq;		/* position + 1 once published */
	uint64_t dispatch_id;		/* the dispatch the worker ran */
	uint32_t n_rows;		/* rows filled */
	int32_t status;			/* 0, or the model's negative errno */
	uint64_t model_ns;		/* how long model_next() took (for stats) */
	/* speculation in this step (stats only; capped by the reader) */
	uint32_t spec_drafted;		/* tokens guessed */
	uint32_t spec_accepted;		/* of which confirmed */
	uint32_t spec_emitted;		/* tokens given to rows that guessed */
	uint32_t spec_rows;		/* rows that guessed */
	uint64_t spec_draft_ns;		/* time spent guessing */
	struct shm_result_row rows[];
};

/*
 * A shard's channel, at offset 0 of its shard object.  Line 0 is written
 * by the coordinator, line 1 by the shard's worker; the rings follow.
 * The worker can write every byte of it: the coordinator reads nothing
 * here that it does not check or that could hurt it (see the NOTES).
 */
struct shm_channel {
	uint64_t start_dispatch_pos;	/* coordinator: first position a new
					 * worker reads */
	uint64_t start_result_pos;	/* coordinator: first position it writes */
	/* coordinator: every result before this position has been read; the
	 * worker may reuse those entries (release store, acquire load) */
	_Atomic uint64_t results_consumed;
	/* coordinator: bumped before each FUTEX_WAKE (shm_wake_worker); the
	 * worker sleeps in FUTEX_WAIT on it.  The coordinator only adds to
	 * it and wakes, so any value a worker leaves in it is harmless. */
	_Atomic uint32_t wake_seq;
	uint8_t pad0[SHM_CACHE_LINE - 28];
	/* worker: 1 while it sleeps on wake_seq; the coordinator wakes it
	 * only then (sleep_handshake.h: worker_wait(), shard_dispatch(),
	 * shard_release_results()) */
	_Atomic uint32_t worker_sleeping;
	/* worker: its pid once it has attached and loaded the model; a worker
	 * that dies before this is a failed start, not a failed step */
	_Atomic int32_t worker_ready_pid;
	/* worker: position + 1 of the dispatch it runs now, stored (release)
	 * once it has finished every step of the one before: from then on it
	 * writes no slot that the new dispatch leaves out */
	_Atomic uint64_t dispatch_adopted;
	/* worker: 1 while it is inside model_next(), else 0.  Untrusted: it
	 * only decides whether the coordinator may blame the step's requests
	 * for a hang or a crash (a worker that stalls or dies elsewhere is
	 * not the requests' fault); 0 in a fresh shard object. */
	_Atomic uint32_t in_model_call;
	uint8_t pad1[SHM_CACHE_LINE - 20];
	/* then ring_depth dispatch entries, then ring_depth result entries */
};

struct shm_params {
	uint32_t n_slots;
	uint32_t n_shards;
	uint32_t max_context;
	uint32_t vocab;
	uint32_t kv_block_tokens;	/* 0: no block tables */
	uint32_t kv_blocks;		/* per shard pool */
	uint32_t emit_per_row;		/* most tokens a row gets in one
					 * result (1 + guesses); 0 counts as 1 */
	uint32_t grammar_source_max;	/* longest grammar source a slot
					 * takes; 0: no grammars */
	uint64_t vocab_table_bytes;	/* the vocabulary table's bytes
					 * (shm_vocab_table_bytes()); 0: none */
};

/*
 * The segment as either process sees it.  Not to be copied: hdr points
 * into the struct itself.
 */
struct shm_segment {
	struct shm_header layout;	/* private copy of the header, checked
					 * (shm_header_validate) */
	const struct shm_header *hdr;	/* &layout: every offset and count
					 * is read from here */
	void *base;			/* the shared object (coordinator: RW,
					 * worker: RO) */
	size_t size;			/* its size */
	void **shard_base;		/* per shard: its object's mapping, RW
					 * (a worker maps only its own) */
	const int32_t *tokens_ro;	/* worker: read-only view of its
					 * shard's token buffers */
	int ro_fd;			/* coordinator: the shared object
					 * opened O_RDONLY, for workers; -1 */
	bool owner;			/* coordinator: created it */
};

/*
 * Coordinator: create, map, initialise and seal the shared object, and
 * create every shard object.  Returns 0 or a negative errno; on failure
 * nothing is left behind.
 */
int shm_segment_create(struct shm_segment *seg, const struct shm_params *p);

/* Coordinator: unmap and close everything.  Accepts a zeroed segment.
 * Idempotent. */
void shm_segment_destroy(struct shm_segment *seg);

/*
 * Coordinator, while no worker of the shard runs: replace the shard's
 * object by a fresh one (zeroed token buffers, an empty channel whose
 * rings start at dispatch_pos and result_pos), mapped at the same
 * address.  *worker_fd gets a close-on-exec read-write descriptor of it
 * for the shard's next worker, to be closed once that one is spawned.
 * 0, or a negative errno with the old object left in place.
 */
int shm_shard_renew(struct shm_segment *seg, uint32_t shard,
		    uint64_t dispatch_pos, uint64_t result_pos, int *worker_fd);

/*
 * Worker: read and check the header from shared_fd (magic, version,
 * header size, layout, the object's size), map the shared object
 * read-only and shard_fd (its size checked too) read-write, plus a
 * read-only view of its token buffers.  The descriptors stay open (the
 * caller closes them).  Returns 0, -EPROTO on a layout mismatch, or a
 * negative errno; err gets a one-line reason.
 */
int shm_segment_attach(struct shm_segment *seg, int shared_fd, int shard_fd,
		       uint32_t shard, char *err, size_t err_len);

/* Worker: unmap.  Accepts a zeroed segment. */
void shm_segment_detach(struct shm_segment *seg);

/*
 * Validate a header against a shared object of size bytes: every offset
 * and count in range.  0 or -EPROTO with a reason in err.
 */
int shm_header_validate(const struct shm_header *hdr, size_t size, char *err,
			size_t err_len);

/* ---- waking (futex words; see the NOTES) ---- */

/* Coordinator: wake the shard's worker if it sleeps on wake_seq.  Safe
 * whatever the worker wrote into its channel. */
void shm_wake_worker(struct shm_channel *ch);

/*
 * Worker: sleep on wake_seq while it still holds seen (read before
 * announcing worker_sleeping), at most timeout_ns.  Returns at once if
 * the coordinator woke it since.
 */
void shm_worker_sleep(struct shm_channel *ch, uint32_t seen, uint64_t timeout_ns);

/* ---- accessors (indexes must already be bounds-checked) ---- */

static inline struct shm_slot *shm_slot_at(const struct shm_segment *seg,
					   uint32_t slot)
{
	return (struct shm_slot *)((char *)seg->base + seg->hdr->off_slots) + slot;
}

/* The live coordinator_sleeping word in the shared object (the private
 * header copy holds layout only). */
static inline _Atomic uint32_t *
shm_coordinator_sleeping(const struct shm_segment *seg)
{
	return &((struct shm_header *)seg->base)->coordinator_sleeping;
}

/* First slot of shard (shards split the slots as evenly as they can). */
static inline uint32_t shm_shard_first_slot(const struct shm_header *hdr,
					    uint32_t shard)
{
	return (uint32_t)((uint64_t)hdr->n_slots * shard / hdr->n_shards);
}

/* The shard a slot belongs to: the inverse of shm_shard_first_slot(). */
static inline uint32_t shm_slot_shard(const struct shm_header *hdr, uint32_t slot)
{
	return (uint32_t)(((uint64_t)(slot + 1) * hdr->n_shards + hdr->n_slots - 1) /
			  hdr->n_slots - 1);
}

/* The slot's token buffer, writable (the coordinator's, or a worker's
 * own shard's). */
static inline int32_t *shm_tokens_at(const struct shm_segment *seg,
				     uint32_t slot)
{
	const struct shm_header *hdr = seg->hdr;
	uint32_t shard = shm_slot_shard(hdr, slot);

	return (int32_t *)((char *)seg->shard_base[shard] + hdr->channel_size) +
	       (size_t)(slot - shm_shard_first_slot(hdr, shard)) * hdr->max_context;
}

static inline struct shm_channel *shm_channel_at(const struct shm_segment *seg,
						 uint32_t shard)
{
	return (struct shm_channel *)seg->shard_base[shard];
}

size_t shm_dispatch_size(uint32_t shard_capacity);
size_t shm_result_size(uint32_t result_rows);
/* The logprob blocks of one result entry (one per row). */
size_t shm_logprobs_size(uint32_t result_rows);

/* The sampling entry of slot (in the shard's object; bounds-checked). */
static inline struct shm_slot_sampling *
shm_sampling_at(const struct shm_segment *seg, uint32_t slot)
{
	const struct shm_header *hdr = seg->hdr;
	uint32_t shard = shm_slot_shard(hdr, slot);

	return (struct shm_slot_sampling *)((char *)seg->shard_base[shard] +
		hdr->channel_size + hdr->shard_tokens_size) +
		(slot - shm_shard_first_slot(hdr, shard));
}

/* The block table of slot (kv_max_blocks entries, in the shard's
 * object; the slot bounds-checked, the table present). */
static inline uint32_t *shm_kv_table_at(const struct shm_segment *seg,
					uint32_t slot)
{
	const struct shm_header *hdr = seg->hdr;
	uint32_t shard = shm_slot_shard(hdr, slot);

	return (uint32_t *)((char *)seg->shard_base[shard] + hdr->channel_size +
			    hdr->shard_tokens_size + hdr->shard_sampling_size) +
	       (size_t)(slot - shm_shard_first_slot(hdr, shard)) * hdr->kv_max_blocks;
}

/* The grammar entry of slot (in the shard's object; bounds-checked, the
 * entries present: grammar_slot_bytes != 0). */
static inline struct shm_slot_grammar *
shm_grammar_at(const struct shm_segment *seg, uint32_t slot)
{
	const struct shm_header *hdr = seg->hdr;
	uint32_t shard = shm_slot_shard(hdr, slot);

	return (struct shm_slot_grammar *)((char *)seg->shard_base[shard] +
		hdr->channel_size + hdr->shard_tokens_size +
		hdr->shard_sampling_size + hdr->shard_kv_size +
		(size_t)(slot - shm_shard_first_slot(hdr, shard)) *
		hdr->grammar_slot_bytes);
}

/* The most source bytes a slot's grammar entry holds. */
static inline uint32_t shm_grammar_source_max(const struct shm_header *hdr)
{
	return hdr->grammar_slot_bytes ? hdr->grammar_slot_bytes -
	       (uint32_t)sizeof(struct shm_slot_grammar) : 0;
}

/* The vocabulary table (vocab_table_size != 0), in the shared object. */
static inline struct shm_vocab_table *shm_vocab_table(const struct shm_segment *seg)
{
	return (struct shm_vocab_table *)((char *)seg->base + seg->hdr->off_vocab);
}

static inline struct shm_dispatch *
shm_dispatch_at(const struct shm_header *hdr, struct shm_channel *ch,
		uint64_t pos)
{
	return (struct shm_dispatch *)((char *)(ch + 1) +
		(pos & (hdr->ring_depth - 1)) * shm_dispatch_size(hdr->shard_capacity));
}

static inline struct shm_result *
shm_result_at(const struct shm_header *hdr, struct shm_channel *ch,
	      uint64_t pos)
{
	return (struct shm_result *)((char *)(ch + 1) +
		hdr->ring_depth * shm_dispatch_size(hdr->shard_capacity) +
		(pos & (hdr->ring_depth - 1)) * shm_result_size(hdr->result_rows));
}

/* The logprob block of row i of the result at ring position pos: the
 * blocks follow both rings, an entry's worth per ring position. */
static inline struct shm_logprobs *
shm_result_logprobs(const struct shm_header *hdr, struct shm_channel *ch,
		    uint64_t pos, uint32_t i)
{
	return (struct shm_logprobs *)((char *)(ch + 1) +
		hdr->ring_depth * (shm_dispatch_size(hdr->shard_capacity) +
				   shm_result_size(hdr->result_rows)) +
		(pos & (hdr->ring_depth - 1)) *
		shm_logprobs_size(hdr->result_rows)) + i;
}

/* Publish the entry for ring position pos (payload already written). */
static inline void shm_entry_publish(_Atomic uint64_t *seq, uint64_t pos)
{
	/* release: pairs with the acquire in shm_entry_ready() */
	atomic_store_explicit(seq, pos + 1, memory_order_release);
}

/* True when the entry for ring position pos has been published. */
static inline bool shm_entry_ready(_Atomic uint64_t *seq, uint64_t pos)
{
	/* acquire: pairs with the release in shm_entry_publish() */
	return atomic_load_explicit(seq, memory_order_acquire) == pos + 1;
}

#endif /* DYNBATCH_SHM_SEGMENT_H */
