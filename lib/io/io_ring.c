/*
 * io_ring.c - see io_ring.h.
 */
#include "io/io_ring.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "util/fault_sim.h"

int io_ring_init(struct io_ring *r, uint32_t entries)
{
	memset(r, 0, sizeof(*r));
	if (fault_sim("io_uring_queue_init"))
		return -ENOSYS;
	return io_uring_queue_init(entries, &r->ring, 0);
}

void io_ring_exit(struct io_ring *r)
{
	if (r->ring.ring_fd > 0)
		io_uring_queue_exit(&r->ring);
	memset(r, 0, sizeof(*r));
}

static struct io_uring_sqe *io_ring_sqe(struct io_ring *r)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);

	if (!sqe) {
		/* Ring full of unsubmitted entries: flush and retry once. */
		io_uring_submit(&r->ring);
		sqe = io_uring_get_sqe(&r->ring);
	}
	return sqe;
}

/* A prepared entry carries its op; it counts as pending. */
static int io_ring_tag(struct io_ring *r, struct io_uring_sqe *sqe,
		       struct io_op *op)
{
	io_uring_sqe_set_data(sqe, op);
	r->n_pending++;
	return 0;
}

int io_ring_read(struct io_ring *r, int fd, void *buf, uint32_t len,
		 struct io_op *op)
{
	struct io_uring_sqe *sqe = io_ring_sqe(r);

	if (!sqe)
		return -EBUSY;
	/* offset -1: use and advance the file position (files and pipes) */
	io_uring_prep_read(sqe, fd, buf, len, (uint64_t)-1);
	return io_ring_tag(r, sqe, op);
}

int io_ring_write(struct io_ring *r, int fd, const void *buf, uint32_t len,
		  struct io_op *op)
{
	struct io_uring_sqe *sqe = io_ring_sqe(r);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_write(sqe, fd, buf, len, (uint64_t)-1);
	return io_ring_tag(r, sqe, op);
}

int io_ring_poll_in(struct io_ring *r, int fd, struct io_op *op)
{
	struct io_uring_sqe *sqe = io_ring_sqe(r);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_poll_add(sqe, fd, POLLIN);
	return io_ring_tag(r, sqe, op);
}

int io_ring_accept(struct io_ring *r, int fd, struct io_op *op)
{
	struct io_uring_sqe *sqe = io_ring_sqe(r);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_accept(sqe, fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	return io_ring_tag(r, sqe, op);
}

int io_ring_recv(struct io_ring *r, int fd, void *buf, uint32_t len,
		 struct io_op *op)
{
	struct io_uring_sqe *sqe = io_ring_sqe(r);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_recv(sqe, fd, buf, len, 0);
	return io_ring_tag(r, sqe, op);
}

int io_ring_send(struct io_ring *r, int fd, const void *buf, uint32_t len,
		 struct io_op *op)
{
	struct io_uring_sqe *sqe = io_ring_sqe(r);

	if (!sqe)
		return -EBUSY;
	/* MSG_NOSIGNAL: a client that went away is an error code, not SIGPIPE */
	io_uring_prep_send(sqe, fd, buf, len, MSG_NOSIGNAL);
	return io_ring_tag(r, sqe, op);
}

int io_ring_submit(struct io_ring *r)
{
	int ret = io_uring_submit(&r->ring);

	return ret < 0 ? ret : 0;
}

int io_ring_wait(struct io_ring *r, uint64_t timeout_ns)
{
	struct io_uring_cqe *cqe;
	int ret;

	if (timeout_ns == UINT64_MAX) {
		ret = io_uring_submit_and_wait(&r->ring, 1);
		ret = ret < 0 ? ret : io_uring_peek_cqe(&r->ring, &cqe);
	} else {
		struct __kernel_timespec ts = {
			.tv_sec = (long long)(timeout_ns / 1000000000ull),
			.tv_nsec = (long long)(timeout_ns % 1000000000ull),
		};
		ret = io_uring_submit_and_wait_timeout(&r->ring, &cqe, 1, &ts, NULL);
	}
	if (ret == -EAGAIN || ret == -ETIME || ret == -EINTR)
		return 0;
	return ret < 0 ? ret : 1;
}

int io_ring_dispatch(struct io_ring *r)
{
	struct io_uring_cqe *cqe;
	struct io_op *op;
	int32_t res;
	int ret = io_uring_peek_cqe(&r->ring, &cqe);

	if (ret == -EAGAIN)
		return 0;
	if (ret < 0)
		return ret;
	op = io_uring_cqe_get_data(cqe);
	res = cqe->res;
	/* Seen before done() runs: done() may queue and wait again. */
	io_uring_cqe_seen(&r->ring, cqe);
	r->n_pending--;
	op->done(op, res);
	return 1;
}
