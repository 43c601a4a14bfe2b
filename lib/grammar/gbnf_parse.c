/*
 * gbnf_parse.c - GBNF source to the compiled grammar; see grammar.h.
 *
 * A recursive-descent parser, its only recursion the ( ) groups, capped
 * at GRAMMAR_MAX_NEST.  Rules are built as element lists with GR_ALT
 * between alternatives; groups and repetitions become generated rules
 * (x* is R ::= x R | "", x{m,n} is m copies of x then a chain of n-m
 * optional rules), so the matcher sees only characters and references.
 * Whitespace, newlines and comments separate tokens anywhere; a rule ends
 * where the next "name ::=" starts.  After parsing: every referenced rule
 * must be defined, root must exist, and no rule may reach itself without
 * consuming a character (left recursion, or a repetition of something
 * that can be empty), which the matcher could not expand finitely.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/grammar_internal.h"

struct brule {
	char *name;
	uint32_t *e;
	uint32_t n, cap;
	size_t def_pos;		/* where defined (or generated), for messages */
	size_t use_pos;		/* first reference, for "undefined" */
	int defined;
};

struct pstate {
	const char *s;
	size_t len, pos;
	char *err;
	size_t err_len;
	int failed;
	int depth;
	struct brule *rules;
	uint32_t n_rules, cap_rules;
	uint32_t *names_ht;	/* open addressing: rule id + 1, 0 = empty */
	uint32_t ht_cap;
	uint32_t *ranges;	/* lo, hi pairs */
	uint32_t n_ranges, cap_ranges;
	uint32_t *cls_off;
	uint32_t n_classes, cap_classes;
	size_t total;
};

/* ------------------------------------------------------------------ */
/* Errors and buffers                                                  */
/* ------------------------------------------------------------------ */

static void perr(struct pstate *ps, size_t at, const char *fmt, ...)
{
	size_t line = 1, col = 1, i;
	va_list ap;
	int k;

	if (ps->failed)
		return;
	ps->failed = 1;
	if (at > ps->len)
		at = ps->len;
	for (i = 0; i < at; i++) {
		if (ps->s[i] == '\n') {
			line++;
			col = 1;
		} else {
			col++;
		}
	}
	if (!ps->err || !ps->err_len)
		return;
	k = snprintf(ps->err, ps->err_len, "grammar line %zu column %zu: ",
		     line, col);
	if (k < 0 || (size_t)k >= ps->err_len)
		return;
	va_start(ap, fmt);
	vsnprintf(ps->err + k, ps->err_len - (size_t)k, fmt, ap);
	va_end(ap);
}

/* Grow *p (elements of size sz) to hold need; 0 or -1 (error set). */
static int grow(struct pstate *ps, void **p, uint32_t *cap, uint32_t need,
		size_t sz)
{
	uint32_t nc;
	void *q;

	if (need <= *cap)
		return 0;
	nc = *cap ? *cap : 8;
	while (nc < need)
		nc *= 2;
	q = realloc(*p, (size_t)nc * sz);
	if (!q) {
		perr(ps, ps->pos, "out of memory");
		return -1;
	}
	*p = q;
	*cap = nc;
	return 0;
}

static int emit(struct pstate *ps, uint32_t rid, uint32_t e)
{
	struct brule *r = &ps->rules[rid];

	if (++ps->total > GRAMMAR_MAX_ELEMS) {
		perr(ps, ps->pos, "grammar too large (over %u elements after "
		     "expanding repetitions)", GRAMMAR_MAX_ELEMS);
		return -1;
	}
	if (grow(ps, (void **)&r->e, &r->cap, r->n + 1, sizeof(uint32_t)))
		return -1;
	r->e[r->n++] = e;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Rules by name                                                       */
/* ------------------------------------------------------------------ */

static uint32_t name_hash(const char *s, size_t n)
{
	uint32_t h = 2166136261u;

	while (n--)
		h = (h ^ (uint8_t)*s++) * 16777619u;
	return h;
}

static int new_rule(struct pstate *ps, const char *name, size_t n, size_t at)
{
	struct brule *r;

	if (ps->n_rules >= (1u << 24)) {
		perr(ps, at, "too many rules");
		return -1;
	}
	if (grow(ps, (void **)&ps->rules, &ps->cap_rules, ps->n_rules + 1,
		 sizeof(*ps->rules)))
		return -1;
	r = &ps->rules[ps->n_rules];
	memset(r, 0, sizeof(*r));
	r->name = strndup(name, n);
	if (!r->name) {
		perr(ps, at, "out of memory");
		return -1;
	}
	r->def_pos = at;
	r->use_pos = at;
	return (int)ps->n_rules++;
}

static int ht_put(struct pstate *ps, uint32_t rid);

static int ht_rehash(struct pstate *ps)
{
	uint32_t nc = ps->ht_cap ? ps->ht_cap * 2 : 64, i;

	free(ps->names_ht);
	ps->names_ht = calloc(nc, sizeof(uint32_t));
	if (!ps->names_ht) {
		perr(ps, ps->pos, "out of memory");
		return -1;
	}
	ps->ht_cap = nc;
	for (i = 0; i < ps->n_rules; i++)
		if (ht_put(ps, i))
			return -1;
	return 0;
}

static int ht_put(struct pstate *ps, uint32_t rid)
{
	const char *nm = ps->rules[rid].name;
	uint32_t i = name_hash(nm, strlen(nm)) & (ps->ht_cap - 1);

	while (ps->names_ht[i])
		i = (i + 1) & (ps->ht_cap - 1);
	ps->names_ht[i] = rid + 1;
	return 0;
}

/* The rule named name[0..n), created (undefined) on first use. */
static int rule_by_name(struct pstate *ps, const char *name, size_t n,
			size_t at)
{
	uint32_t i, id;
	int rid;

	if (ps->ht_cap && ps->ht_cap > 0) {
		i = name_hash(name, n) & (ps->ht_cap - 1);
		while ((id = ps->names_ht[i]) != 0) {
			const char *nm = ps->rules[id - 1].name;

			if (strlen(nm) == n && !memcmp(nm, name, n))
				return (int)id - 1;
			i = (i + 1) & (ps->ht_cap - 1);
		}
	}
	rid = new_rule(ps, name, n, at);
	if (rid < 0)
		return -1;
	if ((ps->n_rules * 2 > ps->ht_cap) ? ht_rehash(ps) : ht_put(ps, (uint32_t)rid))
		return -1;
	return rid;
}

/* A generated rule, named after its parent for messages. */
static int gen_rule(struct pstate *ps, uint32_t parent, const char *what,
		    size_t at)
{
	char buf[96];
	int rid;

	snprintf(buf, sizeof(buf), "%.60s-%s%u", ps->rules[parent].name, what,
		 ps->n_rules);
	rid = new_rule(ps, buf, strlen(buf), at);
	if (rid >= 0)
		ps->rules[rid].defined = 1;
	return rid;
}

/* ------------------------------------------------------------------ */
/* Characters and classes                                              */
/* ------------------------------------------------------------------ */

static int is_name_char(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static void skip_ws(struct pstate *ps)
{
	while (ps->pos < ps->len) {
		char c = ps->s[ps->pos];

		if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
			ps->pos++;
		} else if (c == '#') {
			while (ps->pos < ps->len && ps->s[ps->pos] != '\n')
				ps->pos++;
		} else {
			break;
		}
	}
}

/* Does a "name ::=" start at pos? */
static int rule_starts(struct pstate *ps)
{
	size_t save = ps->pos;
	int yes = 0;

	while (ps->pos < ps->len && is_name_char((uint8_t)ps->s[ps->pos]))
		ps->pos++;
	if (ps->pos > save) {
		skip_ws(ps);
		yes = ps->len - ps->pos >= 3 && !memcmp(ps->s + ps->pos, "::=", 3);
	}
	ps->pos = save;
	return yes;
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* One source character (an escape or a UTF-8 sequence) into *cp. */
static int parse_char(struct pstate *ps, uint32_t *cp, const char *where)
{
	const uint8_t *s = (const uint8_t *)ps->s;
	size_t at = ps->pos;
	uint32_t c, need, i, min;

	if (ps->pos >= ps->len) {
		perr(ps, at, "unterminated %s", where);
		return -1;
	}
	c = s[ps->pos++];
	if (c == '\\') {
		int nd = 0, v;

		if (ps->pos >= ps->len) {
			perr(ps, at, "unterminated escape in %s", where);
			return -1;
		}
		c = s[ps->pos++];
		switch (c) {
		case 'n': *cp = '\n'; return 0;
		case 'r': *cp = '\r'; return 0;
		case 't': *cp = '\t'; return 0;
		case '0': *cp = 0; return 0;
		case '\\': case '"': case '\'': case '[': case ']': case '-':
		case '^': case '/':
			*cp = c;
			return 0;
		case 'x': nd = 2; break;
		case 'u': nd = 4; break;
		case 'U': nd = 8; break;
		default:
			perr(ps, at, "unknown escape \\%c in %s",
			     c >= 0x20 && c < 0x7f ? (int)c : '?', where);
			return -1;
		}
		*cp = 0;
		while (nd--) {
			if (ps->pos >= ps->len || (v = hexval(s[ps->pos])) < 0) {
				perr(ps, at, "escape \\%c needs hex digits", c);
				return -1;
			}
			*cp = *cp * 16 + (uint32_t)v;
			ps->pos++;
		}
		if (*cp > 0x10ffff) {
			perr(ps, at, "code point U+%X is past U+10FFFF", *cp);
			return -1;
		}
		return 0;
	}
	if (c < 0x80) {
		*cp = c;
		return 0;
	}
	if (c >= 0xc2 && c <= 0xdf) {
		need = 1; c &= 0x1f; min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		need = 2; c &= 0x0f; min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		need = 3; c &= 0x07; min = 0x10000;
	} else {
		goto bad;
	}
	for (i = 0; i < need; i++) {
		if (ps->pos >= ps->len || (s[ps->pos] & 0xc0) != 0x80)
			goto bad;
		c = (c << 6) | (s[ps->pos++] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		goto bad;
	*cp = c;
	return 0;
bad:
	perr(ps, at, "invalid UTF-8 in %s", where);
	return -1;
}

static int cmp_range(const void *a, const void *b)
{
	const uint32_t *x = a, *y = b;

	return x[0] < y[0] ? -1 : x[0] > y[0];
}

/*
 * Close the class whose ranges start at pair first: sort, merge, and if
 * negated replace by the complement in [0, 0x10FFFF].  Returns its id.
 */
static int close_class(struct pstate *ps, uint32_t first, int negated)
{
	/* ranges is still NULL for a first class that is empty ("[]") */
	uint32_t *r = ps->ranges ? ps->ranges + 2 * first : NULL;
	uint32_t n = ps->n_ranges - first, i, k = 0;

	if (n)
		qsort(r, n, 2 * sizeof(uint32_t), cmp_range);
	for (i = 0; i < n; i++) {
		if (k && r[2 * i] <= r[2 * (k - 1) + 1] + 1) {
			if (r[2 * i + 1] > r[2 * (k - 1) + 1])
				r[2 * (k - 1) + 1] = r[2 * i + 1];
		} else {
			r[2 * k] = r[2 * i];
			r[2 * k + 1] = r[2 * i + 1];
			k++;
		}
	}
	ps->n_ranges = first + k;
	if (negated) {
		uint32_t *tmp = malloc((2 * k + 2) * sizeof(uint32_t)), lo = 0, m = 0;

		if (!tmp) {
			perr(ps, ps->pos, "out of memory");
			return -1;
		}
		for (i = 0; i < k; i++) {
			if (r[2 * i] > lo) {
				tmp[2 * m] = lo;
				tmp[2 * m + 1] = r[2 * i] - 1;
				m++;
			}
			lo = r[2 * i + 1] + 1;
		}
		if (lo <= 0x10ffff) {
			tmp[2 * m] = lo;
			tmp[2 * m + 1] = 0x10ffff;
			m++;
		}
		ps->n_ranges = first;
		if (grow(ps, (void **)&ps->ranges, &ps->cap_ranges,
			 2 * (first + m), sizeof(uint32_t))) {
			free(tmp);
			return -1;
		}
		memcpy(ps->ranges + 2 * first, tmp, 2 * m * sizeof(uint32_t));
		ps->n_ranges = first + m;
		free(tmp);
	}
	if (grow(ps, (void **)&ps->cls_off, &ps->cap_classes,
		 ps->n_classes + 2, sizeof(uint32_t)))
		return -1;
	ps->cls_off[ps->n_classes] = first;
	ps->cls_off[ps->n_classes + 1] = ps->n_ranges;
	return (int)ps->n_classes++;
}

static int add_range(struct pstate *ps, uint32_t lo, uint32_t hi)
{
	if (grow(ps, (void **)&ps->ranges, &ps->cap_ranges,
		 2 * (ps->n_ranges + 1), sizeof(uint32_t)))
		return -1;
	ps->ranges[2 * ps->n_ranges] = lo;
	ps->ranges[2 * ps->n_ranges + 1] = hi;
	ps->n_ranges++;
	return 0;
}

static int emit_class(struct pstate *ps, uint32_t rid, uint32_t lo,
		      uint32_t hi)
{
	uint32_t first = ps->n_ranges;
	int c;

	if (add_range(ps, lo, hi) || (c = close_class(ps, first, 0)) < 0)
		return -1;
	return emit(ps, rid, GR_MAKE(GR_CHAR, c));
}

/* [...] after the '[' */
static int parse_class(struct pstate *ps, uint32_t rid, size_t at)
{
	uint32_t first = ps->n_ranges, lo, hi;
	int negated = 0, c;

	if (ps->pos < ps->len && ps->s[ps->pos] == '^') {
		negated = 1;
		ps->pos++;
	}
	for (;;) {
		if (ps->pos >= ps->len) {
			perr(ps, at, "unterminated character class");
			return -1;
		}
		if (ps->s[ps->pos] == ']') {
			ps->pos++;
			break;
		}
		if (parse_char(ps, &lo, "character class"))
			return -1;
		hi = lo;
		if (ps->pos + 1 < ps->len && ps->s[ps->pos] == '-' &&
		    ps->s[ps->pos + 1] != ']') {
			size_t rat = ps->pos;

			ps->pos++;
			if (parse_char(ps, &hi, "character class"))
				return -1;
			if (hi < lo) {
				perr(ps, rat, "range end U+%X before its start U+%X",
				     hi, lo);
				return -1;
			}
		}
		if (add_range(ps, lo, hi))
			return -1;
	}
	c = close_class(ps, first, negated);
	return c < 0 ? -1 : emit(ps, rid, GR_MAKE(GR_CHAR, c));
}

/* ------------------------------------------------------------------ */
/* Sequences, alternatives, repetitions                                */
/* ------------------------------------------------------------------ */

static int parse_alternatives(struct pstate *ps, uint32_t rid);

/* Move rule rid's elements [from, n) into a new rule; leave a ref. */
static int wrap(struct pstate *ps, uint32_t rid, uint32_t from, size_t at)
{
	int nr = gen_rule(ps, rid, "seq", at);
	uint32_t i, n;

	if (nr < 0)
		return -1;
	n = ps->rules[rid].n;
	for (i = from; i < n; i++)
		if (emit(ps, (uint32_t)nr, ps->rules[rid].e[i]))
			return -1;
	ps->rules[rid].n = from;
	return emit(ps, rid, GR_MAKE(GR_REF, nr));
}

/* x{m,n} where x is rule rid's last element; n = UINT32_MAX: no bound. */
static int repeat(struct pstate *ps, uint32_t rid, uint32_t from,
		  uint32_t m, uint32_t n, size_t at)
{
	uint32_t x, i, prev = 0;
	int have_prev = 0, nr;

	if (ps->rules[rid].n == from)
		return 0;	/* "" repeated is still "" */
	if (ps->rules[rid].n - from > 1 && wrap(ps, rid, from, at))
		return -1;
	x = ps->rules[rid].e[from];
	ps->rules[rid].n = from;
	ps->total--;
	for (i = 0; i < m; i++)
		if (emit(ps, rid, x))
			return -1;
	if (n == UINT32_MAX) {
		nr = gen_rule(ps, rid, "star", at);
		if (nr < 0 || emit(ps, (uint32_t)nr, x) ||
		    emit(ps, (uint32_t)nr, GR_MAKE(GR_REF, nr)) ||
		    emit(ps, (uint32_t)nr, GR_MAKE(GR_ALT, 0)))
			return -1;
		return emit(ps, rid, GR_MAKE(GR_REF, nr));
	}
	for (i = m; i < n; i++) {
		nr = gen_rule(ps, rid, "opt", at);
		if (nr < 0 || emit(ps, (uint32_t)nr, x) ||
		    (have_prev && emit(ps, (uint32_t)nr, GR_MAKE(GR_REF, prev))) ||
		    emit(ps, (uint32_t)nr, GR_MAKE(GR_ALT, 0)))
			return -1;
		prev = (uint32_t)nr;
		have_prev = 1;
	}
	return have_prev ? emit(ps, rid, GR_MAKE(GR_REF, prev)) : 0;
}

static int parse_uint(struct pstate *ps, uint32_t *v)
{
	size_t at = ps->pos;

	*v = 0;
	if (ps->pos >= ps->len || ps->s[ps->pos] < '0' || ps->s[ps->pos] > '9')
		return 1;
	while (ps->pos < ps->len && ps->s[ps->pos] >= '0' &&
	       ps->s[ps->pos] <= '9') {
		*v = *v * 10 + (uint32_t)(ps->s[ps->pos++] - '0');
		if (*v > GRAMMAR_MAX_REPEAT) {
			perr(ps, at, "repetition count over %u",
			     GRAMMAR_MAX_REPEAT);
			return -1;
		}
	}
	return 0;
}

/* {m}, {m,}, {m,n}, {,n} after the '{' */
static int parse_braces(struct pstate *ps, uint32_t *m, uint32_t *n, size_t at)
{
	int r;

	skip_ws(ps);
	r = parse_uint(ps, m);
	if (r < 0)
		return -1;
	skip_ws(ps);
	if (ps->pos < ps->len && ps->s[ps->pos] == '}') {
		if (r) {
			perr(ps, at, "empty repetition {}");
			return -1;
		}
		ps->pos++;
		*n = *m;
		return 0;
	}
	if (ps->pos >= ps->len || ps->s[ps->pos] != ',') {
		perr(ps, ps->pos, "expected , or } in repetition");
		return -1;
	}
	ps->pos++;
	skip_ws(ps);
	r = parse_uint(ps, n);
	if (r < 0)
		return -1;
	if (r)
		*n = UINT32_MAX;
	skip_ws(ps);
	if (ps->pos >= ps->len || ps->s[ps->pos] != '}') {
		perr(ps, ps->pos, "expected } to end the repetition");
		return -1;
	}
	ps->pos++;
	if (*n < *m) {
		perr(ps, at, "repetition {%u,%u}: maximum below minimum", *m, *n);
		return -1;
	}
	return 0;
}

static int parse_sequence(struct pstate *ps, uint32_t rid)
{
	for (;;) {
		uint32_t from, cp;
		size_t at;
		char c;

		skip_ws(ps);
		if (ps->pos >= ps->len)
			return 0;
		c = ps->s[ps->pos];
		if (c == '|' || c == ')' || rule_starts(ps))
			return 0;
		at = ps->pos;
		from = ps->rules[rid].n;
		if (c == '"') {
			ps->pos++;
			while (ps->pos >= ps->len || ps->s[ps->pos] != '"') {
				if (ps->pos >= ps->len) {
					perr(ps, at, "unterminated string literal");
					return -1;
				}
				if (parse_char(ps, &cp, "string literal") ||
				    emit_class(ps, rid, cp, cp))
					return -1;
			}
			ps->pos++;
		} else if (c == '[') {
			ps->pos++;
			if (parse_class(ps, rid, at))
				return -1;
		} else if (c == '.') {
			ps->pos++;
			if (emit_class(ps, rid, 0, 0x10ffff))
				return -1;
		} else if (c == '(') {
			int nr;

			if (ps->depth >= GRAMMAR_MAX_NEST) {
				perr(ps, at, "groups nested deeper than %d",
				     GRAMMAR_MAX_NEST);
				return -1;
			}
			ps->pos++;
			nr = gen_rule(ps, rid, "group", at);
			if (nr < 0)
				return -1;
			ps->depth++;
			if (parse_alternatives(ps, (uint32_t)nr))
				return -1;
			ps->depth--;
			skip_ws(ps);
			if (ps->pos >= ps->len || ps->s[ps->pos] != ')') {
				perr(ps, at, "( without its )");
				return -1;
			}
			ps->pos++;
			if (emit(ps, rid, GR_MAKE(GR_REF, nr)))
				return -1;
		} else if (is_name_char((uint8_t)c)) {
			size_t b = ps->pos;
			int r;

			while (ps->pos < ps->len &&
			       is_name_char((uint8_t)ps->s[ps->pos]))
				ps->pos++;
			r = rule_by_name(ps, ps->s + b, ps->pos - b, at);
			if (r < 0 || emit(ps, rid, GR_MAKE(GR_REF, r)))
				return -1;
		} else {
			if ((uint8_t)c >= 0x21 && (uint8_t)c < 0x7f)
				perr(ps, at, "unexpected '%c'", c);
			else
				perr(ps, at, "unexpected byte 0x%02x",
				     (unsigned)(uint8_t)c);
			return -1;
		}
		/* postfix operators, each applying to what came before */
		for (;;) {
			uint32_t m, n;

			skip_ws(ps);
			if (ps->pos >= ps->len)
				break;
			c = ps->s[ps->pos];
			at = ps->pos;
			if (c == '*') {
				m = 0; n = UINT32_MAX;
			} else if (c == '+') {
				m = 1; n = UINT32_MAX;
			} else if (c == '?') {
				m = 0; n = 1;
			} else if (c == '{') {
				ps->pos++;
				if (parse_braces(ps, &m, &n, at))
					return -1;
				ps->pos--;
			} else {
				break;
			}
			ps->pos++;
			if (repeat(ps, rid, from, m, n, at))
				return -1;
		}
	}
}

static int parse_alternatives(struct pstate *ps, uint32_t rid)
{
	if (parse_sequence(ps, rid))
		return -1;
	for (;;) {
		skip_ws(ps);
		if (ps->pos >= ps->len || ps->s[ps->pos] != '|')
			return 0;
		ps->pos++;
		if (emit(ps, rid, GR_MAKE(GR_ALT, 0)) || parse_sequence(ps, rid))
			return -1;
	}
}

/* ------------------------------------------------------------------ */
/* Checks and flattening                                               */
/* ------------------------------------------------------------------ */

/* Rule r's nullable flag per alternative, by fixpoint over all rules. */
static int compute_nullable(struct pstate *ps, uint8_t *nul)
{
	int changed = 1;
	uint32_t r, i;

	memset(nul, 0, ps->n_rules);
	while (changed) {
		changed = 0;
		for (r = 0; r < ps->n_rules; r++) {
			struct brule *b = &ps->rules[r];
			int ok = 1;

			if (nul[r])
				continue;
			for (i = 0; i <= b->n; i++) {
				uint32_t e = i < b->n ? b->e[i] : GR_MAKE(GR_ALT, 0);

				if (GR_TYPE(e) == GR_ALT) {
					if (ok) {
						nul[r] = 1;
						changed = 1;
						break;
					}
					ok = 1;
				} else if (GR_TYPE(e) == GR_CHAR ||
					   (GR_TYPE(e) == GR_REF && !nul[GR_VAL(e)])) {
					ok = 0;
				}
			}
		}
	}
	return 0;
}

/*
 * Refuse left recursion: an edge a -> b where b is referenced at a point
 * of a's alternative reached without consuming (only nullable elements
 * before); a cycle is an iterative DFS's back edge.
 */
static int check_left_recursion(struct pstate *ps, const uint8_t *nul)
{
	uint32_t n = ps->n_rules, r, *stk, *idx, top;
	uint8_t *color = calloc(n, 1);
	int rc = 0;

	stk = malloc((size_t)n * sizeof(uint32_t));
	idx = malloc((size_t)n * sizeof(uint32_t));
	if (!color || !stk || !idx) {
		perr(ps, 0, "out of memory");
		rc = -1;
		goto out;
	}
	for (r = 0; r < n && !rc; r++) {
		if (color[r])
			continue;
		top = 0;
		stk[top] = r;
		idx[top++] = 0;
		color[r] = 1;
		while (top && !rc) {
			uint32_t a = stk[top - 1], *ip = &idx[top - 1];
			struct brule *b = &ps->rules[a];
			int pushed = 0;

			/* find the next edge from position *ip on */
			while (*ip < b->n) {
				uint32_t i = (*ip)++, e = b->e[i], j, t;
				int reach = 1;

				if (GR_TYPE(e) != GR_REF)
					continue;
				for (j = i; j > 0; j--) {
					uint32_t p = b->e[j - 1];

					if (GR_TYPE(p) == GR_ALT)
						break;
					if (GR_TYPE(p) == GR_CHAR ||
					    !nul[GR_VAL(p)]) {
						reach = 0;
						break;
					}
				}
				if (!reach)
					continue;
				t = GR_VAL(e);
				if (color[t] == 1) {
					perr(ps, ps->rules[t].def_pos,
					     "rule '%s' is left-recursive (it can "
					     "reach itself without reading a "
					     "character; a repetition of something "
					     "that can be empty is one way)",
					     ps->rules[t].name);
					rc = -1;
					break;
				}
				if (!color[t]) {
					color[t] = 1;
					stk[top] = t;
					idx[top++] = 0;
					pushed = 1;
					break;
				}
			}
			if (!pushed && !rc) {
				color[a] = 2;
				top--;
			}
		}
	}
out:
	free(color);
	free(stk);
	free(idx);
	return rc;
}

static struct grammar *flatten(struct pstate *ps, uint32_t root)
{
	struct grammar *g = calloc(1, sizeof(*g));
	uint32_t r, i, n_alts = 0, n_el = 0, k = 0, a = 0;

	if (!g)
		return NULL;
	for (r = 0; r < ps->n_rules; r++) {
		n_alts++;
		n_el += ps->rules[r].n + 1;
		for (i = 0; i < ps->rules[r].n; i++)
			n_alts += GR_TYPE(ps->rules[r].e[i]) == GR_ALT;
	}
	g->elems = malloc((size_t)n_el * sizeof(uint32_t));
	g->alts = malloc((size_t)n_alts * sizeof(uint32_t));
	g->alt_off = malloc(((size_t)ps->n_rules + 1) * sizeof(uint32_t));
	g->cls_off = malloc(((size_t)ps->n_classes + 1) * sizeof(uint32_t));
	g->ranges = malloc(((size_t)ps->n_ranges * 2 + 1) * sizeof(uint32_t));
	if (!g->elems || !g->alts || !g->alt_off || !g->cls_off || !g->ranges) {
		grammar_destroy(g);
		return NULL;
	}
	for (r = 0; r < ps->n_rules; r++) {
		struct brule *b = &ps->rules[r];

		g->alt_off[r] = a;
		g->alts[a++] = k;
		for (i = 0; i < b->n; i++) {
			if (GR_TYPE(b->e[i]) == GR_ALT) {
				g->elems[k++] = GR_MAKE(GR_END, 0);
				g->alts[a++] = k;
			} else {
				g->elems[k++] = b->e[i];
			}
		}
		g->elems[k++] = GR_MAKE(GR_END, 0);
	}
	g->alt_off[ps->n_rules] = a;
	g->n_elems = k;
	g->n_rules = ps->n_rules;
	g->n_classes = ps->n_classes;
	for (i = 0; i < ps->n_classes; i++)
		g->cls_off[i] = ps->cls_off[i];
	g->cls_off[ps->n_classes] = ps->n_ranges;
	if (ps->n_ranges)
		memcpy(g->ranges, ps->ranges, (size_t)ps->n_ranges * 2 *
		       sizeof(uint32_t));
	g->root = root;
	return g;
}

struct grammar *grammar_parse(const char *src, size_t len, char *err,
			      size_t err_len)
{
	struct pstate ps = { .s = src ? src : "", .len = src ? len : 0,
			     .err = err, .err_len = err_len };
	struct grammar *g = NULL;
	uint8_t *nul = NULL;
	uint32_t r;
	int root = -1;

	if (err && err_len)
		err[0] = 0;
	for (;;) {
		size_t at, b;
		int rid;

		skip_ws(&ps);
		if (ps.pos >= ps.len)
			break;
		at = b = ps.pos;
		while (ps.pos < ps.len && is_name_char((uint8_t)ps.s[ps.pos]))
			ps.pos++;
		if (ps.pos == b) {
			perr(&ps, at, "expected a rule name");
			goto out;
		}
		rid = rule_by_name(&ps, ps.s + b, ps.pos - b, at);
		if (rid < 0)
			goto out;
		skip_ws(&ps);
		if (ps.len - ps.pos < 3 || memcmp(ps.s + ps.pos, "::=", 3)) {
			perr(&ps, ps.pos, "expected ::= after rule name '%s'",
			     ps.rules[rid].name);
			goto out;
		}
		ps.pos += 3;
		if (ps.rules[rid].defined) {
			perr(&ps, at, "rule '%s' defined twice",
			     ps.rules[rid].name);
			goto out;
		}
		ps.rules[rid].defined = 1;
		ps.rules[rid].def_pos = at;
		if (parse_alternatives(&ps, (uint32_t)rid))
			goto out;
		skip_ws(&ps);
		if (ps.pos < ps.len && ps.s[ps.pos] == ')') {
			perr(&ps, ps.pos, ") without its (");
			goto out;
		}
	}
	for (r = 0; r < ps.n_rules; r++) {
		if (!ps.rules[r].defined) {
			perr(&ps, ps.rules[r].use_pos, "undefined rule '%s'",
			     ps.rules[r].name);
			goto out;
		}
		if (!strcmp(ps.rules[r].name, "root"))
			root = (int)r;
	}
	if (root < 0) {
		perr(&ps, 0, "no rule named root");
		goto out;
	}
	nul = malloc(ps.n_rules);
	if (!nul) {
		perr(&ps, 0, "out of memory");
		goto out;
	}
	compute_nullable(&ps, nul);
	if (check_left_recursion(&ps, nul))
		goto out;
	g = flatten(&ps, (uint32_t)root);
	if (!g)
		perr(&ps, 0, "out of memory");
out:
	free(nul);
	for (r = 0; r < ps.n_rules; r++) {
		free(ps.rules[r].name);
		free(ps.rules[r].e);
	}
	free(ps.rules);
	free(ps.names_ht);
	free(ps.ranges);
	free(ps.cls_off);
	return g;
}
