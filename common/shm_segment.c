/*
 * shm_segment.c - create, attach, validate and remove the shared segment;
 * the layout is described in shm_segment.h.
 */
#include "shm_segment.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fault_sim.h"
#include "log.h"

static_assert(sizeof(struct shm_header) == 192, "shm_header layout");
static_assert(offsetof(struct shm_header, layout_version) == 8, "header");
static_assert(offsetof(struct shm_header, segment_size) == 16, "header");
static_assert(offsetof(struct shm_header, vocab) == 52, "header");
static_assert(offsetof(struct shm_header, off_slots) == 56, "header");
static_assert(offsetof(struct shm_header, shard_token_stride) == 96, "header");
static_assert(offsetof(struct shm_header, coordinator_sleeping) == 128,
	      "coordinator_sleeping on its own cache line");
static_assert(sizeof(struct shm_slot) == 32, "slot table entry");
static_assert(sizeof(struct shm_dispatch_row) == 16, "dispatch row");
static_assert(sizeof(struct shm_result_row) == 16, "result row");
static_assert(sizeof(struct shm_dispatch) == 24, "dispatch head");
static_assert(sizeof(struct shm_result) == 32, "result head");
static_assert(offsetof(struct shm_channel, worker_sleeping) == 64,
	      "worker line apart from coordinator line");
static_assert(sizeof(struct shm_channel) % SHM_CACHE_LINE == 0, "channel head");
static_assert((SHM_RING_DEPTH & (SHM_RING_DEPTH - 1)) == 0, "ring depth");

#define SHM_MAX_SLOTS (1u << 16)
#define SHM_MAX_CONTEXT (1u << 24)
#define SHM_MAX_QUEUE (1u << 22)

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

size_t shm_result_size(uint32_t shard_capacity)
{
	return round_line(sizeof(struct shm_result) +
			  (size_t)shard_capacity * sizeof(struct shm_result_row));
}

static uint64_t channel_stride_for(uint32_t shard_capacity, uint32_t depth)
{
	return round_up(sizeof(struct shm_channel) +
			depth * (shm_dispatch_size(shard_capacity) +
				 shm_result_size(shard_capacity)), SHM_PAGE);
}

/* Fill in every layout field of hdr from p.  0 or -EINVAL. */
static int layout_compute(struct shm_header *hdr, const struct shm_params *p)
{
	uint64_t off;

	if (!p->n_slots || p->n_slots > SHM_MAX_SLOTS || !p->n_shards ||
	    p->n_shards > p->n_slots || !p->max_context ||
	    p->max_context > SHM_MAX_CONTEXT || !p->queue_capacity ||
	    p->queue_capacity > SHM_MAX_QUEUE)
		return -EINVAL;
	memset(hdr, 0, sizeof(*hdr));
	hdr->magic = SHM_MAGIC;
	hdr->layout_version = SHM_LAYOUT_VERSION;
	hdr->header_size = sizeof(struct shm_header);
	hdr->n_slots = p->n_slots;
	hdr->n_shards = p->n_shards;
	hdr->max_context = p->max_context;
	hdr->shard_capacity = (p->n_slots + p->n_shards - 1) / p->n_shards;
	hdr->queue_capacity = p->queue_capacity;
	hdr->ring_depth = SHM_RING_DEPTH;
	hdr->coordinator_pid = (int32_t)getpid();
	hdr->vocab = p->vocab;
	off = SHM_PAGE;
	hdr->off_slots = off;
	off = round_up(off + (uint64_t)p->n_slots * sizeof(struct shm_slot), SHM_PAGE);
	hdr->off_queue = off;
	off = round_up(off + sizeof(struct shm_queue) +
		       (uint64_t)p->queue_capacity * sizeof(uint32_t), SHM_PAGE);
	hdr->off_tokens = off;
	hdr->shard_token_stride = round_up((uint64_t)hdr->shard_capacity *
					   p->max_context * sizeof(int32_t), SHM_PAGE);
	off += p->n_shards * hdr->shard_token_stride;
	hdr->off_channels = off;
	hdr->channel_stride = channel_stride_for(hdr->shard_capacity, hdr->ring_depth);
	hdr->segment_size = off + (uint64_t)p->n_shards * hdr->channel_stride;
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
	p.queue_capacity = hdr->queue_capacity;
	p.vocab = hdr->vocab;
	if (layout_compute(&want, &p) || want.off_slots != hdr->off_slots ||
	    want.off_queue != hdr->off_queue || want.off_tokens != hdr->off_tokens ||
	    want.off_channels != hdr->off_channels ||
	    want.channel_stride != hdr->channel_stride ||
	    want.shard_token_stride != hdr->shard_token_stride ||
	    want.shard_capacity != hdr->shard_capacity ||
	    want.ring_depth != hdr->ring_depth ||
	    want.segment_size != hdr->segment_size) {
		snprintf(err, err_len, "segment layout fields are inconsistent");
		return -EPROTO;
	}
	if (hdr->segment_size != size) {
		snprintf(err, err_len, "segment size %llu does not match the "
			 "mapping (%zu bytes)",
			 (unsigned long long)hdr->segment_size, size);
		return -EPROTO;
	}
	return 0;
}

static void name_make(char *name, size_t len)
{
	struct timespec ts;
	uint64_t r;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	r = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)random() ^
	    ((uint64_t)ts.tv_sec << 20);
	snprintf(name, len, "/dynbatch-%d-%012llx", (int)getpid(),
		 (unsigned long long)(r & 0xffffffffffffull));
}

int shm_segment_create(struct shm_segment *seg, const struct shm_params *p)
{
	struct shm_header hdr;
	int fd, ret, tries = 0;
	void *base;

	memset(seg, 0, sizeof(*seg));
	if (layout_compute(&hdr, p))
		return -EINVAL;
	for (;;) {
		name_make(seg->name, sizeof(seg->name));
		fd = fault_sim("shm_open") ? (errno = EIO, -1) :
		     shm_open(seg->name, O_RDWR | O_CREAT | O_EXCL, 0600);
		if (fd >= 0)
			break;
		if (errno != EEXIST || ++tries > 8) {
			ret = -errno;
			goto out;
		}
	}
	if (ftruncate(fd, (off_t)hdr.segment_size)) {
		ret = -errno;
		goto out_unlink;
	}
	base = fault_sim("mmap") ? (errno = ENOMEM, MAP_FAILED) :
	       mmap(NULL, hdr.segment_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		ret = -errno;
		goto out_unlink;
	}
	close(fd);
	seg->base = base;
	seg->size = hdr.segment_size;
	seg->owner = true;
	seg->hdr = base;
	memcpy(seg->hdr, &hdr, sizeof(hdr));
	for (uint32_t i = 0; i < hdr.n_shards; i++) {
		if (sem_init(&shm_channel_at(seg, i)->dispatch_sem, 1, 0)) {
			ret = -errno;
			munmap(base, hdr.segment_size);
			seg->base = NULL;
			seg->hdr = NULL;
			fd = -1;
			goto out_unlink;
		}
	}
	return 0;

out_unlink:
	shm_unlink(seg->name);
	if (fd >= 0)
		close(fd);
out:
	seg->name[0] = '\0';
	return ret;
}

void shm_segment_unlink(struct shm_segment *seg)
{
	if (seg->owner && seg->name[0])
		shm_unlink(seg->name);
	seg->name[0] = '\0';
}

void shm_segment_destroy(struct shm_segment *seg)
{
	if (!seg)
		return;
	shm_segment_unlink(seg);
	if (seg->base)
		munmap(seg->base, seg->size);
	seg->base = NULL;
	seg->hdr = NULL;
}

int shm_segment_attach(struct shm_segment *seg, const char *name,
		       uint32_t shard, char *err, size_t err_len)
{
	struct shm_header hdr;
	struct stat st;
	void *base, *ch, *tokens;
	uint64_t tokens_off;
	int fd, ret;

	memset(seg, 0, sizeof(*seg));
	snprintf(seg->name, sizeof(seg->name), "%s", name);
	fd = shm_open(name, O_RDWR, 0);
	if (fd < 0) {
		ret = -errno;
		snprintf(err, err_len, "shm_open(%s): %s", name, strerror(errno));
		return ret;
	}
	if (fstat(fd, &st) || (size_t)st.st_size < sizeof(hdr) ||
	    pread(fd, &hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr)) {
		snprintf(err, err_len, "segment %s too small or unreadable", name);
		ret = -EPROTO;
		goto out_close;
	}
	ret = shm_header_validate(&hdr, (size_t)st.st_size, err, err_len);
	if (ret)
		goto out_close;
	if (shard >= hdr.n_shards) {
		snprintf(err, err_len, "shard %u out of range (segment has %u)",
			 shard, hdr.n_shards);
		ret = -EINVAL;
		goto out_close;
	}
	base = mmap(NULL, hdr.segment_size, PROT_READ, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		ret = -errno;
		snprintf(err, err_len, "mmap: %s", strerror(errno));
		goto out_close;
	}
	/* Our own channel, writable, over the read-only view. */
	ch = mmap((char *)base + hdr.off_channels + shard * hdr.channel_stride,
		  hdr.channel_stride, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
		  fd, (off_t)(hdr.off_channels + shard * hdr.channel_stride));
	if (ch == MAP_FAILED) {
		ret = -errno;
		snprintf(err, err_len, "mmap channel: %s", strerror(errno));
		munmap(base, hdr.segment_size);
		goto out_close;
	}
	/* Our own shard's token buffers, writable: we write what we generate. */
	tokens_off = hdr.off_tokens + shard * hdr.shard_token_stride;
	tokens = mmap((char *)base + tokens_off, hdr.shard_token_stride,
		      PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
		      (off_t)tokens_off);
	if (tokens == MAP_FAILED) {
		ret = -errno;
		snprintf(err, err_len, "mmap tokens: %s", strerror(errno));
		munmap(base, hdr.segment_size);
		goto out_close;
	}
	close(fd);
	seg->base = base;
	seg->size = hdr.segment_size;
	seg->hdr = base;
	return 0;

out_close:
	close(fd);
	return ret;
}

void shm_segment_detach(struct shm_segment *seg)
{
	if (seg && seg->base)
		munmap(seg->base, seg->size);
	if (seg) {
		seg->base = NULL;
		seg->hdr = NULL;
	}
}

void shm_channel_reset(const struct shm_segment *seg, uint32_t shard,
		       uint64_t dispatch_pos, uint64_t result_pos)
{
	struct shm_channel *ch = shm_channel_at(seg, shard);
	const struct shm_header *hdr = seg->hdr;

	for (uint64_t i = 0; i < hdr->ring_depth; i++) {
		atomic_store(&shm_dispatch_at(hdr, ch, i)->seq, 0);
		atomic_store(&shm_result_at(hdr, ch, i)->seq, 0);
	}
	ch->start_dispatch_pos = dispatch_pos;
	ch->start_result_pos = result_pos;
	atomic_store(&ch->results_consumed, result_pos);
	atomic_store(&ch->dispatch_adopted, dispatch_pos);
	atomic_store(&ch->worker_sleeping, 0);
	atomic_store(&ch->worker_ready_pid, 0);
	atomic_store(&ch->in_model_call, 0);
	/* The old worker is dead, so nobody waits on the semaphore. */
	sem_destroy(&ch->dispatch_sem);
	sem_init(&ch->dispatch_sem, 1, 0);
}

int shm_segment_reap_stale(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	int n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char path[SHM_NAME_MAX + 2];
		int pid;

		if (sscanf(e->d_name, "dynbatch-%d-", &pid) != 1 || pid <= 0)
			continue;
		if (kill(pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(path, sizeof(path), "/%.*s", SHM_NAME_MAX - 1, e->d_name);
		if (!shm_unlink(path)) {
			LOG(LOG_INFO, "removed stale segment %s of dead pid %d", path, pid);
			n++;
		}
	}
	closedir(d);
	return n;
}
