/*
 * unicode.c - UTF-8 decoding and the code point classes of unicode.h.
 *
 * The decoder follows the well-formed byte sequences of Unicode's table
 * 3-7 exactly, so overlong forms and surrogates are invalid; a class
 * lookup is a binary search over the generated ranges (about 800).
 */
#include "text/unicode.h"

enum unicode_class unicode_class_of(uint32_t cp)
{
	size_t lo = 0, hi = unicode_n_ranges;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (cp < unicode_ranges[mid].lo)
			hi = mid;
		else if (cp > unicode_ranges[mid].hi)
			lo = mid + 1;
		else
			return (enum unicode_class)unicode_ranges[mid].cls;
	}
	return UNICODE_OTHER;
}

static int is_cont(unsigned char c)
{
	return (c & 0xC0) == 0x80;
}

uint32_t unicode_decode(const char *str, size_t len, size_t *n)
{
	const unsigned char *s = (const unsigned char *)str;
	unsigned char c = s[0];

	*n = 1;
	if (c < 0x80)
		return c;
	if (c >= 0xC2 && c <= 0xDF) {
		if (len < 2 || !is_cont(s[1]))
			return UNICODE_INVALID;
		*n = 2;
		return ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
	}
	if (c >= 0xE0 && c <= 0xEF) {
		/* The second byte's range excludes overlongs (E0) and
		 * surrogates (ED). */
		unsigned char lo = c == 0xE0 ? 0xA0 : 0x80;
		unsigned char hi = c == 0xED ? 0x9F : 0xBF;

		if (len < 3 || s[1] < lo || s[1] > hi || !is_cont(s[2]))
			return UNICODE_INVALID;
		*n = 3;
		return ((uint32_t)(c & 0x0F) << 12) |
		       ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
	}
	if (c >= 0xF0 && c <= 0xF4) {
		/* F0 would be overlong below 0x90, F4 past U+10FFFF above 0x8F. */
		unsigned char lo = c == 0xF0 ? 0x90 : 0x80;
		unsigned char hi = c == 0xF4 ? 0x8F : 0xBF;

		if (len < 4 || s[1] < lo || s[1] > hi || !is_cont(s[2]) ||
		    !is_cont(s[3]))
			return UNICODE_INVALID;
		*n = 4;
		return ((uint32_t)(c & 0x07) << 18) |
		       ((uint32_t)(s[1] & 0x3F) << 12) |
		       ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
	}
	return UNICODE_INVALID;
}

size_t unicode_encode(uint32_t cp, char *out)
{
	unsigned char *o = (unsigned char *)out;

	if (cp < 0x80) {
		o[0] = (unsigned char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (unsigned char)(0xC0 | (cp >> 6));
		o[1] = (unsigned char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (unsigned char)(0xE0 | (cp >> 12));
		o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		o[2] = (unsigned char)(0x80 | (cp & 0x3F));
		return 3;
	}
	o[0] = (unsigned char)(0xF0 | (cp >> 18));
	o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
	o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
	o[3] = (unsigned char)(0x80 | (cp & 0x3F));
	return 4;
}
