/*
 * out_writer.h - double-buffered output on the io_uring loop.
 *
 * Answers are appended to `fill` while the bytes of `write` are being
 * written by one operation in flight; when that completes and `write` is
 * empty the two swap, so appending never waits for the descriptor and
 * never moves bytes that are being written.  Used for the result lines of
 * `dynbatch run` (a file or pipe: write) and each HTTP connection's
 * answers (a socket: send without SIGPIPE).
 */
#ifndef DYNBATCH_OUT_WRITER_H
#define DYNBATCH_OUT_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/strbuf.h"

struct io_op;
struct io_ring;

struct out_writer {
	struct strbuf fill;	/* new bytes are appended here */
	struct strbuf write;	/* the bytes of the operation in flight
				 * (and what an earlier one left) */
	bool inflight;		/* an operation on them is queued */
};

/* Bytes not yet written (in flight included). */
static inline size_t out_writer_pending(const struct out_writer *w)
{
	return w->fill.len + w->write.len;
}

/*
 * When no operation is in flight and bytes wait, queue the next one on fd
 * (send() when is_socket, else write()), with op as its completion.
 * Returns true if it queued one.
 */
bool out_writer_arm(struct out_writer *w, struct io_ring *io, int fd,
		    bool is_socket, struct io_op *op);

/* The operation completed with res (bytes written, or -errno): those bytes
 * are dropped; on an error nothing is (the caller decides). */
void out_writer_done(struct out_writer *w, int32_t res);

/* Write everything still held, older bytes first (after the loop has
 * ended), waiting at most stall_ms for the descriptor to take more each
 * time it is full: a reader that never reads cannot hold the exit up.
 * 0, or -1 when the descriptor refuses more or stalls that long. */
int out_writer_flush_sync(struct out_writer *w, int fd, int stall_ms);

/* Drop every byte and free the buffers; reusable afterwards. */
void out_writer_release(struct out_writer *w);

/* Free the empty buffers that grew past keep bytes (an answer far
 * larger than usual), so their memory is not held for good. */
void out_writer_trim(struct out_writer *w, size_t keep);

#endif /* DYNBATCH_OUT_WRITER_H */
