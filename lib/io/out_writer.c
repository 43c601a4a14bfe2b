/*
 * out_writer.c - see out_writer.h.
 */
#include "io/out_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include "io/io_ring.h"

/* One io_uring operation takes at most this many bytes (its length is a
 * 32-bit count); the rest goes in the next. */
#define OUT_WRITER_MAX_OP (1u << 30)

bool out_writer_arm(struct out_writer *w, struct io_ring *io, int fd,
		    bool is_socket, struct io_op *op)
{
	uint32_t len;

	if (w->inflight || !out_writer_pending(w))
		return false;
	if (!w->write.len) {
		struct strbuf t = w->write;

		w->write = w->fill;
		w->fill = t;
	}
	len = w->write.len > OUT_WRITER_MAX_OP ? OUT_WRITER_MAX_OP :
	      (uint32_t)w->write.len;
	if (is_socket ? io_ring_send(io, fd, w->write.data, len, op) :
			io_ring_write(io, fd, w->write.data, len, op))
		return false;
	w->inflight = true;
	return true;
}

void out_writer_done(struct out_writer *w, int32_t res)
{
	w->inflight = false;
	if (res > 0)
		strbuf_consume(&w->write, (size_t)res);
}

/* write() all of buf to a non-blocking fd, waiting at most stall_ms each
 * time it is full.  0, or -1 when it refuses more or stalls that long. */
static int write_all(int fd, const char *buf, size_t len, int stall_ms)
{
	while (len) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EAGAIN) {
			struct pollfd p = { .fd = fd, .events = POLLOUT };

			if (poll(&p, 1, stall_ms) <= 0)
				return -1;
			continue;
		}
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

int out_writer_flush_sync(struct out_writer *w, int fd, int stall_ms)
{
	int flags = fcntl(fd, F_GETFL);
	int ret = -1;

	/* non-blocking for the wait to be bounded; the descriptor's flags
	 * are put back (a dup of our stdout shares them with the shell) */
	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK))
		return -1;
	if (!write_all(fd, w->write.data, w->write.len, stall_ms) &&
	    !write_all(fd, w->fill.data, w->fill.len, stall_ms)) {
		strbuf_consume(&w->write, w->write.len);
		strbuf_consume(&w->fill, w->fill.len);
		ret = 0;
	}
	fcntl(fd, F_SETFL, flags);
	return ret;
}

void out_writer_release(struct out_writer *w)
{
	strbuf_release(&w->fill);
	strbuf_release(&w->write);
	w->inflight = false;
}

void out_writer_trim(struct out_writer *w, size_t keep)
{
	if (w->inflight)
		return;
	if (!w->write.len && w->write.cap > keep)
		strbuf_release(&w->write);
	if (!w->fill.len && w->fill.cap > keep)
		strbuf_release(&w->fill);
}
