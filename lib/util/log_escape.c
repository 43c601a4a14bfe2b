/*
 * log_escape.c - see log_escape.h.  The string is read one unit at a
 * time (one ASCII byte, one whole UTF-8 sequence, or one byte to escape);
 * each unit is written whole or not at all, so a cut never splits an
 * escape or a character.
 */
#include "util/log_escape.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (2..4), or 0. */
static size_t utf8_sequence(const unsigned char *s, uint32_t *cp)
{
	size_t n;
	uint32_t c, min;

	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		n = 2, c = s[0] & 0x1fu, min = 0x80;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		n = 3, c = s[0] & 0x0fu, min = 0x800;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		n = 4, c = s[0] & 0x07u, min = 0x10000;
	} else {
		return 0;
	}
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)	/* the NUL ends it here too */
			return 0;
		c = c << 6 | (s[i] & 0x3fu);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return n;
}

/* Code points that are valid but move, hide or break lines of text. */
static bool hides_text(uint32_t cp)
{
	return (cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 ||
	       cp == 0x200e || cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) ||
	       (cp >= 0x2066 && cp <= 0x2069);
}

/* The escape for byte c into out (at most 4 bytes); its length. */
static size_t escape_byte(unsigned char c, char *out)
{
	static const char hex[] = "0123456789abcdef";

	out[0] = '\\';
	switch (c) {
	case '\n':
		out[1] = 'n';
		return 2;
	case '\r':
		out[1] = 'r';
		return 2;
	case '\t':
		out[1] = 't';
		return 2;
	case '\\':
		out[1] = '\\';
		return 2;
	}
	out[1] = 'x';
	out[2] = hex[c >> 4];
	out[3] = hex[c & 15];
	return 4;
}

const char *log_escape(const char *s, char *buf, size_t len)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "(null)");
	size_t used = 0, cut_at = 0;	/* cut_at: the last unit boundary
					 * with room for "..." after it */

	if (len < 4) {	/* no room for "...": nothing can be said */
		if (len)
			buf[0] = '\0';
		return buf;
	}
	while (*p) {
		char unit[16];
		uint32_t cp = 0;
		size_t n_seq = *p >= 0x80 ? utf8_sequence(p, &cp) : 0;
		size_t n_in, n_out = 0;

		if (*p >= 0x20 && *p < 0x7f && *p != '\\') {
			unit[n_out++] = (char)*p;
			n_in = 1;
		} else if (n_seq && !hides_text(cp)) {
			memcpy(unit, p, n_seq);
			n_out = n_in = n_seq;
		} else {
			/* a sequence that hides text is escaped whole */
			n_in = n_seq ? n_seq : 1;
			for (size_t i = 0; i < n_in; i++)
				n_out += escape_byte(p[i], unit + n_out);
		}
		if (used + n_out >= len) {	/* no room left: cut */
			memcpy(buf + cut_at, "...", 3);
			used = cut_at + 3;
			break;
		}
		memcpy(buf + used, unit, n_out);
		used += n_out;
		p += n_in;
		if (used + 3 < len)
			cut_at = used;
	}
	buf[used] = '\0';
	return buf;
}
