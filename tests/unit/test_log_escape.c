/*
 * test_log_escape.c - log_escape() by hand-worked cases and by its
 * promises, checked on random strings against an independent decoder.
 *
 * The promises (log_escape.h): the output is printable, one line, valid
 * UTF-8 with no code point that moves or hides text; decoding its escapes
 * gives back the input exactly when nothing was cut; a cut output ends in
 * "...", fits the buffer and is a prefix of the uncut output.  The checks
 * decode UTF-8 with their own simple decoder (from the Unicode tables, not
 * the code under test).  The random test prints its seed; SEED=<n>
 * replays a run.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/log_escape.h"
#include "tests/unit/test_rng.h"

static void expect_escape(const char *in, const char *want)
{
	char buf[256];

	assert_string_equal(log_escape(in, buf, sizeof(buf)), want);
}

static void test_cases(void **state)
{
	(void)state;
	expect_escape("plain id-7", "plain id-7");
	expect_escape("a\nb", "a\\nb");
	expect_escape("x\r\n\t", "x\\r\\n\\t");
	expect_escape("\x1b[31mred", "\\x1b[31mred");
	expect_escape("back\\slash", "back\\\\slash");
	expect_escape("del\x7f", "del\\x7f");
	expect_escape("\x01\x1f", "\\x01\\x1f");
	expect_escape("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
		      "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");	/* kept */
	expect_escape("\xff", "\\xff");
	expect_escape("\xc3", "\\xc3");				/* cut short */
	expect_escape("\xc3(", "\\xc3(");
	expect_escape("\xc0\xaf", "\\xc0\\xaf");		/* overlong '/' */
	expect_escape("\xe0\x80\xaf", "\\xe0\\x80\\xaf");	/* overlong */
	expect_escape("\xed\xa0\x80", "\\xed\\xa0\\x80");	/* surrogate */
	expect_escape("\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"); /* > U+10FFFF */
	expect_escape("\xc2\x85", "\\xc2\\x85");		/* NEL, a C1 control */
	expect_escape("\xe2\x80\xa8", "\\xe2\\x80\\xa8");	/* U+2028 */
	expect_escape("\xe2\x80\xae", "\\xe2\\x80\\xae");	/* U+202E RLO */
	expect_escape("\xe2\x81\xa6", "\\xe2\\x81\\xa6");	/* U+2066 LRI */
	expect_escape("\xe2\x80\x8f", "\\xe2\\x80\\x8f");	/* U+200F RLM */
	expect_escape("", "");
	expect_escape(NULL, "(null)");
}

static void test_cut(void **state)
{
	char buf[8];

	(void)state;
	/* 7 bytes fit a buffer of 8 exactly; 8 are cut */
	assert_string_equal(log_escape("abcdefg", buf, 8), "abcdefg");
	assert_string_equal(log_escape("abcdefgh", buf, 8), "abcd...");
	/* an escape is never split */
	assert_string_equal(log_escape("abc\n", buf, 8), "abc\\n");
	assert_string_equal(log_escape("abc\x1b", buf, 8), "abc\\x1b");
	assert_string_equal(log_escape("abcd\x1b", buf, 8), "abcd...");
	/* nor a character */
	assert_string_equal(log_escape("ab\xf0\x9f\x98\x80z", buf, 8),
			    "ab\xf0\x9f\x98\x80z");
	assert_string_equal(log_escape("abc\xf0\x9f\x98\x80z", buf, 8), "abc...");
	assert_string_equal(log_escape("abcdefgh", buf, 4), "...");
	buf[0] = 'x';
	assert_string_equal(log_escape("abc", buf, 1), "");
	/* LOG_STR: at most LOG_ESCAPE_MAX bytes, whatever the input */
	{
		char big[1000];

		memset(big, '\n', sizeof(big) - 1);
		big[sizeof(big) - 1] = '\0';
		assert_int_equal(strlen(LOG_STR(big)), LOG_ESCAPE_MAX - 1);
		assert_string_equal(LOG_STR("id\n"), "id\\n");
	}
}

/* ------------------------------------------------------------------ */
/* The reference checks                                                */
/* ------------------------------------------------------------------ */

/*
 * Decode one UTF-8 character of out (the output is meant to be valid):
 * its code point and length, or 0 when invalid.  Straight from the
 * Unicode table of well-formed byte sequences.
 */
static size_t ref_utf8(const unsigned char *s, uint32_t *cp)
{
	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	if (s[0] >= 0xc2 && s[0] <= 0xdf && (s[1] & 0xc0) == 0x80) {
		*cp = (uint32_t)(s[0] & 0x1f) << 6 | (s[1] & 0x3f);
		return 2;
	}
	if (s[0] >= 0xe0 && s[0] <= 0xef && (s[1] & 0xc0) == 0x80 &&
	    (s[2] & 0xc0) == 0x80) {
		if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f))
			return 0;
		*cp = (uint32_t)(s[0] & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 |
		      (s[2] & 0x3f);
		return 3;
	}
	if (s[0] >= 0xf0 && s[0] <= 0xf4 && (s[1] & 0xc0) == 0x80 &&
	    (s[2] & 0xc0) == 0x80 && (s[3] & 0xc0) == 0x80) {
		if ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] > 0x8f))
			return 0;
		*cp = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3f) << 12 |
		      (uint32_t)(s[2] & 0x3f) << 6 | (s[3] & 0x3f);
		return 4;
	}
	return 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Check out is safe to print, and decode its escapes into dec (*n). */
static void check_and_decode(const char *out, size_t out_len, char *dec,
			     size_t *n)
{
	const unsigned char *p = (const unsigned char *)out;
	const unsigned char *end = p + out_len;

	*n = 0;
	while (p < end) {
		uint32_t cp;
		size_t k = ref_utf8(p, &cp);

		if (!k || cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f) ||
		    cp == 0x2028 || cp == 0x2029 || cp == 0x200e || cp == 0x200f ||
		    (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069)) {
			print_error("unsafe byte 0x%02x at %zu of \"%s\" (SEED=%llu)\n",
				    *p, (size_t)(p - (const unsigned char *)out), out,
				    test_seed);
			fail();
		}
		if (*p != '\\') {
			memcpy(dec + *n, p, k);
			*n += k;
			p += k;
			continue;
		}
		assert_true(p + 1 < end);
		switch (p[1]) {
		case 'n':
			dec[(*n)++] = '\n';
			p += 2;
			break;
		case 'r':
			dec[(*n)++] = '\r';
			p += 2;
			break;
		case 't':
			dec[(*n)++] = '\t';
			p += 2;
			break;
		case '\\':
			dec[(*n)++] = '\\';
			p += 2;
			break;
		case 'x':
			assert_true(p + 3 < end);
			assert_true(hexval((char)p[2]) >= 0 && hexval((char)p[3]) >= 0);
			dec[(*n)++] = (char)(hexval((char)p[2]) << 4 | hexval((char)p[3]));
			p += 4;
			break;
		default:
			print_error("unknown escape \\%c in \"%s\" (SEED=%llu)\n",
				    p[1], out, test_seed);
			fail();
		}
	}
}

/* A random string: ASCII, controls, valid and invalid UTF-8, mixed. */
static size_t gen_string(struct rng *r, char *s, size_t cap)
{
	static const char *const pieces[] = {
		"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xc2\x85",
		"\xe2\x80\xa8", "\xe2\x80\xae", "\xed\xa0\x80", "\xc0\xaf",
		"\xf4\x90\x80\x80", "\xe2\x82", "\x1b[2J", "\\x41", "\\n",
	};
	size_t len = 0, want = rng_below(r, 120);

	while (len < want && len + 8 < cap) {
		uint32_t k = rng_below(r, 10);

		if (k < 4) {
			s[len++] = (char)(' ' + rng_below(r, 95));
		} else if (k < 7) {
			s[len++] = (char)(1 + rng_below(r, 255));	/* no NUL */
		} else {
			const char *piece = pieces[rng_below(r, 13)];

			memcpy(s + len, piece, strlen(piece));
			len += strlen(piece);
		}
	}
	s[len] = '\0';
	return len;
}

static void test_random_round_trip(void **state)
{
	struct rng r = rng_for(1);

	(void)state;
	for (int round = 0; round < 20000; round++) {
		char in[200], full[1024], cut[1024], dec[1024];
		size_t n_in = gen_string(&r, in, sizeof(in)), n_dec;
		size_t len = 4 + rng_below(&r, 60), n_full, n_cut;

		/* room for everything: decodes back to the input */
		log_escape(in, full, sizeof(full));
		n_full = strlen(full);
		check_and_decode(full, n_full, dec, &n_dec);
		if (n_dec != n_in || memcmp(dec, in, n_in)) {
			print_error("round trip of a %zu-byte string failed: \"%s\" "
				    "(SEED=%llu)\n", n_in, full, test_seed);
			fail();
		}
		/* a small buffer: the output fits; if cut, it is a prefix of
		 * the full one plus "..." */
		log_escape(in, cut, len);
		n_cut = strlen(cut);
		assert_true(n_cut < len);
		if (n_cut == n_full && !strcmp(cut, full))
			continue;
		assert_true(n_cut >= 3 && !memcmp(cut + n_cut - 3, "...", 3));
		assert_memory_equal(cut, full, n_cut - 3);
		check_and_decode(cut, n_cut - 3, dec, &n_dec);
		assert_memory_equal(dec, in, n_dec);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cases),
		cmocka_unit_test(test_cut),
		cmocka_unit_test(test_random_round_trip),
	};

	test_seed_init("log_escape");
	return cmocka_run_group_tests_name("log_escape", tests, NULL, NULL);
}
