/*
 * strbuf.c - growable byte buffer; see strbuf.h.
 */
#include "util/strbuf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int strbuf_reserve(struct strbuf *sb, size_t extra)
{
	size_t need = sb->len + extra + 1;
	size_t cap;
	char *p;

	if (need <= sb->cap)
		return 0;
	cap = sb->cap ? sb->cap : 256;
	while (cap < need)
		cap *= 2;
	p = realloc(sb->data, cap);
	if (!p)
		return -ENOMEM;
	sb->data = p;
	sb->cap = cap;
	return 0;
}

int strbuf_append(struct strbuf *sb, const void *p, size_t n)
{
	if (strbuf_reserve(sb, n))
		return -ENOMEM;
	memcpy(sb->data + sb->len, p, n);
	sb->len += n;
	sb->data[sb->len] = '\0';
	return 0;
}

int strbuf_printf(struct strbuf *sb, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || strbuf_reserve(sb, (size_t)n))
		return -ENOMEM;
	va_start(ap, fmt);
	vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	sb->len += (size_t)n;
	return 0;
}

void strbuf_consume(struct strbuf *sb, size_t n)
{
	if (n >= sb->len) {
		sb->len = 0;
		if (sb->data)
			sb->data[0] = '\0';
		return;
	}
	memmove(sb->data, sb->data + n, sb->len - n);
	sb->len -= n;
	sb->data[sb->len] = '\0';
}

void strbuf_release(struct strbuf *sb)
{
	free(sb->data);
	sb->data = NULL;
	sb->len = 0;
	sb->cap = 0;
}
