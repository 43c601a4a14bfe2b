/*
 * ring_allreduce.c - the group sum of float vectors over shared memory:
 * the ring (reduce-scatter, all-gather) and the one-shot DIRECT mode,
 * their handshakes and their failures.  Layout, order and reasons are in
 * ring_allreduce.h.
 */
#include "ipc/ring_allreduce.h"

#include <assert.h>
#include <errno.h>
#include <linux/futex.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"

static_assert(sizeof(struct ring_ar_head) == 64, "ring_ar_head layout");
static_assert(offsetof(struct ring_ar_head, abort) == 40, "abort word");
static_assert(sizeof(struct ring_ar_line) == 64, "one line per rank");

#define RING_AR_SLICE_NS 1000000u	/* longest single futex sleep */

/* ------------------------------------------------------------ layout */

static uint64_t div_up(uint64_t a, uint64_t b)
{
	return (a + b - 1) / b;
}

/* Outbox bytes: the larger of the ring's 2 (P - 1) slots and a whole
 * vector, on cache lines so that outboxes share none. */
static uint64_t outbox_bytes(uint32_t p, uint64_t max_floats)
{
	uint64_t ring = 2ull * (p - 1) * div_up(max_floats, p);
	uint64_t floats = ring > max_floats ? ring : max_floats;

	return div_up(floats * sizeof(float), 64) * 64;
}

size_t ring_ar_segment_bytes(uint32_t n_ranks, uint64_t max_floats)
{
	if (n_ranks == 0 || n_ranks > RING_AR_MAX_RANKS ||
	    max_floats > RING_AR_MAX_FLOATS)
		return 0;
	return sizeof(struct ring_ar_head) +
	       (size_t)n_ranks * (sizeof(struct ring_ar_line) +
				  outbox_bytes(n_ranks, max_floats));
}

int ring_ar_format(void *mem, size_t bytes, uint32_t n_ranks,
		   uint64_t max_floats, uint64_t direct_max_bytes)
{
	struct ring_ar_head *h = mem;
	size_t need = ring_ar_segment_bytes(n_ranks, max_floats);

	if (!mem || need == 0 || bytes < need)
		return -EINVAL;
	h->magic = RING_AR_MAGIC;
	h->version = RING_AR_VERSION;
	h->n_ranks = n_ranks;
	h->max_floats = max_floats;
	h->outbox_bytes = outbox_bytes(n_ranks, max_floats);
	h->direct_max_bytes = direct_max_bytes ? direct_max_bytes :
			      RING_AR_DIRECT_MAX_BYTES;
	/* a rebuilt group starts every rank's count at 0 again */
	memset(h + 1, 0, (size_t)n_ranks * sizeof(struct ring_ar_line));
	atomic_store_explicit(&h->abort, 0, memory_order_release);
	return 0;
}

int ring_ar_attach(struct ring_ar *ar, void *mem, size_t bytes, uint32_t rank,
		   char *err, size_t err_len)
{
	struct ring_ar_head *h = mem;
	struct ring_ar_head l;

	memset(ar, 0, sizeof(*ar));
	if (!mem || bytes < sizeof(l)) {
		snprintf(err, err_len, "ring_ar: segment of %zu bytes, no head",
			 bytes);
		return -EPROTO;
	}
	memcpy(&l, h, sizeof(l));	/* checked once, then used privately */
	if (l.magic != RING_AR_MAGIC || l.version != RING_AR_VERSION) {
		snprintf(err, err_len, "ring_ar: bad magic or version %u",
			 l.version);
		return -EPROTO;
	}
	if (ring_ar_segment_bytes(l.n_ranks, l.max_floats) == 0 ||
	    ring_ar_segment_bytes(l.n_ranks, l.max_floats) > bytes ||
	    l.outbox_bytes != outbox_bytes(l.n_ranks, l.max_floats)) {
		snprintf(err, err_len, "ring_ar: head says %u ranks of %llu floats,"
			 " segment has %zu bytes", l.n_ranks,
			 (unsigned long long)l.max_floats, bytes);
		return -EPROTO;
	}
	if (rank >= l.n_ranks) {
		snprintf(err, err_len, "ring_ar: rank %u of a group of %u", rank,
			 l.n_ranks);
		return -EPROTO;
	}
	ar->layout = l;
	ar->head = h;
	ar->lines = (struct ring_ar_line *)(h + 1);
	ar->outboxes = (char *)(ar->lines + l.n_ranks);
	ar->rank = rank;
	return 0;
}

void ring_ar_abort(void *mem, uint32_t err)
{
	struct ring_ar_head *h = mem;
	uint32_t zero = 0;

	atomic_compare_exchange_strong(&h->abort, &zero, err ? err : ECANCELED);
}

enum ring_ar_mode ring_ar_choose(const struct ring_ar *ar, uint64_t n)
{
	return n * sizeof(float) <= ar->layout.direct_max_bytes ?
	       RING_AR_DIRECT : RING_AR_RING;
}

/* --------------------------------------------------------- handshake */

static float *outbox(const struct ring_ar *ar, uint32_t rank)
{
	return (float *)(ar->outboxes + (size_t)rank * ar->layout.outbox_bytes);
}

/* Raise prog to value (release: the outbox writes before it are seen by
 * whoever acquires it) and wake those asleep on it. */
static void post(struct ring_ar *ar, uint32_t value)
{
	struct ring_ar_line *me = &ar->lines[ar->rank];

	atomic_store_explicit(&me->prog, value, memory_order_release);
	/* F2 of sleep_handshake.h: pairs with the fence in wait_for() */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&me->sleepers, memory_order_relaxed))
		syscall(SYS_futex, &me->prog, FUTEX_WAKE, INT32_MAX, NULL,
			NULL, 0);
}

/* prog has reached want (serial-number order: wraps safely). */
static bool reached(uint32_t prog, uint32_t want)
{
	return (int32_t)(prog - want) >= 0;
}

/* The group's failure, or 0: a positive errno once aborted. */
static int aborted(const struct ring_ar *ar)
{
	return (int)atomic_load_explicit(&ar->head->abort, memory_order_acquire);
}

/*
 * Wait until rank's prog reaches want: spin, then futex slices; the
 * acquire load pairs with post()'s release.  0, -ECANCELED (aborted) or
 * -ETIMEDOUT past deadline_ns (after raising the abort flag).
 */
static int wait_for(struct ring_ar *ar, uint32_t rank, uint32_t want,
		    uint64_t deadline_ns)
{
	struct ring_ar_line *l = &ar->lines[rank];
	uint64_t spin_end = clock_now_ns() + RING_AR_SPIN_NS;

	for (;;) {
		uint32_t seen = atomic_load_explicit(&l->prog, memory_order_acquire);
		uint64_t now, slice;
		struct timespec ts;

		if (reached(seen, want))
			return 0;
		if (aborted(ar))
			return -ECANCELED;
		now = clock_now_ns();
		if (now >= deadline_ns) {
			ring_ar_abort(ar->head, ETIMEDOUT);
			return -ETIMEDOUT;
		}
		if (now < spin_end) {
			cpu_relax();
			continue;
		}
		slice = deadline_ns - now;
		if (slice > RING_AR_SLICE_NS)
			slice = RING_AR_SLICE_NS;
		ts.tv_sec = 0;
		ts.tv_nsec = (long)slice;
		atomic_fetch_add_explicit(&l->sleepers, 1, memory_order_relaxed);
		/* F1 of sleep_handshake.h: pairs with the fence in post();
		 * FUTEX_WAIT compares against seen, so a post between the
		 * look and the sleep returns at once */
		atomic_thread_fence(memory_order_seq_cst);
		if (!reached(atomic_load_explicit(&l->prog, memory_order_acquire),
			     want))
			syscall(SYS_futex, &l->prog, FUTEX_WAIT, seen, &ts, NULL, 0);
		atomic_fetch_sub_explicit(&l->sleepers, 1, memory_order_relaxed);
	}
}

/* Wait for rank's post of slot k of this call; then check that it makes
 * the same call (its n and mode, stable until we are done: it waits for
 * us before its next call). */
static int wait_slot(struct ring_ar *ar, uint32_t rank, uint32_t base,
		     uint32_t k, uint64_t n, uint32_t mode, uint64_t deadline_ns)
{
	const struct ring_ar_line *l = &ar->lines[rank];
	int rc = wait_for(ar, rank, base + k + 1, deadline_ns);

	if (rc)
		return rc;
	if (l->call_n != n || l->call_mode != mode) {
		ring_ar_abort(ar->head, EPROTO);
		return -EPROTO;
	}
	return 0;
}

/* ------------------------------------------------------------- modes */

/* Chunk c's bounds: [*lo, *hi). */
static void chunk(uint64_t n, uint32_t p, uint32_t c, uint64_t *lo,
		  uint64_t *hi)
{
	*lo = ring_ar_chunk_start(n, p, c);
	*hi = ring_ar_chunk_start(n, p, c + 1);
}

/*
 * RING, rank r: reduce-scatter (steps s = 0..P-1, chunk r - 1 - s: the
 * partial from the left plus our own, sent on), then all-gather (steps
 * t = 0..P-1, chunk r - t: received from the left, kept, sent on).  Slot
 * k of the outbox carries step k's chunk; left's slot k - 1 is read.
 */
static int ring_run(struct ring_ar *ar, float *v, uint64_t n, uint32_t base,
		    uint64_t deadline_ns, uint64_t *sent)
{
	uint32_t p = ar->layout.n_ranks, r = ar->rank, left = (r + p - 1) % p;
	uint64_t slot = div_up(n, p), lo, hi;
	float *mine = outbox(ar, r);
	const float *theirs = outbox(ar, left);
	int rc;

	for (uint32_t s = 0; s < p; s++) {
		float *dst;

		chunk(n, p, (r + 2 * p - 1 - s) % p, &lo, &hi);
		dst = s + 1 < p ? mine + s * slot : v + lo;
		if (s == 0) {
			memcpy(dst, v + lo, (hi - lo) * sizeof(float));
		} else {
			const float *in = theirs + (s - 1) * slot;

			rc = wait_slot(ar, left, base, s - 1, n, RING_AR_RING,
				       deadline_ns);
			if (rc)
				return rc;
			/* canonical: the left fold so far, plus ours */
			for (uint64_t i = 0; i < hi - lo; i++)
				dst[i] = in[i] + v[lo + i];
		}
		if (s + 1 < p) {
			*sent += hi - lo;
			post(ar, base + s + 1);
		}
	}
	for (uint32_t t = 0; t < p; t++) {
		uint32_t k = p - 1 + t;

		chunk(n, p, (r + p - t) % p, &lo, &hi);
		if (t > 0) {
			rc = wait_slot(ar, left, base, k - 1, n, RING_AR_RING,
				       deadline_ns);
			if (rc)
				return rc;
			memcpy(v + lo, theirs + (k - 1) * slot,
			       (hi - lo) * sizeof(float));
		}
		if (t + 1 < p) {
			memcpy(mine + k * slot, v + lo, (hi - lo) * sizeof(float));
			*sent += hi - lo;
			post(ar, base + k + 1);
		}
	}
	return 0;
}

/*
 * DIRECT, rank r: our whole vector into our outbox, then every element
 * summed from all outboxes in its chunk's canonical order.
 */
static int direct_run(struct ring_ar *ar, float *v, uint64_t n, uint32_t base,
		      uint64_t deadline_ns, uint64_t *sent)
{
	uint32_t p = ar->layout.n_ranks;
	uint64_t lo, hi;
	int rc;

	memcpy(outbox(ar, ar->rank), v, n * sizeof(float));
	*sent += n;
	post(ar, base + 1);
	for (uint32_t q = 0; q < p; q++) {
		rc = q == ar->rank ? 0 :
		     wait_slot(ar, q, base, 0, n, RING_AR_DIRECT, deadline_ns);
		if (rc)
			return rc;
	}
	for (uint32_t c = 0; c < p; c++) {
		const float *first = outbox(ar, (c + 1) % p);

		chunk(n, p, c, &lo, &hi);
		for (uint64_t i = lo; i < hi; i++)
			v[i] = first[i];
		for (uint32_t j = 2; j <= p; j++) {
			const float *in = outbox(ar, (c + j) % p);

			for (uint64_t i = lo; i < hi; i++)
				v[i] = v[i] + in[i];
		}
	}
	return 0;
}

/* ------------------------------------------------------------- calls */

/* Before writing our outbox for call base / S: every rank that read it in
 * the previous call (RING: the right neighbour; DIRECT: all) is done. */
static int wait_readers(struct ring_ar *ar, uint32_t base, uint64_t deadline_ns)
{
	uint32_t p = ar->layout.n_ranks, r = ar->rank;
	int rc;

	if (ar->prev_mode == 0)
		return 0;
	for (uint32_t q = 0; q < p; q++) {
		if (q == r || (ar->prev_mode == RING_AR_RING && q != (r + 1) % p))
			continue;
		rc = wait_for(ar, q, base - 1, deadline_ns);
		if (rc)
			return rc;
	}
	return 0;
}

int ring_ar_reduce(struct ring_ar *ar, float *v, uint64_t n,
		   enum ring_ar_mode mode, uint64_t timeout_ns,
		   uint64_t *bytes_sent)
{
	uint32_t p = ar->layout.n_ranks, stride = 2 * p;
	uint32_t base = (uint32_t)(ar->n_calls * stride);
	struct ring_ar_line *me = &ar->lines[ar->rank];
	uint64_t now = clock_now_ns(), sent = 0;
	/* saturated: a timeout of "forever" must not wrap to the past */
	uint64_t deadline_ns = timeout_ns > UINT64_MAX - now ? UINT64_MAX :
			       now + timeout_ns;
	int rc;

	if (bytes_sent)
		*bytes_sent = 0;
	if (aborted(ar))
		return -ECANCELED;
	if (n > ar->layout.max_floats || (n && !v) || mode > RING_AR_DIRECT) {
		ring_ar_abort(ar->head, EINVAL);
		return -EINVAL;
	}
	if (p == 1)
		return 0;
	if (mode == RING_AR_AUTO)
		mode = ring_ar_choose(ar, n);
	rc = wait_readers(ar, base, deadline_ns);
	if (rc)
		return rc;
	/* read by the others after they acquire our first post */
	me->call_n = n;
	me->call_mode = mode;
	if (mode == RING_AR_RING)
		rc = ring_run(ar, v, n, base, deadline_ns, &sent);
	else
		rc = direct_run(ar, v, n, base, deadline_ns, &sent);
	if (rc)
		return rc;
	post(ar, base + stride - 1);
	ar->n_calls++;
	ar->prev_mode = mode;
	if (bytes_sent)
		*bytes_sent = sent * sizeof(float);
	return 0;
}
