/*
 * line_reader.h - split an input byte stream into lines, incrementally.
 *
 * Bytes arrive in chunks (io_uring reads); complete lines are handed out
 * one at a time, so the caller can stop taking lines while its queue is
 * full.  Memory stays bounded whatever the input: the caller reads only
 * while line_reader_wants_bytes() says so (fewer than one read's worth
 * buffered, or no complete line among the bytes buffered), and a line
 * longer than max_line is not kept: once it has grown past max_line its
 * bytes are dropped as they arrive (line_reader_feed() does not even copy
 * them), only counted, up to the next newline.  Then the line is reported
 * as overlong with its full length, in its place among the lines.  So the
 * buffer holds at most max(max_line, one read) + one read, even for an
 * endless line.
 * A last line without a newline counts at end of input.
 */
#ifndef DYNBATCH_LINE_READER_H
#define DYNBATCH_LINE_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/strbuf.h"

struct line_reader {
	struct strbuf buf;	/* bytes read; those before start are used */
	size_t start;		/* first unconsumed byte of buf */
	size_t scan;		/* bytes after start known to hold no '\n' */
	size_t max_line;	/* longest line accepted, bytes */
	uint64_t line_no;	/* number of the last line handed out */
	uint64_t overlong_len;	/* bytes of the overlong line being dropped,
				 * or (after LINE_OVERLONG) of the one reported */
	bool discarding;	/* inside an overlong line: nothing buffered */
	bool overlong_ended;	/* the dropped line's '\n' came: report it */
	bool eof;		/* no more bytes will come */
};

enum line_status {
	LINE_NONE = 0,		/* need more bytes (or done, at eof) */
	LINE_OK,		/* *line / *len is the next line */
	LINE_OVERLONG,		/* line line_no was longer than max_line; it
				 * had overlong_len bytes before its '\n' */
};

void line_reader_init(struct line_reader *lr, size_t max_line);
void line_reader_release(struct line_reader *lr);

/* Append bytes read from the input.  0 or -ENOMEM. */
int line_reader_feed(struct line_reader *lr, const void *data, size_t n);

/*
 * The next line, without its newline (and without a trailing '\r').  The
 * pointer stays valid until the next feed.
 */
enum line_status line_reader_next(struct line_reader *lr, const char **line,
				  size_t *len);

/* Bytes buffered that have not been handed out. */
static inline size_t line_reader_buffered(const struct line_reader *lr)
{
	return lr->buf.len - lr->start;
}

/* True when every line has been handed out (overlong ones reported)
 * and nothing is buffered: at eof, the input is done. */
static inline bool line_reader_drained(const struct line_reader *lr)
{
	return !line_reader_buffered(lr) && !lr->discarding;
}

/*
 * Should the caller read up to read_size more bytes now?  True until eof
 * while fewer than read_size bytes are buffered, or while the bytes
 * buffered hold no complete line (line_reader_next() has said LINE_NONE
 * since the last feed): without more input no line can come.
 */
bool line_reader_wants_bytes(const struct line_reader *lr, size_t read_size);

/* Describe the overlong line just reported ("line N: 300031 bytes, over
 * the limit of ...") into err. */
void line_reader_overlong_error(const struct line_reader *lr, char *err,
				size_t err_len);

#endif /* DYNBATCH_LINE_READER_H */
