/*
 * utf8_strict.h - the tools' own strict UTF-8 check (the workload
 * generator's and the reference decoder's), written apart from the
 * engine's JSON writer on purpose: the reference must not share it.
 */
#ifndef DYNBATCH_UTF8_STRICT_H
#define DYNBATCH_UTF8_STRICT_H

#include <stddef.h>

/* Length of the valid UTF-8 sequence at s[0..n), or 0 (Unicode's table
 * of well-formed byte sequences, written out: no overlong form,
 * surrogate or code point past U+10FFFF). */
static inline size_t utf8_strict_seq(const unsigned char *s, size_t n)
{
	unsigned char b = s[0], lo = 0x80, hi = 0xBF;
	size_t len;

	if (b < 0x80)
		return 1;
	if (b >= 0xC2 && b <= 0xDF)
		len = 2;
	else if (b >= 0xE0 && b <= 0xEF)
		len = 3;
	else if (b >= 0xF0 && b <= 0xF4)
		len = 4;
	else
		return 0;
	if (b == 0xE0)
		lo = 0xA0;
	else if (b == 0xED)
		hi = 0x9F;
	else if (b == 0xF0)
		lo = 0x90;
	else if (b == 0xF4)
		hi = 0x8F;
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xBF)
			return 0;
	return len;
}

#endif /* DYNBATCH_UTF8_STRICT_H */
