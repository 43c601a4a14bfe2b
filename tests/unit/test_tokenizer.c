/*
 * test_tokenizer.c - the tokenizer (lib/text/tokenizer.c) and the BPE trainer
 * (lib/text/tokenizer_train.c).
 *
 * The fast encoder must match the naive reference (tools/refdecode/ref_tokenizer.c,
 * llama2.c's loop written again, compiled in by #include because the
 * tests link only the engine's libraries) token for token, on vocabularies
 * trained by make_tokenizer's code and on random vocabularies with tied
 * and floor (-1e10) scores and duplicate pieces, over random texts mixing
 * words, €, emoji, CJK, invalid UTF-8, NUL bytes and long runs.  Decoding
 * must give the text back: decode(encode(s, bos)) == s, and
 * decode(encode(s, no bos)) == " " s for non-empty s (the dummy prefix;
 * tokenizer.h DECODING).  Bad files (truncated anywhere, lengths past the
 * end or negative or over max_token_length, non-finite scores, smaller and
 * bigger vocabularies, a FIFO) are refused with a message naming the
 * problem.
 *
 * The random tests print their seed; SEED=<n> replays a run.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/strbuf.h"
#include "text/tokenizer.h"
#include "text/tokenizer_train.h"
#include "tests/unit/test_rng.h"

/* The naive encoder itself (see the file comment). */
#include "tools/refdecode/ref_tokenizer.h"

/* ------------------------------------------------------------------ */
/* Helpers                                                             */
/* ------------------------------------------------------------------ */

static struct strbuf train_builtin(uint32_t vocab)
{
	struct strbuf file = STRBUF_INIT;
	char err[256];

	assert_int_equal(tokenizer_train(tokenizer_builtin_corpus,
					 strlen(tokenizer_builtin_corpus),
					 vocab, &file, NULL, err, sizeof(err)),
			 0);
	return file;
}

static struct tokenizer *load_or_fail(const struct strbuf *file,
				      uint32_t vocab)
{
	struct tokenizer *t;
	char err[256];
	int rc = tokenizer_load_mem(file->data, file->len, vocab, "mem", &t,
				    err, sizeof(err));

	if (rc)
		fail_msg("load: %s", err);
	return t;
}

static struct tokenizer *builtin_tokenizer(uint32_t vocab)
{
	struct strbuf file = train_builtin(vocab);
	struct tokenizer *t = load_or_fail(&file, vocab);

	strbuf_release(&file);
	return t;
}

/* Pieces random texts are made of. */
static const char *const fragments[] = {
	"the", " cat", "Tom", " and", " dog", "ball", "happy", "played",
	" ", "  ", ".", ",", "\n", "\t", "Once upon a time",
	"\xe2\x82\xac",			/* € (in the built-in alphabet) */
	" 5 \xe2\x82\xac",
	"\xf0\x9f\x98\x80",		/* 😀 (in it) */
	"\xf0\x9f\x8e\x89",		/* 🎉 (seen once: byte fallback) */
	"\xf0\x9f\x90\x8d",		/* 🐍 (never seen) */
	"\xe4\xb8\xad\xe6\x96\x87",	/* 中文 */
	"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", /* 日本語 */
	"\xe9\xbe\x8d",			/* 龍 (never seen) */
	"caf\xc3\xa9",			/* café */
	"\x80", "\xff", "\xc3", "\xe2\x82", "\xf0\x9f\x98", /* invalid */
	"\xe2\x82\xac\x80\x80",		/* a code point and stray bytes */
	"a\x80\x80\x80\x80\x80",	/* more continuations than a group */
	"\xc0\xaf",			/* overlong */
	"<0x41>", "<s>", "</s>", "<unk>",	/* look like reserved pieces */
};

/* A random text of about target bytes into sb. */
static void random_text(struct rng *r, struct strbuf *sb, size_t target)
{
	sb->len = 0;
	while (sb->len < target) {
		uint32_t kind = rng_below(r, 20);

		if (kind == 0) {	/* a long run of one fragment */
			const char *f = fragments[rng_below(
				r, sizeof(fragments) / sizeof(fragments[0]))];
			uint32_t n = 1 + rng_below(r, 200);

			for (uint32_t i = 0; i < n; i++)
				assert_int_equal(strbuf_append(sb, f, strlen(f)), 0);
		} else if (kind == 1) {	/* random bytes, NUL included */
			uint32_t n = 1 + rng_below(r, 8);

			for (uint32_t i = 0; i < n; i++) {
				char c = (char)rng_below(r, 256);

				assert_int_equal(strbuf_append(sb, &c, 1), 0);
			}
		} else {
			const char *f = fragments[rng_below(
				r, sizeof(fragments) / sizeof(fragments[0]))];

			assert_int_equal(strbuf_append(sb, f, strlen(f)), 0);
		}
	}
}

/* Encode with both encoders and require the same tokens. */
static void check_same(const struct tokenizer *t,
		       const struct ref_tokenizer *ref, const char *text,
		       size_t len, bool bos, bool eos, const char *what)
{
	size_t cap = tokenizer_encode_max(len), n_fast;
	int32_t *fast = malloc(cap * sizeof(*fast));
	int32_t *naive = malloc(cap * sizeof(*naive));
	long n_naive;

	assert_non_null(fast);
	assert_non_null(naive);
	assert_int_equal(tokenizer_encode(t, text, len, bos, eos, fast, cap,
					  &n_fast),
			 0);
	n_naive = ref_tokenizer_encode(ref, text, len, bos, eos, naive);
	assert_true(n_naive >= 0);
	if ((size_t)n_naive != n_fast ||
	    memcmp(fast, naive, n_fast * sizeof(*fast)) != 0) {
		size_t i = 0;

		while (i < n_fast && i < (size_t)n_naive && fast[i] == naive[i])
			i++;
		fail_msg("%s: fast %zu tokens, naive %ld; first difference at %zu (fast %d, naive %d); text %zu bytes",
			 what, n_fast, n_naive, i, i < n_fast ? fast[i] : -1,
			 i < (size_t)n_naive ? naive[i] : -1, len);
	}
	free(fast);
	free(naive);
}

/* tokenizer.bin bytes for the given pieces and scores. */
static void put_u32(struct strbuf *sb, uint32_t v)
{
	unsigned char b[4] = { (unsigned char)v, (unsigned char)(v >> 8),
			       (unsigned char)(v >> 16),
			       (unsigned char)(v >> 24) };

	assert_int_equal(strbuf_append(sb, b, 4), 0);
}

static void put_entry(struct strbuf *sb, float score, const char *s,
		      size_t len)
{
	uint32_t bits;

	memcpy(&bits, &score, 4);
	put_u32(sb, bits);
	put_u32(sb, (uint32_t)len);
	assert_int_equal(strbuf_append(sb, s, len), 0);
}

/* The 259 reserved entries, after max_token_length. */
static void put_reserved(struct strbuf *sb, int32_t max_len)
{
	char name[8];

	put_u32(sb, (uint32_t)max_len);
	put_entry(sb, 0, "<unk>", 5);
	put_entry(sb, 0, "<s>", 3);
	put_entry(sb, 0, "</s>", 4);
	for (int b = 0; b < 256; b++) {
		snprintf(name, sizeof(name), "<0x%02X>", b);
		put_entry(sb, 0, name, 6);
	}
}

/* ------------------------------------------------------------------ */
/* Tests                                                               */
/* ------------------------------------------------------------------ */

static void test_builtin_layout(void **state)
{
	struct tokenizer *t = builtin_tokenizer(512);
	size_t len;
	float score;
	const char *p;

	assert_int_equal(tokenizer_vocab_size(t), 512);
	assert_int_equal(tokenizer_bos(t), 1);
	assert_int_equal(tokenizer_eos(t), 2);
	p = tokenizer_raw_piece(t, 1, &len, &score);
	assert_memory_equal(p, "<s>", 4);
	p = tokenizer_raw_piece(t, 3 + 0xAB, &len, NULL);
	assert_memory_equal(p, "<0xAB>", 7);
	assert_null(tokenizer_raw_piece(t, 512, &len, NULL));
	assert_null(tokenizer_raw_piece(t, -1, &len, NULL));
	assert_true(tokenizer_lookup(t, " ", 1) >= 259);
	assert_true(tokenizer_lookup(t, "\xe2\x82\xac", 3) >= 259);	/* € */
	assert_true(tokenizer_lookup(t, "\xf0\x9f\x98\x80", 4) >= 259); /* 😀 */
	assert_int_equal(tokenizer_lookup(t, "\xf0\x9f\x8e\x89", 4), -1); /* 🎉 */
	assert_int_equal(tokenizer_lookup(t, "<s>", 3), 1);
	assert_true(tokenizer_lookup(t, " the", 4) >= 259);
	tokenizer_free(t);
}

/* The same vocabulary twice: training is deterministic. */
static void test_train_deterministic(void **state)
{
	struct strbuf a = train_builtin(700), b = train_builtin(700);
	struct strbuf small = STRBUF_INIT;
	char err[256];

	assert_int_equal(a.len, b.len);
	assert_memory_equal(a.data, b.data, a.len);
	/* too small a vocabulary for " " is refused */
	assert_int_equal(tokenizer_train("x", 1, 259, &small, NULL, err,
					 sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "259"));
	strbuf_release(&a);
	strbuf_release(&b);
}

static void test_fast_matches_naive_trained(void **state)
{
	static const uint32_t vocabs[] = { 260, 300, 400, 512, 1000 };
	struct rng r = rng_for(1);
	struct strbuf text = STRBUF_INIT;

	for (size_t v = 0; v < sizeof(vocabs) / sizeof(vocabs[0]); v++) {
		struct tokenizer *t = builtin_tokenizer(vocabs[v]);
		struct ref_tokenizer *ref = ref_tokenizer_new(t);

		assert_non_null(ref);
		for (int i = 0; i < 80; i++) {
			random_text(&r, &text, rng_below(&r, 4) == 0 ?
						       rng_below(&r, 6) :
						       rng_below(&r, 1000));
			check_same(t, ref, text.data ? text.data : "", text.len,
				   rng_below(&r, 2), rng_below(&r, 2),
				   "trained vocabulary");
		}
		/* the corpus itself, and empty text */
		check_same(t, ref, tokenizer_builtin_corpus,
			   strlen(tokenizer_builtin_corpus), true, false,
			   "corpus");
		check_same(t, ref, "", 0, true, true, "empty");
		ref_tokenizer_free(ref);
		tokenizer_free(t);
	}
	strbuf_release(&text);
}

/*
 * A random vocabulary over a small alphabet, so that many pairs merge:
 * pieces of 1 to 5 symbols, scores from a small set (ties everywhere),
 * some at or below the -1e10 floor, some duplicated, " " sometimes
 * missing (the dummy prefix falls back to <0x20>).
 */
static void random_vocab(struct rng *r, struct strbuf *file, uint32_t vocab)
{
	static const char *const sym[] = {
		"a", "b", "c", " ", "\xe2\x82\xac", "\xe4\xb8\xad",
		"\xf0\x9f\x98\x80", "\x80",
	};
	static const float scores[] = { 0, -1, -2, -3, 1.5f, -1e10f, -2e10f };
	bool with_space = rng_below(r, 4) != 0;
	struct strbuf piece = STRBUF_INIT, prev = STRBUF_INIT;

	file->len = 0;
	put_reserved(file, 20);
	for (uint32_t i = 259; i < vocab; i++) {
		uint32_t n = 1 + rng_below(r, 5);

		if (i - 259 < 7) {	/* every single symbol but " " first */
			const char *s = sym[i - 259 + (i - 259 >= 3)];

			put_entry(file, 0, s, strlen(s));
			continue;
		}
		if (i == 266 && with_space) {
			put_entry(file, 0, " ", 1);
			continue;
		}
		if (rng_below(r, 20) == 0 && prev.len) {	/* a duplicate */
			put_entry(file, scores[rng_below(r, 7)], prev.data,
				  prev.len);
			continue;
		}
		piece.len = 0;
		for (uint32_t k = 0; k < n; k++) {
			const char *s = sym[rng_below(r, 7)];

			if (!with_space && s[0] == ' ')
				s = "a";
			assert_int_equal(strbuf_append(&piece, s, strlen(s)), 0);
		}
		if (piece.len > 20)
			piece.len = 20;
		put_entry(file, scores[rng_below(r, 7)], piece.data, piece.len);
		prev.len = 0;
		assert_int_equal(strbuf_append(&prev, piece.data, piece.len), 0);
	}
	strbuf_release(&piece);
	strbuf_release(&prev);
}

static void random_small_text(struct rng *r, struct strbuf *sb, size_t n)
{
	static const char *const sym[] = {
		"a", "b", "c", " ", "\xe2\x82\xac", "\xe4\xb8\xad",
		"\xf0\x9f\x98\x80", "\x80", "\xe2\x82", "d", "\xf0\x9f\x8e\x89",
	};

	sb->len = 0;
	for (size_t i = 0; i < n; i++) {
		const char *s = sym[rng_below(r, 11)];

		assert_int_equal(strbuf_append(sb, s, strlen(s)), 0);
	}
}

static void test_fast_matches_naive_random_vocab(void **state)
{
	struct rng r = rng_for(2);
	struct strbuf file = STRBUF_INIT, text = STRBUF_INIT;

	for (int v = 0; v < 60; v++) {
		uint32_t vocab = 266 + rng_below(&r, 200);
		struct tokenizer *t;
		struct ref_tokenizer *ref;

		random_vocab(&r, &file, vocab);
		t = load_or_fail(&file, vocab);
		ref = ref_tokenizer_new(t);
		assert_non_null(ref);
		for (int i = 0; i < 40; i++) {
			random_small_text(&r, &text, rng_below(&r, 300));
			check_same(t, ref, text.data ? text.data : "", text.len,
				   rng_below(&r, 2), rng_below(&r, 2),
				   "random vocabulary");
		}
		ref_tokenizer_free(ref);
		tokenizer_free(t);
	}
	strbuf_release(&file);
	strbuf_release(&text);
}

/* Long texts: the heap's bookkeeping over thousands of merges. */
static void test_fast_matches_naive_long(void **state)
{
	struct rng r = rng_for(3);
	struct tokenizer *t = builtin_tokenizer(1000);
	struct ref_tokenizer *ref = ref_tokenizer_new(t);
	struct strbuf text = STRBUF_INIT;

	assert_non_null(ref);
	for (int i = 0; i < 2; i++) {
		random_text(&r, &text, 5000);
		check_same(t, ref, text.data, text.len, true, true, "long text");
	}
	ref_tokenizer_free(ref);
	tokenizer_free(t);
	strbuf_release(&text);
}

/* decode(encode(s, bos)) == s; without BOS the dummy space stays. */
static void check_roundtrip(const struct tokenizer *t, const char *s,
			    size_t len)
{
	size_t cap = tokenizer_encode_max(len), n, got;
	int32_t *tok = malloc(cap * sizeof(*tok));
	char *out = malloc(len + 2);

	assert_non_null(tok);
	assert_non_null(out);
	assert_int_equal(tokenizer_encode(t, s, len, true, true, tok, cap, &n), 0);
	assert_int_equal(tok[0], 1);
	assert_int_equal(tok[n - 1], 2);
	assert_int_equal(tokenizer_decode(t, -1, tok, n, out, len + 2, &got), 0);
	assert_int_equal(got, len);
	assert_memory_equal(out, s, len);

	assert_int_equal(tokenizer_encode(t, s, len, false, false, tok, cap, &n), 0);
	assert_int_equal(tokenizer_decode(t, -1, tok, n, out, len + 2, &got), 0);
	assert_int_equal(got, len ? len + 1 : 0);
	if (len) {
		assert_int_equal(out[0], ' ');
		assert_memory_equal(out + 1, s, len);
	}
	free(tok);
	free(out);
}

static void test_roundtrip(void **state)
{
	struct rng r = rng_for(4);
	struct strbuf text = STRBUF_INIT;
	static const uint32_t vocabs[] = { 260, 512, 1000 };

	for (size_t v = 0; v < 3; v++) {
		struct tokenizer *t = builtin_tokenizer(vocabs[v]);

		check_roundtrip(t, "", 0);
		check_roundtrip(t, " ", 1);
		check_roundtrip(t, "  leading spaces", 16);
		check_roundtrip(t, "a\0b", 3);
		for (int i = 0; i < 200; i++) {
			random_text(&r, &text, rng_below(&r, 800));
			check_roundtrip(t, text.data ? text.data : "", text.len);
		}
		tokenizer_free(t);
	}
	strbuf_release(&text);
}

/* A character out of the vocabulary becomes its bytes + 3, each of which
 * decodes to one raw byte (a character split across tokens). */
static void test_byte_fallback(void **state)
{
	struct tokenizer *t = builtin_tokenizer(512);
	const char *party = "\xf0\x9f\x8e\x89";	/* 🎉, seen once */
	int32_t tok[16];
	size_t n, len;
	int32_t space = tokenizer_lookup(t, " ", 1);
	const char *p;

	assert_int_equal(tokenizer_encode(t, party, 4, true, false, tok, 16, &n), 0);
	assert_int_equal(n, 6);
	assert_int_equal(tok[0], 1);
	assert_int_equal(tok[1], space);
	assert_int_equal(tok[2], 0xF0 + 3);
	assert_int_equal(tok[3], 0x9F + 3);
	assert_int_equal(tok[4], 0x8E + 3);
	assert_int_equal(tok[5], 0x89 + 3);
	for (int i = 2; i < 6; i++) {
		p = tokenizer_piece(t, tok[i - 1], tok[i], &len);
		assert_int_equal(len, 1);
		assert_int_equal((unsigned char)p[0],
				 (unsigned char)party[i - 2]);
		assert_int_equal(p[1], '\0');
	}
	/* "a" followed by a stray continuation byte is one group of llama2.c's
	 * cut: not a piece, so both bytes fall back, "a" included */
	assert_int_equal(tokenizer_encode(t, "a\x80", 2, false, false, tok, 16, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(tok[1], 'a' + 3);
	assert_int_equal(tok[2], 0x80 + 3);
	/* € is in the vocabulary: " €" merges into one token */
	assert_int_equal(tokenizer_encode(t, "\xe2\x82\xac", 3, false, false, tok, 16, &n), 0);
	assert_int_equal(n, 1);
	p = tokenizer_piece(t, -1, tok[0], &len);
	assert_int_equal(len, 4);
	assert_memory_equal(p, " \xe2\x82\xac", 4);
	tokenizer_free(t);
}

static void test_decode_rules(void **state)
{
	struct tokenizer *t = builtin_tokenizer(512);
	int32_t the = tokenizer_lookup(t, " the", 4);
	int32_t toks[3] = { 1, the, the };
	char out[16];
	size_t len, n;
	const char *p;

	for (int b = 0; b < 256; b++) {
		p = tokenizer_piece(t, 1, b + 3, &len);
		assert_int_equal(len, 1);
		assert_int_equal((unsigned char)p[0], b);
	}
	p = tokenizer_piece(t, 1, the, &len);	/* after BOS: no space */
	assert_int_equal(len, 3);
	assert_memory_equal(p, "the", 3);
	p = tokenizer_piece(t, 5, the, &len);
	assert_int_equal(len, 4);
	assert_null(tokenizer_piece(t, 1, 512, &len));
	assert_null(tokenizer_piece(t, 1, -3, &len));

	assert_int_equal(tokenizer_decode(t, -1, toks, 3, out, sizeof(out), &n), 0);
	assert_int_equal(n, 7);
	assert_memory_equal(out, "the the", 7);
	/* the predecessor of the first token counts too */
	assert_int_equal(tokenizer_decode(t, 1, toks + 1, 1, out, sizeof(out), &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(tokenizer_decode(t, -1, toks, 3, out, 4, &n), -ENOSPC);
	assert_int_equal(n, 7);
	assert_memory_equal(out, "the ", 4);
	toks[2] = 9999;
	assert_int_equal(tokenizer_decode(t, -1, toks, 3, out, sizeof(out), &n), -EINVAL);
	assert_int_equal(n, 2);
	tokenizer_free(t);
}

static void test_encode_nospace(void **state)
{
	struct tokenizer *t = builtin_tokenizer(512);
	const char *s = "the cat and the dog \xf0\x9f\x8e\x89";
	int32_t full[64], part[4];
	size_t n_full, n;

	assert_int_equal(tokenizer_encode(t, s, strlen(s), true, true, full, 64, &n_full), 0);
	assert_true(n_full > 4);
	assert_int_equal(tokenizer_encode(t, s, strlen(s), true, true, part, 4, &n), -ENOSPC);
	assert_int_equal(n, n_full);
	assert_int_equal(tokenizer_encode(t, s, strlen(s), true, true, NULL, 0, &n), -ENOSPC);
	assert_int_equal(n, n_full);
	assert_int_equal(tokenizer_encode(t, "", 0, false, false, NULL, 0, &n), 0);
	assert_int_equal(n, 0);
	tokenizer_free(t);
}

/* Duplicate pieces: the lowest id is found. */
static void test_duplicates(void **state)
{
	struct strbuf f = STRBUF_INIT;
	struct tokenizer *t;
	int32_t tok[8];
	size_t n;

	put_reserved(&f, 8);
	put_entry(&f, 0, " ", 1);	/* 259 */
	put_entry(&f, 0, "a", 1);	/* 260 */
	put_entry(&f, -5, " a", 2);	/* 261 */
	put_entry(&f, 3, " a", 2);	/* 262: a duplicate, never found */
	t = load_or_fail(&f, 263);
	assert_int_equal(tokenizer_lookup(t, " a", 2), 261);
	assert_int_equal(tokenizer_encode(t, "a", 1, false, false, tok, 8, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(tok[0], 261);
	tokenizer_free(t);
	strbuf_release(&f);
}

/* ------------------------------------------------------------------ */
/* Bad files                                                           */
/* ------------------------------------------------------------------ */

static void expect_bad(const void *data, size_t size, uint32_t vocab,
		       const char *needle)
{
	struct tokenizer *t = (struct tokenizer *)1;
	char err[512] = "";
	int rc = tokenizer_load_mem(data, size, vocab, "bad.bin", &t, err,
				    sizeof(err));

	if (rc != -EINVAL || t != NULL || !strstr(err, needle) ||
	    !strstr(err, "bad.bin"))
		fail_msg("expected -EINVAL with '%s', got %d: %s", needle, rc,
			 err);
}

/* A small valid file: the reserved tokens, " " and "ab". */
static struct strbuf small_file(void)
{
	struct strbuf f = STRBUF_INIT;

	put_reserved(&f, 8);
	put_entry(&f, -1, " ", 1);
	put_entry(&f, -2, "ab", 2);
	return f;
}

static void test_bad_files(void **state)
{
	struct strbuf f = small_file(), g = STRBUF_INIT;
	uint32_t vocab = 261;
	struct tokenizer *t;
	char err[512];

	t = load_or_fail(&f, vocab);
	tokenizer_free(t);

	/* every cut of the file is refused, as truncated or smaller */
	for (size_t cut = 0; cut < f.len; cut++) {
		t = (struct tokenizer *)1;
		assert_int_equal(tokenizer_load_mem(f.data, cut, vocab, "cut",
						    &t, err, sizeof(err)),
				 -EINVAL);
		assert_null(t);
		assert_true(strstr(err, "truncated") || strstr(err, "holds") ||
			    strstr(err, "past the end"));
	}
	expect_bad(f.data, 2, vocab, "shorter than the 4-byte");
	expect_bad(f.data, f.len - 1, vocab, "past the end");
	expect_bad(f.data, f.len - 4, vocab, "truncated inside token 260");
	/* the file ends cleanly after 260 tokens: the model has 261 */
	expect_bad(f.data, f.len - 10, vocab, "holds 260 tokens");
	expect_bad(f.data, f.len, vocab + 1, "holds 261 tokens");
	/* the model has fewer tokens than the file */
	expect_bad(f.data, f.len, vocab - 1, "bigger than the model's");
	/* a vocabulary without the byte tokens */
	expect_bad(f.data, f.len, 100, "outside 259");

	/* negative length of token 260 (its length field is 6 bytes from
	 * the end: "ab" and the length) */
	g.len = 0;
	assert_int_equal(strbuf_append(&g, f.data, f.len), 0);
	memcpy(g.data + g.len - 6, "\xff\xff\xff\xff", 4);
	expect_bad(g.data, g.len, vocab, "negative length");
	/* a length over max_token_length */
	memcpy(g.data + g.len - 6, "\x09\x00\x00\x00", 4);
	expect_bad(g.data, g.len, vocab, "over the file's max_token_length");
	/* a length past the end */
	memcpy(g.data + g.len - 6, "\x05\x00\x00\x00", 4);
	expect_bad(g.data, g.len, vocab, "past the end");
	memcpy(g.data + g.len - 6, "\x02\x00\x00\x00", 4);
	/* non-finite scores */
	memcpy(g.data + g.len - 10, "\x00\x00\xc0\x7f", 4);	/* NaN */
	expect_bad(g.data, g.len, vocab, "non-finite score");
	memcpy(g.data + g.len - 10, "\x00\x00\x80\x7f", 4);	/* +inf */
	expect_bad(g.data, g.len, vocab, "non-finite score");
	memcpy(g.data + g.len - 10, "\x00\x00\x00\x00", 4);
	/* max_token_length */
	memcpy(g.data, "\x00\x00\x00\x00", 4);
	expect_bad(g.data, g.len, vocab, "max_token_length 0");
	memcpy(g.data, "\xff\xff\xff\xff", 4);
	expect_bad(g.data, g.len, vocab, "max_token_length -1");
	memcpy(g.data, "\x00\x00\x00\x40", 4);
	expect_bad(g.data, g.len, vocab, "outside 1..65536");
	memcpy(g.data, "\x08\x00\x00\x00", 4);
	t = load_or_fail(&g, vocab);
	tokenizer_free(t);
	/* a byte token that is not its byte piece */
	memcpy(g.data + 4 + 3 * 8 + 5 + 3 + 4 + 8 + 3, "1", 1);
	expect_bad(g.data, g.len, vocab, "must be the byte piece <0x00>");

	strbuf_release(&f);
	strbuf_release(&g);
}

static void test_bad_paths(void **state)
{
	char dir[] = "/tmp/test_tokenizer.XXXXXX", path[256];
	struct strbuf f = small_file();
	struct tokenizer *t;
	char err[512];
	FILE *fp;

	assert_non_null(mkdtemp(dir));
	/* a FIFO is refused at once, not waited on */
	snprintf(path, sizeof(path), "%s/fifo", dir);
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(tokenizer_load(path, 261, &t, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "not a regular file"));
	unlink(path);
	/* a directory, a missing file */
	assert_int_equal(tokenizer_load(dir, 261, &t, err, sizeof(err)), -EINVAL);
	snprintf(path, sizeof(path), "%s/missing.bin", dir);
	assert_int_equal(tokenizer_load(path, 261, &t, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "missing.bin"));
	/* a good file, then the same truncated */
	snprintf(path, sizeof(path), "%s/tok.bin", dir);
	fp = fopen(path, "wb");
	assert_non_null(fp);
	assert_int_equal(fwrite(f.data, 1, f.len, fp), f.len);
	assert_int_equal(fclose(fp), 0);
	assert_int_equal(tokenizer_load(path, 261, &t, err, sizeof(err)), 0);
	assert_int_equal(tokenizer_vocab_size(t), 261);
	assert_int_equal(tokenizer_max_token_length(t), 8);
	tokenizer_free(t);
	assert_int_equal(truncate(path, (off_t)f.len - 1), 0);
	assert_int_equal(tokenizer_load(path, 261, &t, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, path));
	assert_non_null(strstr(err, "token 260"));
	/* an empty file */
	assert_int_equal(truncate(path, 0), 0);
	assert_int_equal(tokenizer_load(path, 261, &t, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "truncated"));
	unlink(path);
	rmdir(dir);
	strbuf_release(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_builtin_layout),
		cmocka_unit_test(test_train_deterministic),
		cmocka_unit_test(test_fast_matches_naive_trained),
		cmocka_unit_test(test_fast_matches_naive_random_vocab),
		cmocka_unit_test(test_fast_matches_naive_long),
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_byte_fallback),
		cmocka_unit_test(test_decode_rules),
		cmocka_unit_test(test_encode_nospace),
		cmocka_unit_test(test_duplicates),
		cmocka_unit_test(test_bad_files),
		cmocka_unit_test(test_bad_paths),
	};

	test_seed_init("tokenizer");
	return cmocka_run_group_tests_name("tokenizer", tests, NULL, NULL);
}
