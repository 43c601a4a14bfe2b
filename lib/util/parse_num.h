/*
 * parse_num.h - strict decimal parsing for command lines and model specs.
 *
 * Digits only: no sign, no spaces, no hex, no trailing text, no overflow.
 * Every program and the sim model's key=value parser use these, so a bad
 * number is refused the same way everywhere.
 */
#ifndef DYNBATCH_PARSE_NUM_H
#define DYNBATCH_PARSE_NUM_H

#include <stddef.h>
#include <stdint.h>

/* Parse s[0..len) as a decimal in [min, max].  0 or -EINVAL. */
int parse_u64_n(const char *s, size_t len, uint64_t min, uint64_t max,
		uint64_t *out);

/* The same for a NUL-terminated string (NULL is -EINVAL). */
int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* The same into a uint32_t (max must fit). */
int parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out);

/*
 * A byte count: a decimal with an optional K, M, G or T suffix (either
 * case; powers of 1024), in [min, max] once scaled.  0 or -EINVAL.
 */
int parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *out);

#endif /* DYNBATCH_PARSE_NUM_H */
