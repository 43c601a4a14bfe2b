/*
 * tok_compare.c - checks lib/text/gguf_tokenizer.c against the real
 * tokenizers (make test-tokenizers): loads a vocabulary and its cases as
 * tests/tokenizers/export_vocab.js writes them, encodes every case and
 * compares id for id, then checks that decoding gives the text back;
 * and round-trips a set of invalid UTF-8 strings that the reference
 * cannot see (JavaScript strings hold no invalid UTF-8).
 *
 *   tok_compare NAME.vocab NAME.cases
 *
 * Prints each mismatch (text escaped, both id lists), then a closing
 * "N passed, N failed" line; exit status 1 on any failure, 2 on a bad
 * file or a vocabulary the tokenizer refuses.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/gguf_tokenizer.h"
#include "tools/vocab/vocab_file.h"
#include "util/log_escape.h"

static void print_ids(const char *what, const int32_t *ids, size_t n)
{
	printf("  %s (%zu):", what, n);
	for (size_t i = 0; i < n && i < 64; i++)
		printf(" %d", ids[i]);
	printf("%s\n", n > 64 ? " ..." : "");
}

/* Encode text and compare with want (NULL: round trip only); 0 = pass. */
static int check_case(const struct gguf_tokenizer *t, const char *text,
		      uint32_t len, bool parse_special, const int32_t *want,
		      size_t n_want)
{
	size_t cap = gguf_tokenizer_encode_max(len), n, n_dec;
	int32_t *ids = malloc(cap * sizeof(*ids));
	char *dec = malloc(len + 16);
	int rc = 0;

	if (!ids || !dec) {
		free(ids);
		free(dec);
		return 1;
	}
	if (gguf_tokenizer_encode(t, text, len, false, parse_special, ids, cap, &n)) {
		printf("FAIL encode error on '%s'\n", LOG_STR(text));
		rc = 1;
	} else if (want && (n != n_want || memcmp(ids, want, n * sizeof(*ids)))) {
		printf("FAIL ids differ on '%s'\n", LOG_STR(text));
		print_ids("expected", want, n_want);
		print_ids("got", ids, n);
		rc = 1;
	} else if (gguf_tokenizer_decode(t, -1, ids, n, true, dec, len + 16, &n_dec) ||
		   n_dec != len || memcmp(dec, text, len)) {
		printf("FAIL decode(encode(s)) != s on '%s'\n", LOG_STR(text));
		rc = 1;
	}
	free(ids);
	free(dec);
	return rc;
}

#define BYTES(s) { s, sizeof(s) - 1 }
static const struct {
	const char *s;
	uint32_t len;
} invalid_utf8[] = {
	BYTES("\xff"), BYTES("a\x80 b"), BYTES("\xc3"), BYTES("\xe2\x82"),
	BYTES("\xf0\x9f\x98"), BYTES("\xed\xa0\x80"), BYTES("\xc0\xaf x"),
	BYTES("caf\xe9 ol\xe9"), BYTES("\xf5\x80\x80\x80"),
	BYTES(" \xfe\xfe\n\n\x80"), BYTES("abc def\x00ghi \x00"),
};

int main(int argc, char **argv)
{
	struct vocab_file v;
	struct gguf_tokenizer *t;
	char err[256], *line = NULL;
	size_t cap = 0, passed = 0, failed = 0;
	FILE *f;

	if (argc != 3) {
		fprintf(stderr, "usage: tok_compare NAME.vocab NAME.cases\n");
		return 2;
	}
	if (vocab_file_load(argv[1], &v)) {
		fprintf(stderr, "tok_compare: %s: bad vocabulary file\n", argv[1]);
		vocab_file_free(&v);
		return 2;
	}
	if (gguf_tokenizer_create(&v.spec, &t, err, sizeof(err))) {
		fprintf(stderr, "tok_compare: %s: %s\n", argv[1], err);
		vocab_file_free(&v);
		return 2;
	}
	vocab_file_free(&v);	/* the tokenizer holds its own copy */
	f = fopen(argv[2], "r");
	if (!f) {
		fprintf(stderr, "tok_compare: %s: %s\n", argv[2], strerror(errno));
		gguf_tokenizer_free(t);
		return 2;
	}
	while (vocab_read_line(f, &line, &cap)) {
		char hex[1 << 16];
		int special;
		uint32_t len;
		char *text;
		int32_t *want;
		size_t n_want = 0;

		if (sscanf(line, "case %65535s %d", hex, &special) != 2 ||
		    !(text = vocab_unhex(hex, &len)) || !vocab_read_line(f, &line, &cap)) {
			fprintf(stderr, "tok_compare: %s: bad case\n", argv[2]);
			return 2;
		}
		want = malloc((strlen(line) / 2 + 2) * sizeof(*want));
		for (char *p = line, *end; want && *p; p = end) {
			long id = strtol(p, &end, 10);

			if (end == p)
				break;
			want[n_want++] = (int32_t)id;
		}
		if (check_case(t, text, len, special, want, n_want))
			failed++;
		else
			passed++;
		free(want);
		free(text);
	}
	fclose(f);
	for (size_t i = 0; i < sizeof(invalid_utf8) / sizeof(invalid_utf8[0]); i++) {
		if (check_case(t, invalid_utf8[i].s, invalid_utf8[i].len, false,
			       NULL, 0))
			failed++;
		else
			passed++;
	}
	printf("%s: %zu passed, %zu failed\n", argv[1], passed, failed);
	free(line);
	gguf_tokenizer_free(t);
	return failed ? 1 : 0;
}
