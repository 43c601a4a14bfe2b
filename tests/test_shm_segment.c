/*
 * test_shm_segment.c - the shared segment: layout, header validation,
 * attach and its protections, lifetime, fault injection, the rings of a
 * channel and the removal of segments left by dead coordinators.
 *
 * What is checked, and why:
 * - create: for random shapes (slots 1..300, shards 1..8, any context
 *   length and queue capacity) every region starts on a page, the regions
 *   follow one another without overlap and end inside segment_size, the
 *   file is 0600 and exactly that size, every channel's semaphore works;
 *   bad parameters fail with -EINVAL and leave nothing behind.
 * - shm_header_validate: the real header passes; a wrong magic, layout
 *   version or header size, any inconsistent offset or count, and a size
 *   that does not match the mapping each fail with -EPROTO and a reason.
 * - attach: works for every shard from this very process (the coordinator
 *   pid is only checked by the worker loop), refuses a corrupted magic,
 *   version or size with -EPROTO and a shard out of range; through the
 *   attached mapping only the shard's own channel is writable: a forked
 *   child that writes anywhere else dies of SIGSEGV.
 * - destroy unlinks and is idempotent; with DYNBATCH_FAULT=shm_open or
 *   mmap, create fails and leaves no /dev/shm/dynbatch-<pid>-* name.
 * - rings: entries for positions 0..1000 written through one mapping and
 *   read through the other become ready only once published, never for
 *   the next lap at the same index (a stale seq must not look ready), keep
 *   their payload while the ring goes on, and shm_channel_reset() forgets
 *   them all.
 * - shm_segment_reap_stale removes the segments of dead pids only.
 *
 * The random test prints its seed; SEED=<n> replays a run.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

#include "shm_segment.h"
#include "test_rng.h"

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

static int count_our_names(void);
static void unlink_our_names(void);

/*
 * Names a test made for other pids, removed by the teardown when a test
 * fails half-way, together with every name of our own pid, so that a
 * failed run leaves nothing in /dev/shm and no fault armed for the next
 * test.  (The mappings of a failed test are simply left mapped.)
 */
static char extra_names[4][SHM_NAME_MAX];

static int teardown(void **state)
{
	(void)state;
	unsetenv("DYNBATCH_FAULT");
	unlink_our_names();
	for (unsigned i = 0; i < 4; i++) {
		if (extra_names[i][0])
			shm_unlink(extra_names[i]);
		extra_names[i][0] = '\0';
	}
	return 0;
}

static void seg_create(struct shm_segment *seg, uint32_t n_slots,
		       uint32_t n_shards, uint32_t max_context,
		       uint32_t queue_capacity)
{
	struct shm_params p = {
		.n_slots = n_slots, .n_shards = n_shards,
		.max_context = max_context, .queue_capacity = queue_capacity,
		.vocab = 32000,
	};
	int rc = shm_segment_create(seg, &p);

	if (rc) {
		print_error("create slots %u shards %u ctx %u queue %u: %d\n",
			    n_slots, n_shards, max_context, queue_capacity, rc);
		fail();
	}
}

/* Make a plain file "/dynbatch-<pid>-<tag>" of size bytes; returns slot. */
static const char *extra_create(int pid, const char *tag, off_t size)
{
	for (unsigned i = 0; i < 4; i++) {
		int fd;

		if (extra_names[i][0])
			continue;
		snprintf(extra_names[i], SHM_NAME_MAX, "/dynbatch-%d-%s", pid, tag);
		fd = shm_open(extra_names[i], O_RDWR | O_CREAT | O_EXCL, 0600);
		assert_true(fd >= 0);
		assert_int_equal(ftruncate(fd, size), 0);
		close(fd);
		return extra_names[i];
	}
	fail_msg("too many extra names");
	return NULL;
}

static void extra_forget(const char *name)
{
	for (unsigned i = 0; i < 4; i++)
		if (extra_names[i] == name)
			extra_names[i][0] = '\0';
}

/* True when the shm name exists. */
static bool shm_exists(const char *name)
{
	int fd = shm_open(name, O_RDONLY, 0);

	if (fd < 0) {
		assert_int_equal(errno, ENOENT);
		return false;
	}
	close(fd);
	return true;
}

/* Count (and with unlink, remove) the /dev/shm/dynbatch-<our pid>-* names. */
static int our_names(bool unlink)
{
	char prefix[32], path[SHM_NAME_MAX + 8];
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	snprintf(prefix, sizeof(prefix), "dynbatch-%d-", (int)getpid());
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, prefix, strlen(prefix)))
			continue;
		n++;
		snprintf(path, sizeof(path), "/%.*s", SHM_NAME_MAX, e->d_name);
		if (unlink)
			shm_unlink(path);
	}
	closedir(d);
	return n;
}

static int count_our_names(void)
{
	return our_names(false);
}

static void unlink_our_names(void)
{
	our_names(true);
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

static void expect_segv(void *addr, const char *what)
{
	int status = child_write(addr, 0x5a);

	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGSEGV) {
		print_error("write to %s through the attached mapping: status "
			    "0x%x, expected death by SIGSEGV\n", what, status);
		fail();
	}
}

static void expect_writable(void *addr, const char *what)
{
	int status = child_write(addr, 0xa7);

	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		print_error("write to %s through the attached mapping: status "
			    "0x%x, expected success\n", what, status);
		fail();
	}
}

/* ------------------------------------------------------------------ */
/* Layout                                                              */
/* ------------------------------------------------------------------ */

/* Region [off, off + len) starts on a page and ends by limit. */
static void check_region(const char *what, uint64_t off, uint64_t len,
			 uint64_t start_min, uint64_t limit)
{
	if (off % SHM_PAGE || off < start_min || off + len > limit) {
		print_error("%s at %llu, %llu bytes: not page aligned, or not in "
			    "[%llu, %llu)\n", what, (unsigned long long)off,
			    (unsigned long long)len,
			    (unsigned long long)start_min,
			    (unsigned long long)limit);
		fail();
	}
}

static void check_layout(const struct shm_segment *seg, uint32_t n_slots,
			 uint32_t n_shards, uint32_t max_context,
			 uint32_t queue_capacity)
{
	const struct shm_header *h = seg->hdr;
	uint64_t slots_len = (uint64_t)n_slots * sizeof(struct shm_slot);
	uint64_t queue_len = sizeof(struct shm_queue) + (uint64_t)queue_capacity * 4;
	uint64_t tokens_len = (uint64_t)n_shards * h->shard_token_stride;
	size_t ds, rs;
	char prefix[32];
	struct stat st;
	int fd;

	assert_ptr_equal(seg->hdr, seg->base);
	assert_true(seg->owner);
	assert_int_equal(h->magic, SHM_MAGIC);
	assert_int_equal(h->layout_version, SHM_LAYOUT_VERSION);
	assert_int_equal(h->header_size, sizeof(struct shm_header));
	assert_int_equal(h->segment_size, seg->size);
	assert_int_equal(h->n_slots, n_slots);
	assert_int_equal(h->n_shards, n_shards);
	assert_int_equal(h->max_context, max_context);
	assert_int_equal(h->queue_capacity, queue_capacity);
	assert_int_equal(h->shard_capacity, (n_slots + n_shards - 1) / n_shards);
	assert_true((uint64_t)h->shard_capacity * n_shards >= n_slots);
	assert_int_equal(h->ring_depth, SHM_RING_DEPTH);
	assert_int_equal(h->coordinator_pid, getpid());
	assert_int_equal(h->vocab, 32000);
	assert_int_equal(atomic_load(&h->coordinator_sleeping), 0);

	/* regions in order, page aligned, no overlap, inside the segment */
	assert_true(sizeof(struct shm_header) <= SHM_PAGE);
	check_region("slot table", h->off_slots, slots_len, SHM_PAGE,
		     h->segment_size);
	check_region("queue", h->off_queue, queue_len, h->off_slots + slots_len,
		     h->segment_size);
	check_region("tokens", h->off_tokens, tokens_len,
		     h->off_queue + queue_len, h->segment_size);
	/* each shard's buffers fill whole pages of their own */
	assert_int_equal(h->shard_token_stride % SHM_PAGE, 0);
	assert_true(h->shard_token_stride >=
		    (uint64_t)h->shard_capacity * max_context * sizeof(int32_t));
	assert_true(h->shard_token_stride <
		    (uint64_t)h->shard_capacity * max_context * sizeof(int32_t) + SHM_PAGE);
	assert_int_equal(h->channel_stride % SHM_PAGE, 0);
	check_region("channels", h->off_channels,
		     (uint64_t)n_shards * h->channel_stride,
		     h->off_tokens + tokens_len, h->segment_size);
	assert_int_equal(h->segment_size % SHM_PAGE, 0);
	/* a channel's rings fit in its stride */
	ds = shm_dispatch_size(h->shard_capacity);
	rs = shm_result_size(h->shard_capacity);
	assert_true(ds >= sizeof(struct shm_dispatch) +
			  h->shard_capacity * sizeof(struct shm_dispatch_row));
	assert_true(rs >= sizeof(struct shm_result) +
			  h->shard_capacity * sizeof(struct shm_result_row));
	assert_true(sizeof(struct shm_channel) + h->ring_depth * (ds + rs) <=
		    h->channel_stride);
	/* the accessors agree with the offsets */
	assert_ptr_equal(shm_slot_at(seg, 0), (char *)seg->base + h->off_slots);
	assert_ptr_equal(shm_queue_of(seg), (char *)seg->base + h->off_queue);
	/* shards split the slots evenly; every slot's buffer lies inside its
	 * shard's region, right after the slot before it in that shard */
	for (uint32_t slot = 0, shard = 0; slot < n_slots; slot++) {
		char *region;

		while (shard + 1 < n_shards && slot >= shm_shard_first_slot(h, shard + 1))
			shard++;
		assert_int_equal(shm_slot_shard(h, slot), shard);
		assert_int_equal(shm_shard_first_slot(h, shard),
				 (uint32_t)((uint64_t)n_slots * shard / n_shards));
		assert_true(slot - shm_shard_first_slot(h, shard) < h->shard_capacity);
		region = (char *)seg->base + h->off_tokens +
			 (size_t)shard * h->shard_token_stride;
		assert_ptr_equal(shm_tokens_at(seg, slot),
				 region + (size_t)(slot - shm_shard_first_slot(h, shard)) *
					  max_context * sizeof(int32_t));
		assert_true((char *)(shm_tokens_at(seg, slot) + max_context) <=
			    region + h->shard_token_stride);
	}
	for (uint32_t i = 0; i < n_shards; i++) {
		struct shm_channel *ch = shm_channel_at(seg, i);
		char *end = (char *)shm_result_at(h, ch, h->ring_depth - 1) + rs;

		assert_ptr_equal(ch, (char *)seg->base + h->off_channels +
				 (size_t)i * h->channel_stride);
		assert_true((char *)shm_dispatch_at(h, ch, h->ring_depth - 1) + ds <=
			    (char *)shm_result_at(h, ch, 0));
		assert_true(end <= (char *)ch + h->channel_stride);
		/* the semaphore starts at 0 and works */
		assert_int_equal(sem_trywait(&ch->dispatch_sem), -1);
		assert_int_equal(errno, EAGAIN);
		assert_int_equal(sem_post(&ch->dispatch_sem), 0);
		assert_int_equal(sem_trywait(&ch->dispatch_sem), 0);
	}
	/* every byte is mapped and writable by the owner */
	((volatile char *)seg->base)[seg->size - 1] = 1;
	((volatile char *)seg->base)[seg->size - 1] = 0;

	/* the name and the file */
	snprintf(prefix, sizeof(prefix), "/dynbatch-%d-", (int)getpid());
	assert_int_equal(strncmp(seg->name, prefix, strlen(prefix)), 0);
	assert_true(strlen(seg->name) > strlen(prefix));
	fd = shm_open(seg->name, O_RDONLY, 0);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	close(fd);
	assert_int_equal(st.st_size, (off_t)h->segment_size);
	assert_int_equal(st.st_mode & 0777, 0600);
}

static void create_and_check(uint32_t n_slots, uint32_t n_shards,
			     uint32_t max_context, uint32_t queue_capacity)
{
	struct shm_segment seg;
	char err[256] = "";
	char name[SHM_NAME_MAX];

	seg_create(&seg, n_slots, n_shards, max_context, queue_capacity);
	check_layout(&seg, n_slots, n_shards, max_context, queue_capacity);
	if (shm_header_validate(seg.hdr, seg.size, err, sizeof(err))) {
		print_error("valid header rejected: %s\n", err);
		fail();
	}
	snprintf(name, sizeof(name), "%s", seg.name);
	shm_segment_destroy(&seg);
	assert_false(shm_exists(name));
}

static void test_create_layout(void **state)
{
	static const uint32_t contexts[] = { 1, 2, 3, 17, 1024, 1025, 4096 };
	static const uint32_t queues[] = { 1, 2, 1000, 1020, 1021, 1024, 65536 };
	struct rng r = rng_for(1);

	(void)state;
	/* edges */
	create_and_check(1, 1, 1, 1);
	create_and_check(300, 8, 4096, 4096);
	create_and_check(8, 8, 1, 1);
	create_and_check(9, 8, 7, 3);
	create_and_check(2, 1, 1024, 1021);	/* queue exactly fills a page */
	/* random shapes */
	for (unsigned i = 0; i < 60; i++) {
		uint32_t slots = 1 + rng_below(&r, 300);
		uint32_t max_shards = slots < 8 ? slots : 8;
		uint32_t shards = 1 + rng_below(&r, max_shards);
		uint32_t ctx = rng_below(&r, 2) ? contexts[rng_below(&r, 7)] :
			       1 + rng_below(&r, 5000);
		uint32_t queue = rng_below(&r, 2) ? queues[rng_below(&r, 7)] :
				 1 + rng_below(&r, 100000);

		create_and_check(slots, shards, ctx, queue);
	}
	assert_int_equal(count_our_names(), 0);
}

static void test_create_bad_params(void **state)
{
	static const struct shm_params bad[] = {
		{ 0, 1, 16, 16, 100 },			/* no slots */
		{ 4, 0, 16, 16, 100 },			/* no shards */
		{ 4, 5, 16, 16, 100 },			/* more shards than slots */
		{ 4, 1, 0, 16, 100 },			/* no context */
		{ 4, 1, 16, 0, 100 },			/* no queue */
		{ (1u << 16) + 1, 1, 16, 16, 100 },	/* too many slots */
		{ 4, 1, (1u << 24) + 1, 16, 100 },	/* context too long */
		{ 4, 1, 16, (1u << 22) + 1, 100 },	/* queue too long */
	};

	(void)state;
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct shm_segment seg;

		memset(&seg, 0x5a, sizeof(seg));
		assert_int_equal(shm_segment_create(&seg, &bad[i]), -EINVAL);
		assert_null(seg.base);
		assert_int_equal(seg.name[0], '\0');
		/* destroy of a failed create is harmless */
		shm_segment_destroy(&seg);
	}
	assert_int_equal(count_our_names(), 0);
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
	seg_create(&seg, 10, 3, 100, 50);
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
	MUTATE(layout_version, 0, "layout version 0");
	MUTATE(header_size, sizeof(struct shm_header) + 64, "header size");
	MUTATE(header_size, 0, "header size 0");
	MUTATE(off_slots, seg.hdr->off_slots + SHM_PAGE, "off_slots");
	MUTATE(off_queue, seg.hdr->off_queue - SHM_PAGE, "off_queue");
	MUTATE(off_tokens, seg.hdr->off_tokens + 4, "off_tokens");
	MUTATE(off_channels, seg.hdr->off_channels + SHM_PAGE, "off_channels");
	MUTATE(off_channels, UINT64_MAX - SHM_PAGE, "off_channels huge");
	MUTATE(channel_stride, seg.hdr->channel_stride * 2, "channel_stride");
	MUTATE(shard_token_stride, seg.hdr->shard_token_stride + SHM_PAGE, "shard_token_stride");
	MUTATE(shard_capacity, seg.hdr->shard_capacity + 1, "shard_capacity");
	MUTATE(ring_depth, seg.hdr->ring_depth * 2, "ring_depth");
	MUTATE(ring_depth, 0, "ring_depth 0");
	MUTATE(n_slots, seg.hdr->n_slots + 10, "n_slots");
	MUTATE(n_slots, 0, "n_slots 0");
	MUTATE(n_shards, seg.hdr->n_slots + 1, "n_shards above n_slots");
	MUTATE(n_shards, 0, "n_shards 0");
	MUTATE(max_context, seg.hdr->max_context + 1000, "max_context");
	MUTATE(max_context, 0, "max_context 0");
	MUTATE(queue_capacity, seg.hdr->queue_capacity + 5000, "queue_capacity");
	MUTATE(segment_size, seg.hdr->segment_size + SHM_PAGE, "segment_size");
#undef MUTATE

	/* a consistent header whose size is not the mapping's */
	h = *seg.hdr;
	expect_invalid(&h, size + SHM_PAGE, "mapping larger than segment_size");
	expect_invalid(&h, size - SHM_PAGE, "mapping smaller than segment_size");
	expect_invalid(&h, size - 1, "mapping one byte short");
	expect_invalid(&h, 100, "mapping smaller than a page");
	expect_invalid(&h, 0, "empty mapping");

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

static void expect_attach_fails(const char *name, uint32_t shard, int want,
				const char *what)
{
	struct shm_segment w;
	char err[256] = "";
	int rc = shm_segment_attach(&w, name, shard, err, sizeof(err));

	if (rc != want || !err[0]) {
		print_error("%s: attach returned %d, err \"%s\"; expected %d "
			    "and a reason\n", what, rc, err, want);
		if (!rc)
			shm_segment_detach(&w);
		fail();
	}
	assert_null(w.base);
}

static void test_attach(void **state)
{
	struct shm_segment seg, w;
	char err[256] = "";
	const char *small, *zeros;

	(void)state;
	seg_create(&seg, 12, 3, 64, 32);
	for (uint32_t shard = 0; shard < 3; shard++) {
		struct shm_slot *s;

		if (shm_segment_attach(&w, seg.name, shard, err, sizeof(err))) {
			print_error("attach shard %u: %s\n", shard, err);
			fail();
		}
		assert_false(w.owner);
		assert_int_equal(w.size, seg.size);
		assert_ptr_equal(w.hdr, w.base);
		assert_string_equal(w.name, seg.name);
		assert_int_equal(shm_header_validate(w.hdr, w.size, err, sizeof(err)), 0);
		/* the coordinator's writes show through the worker's view */
		s = shm_slot_at(&seg, 11);
		s->n_tokens = 40 + shard;
		assert_int_equal(shm_slot_at(&w, 11)->n_tokens, 40 + shard);
		shm_tokens_at(&seg, 11)[63] = -7;
		assert_int_equal(shm_tokens_at(&w, 11)[63], -7);
		/* and the worker's writes to its channel the other way */
		atomic_store(&shm_channel_at(&w, shard)->worker_ready_pid, 1000 + shard);
		assert_int_equal(atomic_load(&shm_channel_at(&seg, shard)->worker_ready_pid),
				 1000 + shard);
		shm_segment_detach(&w);
		assert_null(w.base);
		shm_segment_detach(&w);	/* twice: harmless */
	}
	expect_attach_fails(seg.name, 3, -EINVAL, "shard == n_shards");
	expect_attach_fails(seg.name, UINT32_MAX, -EINVAL, "shard UINT32_MAX");
	expect_attach_fails("/dynbatch-no-such-segment", 0, -ENOENT, "no segment");

	/* a corrupted header in the segment itself */
	seg.hdr->magic ^= 0x100;
	expect_attach_fails(seg.name, 0, -EPROTO, "magic corrupted");
	seg.hdr->magic ^= 0x100;
	seg.hdr->layout_version++;
	expect_attach_fails(seg.name, 0, -EPROTO, "layout version bumped");
	seg.hdr->layout_version--;
	seg.hdr->header_size--;
	expect_attach_fails(seg.name, 0, -EPROTO, "header size changed");
	seg.hdr->header_size++;
	seg.hdr->segment_size += SHM_PAGE;
	expect_attach_fails(seg.name, 0, -EPROTO, "segment size changed");
	seg.hdr->segment_size -= SHM_PAGE;
	seg.hdr->off_tokens += SHM_PAGE;
	expect_attach_fails(seg.name, 0, -EPROTO, "offset changed");
	seg.hdr->off_tokens -= SHM_PAGE;
	assert_int_equal(shm_segment_attach(&w, seg.name, 2, err, sizeof(err)), 0);
	shm_segment_detach(&w);

	/* files that are not (whole) segments */
	small = extra_create(getpid(), "utest-small", 100);
	expect_attach_fails(small, 0, -EPROTO, "file smaller than a header");
	zeros = extra_create(getpid(), "utest-zeros", 2 * SHM_PAGE);
	expect_attach_fails(zeros, 0, -EPROTO, "file of zeros");
	assert_int_equal(shm_unlink(small), 0);
	extra_forget(small);
	assert_int_equal(shm_unlink(zeros), 0);
	extra_forget(zeros);

	/* the file grown behind the header's back */
	{
		int fd = shm_open(seg.name, O_RDWR, 0);

		assert_true(fd >= 0);
		assert_int_equal(ftruncate(fd, (off_t)seg.size + SHM_PAGE), 0);
		close(fd);
		expect_attach_fails(seg.name, 0, -EPROTO, "file grown");
	}
	shm_segment_destroy(&seg);
}

/* Through an attached mapping only the own channel and the own shard's
 * token buffers are writable. */
static void test_attach_protection(void **state)
{
	struct shm_segment seg, w;
	const struct shm_header *h;
	char err[256] = "";
	char *b;
	const uint32_t shard = 1;

	(void)state;
	seg_create(&seg, 9, 3, 2000, 3000);
	h = seg.hdr;
	if (shm_segment_attach(&w, seg.name, shard, err, sizeof(err))) {
		print_error("attach: %s\n", err);
		fail();
	}
	b = w.base;

	expect_segv(b, "the header's magic");
	expect_segv(b + offsetof(struct shm_header, coordinator_sleeping),
		    "coordinator_sleeping");
	expect_segv(b + h->off_slots, "the slot table");
	expect_segv(&shm_slot_at(&w, 8)->n_tokens, "the last slot");
	expect_segv(b + h->off_queue, "the queue head");
	expect_segv(&shm_queue_of(&w)->handles[2999], "the last queue entry");
	expect_segv(b + h->off_tokens, "the first token buffer");
	expect_segv(shm_tokens_at(&w, 2) + 1999, "shard 0's last token");
	expect_segv(shm_tokens_at(&w, 6), "shard 2's first token");
	expect_segv(shm_tokens_at(&w, 8) + 1999, "the last token");
	expect_segv(b + h->off_channels, "channel 0");
	expect_segv(b + h->off_channels + shard * h->channel_stride - 1,
		    "the last byte of channel 0");
	expect_segv(b + h->off_channels + (shard + 1) * h->channel_stride,
		    "channel 2");
	expect_segv(b + w.size - 1, "the last byte of the segment");

	/* the own channel, first byte to last, rings included */
	expect_writable(b + h->off_channels + shard * h->channel_stride,
			"the own channel's first byte");
	expect_writable(&shm_result_at(w.hdr, shm_channel_at(&w, shard),
				       h->ring_depth - 1)->rows[0].token,
			"the own result ring");
	expect_writable(b + h->off_channels + (shard + 1) * h->channel_stride - 1,
			"the own channel's last byte");
	/* and the own shard's token buffers (slots 3..5), whole pages */
	expect_writable(b + h->off_tokens + shard * h->shard_token_stride,
			"the own shard's first token");
	expect_writable((char *)(shm_tokens_at(&w, 5) + 1999) + 3,
			"the own shard's last token");
	assert_int_equal(*((uint8_t *)shm_tokens_at(&seg, 3)), 0xa7);
	/* the child's writes went to the shared segment */
	assert_int_equal(*((uint8_t *)seg.base + h->off_channels +
			   shard * h->channel_stride), 0xa7);
	assert_int_equal(*((uint8_t *)seg.base + h->off_channels +
			   (shard + 1) * h->channel_stride - 1), 0xa7);
	/* and none of the refused ones did */
	assert_int_equal(seg.hdr->magic, SHM_MAGIC);
	assert_int_equal(*((uint8_t *)seg.base + h->off_slots), 0);
	assert_int_equal(*((uint8_t *)seg.base + h->off_channels), 0);
	shm_segment_detach(&w);
	shm_segment_destroy(&seg);
}

/* ------------------------------------------------------------------ */
/* Lifetime and faults                                                 */
/* ------------------------------------------------------------------ */

static void test_destroy(void **state)
{
	struct shm_segment seg, zero;
	char name[SHM_NAME_MAX];

	(void)state;
	seg_create(&seg, 4, 2, 8, 8);
	snprintf(name, sizeof(name), "%s", seg.name);
	assert_true(shm_exists(name));
	shm_segment_destroy(&seg);
	assert_false(shm_exists(name));
	assert_null(seg.base);
	assert_null(seg.hdr);
	shm_segment_destroy(&seg);		/* idempotent */
	shm_segment_destroy(&seg);
	memset(&zero, 0, sizeof(zero));
	shm_segment_destroy(&zero);		/* a zeroed segment */
	shm_segment_destroy(NULL);
	shm_segment_detach(&zero);
	shm_segment_detach(NULL);

	/* unlink first (a fatal signal), the mapping stays usable */
	seg_create(&seg, 4, 2, 8, 8);
	snprintf(name, sizeof(name), "%s", seg.name);
	shm_segment_unlink(&seg);
	assert_false(shm_exists(name));
	shm_slot_at(&seg, 3)->n_tokens = 5;
	assert_int_equal(shm_slot_at(&seg, 3)->n_tokens, 5);
	shm_segment_unlink(&seg);
	shm_segment_destroy(&seg);
	assert_false(shm_exists(name));
	assert_int_equal(count_our_names(), 0);

	/* two live segments get different names */
	{
		struct shm_segment a, b;

		seg_create(&a, 1, 1, 1, 1);
		seg_create(&b, 1, 1, 1, 1);
		assert_string_not_equal(a.name, b.name);
		shm_segment_destroy(&a);
		assert_true(shm_exists(b.name));
		shm_segment_destroy(&b);
	}
	assert_int_equal(count_our_names(), 0);
}

static void expect_fault(const char *faults, int want)
{
	struct shm_params p = { 16, 4, 128, 64, 100 };
	struct shm_segment seg;
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
		return;
	}
	assert_null(seg.base);
	assert_null(seg.hdr);
	assert_int_equal(seg.name[0], '\0');
	assert_int_equal(count_our_names(), 0);
	shm_segment_destroy(&seg);
}

static void test_fault_injection(void **state)
{
	(void)state;
	assert_int_equal(count_our_names(), 0);
	expect_fault("shm_open", -EIO);
	expect_fault("mmap", -ENOMEM);
	expect_fault("fork,mmap", -ENOMEM);
	expect_fault("mmap,shm_open", -EIO);
	expect_fault("io_uring_queue_init,shm_open,", -EIO);
	/* only whole names count */
	expect_fault("shm_ope", 0);
	expect_fault("shm_open_x,mmapx,fork", 0);
	expect_fault("", 0);
	assert_int_equal(count_our_names(), 0);
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
			(uint32_t)(pos * 3 + i), 0 };
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
			(int32_t)(pos * 31 + i) - 5000, 0 };
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
	int sval = -1;

	(void)state;
	seg_create(&seg, 7, 2, 16, 16);		/* shard capacity 4 */
	if (shm_segment_attach(&w, seg.name, 1, err, sizeof(err))) {
		print_error("attach: %s\n", err);
		fail();
	}
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

	/* reset forgets every entry, both rings, and re-arms the channel */
	atomic_store(&worker.ch->worker_sleeping, 1);
	atomic_store(&worker.ch->worker_ready_pid, 4242);
	assert_int_equal(sem_post(&coord.ch->dispatch_sem), 0);
	assert_int_equal(sem_post(&coord.ch->dispatch_sem), 0);
	shm_channel_reset(&seg, 1, 1001, 995);
	for (uint64_t q = 1001 - depth; q < 1001 + 2 * depth; q++) {
		if (dispatch_ready(worker, q) || result_ready(coord, q)) {
			print_error("position %llu ready after reset\n",
				    (unsigned long long)q);
			fail();
		}
	}
	assert_int_equal(worker.ch->start_dispatch_pos, 1001);
	assert_int_equal(worker.ch->start_result_pos, 995);
	assert_int_equal(atomic_load(&coord.ch->worker_sleeping), 0);
	assert_int_equal(atomic_load(&coord.ch->worker_ready_pid), 0);
	assert_int_equal(sem_getvalue(&coord.ch->dispatch_sem, &sval), 0);
	assert_int_equal(sval, 0);
	assert_int_equal(sem_trywait(&coord.ch->dispatch_sem), -1);
	assert_int_equal(errno, EAGAIN);
	/* channel 0 untouched by channel 1's reset */
	assert_true(dispatch_ready(other, 0));

	/* the rings go on after a reset */
	run_ring(coord, worker, 1001, 1001 + 3 * depth + 1);

	shm_segment_detach(&w);
	shm_segment_destroy(&seg);
}

/* ------------------------------------------------------------------ */
/* Stale segments                                                      */
/* ------------------------------------------------------------------ */

static pid_t dead_pid(void)
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(kill(pid, 0), -1);
	assert_int_equal(errno, ESRCH);
	return pid;
}

/* A coordinator that dies without removing its segment. */
static void crashed_coordinator(char *name)
{
	int fds[2];
	pid_t pid;
	int status;

	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct shm_params p = { 2, 1, 8, 8, 100 };
		struct shm_segment seg;
		ssize_t n = -1;

		close(fds[0]);
		if (!shm_segment_create(&seg, &p))
			n = write(fds[1], seg.name, SHM_NAME_MAX);
		_exit(n == SHM_NAME_MAX ? 0 : 1);
	}
	close(fds[1]);
	memset(name, 0, SHM_NAME_MAX);
	assert_int_equal(read(fds[0], name, SHM_NAME_MAX), SHM_NAME_MAX);
	close(fds[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	name[SHM_NAME_MAX - 1] = '\0';
}

static void test_reap_stale(void **state)
{
	char crashed[SHM_NAME_MAX], tag[32];
	const char *dead, *mine, *init, *odd;
	struct shm_segment live;
	int n;

	(void)state;
	crashed_coordinator(crashed);
	snprintf(extra_names[3], SHM_NAME_MAX, "%s", crashed);	/* teardown */
	assert_true(shm_exists(crashed));

	snprintf(tag, sizeof(tag), "test");
	dead = extra_create(dead_pid(), tag, 0);
	mine = extra_create(getpid(), tag, 0);
	/* pid 1 is alive (or not ours to signal): never reaped */
	snprintf(tag, sizeof(tag), "utest%d", (int)getpid());
	init = extra_create(1, tag, 0);
	seg_create(&live, 2, 1, 4, 4);

	n = shm_segment_reap_stale();
	/* others' stale segments may go too, ours at least */
	assert_true(n >= 2);
	assert_false(shm_exists(crashed));
	extra_names[3][0] = '\0';
	assert_false(shm_exists(dead));
	extra_forget(dead);
	assert_true(shm_exists(mine));
	assert_true(shm_exists(init));
	assert_true(shm_exists(live.name));

	/* a name that is not ours to parse stays */
	odd = extra_create(0, "x", 0);		/* "/dynbatch-0-x": pid 0 */
	shm_segment_reap_stale();
	assert_true(shm_exists(odd));

	assert_int_equal(shm_unlink(mine), 0);
	extra_forget(mine);
	assert_int_equal(shm_unlink(init), 0);
	extra_forget(init);
	assert_int_equal(shm_unlink(odd), 0);
	extra_forget(odd);
	shm_segment_destroy(&live);
	assert_int_equal(count_our_names(), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_create_layout, teardown),
		cmocka_unit_test_teardown(test_create_bad_params, teardown),
		cmocka_unit_test_teardown(test_header_validate, teardown),
		cmocka_unit_test_teardown(test_attach, teardown),
		cmocka_unit_test_teardown(test_attach_protection, teardown),
		cmocka_unit_test_teardown(test_destroy, teardown),
		cmocka_unit_test_teardown(test_fault_injection, teardown),
		cmocka_unit_test_teardown(test_ring_wraparound, teardown),
		cmocka_unit_test_teardown(test_reap_stale, teardown),
	};

	test_seed_init("shm_segment");
	return cmocka_run_group_tests_name("shm_segment", tests, NULL, NULL);
}
