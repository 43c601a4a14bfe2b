/*
 * fuzz_check.h - CHECK(), the fuzz targets' assert() that NDEBUG cannot
 * turn off: a failed check names its file, line and condition on stderr
 * and aborts, which libFuzzer reports as a crash and keeps the input.
 * Header-only, as the fuzz builds link only the sources they exercise.
 */
#ifndef DYNBATCH_FUZZ_CHECK_H
#define DYNBATCH_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

__attribute__((noreturn)) static inline void
fuzz_check_failed(const char *file, int line, const char *what)
{
	fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what);
	abort();
}

#define CHECK(cond) \
	do { \
		if (!(cond)) \
			fuzz_check_failed(__FILE__, __LINE__, #cond); \
	} while (0)

#endif /* DYNBATCH_FUZZ_CHECK_H */
