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
#include "util/log_escape.h"

struct vocab_file {
	struct tokenizer_vocab_spec spec;
	char **texts;
	uint32_t *lens;
	float *scores;
	int32_t *types;
	char **merges;
	uint32_t *merge_lens;
	char model[32];
	char pre[64];
};

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Decode hex ("-" for empty) into a new buffer; NULL on a bad digit. */
static char *unhex(const char *h, uint32_t *len)
{
	size_t n = strlen(h);
	char *out;

	if (strcmp(h, "-") == 0)
		n = 0;
	if (n % 2)
		return NULL;
	out = malloc(n / 2 + 1);
	if (!out)
		return NULL;
	for (size_t i = 0; i < n / 2; i++) {
		int a = hexval(h[2 * i]), b = hexval(h[2 * i + 1]);

		if (a < 0 || b < 0) {
			free(out);
			return NULL;
		}
		out[i] = (char)(a * 16 + b);
	}
	out[n / 2] = '\0';
	*len = (uint32_t)(n / 2);
	return out;
}

static char *read_line(FILE *f, char **buf, size_t *cap)
{
	ssize_t n = getline(buf, cap, f);

	if (n < 0)
		return NULL;
	while (n > 0 && ((*buf)[n - 1] == '\n' || (*buf)[n - 1] == '\r'))
		(*buf)[--n] = '\0';
	return *buf;
}

static int load_vocab(const char *path, struct vocab_file *v)
{
	FILE *f = fopen(path, "r");
	char *line = NULL, key[32], val[32];
	size_t cap = 0;
	int rc = -EINVAL;

	memset(v, 0, sizeof(*v));
	v->spec.bos_id = v->spec.eos_id = v->spec.eot_id = -1;
	v->spec.unk_id = v->spec.pad_id = -1;
	if (!f)
		return -errno;
	while (read_line(f, &line, &cap)) {
		long n;

		if (sscanf(line, "%31s %31s", key, val) != 2)
			goto out;
		n = strtol(val, NULL, 10);
		if (strcmp(key, "model") == 0) {
			snprintf(v->model, sizeof(v->model), "%s", val);
		} else if (strcmp(key, "pre") == 0) {
			snprintf(v->pre, sizeof(v->pre), "%s", val);
		} else if (strcmp(key, "bos") == 0) {
			v->spec.bos_id = (int32_t)n;
		} else if (strcmp(key, "eos") == 0) {
			v->spec.eos_id = (int32_t)n;
		} else if (strcmp(key, "eot") == 0) {
			v->spec.eot_id = (int32_t)n;
		} else if (strcmp(key, "unk") == 0) {
			v->spec.unk_id = (int32_t)n;
		} else if (strcmp(key, "pad") == 0) {
			v->spec.pad_id = (int32_t)n;
		} else if (strcmp(key, "add_bos") == 0) {
			v->spec.add_bos = n != 0;
		} else if (strcmp(key, "add_eos") == 0) {
			v->spec.add_eos = n != 0;
		} else if (strcmp(key, "add_space_prefix") == 0) {
			v->spec.add_space_prefix = n != 0;
		} else if (strcmp(key, "tokens") == 0) {
			v->spec.n_tokens = (uint32_t)n;
			v->texts = calloc((size_t)n, sizeof(*v->texts));
			v->lens = calloc((size_t)n, sizeof(*v->lens));
			v->scores = calloc((size_t)n, sizeof(*v->scores));
			v->types = calloc((size_t)n, sizeof(*v->types));
			if (!v->texts || !v->lens || !v->scores || !v->types)
				goto out;
			for (long i = 0; i < n; i++) {
				char hex[1 << 17];
				int type;
				float score;

				if (!read_line(f, &line, &cap) ||
				    sscanf(line, "%d %f %131071s", &type, &score, hex) != 3 ||
				    !(v->texts[i] = unhex(hex, &v->lens[i])))
					goto out;
				v->types[i] = type;
				v->scores[i] = score;
			}
		} else if (strcmp(key, "merges") == 0) {
			v->spec.n_merges = (uint32_t)n;
			v->merges = calloc((size_t)n + 1, sizeof(*v->merges));
			v->merge_lens = calloc((size_t)n + 1, sizeof(*v->merge_lens));
			if (!v->merges || !v->merge_lens)
				goto out;
			for (long i = 0; i < n; i++)
				if (!read_line(f, &line, &cap) ||
				    !(v->merges[i] = unhex(line, &v->merge_lens[i])))
					goto out;
		}
	}
	v->spec.model = v->model;
	v->spec.pre = v->pre[0] ? v->pre : NULL;
	v->spec.tokens = (const char *const *)v->texts;
	v->spec.token_lens = v->lens;
	v->spec.scores = v->scores;
	v->spec.token_types = v->types;
	v->spec.merges = (const char *const *)v->merges;
	v->spec.merge_lens = v->merge_lens;
	rc = 0;
out:
	free(line);
	fclose(f);
	return rc;
}

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
	if (load_vocab(argv[1], &v)) {
		fprintf(stderr, "tok_compare: %s: bad vocabulary file\n", argv[1]);
		return 2;
	}
	if (gguf_tokenizer_create(&v.spec, &t, err, sizeof(err))) {
		fprintf(stderr, "tok_compare: %s: %s\n", argv[1], err);
		return 2;
	}
	f = fopen(argv[2], "r");
	if (!f) {
		fprintf(stderr, "tok_compare: %s: %s\n", argv[2], strerror(errno));
		return 2;
	}
	while (read_line(f, &line, &cap)) {
		char hex[1 << 16];
		int special;
		uint32_t len;
		char *text;
		int32_t *want;
		size_t n_want = 0;

		if (sscanf(line, "case %65535s %d", hex, &special) != 2 ||
		    !(text = unhex(hex, &len)) || !read_line(f, &line, &cap)) {
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
