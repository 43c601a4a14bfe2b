/*
 * test_gguf_tokenizer.c - the GGUF tokenizers (lib/text/gguf_tokenizer.c
 * and the files under it: unicode.c, pretok.c, bpe_merge.c, spm_merge.c,
 * gguf_vocab.c).
 *
 * References: the UTF-8 decoder against glibc's mbrtowc in C.UTF-8; the
 * fast BPE and SentencePiece merges against the naive loops of
 * tools/refdecode/ref_bpe.c on random vocabularies (random merges in
 * shuffled rank order, tied scores, tokens no merge reaches) and random
 * texts; the pre-tokenizers against splits worked out by hand from the
 * patterns (the real tokenizers check them in make test-tokenizers).
 * decode(encode(s)) == s on random bytes; every refused spec names its
 * problem.  The random tests print their seed; SEED=<n> replays.
 */
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include <cmocka.h>

#include "text/bytelevel.h"
#include "text/gguf_tokenizer.h"
#include "text/pretok.h"
#include "text/unicode.h"
#include "util/log_escape.h"
#include "tests/unit/test_rng.h"
#include "tools/refdecode/ref_bpe.h"

/* ------------------------------------------------------------------ */
/* A vocabulary under construction                                     */
/* ------------------------------------------------------------------ */

#define MAX_TOK 2048
#define MAX_MERGE 2048

struct vb {
	char *tok[MAX_TOK];
	uint32_t tok_len[MAX_TOK];
	float score[MAX_TOK];
	int32_t type[MAX_TOK];
	uint32_t n;
	char *merge[MAX_MERGE];
	uint32_t merge_len[MAX_MERGE];
	uint32_t n_merges;
	struct tokenizer_vocab_spec spec;
};

static int32_t vb_find(const struct vb *v, const char *s, size_t n)
{
	for (uint32_t i = 0; i < v->n; i++)
		if (v->tok_len[i] == n && memcmp(v->tok[i], s, n) == 0)
			return (int32_t)i;
	return -1;
}

static int32_t vb_add(struct vb *v, const char *s, size_t n, int32_t type,
		      float score)
{
	assert_true(v->n < MAX_TOK);
	v->tok[v->n] = malloc(n + 1);
	memcpy(v->tok[v->n], s, n);
	v->tok[v->n][n] = '\0';
	v->tok_len[v->n] = (uint32_t)n;
	v->type[v->n] = type;
	v->score[v->n] = score;
	return (int32_t)v->n++;
}

static void vb_merge(struct vb *v, const char *a, size_t la, const char *b,
		     size_t lb)
{
	char *m = malloc(la + lb + 2);

	assert_true(v->n_merges < MAX_MERGE);
	memcpy(m, a, la);
	m[la] = ' ';
	memcpy(m + la + 1, b, lb);
	m[la + 1 + lb] = '\0';
	v->merge[v->n_merges] = m;
	v->merge_len[v->n_merges++] = (uint32_t)(la + lb + 1);
}

static struct tokenizer_vocab_spec *vb_spec(struct vb *v, const char *model,
					    const char *pre)
{
	struct tokenizer_vocab_spec *s = &v->spec;

	memset(s, 0, sizeof(*s));
	s->model = model;
	s->pre = pre;
	s->n_tokens = v->n;
	s->tokens = (const char *const *)v->tok;
	s->token_lens = v->tok_len;
	s->scores = v->score;
	s->token_types = v->type;
	s->n_merges = v->n_merges;
	s->merges = (const char *const *)v->merge;
	s->merge_lens = v->merge_len;
	s->bos_id = s->eos_id = s->eot_id = s->unk_id = s->pad_id = -1;
	return s;
}

static void vb_free(struct vb *v)
{
	for (uint32_t i = 0; i < v->n; i++)
		free(v->tok[i]);
	for (uint32_t i = 0; i < v->n_merges; i++)
		free(v->merge[i]);
	free(v);
}

static struct gguf_tokenizer *build_or_fail(const struct tokenizer_vocab_spec *s)
{
	struct gguf_tokenizer *t = NULL;
	char err[256];

	if (gguf_tokenizer_create(s, &t, err, sizeof(err)))
		fail_msg("create: %s", err);
	return t;
}

/* encode() into a new array; *n set. */
static int32_t *encode(const struct gguf_tokenizer *t, const char *s,
		       size_t len, bool add_special, bool parse_special,
		       size_t *n)
{
	size_t cap = gguf_tokenizer_encode_max(len);
	int32_t *ids = malloc(cap * sizeof(*ids));

	assert_int_equal(gguf_tokenizer_encode(t, s, len, add_special,
					       parse_special, ids, cap, n), 0);
	return ids;
}

static void print_ids(const char *what, const int32_t *ids, size_t n)
{
	printf("%s:", what);
	for (size_t i = 0; i < n; i++)
		printf(" %d", ids[i]);
	printf("\n");
}

static void assert_roundtrip(const struct gguf_tokenizer *t, const char *s,
			     size_t len, bool parse_special)
{
	size_t n, n_dec;
	/* BOS/EOS only where decoding hides them (no render_special). */
	int32_t *ids = encode(t, s, len, !parse_special, parse_special, &n);
	char *dec = malloc(4 * len + 16);

	assert_int_equal(gguf_tokenizer_decode(t, -1, ids, n, parse_special,
					       dec, 4 * len + 16, &n_dec), 0);
	if (n_dec != len || memcmp(dec, s, len)) {
		char a[LOG_ESCAPE_MAX + 1], b[LOG_ESCAPE_MAX + 1];

		dec[n_dec] = '\0';
		print_ids("ids", ids, n);
		fail_msg("decode(encode(s)) != s: '%s' gave '%s'",
			 log_escape(s, a, sizeof(a)), log_escape(dec, b, sizeof(b)));
	}
	free(dec);
	free(ids);
}

/* ------------------------------------------------------------------ */
/* Unicode                                                             */
/* ------------------------------------------------------------------ */

/* mbrtowc's reading of s: the code point and length, or invalid (1). */
static uint32_t glibc_decode(const char *s, size_t len, size_t *n)
{
	mbstate_t st;
	wchar_t wc;
	size_t r;

	memset(&st, 0, sizeof(st));
	r = mbrtowc(&wc, s, len, &st);
	if (r == (size_t)-1 || r == (size_t)-2) {
		*n = 1;
		return UNICODE_INVALID;
	}
	*n = r ? r : 1;
	/* glibc takes code points past U+10FFFF and surrogates, which
	 * Unicode's well-formed UTF-8 excludes. */
	if ((uint32_t)wc > 0x10FFFF || ((uint32_t)wc >= 0xD800 && (uint32_t)wc <= 0xDFFF)) {
		*n = 1;
		return UNICODE_INVALID;
	}
	return (uint32_t)wc;
}

static void test_utf8_matches_glibc(void **state)
{
	struct rng r = rng_for(1);
	char s[4];

	(void)state;
	if (!setlocale(LC_CTYPE, "C.UTF-8"))
		skip();
	for (int i = 0; i < 400000; i++) {
		size_t len = 1 + rng_below(&r, 4), n1, n2;
		uint32_t a, b;

		for (size_t k = 0; k < len; k++)
			s[k] = (char)(k && rng_below(&r, 2) ?
				      0x80 | rng_below(&r, 64) : rng_below(&r, 256));
		a = unicode_decode(s, len, &n1);
		b = glibc_decode(s, len, &n2);
		if (a != b || n1 != n2)
			fail_msg("%02x %02x %02x %02x (len %zu): ours %x/%zu glibc %x/%zu",
				 (unsigned char)s[0], (unsigned char)s[1],
				 (unsigned char)s[2], (unsigned char)s[3], len,
				 a, n1, b, n2);
		if (a != UNICODE_INVALID) {
			char back[4];

			assert_int_equal(unicode_encode(a, back), n1);
			assert_memory_equal(back, s, n1);
		}
	}
	setlocale(LC_CTYPE, "C");
}

static void test_unicode_classes(void **state)
{
	static const struct {
		uint32_t cp;
		enum unicode_class cls;
	} cases[] = {
		{ 'a', UNICODE_LETTER }, { 'Z', UNICODE_LETTER },
		{ 0x65E5, UNICODE_LETTER },	/* 日 Lo */
		{ 0x01C5, UNICODE_LETTER },	/* Dž Lt */
		{ 0x02B0, UNICODE_LETTER },	/* ʰ Lm */
		{ '7', UNICODE_NUMBER }, { 0x0663, UNICODE_NUMBER },	/* ٣ Nd */
		{ 0x216B, UNICODE_NUMBER },	/* Ⅻ Nl */
		{ 0x00BD, UNICODE_NUMBER },	/* ½ No */
		{ ' ', UNICODE_SPACE }, { '\t', UNICODE_SPACE },
		{ '\n', UNICODE_SPACE }, { 0x0B, UNICODE_SPACE },
		{ 0x85, UNICODE_SPACE }, { 0xA0, UNICODE_SPACE },
		{ 0x3000, UNICODE_SPACE }, { 0x2028, UNICODE_SPACE },
		{ 0x200B, UNICODE_OTHER },	/* zero width space is Cf */
		{ '!', UNICODE_OTHER }, { 0x0301, UNICODE_OTHER },	/* Mn */
		{ 0x1F600, UNICODE_OTHER },	/* emoji So */
		{ 0x10FFFF, UNICODE_OTHER }, { UNICODE_INVALID, UNICODE_OTHER },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (unicode_class_of(cases[i].cp) != cases[i].cls)
			fail_msg("U+%04X: class %d, expected %d", cases[i].cp,
				 unicode_class_of(cases[i].cp), cases[i].cls);
}

static void test_bytelevel_map(void **state)
{
	(void)state;
	/* GPT-2's table: a space is U+0120, a newline U+010A, 0x7F U+0121,
	 * 0xAD U+0143; the map is a bijection onto 256 code points. */
	assert_int_equal(bytelevel_cp(' '), 0x120);
	assert_int_equal(bytelevel_cp('\n'), 0x10A);
	assert_int_equal(bytelevel_cp('A'), 'A');
	assert_int_equal(bytelevel_cp(0x7F), 0x121);
	assert_int_equal(bytelevel_cp(0xAD), 0x143);
	assert_int_equal(bytelevel_cp(0xFF), 0xFF);
	for (unsigned b = 0; b < 256; b++)
		assert_int_equal(bytelevel_byte(bytelevel_cp((unsigned char)b)), b);
	assert_int_equal(bytelevel_byte(0x144), -1);
	assert_int_equal(bytelevel_byte(0x20), -1);
}

/* ------------------------------------------------------------------ */
/* Pre-tokenizers                                                      */
/* ------------------------------------------------------------------ */

/* Split text with kind and compare with the pieces in want, "|"-joined. */
static void assert_split(enum pretok_kind kind, const char *text,
			 const char *want)
{
	char got[512];
	size_t len = strlen(text), pos = 0, at = 0;

	while (pos < len) {
		size_t end = pretok_next(kind, text, len, pos);

		assert_true(end > pos && end <= len);
		if (at)
			got[at++] = '|';
		memcpy(got + at, text + pos, end - pos);
		at += end - pos;
		pos = end;
	}
	got[at] = '\0';
	if (strcmp(got, want) != 0)
		fail_msg("kind %d on '%s': got '%s', expected '%s'", kind, text,
			 got, want);
}

static void test_pretok_llama3(void **state)
{
	(void)state;
	assert_split(PRETOK_LLAMA3, "Hello world", "Hello| world");
	assert_split(PRETOK_LLAMA3, "I'll DON'T 'Re", "I|'ll| DON|'T| '|Re");
	assert_split(PRETOK_LLAMA3, "12345678", "123|456|78");
	assert_split(PRETOK_LLAMA3, "a  \n\n b\t", "a|  \n\n| b|\t");
	assert_split(PRETOK_LLAMA3, "x   y", "x|  | y");
	assert_split(PRETOK_LLAMA3, "x \t y  ", "x| \t| y|  ");
	assert_split(PRETOK_LLAMA3, "(hello) ...x", "(hello|)| ...|x");
	assert_split(PRETOK_LLAMA3, " !!\n\nx", " !!\n\n|x");
	assert_split(PRETOK_LLAMA3, "\r\n\r\n", "\r\n\r\n");
	assert_split(PRETOK_LLAMA3, "\n y", "\n| y");
	assert_split(PRETOK_LLAMA3, "a\xC2\xA0" "b", "a|\xC2\xA0" "b");
	assert_split(PRETOK_LLAMA3, "\xE6\x97\xA5\xE6\x9C\xAC 12",
		     "\xE6\x97\xA5\xE6\x9C\xAC| |12");
	assert_split(PRETOK_LLAMA3, "x \xFF y", "x| \xFF| y");
	assert_split(PRETOK_LLAMA3, "\xFF" "abc", "\xFF" "abc");
	assert_split(PRETOK_LLAMA3, "1a", "1|a");
	assert_split(PRETOK_LLAMA3, "\nabc", "\n|abc");
	assert_split(PRETOK_LLAMA3, "'", "'");
	assert_split(PRETOK_LLAMA3, "X'Sam 'LLx", "X|'S|am| '|LLx");
	assert_split(PRETOK_LLAMA3, "a\n\n  x", "a|\n\n| | x");
	assert_split(PRETOK_LLAMA3, "a \n \n  x", "a| \n \n| | x");
	assert_split(PRETOK_LLAMA3, " ", " ");
}

static void test_pretok_qwen2_gpt2(void **state)
{
	(void)state;
	assert_split(PRETOK_QWEN2, "12345", "1|2|3|4|5");
	assert_split(PRETOK_QWEN2, "I'LL x1", "I|'LL| x|1");
	assert_split(PRETOK_GPT2, "I'll DON'T", "I|'ll| DON|'|T");
	assert_split(PRETOK_GPT2, "12345678 x", "12345678| x");
	assert_split(PRETOK_GPT2, "a 123", "a| 123");
	assert_split(PRETOK_GPT2, "a  \n\n b", "a|  \n\n| b");
	assert_split(PRETOK_GPT2, "(hello)", "(|hello|)");
	assert_split(PRETOK_GPT2, " !!\n\nx", " !!|\n|\n|x");
	assert_split(PRETOK_GPT2, "x  ", "x|  ");
	assert_split(PRETOK_GPT2, "a\tb", "a|\t|b");
	/* SmolLM: every digit alone, \p{N} included, and a number ends the
	 * text for the space rules. */
	assert_split(PRETOK_SMOLLM, "a 123 b", "a| |1|2|3| b");
	assert_split(PRETOK_SMOLLM, "x  4y", "x|  |4|y");
	assert_split(PRETOK_SMOLLM, "\xD9\xA3" "4 \xC2\xB2", "\xD9\xA3|4| |\xC2\xB2");
	assert_split(PRETOK_SMOLLM, "I'll 5's", "I|'ll| |5|'s");
}

static void test_pretok_names(void **state)
{
	enum pretok_kind k;

	(void)state;
	assert_int_equal(pretok_from_name("llama-bpe", &k), 0);
	assert_int_equal(k, PRETOK_LLAMA3);
	assert_int_equal(pretok_from_name("qwen2", &k), 0);
	assert_int_equal(k, PRETOK_QWEN2);
	assert_int_equal(pretok_from_name("smollm", &k), 0);
	assert_int_equal(k, PRETOK_SMOLLM);
	assert_int_equal(pretok_from_name("gpt2", &k), 0);
	assert_int_equal(pretok_from_name("deepseek-llm", &k), -EINVAL);
	assert_int_equal(pretok_from_name("", &k), -EINVAL);
}

/* ------------------------------------------------------------------ */
/* Random vocabularies against the naive merges                        */
/* ------------------------------------------------------------------ */

/* The units random texts are made of. */
static const char *const units[] = {
	"a", "b", "c", "d", "e", "ab", "abc", " ", " ", "  ", "\n", "\t", "1",
	"22", "'s", "'", "!", "?", "\xC3\xA9", "\xE6\x97\xA5", "\xF0\x9F\x98\x80",
	"\xFF", "\x80", "z", "\xE2\x96", "<", ">",
};

static size_t random_text(struct rng *r, char *out, size_t max_units)
{
	size_t n = 0, k = 1 + rng_below(r, (uint32_t)max_units);

	for (size_t i = 0; i < k; i++) {
		const char *u = units[rng_below(r, sizeof(units) / sizeof(units[0]))];

		memcpy(out + n, u, strlen(u));
		n += strlen(u);
	}
	return n;
}

/* A byte-level BPE vocabulary: the 256 byte characters, random merges of
 * reachable tokens (their results added), ranks partly shuffled, a few
 * tokens no merge makes, a control and a user-defined token. */
static struct vb *random_bpe_vocab(struct rng *r)
{
	struct vb *v = calloc(1, sizeof(*v));
	int32_t reach[MAX_TOK];
	uint32_t n_reach = 0;
	const char *alpha = "abcde \n'!1";

	for (unsigned b = 0; b < 256; b++) {
		char s[4];
		size_t n = unicode_encode(bytelevel_cp((unsigned char)b), s);
		int32_t id = vb_add(v, s, n, GGUF_TOKEN_NORMAL, 0);

		if (strchr(alpha, (int)b) && b)
			reach[n_reach++] = id;
	}
	for (uint32_t m = 0, tries = 0; m < 300 && tries < 3000; tries++) {
		int32_t a = reach[rng_below(r, n_reach)];
		int32_t b = reach[rng_below(r, n_reach)];
		char cat[256];
		size_t n = v->tok_len[a] + v->tok_len[b];

		if (n > 24)
			continue;
		memcpy(cat, v->tok[a], v->tok_len[a]);
		memcpy(cat + v->tok_len[a], v->tok[b], v->tok_len[b]);
		if (vb_find(v, cat, n) < 0)
			reach[n_reach++] = vb_add(v, cat, n, GGUF_TOKEN_NORMAL, 0);
		vb_merge(v, v->tok[a], v->tok_len[a], v->tok[b], v->tok_len[b]);
		m++;
	}
	for (uint32_t i = 0; i < v->n_merges / 4; i++) {
		uint32_t x = rng_below(r, v->n_merges), y = rng_below(r, v->n_merges);
		char *m = v->merge[x];
		uint32_t l = v->merge_len[x];

		v->merge[x] = v->merge[y];
		v->merge_len[x] = v->merge_len[y];
		v->merge[y] = m;
		v->merge_len[y] = l;
	}
	vb_add(v, "abcab", 5, GGUF_TOKEN_NORMAL, 0);
	vb_add(v, "\xC4\xA0" "abc", 5, GGUF_TOKEN_NORMAL, 0);	/* " abc" */
	vb_add(v, "<|c|>", 5, GGUF_TOKEN_CONTROL, 0);
	vb_add(v, "<u>", 3, GGUF_TOKEN_USER_DEFINED, 0);
	return v;
}

static void compare_bpe(const struct tokenizer_vocab_spec *spec,
			const struct gguf_tokenizer *t, enum pretok_kind kind,
			const char *text, size_t len)
{
	size_t n, pos = 0;
	int32_t *got = encode(t, text, len, false, false, &n);
	int32_t *want = malloc((len + 1) * sizeof(*want));
	long n_want = 0;

	while (pos < len) {
		size_t end = pretok_next(kind, text, len, pos);
		long k = ref_bpe_word(spec, text + pos, end - pos,
				      kind == PRETOK_LLAMA3, want + n_want);

		assert_true(k >= 0);
		n_want += k;
		pos = end;
	}
	if ((size_t)n_want != n || memcmp(got, want, n * sizeof(*got))) {
		print_ids("expected", want, (size_t)n_want);
		print_ids("got", got, n);
		fail_msg("bpe (pre %d) differs from the naive loop on a %zu-byte text",
			 kind, len);
	}
	free(got);
	free(want);
}

static void test_bpe_matches_naive(void **state)
{
	static const char *const pres[] = { "gpt2", "llama-bpe", "qwen2", "smollm" };
	static const enum pretok_kind kinds[] = { PRETOK_GPT2, PRETOK_LLAMA3,
						  PRETOK_QWEN2, PRETOK_SMOLLM };
	struct rng r = rng_for(2);
	char text[4096];

	(void)state;
	for (int round = 0; round < 12; round++) {
		struct vb *v = random_bpe_vocab(&r);
		int p = round % 4;
		struct tokenizer_vocab_spec *spec = vb_spec(v, "gpt2", pres[p]);
		struct gguf_tokenizer *t = build_or_fail(spec);

		for (int i = 0; i < 150; i++) {
			size_t len = random_text(&r, text, i % 10 ? 20 : 200);

			compare_bpe(spec, t, kinds[p], text, len);
		}
		/* One word, long, so the heap holds many candidates. */
		memset(text, 'a', 3000);
		compare_bpe(spec, t, kinds[p], text, 3000);
		gguf_tokenizer_free(t);
		vb_free(v);
	}
}

/* A SentencePiece vocabulary: <unk> <s> </s>, the byte tokens, the
 * characters, random concatenations with few distinct scores (ties). */
static struct vb *random_spm_vocab(struct rng *r)
{
	static const char *const chars[] = {
		"\xE2\x96\x81", "a", "b", "c", "d", "e", "1", "'", "!", "\n",
		"\xC3\xA9", "\xE6\x97\xA5",
	};
	struct vb *v = calloc(1, sizeof(*v));
	uint32_t first;

	vb_add(v, "<unk>", 5, GGUF_TOKEN_UNKNOWN, 0);
	vb_add(v, "<s>", 3, GGUF_TOKEN_CONTROL, 0);
	vb_add(v, "</s>", 4, GGUF_TOKEN_CONTROL, 0);
	for (unsigned b = 0; b < 256; b++) {
		char s[8];

		snprintf(s, sizeof(s), "<0x%02X>", b);
		vb_add(v, s, 6, GGUF_TOKEN_BYTE, 0);
	}
	first = v->n;
	for (size_t i = 0; i < sizeof(chars) / sizeof(chars[0]); i++)
		vb_add(v, chars[i], strlen(chars[i]), GGUF_TOKEN_NORMAL,
		       -(float)rng_below(r, 4));
	for (int tries = 0; tries < 2000 && v->n < 700; tries++) {
		uint32_t a = first + rng_below(r, v->n - first);
		uint32_t b = first + rng_below(r, v->n - first);
		char cat[256];
		size_t n = v->tok_len[a] + v->tok_len[b];

		if (n > 20 || v->type[a] != GGUF_TOKEN_NORMAL ||
		    v->type[b] != GGUF_TOKEN_NORMAL)
			continue;
		memcpy(cat, v->tok[a], v->tok_len[a]);
		memcpy(cat + v->tok_len[a], v->tok[b], v->tok_len[b]);
		if (vb_find(v, cat, n) < 0)
			vb_add(v, cat, n, GGUF_TOKEN_NORMAL, -(float)rng_below(r, 6));
	}
	return v;
}

static void test_spm_matches_naive(void **state)
{
	struct rng r = rng_for(3);
	char text[4096];

	(void)state;
	for (int round = 0; round < 10; round++) {
		struct vb *v = random_spm_vocab(&r);
		struct tokenizer_vocab_spec *spec = vb_spec(v, "llama", NULL);
		struct gguf_tokenizer *t;

		spec->add_space_prefix = round % 2 == 0;
		t = build_or_fail(spec);
		for (int i = 0; i < 120; i++) {
			size_t len = random_text(&r, text, i % 10 ? 20 : 150), n;
			int32_t *got = encode(t, text, len, false, false, &n);
			int32_t *want = malloc((3 * len + 3) * sizeof(*want));
			long n_want = ref_spm_text(spec, text, len,
						   spec->add_space_prefix, want);

			if ((size_t)n_want != n || memcmp(got, want, n * sizeof(*got))) {
				print_ids("expected", want, (size_t)n_want);
				print_ids("got", got, n);
				fail_msg("spm differs from the naive loop (round %d case %d)",
					 round, i);
			}
			free(got);
			free(want);
		}
		gguf_tokenizer_free(t);
		vb_free(v);
	}
}

/* Any bytes come back from decode(encode()): both models. */
static void test_roundtrip_any_bytes(void **state)
{
	struct rng r = rng_for(4);
	char text[600];

	(void)state;
	for (int model = 0; model < 2; model++) {
		struct vb *v = model ? random_spm_vocab(&r) : random_bpe_vocab(&r);
		struct tokenizer_vocab_spec *spec =
			vb_spec(v, model ? "llama" : "gpt2", model ? NULL : "llama-bpe");
		struct gguf_tokenizer *t;

		spec->add_space_prefix = true;
		spec->bos_id = model ? 1 : -1;
		spec->add_bos = model;
		t = build_or_fail(spec);
		for (int i = 0; i < 400; i++) {
			size_t len = rng_below(&r, sizeof(text));

			for (size_t k = 0; k < len; k++)
				text[k] = (char)rng_below(&r, 256);
			/* U+2581 is a space to SentencePiece: it decodes as one. */
			if (model && memmem(text, len, "\xE2\x96\x81", 3))
				continue;
			assert_roundtrip(t, text, len, false);
			len = random_text(&r, text, 40);
			if (model && memmem(text, len, "\xE2\x96\x81", 3))
				continue;
			assert_roundtrip(t, text, len, true);
		}
		gguf_tokenizer_free(t);
		vb_free(v);
	}
}

/* ------------------------------------------------------------------ */
/* Specials, flags, errors                                             */
/* ------------------------------------------------------------------ */

static void test_specials(void **state)
{
	struct rng r = rng_for(5);
	struct vb *v = random_bpe_vocab(&r);
	struct tokenizer_vocab_spec *spec = vb_spec(v, "gpt2", "gpt2");
	int32_t ctl = vb_find(v, "<|c|>", 5), user = vb_find(v, "<u>", 3);
	int32_t lt = vb_find(v, "<", 1);
	struct gguf_tokenizer *t;
	int32_t ids[64];
	size_t n;

	(void)state;
	spec->bos_id = ctl;
	spec->eos_id = user;
	spec->add_bos = true;
	spec->add_eos = true;
	t = build_or_fail(spec);
	/* The control token is text unless parse_special; user-defined
	 * tokens are cut out always; BOS/EOS with add_special only. */
	assert_int_equal(gguf_tokenizer_encode(t, "<|c|><u>", 8, false, true,
					       ids, 64, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(ids[0], ctl);
	assert_int_equal(ids[1], user);
	assert_int_equal(gguf_tokenizer_encode(t, "<|c|><u>", 8, false, false,
					       ids, 64, &n), 0);
	assert_true(n > 2);
	assert_int_equal(ids[0], lt);
	assert_int_equal(ids[n - 1], user);
	assert_int_equal(gguf_tokenizer_encode(t, "<u>", 3, true, false, ids,
					       64, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(ids[0], ctl);
	assert_int_equal(ids[2], user);
	/* A control token decodes to nothing unless render_special. */
	{
		char out[16];
		size_t len;

		assert_int_equal(gguf_tokenizer_decode(t, -1, ids, 3, false, out,
						       sizeof(out), &len), 0);
		assert_int_equal(len, 6);
		assert_memory_equal(out, "<u><u>", 6);
		assert_int_equal(gguf_tokenizer_decode(t, -1, ids, 3, true, out,
						       sizeof(out), &len), 0);
		assert_int_equal(len, 11);
		assert_memory_equal(out, "<|c|><u><u>", 11);
		/* -ENOSPC: the count needed and a prefix. */
		assert_int_equal(gguf_tokenizer_decode(t, -1, ids, 3, true, out,
						       4, &len), -ENOSPC);
		assert_int_equal(len, 11);
		assert_memory_equal(out, "<|c|", 4);
		ids[1] = (int32_t)v->n;
		assert_int_equal(gguf_tokenizer_decode(t, -1, ids, 3, true, out,
						       sizeof(out), &len), -EINVAL);
		assert_int_equal(len, 1);
	}
	/* Too long a text is refused before it is read. */
	assert_int_equal(gguf_tokenizer_encode(t, "x", GGUF_TOKENIZER_MAX_TEXT + 1,
					       false, false, ids, 64, &n), -E2BIG);
	/* -ENOSPC on encode: the count needed. */
	assert_int_equal(gguf_tokenizer_encode(t, "<u><u><u>", 9, true, false,
					       ids, 2, &n), -ENOSPC);
	assert_int_equal(n, 5);
	gguf_tokenizer_free(t);
	vb_free(v);
}

/* The longer special wins where two overlap, as llama.cpp cuts. */
static void test_specials_longest_first(void **state)
{
	struct rng r = rng_for(6);
	struct vb *v = random_bpe_vocab(&r);
	int32_t ab = vb_add(v, "<ab>", 4, GGUF_TOKEN_USER_DEFINED, 0);
	int32_t abx = vb_add(v, "<ab>x", 5, GGUF_TOKEN_USER_DEFINED, 0);
	struct gguf_tokenizer *t = build_or_fail(vb_spec(v, "gpt2", "gpt2"));
	int32_t ids[16];
	size_t n;

	(void)state;
	assert_int_equal(gguf_tokenizer_encode(t, "<ab><ab>x", 9, false, false,
					       ids, 16, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(ids[0], ab);
	assert_int_equal(ids[1], abx);
	gguf_tokenizer_free(t);
	vb_free(v);
}

static void test_spm_prefix_and_decode(void **state)
{
	struct rng r = rng_for(7);
	struct vb *v = random_spm_vocab(&r);
	struct tokenizer_vocab_spec *spec = vb_spec(v, "llama", NULL);
	struct gguf_tokenizer *t;
	int32_t ids[16], sp = vb_find(v, "\xE2\x96\x81", 3);
	size_t n, len;
	const char *p;

	(void)state;
	spec->add_space_prefix = true;
	spec->bos_id = 1;
	spec->add_bos = true;
	t = build_or_fail(spec);
	/* "z" is no token: the prefix, then byte fallback. */
	assert_int_equal(gguf_tokenizer_encode(t, "z", 1, true, false, ids, 16,
					       &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(ids[0], 1);
	assert_int_equal(ids[1], sp);
	assert_int_equal(ids[2], 3 + 'z');
	/* The prefix's space goes after BOS or no token, not after text. */
	p = gguf_tokenizer_piece(t, 1, sp, false, &len);
	assert_int_equal(len, 0);
	p = gguf_tokenizer_piece(t, -1, sp, false, &len);
	assert_int_equal(len, 0);
	p = gguf_tokenizer_piece(t, 3 + 'z', sp, false, &len);
	assert_int_equal(len, 1);
	assert_memory_equal(p, " ", 1);
	p = gguf_tokenizer_piece(t, -1, 3 + 0xFF, false, &len);
	assert_int_equal(len, 1);
	assert_int_equal((unsigned char)p[0], 0xFF);
	p = gguf_tokenizer_piece(t, -1, 0, false, &len);
	assert_int_equal(len, 3);
	assert_memory_equal(p, "\xE2\x96\x85", 3);
	assert_null(gguf_tokenizer_piece(t, -1, (int32_t)v->n, false, &len));
	/* Empty text: BOS only. */
	assert_int_equal(gguf_tokenizer_encode(t, "", 0, true, false, ids, 16,
					       &n), 0);
	assert_int_equal(n, 1);
	gguf_tokenizer_free(t);
	vb_free(v);
}

/* Build from spec and expect a refusal whose message holds want. */
static void assert_refused(const struct tokenizer_vocab_spec *spec,
			   const char *want)
{
	struct gguf_tokenizer *t = NULL;
	char err[256] = "";

	assert_int_equal(gguf_tokenizer_create(spec, &t, err, sizeof(err)),
			 -EINVAL);
	assert_null(t);
	if (!strstr(err, want))
		fail_msg("error '%s' does not say '%s'", err, want);
}

static void test_bad_specs(void **state)
{
	struct rng r = rng_for(8);
	struct vb *v = random_bpe_vocab(&r);
	struct vb *s = random_spm_vocab(&r);
	struct tokenizer_vocab_spec *spec;
	float nan_score = NAN;
	int32_t byte_a = 3 + 'A';

	(void)state;
	spec = vb_spec(v, "bert", "gpt2");
	assert_refused(spec, "unknown tokenizer model 'bert'");
	spec = vb_spec(v, "gpt2", "deepseek-coder");
	assert_refused(spec, "unknown pre-tokenizer 'deepseek-coder'");
	spec = vb_spec(v, "gpt2", NULL);
	assert_refused(spec, "without a pre-tokenizer");
	spec = vb_spec(v, "gpt2", "gpt2");
	spec->bos_id = (int32_t)v->n;
	assert_refused(spec, "bos id");
	spec = vb_spec(v, "gpt2", "gpt2");
	spec->add_eos = true;
	assert_refused(spec, "add_eos");
	spec = vb_spec(v, "gpt2", "gpt2");
	spec->n_tokens = 200;	/* byte 0xC8.. missing, merges too */
	spec->n_merges = 0;
	assert_refused(spec, "lacks the byte-level character");
	v->type[300] = 9;
	assert_refused(vb_spec(v, "gpt2", "gpt2"), "token 300 has type 9");
	v->type[300] = GGUF_TOKEN_NORMAL;
	vb_merge(v, "a", 1, "zz", 2);
	assert_refused(vb_spec(v, "gpt2", "gpt2"), "names a missing token");
	free(v->merge[--v->n_merges]);
	vb_merge(v, "a", 1, "c", 1);
	if (vb_find(v, "ac", 2) < 0)
		assert_refused(vb_spec(v, "gpt2", "gpt2"), "no token");
	free(v->merge[--v->n_merges]);
	v->merge[v->n_merges] = strdup("abc");
	v->merge_len[v->n_merges++] = 3;
	assert_refused(vb_spec(v, "gpt2", "gpt2"), "has no space");

	spec = vb_spec(s, "llama", NULL);
	spec->scores = NULL;
	assert_refused(spec, "without scores");
	spec = vb_spec(s, "llama", NULL);
	spec->scores = NULL;
	s->score[300] = nan_score;
	assert_refused(vb_spec(s, "llama", NULL), "token 300 has a non-finite score");
	s->score[300] = 0;
	s->tok[byte_a][3] = 'x';	/* <0x41> becomes <0xx1> */
	assert_refused(vb_spec(s, "llama", NULL), "of type byte but not <0xXX>");
	s->type[byte_a] = GGUF_TOKEN_NORMAL;
	assert_refused(vb_spec(s, "llama", NULL), "lacks the byte token <0x41>");
	s->tok[byte_a][3] = '4';
	s->type[byte_a] = GGUF_TOKEN_BYTE;
	{
		struct gguf_tokenizer *t = build_or_fail(vb_spec(s, "llama", NULL));

		gguf_tokenizer_free(t);
	}
	s->tok[259][0] = 'X';	/* U+2581 is the first character */
	assert_refused(vb_spec(s, "llama", NULL), "lacks the space piece");
	s->tok[259][0] = '\xE2';
	spec = vb_spec(s, "llama", NULL);
	spec->n_tokens = 0;
	assert_refused(spec, "vocabulary of 0 tokens");
	vb_free(v);
	vb_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_utf8_matches_glibc),
		cmocka_unit_test(test_unicode_classes),
		cmocka_unit_test(test_bytelevel_map),
		cmocka_unit_test(test_pretok_llama3),
		cmocka_unit_test(test_pretok_qwen2_gpt2),
		cmocka_unit_test(test_pretok_names),
		cmocka_unit_test(test_bpe_matches_naive),
		cmocka_unit_test(test_spm_matches_naive),
		cmocka_unit_test(test_roundtrip_any_bytes),
		cmocka_unit_test(test_specials),
		cmocka_unit_test(test_specials_longest_first),
		cmocka_unit_test(test_spm_prefix_and_decode),
		cmocka_unit_test(test_bad_specs),
	};

	test_seed_init("test_gguf_tokenizer");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
