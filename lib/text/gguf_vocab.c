/*
 * gguf_vocab.c - builds the vocabulary of a struct gguf_tokenizer from a
 * tokenizer_vocab_spec: validates it, copies the token texts, fills the
 * token and merge hash tables, finds the byte tokens and the specials,
 * and decodes every piece once so that decode() only copies.
 *
 * Both hash tables are open addressing with linear probing, at most half
 * full, sized to a power of two.  Tokens are inserted in id order, so a
 * duplicated text finds its lowest id; merges in rank order, so a
 * duplicated pair keeps its lowest rank.
 */
#include "text/gguf_tokenizer_impl.h"
#include "util/err_fail.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/bytelevel.h"
#include "text/text_hash.h"
#include "text/unicode.h"
#include "util/log_escape.h"


/* A table of at least 2n slots, a power of two. */
static uint64_t table_size(uint64_t n)
{
	uint64_t size = 16;

	while (size < 2 * n)
		size *= 2;
	return size;
}

int32_t gguf_vocab_lookup2(const struct gguf_tokenizer *t, const char *a,
			   size_t la, const char *b, size_t lb)
{
	uint64_t i;

	if (la + lb == 0 || la + lb > t->longest_token)
		return -1;
	i = text_hash_continue(TEXT_HASH_OFFSET, a, la);
	i = text_hash_mix(text_hash_continue(i, b, lb)) & t->tok_mask;
	for (;; i = (i + 1) & t->tok_mask) {
		int32_t id = t->tok_hash[i];
		const char *p;

		if (id < 0)
			return -1;
		if (t->len[id] != la + lb)
			continue;
		p = t->blob + t->off[id];
		if (memcmp(p, a, la) == 0 && memcmp(p + la, b, lb) == 0)
			return id;
	}
}

static void token_insert(struct gguf_tokenizer *t, int32_t id)
{
	const char *p = t->blob + t->off[id];
	uint64_t i;

	if (t->len[id] == 0)
		return;		/* an empty text is never looked up */
	i = text_hash_continue(TEXT_HASH_OFFSET, p, t->len[id]);
	i = text_hash_mix(i) & t->tok_mask;
	for (;; i = (i + 1) & t->tok_mask) {
		int32_t other = t->tok_hash[i];

		if (other < 0) {
			t->tok_hash[i] = id;
			return;
		}
		if (t->len[other] == t->len[id] &&
		    memcmp(t->blob + t->off[other], p, t->len[id]) == 0)
			return;
	}
}

static uint64_t pair_hash(int32_t left, int32_t right)
{
	return text_hash_mix(((uint64_t)(uint32_t)left << 32 | (uint32_t)right) *
		   0x9E3779B97F4A7C15ull);
}

const struct gguf_merge_slot *gguf_vocab_merge(const struct gguf_tokenizer *t,
					       int32_t left, int32_t right)
{
	uint64_t i;

	if (!t->merge_hash)
		return NULL;
	for (i = pair_hash(left, right) & t->merge_mask;;
	     i = (i + 1) & t->merge_mask) {
		const struct gguf_merge_slot *s = &t->merge_hash[i];

		if (s->left < 0)
			return NULL;
		if (s->left == left && s->right == right)
			return s;
	}
}

/* The token's text escaped for a message (into a compound literal). */
#define TOKSTR(t, id) log_escape((t)->blob + (t)->off[id], (char[64]){ 0 }, 64)

/* ------------------------------------------------------------------ */
/* Tokens                                                              */
/* ------------------------------------------------------------------ */

static int copy_tokens(struct gguf_tokenizer *t,
		       const struct tokenizer_vocab_spec *spec, char *err,
		       size_t err_len)
{
	uint64_t total = 0, at = 0;
	uint32_t n = spec->n_tokens;

	if (n == 0 || n > GGUF_TOKENIZER_MAX_VOCAB)
		return err_fail(err, err_len, "vocabulary of %u tokens (1..%u expected)",
			    n, GGUF_TOKENIZER_MAX_VOCAB);
	if (!spec->tokens || !spec->token_lens)
		return err_fail(err, err_len, "vocabulary without its token texts");
	for (uint32_t i = 0; i < n; i++) {
		if (spec->token_lens[i] > GGUF_TOKENIZER_MAX_TOKEN_LEN)
			return err_fail(err, err_len, "token %u is %u bytes long (at most %u)",
				    i, spec->token_lens[i], GGUF_TOKENIZER_MAX_TOKEN_LEN);
		if (spec->token_lens[i] && !spec->tokens[i])
			return err_fail(err, err_len, "token %u has no text", i);
		total += spec->token_lens[i] + 1;
	}
	t->n_tokens = n;
	t->blob = malloc(total);
	t->off = calloc(n, sizeof(*t->off));
	t->len = calloc(n, sizeof(*t->len));
	t->score = calloc(n, sizeof(*t->score));
	t->type = calloc(n, sizeof(*t->type));
	if (!t->blob || !t->off || !t->len || !t->score || !t->type)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		int32_t type = spec->token_types ? spec->token_types[i] : 1;

		if (type < 0 || type > GGUF_TOKEN_BYTE)
			return err_fail(err, err_len, "token %u has type %d (0..6 expected)",
				    i, type);
		if (spec->scores && !isfinite(spec->scores[i]))
			return err_fail(err, err_len, "token %u has a non-finite score", i);
		t->off[i] = at;
		t->len[i] = spec->token_lens[i];
		if (t->len[i])
			memcpy(t->blob + at, spec->tokens[i], t->len[i]);
		t->blob[at + t->len[i]] = '\0';
		at += t->len[i] + 1;
		t->type[i] = (uint8_t)(type ? type : GGUF_TOKEN_NORMAL);
		t->score[i] = spec->scores ? spec->scores[i] : 0.0f;
		if (t->len[i] > t->longest_token)
			t->longest_token = t->len[i];
	}
	return 0;
}

static int index_tokens(struct gguf_tokenizer *t)
{
	uint64_t size = table_size(t->n_tokens);

	t->tok_hash = malloc(size * sizeof(*t->tok_hash));
	if (!t->tok_hash)
		return -ENOMEM;
	memset(t->tok_hash, 0xFF, size * sizeof(*t->tok_hash));
	t->tok_mask = size - 1;
	for (uint32_t i = 0; i < t->n_tokens; i++)
		token_insert(t, (int32_t)i);
	return 0;
}

static int check_id(const struct gguf_tokenizer *t, const char *what,
		    int32_t id, char *err, size_t err_len)
{
	if (id < -1 || id >= (int64_t)t->n_tokens)
		return err_fail(err, err_len, "%s id %d is not a token (vocabulary of %u)",
			    what, id, t->n_tokens);
	return 0;
}

static int special_ids(struct gguf_tokenizer *t,
		       const struct tokenizer_vocab_spec *spec, char *err,
		       size_t err_len)
{
	int rc;

	if ((rc = check_id(t, "bos", spec->bos_id, err, err_len)) ||
	    (rc = check_id(t, "eos", spec->eos_id, err, err_len)) ||
	    (rc = check_id(t, "eot", spec->eot_id, err, err_len)) ||
	    (rc = check_id(t, "unk", spec->unk_id, err, err_len)) ||
	    (rc = check_id(t, "pad", spec->pad_id, err, err_len)))
		return rc;
	if (spec->add_bos && spec->bos_id < 0)
		return err_fail(err, err_len, "add_bos is set but there is no bos id");
	if (spec->add_eos && spec->eos_id < 0)
		return err_fail(err, err_len, "add_eos is set but there is no eos id");
	t->bos = spec->bos_id;
	t->eos = spec->eos_id;
	t->eot = spec->eot_id;
	t->unk = spec->unk_id;
	t->pad = spec->pad_id;
	t->add_bos = spec->add_bos;
	t->add_eos = spec->add_eos;
	t->add_space_prefix = t->model == GGUF_MODEL_SPM && spec->add_space_prefix;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Byte tokens and merges                                              */
/* ------------------------------------------------------------------ */

/* The byte of a text that is exactly "<0x" hex hex ">", or -1. */
static int byte_text_value(const char *p, size_t len)
{
	int v = 0;

	if (len != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>')
		return -1;
	for (int i = 3; i < 5; i++) {
		char c = p[i];

		if (c >= '0' && c <= '9')
			v = v * 16 + (c - '0');
		else if (c >= 'A' && c <= 'F')
			v = v * 16 + (c - 'A' + 10);
		else if (c >= 'a' && c <= 'f')
			v = v * 16 + (c - 'a' + 10);
		else
			return -1;
	}
	return v;
}

static int byte_tokens(struct gguf_tokenizer *t, char *err, size_t err_len)
{
	/* Without U+2581 each space would fall back to 3 byte tokens and
	 * gguf_tokenizer_encode_max() would not hold. */
	if (t->model == GGUF_MODEL_SPM &&
	    gguf_vocab_lookup2(t, "\xE2\x96\x81", 3, "", 0) < 0)
		return err_fail(err, err_len, "llama vocabulary lacks the space piece U+2581");
	for (uint32_t i = 0; i < t->n_tokens; i++)
		if (t->model == GGUF_MODEL_SPM && t->type[i] == GGUF_TOKEN_BYTE &&
		    byte_text_value(t->blob + t->off[i], t->len[i]) < 0)
			return err_fail(err, err_len,
				    "token %u '%s' is of type byte but not <0xXX>",
				    i, TOKSTR(t, i));
	for (unsigned b = 0; b < 256; b++) {
		char s[8];
		size_t n;

		if (t->model == GGUF_MODEL_SPM) {
			n = (size_t)snprintf(s, sizeof(s), "<0x%02X>", b);
		} else {
			n = unicode_encode(bytelevel_cp((unsigned char)b), s);
			memcpy(t->bl_text[b], s, n);
			t->bl_len[b] = (uint8_t)n;
		}
		t->byte_token[b] = gguf_vocab_lookup2(t, s, n, "", 0);
		if (t->byte_token[b] < 0) {
			s[n] = '\0';
			return err_fail(err, err_len, t->model == GGUF_MODEL_SPM ?
				    "llama vocabulary lacks the byte token %s (byte fallback)" :
				    "gpt2 vocabulary lacks the byte-level character '%s' of byte 0x%02X",
				    s, b);
		}
	}
	return 0;
}

static int add_merge(struct gguf_tokenizer *t, uint32_t rank, const char *m,
		     size_t len, char *err, size_t err_len)
{
	const char *sp = len > 1 ? memchr(m + 1, ' ', len - 1) : NULL;
	int32_t left, right, result;
	size_t la, lb;
	uint64_t i;

	if (!sp)
		return err_fail(err, err_len, "merge %u '%s' has no space between two tokens",
			    rank, log_escape(m, (char[64]){ 0 }, 64));
	la = (size_t)(sp - m);
	lb = len - la - 1;
	left = gguf_vocab_lookup2(t, m, la, "", 0);
	right = gguf_vocab_lookup2(t, sp + 1, lb, "", 0);
	if (left < 0 || right < 0)
		return err_fail(err, err_len, "merge %u '%s' names a missing token",
			    rank, log_escape(m, (char[64]){ 0 }, 64));
	result = gguf_vocab_lookup2(t, m, la, sp + 1, lb);
	if (result < 0)
		return err_fail(err, err_len, "merge %u '%s' makes a string that is no token",
			    rank, log_escape(m, (char[64]){ 0 }, 64));
	for (i = pair_hash(left, right) & t->merge_mask;;
	     i = (i + 1) & t->merge_mask) {
		struct gguf_merge_slot *s = &t->merge_hash[i];

		if (s->left < 0) {
			*s = (struct gguf_merge_slot){ left, right, result, rank };
			return 0;
		}
		if (s->left == left && s->right == right)
			return 0;	/* a lower rank has it */
	}
}

static int index_merges(struct gguf_tokenizer *t,
			const struct tokenizer_vocab_spec *spec, char *err,
			size_t err_len)
{
	uint64_t size;
	int rc;

	if (spec->n_merges > GGUF_TOKENIZER_MAX_MERGES)
		return err_fail(err, err_len, "%u merges (at most %u)", spec->n_merges,
			    GGUF_TOKENIZER_MAX_MERGES);
	if (spec->n_merges && (!spec->merges || !spec->merge_lens))
		return err_fail(err, err_len, "merges without their texts");
	size = table_size(spec->n_merges);
	t->merge_hash = malloc(size * sizeof(*t->merge_hash));
	if (!t->merge_hash)
		return -ENOMEM;
	memset(t->merge_hash, 0xFF, size * sizeof(*t->merge_hash));
	t->merge_mask = size - 1;
	for (uint32_t r = 0; r < spec->n_merges; r++) {
		/* The escaped message reads a NUL-terminated copy. */
		char small[256];
		size_t len = spec->merge_lens[r];
		char *m = len < sizeof(small) ? small : malloc(len + 1);

		if (!m)
			return -ENOMEM;
		if (len)
			memcpy(m, spec->merges[r], len);
		m[len] = '\0';
		rc = add_merge(t, r, m, len, err, err_len);
		if (m != small)
			free(m);
		if (rc)
			return rc;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Decoded pieces and specials                                         */
/* ------------------------------------------------------------------ */

/* Token i's decoded bytes into out (room for 2 * len + 3); returns n. */
static size_t decode_text(const struct gguf_tokenizer *t, uint32_t i, char *out)
{
	const char *p = t->blob + t->off[i];
	size_t len = t->len[i], n = 0, k = 0, step;

	if (t->type[i] == GGUF_TOKEN_CONTROL || t->type[i] == GGUF_TOKEN_USER_DEFINED) {
		memcpy(out, p, len);
		return len;
	}
	if (t->model == GGUF_MODEL_SPM) {
		if (t->type[i] == GGUF_TOKEN_BYTE) {
			out[0] = (char)byte_text_value(p, len);
			return 1;
		}
		if (t->type[i] == GGUF_TOKEN_UNKNOWN) {
			memcpy(out, "\xE2\x96\x85", 3);
			return 3;
		}
		while (k < len) {
			if (len - k >= 3 && memcmp(p + k, "\xE2\x96\x81", 3) == 0) {
				out[n++] = ' ';
				k += 3;
			} else {
				out[n++] = p[k++];
			}
		}
		return n;
	}
	while (k < len) {
		uint32_t cp = unicode_decode(p + k, len - k, &step);
		int b = cp == UNICODE_INVALID ? -1 : bytelevel_byte(cp);

		if (b >= 0) {
			out[n++] = (char)b;
		} else {
			/* Not of the byte-level alphabet: kept as it is. */
			memcpy(out + n, p + k, step);
			n += step;
		}
		k += step;
	}
	return n;
}

static int decode_pieces(struct gguf_tokenizer *t)
{
	uint64_t total = 0, at = 0;

	for (uint32_t i = 0; i < t->n_tokens; i++)
		total += t->len[i] + 4;
	t->pblob = malloc(total);
	t->poff = calloc(t->n_tokens, sizeof(*t->poff));
	t->plen = calloc(t->n_tokens, sizeof(*t->plen));
	if (!t->pblob || !t->poff || !t->plen)
		return -ENOMEM;
	for (uint32_t i = 0; i < t->n_tokens; i++) {
		size_t n = decode_text(t, i, t->pblob + at);

		t->poff[i] = at;
		t->plen[i] = (uint32_t)n;
		t->pblob[at + n] = '\0';
		at += n + 1;
		if (n > t->longest_piece)
			t->longest_piece = (uint32_t)n;
	}
	return 0;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static bool is_special(const struct gguf_tokenizer *t, uint32_t i)
{
	return (t->type[i] == GGUF_TOKEN_CONTROL ||
		t->type[i] == GGUF_TOKEN_USER_DEFINED) && t->len[i] > 0;
}

/* The specials, longest text first, then the lower id: sorted as keys
 * (complemented length << 32 | id). */
static int collect_specials(struct gguf_tokenizer *t)
{
	uint64_t *keys;
	uint32_t n = 0;

	for (uint32_t i = 0; i < t->n_tokens; i++)
		n += is_special(t, i);
	if (n == 0)
		return 0;
	keys = malloc(n * sizeof(*keys));
	t->specials = malloc(n * sizeof(*t->specials));
	if (!keys || !t->specials) {
		free(keys);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < t->n_tokens; i++)
		if (is_special(t, i))
			keys[t->n_specials++] = (uint64_t)(UINT32_MAX - t->len[i]) << 32 | i;
	qsort(keys, n, sizeof(*keys), u64_cmp);
	for (uint32_t k = 0; k < n; k++)
		t->specials[k] = (int32_t)(uint32_t)keys[k];
	free(keys);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Build                                                               */
/* ------------------------------------------------------------------ */

static int model_and_pre(struct gguf_tokenizer *t,
			 const struct tokenizer_vocab_spec *spec, char *err,
			 size_t err_len)
{
	if (!spec->model)
		return err_fail(err, err_len, "no tokenizer model (tokenizer.ggml.model)");
	if (strcmp(spec->model, "llama") == 0) {
		t->model = GGUF_MODEL_SPM;
		if (!spec->scores)
			return err_fail(err, err_len, "llama vocabulary without scores");
		return 0;
	}
	if (strcmp(spec->model, "gpt2") != 0)
		return err_fail(err, err_len, "unknown tokenizer model '%s' (llama or gpt2 expected)",
			    log_escape(spec->model, (char[64]){ 0 }, 64));
	t->model = GGUF_MODEL_BPE;
	if (!spec->pre)
		return err_fail(err, err_len, "gpt2 vocabulary without a pre-tokenizer name "
			    "(tokenizer.ggml.pre)");
	if (pretok_from_name(spec->pre, &t->pre) < 0)
		return err_fail(err, err_len, "unknown pre-tokenizer '%s'",
			    log_escape(spec->pre, (char[64]){ 0 }, 64));
	/* Llama 3's tokenizer takes a word that is a token whole. */
	t->ignore_merges = t->pre == PRETOK_LLAMA3;
	return 0;
}

int gguf_vocab_build(struct gguf_tokenizer *t,
		     const struct tokenizer_vocab_spec *spec, char *err,
		     size_t err_len)
{
	int rc;

	if ((rc = model_and_pre(t, spec, err, err_len)) ||
	    (rc = copy_tokens(t, spec, err, err_len)) ||
	    (rc = index_tokens(t)) ||
	    (rc = special_ids(t, spec, err, err_len)) ||
	    (rc = byte_tokens(t, err, err_len)) ||
	    (t->model == GGUF_MODEL_BPE &&
	     (rc = index_merges(t, spec, err, err_len))) ||
	    (rc = decode_pieces(t)) ||
	    (rc = collect_specials(t)))
		return rc;
	return 0;
}

void gguf_vocab_release(struct gguf_tokenizer *t)
{
	free(t->blob);
	free(t->off);
	free(t->len);
	free(t->score);
	free(t->type);
	free(t->pblob);
	free(t->poff);
	free(t->plen);
	free(t->tok_hash);
	free(t->merge_hash);
	free(t->specials);
}
