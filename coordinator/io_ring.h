/*
 * io_ring.h - the coordinator's event loop on io_uring.
 *
 * Every blocking wait of the coordinator is one io_uring_wait: input
 * reads, output writes, the signalfd (SIGINT/SIGTERM), each worker's
 * pidfd (readable when the process exits), each worker's notification
 * pipe and the parser thread's eventfd (written to wake a sleeping
 * coordinator), and for `dynbatch serve` the
 * listening socket and every HTTP connection.  Operations carry a tag (what they
 * are for) and an index (which worker) in their user_data; completions
 * are handed back through io_ring_next().
 */
#ifndef DYNBATCH_IO_RING_H
#define DYNBATCH_IO_RING_H

#include <liburing.h>
#include <stdbool.h>
#include <stdint.h>

enum io_tag {
	IO_TAG_INPUT = 1,	/* read of the input descriptor */
	IO_TAG_OUTPUT,		/* write of the output descriptor */
	IO_TAG_SIGNAL,		/* read of the signalfd */
	IO_TAG_PIDFD,		/* poll of a worker's pidfd; index = shard */
	IO_TAG_NOTIFY,		/* read of the parser thread's eventfd */
	IO_TAG_ACCEPT,		/* serve: accept on the listening socket */
	IO_TAG_RECV,		/* serve: recv on a connection; index = conn */
	IO_TAG_SEND,		/* serve: send on a connection; index = conn */
	IO_TAG_WORKER_NOTIFY,	/* read of a worker's notification pipe;
				 * index = shard | pipe epoch << 16 */
};

struct io_event {
	enum io_tag tag;
	uint32_t index;
	int32_t res;		/* the operation's result (bytes or -errno) */
};

struct io_ring {
	struct io_uring ring;
	uint32_t n_pending;	/* submitted, not yet completed */
};

/* 0 or a negative errno. */
int io_ring_init(struct io_ring *r, uint32_t entries);
void io_ring_exit(struct io_ring *r);

int io_ring_read(struct io_ring *r, int fd, void *buf, uint32_t len,
		 enum io_tag tag, uint32_t index);
int io_ring_write(struct io_ring *r, int fd, const void *buf, uint32_t len,
		  enum io_tag tag, uint32_t index);
int io_ring_poll_in(struct io_ring *r, int fd, enum io_tag tag, uint32_t index);
/* Accept one connection (non-blocking, close-on-exec); res is its fd. */
int io_ring_accept(struct io_ring *r, int fd, enum io_tag tag, uint32_t index);
int io_ring_recv(struct io_ring *r, int fd, void *buf, uint32_t len,
		 enum io_tag tag, uint32_t index);
/* send() without SIGPIPE. */
int io_ring_send(struct io_ring *r, int fd, const void *buf, uint32_t len,
		 enum io_tag tag, uint32_t index);

/* Submit what was queued; 0 or a negative errno. */
int io_ring_submit(struct io_ring *r);

/*
 * Take one completion.  With timeout_ns == 0 it does not block; otherwise
 * it waits up to timeout_ns (UINT64_MAX: no limit).  Returns 1 with *ev
 * filled, 0 when none came, or a negative errno.
 */
int io_ring_next(struct io_ring *r, uint64_t timeout_ns, struct io_event *ev);

/* True when a completion is waiting (no syscall). */
static inline bool io_ring_has_event(struct io_ring *r)
{
	return io_uring_cq_ready(&r->ring) > 0;
}

#endif /* DYNBATCH_IO_RING_H */
