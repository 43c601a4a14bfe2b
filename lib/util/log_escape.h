/*
 * log_escape.h - make an untrusted string safe to print in a log line.
 *
 * Request ids and anything else a client or an input line supplies are
 * printed in log lines; raw, a newline in one forges a second log line
 * and an ESC sequence rewrites the operator's terminal.  log_escape()
 * keeps printable ASCII and valid UTF-8 as they are and writes every
 * other byte as an escape, so the result is one line of printable text
 * that names the original bytes exactly:
 *
 *   \n \r \t        those three controls
 *   \\              a backslash (so an escape in the input is not ours)
 *   \xNN            any other byte below 0x20, DEL, every byte of an
 *                   invalid or overlong UTF-8 sequence, of a surrogate,
 *                   and of the code points that move or hide text: the C1
 *                   controls U+0080..U+009F, U+2028/U+2029 (line and
 *                   paragraph separators), the bidirectional controls
 *                   U+200E/U+200F, U+202A..U+202E, U+2066..U+2069
 *
 * The output is cut, at an escape or character boundary, to fit the
 * buffer; a cut string ends in "...".
 */
#ifndef DYNBATCH_LOG_ESCAPE_H
#define DYNBATCH_LOG_ESCAPE_H

#include <stddef.h>

/* Most bytes LOG_STR() writes, "..." included. */
#define LOG_ESCAPE_MAX 160

/*
 * Write s escaped into buf (len bytes, NUL included; len >= 4 so that a
 * cut string still fits its "...") and return buf.  A NULL s is written
 * as "(null)".
 */
const char *log_escape(const char *s, char *buf, size_t len);

/* s escaped into a buffer that lives until the end of the enclosing
 * block (a LOG() statement): LOG(LOG_WARN, "id '%s'", LOG_STR(id)). */
#define LOG_STR(s) log_escape((s), (char[LOG_ESCAPE_MAX + 1]){ 0 }, \
			      LOG_ESCAPE_MAX + 1)

#endif /* DYNBATCH_LOG_ESCAPE_H */
