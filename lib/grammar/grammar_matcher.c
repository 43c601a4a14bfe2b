/*
 * grammar_matcher.c - the pushdown matcher over bytes; see grammar.h.
 *
 * A stack is a list of positions in g->elems, bottom first; its top is a
 * GR_CHAR (the next character this parse needs) and each position under
 * it is where its rule continues once the one above ends.  The empty
 * stack is a finished parse.  The state is the sorted, duplicate-free set
 * of stacks plus the UTF-8 code point read so far, kept as one word array
 * that is also the cache key:
 *
 *   [cp so far, bytes still needed | sequence length << 8, n_stacks,
 *    then per stack: its length, its positions]
 *
 * Expanding (after a character, and at the start) pops ended rules and
 * replaces a GR_REF top by its continuation plus one stack per
 * alternative; a reference that is the last element of its alternative
 * leaves no continuation (x* loops stay flat).  The parser refused left
 * recursion, so expansion ends; the caps bound it anyway.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/grammar_internal.h"

#define HDR GR_KEY_HDR
#define MAX_RAW GR_MAX_RAW
#define MAX_STEPS GR_MAX_STEPS

struct wbuf {
	uint32_t *w;
	uint32_t n, cap;
};

struct grammar_matcher {
	const struct grammar *g;
	struct wbuf key;	/* the state, canonical */
	struct wbuf next;	/* the state being built */
	struct wbuf out;	/* expansion outputs, [len, positions] each */
	struct wbuf work;	/* expansion worklist, [positions, len] each */
	uint32_t *offs;		/* out's stacks, for sorting */
	uint32_t cap_offs;
	struct grammar_step_stats st;	/* of the step under way */
	uint32_t cur[GRAMMAR_MAX_DEPTH + 2];
};

static int wb_reserve(struct wbuf *b, uint32_t extra)
{
	uint32_t nc;
	uint32_t *p;

	if (b->n + extra <= b->cap)
		return 0;
	nc = b->cap ? b->cap : 64;
	while (nc < b->n + extra)
		nc *= 2;
	p = realloc(b->w, (size_t)nc * sizeof(uint32_t));
	if (!p)
		return -ENOMEM;
	b->w = p;
	b->cap = nc;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Classes                                                             */
/* ------------------------------------------------------------------ */

/* Does class c hold a code point in [lo, hi]? */
static int class_meets(const struct grammar *g, uint32_t c, uint32_t lo,
		       uint32_t hi)
{
	const uint32_t *r = g->ranges;
	uint32_t a = g->cls_off[c], b = g->cls_off[c + 1];

	/* the first range whose end is >= lo */
	while (a < b) {
		uint32_t mid = a + (b - a) / 2;

		if (r[2 * mid + 1] < lo)
			a = mid + 1;
		else
			b = mid;
	}
	return a < g->cls_off[c + 1] && r[2 * a] <= hi;
}

/* ------------------------------------------------------------------ */
/* Expansion                                                           */
/* ------------------------------------------------------------------ */

static int push_work(struct grammar_matcher *m, const uint32_t *s,
		     uint32_t len)
{
	if (len > m->st.max_len)
		m->st.max_len = len;
	if (len > GRAMMAR_MAX_DEPTH)
		return -E2BIG;
	if (wb_reserve(&m->work, len + 1))
		return -ENOMEM;
	memcpy(m->work.w + m->work.n, s, (size_t)len * sizeof(uint32_t));
	m->work.w[m->work.n + len] = len;
	m->work.n += len + 1;
	return 0;
}

/* Expand everything on the worklist into m->out. */
static int expand(struct grammar_matcher *m, uint32_t *n_out)
{
	const struct grammar *g = m->g;
	uint32_t steps = 0;

	while (m->work.n) {
		uint32_t len = m->work.w[m->work.n - 1], p, e, a;
		uint32_t *s = m->cur;
		int rc;

		m->work.n -= len + 1;
		memcpy(s, m->work.w + m->work.n, (size_t)len * sizeof(uint32_t));
		if (++steps > MAX_STEPS)
			return -E2BIG;
		/* pop ended rules */
		while (len && GR_TYPE(g->elems[s[len - 1]]) == GR_END)
			len--;
		if (len && GR_TYPE(g->elems[s[len - 1]]) == GR_REF) {
			p = s[len - 1];
			e = g->elems[p];
			if (GR_TYPE(g->elems[p + 1]) == GR_END)
				len--;
			else
				s[len - 1] = p + 1;
			for (a = g->alt_off[GR_VAL(e)];
			     a < g->alt_off[GR_VAL(e) + 1]; a++) {
				s[len] = g->alts[a];
				rc = push_work(m, s, len + 1);
				if (rc)
					return rc;
			}
			continue;
		}
		/* a character on top, or the finished parse */
		if (++*n_out > MAX_RAW)
			return -E2BIG;
		if (wb_reserve(&m->out, len + 1))
			return -ENOMEM;
		m->out.w[m->out.n] = len;
		memcpy(m->out.w + m->out.n + 1, s, (size_t)len * sizeof(uint32_t));
		m->out.n += len + 1;
	}
	return 0;
}

/* Stacks at offsets *a and *b of base: by length, then positions. */
static int cmp_stack(const void *a, const void *b, void *base)
{
	const uint32_t *x = (const uint32_t *)base + *(const uint32_t *)a;
	const uint32_t *y = (const uint32_t *)base + *(const uint32_t *)b;

	if (x[0] != y[0])
		return x[0] < y[0] ? -1 : 1;
	return memcmp(x + 1, y + 1, (size_t)x[0] * sizeof(uint32_t));
}

/* m->next = header + m->out's stacks, sorted and unique. */
static int collect(struct grammar_matcher *m, uint32_t n_out, uint32_t w0,
		   uint32_t w1)
{
	uint32_t i, k = 0, o = 0, prev = UINT32_MAX;

	if (n_out > m->cap_offs) {
		uint32_t *p = realloc(m->offs, (size_t)n_out * sizeof(uint32_t));

		if (!p)
			return -ENOMEM;
		m->offs = p;
		m->cap_offs = n_out;
	}
	for (i = 0; i < n_out; i++) {
		m->offs[i] = o;
		o += m->out.w[o] + 1;
	}
	qsort_r(m->offs, n_out, sizeof(uint32_t), cmp_stack, m->out.w);
	m->next.n = 0;
	if (wb_reserve(&m->next, HDR + m->out.n))
		return -ENOMEM;
	m->next.n = HDR;
	for (i = 0; i < n_out; i++) {
		const uint32_t *s = m->out.w + m->offs[i];

		if (prev != UINT32_MAX && !cmp_stack(&prev, &m->offs[i], m->out.w))
			continue;
		prev = m->offs[i];
		memcpy(m->next.w + m->next.n, s, ((size_t)s[0] + 1) *
		       sizeof(uint32_t));
		m->next.n += s[0] + 1;
		k++;
	}
	if (k > GRAMMAR_MAX_STACKS)
		return -E2BIG;
	m->next.w[0] = w0;
	m->next.w[1] = w1;
	m->next.w[2] = k;
	return 0;
}

static void swap_next(struct grammar_matcher *m)
{
	struct wbuf t = m->key;

	m->key = m->next;
	m->next = t;
}

/* ------------------------------------------------------------------ */
/* Steps                                                               */
/* ------------------------------------------------------------------ */

/* The stacks whose top takes code point cp, advanced, into m->next. */
static int step_cp(struct grammar_matcher *m, uint32_t cp)
{
	const uint32_t *k = m->key.w;
	uint32_t i, o = HDR, n_out = 0;
	int rc;

	m->out.n = 0;
	m->work.n = 0;
	for (i = 0; i < k[2]; i++) {
		uint32_t len = k[o];
		const uint32_t *s = k + o + 1;

		o += len + 1;
		if (!len || !class_meets(m->g, GR_VAL(m->g->elems[s[len - 1]]),
					 cp, cp))
			continue;
		rc = push_work(m, s, len);
		if (rc)
			return rc;
		m->work.w[m->work.n - 2]++;	/* past the character */
		rc = expand(m, &n_out);
		if (rc)
			return rc;
	}
	if (!n_out)
		return -ENOENT;
	m->st.n_raw = n_out;
	return collect(m, n_out, 0, 0);
}

/* Keep the stacks that some code point in [lo, hi] could advance. */
static int step_partial(struct grammar_matcher *m, uint32_t lo, uint32_t hi,
			uint32_t w0, uint32_t w1)
{
	const uint32_t *k = m->key.w;
	uint32_t i, o = HDR, n = 0;

	m->next.n = 0;
	if (wb_reserve(&m->next, m->key.n))
		return -ENOMEM;
	m->next.n = HDR;
	for (i = 0; i < k[2]; i++) {
		uint32_t len = k[o];
		const uint32_t *s = k + o + 1;

		if (len && class_meets(m->g, GR_VAL(m->g->elems[s[len - 1]]),
				       lo, hi)) {
			memcpy(m->next.w + m->next.n, k + o,
			       ((size_t)len + 1) * sizeof(uint32_t));
			m->next.n += len + 1;
			n++;
		}
		o += len + 1;
	}
	if (!n)
		return -ENOENT;
	m->next.w[0] = w0;
	m->next.w[1] = w1;
	m->next.w[2] = n;
	return 0;
}

static const uint32_t utf8_min[5] = { 0, 0, 0x80, 0x800, 0x10000 };

int grammar_matcher_accept_byte(struct grammar_matcher *m, uint8_t b)
{
	uint32_t cp = m->key.w[0], need = m->key.w[1] & 0xff;
	uint32_t tot = m->key.w[1] >> 8, lo, hi;
	int rc;

	m->st = (struct grammar_step_stats){ 0, 0 };
	if (!need) {
		if (b < 0x80) {
			rc = step_cp(m, b);
			goto done;
		}
		if (b >= 0xc2 && b <= 0xdf) {
			tot = 2; cp = b & 0x1f;
		} else if (b >= 0xe0 && b <= 0xef) {
			tot = 3; cp = b & 0x0f;
		} else if (b >= 0xf0 && b <= 0xf4) {
			tot = 4; cp = b & 0x07;
		} else {
			return -ENOENT;
		}
		need = tot - 1;
	} else {
		if ((b & 0xc0) != 0x80)
			return -ENOENT;
		cp = (cp << 6) | (b & 0x3f);
		need--;
	}
	if (!need) {
		if (cp < utf8_min[tot] || cp > 0x10ffff ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return -ENOENT;
		rc = step_cp(m, cp);
		goto done;
	}
	lo = cp << (6 * need);
	hi = lo | ((1u << (6 * need)) - 1);
	if (lo < utf8_min[tot])
		lo = utf8_min[tot];
	if (hi > 0x10ffff)
		hi = 0x10ffff;
	if (lo >= 0xd800 && hi <= 0xdfff)
		return -ENOENT;
	if (lo > hi)
		return -ENOENT;
	rc = step_partial(m, lo, hi, cp, need | (tot << 8));
done:
	if (rc)
		return rc;
	swap_next(m);
	return 0;
}

int grammar_matcher_accept_bytes(struct grammar_matcher *m,
				 const uint8_t *bytes, size_t n)
{
	struct grammar_matcher *save;
	size_t i;
	int rc = 0;

	if (n == 1)
		return grammar_matcher_accept_byte(m, bytes[0]);
	save = grammar_matcher_clone(m);
	if (!save)
		return -ENOMEM;
	for (i = 0; i < n && !rc; i++)
		rc = grammar_matcher_accept_byte(m, bytes[i]);
	if (rc)
		grammar_matcher_copy(m, save);
	grammar_matcher_destroy(save);
	return rc;
}

bool grammar_matcher_is_accepting(const struct grammar_matcher *m)
{
	/* sorted by length first: the empty stack, if any, comes first */
	return m->key.w[1] == 0 && m->key.w[2] && m->key.w[HDR] == 0;
}

const uint32_t *grammar_matcher_key(const struct grammar_matcher *m,
				    uint32_t *n_words)
{
	*n_words = m->key.n;
	return m->key.w;
}

uint64_t grammar_key_hash(const uint32_t *key, uint32_t n_words)
{
	uint64_t h = 0x243f6a8885a308d3ull;
	uint32_t i;

	for (i = 0; i < n_words; i++) {
		h = (h + key[i]) * 0x9e3779b97f4a7c15ull;
		h ^= h >> 29;
	}
	return h;
}

uint64_t grammar_matcher_hash(const struct grammar_matcher *m)
{
	return grammar_key_hash(m->key.w, m->key.n);
}

int grammar_matcher_load(struct grammar_matcher *m, const uint32_t *key,
			 uint32_t n_words)
{
	m->key.n = 0;
	if (wb_reserve(&m->key, n_words))
		return -ENOMEM;
	memcpy(m->key.w, key, (size_t)n_words * sizeof(uint32_t));
	m->key.n = n_words;
	return 0;
}

const struct grammar *grammar_matcher_grammar(const struct grammar_matcher *m)
{
	return m->g;
}

void grammar_matcher_step_stats(const struct grammar_matcher *m,
				struct grammar_step_stats *st)
{
	*st = m->st;
}

/* ------------------------------------------------------------------ */
/* Lifetime                                                            */
/* ------------------------------------------------------------------ */

struct grammar_matcher *grammar_matcher_create(const struct grammar *g)
{
	struct grammar_matcher *m = calloc(1, sizeof(*m));
	uint32_t a, n_out = 0;

	if (!m)
		return NULL;
	m->g = g;
	for (a = g->alt_off[g->root]; a < g->alt_off[g->root + 1]; a++)
		if (push_work(m, &g->alts[a], 1))
			goto fail;
	if (expand(m, &n_out) || collect(m, n_out, 0, 0))
		goto fail;
	swap_next(m);
	return m;
fail:
	grammar_matcher_destroy(m);
	return NULL;
}

int grammar_matcher_copy(struct grammar_matcher *dst,
			 const struct grammar_matcher *src)
{
	dst->key.n = 0;
	if (wb_reserve(&dst->key, src->key.n))
		return -ENOMEM;
	memcpy(dst->key.w, src->key.w, (size_t)src->key.n * sizeof(uint32_t));
	dst->key.n = src->key.n;
	dst->g = src->g;
	return 0;
}

struct grammar_matcher *grammar_matcher_clone(const struct grammar_matcher *m)
{
	struct grammar_matcher *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	if (grammar_matcher_copy(c, m)) {
		grammar_matcher_destroy(c);
		return NULL;
	}
	return c;
}

void grammar_matcher_destroy(struct grammar_matcher *m)
{
	if (!m)
		return;
	free(m->key.w);
	free(m->next.w);
	free(m->out.w);
	free(m->work.w);
	free(m->offs);
	free(m);
}

/* A compiled grammar (gbnf_parse.c makes it) is its arrays. */
void grammar_destroy(struct grammar *g)
{
	if (!g)
		return;
	free(g->elems);
	free(g->alts);
	free(g->alt_off);
	free(g->cls_off);
	free(g->ranges);
	free(g);
}
