/*
 * line_reader.h - split an input byte stream into lines, incrementally.
 *
 * Bytes arrive in chunks (io_uring reads); complete lines are handed out
 * one at a time, so the caller can stop taking lines while its queue is
 * full and the buffer stays bounded by one read plus one line.  A line
 * longer than max_line is reported as overlong (its length only) and its
 * bytes are discarded up to the next newline, so a runaway line cannot
 * exhaust memory.  A last line without a newline counts at end of input.
 */
#ifndef DYNBATCH_LINE_READER_H
#define DYNBATCH_LINE_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strbuf.h"

struct line_reader {
	struct strbuf buf;	/* bytes read; those before start are used */
	size_t start;		/* first unconsumed byte of buf */
	size_t scan;		/* bytes after start known to hold no '\n' */
	size_t max_line;	/* longest line accepted, bytes */
	uint64_t line_no;	/* number of the last line handed out */
	bool discarding;	/* inside an overlong line */
	bool eof;		/* no more bytes will come */
};

enum line_status {
	LINE_NONE = 0,		/* need more bytes (or done, at eof) */
	LINE_OK,		/* *line / *len is the next line */
	LINE_OVERLONG,		/* line line_no was longer than max_line */
};

void line_reader_init(struct line_reader *lr, size_t max_line);
void line_reader_release(struct line_reader *lr);

/* Append bytes read from the input.  0 or -ENOMEM. */
int line_reader_feed(struct line_reader *lr, const void *data, size_t n);

/*
 * The next line, without its newline (and without a trailing '\r').  The
 * pointer stays valid until the next call.
 */
enum line_status line_reader_next(struct line_reader *lr, const char **line,
				  size_t *len);

/* True when bytes are buffered that do not yet form a complete line. */
static inline size_t line_reader_buffered(const struct line_reader *lr)
{
	return lr->buf.len - lr->start;
}

#endif /* DYNBATCH_LINE_READER_H */
