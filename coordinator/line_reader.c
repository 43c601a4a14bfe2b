/*
 * line_reader.c - see line_reader.h.  Lines are handed out by advancing
 * start; the used prefix is dropped only when new bytes are fed, so a
 * buffer of many short lines costs one memmove per read, not per line.
 */
#include "line_reader.h"

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
	return strbuf_append(&lr->buf, data, n);
}

/* Drop everything buffered (inside an overlong line). */
static void line_reader_drop(struct line_reader *lr, size_t upto)
{
	lr->start = upto;
	lr->scan = 0;
}

enum line_status line_reader_next(struct line_reader *lr, const char **line,
				  size_t *len)
{
	if (!lr->buf.data)
		return LINE_NONE;	/* nothing fed yet (and no NULL + 0) */
	for (;;) {
		char *base = lr->buf.data + lr->start;
		size_t avail = lr->buf.len - lr->start;
		char *nl = avail > lr->scan ?
			   memchr(base + lr->scan, '\n', avail - lr->scan) : NULL;

		if (lr->discarding) {
			if (!nl) {
				line_reader_drop(lr, lr->buf.len);
				return LINE_NONE;
			}
			line_reader_drop(lr, lr->start + (size_t)(nl - base) + 1);
			lr->discarding = false;
			continue;
		}
		if (!nl) {
			lr->scan = avail;
			if (avail > lr->max_line) {
				lr->discarding = true;
				lr->line_no++;
				line_reader_drop(lr, lr->buf.len);
				return LINE_OVERLONG;
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
		if (*len > lr->max_line)
			return LINE_OVERLONG;
		if (*len && (*line)[*len - 1] == '\r')
			(*len)--;
		return LINE_OK;
	}
}
