/*
 * line_reader.c - see line_reader.h.  Lines are handed out by advancing
 * start; the used prefix is dropped only when new bytes are fed, so a
 * buffer of many short lines costs one memmove per read, not per line.
 *
 * An overlong line goes through three states: found (its bytes so far
 * exceed max_line: they are dropped and counted, discarding is set),
 * dropped as it arrives (line_reader_feed() counts bytes up to the '\n'
 * without buffering them), ended (overlong_ended, or eof while
 * discarding): line_reader_next() reports it, then goes on after it.
 */
#include "server/jsonl/line_reader.h"

#include <stdio.h>
#include <string.h>

void line_reader_init(struct line_reader *lr, size_t max_line)
{
	memset(lr, 0, sizeof(*lr));
	lr->max_line = max_line;
}

void line_reader_release(struct line_reader *lr)
{
	strbuf_release(&lr->buf);
}

int line_reader_feed(struct line_reader *lr, const void *data, size_t n)
{
	if (lr->start) {
		strbuf_consume(&lr->buf, lr->start);
		lr->start = 0;
	}
	if (lr->discarding && !lr->overlong_ended) {
		/* nothing is buffered while discarding: count, do not copy */
		const char *nl = memchr(data, '\n', n);

		if (!nl) {
			lr->overlong_len += n;
			return 0;
		}
		lr->overlong_len += (size_t)(nl - (const char *)data);
		lr->overlong_ended = true;
		n -= (size_t)(nl - (const char *)data) + 1;
		data = nl + 1;
	}
	return strbuf_append(&lr->buf, data, n);
}

/* Hand out (or drop) everything before upto. */
static void line_reader_drop(struct line_reader *lr, size_t upto)
{
	lr->start = upto;
	lr->scan = 0;
}

/* The overlong line being dropped has ended: report it. */
static enum line_status line_reader_end_overlong(struct line_reader *lr)
{
	lr->discarding = false;
	lr->overlong_ended = false;
	lr->line_no++;
	return LINE_OVERLONG;
}

enum line_status line_reader_next(struct line_reader *lr, const char **line,
				  size_t *len)
{
	char *base, *nl;
	size_t avail;

	if (lr->discarding) {
		if (lr->overlong_ended || lr->eof)
			return line_reader_end_overlong(lr);
		return LINE_NONE;
	}
	if (!lr->buf.data)
		return LINE_NONE;	/* nothing fed yet (and no NULL + 0) */
	base = lr->buf.data + lr->start;
	avail = lr->buf.len - lr->start;
	nl = avail > lr->scan ? memchr(base + lr->scan, '\n', avail - lr->scan) : NULL;
	if (!nl) {
		lr->scan = avail;
		if (avail > lr->max_line) {
			/* too long already: drop what we have, count the rest */
			lr->discarding = true;
			lr->overlong_len = avail;
			line_reader_drop(lr, lr->buf.len);
			return lr->eof ? line_reader_end_overlong(lr) : LINE_NONE;
		}
		if (!lr->eof || !avail)
			return LINE_NONE;
		/* A last line without a newline. */
		lr->line_no++;
		*line = base;
		*len = avail;
		line_reader_drop(lr, lr->buf.len);
		if ((*line)[*len - 1] == '\r')
			(*len)--;
		return LINE_OK;
	}
	lr->line_no++;
	*line = base;
	*len = (size_t)(nl - base);
	line_reader_drop(lr, lr->start + *len + 1);
	if (*len > lr->max_line) {
		lr->overlong_len = *len;
		return LINE_OVERLONG;
	}
	if (*len && (*line)[*len - 1] == '\r')
		(*len)--;
	return LINE_OK;
}

bool line_reader_wants_bytes(const struct line_reader *lr, size_t read_size)
{
	size_t buffered = line_reader_buffered(lr);

	return !lr->eof && (buffered < read_size || lr->scan >= buffered);
}

void line_reader_overlong_error(const struct line_reader *lr, char *err,
				size_t err_len)
{
	snprintf(err, err_len, "line %llu: %llu bytes, longer than the limit of "
		 "%zu bytes (--max-line)", (unsigned long long)lr->line_no,
		 (unsigned long long)lr->overlong_len, lr->max_line);
}
