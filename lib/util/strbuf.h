/*
 * strbuf.h - a growable byte buffer for output lines.
 *
 * Appends never truncate: on allocation failure they return -ENOMEM and
 * leave the buffer as it was.
 */
#ifndef DYNBATCH_STRBUF_H
#define DYNBATCH_STRBUF_H

#include <stddef.h>

struct strbuf {
	char *data;	/* malloc'd, NUL-terminated when len > 0 */
	size_t len;	/* bytes used, excluding the NUL */
	size_t cap;	/* bytes allocated */
};

#define STRBUF_INIT { NULL, 0, 0 }

/* Make room for extra more bytes (+ NUL).  0 or -ENOMEM. */
int strbuf_reserve(struct strbuf *sb, size_t extra);
/* Append n bytes.  0 or -ENOMEM. */
int strbuf_append(struct strbuf *sb, const void *p, size_t n);
/* Append a printf-formatted string.  0 or -ENOMEM. */
int strbuf_printf(struct strbuf *sb, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Drop the first n bytes (they were written out). */
void strbuf_consume(struct strbuf *sb, size_t n);
/* Free the memory; the buffer is empty and reusable afterwards. */
void strbuf_release(struct strbuf *sb);

#endif /* DYNBATCH_STRBUF_H */
