/*
 * worker_loop.h - the worker's serve loop: wait for a dispatch on its
 * shard's channel, run the model on the rows in place, post the result.
 */
#ifndef DYNBATCH_WORKER_LOOP_H
#define DYNBATCH_WORKER_LOOP_H

#include <stddef.h>
#include <stdint.h>

struct model;
struct shm_segment;
struct shm_header;
struct shm_channel;

/*
 * A test hook (tests/plugins/hostile_worker.c): called for each result record the
 * worker has filled in at ring position *pos, in place of publishing it.
 * It may rewrite the record, publishes what it likes (shm_entry_publish())
 * and leaves *pos at the next position the worker is to write.
 */
struct worker_result_hook {
	void (*publish)(void *arg, const struct shm_header *hdr,
			struct shm_channel *ch, uint64_t *pos);
	void *arg;
};

struct worker_options {
	int shared_fd;		/* the shared object, read-only */
	int shard_fd;		/* our shard's object */
	uint32_t shard;		/* which shard is ours */
	const char *model_spec;	/* --model SPEC */
	int notify_fd;		/* pipe write end that wakes the coordinator */
	uint64_t spin_ns;	/* how long to spin before sleeping */
	uint32_t garbage_every;	/* test mode: every Nth result is garbage */
	/* Called once the segment is attached and the model loaded, before
	 * the worker says it is ready (main.c enters the sandbox here);
	 * NULL: nothing.  Returns 0, or nonzero after writing err: the
	 * worker then exits 1 without serving. */
	int (*before_serving)(const struct worker_options *opt, char *err,
			      size_t err_len);
	const struct worker_result_hook *result_hook; /* tests; NULL: honest */
};

/*
 * Attach, load the model and serve until the coordinator goes away.
 * Returns the process exit status (0 when the coordinator ended us
 * normally, 1 on an error, already logged).
 */
int worker_run(const struct worker_options *opt);

#endif /* DYNBATCH_WORKER_LOOP_H */
