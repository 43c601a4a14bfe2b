/*
 * test_shm_segment.c - the memory the coordinator shares with its
 * workers: layout, header validation, attach, what a worker can and
 * cannot write (whatever it tries), renewal, waking, the rings of a
 * channel, fault injection.
 *
 * What is checked, and why:
 * - create: for random shapes (slots 1..300, shards 1..8, any context
 *   length) the header holds the layout, regions start on pages and do
 *   not overlap, every byte of the shared object and of every shard
 *   object is mapped and writable by the coordinator, and no name appears
 *   in /dev/shm (the objects are unnamed: nothing to clean up or steal);
 *   bad parameters fail with -EINVAL and leave nothing behind.
 * - shm_header_validate: the real header passes; a wrong magic, layout
 *   version or header size, any inconsistent offset or count, and a size
 *   that does not match the object each fail with -EPROTO and a reason.
 * - attach: works for every shard through the descriptors a worker gets,
 *   shows the coordinator's writes and carries the worker's back; refuses
 *   a shard out of range, a corrupted header, objects of the wrong size.
 * - a worker's reach (issue 13, B9): the descriptor of the shared object
 *   is O_RDONLY; writing through the worker's view of the header, the
 *   slot table or its read-only token view dies of SIGSEGV; mprotect
 *   cannot make them writable; reopening the descriptor O_RDWR through
 *   /proc gives no writable mapping, no write(), no hole punch, no
 *   truncation and no new seals; a shard object cannot be resized or
 *   sealed by its worker; an old worker's mapping is cut off by renewal.
 * - waking (B5): wake_seq scribbled with any value, the coordinator's
 *   wake still works and returns; a worker sleeping on the handshake
 *   (flag, fence, re-check, FUTEX_WAIT) is never left asleep for a wake
 *   that came (300 rounds against a forked coordinator).
 * - rings: entries for positions 0..1000 written through one mapping and
 *   read through the other become ready only once published, never for
 *   the next lap at the same index (a stale seq must not look ready), keep
 *   their payload while the ring goes on, and a renewed shard starts empty.
 * - with DYNBATCH_FAULT=memfd or mmap, create fails cleanly.
 *
 * The random test prints its seed; SEED=<n> replays a run.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ipc/shm_segment.h"
#include "tests/unit/test_rng.h"

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

static int teardown(void **state)
{
	(void)state;
	unsetenv("DYNBATCH_FAULT");
	return 0;
}

static void seg_create(struct shm_segment *seg, uint32_t n_slots,
		       uint32_t n_shards, uint32_t max_context)
{
	struct shm_params p = {
		.n_slots = n_slots, .n_shards = n_shards,
		.max_context = max_context, .vocab = 32000,
	};
	int rc = shm_segment_create(seg, &p);

	if (rc) {
		print_error("create slots %u shards %u ctx %u: %d\n",
			    n_slots, n_shards, max_context, rc);
		fail();
	}
}

/* Entries in /dev/shm named for this process, as the named segments of
 * the old design were ("dynbatch-<pid>-..."); other runs may come and go
 * meanwhile, so only ours are counted. */
static int dev_shm_names(void)
{
	char prefix[32];
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	int n = 0;

	if (!d)
		return 0;
	snprintf(prefix, sizeof(prefix), "dynbatch-%d-", (int)getpid());
	while ((e = readdir(d)))
		n += !strncmp(e->d_name, prefix, strlen(prefix));
	closedir(d);
	return n;
}

/* Number of open descriptors of this process. */
static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = -1;	/* the directory's own */

	assert_non_null(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/*
 * A worker's view of shard: attach through the descriptors a worker gets
 * (the shared object O_RDONLY, a fresh object of the shard).  Like the
 * worker, close them once mapped.
 */
static void worker_attach(struct shm_segment *seg, struct shm_segment *w,
			  uint32_t shard)
{
	char err[256] = "";
	int shard_fd, shared_fd;

	assert_int_equal(shm_shard_renew(seg, shard, 0, 0, &shard_fd), 0);
	shared_fd = dup(seg->ro_fd);
	assert_true(shared_fd >= 0);
	if (shm_segment_attach(w, shared_fd, shard_fd, shard, err, sizeof(err))) {
		print_error("attach shard %u: %s\n", shard, err);
		fail();
	}
	close(shared_fd);
	close(shard_fd);
}

/*
 * Fork a child that writes one byte at addr (in a mapping it inherits)
 * and exits 0 if that worked.  Returns the wait status.
 */
static int child_write(volatile uint8_t *addr, uint8_t value)
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit no_core = { 0, 0 };

		/* die of the signal itself: no cmocka or sanitizer handler,
		 * no core file */
		signal(SIGSEGV, SIG_DFL);
		signal(SIGBUS, SIG_DFL);
		setrlimit(RLIMIT_CORE, &no_core);
		*addr = value;
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return status;
}

static void expect_segv(const void *addr, const char *what)
{
	int status = child_write((volatile uint8_t *)addr, 0x5a);

	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGSEGV) {
		print_error("write to %s through the worker's mapping: status "
			    "0x%x, expected death by SIGSEGV\n", what, status);
		fail();
	}
}

static void expect_writable(void *addr, const char *what)
{
	int status = child_write(addr, 0xa7);

	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		print_error("write to %s through the worker's mapping: status "
			    "0x%x, expected success\n", what, status);
		fail();
	}
}

/* mprotect of the page at addr to writable must fail with EACCES. */
static void expect_no_mprotect(const void *addr, const char *what)
{
	void *page = (void *)((uintptr_t)addr & ~(uintptr_t)(SHM_PAGE - 1));

	int rc = mprotect(page, SHM_PAGE, PROT_READ | PROT_WRITE);

	if (rc == 0 || errno != EACCES) {
		print_error("mprotect(PROT_WRITE) of %s: %s, expected EACCES\n",
			    what, rc == 0 ? "it worked" : strerror(errno));
		fail();
	}
}

/* ------------------------------------------------------------------ */
/* Layout                                                              */
/* ------------------------------------------------------------------ */

static void check_layout(const struct shm_segment *seg, uint32_t n_slots,
			 uint32_t n_shards, uint32_t max_context)
{
	const struct shm_header *h = seg->hdr;
	const struct shm_header *live = seg->base;
	uint64_t slots_len = (uint64_t)n_slots * sizeof(struct shm_slot);
	size_t ds, rs;
	struct stat st;

	assert_ptr_equal(seg->hdr, &seg->layout);
	assert_true(seg->owner);
	/* the private copy is what the shared header says */
	assert_memory_equal(live, h, offsetof(struct shm_header, coordinator_sleeping));
	assert_int_equal(h->magic, SHM_MAGIC);
	assert_int_equal(h->layout_version, SHM_LAYOUT_VERSION);
	assert_int_equal(h->header_size, sizeof(struct shm_header));
	assert_int_equal(h->segment_size, seg->size);
	assert_int_equal(h->n_slots, n_slots);
	assert_int_equal(h->n_shards, n_shards);
	assert_int_equal(h->max_context, max_context);
	assert_int_equal(h->shard_capacity, (n_slots + n_shards - 1) / n_shards);
	assert_true((uint64_t)h->shard_capacity * n_shards >= n_slots);
	assert_int_equal(h->ring_depth, SHM_RING_DEPTH);
	assert_int_equal(h->coordinator_pid, getpid());
	assert_int_equal(h->vocab, 32000);
	assert_int_equal(atomic_load(shm_coordinator_sleeping(seg)), 0);

	/* the shared object: header page, then the slot table */
	assert_true(sizeof(struct shm_header) <= SHM_PAGE);
	assert_int_equal(h->off_slots, SHM_PAGE);
	assert_true(h->off_slots + slots_len <= h->segment_size);
	assert_int_equal(h->segment_size % SHM_PAGE, 0);
	assert_true(h->segment_size < h->off_slots + slots_len + SHM_PAGE);
	assert_int_equal(fstat(seg->ro_fd, &st), 0);
	assert_int_equal(st.st_size, (off_t)h->segment_size);
	assert_int_equal(fcntl(seg->ro_fd, F_GETFL) & O_ACCMODE, O_RDONLY);
	assert_true(fcntl(seg->ro_fd, F_GETFD) & FD_CLOEXEC);

	/* a shard object: channel, then whole pages of token buffers */
	assert_int_equal(h->channel_size % SHM_PAGE, 0);
	assert_int_equal(h->shard_tokens_size % SHM_PAGE, 0);
	assert_true(h->shard_tokens_size >=
		    (uint64_t)h->shard_capacity * max_context * sizeof(int32_t));
	assert_true(h->shard_tokens_size <
		    (uint64_t)h->shard_capacity * max_context * sizeof(int32_t) + SHM_PAGE);
	/* then the sampling table, whole pages, one entry per slot */
	assert_int_equal(h->shard_sampling_size % SHM_PAGE, 0);
	assert_true(h->shard_sampling_size >=
		    (uint64_t)h->shard_capacity * sizeof(struct shm_slot_sampling));
	assert_true(h->shard_sampling_size <
		    (uint64_t)h->shard_capacity * sizeof(struct shm_slot_sampling) +
		    SHM_PAGE);
	assert_int_equal(h->shard_size, h->channel_size + h->shard_tokens_size +
			 h->shard_sampling_size);
	ds = shm_dispatch_size(h->shard_capacity);
	rs = shm_result_size(h->shard_capacity);
	assert_true(ds >= sizeof(struct shm_dispatch) +
			  h->shard_capacity * sizeof(struct shm_dispatch_row));
	assert_true(rs >= sizeof(struct shm_result) +
			  h->shard_capacity * sizeof(struct shm_result_row));
	/* the logprob blocks: after both rings, inside the channel */
	assert_true(shm_logprobs_size(h->shard_capacity) >=
		    h->shard_capacity * sizeof(struct shm_logprobs));
	assert_true((char *)(shm_result_logprobs(h, shm_channel_at(seg, 0),
						 h->ring_depth - 1, 0) +
			     h->shard_capacity) <=
		    (char *)shm_channel_at(seg, 0) + h->channel_size);
	assert_true((char *)shm_result_logprobs(h, shm_channel_at(seg, 0), 0, 0) >=
		    (char *)shm_result_at(h, shm_channel_at(seg, 0),
					  h->ring_depth - 1) + rs);
	assert_true(sizeof(struct shm_channel) + h->ring_depth * (ds + rs) <=
		    h->channel_size);
	assert_ptr_equal(shm_slot_at(seg, 0), (char *)seg->base + h->off_slots);
	/* shards split the slots evenly; every slot's buffer lies inside its
	 * shard's object, right after the slot before it in that shard */
	for (uint32_t slot = 0, shard = 0; slot < n_slots; slot++) {
		char *region;

		while (shard + 1 < n_shards && slot >= shm_shard_first_slot(h, shard + 1))
			shard++;
		assert_int_equal(shm_slot_shard(h, slot), shard);
		assert_int_equal(shm_shard_first_slot(h, shard),
				 (uint32_t)((uint64_t)n_slots * shard / n_shards));
		assert_true(slot - shm_shard_first_slot(h, shard) < h->shard_capacity);
		region = (char *)seg->shard_base[shard] + h->channel_size;
		assert_ptr_equal(shm_tokens_at(seg, slot),
				 region + (size_t)(slot - shm_shard_first_slot(h, shard)) *
					  max_context * sizeof(int32_t));
		assert_true((char *)(shm_tokens_at(seg, slot) + max_context) <=
			    region + h->shard_tokens_size);
	}
	for (uint32_t i = 0; i < n_shards; i++) {
		struct shm_channel *ch = shm_channel_at(seg, i);
		char *end = (char *)shm_result_at(h, ch, h->ring_depth - 1) + rs;

		assert_ptr_equal(ch, seg->shard_base[i]);
		assert_true((char *)shm_dispatch_at(h, ch, h->ring_depth - 1) + ds <=
			    (char *)shm_result_at(h, ch, 0));
		assert_true(end <= (char *)ch + h->channel_size);
		/* a fresh channel: nothing consumed, adopted or ready */
		assert_int_equal(atomic_load(&ch->results_consumed), 0);
		assert_int_equal(atomic_load(&ch->dispatch_adopted), 0);
		assert_int_equal(atomic_load(&ch->worker_ready_pid), 0);
		/* every byte of the shard object is the coordinator's to write */
		((volatile char *)ch)[0] ^= 0;
		((volatile char *)ch)[h->shard_size - 1] = 1;
		((volatile char *)ch)[h->shard_size - 1] = 0;
		/* shard objects do not overlap */
		for (uint32_t j = 0; j < i; j++)
			assert_true((char *)seg->shard_base[j] + h->shard_size <=
				    (char *)seg->shard_base[i] ||
				    (char *)seg->shard_base[i] + h->shard_size <=
				    (char *)seg->shard_base[j]);
	}
	/* every byte of the shared object is the coordinator's to write,
	 * sealed or not: its mapping came before the seals */
	((volatile char *)seg->base)[seg->size - 1] = 1;
	((volatile char *)seg->base)[seg->size - 1] = 0;
}

static void create_and_check(uint32_t n_slots, uint32_t n_shards,
			     uint32_t max_context)
{
	struct shm_segment seg;
	char err[256] = "";
	int fds = count_fds();

	seg_create(&seg, n_slots, n_shards, max_context);
	check_layout(&seg, n_slots, n_shards, max_context);
	/* unnamed: nothing to find, steal, delete or clean up */
	assert_int_equal(dev_shm_names(), 0);
	if (shm_header_validate(seg.hdr, seg.size, err, sizeof(err)) ||
	    shm_header_validate(seg.base, seg.size, err, sizeof(err))) {
		print_error("valid header rejected: %s\n", err);
		fail();
	}
	/* one descriptor kept: the one workers get */
	assert_int_equal(count_fds(), fds + 1);
	shm_segment_destroy(&seg);
	assert_int_equal(count_fds(), fds);
}

static void test_create_layout(void **state)
{
	static const uint32_t contexts[] = { 1, 2, 3, 17, 1024, 1025, 4096 };
	struct rng r = rng_for(1);

	(void)state;
	/* edges */
	create_and_check(1, 1, 1);
	create_and_check(300, 8, 4096);
	create_and_check(8, 8, 1);
	create_and_check(9, 8, 7);
	create_and_check(128, 1, 1);	/* slot table exactly a page */
	/* random shapes */
	for (unsigned i = 0; i < 60; i++) {
		uint32_t slots = 1 + rng_below(&r, 300);
		uint32_t max_shards = slots < 8 ? slots : 8;
		uint32_t shards = 1 + rng_below(&r, max_shards);
		uint32_t ctx = rng_below(&r, 2) ? contexts[rng_below(&r, 7)] :
			       1 + rng_below(&r, 5000);

		create_and_check(slots, shards, ctx);
	}
}

static void test_create_bad_params(void **state)
{
	static const struct shm_params bad[] = {
		{ 0, 1, 16, 100, 0, 0, 0, 0, 0 },		/* no slots */
		{ 4, 0, 16, 100, 0, 0, 0, 0, 0 },		/* no shards */
		{ 4, 5, 16, 100, 0, 0, 0, 0, 0 },		/* more shards than slots */
		{ 4, 1, 0, 100, 0, 0, 0, 0, 0 },			/* no context */
		{ (1u << 16) + 1, 1, 16, 100, 0, 0, 0, 0, 0 },	/* too many slots */
		{ 4, 1, (1u << 24) + 1, 100, 0, 0, 0, 0, 0 },	/* context too long */
		{ 4, 1, 16, 100, 16, 0, 0, 0, 0 },		/* blocks of nothing */
		{ 4, 1, 16, 100, (1u << 24) + 1, 8, 0, 0, 0 },	/* blocks too long */
		{ 4, 1, 16, 100, 0, 0, SHM_MAX_EMIT + 1, 0, 0 },	/* results too wide */
		{ 4, 1, 16, 100, 0, 0, 0, SHM_MAX_GRAMMAR + 1, 0 },	/* grammars too long */
		{ 4, 1, 16, 100, 0, 0, 0, 0, SHM_MAX_VOCAB_TABLE + 1 },	/* vocabulary too big */
	};
	int fds = count_fds();

	(void)state;
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct shm_segment seg;

		memset(&seg, 0x5a, sizeof(seg));
		assert_int_equal(shm_segment_create(&seg, &bad[i]), -EINVAL);
		assert_null(seg.base);
		assert_null(seg.shard_base);
		assert_int_equal(seg.ro_fd, -1);
		/* destroy of a failed create is harmless */
		shm_segment_destroy(&seg);
	}
	assert_int_equal(count_fds(), fds);
}

/* ------------------------------------------------------------------ */
/* Header validation                                                   */
/* ------------------------------------------------------------------ */

/* hdr must fail validation against size with -EPROTO and a reason. */
static void expect_invalid(const struct shm_header *hdr, size_t size,
			   const char *what)
{
	char err[256] = "";
	int rc = shm_header_validate(hdr, size, err, sizeof(err));

	if (rc != -EPROTO || !err[0]) {
		print_error("%s: validate returned %d, err \"%s\"; expected "
			    "-EPROTO and a reason\n", what, rc, err);
		fail();
	}
	/* a short or absent error buffer is fine too */
	assert_int_equal(shm_header_validate(hdr, size, err, 4), -EPROTO);
	assert_true(strlen(err) < 4);
	assert_int_equal(shm_header_validate(hdr, size, NULL, 0), -EPROTO);
}

static void test_header_validate(void **state)
{
	struct shm_segment seg;
	struct shm_header h;
	char err[256] = "";
	size_t size;

	(void)state;
	seg_create(&seg, 10, 3, 100);
	size = seg.size;
	assert_int_equal(shm_header_validate(seg.hdr, size, err, sizeof(err)), 0);

#define MUTATE(field, expr, what)					\
	do {								\
		h = *seg.hdr;						\
		h.field = (expr);					\
		expect_invalid(&h, size, what);				\
	} while (0)

	MUTATE(magic, SHM_MAGIC ^ 1, "wrong magic");
	MUTATE(magic, 0, "zero magic");
	MUTATE(layout_version, SHM_LAYOUT_VERSION + 1, "newer layout version");
	MUTATE(layout_version, SHM_LAYOUT_VERSION - 1, "an older layout");
	MUTATE(layout_version, 0, "layout version 0");
	MUTATE(header_size, sizeof(struct shm_header) + 64, "header size");
	MUTATE(header_size, 0, "header size 0");
	MUTATE(off_slots, seg.hdr->off_slots + SHM_PAGE, "off_slots");
	MUTATE(off_slots, UINT64_MAX - SHM_PAGE, "off_slots huge");
	MUTATE(channel_size, seg.hdr->channel_size * 2, "channel_size");
	MUTATE(channel_size, seg.hdr->channel_size + 4, "channel_size unaligned");
	MUTATE(shard_tokens_size, seg.hdr->shard_tokens_size + SHM_PAGE,
	       "shard_tokens_size");
	MUTATE(shard_size, seg.hdr->shard_size - SHM_PAGE, "shard_size");
	MUTATE(shard_capacity, seg.hdr->shard_capacity + 1, "shard_capacity");
	MUTATE(ring_depth, seg.hdr->ring_depth * 2, "ring_depth");
	MUTATE(ring_depth, 0, "ring_depth 0");
	MUTATE(n_slots, seg.hdr->n_slots + 200, "n_slots");
	MUTATE(n_slots, 0, "n_slots 0");
	MUTATE(n_shards, seg.hdr->n_slots + 1, "n_shards above n_slots");
	MUTATE(n_shards, 0, "n_shards 0");
	MUTATE(max_context, seg.hdr->max_context + 1000, "max_context");
	MUTATE(max_context, 0, "max_context 0");
	MUTATE(segment_size, seg.hdr->segment_size + SHM_PAGE, "segment_size");
#undef MUTATE

	/* a consistent header whose size is not the object's */
	h = *seg.hdr;
	expect_invalid(&h, size + SHM_PAGE, "object larger than segment_size");
	expect_invalid(&h, size - 1, "object one byte short");
	expect_invalid(&h, 100, "object smaller than a page");
	expect_invalid(&h, 0, "empty object");

	/* fields outside the layout do not matter to validation */
	h = *seg.hdr;
	h.coordinator_pid = 1;
	h.vocab = 7;
	assert_int_equal(shm_header_validate(&h, size, err, sizeof(err)), 0);
	shm_segment_destroy(&seg);
}

/* ------------------------------------------------------------------ */
/* Attach                                                              */
/* ------------------------------------------------------------------ */

static void expect_attach_fails(int shared_fd, int shard_fd, uint32_t shard,
				int want, const char *what)
{
	struct shm_segment w;
	char err[256] = "";
	int rc = shm_segment_attach(&w, shared_fd, shard_fd, shard, err, sizeof(err));

	if (rc != want || !err[0]) {
		print_error("%s: attach returned %d, err \"%s\"; expected %d "
			    "and a reason\n", what, rc, err, want);
		if (!rc)
			shm_segment_detach(&w);
		fail();
	}
	assert_null(w.base);
	assert_null(w.shard_base);
	assert_null(w.tokens_ro);
}

/* A memfd of size bytes (zeros), or -1 on failure. */
static int plain_object(off_t size)
{
	int fd = memfd_create("utest", MFD_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, size), 0);
	return fd;
}

static void test_attach(void **state)
{
	struct shm_segment seg, w;
	int shard_fd, zeros, small, wrong_size;

	(void)state;
	seg_create(&seg, 12, 3, 64);
	for (uint32_t shard = 0; shard < 3; shard++) {
		uint32_t last = shm_shard_first_slot(seg.hdr, shard) +
				seg.hdr->shard_capacity - 1;

		worker_attach(&seg, &w, shard);
		assert_false(w.owner);
		assert_int_equal(w.size, seg.size);
		assert_ptr_equal(w.hdr, &w.layout);
		assert_memory_equal(w.hdr, seg.hdr, sizeof(*w.hdr));
		assert_int_equal(w.ro_fd, -1);
		/* only its own shard is mapped */
		for (uint32_t i = 0; i < 3; i++)
			assert_true((w.shard_base[i] != NULL) == (i == shard));
		/* the coordinator's writes show through the worker's views */
		shm_slot_at(&seg, 11)->n_tokens = 40 + shard;
		assert_int_equal(shm_slot_at(&w, 11)->n_tokens, 40 + shard);
		atomic_store(shm_coordinator_sleeping(&seg), SHM_COORD_DOZING);
		assert_int_equal(atomic_load(shm_coordinator_sleeping(&w)),
				 SHM_COORD_DOZING);
		atomic_store(shm_coordinator_sleeping(&seg), SHM_COORD_AWAKE);
		shm_tokens_at(&seg, last)[63] = -7;
		assert_int_equal(shm_tokens_at(&w, last)[63], -7);
		assert_int_equal(w.tokens_ro[(size_t)seg.hdr->shard_capacity * 64 - 1], -7);
		/* and the worker's writes to its shard the other way */
		atomic_store(&shm_channel_at(&w, shard)->worker_ready_pid, 1000 + shard);
		assert_int_equal(atomic_load(&shm_channel_at(&seg, shard)->worker_ready_pid),
				 1000 + shard);
		shm_tokens_at(&w, last)[5] = 1234;
		assert_int_equal(shm_tokens_at(&seg, last)[5], 1234);
		assert_int_equal(w.tokens_ro[(size_t)(seg.hdr->shard_capacity - 1) * 64 + 5],
				 1234);
		shm_segment_detach(&w);
		assert_null(w.base);
		shm_segment_detach(&w);	/* twice: harmless */
	}
	assert_int_equal(shm_shard_renew(&seg, 1, 0, 0, &shard_fd), 0);
	expect_attach_fails(seg.ro_fd, shard_fd, 3, -EINVAL, "shard == n_shards");
	expect_attach_fails(seg.ro_fd, shard_fd, UINT32_MAX, -EINVAL, "shard UINT32_MAX");
	expect_attach_fails(-1, shard_fd, 0, -EPROTO, "no shared descriptor");
	expect_attach_fails(seg.ro_fd, -1, 1, -EPROTO, "no shard descriptor");
	expect_attach_fails(shard_fd, seg.ro_fd, 1, -EPROTO, "descriptors swapped");

	/* a corrupted header in the shared object (the coordinator can still
	 * write it through its own mapping) */
	((struct shm_header *)seg.base)->magic ^= 0x100;
	expect_attach_fails(seg.ro_fd, shard_fd, 0, -EPROTO, "magic corrupted");
	((struct shm_header *)seg.base)->magic ^= 0x100;
	((struct shm_header *)seg.base)->layout_version++;
	expect_attach_fails(seg.ro_fd, shard_fd, 0, -EPROTO, "layout version bumped");
	((struct shm_header *)seg.base)->layout_version--;
	((struct shm_header *)seg.base)->shard_size += SHM_PAGE;
	expect_attach_fails(seg.ro_fd, shard_fd, 0, -EPROTO, "shard size changed");
	((struct shm_header *)seg.base)->shard_size -= SHM_PAGE;

	/* objects that are not (whole) segments */
	small = plain_object(100);
	expect_attach_fails(small, shard_fd, 0, -EPROTO, "object smaller than a header");
	zeros = plain_object(2 * SHM_PAGE);
	expect_attach_fails(zeros, shard_fd, 0, -EPROTO, "object of zeros");
	wrong_size = plain_object((off_t)seg.hdr->shard_size + SHM_PAGE);
	expect_attach_fails(seg.ro_fd, wrong_size, 1, -EPROTO, "shard object too big");
	close(small);
	close(zeros);
	close(wrong_size);

	/* still fine after all that */
	assert_int_equal(shm_segment_attach(&w, seg.ro_fd, shard_fd, 1, NULL, 0), 0);
	shm_segment_detach(&w);
	close(shard_fd);
	shm_segment_destroy(&seg);
}

/* ------------------------------------------------------------------ */
/* What a worker can reach                                             */
/* ------------------------------------------------------------------ */

/*
 * Through the worker's mappings: the header, the slot table and the
 * read-only token view fault on a write and cannot be mprotect'ed
 * writable; the own channel and token buffers (writable view) can be
 * written.
 */
static void test_worker_mappings(void **state)
{
	struct shm_segment seg, w;
	const struct shm_header *h;
	const uint32_t shard = 1;
	char *b;

	(void)state;
	seg_create(&seg, 9, 3, 2000);
	h = seg.hdr;
	worker_attach(&seg, &w, shard);
	b = w.base;

	expect_segv(b, "the header's magic");
	expect_segv(b + offsetof(struct shm_header, off_slots), "the header's offsets");
	expect_segv(shm_coordinator_sleeping(&w), "coordinator_sleeping");
	expect_segv(b + h->off_slots, "the slot table");
	expect_segv(&shm_slot_at(&w, 8)->n_tokens, "the last slot");
	expect_segv(w.tokens_ro, "the first prefix, read-only view");
	expect_segv((const char *)w.tokens_ro + h->shard_tokens_size - 1,
		    "the last prefix byte, read-only view");
	expect_no_mprotect(b, "the header");
	expect_no_mprotect(b + h->off_slots, "the slot table");

	/* the own channel, first byte to last, rings included */
	expect_writable(shm_channel_at(&w, shard), "the own channel's first byte");
	expect_writable(&shm_result_at(w.hdr, shm_channel_at(&w, shard),
				       h->ring_depth - 1)->rows[0].token,
			"the own result ring");
	expect_writable((char *)shm_channel_at(&w, shard) + h->channel_size - 1,
			"the own channel's last byte");
	/* and the own shard's token buffers (slots 3..5), whole pages */
	expect_writable(shm_tokens_at(&w, 3), "the own shard's first token");
	expect_writable((char *)(shm_tokens_at(&w, 5) + 1999) + 3,
			"the own shard's last token");
	assert_int_equal(*((uint8_t *)shm_tokens_at(&seg, 3)), 0xa7);
	assert_int_equal(*((uint8_t *)shm_channel_at(&seg, shard)), 0xa7);
	/* and none of the refused ones did anything */
	assert_int_equal(((struct shm_header *)seg.base)->magic, SHM_MAGIC);
	assert_memory_equal(seg.base, seg.hdr, offsetof(struct shm_header,
							 coordinator_sleeping));
	assert_int_equal(*((uint8_t *)seg.base + h->off_slots), 0);
	assert_int_equal(shm_slot_at(&seg, 8)->n_tokens, 0);

	/* the worker process itself, not a child: mprotect refuses too */
	expect_no_mprotect(w.base, "the header (worker)");
	expect_no_mprotect(w.tokens_ro, "the read-only token view");
	shm_segment_detach(&w);
	shm_segment_destroy(&seg);
}

/*
 * Through the descriptors: the one of the shared object is read-only, and
 * a worker that reopens it O_RDWR through /proc still gets no way to
 * write it, resize it or seal it; a shard object cannot be resized or
 * sealed by its worker either.
 */
static void test_worker_descriptors(void **state)
{
	struct shm_segment seg;
	char path[64], byte = 1;
	int shard_fd, rw;
	void *p;

	(void)state;
	seg_create(&seg, 8, 2, 128);
	assert_int_equal(fcntl(seg.ro_fd, F_GETFL) & O_ACCMODE, O_RDONLY);
	/* through the read-only descriptor itself */
	assert_ptr_equal(mmap(NULL, seg.size, PROT_READ | PROT_WRITE, MAP_SHARED,
			      seg.ro_fd, 0), MAP_FAILED);
	assert_int_equal(errno, EACCES);
	assert_int_equal(pwrite(seg.ro_fd, &byte, 1, 0), -1);
	assert_int_equal(errno, EBADF);
	assert_int_equal(ftruncate(seg.ro_fd, 0), -1);

	/* reopened read-write through /proc, as a hostile worker would */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", seg.ro_fd);
	rw = open(path, O_RDWR | O_CLOEXEC);
	if (rw >= 0) {
		p = mmap(NULL, seg.size, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0);
		if (p != MAP_FAILED) {
			print_error("a writable mapping of the shared object "
				    "through a reopened descriptor\n");
			fail();
		}
		assert_int_equal(errno, EPERM);
		/* a read-only mapping of it cannot be made writable */
		p = mmap(NULL, seg.size, PROT_READ, MAP_SHARED, rw, 0);
		assert_true(p != MAP_FAILED);
		expect_no_mprotect(p, "a read-only mapping of the reopened object");
		munmap(p, seg.size);
		assert_int_equal(pwrite(rw, &byte, 1, 0), -1);
		assert_int_equal(errno, EPERM);
		assert_int_equal(ftruncate(rw, 0), -1);
		assert_int_equal(errno, EPERM);
		assert_int_equal(ftruncate(rw, (off_t)seg.size * 2), -1);
		assert_int_equal(errno, EPERM);
		assert_int_equal(fallocate(rw, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					   0, SHM_PAGE), -1);
		assert_int_equal(errno, EPERM);
		assert_int_equal(fcntl(rw, F_ADD_SEALS, F_SEAL_WRITE), -1);
		assert_int_equal(errno, EPERM);
		close(rw);
	}
	assert_int_equal(fcntl(seg.ro_fd, F_GET_SEALS),
			 F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	assert_int_equal(((struct shm_header *)seg.base)->magic, SHM_MAGIC);

	/* a shard object: writable by its worker, but of a fixed size and
	 * with the seals it has */
	assert_int_equal(shm_shard_renew(&seg, 1, 0, 0, &shard_fd), 0);
	assert_int_equal(fcntl(shard_fd, F_GETFL) & O_ACCMODE, O_RDWR);
	assert_true(fcntl(shard_fd, F_GETFD) & FD_CLOEXEC);
	assert_int_equal(ftruncate(shard_fd, 0), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(ftruncate(shard_fd, (off_t)seg.hdr->shard_size + SHM_PAGE), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(fcntl(shard_fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE), -1);
	assert_int_equal(errno, EPERM);
	/* two shards never share an object */
	{
		struct stat a, b;
		int other;

		assert_int_equal(shm_shard_renew(&seg, 0, 0, 0, &other), 0);
		assert_int_equal(fstat(shard_fd, &a), 0);
		assert_int_equal(fstat(other, &b), 0);
		assert_true(a.st_ino != b.st_ino);
		close(other);
	}
	close(shard_fd);
	shm_segment_destroy(&seg);
}

/*
 * Renewal: what an old worker (or anything it left behind) still maps is
 * no longer the shard's.  The coordinator keeps its addresses; the new
 * object starts with an empty channel at the positions given.
 */
static void test_renew(void **state)
{
	struct shm_segment seg, old;
	int32_t *buf;
	int fd;

	(void)state;
	seg_create(&seg, 6, 2, 32);
	worker_attach(&seg, &old, 1);
	buf = shm_tokens_at(&seg, 5);
	buf[3] = 77;
	assert_int_equal(shm_tokens_at(&old, 5)[3], 77);
	shm_entry_publish(&shm_result_at(seg.hdr, shm_channel_at(&seg, 1), 10)->seq, 10);

	assert_int_equal(shm_shard_renew(&seg, 1, 1000, 2000, &fd), 0);
	/* same addresses, fresh contents */
	assert_ptr_equal(shm_tokens_at(&seg, 5), buf);
	assert_int_equal(buf[3], 0);
	assert_false(shm_entry_ready(&shm_result_at(seg.hdr, shm_channel_at(&seg, 1),
						    10)->seq, 10));
	assert_int_equal(shm_channel_at(&seg, 1)->start_dispatch_pos, 1000);
	assert_int_equal(shm_channel_at(&seg, 1)->start_result_pos, 2000);
	assert_int_equal(atomic_load(&shm_channel_at(&seg, 1)->results_consumed), 2000);
	assert_int_equal(atomic_load(&shm_channel_at(&seg, 1)->dispatch_adopted), 1000);
	/* the old worker's writes go nowhere we look */
	shm_tokens_at(&old, 5)[3] = 99;
	atomic_store(&shm_channel_at(&old, 1)->worker_ready_pid, 4242);
	shm_entry_publish(&shm_result_at(old.hdr, shm_channel_at(&old, 1), 2000)->seq, 2000);
	assert_int_equal(buf[3], 0);
	assert_int_equal(atomic_load(&shm_channel_at(&seg, 1)->worker_ready_pid), 0);
	assert_false(shm_entry_ready(&shm_result_at(seg.hdr, shm_channel_at(&seg, 1),
						    2000)->seq, 2000));
	/* a worker only may not renew */
	assert_int_equal(shm_shard_renew(&old, 1, 0, 0, &fd), -EINVAL);
	assert_int_equal(shm_shard_renew(&seg, 2, 0, 0, &fd), -EINVAL);
	shm_segment_detach(&old);
	close(fd);
	shm_segment_destroy(&seg);
}

/* ------------------------------------------------------------------ */
/* Waking                                                              */
/* ------------------------------------------------------------------ */

/* Whatever a worker leaves in its channel, the coordinator's wake works
 * and returns (no glibc semaphore to abort or block in). */
static void test_wake_scribbled(void **state)
{
	static const uint32_t values[] = { 0, 1, 2, 0x7fffffff, 0x80000000,
					   0xfffffffe, 0xffffffff };
	struct shm_segment seg, w;
	struct shm_channel *ch;
	struct rng r = rng_for(9);

	(void)state;
	seg_create(&seg, 4, 2, 16);
	worker_attach(&seg, &w, 0);
	ch = shm_channel_at(&seg, 0);
	/* the worker scribbles its whole channel head, then each value */
	memset(shm_channel_at(&w, 0), 0xff, sizeof(struct shm_channel));
	shm_wake_worker(ch);
	assert_int_equal(atomic_load(&ch->wake_seq), 0);	/* 0xffffffff + 1 */
	for (unsigned i = 0; i < sizeof(values) / sizeof(values[0]) + 100; i++) {
		uint32_t v = i < sizeof(values) / sizeof(values[0]) ? values[i] :
			     (uint32_t)rng_next(&r);

		atomic_store(&shm_channel_at(&w, 0)->wake_seq, v);
		shm_wake_worker(ch);
		assert_int_equal(atomic_load(&ch->wake_seq), v + 1);
	}
	/* a sleep on a value that is not there returns at once */
	{
		struct timespec t0, t1;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		shm_worker_sleep(shm_channel_at(&w, 0),
				 atomic_load(&ch->wake_seq) + 1, 5000000000ull);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		assert_true(t1.tv_sec - t0.tv_sec < 2);
	}
	shm_segment_detach(&w);
	shm_segment_destroy(&seg);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * The handshake: the worker (a forked child) waits for each of 300
 * dispatches (positions published in the ring) the way worker_wait()
 * does; the coordinator publishes them at random moments and wakes the
 * worker only when it says it sleeps.  A lost wake-up shows as a sleep
 * that lasts the whole timeout.
 */
static void test_wake_handshake(void **state)
{
	const uint64_t timeout_ns = 2000000000ull;
	const unsigned rounds = 300;
	struct shm_segment seg, w;
	struct shm_channel *ch, *wch;
	struct rng r = rng_for(10);
	pid_t pid;
	int status;

	(void)state;
	seg_create(&seg, 4, 1, 16);
	worker_attach(&seg, &w, 0);
	ch = shm_channel_at(&seg, 0);
	wch = shm_channel_at(&w, 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		for (uint64_t pos = 0; pos < rounds; pos++) {
			struct shm_dispatch *d = shm_dispatch_at(w.hdr, wch, pos);

			while (!shm_entry_ready(&d->seq, pos)) {
				uint32_t seen = atomic_load_explicit(&wch->wake_seq,
								     memory_order_acquire);
				uint64_t t0;

				atomic_store(&wch->worker_sleeping, 1);
				atomic_thread_fence(memory_order_seq_cst);
				if (!shm_entry_ready(&d->seq, pos)) {
					t0 = now_ns();
					shm_worker_sleep(wch, seen, timeout_ns);
					if (now_ns() - t0 >= timeout_ns - 100000000ull &&
					    !shm_entry_ready(&d->seq, pos))
						continue;	/* a real timeout: fine */
					if (now_ns() - t0 >= timeout_ns - 100000000ull)
						_exit(3);	/* slept through a wake */
				}
				atomic_store(&wch->worker_sleeping, 0);
			}
			atomic_store(&wch->dispatch_adopted, pos + 1);
		}
		_exit(0);
	}
	for (uint64_t pos = 0; pos < rounds; pos++) {
		struct shm_dispatch *d = shm_dispatch_at(seg.hdr, ch, pos);
		uint64_t wait_until = now_ns() + 10000000000ull;

		/* sometimes at once, sometimes once the worker sleeps */
		if (rng_below(&r, 2))
			usleep(rng_below(&r, 300));
		d->dispatch_id = pos + 1;
		shm_entry_publish(&d->seq, pos);
		atomic_thread_fence(memory_order_seq_cst);
		if (atomic_load_explicit(&ch->worker_sleeping, memory_order_relaxed))
			shm_wake_worker(ch);
		while (atomic_load(&ch->dispatch_adopted) < pos + 1) {
			assert_true(now_ns() < wait_until);
			sched_yield();
		}
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		print_error("worker side: status 0x%x (exit 3: it slept through "
			    "a wake-up) (SEED=%llu)\n", status, test_seed);
		fail();
	}
	shm_segment_detach(&w);
	shm_segment_destroy(&seg);
}

/* ------------------------------------------------------------------ */
/* Faults                                                              */
/* ------------------------------------------------------------------ */

static void expect_fault(const char *faults, int want)
{
	struct shm_params p = { 16, 4, 128, 100, 0, 0, 0, 0, 0 };
	struct shm_segment seg;
	int fds = count_fds();
	int rc;

	assert_int_equal(setenv("DYNBATCH_FAULT", faults, 1), 0);
	rc = shm_segment_create(&seg, &p);
	unsetenv("DYNBATCH_FAULT");
	if (rc != want) {
		print_error("DYNBATCH_FAULT=%s: create returned %d, want %d\n",
			    faults, rc, want);
		if (!rc)
			shm_segment_destroy(&seg);
		fail();
	}
	if (!rc) {
		shm_segment_destroy(&seg);
		assert_int_equal(count_fds(), fds);
		return;
	}
	assert_null(seg.base);
	assert_null(seg.hdr);
	assert_null(seg.shard_base);
	assert_int_equal(seg.ro_fd, -1);
	assert_int_equal(count_fds(), fds);
	shm_segment_destroy(&seg);
}

static void test_fault_injection(void **state)
{
	(void)state;
	expect_fault("memfd", -EMFILE);
	expect_fault("mmap", -ENOMEM);
	expect_fault("fork,mmap", -ENOMEM);
	expect_fault("mmap,memfd", -EMFILE);
	expect_fault("io_uring_queue_init,memfd,", -EMFILE);
	/* only whole names count */
	expect_fault("memf", 0);
	expect_fault("memfd_x,mmapx,fork", 0);
	expect_fault("", 0);
}

/* ------------------------------------------------------------------ */
/* Rings                                                               */
/* ------------------------------------------------------------------ */

static uint64_t dispatch_id_of(uint64_t pos)
{
	return pos * 2654435761ull + 1;
}

static void write_dispatch(struct shm_dispatch *d, uint32_t cap, uint64_t pos)
{
	d->dispatch_id = dispatch_id_of(pos);
	d->n_rows = (uint32_t)(pos % (cap + 1));
	for (uint32_t i = 0; i < cap; i++)	/* every row: overlap shows */
		d->rows[i] = (struct shm_dispatch_row){
			(uint32_t)(pos + i), (uint32_t)(pos ^ i) + 1,
			(uint32_t)(pos * 3 + i), 0, 0, 0, 0, 0, 0 };
}

static void check_dispatch(const struct shm_dispatch *d, uint32_t cap,
			   uint64_t pos)
{
	if (d->dispatch_id != dispatch_id_of(pos) ||
	    d->n_rows != pos % (cap + 1)) {
		print_error("dispatch at %llu: id %llu n_rows %u\n",
			    (unsigned long long)pos,
			    (unsigned long long)d->dispatch_id, d->n_rows);
		fail();
	}
	for (uint32_t i = 0; i < cap; i++) {
		assert_int_equal(d->rows[i].slot, (uint32_t)(pos + i));
		assert_int_equal(d->rows[i].generation, (uint32_t)(pos ^ i) + 1);
		assert_int_equal(d->rows[i].n_tokens, (uint32_t)(pos * 3 + i));
	}
}

static void write_result(struct shm_result *res, uint32_t cap, uint64_t pos)
{
	res->dispatch_id = dispatch_id_of(pos);
	res->n_rows = (uint32_t)((pos + 1) % (cap + 1));
	res->status = pos % 7 == 0 ? -EIO : 0;
	for (uint32_t i = 0; i < cap; i++)
		res->rows[i] = (struct shm_result_row){
			(uint32_t)(pos + i), (uint32_t)(pos ^ i) + 1,
			(int32_t)(pos * 31 + i) - 5000, 0, 0 };
}

static void check_result(const struct shm_result *res, uint32_t cap,
			 uint64_t pos)
{
	if (res->dispatch_id != dispatch_id_of(pos) ||
	    res->n_rows != (pos + 1) % (cap + 1) ||
	    res->status != (pos % 7 == 0 ? -EIO : 0)) {
		print_error("result at %llu: id %llu n_rows %u status %d\n",
			    (unsigned long long)pos,
			    (unsigned long long)res->dispatch_id, res->n_rows,
			    res->status);
		fail();
	}
	for (uint32_t i = 0; i < cap; i++) {
		assert_int_equal(res->rows[i].slot, (uint32_t)(pos + i));
		assert_int_equal(res->rows[i].generation, (uint32_t)(pos ^ i) + 1);
		assert_int_equal(res->rows[i].token, (int32_t)(pos * 31 + i) - 5000);
	}
}

struct ring_view {
	const struct shm_header *hdr;
	struct shm_channel *ch;
};

static bool dispatch_ready(struct ring_view v, uint64_t pos)
{
	return shm_entry_ready(&shm_dispatch_at(v.hdr, v.ch, pos)->seq, pos);
}

static bool result_ready(struct ring_view v, uint64_t pos)
{
	return shm_entry_ready(&shm_result_at(v.hdr, v.ch, pos)->seq, pos);
}

/*
 * Before position pos is published: it is not ready, nor is any later
 * position up to the next lap at the same index; the depth - 1 positions
 * before it (from from on) are still ready with their payload.
 */
static void check_ring_before(struct ring_view rd_disp, struct ring_view rd_res,
			      uint64_t from, uint64_t pos)
{
	uint32_t depth = rd_disp.hdr->ring_depth;
	uint32_t cap = rd_disp.hdr->shard_capacity;

	for (uint64_t q = pos; q <= pos + depth; q++) {
		if (dispatch_ready(rd_disp, q) || result_ready(rd_res, q)) {
			print_error("position %llu looks ready before %llu is "
				    "published (dispatch %d result %d)\n",
				    (unsigned long long)q,
				    (unsigned long long)pos,
				    dispatch_ready(rd_disp, q),
				    result_ready(rd_res, q));
			fail();
		}
	}
	for (uint64_t q = pos >= from + depth - 1 ? pos - (depth - 1) : from;
	     q < pos; q++) {
		assert_true(dispatch_ready(rd_disp, q));
		assert_true(result_ready(rd_res, q));
		check_dispatch(shm_dispatch_at(rd_disp.hdr, rd_disp.ch, q), cap, q);
		check_result(shm_result_at(rd_res.hdr, rd_res.ch, q), cap, q);
	}
}

/* Publish positions [from, to) on both rings of a channel. */
static void run_ring(struct ring_view coord, struct ring_view worker,
		     uint64_t from, uint64_t to)
{
	uint32_t cap = coord.hdr->shard_capacity;

	for (uint64_t pos = from; pos < to; pos++) {
		struct shm_dispatch *dw = shm_dispatch_at(coord.hdr, coord.ch, pos);
		struct shm_result *rw = shm_result_at(worker.hdr, worker.ch, pos);

		/* the same entry in both views */
		assert_int_equal((char *)dw - (char *)coord.ch,
				 (char *)shm_dispatch_at(worker.hdr, worker.ch, pos) -
				 (char *)worker.ch);
		check_ring_before(worker, coord, from, pos);

		/* coordinator -> worker: payload first, not yet ready */
		write_dispatch(dw, cap, pos);
		assert_false(dispatch_ready(worker, pos));
		shm_entry_publish(&dw->seq, pos);
		assert_true(dispatch_ready(worker, pos));
		assert_false(dispatch_ready(worker, pos + coord.hdr->ring_depth));
		check_dispatch(shm_dispatch_at(worker.hdr, worker.ch, pos), cap, pos);

		/* worker -> coordinator */
		write_result(rw, cap, pos);
		assert_false(result_ready(coord, pos));
		shm_entry_publish(&rw->seq, pos);
		assert_true(result_ready(coord, pos));
		assert_false(result_ready(coord, pos + coord.hdr->ring_depth));
		check_result(shm_result_at(coord.hdr, coord.ch, pos), cap, pos);
	}
}

static void test_ring_wraparound(void **state)
{
	struct shm_segment seg, w;
	struct ring_view coord, worker, other;
	char err[256] = "";
	uint32_t depth;
	int fd;

	(void)state;
	seg_create(&seg, 7, 2, 16);		/* shard capacity 4 */
	worker_attach(&seg, &w, 1);
	depth = seg.hdr->ring_depth;
	coord = (struct ring_view){ seg.hdr, shm_channel_at(&seg, 1) };
	worker = (struct ring_view){ w.hdr, shm_channel_at(&w, 1) };
	other = (struct ring_view){ seg.hdr, shm_channel_at(&seg, 0) };

	/* a fresh channel has nothing ready */
	for (uint64_t q = 0; q < 2 * depth; q++)
		assert_false(dispatch_ready(worker, q) || result_ready(coord, q));
	/* channel 0 holds an entry of its own all along */
	write_dispatch(shm_dispatch_at(other.hdr, other.ch, 0), 4, 0);
	shm_entry_publish(&shm_dispatch_at(other.hdr, other.ch, 0)->seq, 0);

	run_ring(coord, worker, 0, 1001);

	/* channel 0 untouched by channel 1's traffic */
	assert_true(dispatch_ready(other, 0));
	check_dispatch(shm_dispatch_at(other.hdr, other.ch, 0), 4, 0);
	for (uint64_t q = 1; q <= depth; q++)
		assert_false(dispatch_ready(other, q) || result_ready(other, q - 1));

	/* a new worker: a renewed object forgets every entry of both rings */
	atomic_store(&worker.ch->worker_sleeping, 1);
	atomic_store(&worker.ch->worker_ready_pid, 4242);
	shm_segment_detach(&w);
	assert_int_equal(shm_shard_renew(&seg, 1, 1001, 995, &fd), 0);
	assert_int_equal(shm_segment_attach(&w, seg.ro_fd, fd, 1, err, sizeof(err)), 0);
	close(fd);
	worker = (struct ring_view){ w.hdr, shm_channel_at(&w, 1) };
	assert_ptr_equal(coord.ch, shm_channel_at(&seg, 1));
	for (uint64_t q = 1001 - depth; q < 1001 + 2 * depth; q++) {
		if (dispatch_ready(worker, q) || result_ready(coord, q)) {
			print_error("position %llu ready after renewal\n",
				    (unsigned long long)q);
			fail();
		}
	}
	assert_int_equal(worker.ch->start_dispatch_pos, 1001);
	assert_int_equal(worker.ch->start_result_pos, 995);
	assert_int_equal(atomic_load(&coord.ch->worker_sleeping), 0);
	assert_int_equal(atomic_load(&coord.ch->worker_ready_pid), 0);
	/* channel 0 untouched by channel 1's renewal */
	assert_true(dispatch_ready(other, 0));

	/* the rings go on after a renewal */
	run_ring(coord, worker, 1001, 1001 + 3 * depth + 1);

	shm_segment_detach(&w);
	shm_segment_destroy(&seg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_create_layout, teardown),
		cmocka_unit_test_teardown(test_create_bad_params, teardown),
		cmocka_unit_test_teardown(test_header_validate, teardown),
		cmocka_unit_test_teardown(test_attach, teardown),
		cmocka_unit_test_teardown(test_worker_mappings, teardown),
		cmocka_unit_test_teardown(test_worker_descriptors, teardown),
		cmocka_unit_test_teardown(test_renew, teardown),
		cmocka_unit_test_teardown(test_wake_scribbled, teardown),
		cmocka_unit_test_teardown(test_wake_handshake, teardown),
		cmocka_unit_test_teardown(test_fault_injection, teardown),
		cmocka_unit_test_teardown(test_ring_wraparound, teardown),
	};

	test_seed_init("shm_segment");
	return cmocka_run_group_tests_name("shm_segment", tests, NULL, NULL);
}
