/*
 * shm_segment.h - the one POSIX shared-memory segment that the coordinator
 * and its workers share, its layout and its lifetime.
 *
 * NOTES ON THE DESIGN
 *
 * The coordinator creates the segment (0600, O_EXCL, a unique name
 * "/dynbatch-<pid>-<random>") and is the only writer of every region but
 * the channels and the generated tokens.  A worker maps the whole segment
 * read-only and then maps its own shard's channel and its own shard's
 * token buffers read-write over it, so a buggy worker cannot scribble on
 * the slot table, the queue, or another shard's tokens or channel.
 *
 * Who writes a slot's token buffer: the coordinator writes the prompt
 * (and, for a resumed request, the tokens it already had) when it assigns
 * the slot; the shard's worker writes each token it generates right after
 * the prefix, before it posts the result.  So a worker can run its next
 * step without waiting for the coordinator to commit the last one (the
 * coordinator commits later, from the result record, and keeps its own
 * copy of every committed token).  A worker writes a slot's buffer only
 * while the slot is in the dispatch it has adopted and below the row's
 * limit; the coordinator reuses a slot only once the worker cannot write
 * it any more (see coordinator/engine.c, "Run-ahead").  The coordinator
 * still treats everything it reads back from a channel as untrusted
 * input, and keeps its own private copy of everything it must trust
 * (slot -> request, generations, lengths, committed tokens).
 *
 * Regions, each starting on a page boundary:
 *
 *   offset         size                          region          writer
 *   0              4096                          struct shm_header  coordinator
 *   off_slots      n_slots * 32                  slot table      coordinator
 *   off_queue      16 + queue_capacity * 4       waiting queue   coordinator
 *   off_tokens     n_shards * shard_token_stride token buffers   see above
 *   off_channels   n_shards * channel_stride     channels        see below
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
 *   40      4     queue_capacity        coordinator, once
 *   44      4     ring_depth            coordinator, once
 *   48      4     coordinator_pid       coordinator, once
 *   52      4     vocab                 coordinator, once
 *   56      40    off_slots .. channel_stride   coordinator, once
 *   96      8     shard_token_stride    coordinator, once
 *   128     4     coordinator_sleeping  coordinator (own cache line)
 *
 * A channel (one per shard) holds the two single-producer single-consumer
 * rings of that shard: dispatches (coordinator -> worker) and results
 * (worker -> coordinator), ring_depth entries each.  An entry for ring
 * position p sits at index p % ring_depth and is published by writing the
 * payload and then storing seq = p + 1 with release order; the reader
 * loads seq with acquire order and accepts the entry only when it equals
 * the p + 1 it expects.  A writer killed mid-record leaves a record nobody
 * accepts.  Neither side overwrites an entry the other may still read:
 * the worker posts result p only once results_consumed > p - ring_depth,
 * and the coordinator keeps at most ring_depth - 1 dispatches ahead of
 * the one the worker has adopted (dispatch_adopted).
 *
 * Slots are split into shards as first_slot(i) = n_slots * i / n_shards;
 * each shard's token buffers start on a page (shard_token_stride apart) so
 * that its worker can map exactly them read-write.
 */
#ifndef DYNBATCH_SHM_SEGMENT_H
#define DYNBATCH_SHM_SEGMENT_H

#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_MAGIC 0x48435441424e5944ull	/* "DYNBATCH" little-endian */
#define SHM_LAYOUT_VERSION 3u
#define SHM_CACHE_LINE 64
#define SHM_PAGE 4096u
#define SHM_RING_DEPTH 64u		/* positions per ring, power of two */
#define SHM_NAME_MAX 64

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
	uint64_t segment_size;		/* bytes in the whole segment */
	uint32_t n_slots;		/* batch capacity B, all shards */
	uint32_t n_shards;		/* channels (worker processes) */
	uint32_t max_context;		/* tokens per slot buffer */
	uint32_t shard_capacity;	/* most slots (rows) in one shard */
	uint32_t queue_capacity;	/* waiting queue entries */
	uint32_t ring_depth;		/* entries per ring */
	int32_t coordinator_pid;	/* workers exit when it is gone */
	uint32_t vocab;			/* model vocabulary, for checks */
	uint64_t off_slots;		/* byte offset of the slot table */
	uint64_t off_queue;		/* byte offset of struct shm_queue */
	uint64_t off_tokens;		/* byte offset of slot 0's tokens */
	uint64_t off_channels;		/* byte offset of channel 0 */
	uint64_t channel_stride;	/* bytes per channel, page multiple */
	uint64_t shard_token_stride;	/* bytes of token buffers per shard,
					 * page multiple */
	uint8_t pad0[128 - 104];
	/* SHM_COORD_*: whether the coordinator sleeps in io_uring and for
	 * which results a worker that has just published one (or adopted a
	 * dispatch) writes the eventfd to wake it.  Paired with the seq_cst
	 * fences in worker_step() and worker_adopt(). */
	_Atomic uint32_t coordinator_sleeping;
	uint8_t pad1[SHM_CACHE_LINE - 4];
};

/*
 * One batch slot.  Lifecycle (coordinator/slot_table.c):
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

/* The waiting queue: a FIFO ring of request handles. */
struct shm_queue {
	uint64_t head;			/* next position to pop */
	uint64_t tail;			/* next position to push */
	uint32_t handles[];		/* queue_capacity request handles */
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
					 * (prompt + max_tokens, <= max_context) */
};

/* One row of a result: the token that continues one prefix. */
struct shm_result_row {
	uint32_t slot;			/* copied from the dispatch row */
	uint32_t generation;		/* copied from the dispatch row */
	int32_t token;			/* the model's next token */
	uint32_t n_tokens;		/* length of the prefix it continues
					 * (the token sits at this index) */
};

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
	struct shm_result_row rows[];
};

/*
 * Per-shard channel.  Line 0 is written by the coordinator, line 1 by
 * the shard's worker; the rings follow.
 */
struct shm_channel {
	uint64_t start_dispatch_pos;	/* coordinator: first position a new
					 * worker reads */
	uint64_t start_result_pos;	/* coordinator: first position it writes */
	/* coordinator: every result before this position has been read; the
	 * worker may reuse those entries (release store, acquire load) */
	_Atomic uint64_t results_consumed;
	uint8_t pad0[SHM_CACHE_LINE - 24];
	/* worker: 1 while it sleeps in sem_wait(&dispatch_sem); the
	 * coordinator posts the semaphore only then (after a seq_cst fence) */
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
	 * not the requests' fault); 0 after shm_channel_reset(). */
	_Atomic uint32_t in_model_call;
	uint8_t pad1[SHM_CACHE_LINE - 20];
	sem_t dispatch_sem;		/* wakes the worker; count is a hint */
	uint8_t pad2[SHM_CACHE_LINE * 2 - sizeof(sem_t)];
	/* then ring_depth dispatch entries, then ring_depth result entries */
};

struct shm_params {
	uint32_t n_slots;
	uint32_t n_shards;
	uint32_t max_context;
	uint32_t queue_capacity;
	uint32_t vocab;
};

/* A mapped segment, as either process sees it. */
struct shm_segment {
	char name[SHM_NAME_MAX];	/* "/dynbatch-..." */
	void *base;
	size_t size;
	bool owner;			/* coordinator: unlink on destroy */
	struct shm_header *hdr;
};

/*
 * Coordinator: create, size, map and initialise a new segment (every
 * channel's semaphore too).  Returns 0 or a negative errno; on failure
 * nothing is left behind (no name, no mapping).
 */
int shm_segment_create(struct shm_segment *seg, const struct shm_params *p);

/* Coordinator: unmap and unlink.  Accepts a zeroed segment.  Idempotent. */
void shm_segment_destroy(struct shm_segment *seg);

/* Unlink the name only (after a fatal signal, say); mapping stays. */
void shm_segment_unlink(struct shm_segment *seg);

/*
 * Worker: open name, check magic, version, header size and segment size
 * against the file, map it read-only and map channel shard read-write.
 * Returns 0, -EPROTO on a layout mismatch, or a negative errno; err gets
 * a one-line reason.
 */
int shm_segment_attach(struct shm_segment *seg, const char *name,
		       uint32_t shard, char *err, size_t err_len);

/* Worker: unmap.  Accepts a zeroed segment. */
void shm_segment_detach(struct shm_segment *seg);

/*
 * Validate a header against a mapping of size bytes: every offset and
 * count in range.  0 or -EPROTO with a reason in err.
 */
int shm_header_validate(const struct shm_header *hdr, size_t size, char *err,
			size_t err_len);

/* Unlink segments "/dynbatch-<pid>-*" left by coordinators that are dead.
 * Returns how many it removed. */
int shm_segment_reap_stale(void);

/* ---- accessors (indexes must already be bounds-checked) ---- */

static inline struct shm_slot *shm_slot_at(const struct shm_segment *seg,
					   uint32_t slot)
{
	return (struct shm_slot *)((char *)seg->base + seg->hdr->off_slots) + slot;
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

static inline int32_t *shm_tokens_at(const struct shm_segment *seg,
				     uint32_t slot)
{
	const struct shm_header *hdr = seg->hdr;
	uint32_t shard = shm_slot_shard(hdr, slot);

	return (int32_t *)((char *)seg->base + hdr->off_tokens +
			   shard * hdr->shard_token_stride) +
	       (size_t)(slot - shm_shard_first_slot(hdr, shard)) * hdr->max_context;
}

static inline struct shm_queue *shm_queue_of(const struct shm_segment *seg)
{
	return (struct shm_queue *)((char *)seg->base + seg->hdr->off_queue);
}

static inline struct shm_channel *shm_channel_at(const struct shm_segment *seg,
						 uint32_t shard)
{
	return (struct shm_channel *)((char *)seg->base + seg->hdr->off_channels +
				      (size_t)shard * seg->hdr->channel_stride);
}

size_t shm_dispatch_size(uint32_t shard_capacity);
size_t shm_result_size(uint32_t shard_capacity);

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
		(pos & (hdr->ring_depth - 1)) * shm_result_size(hdr->shard_capacity));
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

/* Coordinator: forget every entry of a channel and re-arm its semaphore
 * (only while no worker of that shard is alive). */
void shm_channel_reset(const struct shm_segment *seg, uint32_t shard,
		       uint64_t dispatch_pos, uint64_t result_pos);

#endif /* DYNBATCH_SHM_SEGMENT_H */
