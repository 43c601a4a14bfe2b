/*
 * ring_allreduce.h - the sum of P processes' float vectors over shared
 * memory, for a tensor-parallel group (docs/DESIGN.md, issue 28): every
 * rank passes its vector and gets back the element-wise sum of all P.
 *
 * NOTES ON THE DESIGN
 *
 * Two ways, the same bits.  RING: reduce-scatter then all-gather over the
 * ring 0 -> 1 -> .. -> P-1 -> 0, each rank writing P-1 chunks in each
 * half; bandwidth-optimal, 2 (P - 1) handshakes.  DIRECT (one-shot):
 * every rank writes its whole vector once and sums everyone's itself;
 * one handshake, more bytes, for the small vectors of a decode step.
 * RING_AR_AUTO picks DIRECT up to the group's direct_max_bytes (a
 * measured constant, RING_AR_DIRECT_MAX_BYTES: bench/bench_allreduce.c).
 *
 * Canonical order.  The vector is cut into P chunks, chunk c being
 * elements [c n / P, (c + 1) n / P).  Every element of chunk c is summed
 * as the left fold over the ranks c+1, c+2, .., P-1, 0, .., c (mod P):
 *
 *	s = v[c+1]; s = s + v[c+2]; ...; s = s + v[c]
 *
 * which is the order in which the ring's reduce-scatter carries chunk c
 * to its owner, rank c; DIRECT and the test's reference sum the same
 * way.  So the result depends only on P, n and the inputs: not on the
 * mode, the timing, or which rank computes it, and every rank gets the
 * same bits.  (With P = 2 every order is the same: a + b == b + a.)
 *
 * Bytes sent by rank r (floats written into its outbox for others to
 * read, times 4), with |c| the size of chunk c:
 *	RING:   2 n - |r| - |r + 1 mod P|  (n = 0 or P = 1: 0)
 *		= 2 (P - 1) / P x n when P divides n
 *	DIRECT: n (P = 1: 0)
 * The reduce-scatter sends every chunk but the rank's own, the
 * all-gather every chunk but the one it receives last, r + 1.
 *
 * The segment (caller's memory, MAP_SHARED, mapped by all P ranks;
 * formatted once by ring_ar_format before any rank attaches):
 *
 *   offset            size            field                writer
 *   0                 64              struct ring_ar_head  formatter, once;
 *                                     (abort: any rank or the supervisor)
 *   64 + 64 r         64              struct ring_ar_line  rank r
 *   64 + 64 P + r O   O = outbox_bytes  rank r's outbox    rank r
 *
 * An outbox holds 2 (P - 1) slots of ceil(n / P) floats (RING: one per
 * step, so no step waits for a reader) or the whole vector (DIRECT).
 *
 * Synchronisation: rank r's line holds prog, a 32-bit count it only
 * raises (serial-number arithmetic, wraps safely): for call g (numbered
 * from 0 on each rank) with stride S = 2 P, prog = g S + k + 1 once its
 * slot k is written, and g S + S - 1 once it has read everything it
 * needs of call g ("done").  Publish with release, read with acquire.
 * Before writing its outbox for call g, a rank waits until every rank
 * that read it in call g - 1 (RING: r + 1; DIRECT: all) is done with
 * g - 1.  The generation is in every value waited for, so a rank still
 * in an older call, or one whose prog stopped, never satisfies a newer
 * call's wait.
 *
 * Waiting: spin RING_AR_SPIN_NS with cpu_relax (a handshake between two
 * busy cores takes well under a microsecond, a syscall more), then sleep
 * in FUTEX_WAIT on the awaited prog word in slices of at most 1 ms, the
 * publisher waking sleepers only when the rank's sleepers count is
 * non-zero (sleep_handshake.h's fences, with a count because several
 * ranks may wait on one).  Futex rather than sched_yield because a group
 * may have more ranks than free cores (the unit test runs 8 on 2): a
 * yielding rank still burns its slice, a sleeping one gives the core to
 * the rank it waits for.
 *
 * Faults: each call has a deadline; a rank that reaches it, or finds its
 * arguments or another rank's (n, mode) wrong, raises the segment's
 * abort flag and fails; every rank that sees the flag fails its call
 * with -ECANCELED, and so does every later call: the group must be
 * formatted afresh (the supervisor's rebuild).  A supervisor that sees a
 * member die calls ring_ar_abort() for a quick failure.  Values read
 * from another rank's line are input: they decide waiting and errors,
 * never an offset.
 */
#ifndef DYNBATCH_RING_ALLREDUCE_H
#define DYNBATCH_RING_ALLREDUCE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define RING_AR_MAGIC 0x3152415f474e4952ull	/* "RING_AR1" little-endian */
#define RING_AR_VERSION 1u
#define RING_AR_MAX_RANKS 64u
/* The most floats a group may reduce in one call (1 GiB). */
#define RING_AR_MAX_FLOATS (1ull << 28)
/* AUTO: DIRECT for vectors up to this many bytes, RING above.  A
 * constant measured at P = 2 on the 2-core dev machine with
 * bench/bench_allreduce.c (make bench-allreduce): DIRECT wins at 64 and
 * 128 B (0.31 against 0.43 us), they tie at 256 B, RING wins from 512 B
 * (0.58 against 0.71 us) on: at P = 2 DIRECT saves a handshake but sums
 * twice the elements.  A group may set its own at ring_ar_format(). */
#define RING_AR_DIRECT_MAX_BYTES 256u
/* How long a waiter spins before it sleeps. */
#define RING_AR_SPIN_NS 20000u

enum ring_ar_mode {
	RING_AR_AUTO = 0,	/* DIRECT up to direct_max_bytes, else RING */
	RING_AR_RING = 1,
	RING_AR_DIRECT = 2,
};

struct ring_ar_head {
	uint64_t magic;			/* RING_AR_MAGIC */
	uint32_t version;		/* RING_AR_VERSION */
	uint32_t n_ranks;		/* P */
	uint64_t max_floats;		/* longest vector a call may take */
	uint64_t outbox_bytes;		/* bytes of one rank's outbox */
	uint64_t direct_max_bytes;	/* AUTO's threshold, the same for all */
	_Atomic uint32_t abort;		/* 0, or the first failing errno
					 * (positive); never cleared */
	uint8_t pad[64 - 44];
};

struct ring_ar_line {
	_Atomic uint32_t prog;		/* rank: progress, see the NOTES */
	_Atomic uint32_t sleepers;	/* ranks asleep on prog (their own
					 * adds and subtracts) */
	uint64_t call_n;		/* rank: n of its current call */
	uint32_t call_mode;		/* rank: RING or DIRECT of that call */
	uint8_t pad[64 - 20];
};

/* One rank's handle: a private copy of the layout, its rank and count. */
struct ring_ar {
	struct ring_ar_head layout;	/* checked copy of the head */
	struct ring_ar_head *head;	/* the shared head (for abort) */
	struct ring_ar_line *lines;	/* P lines */
	char *outboxes;			/* P outboxes */
	uint32_t rank;
	uint64_t n_calls;		/* calls made: the next call's g */
	uint32_t prev_mode;		/* mode of call n_calls - 1; 0: none */
};

/* Bytes a segment for n_ranks ranks and vectors of max_floats needs;
 * 0 when either is out of range. */
size_t ring_ar_segment_bytes(uint32_t n_ranks, uint64_t max_floats);

/*
 * Format the segment mem of bytes (zeroed by the caller, e.g. a fresh
 * mapping) for n_ranks ranks; direct_max_bytes 0 takes the default.
 * 0 or -EINVAL.  Once, before any rank attaches.
 */
int ring_ar_format(void *mem, size_t bytes, uint32_t n_ranks,
		   uint64_t max_floats, uint64_t direct_max_bytes);

/*
 * Rank rank's handle on a formatted segment: the head checked (magic,
 * version, counts, sizes against bytes).  0 or -EPROTO with a reason in
 * err.
 */
int ring_ar_attach(struct ring_ar *ar, void *mem, size_t bytes, uint32_t rank,
		   char *err, size_t err_len);

/*
 * Replace v (n floats, the same n on every rank) by the sum of every
 * rank's v, in the canonical order (NOTES).  Every rank of the group
 * must make the same sequence of calls with the same n and mode.
 * *bytes_sent (may be NULL) gets the bytes this rank wrote for others.
 * Returns 0; -EINVAL (n over max_floats, bad mode), -EPROTO (another rank
 * called with another n or mode), -ETIMEDOUT (not done within timeout_ns)
 * after raising the abort flag; -ECANCELED when the group was aborted.
 * After an error v is unspecified.
 */
int ring_ar_reduce(struct ring_ar *ar, float *v, uint64_t n,
		   enum ring_ar_mode mode, uint64_t timeout_ns,
		   uint64_t *bytes_sent);

/* The mode AUTO takes for n floats on this group. */
enum ring_ar_mode ring_ar_choose(const struct ring_ar *ar, uint64_t n);

/* Raise the abort flag of the segment mem (a supervisor that saw a rank
 * die, or a rank giving up): every call in progress and every later one
 * fails.  err: a positive errno, kept if the flag is up already. */
void ring_ar_abort(void *mem, uint32_t err);

/* First element of chunk c of n floats cut into p chunks. */
static inline uint64_t ring_ar_chunk_start(uint64_t n, uint32_t p, uint32_t c)
{
	return n * c / p;
}

#endif /* DYNBATCH_RING_ALLREDUCE_H */
