/*
 * io_ring.h - the coordinator's event loop on io_uring.
 *
 * Every blocking wait of the coordinator is one io_uring_wait: input
 * reads, output writes, the signalfd (SIGINT/SIGTERM), each worker's
 * pidfd (readable when the process exits), each worker's notification
 * pipe and the parser thread's eventfd (written to wake a sleeping
 * coordinator), and for `dynbatch serve` the listening socket and every
 * HTTP connection.
 *
 * Each operation carries its own callback: its owner embeds a struct io_op
 * (the callback and an argument) in its own state and passes it with the
 * operation; the op's address travels as the entry's user_data, and
 * io_ring_dispatch() calls op->done() with the result.  So the loop that
 * reaps completions knows no list of consumers (h2o's io_uring commands,
 * redis ae's per-descriptor callbacks).  An op must stay valid until its
 * completion has been dispatched; an owner that goes away first must keep
 * the op (or cancel and wait for the completion).
 */
#ifndef DYNBATCH_IO_RING_H
#define DYNBATCH_IO_RING_H

#include <liburing.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct io_op {
	/* Called once per completion, from io_ring_dispatch(), with the
	 * operation's result (bytes, a descriptor, poll bits, or -errno).
	 * It may queue new operations, this op included. */
	void (*done)(struct io_op *op, int32_t res);
	void *arg;		/* the owner's, for done() */
};

/* The struct that embeds member (an io_op) at ptr. */
#define io_op_owner(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

struct io_ring {
	struct io_uring ring;
	uint32_t n_pending;	/* submitted, not yet completed */
};

/* 0 or a negative errno.  Every queueing function below returns 0 or
 * -EBUSY (no submission entry free). */
int io_ring_init(struct io_ring *r, uint32_t entries);
void io_ring_exit(struct io_ring *r);

int io_ring_read(struct io_ring *r, int fd, void *buf, uint32_t len,
		 struct io_op *op);
int io_ring_write(struct io_ring *r, int fd, const void *buf, uint32_t len,
		  struct io_op *op);
int io_ring_poll_in(struct io_ring *r, int fd, struct io_op *op);
/* Accept one connection (non-blocking, close-on-exec); res is its fd. */
int io_ring_accept(struct io_ring *r, int fd, struct io_op *op);
int io_ring_recv(struct io_ring *r, int fd, void *buf, uint32_t len,
		 struct io_op *op);
/* send() without SIGPIPE. */
int io_ring_send(struct io_ring *r, int fd, const void *buf, uint32_t len,
		 struct io_op *op);

/* Submit what was queued; 0 or a negative errno. */
int io_ring_submit(struct io_ring *r);

/*
 * Submit what was queued and wait up to timeout_ns (UINT64_MAX: no limit)
 * for a completion, without taking it.  Returns 1 when one is ready, 0
 * when none came in time, or a negative errno.
 */
int io_ring_wait(struct io_ring *r, uint64_t timeout_ns);

/*
 * Take one ready completion, without blocking, and call its op's done().
 * Returns 1 when it dispatched one, 0 when none was ready, or a negative
 * errno.
 */
int io_ring_dispatch(struct io_ring *r);

/* True when a completion is waiting (no syscall). */
static inline bool io_ring_has_event(struct io_ring *r)
{
	return io_uring_cq_ready(&r->ring) > 0;
}

#endif /* DYNBATCH_IO_RING_H */
