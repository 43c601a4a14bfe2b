/*
 * tokenizer.c - llama2.c's tokenizer.bin reader, encoder and decoder; the
 * semantics are in tokenizer.h.
 *
 * NOTES ON THE DESIGN
 *
 * Pieces live in one blob, each NUL-terminated so callers may print them;
 * a piece's bytes are its stated length, NULs included.  Looking a string
 * up is an open-addressing hash table over the ids (FNV-1a, linear
 * probing, at most half full), filled in id order so that the first id
 * found for a duplicated piece is the lowest.  Merging looks up the
 * concatenation of two pieces without building it: the hash of a||b is
 * FNV-1a continued over b, and the compare is two memcmp.
 *
 * llama2.c merges by rescanning every adjacent pair after each merge,
 * O(n^2) for n symbols.  Here the symbols form a doubly linked list over
 * an array (index = position in the text, so index order is text order,
 * and a merged symbol keeps its left index), and every adjacent pair whose
 * concatenation is a piece sits in a binary max-heap ordered by (score,
 * then lowest left index): the heap's top is exactly the pair llama2.c's
 * scan would pick (highest score, leftmost on ties).  A merge changes only
 * the merged symbol's two neighbour pairs, so it pushes at most two new
 * candidates: O(n log n) overall.  Stale candidates are not removed, they
 * are recognised when popped: a candidate records its left and right
 * indices and their token ids, and is still current iff the left symbol
 * is alive, its next is still the right one and both still hold the
 * recorded ids.  That is exact without generation counters because a
 * symbol's piece only grows when it merges, so its id never comes back.
 *
 * Segments.  At load, a 64 Kbit table records every byte pair (a, b) that
 * occurs inside some piece.  Two neighbours whose pieces meet at a pair
 * absent from it (the last byte of the left, the first of the right) can
 * never be inside one merged piece, whatever they become: a merge keeps
 * the left's first byte and the right's last one.  So the symbols are cut
 * there into segments that merge independently; llama2.c's global order,
 * restricted to one segment, is that segment's own order, so the result
 * is the same.  With a SentencePiece-style vocabulary (no piece has a
 * space after another character) every word is a segment: the heap stays
 * small and in cache, 4x faster on a 4 MB text than one global heap.  The
 * same table rejects most pairs before hashing them.
 */
#include "text/tokenizer.h"
#include "text/text_hash.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct tokenizer {
	uint32_t vocab_size;
	int32_t max_token_length;
	uint32_t longest_piece;	/* bytes of the longest decoded piece */
	char *blob;		/* every piece, each followed by a NUL */
	uint64_t *offset;	/* piece i starts at blob + offset[i] */
	uint32_t *length;	/* its length in bytes */
	float *score;
	int16_t *byte_value;	/* the raw byte of a "<0xNN>" piece, else -1 */
	int32_t *table;		/* hash table of ids, -1 = empty */
	uint64_t table_mask;
	/* bit (a << 8 | b) set iff some piece holds byte a followed by b */
	uint8_t bigram[65536 / 8];
};

/* One raw byte and its NUL for each value: what a byte piece decodes to. */
static const char byte_pieces[512] = {
#define B1(x) (char)(x), 0
#define B4(x) B1(x), B1(x + 1), B1(x + 2), B1(x + 3)
#define B16(x) B4(x), B4(x + 4), B4(x + 8), B4(x + 12)
#define B64(x) B16(x), B16(x + 16), B16(x + 32), B16(x + 48)
	B64(0), B64(64), B64(128), B64(192)
#undef B64
#undef B16
#undef B4
#undef B1
};

/* ------------------------------------------------------------------ */
/* Lookup                                                              */
/* ------------------------------------------------------------------ */

/* The id whose piece is a[0..la) b[0..lb), or -1. */
static int32_t lookup2(const struct tokenizer *t, const char *a, size_t la,
		       const char *b, size_t lb)
{
	uint64_t h = text_hash_continue(TEXT_HASH_OFFSET, a, la);

	h = text_hash_mix(text_hash_continue(h, b, lb));

	for (uint64_t i = h & t->table_mask;; i = (i + 1) & t->table_mask) {
		int32_t id = t->table[i];
		const char *p;

		if (id < 0)
			return -1;
		if (t->length[id] != la + lb)
			continue;
		p = t->blob + t->offset[id];
		if (memcmp(p, a, la) == 0 && memcmp(p + la, b, lb) == 0)
			return id;
	}
}

int32_t tokenizer_lookup(const struct tokenizer *t, const char *s,
			 size_t len)
{
	return lookup2(t, s, len, "", 0);
}

/* Insert id unless its piece is there already (a lower id keeps it). */
static void table_insert(struct tokenizer *t, int32_t id)
{
	const char *p = t->blob + t->offset[id];
	size_t len = t->length[id];
	uint64_t h = text_hash_mix(text_hash_continue(TEXT_HASH_OFFSET, p, len));

	for (uint64_t i = h & t->table_mask;; i = (i + 1) & t->table_mask) {
		int32_t other = t->table[i];

		if (other < 0) {
			t->table[i] = id;
			return;
		}
		if (t->length[other] == len &&
		    memcmp(t->blob + t->offset[other], p, len) == 0)
			return;
	}
}

/* The raw byte of a piece that is exactly "<0x" hex hex ">", or -1. */
static int byte_piece_value(const char *p, size_t len)
{
	int v = 0;

	if (len != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>')
		return -1;
	for (int i = 3; i < 5; i++) {
		char c = p[i];
		int d;

		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else
			return -1;
		v = v * 16 + d;
	}
	return v;
}

/* ------------------------------------------------------------------ */
/* Loading                                                             */
/* ------------------------------------------------------------------ */

static int32_t read_i32(const unsigned char *p)
{
	uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
		     (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	int32_t out;

	memcpy(&out, &v, sizeof(out));
	return out;
}

static float read_f32(const unsigned char *p)
{
	uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
		     (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	float out;

	memcpy(&out, &v, sizeof(out));
	return out;
}

void tokenizer_free(struct tokenizer *t)
{
	if (!t)
		return;
	free(t->blob);
	free(t->offset);
	free(t->length);
	free(t->score);
	free(t->byte_value);
	free(t->table);
	free(t);
}

/*
 * Walk the entries once to check them all and add up the blob's size,
 * so that nothing is allocated from a bad file's numbers.
 */
static int check_entries(const unsigned char *d, size_t size,
			 uint32_t vocab_size, int32_t max_len,
			 const char *name, uint64_t *blob_size, char *err,
			 size_t err_len)
{
	size_t off = 4;

	*blob_size = 0;
	for (uint32_t i = 0; i < vocab_size; i++) {
		int32_t len;
		float score;

		if (off == size) {
			snprintf(err, err_len,
				 "tokenizer '%s': holds %u tokens, the model's vocabulary has %u (the file ends at byte %zu)",
				 name, i, vocab_size, off);
			return -EINVAL;
		}
		if (size - off < 8) {
			snprintf(err, err_len,
				 "tokenizer '%s': truncated inside token %u at byte offset %zu: its score and length need 8 bytes, %zu are left",
				 name, i, off, size - off);
			return -EINVAL;
		}
		score = read_f32(d + off);
		len = read_i32(d + off + 4);
		if (!isfinite(score)) {
			snprintf(err, err_len,
				 "tokenizer '%s': token %u (byte offset %zu) has a non-finite score",
				 name, i, off);
			return -EINVAL;
		}
		if (len < 0) {
			snprintf(err, err_len,
				 "tokenizer '%s': token %u (byte offset %zu) has a negative length %d",
				 name, i, off + 4, len);
			return -EINVAL;
		}
		if (len > max_len) {
			snprintf(err, err_len,
				 "tokenizer '%s': token %u (byte offset %zu) has length %d, over the file's max_token_length %d",
				 name, i, off + 4, len, max_len);
			return -EINVAL;
		}
		off += 8;
		if ((size_t)len > size - off) {
			snprintf(err, err_len,
				 "tokenizer '%s': token %u's length %d at byte offset %zu runs past the end of the file (%zu bytes left)",
				 name, i, len, off - 4, size - off);
			return -EINVAL;
		}
		if (i >= TOKENIZER_BYTE0 && i < TOKENIZER_MIN_VOCAB &&
		    byte_piece_value((const char *)d + off, (size_t)len) !=
			    (int)(i - TOKENIZER_BYTE0)) {
			snprintf(err, err_len,
				 "tokenizer '%s': token %u (byte offset %zu) must be the byte piece <0x%02X> (byte fallback), it is not",
				 name, i, off - 8, i - TOKENIZER_BYTE0);
			return -EINVAL;
		}
		off += (size_t)len;
		*blob_size += (uint64_t)len + 1;
	}
	if (off != size) {
		snprintf(err, err_len,
			 "tokenizer '%s': %zu bytes left after the model's %u tokens (byte offset %zu): the file's vocabulary is bigger than the model's",
			 name, size - off, vocab_size, off);
		return -EINVAL;
	}
	return 0;
}

int tokenizer_load_mem(const void *data, size_t size, uint32_t vocab_size,
		       const char *name, struct tokenizer **out, char *err,
		       size_t err_len)
{
	const unsigned char *d = data;
	struct tokenizer *t;
	uint64_t blob_size, table_size, pos = 0;
	size_t off = 4;
	int32_t max_len;
	int rc;

	*out = NULL;
	if (vocab_size < TOKENIZER_MIN_VOCAB || vocab_size > TOKENIZER_MAX_VOCAB) {
		snprintf(err, err_len,
			 "tokenizer '%s': the model's vocabulary of %u tokens is outside %u..%u (<unk>, <s>, </s> and 256 byte tokens at least)",
			 name, vocab_size, TOKENIZER_MIN_VOCAB, TOKENIZER_MAX_VOCAB);
		return -EINVAL;
	}
	if (size < 4) {
		snprintf(err, err_len,
			 "tokenizer '%s': truncated: %zu bytes, shorter than the 4-byte max_token_length",
			 name, size);
		return -EINVAL;
	}
	max_len = read_i32(d);
	if (max_len <= 0 || max_len > TOKENIZER_MAX_TOKEN_LENGTH) {
		snprintf(err, err_len,
			 "tokenizer '%s': max_token_length %d at byte offset 0 is outside 1..%d",
			 name, max_len, TOKENIZER_MAX_TOKEN_LENGTH);
		return -EINVAL;
	}
	rc = check_entries(d, size, vocab_size, max_len, name, &blob_size,
			   err, err_len);
	if (rc)
		return rc;

	t = calloc(1, sizeof(*t));
	if (!t)
		goto nomem;
	t->vocab_size = vocab_size;
	t->max_token_length = max_len;
	for (table_size = 1; table_size < 2 * (uint64_t)vocab_size;)
		table_size *= 2;
	t->table_mask = table_size - 1;
	t->blob = malloc(blob_size);
	t->offset = malloc(vocab_size * sizeof(*t->offset));
	t->length = malloc(vocab_size * sizeof(*t->length));
	t->score = malloc(vocab_size * sizeof(*t->score));
	t->byte_value = malloc(vocab_size * sizeof(*t->byte_value));
	t->table = malloc(table_size * sizeof(*t->table));
	if (!t->blob || !t->offset || !t->length || !t->score ||
	    !t->byte_value || !t->table)
		goto nomem;
	memset(t->table, 0xff, table_size * sizeof(*t->table));
	for (uint32_t i = 0; i < vocab_size; i++) {
		uint32_t len = (uint32_t)read_i32(d + off + 4);

		t->score[i] = read_f32(d + off);
		t->offset[i] = pos;
		t->length[i] = len;
		memcpy(t->blob + pos, d + off + 8, len);
		t->blob[pos + len] = '\0';
		t->byte_value[i] =
			(int16_t)byte_piece_value(t->blob + pos, len);
		/* what the piece decodes to: a byte piece is one byte */
		if ((t->byte_value[i] >= 0 ? 1 : len) > t->longest_piece)
			t->longest_piece = t->byte_value[i] >= 0 ? 1 : len;
		for (uint32_t k = 0; k + 1 < len; k++) {
			unsigned bg = (unsigned char)t->blob[pos + k] << 8 |
				      (unsigned char)t->blob[pos + k + 1];

			t->bigram[bg / 8] |= (uint8_t)(1u << (bg % 8));
		}
		pos += len + 1;
		off += 8 + len;
		table_insert(t, (int32_t)i);
	}
	*out = t;
	return 0;
nomem:
	tokenizer_free(t);
	snprintf(err, err_len, "tokenizer '%s': out of memory", name);
	return -ENOMEM;
}

int tokenizer_load(const char *path, uint32_t vocab_size,
		   struct tokenizer **out, char *err, size_t err_len)
{
	struct stat st;
	char *data = NULL;
	size_t got = 0;
	int fd, rc;

	*out = NULL;
	/* O_NONBLOCK: a FIFO must not block us until a writer comes (the
	 * check below refuses it); it means nothing for a regular file */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, err_len, "cannot open tokenizer '%s': %s", path,
			 strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		snprintf(err, err_len, "cannot stat tokenizer '%s': %s", path,
			 strerror(-rc));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		snprintf(err, err_len, "tokenizer '%s': not a regular file",
			 path);
		goto out;
	}
	/* The file may change size under us: read what it holds now, and
	 * the parser judges those bytes. */
	data = malloc(st.st_size > 0 ? (size_t)st.st_size : 1);
	if (!data) {
		rc = -ENOMEM;
		snprintf(err, err_len, "tokenizer '%s': out of memory", path);
		goto out;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, data + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			snprintf(err, err_len, "cannot read tokenizer '%s': %s",
				 path, strerror(-rc));
			goto out;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	rc = tokenizer_load_mem(data, got, vocab_size, path, out, err,
				err_len);
out:
	free(data);
	close(fd);
	return rc;
}

uint32_t tokenizer_vocab_size(const struct tokenizer *t)
{
	return t->vocab_size;
}

int32_t tokenizer_max_token_length(const struct tokenizer *t)
{
	return t->max_token_length;
}

uint32_t tokenizer_longest_piece(const struct tokenizer *t)
{
	return t->longest_piece;
}

const char *tokenizer_raw_piece(const struct tokenizer *t, int32_t token,
				size_t *len, float *score)
{
	if (token < 0 || (uint32_t)token >= t->vocab_size)
		return NULL;
	if (len)
		*len = t->length[token];
	if (score)
		*score = t->score[token];
	return t->blob + t->offset[token];
}

/* ------------------------------------------------------------------ */
/* Encoding                                                            */
/* ------------------------------------------------------------------ */

/* llama2.c's starting best_score: a merge must score above it. */
#define MERGE_SCORE_FLOOR -1e10f

struct symbol {
	int32_t token;
	int32_t prev, next;	/* -1 at the ends */
	bool alive;
};

struct candidate {
	float score;
	int32_t left, right;	/* symbol indices */
	int32_t left_token, right_token, merged;
};

struct heap {
	struct candidate *c;
	size_t n;
};

/* Does a come out of the heap before b: higher score, then leftmost. */
static bool cand_before(const struct candidate *a, const struct candidate *b)
{
	if (a->score != b->score)
		return a->score > b->score;
	return a->left < b->left;
}

static void heap_push(struct heap *h, const struct candidate *c)
{
	size_t i = h->n++;

	while (i > 0) {
		size_t parent = (i - 1) / 2;

		if (!cand_before(c, &h->c[parent]))
			break;
		h->c[i] = h->c[parent];
		i = parent;
	}
	h->c[i] = *c;
}

static struct candidate heap_pop(struct heap *h)
{
	struct candidate top = h->c[0], last = h->c[--h->n];
	size_t i = 0;

	for (;;) {
		size_t child = 2 * i + 1;

		if (child >= h->n)
			break;
		if (child + 1 < h->n && cand_before(&h->c[child + 1], &h->c[child]))
			child++;
		if (!cand_before(&h->c[child], &last))
			break;
		h->c[i] = h->c[child];
		i = child;
	}
	if (h->n)
		h->c[i] = last;
	return top;
}

/*
 * Can the pieces of tokens a and b ever be inside one merged piece, a
 * before b?  Only if some piece holds a's last byte followed by b's first
 * (an empty piece: maybe).  A cheap necessary test, before any hashing.
 */
static bool may_join(const struct tokenizer *t, int32_t a, int32_t b)
{
	unsigned bg;

	if (t->length[a] == 0 || t->length[b] == 0)
		return true;
	bg = (unsigned char)t->blob[t->offset[a] + t->length[a] - 1] << 8 |
	     (unsigned char)t->blob[t->offset[b]];
	return t->bigram[bg / 8] >> (bg % 8) & 1;
}

/* Push the pair (left, its next) if its concatenation is a piece. */
static void push_pair(const struct tokenizer *t, struct heap *h,
		      const struct symbol *sym, int32_t left)
{
	struct candidate c;
	int32_t right, a, b, id;

	if (left < 0 || (right = sym[left].next) < 0)
		return;
	a = sym[left].token;
	b = sym[right].token;
	if (!may_join(t, a, b))
		return;
	id = lookup2(t, t->blob + t->offset[a], t->length[a],
		     t->blob + t->offset[b], t->length[b]);
	if (id < 0 || !(t->score[id] > MERGE_SCORE_FLOOR))
		return;
	c.score = t->score[id];
	c.left = left;
	c.right = right;
	c.left_token = a;
	c.right_token = b;
	c.merged = id;
	heap_push(h, &c);
}

/* Steps 1-3 of ENCODING: the symbols before merging.  Returns how many. */
static size_t initial_symbols(const struct tokenizer *t, const char *text,
			      size_t len, bool bos, struct symbol *sym)
{
	size_t n = 0, i = 0;

	if (bos)
		sym[n++].token = TOKENIZER_BOS;
	if (len > 0) {
		int32_t space = tokenizer_lookup(t, " ", 1);

		sym[n++].token = space >= 0 ? space : ' ' + TOKENIZER_BYTE0;
	}
	while (i < len) {
		size_t start = i++;
		int32_t id;

		/* a byte and up to 3 continuation bytes, as llama2.c cuts */
		while (i < len && i - start < 4 &&
		       ((unsigned char)text[i] & 0xC0) == 0x80)
			i++;
		id = tokenizer_lookup(t, text + start, i - start);
		if (id >= 0) {
			sym[n++].token = id;
			continue;
		}
		for (size_t k = start; k < i; k++)
			sym[n++].token = (unsigned char)text[k] + TOKENIZER_BYTE0;
	}
	return n;
}

/* Merge the symbols first..last (linked, alive) to the end: llama2.c's
 * loop, highest score first, leftmost on ties. */
static void merge_segment(const struct tokenizer *t, struct symbol *sym,
			  struct heap *h, int32_t first, int32_t last)
{
	for (int32_t i = first; i < last; i++)
		push_pair(t, h, sym, i);
	while (h->n > 0) {
		struct candidate c = heap_pop(h);
		struct symbol *l = &sym[c.left], *r = &sym[c.right];

		if (!l->alive || l->next != c.right ||
		    l->token != c.left_token || r->token != c.right_token)
			continue;	/* stale: a neighbour merged first */
		l->token = c.merged;
		l->next = r->next;
		if (r->next >= 0)
			sym[r->next].prev = c.left;
		r->alive = false;
		push_pair(t, h, sym, l->prev);
		push_pair(t, h, sym, c.left);
	}
}

int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len,
		     bool bos, bool eos, int32_t *out, size_t cap,
		     size_t *n_out)
{
	struct symbol *sym;
	struct heap h = { NULL, 0 };
	size_t n, count = 0, longest = 0, start = 0;

	*n_out = 0;
	if (len > TOKENIZER_MAX_TEXT)
		return -E2BIG;
	sym = malloc((len + 2) * sizeof(*sym));
	if (!sym)
		return -ENOMEM;
	n = initial_symbols(t, text, len, bos, sym);
	for (size_t i = 0; i < n; i++) {
		sym[i].prev = (int32_t)i - 1;
		sym[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
		sym[i].alive = true;
	}
	/* Segments: cut where two neighbours can never join (may_join());
	 * no merge ever crosses a cut, so each segment merges on its own in
	 * the same order, with a small heap that stays in cache. */
	for (size_t i = 1; i <= n; i++) {
		if (i < n && may_join(t, sym[i - 1].token, sym[i].token))
			continue;
		longest = i - start > longest ? i - start : longest;
		start = i;
	}
	/* Each merge pushes at most 2 candidates and removes a symbol, so
	 * (m - 1) initial pairs + 2 (m - 1) pushes bound a segment of m. */
	if (longest > 1) {
		h.c = malloc(3 * longest * sizeof(*h.c));
		if (!h.c) {
			free(sym);
			return -ENOMEM;
		}
	}
	start = 0;
	for (size_t i = 1; i <= n && longest > 1; i++) {
		if (i < n && may_join(t, sym[i - 1].token, sym[i].token))
			continue;
		if (i - start > 1)
			merge_segment(t, sym, &h, (int32_t)start,
				      (int32_t)i - 1);
		start = i;
	}

	for (int32_t i = n ? 0 : -1; i >= 0; i = sym[i].next) {
		if (count < cap)
			out[count] = sym[i].token;
		count++;
	}
	if (eos) {
		if (count < cap)
			out[count] = TOKENIZER_EOS;
		count++;
	}
	free(sym);
	free(h.c);
	*n_out = count;
	return count > cap ? -ENOSPC : 0;
}

/* ------------------------------------------------------------------ */
/* Decoding                                                            */
/* ------------------------------------------------------------------ */

const char *tokenizer_piece(const struct tokenizer *t, int32_t prev_token,
			    int32_t token, size_t *len)
{
	const char *p;
	size_t n;

	if (token < 0 || (uint32_t)token >= t->vocab_size)
		return NULL;
	if (t->byte_value[token] >= 0) {
		*len = 1;
		return byte_pieces + 2 * t->byte_value[token];
	}
	p = t->blob + t->offset[token];
	n = t->length[token];
	/* SentencePiece's decoder drops the dummy prefix after BOS */
	if (prev_token == TOKENIZER_BOS && n > 0 && p[0] == ' ') {
		p++;
		n--;
	}
	*len = n;
	return p;
}

int tokenizer_decode(const struct tokenizer *t, int32_t prev_token,
		     const int32_t *tokens, size_t n, char *out, size_t cap,
		     size_t *n_out)
{
	size_t used = 0;

	for (size_t i = 0; i < n; i++) {
		const char *p;
		size_t len;

		if (tokens[i] < 0 || (uint32_t)tokens[i] >= t->vocab_size) {
			*n_out = i;
			return -EINVAL;
		}
		if (tokens[i] != TOKENIZER_BOS && tokens[i] != TOKENIZER_EOS) {
			p = tokenizer_piece(t, prev_token, tokens[i], &len);
			if (used < cap)
				memcpy(out + used, p,
				       len < cap - used ? len : cap - used);
			used += len;
		}
		prev_token = tokens[i];
	}
	*n_out = used;
	return used > cap ? -ENOSPC : 0;
}
