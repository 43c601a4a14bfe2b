/*
 * ref_bpe.c - the naive BPE encoders of ref_bpe.h.
 *
 * Symbols are (offset, length) ranges of one working string; a merge
 * joins two neighbours' ranges, so the string never changes.  Every
 * step rescans every adjacent pair and searches the merges or tokens
 * linearly: O(n^2 * vocabulary), for small test vocabularies only.  The
 * UTF-8 and byte-to-unicode rules are written here again, not taken
 * from lib/text.
 */
#include "tools/refdecode/ref_bpe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sym {
	size_t off;
	size_t len;
};

/* The lowest id whose text is s[0..n), or -1. */
static int32_t find_token(const struct tokenizer_vocab_spec *v, const char *s,
			  size_t n)
{
	for (uint32_t i = 0; i < v->n_tokens; i++)
		if (n && v->token_lens[i] == n && memcmp(v->tokens[i], s, n) == 0)
			return (int32_t)i;
	return -1;
}

/* The rank of merge "a b", or -1. */
static long find_merge(const struct tokenizer_vocab_spec *v, const char *a,
		       size_t la, const char *b, size_t lb)
{
	for (uint32_t r = 0; r < v->n_merges; r++) {
		const char *m = v->merges[r];

		if (v->merge_lens[r] == la + 1 + lb && memcmp(m, a, la) == 0 &&
		    m[la] == ' ' && memcmp(m + la + 1, b, lb) == 0)
			return (long)r;
	}
	return -1;
}

/* GPT-2's table: printable Latin-1 bytes are themselves, the rest take
 * 256, 257, ... in order. */
static unsigned byte_char(unsigned b)
{
	unsigned n = 0;

	if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)
		return b;
	for (unsigned i = 0; i < b; i++)
		if (!((i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE))
			n++;
	return 256 + n;
}

/* Merge symbol i with i + 1. */
static void join(struct sym *s, size_t *n, size_t i)
{
	s[i].len += s[i + 1].len;
	memmove(&s[i + 1], &s[i + 2], (*n - i - 2) * sizeof(*s));
	(*n)--;
}

long ref_bpe_word(const struct tokenizer_vocab_spec *v, const char *word,
		  size_t len, bool whole_word, int32_t *out)
{
	char *str = malloc(2 * len + 1);
	struct sym *s = malloc((len + 1) * sizeof(*s));
	size_t n = 0, at = 0;
	long count = 0;

	if (!str || !s) {
		free(str);
		free(s);
		return -1;
	}
	for (size_t i = 0; i < len; i++) {
		unsigned c = byte_char((unsigned char)word[i]);

		s[n].off = at;
		if (c < 0x80) {
			str[at++] = (char)c;
		} else {
			str[at++] = (char)(0xC0 | (c >> 6));
			str[at++] = (char)(0x80 | (c & 0x3F));
		}
		s[n].len = at - s[n].off;
		n++;
	}
	if (whole_word && find_token(v, str, at) >= 0) {
		out[count++] = find_token(v, str, at);
		n = 0;
	}
	for (;;) {
		long best = -1;
		size_t best_i = 0;

		for (size_t i = 0; i + 1 < n; i++) {
			long r = find_merge(v, str + s[i].off, s[i].len,
					    str + s[i + 1].off, s[i + 1].len);

			if (r >= 0 && (best < 0 || r < best)) {
				best = r;
				best_i = i;
			}
		}
		if (best < 0)
			break;
		join(s, &n, best_i);
	}
	for (size_t i = 0; i < n; i++)
		out[count++] = find_token(v, str + s[i].off, s[i].len);
	free(str);
	free(s);
	return count;
}

/* The length of the code point at p (1 for a byte that starts none),
 * from the definition of well-formed UTF-8. */
static size_t cp_len(const unsigned char *p, size_t left)
{
	size_t n;
	unsigned lo = 0x80, hi = 0xBF;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xC2 && p[0] <= 0xDF)
		n = 2;
	else if (p[0] >= 0xE0 && p[0] <= 0xEF)
		n = 3;
	else if (p[0] >= 0xF0 && p[0] <= 0xF4)
		n = 4;
	else
		return 1;
	if (p[0] == 0xE0)
		lo = 0xA0;
	if (p[0] == 0xED)
		hi = 0x9F;
	if (p[0] == 0xF0)
		lo = 0x90;
	if (p[0] == 0xF4)
		hi = 0x8F;
	if (left < n || p[1] < lo || p[1] > hi)
		return 1;
	for (size_t k = 2; k < n; k++)
		if ((p[k] & 0xC0) != 0x80)
			return 1;
	return n;
}

long ref_spm_text(const struct tokenizer_vocab_spec *v, const char *text,
		  size_t len, bool prefix, int32_t *out)
{
	char *str = malloc(3 * len + 4);
	struct sym *s = malloc((3 * len + 4) * sizeof(*s));
	size_t n = 0, at = 0;
	long count = 0;

	if (!str || !s) {
		free(str);
		free(s);
		return -1;
	}
	if (prefix && len) {
		memcpy(str, "\xE2\x96\x81", 3);
		at = 3;
	}
	for (size_t i = 0; i < len; i++) {
		if (text[i] == ' ') {
			memcpy(str + at, "\xE2\x96\x81", 3);
			at += 3;
		} else {
			str[at++] = text[i];
		}
	}
	for (size_t i = 0; i < at; i += s[n - 1].len) {
		s[n].off = i;
		s[n].len = cp_len((const unsigned char *)str + i, at - i);
		n++;
	}
	for (;;) {
		int32_t best = -1;
		size_t best_i = 0;

		for (size_t i = 0; i + 1 < n; i++) {
			int32_t id = find_token(v, str + s[i].off,
						s[i].len + s[i + 1].len);
			int32_t type = id >= 0 && v->token_types ? v->token_types[id] : 1;

			/* Only text pieces are merge results. */
			if (type == GGUF_TOKEN_CONTROL || type == GGUF_TOKEN_BYTE ||
			    type == GGUF_TOKEN_UNKNOWN)
				continue;
			if (id >= 0 && (best < 0 || v->scores[id] > v->scores[best])) {
				best = id;
				best_i = i;
			}
		}
		if (best < 0)
			break;
		join(s, &n, best_i);
	}
	for (size_t i = 0; i < n; i++) {
		int32_t id = find_token(v, str + s[i].off, s[i].len);

		if (id >= 0) {
			out[count++] = id;
			continue;
		}
		for (size_t k = 0; k < s[i].len; k++) {
			char hex[8];

			snprintf(hex, sizeof(hex), "<0x%02X>",
				 (unsigned char)str[s[i].off + k]);
			out[count++] = find_token(v, hex, 6);
		}
	}
	free(str);
	free(s);
	return count;
}
