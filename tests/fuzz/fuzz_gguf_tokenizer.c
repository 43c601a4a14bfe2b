/*
 * fuzz_gguf_tokenizer.c - libFuzzer target for the GGUF tokenizers
 * (lib/text/gguf_tokenizer.c and the files under it): the vocabulary
 * builder on hostile specs, the encoder and decoder on any text.
 *
 * Input: a flags byte, then vocabulary pieces separated by '\n', then
 * "\n--\n" and the text (no marker: all text, no pieces).  Flags: bit 0
 * SentencePiece ("llama") else byte-level BPE ("gpt2"); bits 1-2 the
 * pre-tokenizer; bit 3 add_space_prefix; bit 4 parse_special; bit 5 a
 * hostile spec.
 *  - Hostile: on top of the valid vocabulary below, the pieces are more
 *    tokens as they are, types and scores drawn from their bytes (out of
 *    range, NaN), pieces with a space are merges, model and pre names
 *    sometimes wrong: building must succeed or fail with -EINVAL and a
 *    message; a built one is then used (no round trip promised).
 *  - Otherwise a valid vocabulary: the 256 byte tokens, each piece with
 *    every prefix (BPE: its merges, left to right; SPM: a random score),
 *    pieces "<...>" as control or user-defined tokens.  The fast encoder
 *    must give the naive one's ids (tools/refdecode/ref_bpe.c) when the
 *    vocabulary has no specials and the text is short.
 * Always: encode succeeds with ids in range and -ENOSPC asks for the same
 * count; decode(encode(s)) == s (render_special with parse_special; SPM:
 * unless s holds U+2581, which decodes as a space); ids from the input
 * decode or give -EINVAL.  Any violation abort()s.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/bytelevel.h"
#include "text/gguf_tokenizer.h"
#include "text/pretok.h"
#include "text/unicode.h"
#include "tools/refdecode/ref_bpe.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_rng.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_PIECES 48
#define MAX_PIECE 32
#define MAX_TOKENS (300 + MAX_PIECES * (MAX_PIECE + 1))
#define NAIVE_MAX_TEXT 256

struct vocab {
	char *tok[MAX_TOKENS];
	uint32_t len[MAX_TOKENS];
	float score[MAX_TOKENS];
	int32_t type[MAX_TOKENS];
	uint32_t n;
	char *merge[MAX_TOKENS];
	uint32_t merge_len[MAX_TOKENS];
	uint32_t n_merges;
	bool has_specials;
};

static void add_token(struct vocab *v, const char *s, size_t n, int32_t type,
		      float score)
{
	CHECK(v->n < MAX_TOKENS);
	v->tok[v->n] = malloc(n + 1);
	CHECK(v->tok[v->n]);
	memcpy(v->tok[v->n], s, n);
	v->len[v->n] = (uint32_t)n;
	v->type[v->n] = type;
	v->score[v->n++] = score;
}

static void add_merge(struct vocab *v, const char *a, size_t la,
		      const char *b, size_t lb)
{
	char *m = malloc(la + lb + 1);

	CHECK(m && v->n_merges < MAX_TOKENS);
	memcpy(m, a, la);
	m[la] = ' ';
	memcpy(m + la + 1, b, lb);
	v->merge[v->n_merges] = m;
	v->merge_len[v->n_merges++] = (uint32_t)(la + lb + 1);
}

static void free_vocab(struct vocab *v)
{
	for (uint32_t i = 0; i < v->n; i++)
		free(v->tok[i]);
	for (uint32_t i = 0; i < v->n_merges; i++)
		free(v->merge[i]);
}

/* The byte-level form of s[0..n) into out (2n bytes); its length. */
static size_t bytelevel_str(const char *s, size_t n, char *out)
{
	size_t at = 0;

	for (size_t i = 0; i < n; i++)
		at += unicode_encode(bytelevel_cp((unsigned char)s[i]), out + at);
	return at;
}

static bool is_special_piece(const char *p, size_t n)
{
	return n >= 3 && p[0] == '<' && p[n - 1] == '>';
}

static void valid_bpe(struct vocab *v, const char *const *pieces,
		      const size_t *lens, size_t n_pieces)
{
	for (unsigned b = 0; b < 256; b++) {
		char s[4];

		add_token(v, s, unicode_encode(bytelevel_cp((unsigned char)b), s),
			  GGUF_TOKEN_NORMAL, 0);
	}
	for (size_t i = 0; i < n_pieces; i++) {
		char prev[2 * MAX_PIECE], cur[2 * MAX_PIECE], last[4];
		size_t lp, lc, ll;

		if (is_special_piece(pieces[i], lens[i])) {
			add_token(v, pieces[i], lens[i], pieces[i][1] == 'u' ?
				  GGUF_TOKEN_USER_DEFINED : GGUF_TOKEN_CONTROL, 0);
			v->has_specials = true;
			continue;
		}
		lp = bytelevel_str(pieces[i], 1, prev);
		for (size_t k = 2; k <= lens[i]; k++) {
			lc = bytelevel_str(pieces[i], k, cur);
			ll = bytelevel_str(pieces[i] + k - 1, 1, last);
			add_token(v, cur, lc, GGUF_TOKEN_NORMAL, 0);
			add_merge(v, prev, lp, last, ll);
			memcpy(prev, cur, lc);
			lp = lc;
		}
	}
}

static void valid_spm(struct vocab *v, const char *const *pieces,
		      const size_t *lens, size_t n_pieces, struct rng *r)
{
	add_token(v, "<unk>", 5, GGUF_TOKEN_UNKNOWN, 0);
	add_token(v, "<s>", 3, GGUF_TOKEN_CONTROL, 0);
	add_token(v, "</s>", 4, GGUF_TOKEN_CONTROL, 0);
	for (unsigned b = 0; b < 256; b++) {
		char s[8];

		snprintf(s, sizeof(s), "<0x%02X>", b);
		add_token(v, s, 6, GGUF_TOKEN_BYTE, 0);
	}
	add_token(v, "\xE2\x96\x81", 3, GGUF_TOKEN_NORMAL, 0);
	for (size_t i = 0; i < n_pieces; i++) {
		if (is_special_piece(pieces[i], lens[i])) {
			add_token(v, pieces[i], lens[i], pieces[i][1] == 'u' ?
				  GGUF_TOKEN_USER_DEFINED : GGUF_TOKEN_CONTROL, 0);
			v->has_specials = true;
			continue;
		}
		for (size_t k = 1; k <= lens[i]; k++)
			add_token(v, pieces[i], k, GGUF_TOKEN_NORMAL,
				  -(float)rng_below(r, 16));
	}
}

static void hostile(struct vocab *v, const char *const *pieces,
		    const size_t *lens, size_t n_pieces, struct rng *r)
{
	uint32_t first_merge = v->n_merges;

	for (size_t i = 0; i < n_pieces; i++) {
		unsigned char c = lens[i] ? (unsigned char)pieces[i][0] : 0;
		float score = c == 0xEE ? NAN : -(float)(c % 7);

		add_token(v, pieces[i], lens[i], (int32_t)(c % 9) - 1, score);
		if (memchr(pieces[i], ' ', lens[i]))
			add_merge(v, pieces[i], lens[i], "", 0);
		if (rng_below(r, 4) == 0)
			add_token(v, pieces[i], lens[i] / 2, GGUF_TOKEN_NORMAL, 0);
	}
	/* Merge strings end in the space add_merge() puts: drop it. */
	for (uint32_t i = first_merge; i < v->n_merges; i++)
		v->merge_len[i]--;
}

static void check_text(const struct gguf_tokenizer *t, const char *text,
		       size_t len, bool parse_special, bool spm, bool roundtrip)
{
	size_t cap = gguf_tokenizer_encode_max(len), n, n2, n_dec;
	int32_t *ids = malloc(cap * sizeof(*ids));
	char *dec = malloc(len + 1);
	uint32_t vocab = gguf_tokenizer_vocab_size(t);

	CHECK(ids && dec);
	CHECK(gguf_tokenizer_encode(t, text, len, true, parse_special, ids, cap,
				    &n) == 0);
	for (size_t i = 0; i < n; i++)
		CHECK(ids[i] >= 0 && (uint32_t)ids[i] < vocab);
	if (n > 0) {
		CHECK(gguf_tokenizer_encode(t, text, len, true, parse_special,
					    ids, n - 1, &n2) == -ENOSPC);
		CHECK(n2 == n);
	}
	CHECK(gguf_tokenizer_encode(t, text, len, false, parse_special, ids,
				    cap, &n) == 0);
	if (roundtrip && (!spm || !memmem(text, len, "\xE2\x96\x81", 3))) {
		CHECK(gguf_tokenizer_decode(t, -1, ids, n, parse_special, dec,
					    len + 1, &n_dec) == 0);
		CHECK(n_dec == len && memcmp(dec, text, len) == 0);
	}
	free(ids);
	free(dec);
}

static void check_naive(const struct tokenizer_vocab_spec *spec,
			const struct gguf_tokenizer *t, enum pretok_kind kind,
			const char *text, size_t len, bool spm)
{
	size_t n, pos = 0;
	int32_t *got = malloc((len + 3) * sizeof(*got));
	int32_t *want = malloc((3 * len + 4) * sizeof(*want));
	long n_want = 0;

	CHECK(got && want);
	CHECK(gguf_tokenizer_encode(t, text, len, false, false, got, len + 3,
				    &n) == 0);
	if (spm) {
		n_want = ref_spm_text(spec, text, len, spec->add_space_prefix, want);
	} else {
		while (pos < len) {
			size_t end = pretok_next(kind, text, len, pos);
			long k;

			CHECK(end > pos && end <= len);
			k = ref_bpe_word(spec, text + pos, end - pos,
					 kind == PRETOK_LLAMA3, want + n_want);
			CHECK(k >= 0);
			n_want += k;
			pos = end;
		}
	}
	CHECK((size_t)n_want == n);
	CHECK(memcmp(got, want, n * sizeof(*got)) == 0);
	free(got);
	free(want);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const pres[] = { "gpt2", "llama-bpe", "qwen2", "smollm" };
	static const enum pretok_kind kinds[] = { PRETOK_GPT2, PRETOK_LLAMA3,
						  PRETOK_QWEN2, PRETOK_SMOLLM };
	static struct vocab v;
	const char *pieces[MAX_PIECES], *text, *body, *marker;
	size_t lens[MAX_PIECES], n_pieces = 0, text_len, body_len;
	struct tokenizer_vocab_spec spec;
	struct gguf_tokenizer *t = NULL;
	struct rng r = rng_for(data, size);
	char err[256] = "";
	uint8_t flags;
	int rc;

	if (size < 1)
		return 0;
	flags = data[0];
	body = (const char *)data + 1;
	body_len = size - 1;
	marker = memmem(body, body_len, "\n--\n", 4);
	text = marker ? marker + 4 : body;
	text_len = body_len - (size_t)(text - body);
	for (const char *p = body; marker && p < marker && n_pieces < MAX_PIECES;) {
		const char *nl = memchr(p, '\n', (size_t)(marker - p));
		size_t n = (size_t)((nl ? nl : marker) - p);

		if (n && n <= MAX_PIECE) {
			pieces[n_pieces] = p;
			lens[n_pieces++] = n;
		}
		p += n + 1;
	}
	memset(&v, 0, sizeof(v));
	if (flags & 1)
		valid_spm(&v, pieces, lens, n_pieces, &r);
	else
		valid_bpe(&v, pieces, lens, n_pieces);
	if (flags & 32)
		hostile(&v, pieces, lens, n_pieces, &r);
	memset(&spec, 0, sizeof(spec));
	spec.model = flags & 1 ? "llama" : "gpt2";
	spec.pre = pres[(flags >> 1) & 3];
	if ((flags & 32) && rng_below(&r, 8) == 0)
		spec.pre = rng_below(&r, 2) ? "bogus" : NULL;
	if ((flags & 32) && rng_below(&r, 8) == 0)
		spec.model = "t5";
	spec.n_tokens = v.n;
	spec.tokens = (const char *const *)v.tok;
	spec.token_lens = v.len;
	spec.scores = v.score;
	spec.token_types = v.type;
	spec.n_merges = v.n_merges;
	spec.merges = (const char *const *)v.merge;
	spec.merge_lens = v.merge_len;
	spec.bos_id = flags & 1 ? 1 : -1;
	spec.add_bos = flags & 1;
	spec.eos_id = spec.eot_id = spec.unk_id = spec.pad_id = -1;
	spec.add_space_prefix = flags & 8;
	rc = gguf_tokenizer_create(&spec, &t, err, sizeof(err));
	if (rc) {
		CHECK(rc == -EINVAL && t == NULL && err[0]);
		CHECK(flags & 32);
		free_vocab(&v);
		return 0;
	}
	check_text(t, text, text_len, flags & 16, flags & 1, !(flags & 32));
	if (!(flags & 32) && !v.has_specials && text_len <= NAIVE_MAX_TEXT)
		check_naive(&spec, t, kinds[(flags >> 1) & 3], text, text_len,
			    flags & 1);
	/* Ids from the input: decoded or refused, never read past. */
	{
		int32_t ids[16];
		char out[64];
		size_t n = text_len / 4 < 16 ? text_len / 4 : 16, n_out;

		memcpy(ids, text, n * sizeof(*ids));
		rc = gguf_tokenizer_decode(t, (int32_t)rng_below(&r, 8) - 1, ids,
					   n, flags & 16, out, sizeof(out), &n_out);
		CHECK(rc == 0 || rc == -ENOSPC || rc == -EINVAL);
	}
	gguf_tokenizer_free(t);
	free_vocab(&v);
	return 0;
}
