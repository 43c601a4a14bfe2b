/*
 * json_writer.h - unchecked writers for hand-built JSON on hot paths.
 *
 * The result lines and the HTTP answers are written once per finished
 * request or streamed step.  The caller reserves a worst-case size once
 * (json_str_bound() per string, JSON_TOKEN_MAX per number) and then these
 * write straight into the buffer and return the new end, so formatting has
 * a single failure point that leaves the buffer untouched.  Strings are
 * escaped as JSON requires; valid UTF-8 is copied as is and an invalid
 * byte becomes U+FFFD, so the output is always valid JSON.
 */
#ifndef DYNBATCH_JSON_WRITER_H
#define DYNBATCH_JSON_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Worst case bytes per number and separator: "-2147483648," or a u32. */
#define JSON_TOKEN_MAX 12
/* Worst case bytes for a uint64_t. */
#define JSON_U64_MAX 20

char *json_put_u64(char *p, uint64_t v);
char *json_put_i32(char *p, int32_t v);
char *json_put_lit(char *p, const char *s, size_t n);
#define JSON_PUT_LIT(p, s) json_put_lit((p), (s), sizeof(s) - 1)
/* s as a JSON string, or null for NULL; at most json_str_bound(s) bytes. */
char *json_put_str(char *p, const char *s);
/* Worst-case size of json_put_str(s), or SIZE_MAX when absurdly long. */
size_t json_str_bound(const char *s);
/* The n bytes at s (NULs and all: decoded text) as a JSON string; at most
 * json_strn_bound(n) bytes.  An invalid UTF-8 byte becomes U+FFFD, one
 * per byte, so text cut between two bytes of a sequence that can never
 * be valid renders the same in pieces as whole. */
char *json_put_strn(char *p, const char *s, size_t n);
size_t json_strn_bound(size_t n);
/* Whether s[0..n) is valid UTF-8 (what json_put_strn() copies as is). */
bool json_utf8_valid(const char *s, size_t n);

#endif /* DYNBATCH_JSON_WRITER_H */
