/*
 * fuzz_tokenizer.c - libFuzzer target for the tokenizer: the tokenizer.bin
 * reader on hostile bytes and the encoder and decoder on fuzzed
 * vocabularies (lib/text/tokenizer.c).
 *
 * The input is a tokenizer.bin followed by a text (the committed seeds,
 * tests/fuzz/tokenizer_corpus, are make_tokenizer files with a line of
 * text appended).  Each input is used three ways:
 *  1. the whole input as a file, loaded with a few vocabulary sizes (259,
 *     the number of entries that parse, one more and one less, one drawn
 *     from the input's hash): it must load or fail with -EINVAL and a
 *     message naming the file, never crash or read out of bounds (each
 *     load gets an exact-size copy, so ASan sees a read past the end);
 *  2. the entries that parse, behind a synthesized header of the 259
 *     reserved tokens (so a mutation that breaks the byte tokens still
 *     reaches the encoder), as a vocabulary of exactly that many tokens;
 *     the bytes after them are the text;
 *  3. with that vocabulary: the text encoded with and without BOS/EOS must
 *     give the naive encoder's tokens (tools/refdecode/ref_tokenizer.c, on at most
 *     128 bytes since it is O(n^2)), every id in range; decoding them must
 *     succeed, and after a -ENOSPC a buffer of the size asked for must be
 *     enough.  Every piece's lookup finds an id no higher than its own
 *     with the same bytes.
 * Any violation abort()s, which libFuzzer reports with the input.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/refdecode/ref_tokenizer.h"
#include "text/tokenizer.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_rng.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NAIVE_MAX_TEXT 128

static int32_t get_i32(const uint8_t *p)
{
	uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
		     (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	int32_t out;

	memcpy(&out, &v, sizeof(out));
	return out;
}

/* How many entries from off parse (finite score, a length in 0..max_len
 * that fits); *end is where they stop. */
static uint32_t count_entries(const uint8_t *d, size_t size, size_t off,
			      int32_t max_len, size_t *end)
{
	uint32_t n = 0;

	while (size - off >= 8 && n < TOKENIZER_MAX_VOCAB) {
		float score;
		int32_t len = get_i32(d + off + 4);

		memcpy(&score, d + off, 4);
		if (!isfinite(score) || len < 0 || len > max_len ||
		    (size_t)len > size - off - 8)
			break;
		off += 8 + (size_t)len;
		n++;
	}
	*end = off;
	return n;
}

/* Load from an exact-size copy; a NULL result must come with -EINVAL and
 * a message naming the file. */
static struct tokenizer *load_copy(const uint8_t *d, size_t size,
				   uint32_t vocab)
{
	uint8_t *copy = malloc(size ? size : 1);
	struct tokenizer *t = (struct tokenizer *)1;
	char err[512] = "";
	int rc;

	CHECK(copy);
	memcpy(copy, d, size);
	rc = tokenizer_load_mem(copy, size, vocab, "fuzz.bin", &t, err,
				sizeof(err));
	free(copy);
	if (rc) {
		CHECK(rc == -EINVAL);
		CHECK(t == NULL);
		CHECK(strstr(err, "fuzz.bin") != NULL);
		return NULL;
	}
	CHECK(t != NULL);
	CHECK(tokenizer_vocab_size(t) == vocab);
	return t;
}

static void check_encode(const struct tokenizer *t,
			 const struct ref_tokenizer *ref, const char *text,
			 size_t len, bool bos, bool eos)
{
	size_t cap = tokenizer_encode_max(len), n, n2, got;
	int32_t *tok = malloc(cap * sizeof(*tok));
	int32_t *naive = malloc(cap * sizeof(*naive));
	char *out;

	CHECK(tok && naive);
	CHECK(tokenizer_encode(t, text, len, bos, eos, tok, cap, &n) == 0);
	CHECK(n <= cap);
	for (size_t i = 0; i < n; i++)
		CHECK(tok[i] >= 0 && (uint32_t)tok[i] < tokenizer_vocab_size(t));
	if (n > 0) {
		CHECK(tokenizer_encode(t, text, len, bos, eos, tok, n - 1, &n2) ==
		      -ENOSPC);
		CHECK(n2 == n);
		CHECK(tokenizer_encode(t, text, len, bos, eos, tok, cap, &n) == 0);
	}
	if (len <= NAIVE_MAX_TEXT) {
		long nn = ref_tokenizer_encode(ref, text, len, bos, eos, naive);

		CHECK(nn == (long)n);
		CHECK(memcmp(tok, naive, n * sizeof(*tok)) == 0);
	}
	/* decode: ask for the size, then decode into exactly that */
	if (tokenizer_decode(t, -1, tok, n, NULL, 0, &got) == -ENOSPC) {
		out = malloc(got);
		CHECK(out);
		CHECK(tokenizer_decode(t, -1, tok, n, out, got, &n2) == 0);
		CHECK(n2 == got);
		free(out);
	} else {
		CHECK(got == 0);
	}
	free(tok);
	free(naive);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rng r = rng_for(data, size);
	uint8_t *file;
	size_t end, file_len;
	uint32_t n, vocab;
	int32_t max_len;
	struct tokenizer *t;
	struct ref_tokenizer *ref;

	/* 1. the input as a file */
	max_len = size >= 4 ? get_i32(data) : 0;
	n = size >= 4 && max_len > 0 ?
		count_entries(data, size, 4, max_len, &end) : 0;
	{
		uint32_t sizes[5] = { TOKENIZER_MIN_VOCAB, n, n + 1, n - 1,
				      TOKENIZER_MIN_VOCAB +
					      (uint32_t)rng_below(&r, 64) };

		for (int i = 0; i < 5; i++) {
			t = load_copy(data, size, sizes[i]);
			tokenizer_free(t);
		}
	}
	if (size < 4 || max_len <= 0 || max_len > TOKENIZER_MAX_TOKEN_LENGTH)
		return 0;

	/* 2. its entries behind the 259 reserved ones */
	n = count_entries(data, size, 4, max_len, &end);
	if (max_len < 6)
		max_len = 6;	/* "<unk>", "<0xNN>" */
	file_len = 4 + (size_t)TOKENIZER_MIN_VOCAB * 14 + (end - 4);
	file = malloc(file_len);
	CHECK(file);
	{
		uint8_t *p = file;
		uint32_t ml = (uint32_t)max_len;
		float zero = 0;

		memcpy(p, &ml, 4);
		p += 4;
		for (int i = 0; i < (int)TOKENIZER_MIN_VOCAB; i++) {
			char name[8];
			int len = i == 0 ? 5 : i == 1 ? 3 : i == 2 ? 4 : 6;
			uint32_t l = (uint32_t)len;

			if (i < 3)
				memcpy(name, i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>",
				       (size_t)len);
			else
				snprintf(name, sizeof(name), "<0x%02X>", i - 3);
			memcpy(p, &zero, 4);
			memcpy(p + 4, &l, 4);
			memcpy(p + 8, name, (size_t)len);
			p += 8 + len;
		}
		memcpy(p, data + 4, end - 4);
		file_len = (size_t)(p - file) + (end - 4);
	}
	vocab = TOKENIZER_MIN_VOCAB + n;
	t = load_copy(file, file_len, vocab);
	free(file);
	if (!t)
		return 0;	/* e.g. a piece over max_len after the raise: fine */

	/* 3. encode and decode the rest of the input */
	ref = ref_tokenizer_new(t);
	CHECK(ref);
	for (uint32_t i = 0; i < vocab; i++) {
		size_t len;
		const char *p = tokenizer_raw_piece(t, (int32_t)i, &len, NULL);
		int32_t id = tokenizer_lookup(t, p, len);
		size_t len2;
		const char *p2;

		CHECK(id >= 0 && (uint32_t)id <= i);
		p2 = tokenizer_raw_piece(t, id, &len2, NULL);
		CHECK(len2 == len && memcmp(p, p2, len) == 0);
	}
	{
		const char *text = (const char *)data + end;
		size_t len = size - end;
		bool bos = rng_below(&r, 2), eos = rng_below(&r, 2);

		check_encode(t, ref, text, len, bos, eos);
		/* a slice of it, so long inputs are checked by the naive one */
		if (len > NAIVE_MAX_TEXT) {
			size_t from = rng_below(&r, len - NAIVE_MAX_TEXT);

			check_encode(t, ref, text + from, NAIVE_MAX_TEXT, !bos, eos);
		}
	}
	ref_tokenizer_free(ref);
	tokenizer_free(t);
	return 0;
}
