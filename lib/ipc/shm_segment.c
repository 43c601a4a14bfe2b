/*
 * shm_segment.c - create, seal, attach, validate and renew the memory the
 * coordinator shares with its workers; the layout and the reasons are in
 * shm_segment.h.
 */
#include "ipc/shm_segment.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "util/fault_sim.h"

static_assert(sizeof(struct shm_header) == 256, "shm_header layout");
static_assert(offsetof(struct shm_header, layout_version) == 8, "header");
static_assert(offsetof(struct shm_header, segment_size) == 16, "header");
static_assert(offsetof(struct shm_header, ring_depth) == 40, "header");
static_assert(offsetof(struct shm_header, vocab) == 48, "header");
static_assert(offsetof(struct shm_header, off_slots) == 56, "header");
static_assert(offsetof(struct shm_header, shard_size) == 80, "header");
static_assert(offsetof(struct shm_header, off_vocab) == 136, "header");
static_assert(offsetof(struct shm_header, coordinator_sleeping) == 192,
	      "coordinator_sleeping on its own cache line");
static_assert(sizeof(struct shm_slot) == 32, "slot table entry");
static_assert(sizeof(struct shm_dispatch_row) == 36, "dispatch row");
static_assert(offsetof(struct shm_header, shard_kv_size) == 112, "header");
static_assert(sizeof(struct shm_result_row) == 20, "result row");
static_assert(sizeof(struct shm_dispatch) == 24, "dispatch head");
static_assert(sizeof(struct shm_result) == 56, "result head");
static_assert(offsetof(struct shm_channel, wake_seq) == 24, "wake word");
static_assert(offsetof(struct shm_channel, worker_sleeping) == 64,
	      "worker line apart from coordinator line");
static_assert(sizeof(struct shm_channel) == 2 * SHM_CACHE_LINE, "channel head");
static_assert((SHM_RING_DEPTH & (SHM_RING_DEPTH - 1)) == 0, "ring depth");

#define SHM_MAX_SLOTS (1u << 16)


/* Seals of the shared object once the coordinator has mapped it: nobody
 * (the coordinator's own later mappings included) may write it except
 * through the mapping that exists, nor change its size or its seals. */
#define SHM_SHARED_SEALS (F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | \
			  F_SEAL_SEAL)
/* Seals of a shard object: its worker writes it, but cannot resize it or
 * seal it against the coordinator or its successor. */
#define SHM_SHARD_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

static uint64_t round_up(uint64_t x, uint64_t to)
{
	return (x + to - 1) / to * to;
}

static size_t round_line(size_t x)
{
	return (x + SHM_CACHE_LINE - 1) / SHM_CACHE_LINE * SHM_CACHE_LINE;
}

size_t shm_dispatch_size(uint32_t shard_capacity)
{
	return round_line(sizeof(struct shm_dispatch) +
			  (size_t)shard_capacity * sizeof(struct shm_dispatch_row));
}

size_t shm_result_size(uint32_t result_rows)
{
	return round_line(sizeof(struct shm_result) +
			  (size_t)result_rows * sizeof(struct shm_result_row));
}

size_t shm_logprobs_size(uint32_t result_rows)
{
	return round_line((size_t)result_rows * sizeof(struct shm_logprobs));
}

/* The rings, then the logprob blocks of each result entry in a region of
 * their own: the result entries stay as compact as the rows need, and the
 * pages of blocks no row asks for are never touched. */
static uint64_t channel_size_for(uint32_t shard_capacity, uint32_t result_rows,
				 uint32_t depth)
{
	return round_up(sizeof(struct shm_channel) +
			depth * (shm_dispatch_size(shard_capacity) +
				 shm_result_size(result_rows) +
				 shm_logprobs_size(result_rows)), SHM_PAGE);
}

/* Fill in every layout field of hdr from p.  0 or -EINVAL. */
static int layout_compute(struct shm_header *hdr, const struct shm_params *p)
{
	if (!p->n_slots || p->n_slots > SHM_MAX_SLOTS || !p->n_shards ||
	    p->n_shards > p->n_slots || !p->max_context ||
	    p->max_context > SHM_MAX_CONTEXT ||
	    (p->kv_block_tokens && (!p->kv_blocks ||
				    p->kv_block_tokens > SHM_MAX_CONTEXT)) ||
	    p->emit_per_row > SHM_MAX_EMIT ||
	    p->grammar_source_max > SHM_MAX_GRAMMAR ||
	    p->vocab_table_bytes > SHM_MAX_VOCAB_TABLE)
		return -EINVAL;
	memset(hdr, 0, sizeof(*hdr));
	hdr->magic = SHM_MAGIC;
	hdr->layout_version = SHM_LAYOUT_VERSION;
	hdr->header_size = sizeof(struct shm_header);
	hdr->n_slots = p->n_slots;
	hdr->n_shards = p->n_shards;
	hdr->max_context = p->max_context;
	hdr->shard_capacity = (p->n_slots + p->n_shards - 1) / p->n_shards;
	hdr->ring_depth = SHM_RING_DEPTH;
	hdr->coordinator_pid = (int32_t)getpid();
	hdr->vocab = p->vocab;
	hdr->off_slots = SHM_PAGE;
	hdr->off_vocab = round_up(SHM_PAGE + (uint64_t)p->n_slots *
				  sizeof(struct shm_slot), SHM_PAGE);
	hdr->vocab_table_size = round_up(p->vocab_table_bytes, SHM_PAGE);
	hdr->segment_size = hdr->off_vocab + hdr->vocab_table_size;
	hdr->result_rows = hdr->shard_capacity *
			   (p->emit_per_row ? p->emit_per_row : 1);
	hdr->channel_size = channel_size_for(hdr->shard_capacity, hdr->result_rows,
					     hdr->ring_depth);
	hdr->shard_tokens_size = round_up((uint64_t)hdr->shard_capacity *
					  p->max_context * sizeof(int32_t), SHM_PAGE);
	hdr->shard_sampling_size = round_up((uint64_t)hdr->shard_capacity *
					    sizeof(struct shm_slot_sampling), SHM_PAGE);
	if (p->kv_block_tokens) {
		hdr->kv_block_tokens = p->kv_block_tokens;
		hdr->kv_blocks = p->kv_blocks;
		hdr->kv_max_blocks = (p->max_context + p->kv_block_tokens - 1) /
				     p->kv_block_tokens;
		hdr->shard_kv_size = round_up((uint64_t)hdr->shard_capacity *
					      hdr->kv_max_blocks * sizeof(uint32_t),
					      SHM_PAGE);
	}
	if (p->grammar_source_max) {
		/* 8-aligned entries: each starts with its words */
		hdr->grammar_slot_bytes = (uint32_t)round_up(
			sizeof(struct shm_slot_grammar) + p->grammar_source_max, 8);
		hdr->shard_grammar_size = round_up((uint64_t)hdr->shard_capacity *
						   hdr->grammar_slot_bytes, SHM_PAGE);
	}
	hdr->shard_size = hdr->channel_size + hdr->shard_tokens_size +
			  hdr->shard_sampling_size + hdr->shard_kv_size +
			  hdr->shard_grammar_size;
	return 0;
}

int shm_header_validate(const struct shm_header *hdr, size_t size, char *err,
			size_t err_len)
{
	struct shm_params p;
	struct shm_header want;

	if (size < SHM_PAGE || hdr->magic != SHM_MAGIC) {
		snprintf(err, err_len, "segment magic mismatch: not a dynbatch segment");
		return -EPROTO;
	}
	if (hdr->layout_version != SHM_LAYOUT_VERSION ||
	    hdr->header_size != sizeof(struct shm_header)) {
		snprintf(err, err_len,
			 "segment layout version %u (header %u bytes), this build "
			 "speaks version %u (%zu bytes)", hdr->layout_version,
			 hdr->header_size, SHM_LAYOUT_VERSION,
			 sizeof(struct shm_header));
		return -EPROTO;
	}
	/* Recompute the layout from the counts and demand an exact match:
	 * then every offset below is known to be in range. */
	p.n_slots = hdr->n_slots;
	p.n_shards = hdr->n_shards;
	p.max_context = hdr->max_context;
	p.vocab = hdr->vocab;
	p.kv_block_tokens = hdr->kv_block_tokens;
	p.kv_blocks = hdr->kv_blocks;
	p.emit_per_row = hdr->shard_capacity ?
			 hdr->result_rows / hdr->shard_capacity : 0;
	p.grammar_source_max = shm_grammar_source_max(hdr);
	p.vocab_table_bytes = hdr->vocab_table_size;
	if (layout_compute(&want, &p) || want.off_slots != hdr->off_slots ||
	    want.result_rows != hdr->result_rows ||
	    want.kv_max_blocks != hdr->kv_max_blocks ||
	    want.shard_kv_size != hdr->shard_kv_size ||
	    want.grammar_slot_bytes != hdr->grammar_slot_bytes ||
	    want.shard_grammar_size != hdr->shard_grammar_size ||
	    want.vocab_table_size != hdr->vocab_table_size ||
	    want.off_vocab != hdr->off_vocab ||
	    want.channel_size != hdr->channel_size ||
	    want.shard_tokens_size != hdr->shard_tokens_size ||
	    want.shard_sampling_size != hdr->shard_sampling_size ||
	    want.shard_size != hdr->shard_size ||
	    want.shard_capacity != hdr->shard_capacity ||
	    want.ring_depth != hdr->ring_depth ||
	    want.segment_size != hdr->segment_size) {
		snprintf(err, err_len, "segment layout fields are inconsistent");
		return -EPROTO;
	}
	if (hdr->segment_size != size) {
		snprintf(err, err_len, "segment size %llu does not match the "
			 "shared object (%zu bytes)",
			 (unsigned long long)hdr->segment_size, size);
		return -EPROTO;
	}
	return 0;
}

/*
 * A new unnamed object of size bytes that accepts seals, close-on-exec.
 * Returns its descriptor or a negative errno.
 */
static int object_create(const char *what, uint64_t size)
{
	int fd = fault_sim("memfd") ? (errno = EMFILE, -1) :
		 memfd_create(what, MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size)) {
		int ret = -errno;

		close(fd);
		return ret;
	}
	return fd;
}

/* Map size bytes of fd read-write, at addr when it is not NULL (over what
 * is there).  The mapping, or MAP_FAILED with errno set. */
static void *object_map(int fd, uint64_t size, void *addr)
{
	if (fault_sim("mmap")) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	return mmap(addr, size, PROT_READ | PROT_WRITE,
		    MAP_SHARED | (addr ? MAP_FIXED : 0), fd, 0);
}

/* An empty channel whose rings start at the given positions (the object
 * is fresh: every seq is 0, nothing is ready). */
static void channel_init(struct shm_channel *ch, uint64_t dispatch_pos,
			 uint64_t result_pos)
{
	ch->start_dispatch_pos = dispatch_pos;
	ch->start_result_pos = result_pos;
	atomic_store(&ch->results_consumed, result_pos);
	atomic_store(&ch->dispatch_adopted, dispatch_pos);
}

/*
 * Reopen an object read-only (close-on-exec): through /proc, the new
 * descriptor gets its own open file, without write access, so nothing
 * mapped from it can be made writable.  Where /proc is missing, a
 * duplicate of the read-write descriptor: for the shared object the seals
 * still refuse every write.  The descriptor or a negative errno.
 */
static int reopen_readonly(int fd)
{
	char path[64];
	int ro;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ro = open(path, O_RDONLY | O_CLOEXEC);
	if (ro < 0)
		ro = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	return ro < 0 ? -errno : ro;
}

int shm_segment_create(struct shm_segment *seg, const struct shm_params *p)
{
	struct shm_header hdr;
	void *base;
	int fd, ret;

	memset(seg, 0, sizeof(*seg));
	seg->ro_fd = -1;
	if (layout_compute(&hdr, p))
		return -EINVAL;
	fd = object_create("dynbatch-shared", hdr.segment_size);
	if (fd < 0)
		return fd;
	base = object_map(fd, hdr.segment_size, NULL);
	if (base == MAP_FAILED) {
		ret = -errno;
		goto out_close;
	}
	memcpy(base, &hdr, sizeof(hdr));
	/* From here on the one writable mapping is ours. */
	if (fcntl(fd, F_ADD_SEALS, SHM_SHARED_SEALS)) {
		ret = -errno;
		goto out_unmap;
	}
	ret = reopen_readonly(fd);
	if (ret < 0)
		goto out_unmap;
	close(fd);
	seg->ro_fd = ret;
	seg->layout = hdr;
	seg->hdr = &seg->layout;
	seg->base = base;
	seg->size = hdr.segment_size;
	seg->owner = true;
	seg->shard_base = calloc(hdr.n_shards, sizeof(*seg->shard_base));
	if (!seg->shard_base) {
		shm_segment_destroy(seg);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < hdr.n_shards; i++) {
		int shard_fd;

		ret = shm_shard_renew(seg, i, 0, 0, &shard_fd);
		if (ret) {
			shm_segment_destroy(seg);
			return ret;
		}
		close(shard_fd);
	}
	return 0;

out_unmap:
	munmap(base, hdr.segment_size);
out_close:
	close(fd);
	return ret;
}

void shm_segment_destroy(struct shm_segment *seg)
{
	if (!seg)
		return;
	for (uint32_t i = 0; seg->shard_base && i < seg->layout.n_shards; i++)
		if (seg->shard_base[i])
			munmap(seg->shard_base[i], seg->layout.shard_size);
	free(seg->shard_base);
	seg->shard_base = NULL;
	if (seg->base)
		munmap(seg->base, seg->size);
	if (seg->owner && seg->ro_fd >= 0)
		close(seg->ro_fd);
	seg->ro_fd = -1;
	seg->base = NULL;
	seg->hdr = NULL;
}

int shm_shard_renew(struct shm_segment *seg, uint32_t shard,
		    uint64_t dispatch_pos, uint64_t result_pos, int *worker_fd)
{
	const struct shm_header *hdr = seg->hdr;
	void *map;
	int fd, ret;

	if (!seg->owner || shard >= hdr->n_shards)
		return -EINVAL;
	fd = object_create("dynbatch-shard", hdr->shard_size);
	if (fd < 0)
		return fd;
	if (fcntl(fd, F_ADD_SEALS, SHM_SHARD_SEALS)) {
		ret = -errno;
		goto out_close;
	}
	/* Over the old object's mapping, so that every pointer into the
	 * shard's buffers stays valid; the old object goes when its last
	 * holder does. */
	map = object_map(fd, hdr->shard_size, seg->shard_base[shard]);
	if (map == MAP_FAILED) {
		ret = -errno;
		/* A failed MAP_FIXED may have unmapped the old range: keep
		 * the addresses mapped (zeroes), so that nothing faults. */
		if (seg->shard_base[shard])
			mmap(seg->shard_base[shard], hdr->shard_size,
			     PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		goto out_close;
	}
	seg->shard_base[shard] = map;
	channel_init(map, dispatch_pos, result_pos);
	*worker_fd = fd;
	return 0;

out_close:
	close(fd);
	return ret;
}

/* Map length bytes of fd at offset with prot; MAP_FAILED and a reason. */
static void *attach_map(int fd, uint64_t length, uint64_t offset, int prot,
			const char *what, char *err, size_t err_len)
{
	void *p = mmap(NULL, length, prot, MAP_SHARED, fd, (off_t)offset);

	if (p == MAP_FAILED)
		snprintf(err, err_len, "mmap %s: %s", what, strerror(errno));
	return p;
}

int shm_segment_attach(struct shm_segment *seg, int shared_fd, int shard_fd,
		       uint32_t shard, char *err, size_t err_len)
{
	struct shm_header hdr;
	struct stat st;
	void *base, *mine, *ro;
	int ret, ro_fd;

	memset(seg, 0, sizeof(*seg));
	seg->ro_fd = -1;
	if (fstat(shared_fd, &st) || (size_t)st.st_size < sizeof(hdr) ||
	    pread(shared_fd, &hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr)) {
		snprintf(err, err_len, "shared object (fd %d) too small or "
			 "unreadable", shared_fd);
		return -EPROTO;
	}
	ret = shm_header_validate(&hdr, (size_t)st.st_size, err, err_len);
	if (ret)
		return ret;
	if (shard >= hdr.n_shards) {
		snprintf(err, err_len, "shard %u out of range (segment has %u)",
			 shard, hdr.n_shards);
		return -EINVAL;
	}
	if (fstat(shard_fd, &st) || (uint64_t)st.st_size != hdr.shard_size) {
		snprintf(err, err_len, "shard object (fd %d) is not %llu bytes",
			 shard_fd, (unsigned long long)hdr.shard_size);
		return -EPROTO;
	}
	base = attach_map(shared_fd, hdr.segment_size, 0, PROT_READ,
			  "shared object", err, err_len);
	if (base == MAP_FAILED)
		return -ENOMEM;
	mine = attach_map(shard_fd, hdr.shard_size, 0, PROT_READ | PROT_WRITE,
			  "shard object", err, err_len);
	if (mine == MAP_FAILED) {
		ret = -ENOMEM;
		goto out_base;
	}
	/* The model's view of the prefixes: a stray write faults, and
	 * mapped from a read-only descriptor, so mprotect cannot make it
	 * writable either. */
	ro_fd = reopen_readonly(shard_fd);
	ro = attach_map(ro_fd >= 0 ? ro_fd : shard_fd, hdr.shard_tokens_size,
			hdr.channel_size, PROT_READ, "token view", err, err_len);
	if (ro_fd >= 0)
		close(ro_fd);
	if (ro == MAP_FAILED) {
		ret = -ENOMEM;
		goto out_mine;
	}
	seg->shard_base = calloc(hdr.n_shards, sizeof(*seg->shard_base));
	if (!seg->shard_base) {
		snprintf(err, err_len, "out of memory");
		ret = -ENOMEM;
		goto out_ro;
	}
	seg->shard_base[shard] = mine;
	seg->tokens_ro = ro;
	seg->layout = hdr;
	seg->hdr = &seg->layout;
	seg->base = base;
	seg->size = hdr.segment_size;
	return 0;

out_ro:
	munmap(ro, hdr.shard_tokens_size);
out_mine:
	munmap(mine, hdr.shard_size);
out_base:
	munmap(base, hdr.segment_size);
	return ret;
}

void shm_segment_detach(struct shm_segment *seg)
{
	if (!seg)
		return;
	if (seg->tokens_ro)
		munmap((void *)seg->tokens_ro, seg->layout.shard_tokens_size);
	seg->tokens_ro = NULL;
	shm_segment_destroy(seg);
}

void shm_wake_worker(struct shm_channel *ch)
{
	/* Any value will do: the worker compares against what it read
	 * before it announced its sleep (shm_worker_sleep). */
	atomic_fetch_add_explicit(&ch->wake_seq, 1, memory_order_seq_cst);
	syscall(SYS_futex, &ch->wake_seq, FUTEX_WAKE, 1, NULL, NULL, 0);
}

void shm_worker_sleep(struct shm_channel *ch, uint32_t seen, uint64_t timeout_ns)
{
	struct timespec ts = {
		.tv_sec = (time_t)(timeout_ns / 1000000000ull),
		.tv_nsec = (long)(timeout_ns % 1000000000ull),
	};

	/* EAGAIN (woken since), EINTR and ETIMEDOUT all mean: look again */
	syscall(SYS_futex, &ch->wake_seq, FUTEX_WAIT, seen, &ts, NULL, 0);
}
