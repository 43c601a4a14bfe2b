/*
 * json_writer.c - see json_writer.h.
 */
#include "util/json_writer.h"

#include <stdint.h>
#include <string.h>

/* Worst case bytes per string byte: "\u00XX" or "\ufffd". */
#define ESC_MAX 6

static const char digits2[] =
	"00010203040506070809101112131415161718192021222324252627282930313233"
	"34353637383940414243444546474849505152535455565758596061626364656667"
	"6869707172737475767778798081828384858687888990919293949596979899";

char *json_put_u64(char *p, uint64_t v)
{
	char tmp[20];
	char *t = tmp + sizeof(tmp);
	size_t n;

	while (v >= 100) {
		unsigned d = (unsigned)(v % 100) * 2;

		v /= 100;
		*--t = digits2[d + 1];
		*--t = digits2[d];
	}
	if (v >= 10) {
		*--t = digits2[v * 2 + 1];
		*--t = digits2[v * 2];
	} else {
		*--t = (char)('0' + v);
	}
	n = (size_t)(tmp + sizeof(tmp) - t);
	memcpy(p, t, n);
	return p + n;
}

char *json_put_i32(char *p, int32_t v)
{
	if (v < 0) {
		*p++ = '-';
		return json_put_u64(p, (uint64_t)(-(int64_t)v));
	}
	return json_put_u64(p, (uint64_t)v);
}

char *json_put_lit(char *p, const char *s, size_t n)
{
	memcpy(p, s, n);
	return p + n;
}

/* Length of the valid UTF-8 sequence at s[0..n) (2..4), 0 if invalid. */
static size_t utf8_seq_len(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t need, i;

	if (c < 0xC2 || c > 0xF4)
		return 0;
	need = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
	if (n < need)
		return 0;
	for (i = 1; i < need; i++)
		if ((s[i] & 0xC0) != 0x80)
			return 0;
	if ((c == 0xE0 && s[1] < 0xA0) ||	/* overlong */
	    (c == 0xED && s[1] >= 0xA0) ||	/* surrogate */
	    (c == 0xF0 && s[1] < 0x90) ||	/* overlong */
	    (c == 0xF4 && s[1] >= 0x90))	/* above U+10FFFF */
		return 0;
	return need;
}

bool json_utf8_valid(const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t k;

	while (n) {
		k = *s < 0x80 ? 1 : utf8_seq_len(s, n);
		if (!k)
			return false;
		s += k;
		n -= k;
	}
	return true;
}

char *json_put_str(char *p, const char *str)
{
	if (!str)
		return JSON_PUT_LIT(p, "null");
	return json_put_strn(p, str, strlen(str));
}

char *json_put_strn(char *p, const char *str, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)str;
	size_t k;

	*p++ = '"';
	while (n) {
		unsigned c = *s;

		if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
			*p++ = (char)c;
			s++;
			n--;
			continue;
		}
		if (c >= 0x80) {
			k = utf8_seq_len(s, n);
			if (k) {
				p = json_put_lit(p, (const char *)s, k);
			} else {
				k = 1;
				p = JSON_PUT_LIT(p, "\\ufffd");
			}
			s += k;
			n -= k;
			continue;
		}
		*p++ = '\\';
		switch (c) {
		case '"':  *p++ = '"'; break;
		case '\\': *p++ = '\\'; break;
		case '\n': *p++ = 'n'; break;
		case '\r': *p++ = 'r'; break;
		case '\t': *p++ = 't'; break;
		case '\b': *p++ = 'b'; break;
		case '\f': *p++ = 'f'; break;
		default:
			p = JSON_PUT_LIT(p, "u00");
			*p++ = hex[c >> 4];
			*p++ = hex[c & 15];
		}
		s++;
		n--;
	}
	*p++ = '"';
	return p;
}

size_t json_strn_bound(size_t n)
{
	if (n > (SIZE_MAX / 4) / ESC_MAX)
		return SIZE_MAX;
	return 2 + n * ESC_MAX;
}

size_t json_str_bound(const char *s)
{
	return json_strn_bound(s ? strlen(s) : 4);
}

