/*
 * tokenizer_train.c - BPE training for tools/make_tokenizer and the tests;
 * what is trained and how is in tokenizer_train.h.
 *
 * NOTES ON THE DESIGN
 *
 * Words are counted once (a hash map from their bytes to a word type) and
 * training works on the word types, each a small array of symbol ids
 * weighted by its count, as SentencePiece's trainer does.  Symbol ids are
 * the trainer's own (alphabet first, then merges in rank order); the file
 * ids are assigned when the file is written.  A code point left to byte
 * fallback is the symbol -1, which no pair includes.
 *
 * The reserved pieces ("<unk>", "<s>", "</s>", "<0xNN>") get score -1e10,
 * not llama's 0, and a merge whose concatenation would be one of them is
 * never learned: then no text can merge into a control or byte token
 * (llama2.c's encoder takes any piece scoring above -1e10 as a merge
 * result), so decoding gives back exactly the encoded text.
 */
#include "text/tokenizer_train.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"

#define RESERVED_SCORE -1e10f

const char tokenizer_builtin_corpus[] =
	"Once upon a time, there was a little cat named Tom. Tom liked to play in the garden.\n"
	"One day, Tom saw a big red ball in the garden. He ran to the ball and played with it all day.\n"
	"The sun was warm and the sky was blue. Tom was very happy, and his friend the dog was happy too.\n"
	"The price of the red ball was 5 \xe2\x82\xac, the blue ball was 7 \xe2\x82\xac and the big box was 12 \xe2\x82\xac.\n"
	"\"Can I have the ball?\" asked the little girl. \"Yes, you can,\" said her mother with a smile.\n"
	"They went to the shop and paid 3 \xe2\x82\xac for bread, 2 \xe2\x82\xac for milk and 4 \xe2\x82\xac for cheese.\n"
	"The children laughed \xf0\x9f\x98\x80 and played \xf0\x9f\x98\x80 until the stars came out \xf0\x9f\x98\x80.\n"
	"She sent a message: see you soon \xf0\x9f\x98\x80 and thank you for the cake \xf0\x9f\x98\x80!\n"
	"\xe4\xb8\xad\xe6\x96\x87\xe5\xbe\x88\xe6\x9c\x89\xe8\xb6\xa3\xe3\x80\x82\xe6\x88\x91\xe5\x96\x9c\xe6\xac\xa2\xe4\xb8\xad\xe6\x96\x87\xe3\x80\x82"
	"\xe5\xb0\x8f\xe7\x8c\xab\xe5\x96\x9c\xe6\xac\xa2\xe7\x8e\xa9\xe7\x90\x83\xe3\x80\x82\n"
	"\xe6\x88\x91\xe4\xbb\xac\xe5\x96\x9c\xe6\xac\xa2\xe5\xb0\x8f\xe7\x8c\xab\xe3\x80\x82\xe4\xb8\xad\xe6\x96\x87\xe5\x92\x8c\xe8\x8b\xb1\xe6\x96\x87\xe3\x80\x82\n"
	"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x82\x82\xe5\xa5\xbd\xe3\x81\x8d\xe3\x81\xa7\xe3\x81\x99\xe3\x80\x82"
	"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xaf\xe9\x9d\xa2\xe7\x99\xbd\xe3\x81\x84\xe3\x81\xa7\xe3\x81\x99\xe3\x80\x82\n"
	"The party \xf0\x9f\x8e\x89 had a crab \xf0\x9f\xa6\x80 and an ohm sign \xce\xa9 that nobody understood.\n"
	"Caf\xc3\xa9 au lait co\xc3\xbbte 3 \xe2\x82\xac au caf\xc3\xa9 pr\xc3\xa8s de la gare.\n"
	"The little dog ran after the cat, and the cat ran up the tree. The dog sat under the tree and waited.\n"
	"After a while the cat came down, and the cat and the dog became friends. They played together every day.\n"
	"Every morning the little girl said hello to the cat and the dog, and they were all happy together.\n"
	"Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 2024 3.14 42.\n"
	"Tabs\tand  double  spaces, punctuation; colons: dashes - and (brackets) [too] {all}.\n"
	"The end.\n";

/* ------------------------------------------------------------------ */
/* A map from byte strings to dense indices                            */
/* ------------------------------------------------------------------ */

struct strmap {
	struct strbuf keys;	/* every key's bytes, back to back */
	uint32_t *off, *len;	/* key i is keys.data + off[i] */
	uint32_t n, cap;
	int32_t *slot;		/* index or -1 */
	uint64_t mask;
};

static uint64_t train_hash(const char *s, size_t len)
{
	uint64_t h = 0xCBF29CE484222325ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001B3ull;
	h ^= h >> 29;
	h *= 0xBF58476D1CE4E5B9ull;
	return h ^ (h >> 32);
}

static void strmap_release(struct strmap *m)
{
	strbuf_release(&m->keys);
	free(m->off);
	free(m->len);
	free(m->slot);
	memset(m, 0, sizeof(*m));
}

static const char *strmap_key(const struct strmap *m, uint32_t i)
{
	return m->keys.data + m->off[i];
}

/* The index of s, or -1; with add, s is added when missing (-ENOMEM as
 * -2). */
static int32_t strmap_get(struct strmap *m, const char *s, size_t len,
			  bool add)
{
	uint64_t i;

	if (m->slot) {
		for (i = train_hash(s, len) & m->mask;;
		     i = (i + 1) & m->mask) {
			int32_t k = m->slot[i];

			if (k < 0)
				break;
			if (m->len[k] == len &&
			    memcmp(strmap_key(m, (uint32_t)k), s, len) == 0)
				return k;
		}
	}
	if (!add)
		return -1;
	if (2 * ((uint64_t)m->n + 1) > m->mask + 1 || !m->slot) {
		uint64_t size = m->slot ? 2 * (m->mask + 1) : 64;
		int32_t *slot = malloc(size * sizeof(*slot));

		if (!slot)
			return -2;
		memset(slot, 0xff, size * sizeof(*slot));
		free(m->slot);
		m->slot = slot;
		m->mask = size - 1;
		for (uint32_t k = 0; k < m->n; k++) {
			uint64_t j = train_hash(strmap_key(m, k), m->len[k]) &
				     m->mask;

			while (m->slot[j] >= 0)
				j = (j + 1) & m->mask;
			m->slot[j] = (int32_t)k;
		}
	}
	if (m->n == m->cap) {
		uint32_t cap = m->cap ? 2 * m->cap : 64;
		uint32_t *off = realloc(m->off, cap * sizeof(*off));

		if (!off)
			return -2;
		m->off = off;
		uint32_t *lens = realloc(m->len, cap * sizeof(*lens));

		if (!lens)
			return -2;
		m->len = lens;
		m->cap = cap;
	}
	m->off[m->n] = (uint32_t)m->keys.len;
	m->len[m->n] = (uint32_t)len;
	if (strbuf_append(&m->keys, s, len))
		return -2;
	for (i = train_hash(s, len) & m->mask; m->slot[i] >= 0;
	     i = (i + 1) & m->mask)
		;
	m->slot[i] = (int32_t)m->n;
	return (int32_t)m->n++;
}

/* ------------------------------------------------------------------ */
/* Training                                                            */
/* ------------------------------------------------------------------ */

struct word {
	uint64_t count;
	uint32_t n;
	int32_t *sym;
};

struct trainer {
	struct strmap words;	/* word bytes -> word type */
	uint64_t *word_count;
	struct word *w;
	struct strmap chars;	/* code point bytes -> index */
	uint64_t *char_count;
	struct strmap pieces;	/* piece bytes -> symbol id */
	uint32_t alphabet;
};

/* The length of the group at s (a byte and up to 3 continuation bytes,
 * as the encoder cuts), and whether it is one valid UTF-8 code point. */
static size_t group_len(const char *s, size_t len, bool *valid)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t n = 1, want;
	uint32_t cp;

	while (n < len && n < 4 && (u[n] & 0xC0) == 0x80)
		n++;
	if (u[0] < 0x80) {
		want = 1, cp = u[0];
	} else if ((u[0] & 0xE0) == 0xC0) {
		want = 2, cp = u[0] & 0x1F;
	} else if ((u[0] & 0xF0) == 0xE0) {
		want = 3, cp = u[0] & 0x0F;
	} else if ((u[0] & 0xF8) == 0xF0) {
		want = 4, cp = u[0] & 0x07;
	} else {
		*valid = false;
		return n;
	}
	*valid = n == want;
	for (size_t i = 1; *valid && i < n; i++)
		cp = cp << 6 | (u[i] & 0x3F);
	if (*valid)
		*valid = !(want == 2 && cp < 0x80) &&
			 !(want == 3 && (cp < 0x800 ||
					 (cp >= 0xD800 && cp <= 0xDFFF))) &&
			 !(want == 4 && (cp < 0x10000 || cp > 0x10FFFF));
	return n;
}

/* Count one occurrence of s in m (with its parallel counts). */
static int count_key(struct strmap *m, uint64_t **counts, const char *s,
		     size_t len, uint64_t by)
{
	uint32_t before = m->n, cap = m->cap;
	int32_t k = strmap_get(m, s, len, true);

	if (k < 0)
		return -ENOMEM;
	/* the counts are as long as the map's arrays */
	if (m->cap != cap) {
		uint64_t *c = realloc(*counts, m->cap * sizeof(*c));

		if (!c)
			return -ENOMEM;
		*counts = c;
	}
	if (m->n != before)
		(*counts)[k] = 0;
	(*counts)[k] += by;
	return 0;
}

/* Cut the text into words: " " + each line, split before each space. */
static int count_words(struct trainer *tr, const char *text, size_t len)
{
	struct strbuf line = STRBUF_INIT;
	size_t i = 0;
	int rc = 0;

	while (i < len && !rc) {
		size_t end = i;

		while (end < len && text[end] != '\n')
			end++;
		line.len = 0;
		rc = strbuf_append(&line, " ", 1) ?:
		     strbuf_append(&line, text + i, end - i);
		for (size_t s = 0; !rc && s < line.len;) {
			size_t e = s + 1;

			while (e < line.len && line.data[e] != ' ')
				e++;
			rc = count_key(&tr->words, &tr->word_count,
				       line.data + s, e - s, 1);
			s = e;
		}
		i = end + 1;
	}
	strbuf_release(&line);
	return rc;
}

struct char_rank {
	uint32_t idx;
	uint64_t count;
	const struct strmap *m;
};

static int char_rank_cmp(const void *pa, const void *pb)
{
	const struct char_rank *a = pa, *b = pb;
	uint32_t la = a->m->len[a->idx], lb = b->m->len[b->idx];
	int c;

	if (a->count != b->count)
		return a->count > b->count ? -1 : 1;
	c = memcmp(strmap_key(a->m, a->idx), strmap_key(b->m, b->idx),
		   la < lb ? la : lb);
	return c ? c : (la > lb) - (la < lb);
}

/* The alphabet: " " then code points seen twice or more, most frequent
 * first, at most budget in all. */
static int pick_alphabet(struct trainer *tr, uint32_t budget)
{
	struct char_rank *r;
	uint32_t n = 0;

	for (uint32_t k = 0; k < tr->words.n; k++) {
		const char *s = strmap_key(&tr->words, k);
		size_t len = tr->words.len[k];

		for (size_t i = 0; i < len;) {
			bool valid;
			size_t g = group_len(s + i, len - i, &valid);

			if (valid && count_key(&tr->chars, &tr->char_count,
					       s + i, g, tr->word_count[k]))
				return -ENOMEM;
			i += g;
		}
	}
	if (strmap_get(&tr->pieces, " ", 1, true) < 0)
		return -ENOMEM;
	r = malloc((tr->chars.n + 1) * sizeof(*r));
	if (!r)
		return -ENOMEM;
	for (uint32_t k = 0; k < tr->chars.n; k++)
		r[n++] = (struct char_rank){ k, tr->char_count[k], &tr->chars };
	qsort(r, n, sizeof(*r), char_rank_cmp);
	for (uint32_t k = 0; k < n && tr->pieces.n < budget; k++) {
		if (r[k].count < 2)
			break;
		if (strmap_get(&tr->pieces, strmap_key(&tr->chars, r[k].idx),
			       tr->chars.len[r[k].idx], true) < 0) {
			free(r);
			return -ENOMEM;
		}
	}
	free(r);
	tr->alphabet = tr->pieces.n;
	return 0;
}

/* Every word type as symbols of the alphabet (-1: byte fallback). */
static int split_words(struct trainer *tr)
{
	tr->w = calloc(tr->words.n + 1, sizeof(*tr->w));
	if (!tr->w)
		return -ENOMEM;
	for (uint32_t k = 0; k < tr->words.n; k++) {
		const char *s = strmap_key(&tr->words, k);
		size_t len = tr->words.len[k];
		struct word *w = &tr->w[k];

		w->count = tr->word_count[k];
		w->sym = malloc((len + 1) * sizeof(*w->sym));
		if (!w->sym)
			return -ENOMEM;
		for (size_t i = 0; i < len;) {
			bool valid;
			size_t g = group_len(s + i, len - i, &valid);

			w->sym[w->n++] = valid ?
				strmap_get(&tr->pieces, s + i, g, false) : -1;
			i += g;
		}
	}
	return 0;
}

/* Would the piece collide with a reserved one (see the file comment)? */
static bool is_reserved(const char *s, size_t len)
{
	if ((len == 5 && memcmp(s, "<unk>", 5) == 0) ||
	    (len == 3 && memcmp(s, "<s>", 3) == 0) ||
	    (len == 4 && memcmp(s, "</s>", 4) == 0))
		return true;
	return len == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' &&
	       strchr("0123456789ABCDEFabcdef", s[3]) && s[3] &&
	       strchr("0123456789ABCDEFabcdef", s[4]) && s[4];
}

struct pair_table {
	uint64_t *key;		/* a << 32 | b, or UINT64_MAX empty */
	uint64_t *count;
	uint64_t mask;
};

static uint64_t pair_key(int32_t a, int32_t b)
{
	return (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}

static void pair_add(struct pair_table *p, uint64_t key, uint64_t by)
{
	uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> 20 & p->mask;

	while (p->key[i] != UINT64_MAX && p->key[i] != key)
		i = (i + 1) & p->mask;
	p->key[i] = key;
	p->count[i] += by;
}

/*
 * The most frequent pair not in banned[0..n_banned) (ties: the lower
 * key), or UINT64_MAX when there is none.
 */
static uint64_t best_pair(const struct trainer *tr, struct pair_table *p,
			  const uint64_t *banned, size_t n_banned)
{
	uint64_t best = UINT64_MAX, best_count = 0;

	memset(p->key, 0xff, (p->mask + 1) * sizeof(*p->key));
	memset(p->count, 0, (p->mask + 1) * sizeof(*p->count));
	for (uint32_t k = 0; k < tr->words.n; k++) {
		const struct word *w = &tr->w[k];

		for (uint32_t i = 0; i + 1 < w->n; i++)
			if (w->sym[i] >= 0 && w->sym[i + 1] >= 0)
				pair_add(p, pair_key(w->sym[i], w->sym[i + 1]),
					 w->count);
	}
	for (uint64_t i = 0; i <= p->mask; i++) {
		bool skip = false;

		if (p->key[i] == UINT64_MAX)
			continue;
		for (size_t b = 0; b < n_banned && !skip; b++)
			skip = banned[b] == p->key[i];
		if (skip)
			continue;
		if (p->count[i] > best_count ||
		    (p->count[i] == best_count && p->key[i] < best)) {
			best = p->key[i];
			best_count = p->count[i];
		}
	}
	return best;
}

/* Replace every (a, b) by m, left to right. */
static void apply_merge(struct trainer *tr, int32_t a, int32_t b, int32_t m)
{
	for (uint32_t k = 0; k < tr->words.n; k++) {
		struct word *w = &tr->w[k];
		uint32_t out = 0;

		for (uint32_t i = 0; i < w->n;) {
			if (i + 1 < w->n && w->sym[i] == a && w->sym[i + 1] == b) {
				w->sym[out++] = m;
				i += 2;
			} else {
				w->sym[out++] = w->sym[i++];
			}
		}
		w->n = out;
	}
}

/* Learn merges until the pieces number target (or no pair is left). */
static int learn_merges(struct trainer *tr, uint32_t target)
{
	struct pair_table p = { 0 };
	struct strbuf cat = STRBUF_INIT;
	uint64_t *banned = NULL, size = 64, pairs = 0;
	size_t n_banned = 0;
	int rc = 0;

	for (uint32_t k = 0; k < tr->words.n; k++)
		pairs += tr->w[k].n;
	while (size < 2 * pairs)
		size *= 2;
	p.mask = size - 1;
	p.key = malloc(size * sizeof(*p.key));
	p.count = malloc(size * sizeof(*p.count));
	if (!p.key || !p.count)
		rc = -ENOMEM;
	while (!rc && tr->pieces.n < target) {
		uint64_t best = best_pair(tr, &p, banned, n_banned);
		int32_t a, b, m;

		if (best == UINT64_MAX)
			break;
		a = (int32_t)(best >> 32);
		b = (int32_t)(uint32_t)best;
		cat.len = 0;
		rc = strbuf_append(&cat, strmap_key(&tr->pieces, (uint32_t)a),
				   tr->pieces.len[a]) ?:
		     strbuf_append(&cat, strmap_key(&tr->pieces, (uint32_t)b),
				   tr->pieces.len[b]);
		if (rc)
			break;
		if (is_reserved(cat.data, cat.len)) {
			uint64_t *nb = realloc(banned,
					       (n_banned + 1) * sizeof(*nb));

			if (!nb) {
				rc = -ENOMEM;
				break;
			}
			banned = nb;
			banned[n_banned++] = best;
			continue;
		}
		m = strmap_get(&tr->pieces, cat.data, cat.len, true);
		if (m < 0) {
			rc = -ENOMEM;
			break;
		}
		apply_merge(tr, a, b, m);
	}
	free(p.key);
	free(p.count);
	free(banned);
	strbuf_release(&cat);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Writing tokenizer.bin                                               */
/* ------------------------------------------------------------------ */

/* v as 4 little-endian bytes, as llama2.c's files are on its machines. */
static int put_u32(struct strbuf *out, uint32_t v)
{
	unsigned char b[4] = { (unsigned char)v, (unsigned char)(v >> 8),
			       (unsigned char)(v >> 16),
			       (unsigned char)(v >> 24) };

	return strbuf_append(out, b, 4);
}

static int put_token(struct strbuf *out, float score, const char *s,
		     size_t len)
{
	uint32_t bits;

	memcpy(&bits, &score, 4);
	return put_u32(out, bits) ?: put_u32(out, (uint32_t)len) ?:
	       strbuf_append(out, s, len);
}

static int write_file(const struct trainer *tr, uint32_t vocab_size,
		      struct strbuf *out, struct tokenizer_train_stats *st)
{
	uint32_t merges = tr->pieces.n - tr->alphabet;
	uint32_t padding = vocab_size - TOKENIZER_MIN_VOCAB - tr->pieces.n;
	int32_t max_len = 6;	/* "<0xNN>" */
	size_t header = out->len;
	char name[32];
	int rc;

	for (uint32_t k = 0; k < tr->pieces.n; k++)
		if ((int32_t)tr->pieces.len[k] > max_len)
			max_len = (int32_t)tr->pieces.len[k];
	if (padding)
		max_len = max_len > 20 ? max_len : 20;
	rc = put_u32(out, (uint32_t)max_len) ?:
	     put_token(out, RESERVED_SCORE, "<unk>", 5) ?:
	     put_token(out, RESERVED_SCORE, "<s>", 3) ?:
	     put_token(out, RESERVED_SCORE, "</s>", 4);
	for (int b = 0; !rc && b < 256; b++) {
		snprintf(name, sizeof(name), "<0x%02X>", b);
		rc = put_token(out, RESERVED_SCORE, name, 6);
	}
	/* merges in rank order, score -rank */
	for (uint32_t r = 0; !rc && r < merges; r++) {
		uint32_t k = tr->alphabet + r;

		rc = put_token(out, r ? -(float)r : 0.0f,
			       strmap_key(&tr->pieces, k),
			       tr->pieces.len[k]);
	}
	for (uint32_t k = 0; !rc && k < tr->alphabet; k++)
		rc = put_token(out, -(float)(merges + k),
			       strmap_key(&tr->pieces, k), tr->pieces.len[k]);
	for (uint32_t k = 0; !rc && k < padding; k++) {
		int n = snprintf(name, sizeof(name), "<extra_%u>", k);

		rc = put_token(out, RESERVED_SCORE, name, (size_t)n);
	}
	if (rc) {
		out->len = header;
		return -ENOMEM;
	}
	if (st) {
		st->alphabet = tr->alphabet;
		st->merges = merges;
		st->padding = padding;
		st->max_token_length = max_len;
	}
	return 0;
}

int tokenizer_train(const char *text, size_t len, uint32_t vocab_size,
		    struct strbuf *out, struct tokenizer_train_stats *stats,
		    char *err, size_t err_len)
{
	struct trainer tr = { 0 };
	uint32_t budget;
	int rc;

	if (vocab_size < TOKENIZER_MIN_VOCAB + 1 ||
	    vocab_size > TOKENIZER_MAX_VOCAB) {
		snprintf(err, err_len,
			 "vocabulary of %u tokens is outside %u..%u (<unk>, <s>, </s>, 256 byte tokens and \" \" at least)",
			 vocab_size, TOKENIZER_MIN_VOCAB + 1, TOKENIZER_MAX_VOCAB);
		return -EINVAL;
	}
	budget = vocab_size - TOKENIZER_MIN_VOCAB;
	rc = count_words(&tr, text, len) ?: pick_alphabet(&tr, budget) ?:
	     split_words(&tr) ?: learn_merges(&tr, budget) ?:
	     write_file(&tr, vocab_size, out, stats);
	if (rc == -ENOMEM)
		snprintf(err, err_len, "out of memory training the tokenizer");
	for (uint32_t k = 0; tr.w && k < tr.words.n; k++)
		free(tr.w[k].sym);
	free(tr.w);
	free(tr.word_count);
	free(tr.char_count);
	strmap_release(&tr.words);
	strmap_release(&tr.chars);
	strmap_release(&tr.pieces);
	return rc;
}
