/*
 * err_fail.h - the refusal of a parser or builder that reports into its
 * caller's buffer: write the message (when there is a buffer) and give
 * -EINVAL, so `return err_fail(err, err_len, "...", ...);` is one line.
 */
#ifndef DYNBATCH_ERR_FAIL_H
#define DYNBATCH_ERR_FAIL_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

__attribute__((format(printf, 3, 4)))
static inline int err_fail(char *err, size_t err_len, const char *fmt, ...)
{
	va_list ap;

	if (err && err_len) {
		va_start(ap, fmt);
		vsnprintf(err, err_len, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

#endif /* DYNBATCH_ERR_FAIL_H */
