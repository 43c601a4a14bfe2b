/*
 * test_text_stop.c - stop strings over decoded text and the streaming
 * holdback, against hand-worked cases and against a naive reference that
 * sees the whole output at once.
 *
 * The reference knows only the rule: over the whole text, the stop whose
 * occurrence ends first wins (same end: the longest), cut before it (after
 * it with include_stop).  The safe prefix after each piece is found by
 * brute force over continuations: every way a stop could still complete
 * (each stop, each place it could start in the text so far) and every
 * short continuation of representative bytes (one per class that the
 * UTF-8 rules tell apart), plus ending now.  A prefix is safe when every
 * such outcome's final text starts with it and the JSON writer renders it
 * apart from the rest exactly as within the whole.  A third of the random
 * cases also play a caller that holds bytes of its own (token-id stops
 * pending) and drops some at the end; its possible drops are outcomes
 * too.  The stream must emit
 * exactly the longest safe prefix after every piece, and its result and
 * the concatenation of its chunks (bytes, and their JSON renderings) must
 * equal the reference's final text.
 *
 * The random test prints its seed; SEED=<n> replays a run.  Generated
 * text holds no NUL byte: the JSON writer takes C strings.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/json_writer.h"
#include "text/text_stop.h"
#include "tests/unit/test_rng.h"

/* ------------------------------------------------------------------ */
/* Reference                                                           */
/* ------------------------------------------------------------------ */

struct ref_stops {
	const char *s[TEXT_STOP_MAX];
	size_t len[TEXT_STOP_MAX];
	uint32_t n;
};

/* What the whole text t[0..n) gives. */
struct ref_outcome {
	bool stopped;
	size_t end;		/* byte after the winning stop */
	size_t cut;		/* final text is t[0..cut) */
	uint32_t index;		/* winning stop */
};

/*
 * The rule, by brute force: for each end position in turn, every stop
 * ending there; the longest wins, equal strings by lowest index.  Only
 * ends >= from are tried (the text before from is known to hold none).
 */
static struct ref_outcome ref_final(const struct ref_stops *st, bool include,
				    const char *t, size_t n, size_t from)
{
	struct ref_outcome o = { false, n, n, TEXT_STOP_NONE };

	for (size_t e = from ? from : 1; e <= n; e++) {
		size_t best = 0;

		for (uint32_t i = 0; i < st->n; i++) {
			size_t l = st->len[i];

			if (l > e || l <= best || memcmp(t + e - l, st->s[i], l))
				continue;
			best = l;
			o.index = i;
		}
		if (best) {
			o.stopped = true;
			o.end = e;
			o.cut = include ? e : e - best;
			return o;
		}
	}
	return o;
}

/* JSON rendering of t[0..n) without the quotes; the caller frees it. */
static char *render(const char *t, size_t n, size_t *out_len)
{
	char *z = malloc(n + 1), *out, *end;

	assert_non_null(z);
	memcpy(z, t, n);
	z[n] = '\0';
	assert_int_equal(strlen(z), n);	/* no NUL in test text */
	out = malloc(json_str_bound(z));
	assert_non_null(out);
	end = json_put_str(out, z);
	free(z);
	*out_len = (size_t)(end - out) - 2;
	memmove(out, out + 1, *out_len);
	return out;
}

/* Whether rendering f[0..p) and f[p..n) apart equals rendering f whole. */
static bool split_renders_same(const char *f, size_t n, size_t p)
{
	size_t la, lb, lw;
	char *a = render(f, p, &la), *b = render(f + p, n - p, &lb);
	char *w = render(f, n, &lw);
	bool same = la + lb == lw && !memcmp(a, w, la) &&
		    !memcmp(b, w + la, lb);

	free(a);
	free(b);
	free(w);
	return same;
}

/* One possible final text of the request, given what came so far. */
struct ref_future {
	char *f;
	size_t n;
};

#define REF_MAX_FUTURES 1024

/* Bytes that the UTF-8 rules tell apart after a lead byte, and ASCII. */
static const unsigned char rep_bytes[] = { 0x80, 0x90, 0xA0, 'a' };
#define N_REP (sizeof(rep_bytes) / sizeof(rep_bytes[0]))

/* Add the final text of t[0..n) + c[0..nc) to futures. */
static void add_future(const struct ref_stops *st, bool include,
		       const char *t, size_t n, const char *c, size_t nc,
		       struct ref_future *fu, size_t *n_fu)
{
	char *u = malloc(n + nc + 1);
	struct ref_outcome o;

	assert_non_null(u);
	memcpy(u, t, n);
	memcpy(u + n, c, nc);
	/* t itself holds no stop: only ends inside c can match. */
	o = ref_final(st, include, u, n + nc, n + 1);
	assert_true(*n_fu < REF_MAX_FUTURES);
	fu[*n_fu].f = u;
	fu[*n_fu].n = o.cut;
	(*n_fu)++;
}

/*
 * The longest prefix of t[0..n) (which completes no stop) that no
 * continuation can change, by brute force; the caller holds the last
 * hold bytes (it may drop any number of them when the request ends).
 */
static size_t ref_safe(const struct ref_stops *st, bool include,
		       const char *t, size_t n, size_t hold)
{
	struct ref_future fu[REF_MAX_FUTURES];
	size_t n_fu = 0, p;
	char c[3];

	/* Every stop completed from every place it could start. */
	for (uint32_t i = 0; i < st->n; i++)
		for (size_t j = 0; j <= n; j++) {
			size_t have = n - j;

			if (have >= st->len[i] ||
			    memcmp(t + j, st->s[i], have))
				continue;
			add_future(st, include, t, n, st->s[i] + have,
				   st->len[i] - have, fu, &n_fu);
		}
	/* Ending now, less what the caller may drop. */
	for (size_t d = 1; d <= hold && d <= n; d++)
		add_future(st, include, t, n - d, c, 0, fu, &n_fu);
	/* Ending now, or after up to 3 representative bytes. */
	add_future(st, include, t, n, c, 0, fu, &n_fu);
	for (size_t a = 0; a < N_REP; a++) {
		c[0] = (char)rep_bytes[a];
		add_future(st, include, t, n, c, 1, fu, &n_fu);
		for (size_t b = 0; b < N_REP; b++) {
			c[1] = (char)rep_bytes[b];
			add_future(st, include, t, n, c, 2, fu, &n_fu);
			for (size_t d = 0; d < N_REP; d++) {
				c[2] = (char)rep_bytes[d];
				add_future(st, include, t, n, c, 3, fu, &n_fu);
			}
		}
	}

	/* Every future's final text starts with t[0..p). */
	p = n;
	for (size_t k = 0; k < n_fu; k++) {
		size_t m = 0;

		while (m < p && m < fu[k].n && fu[k].f[m] == t[m])
			m++;
		p = m;
	}
	/* ... and splits there as the JSON writer renders it whole. */
	for (;; p--) {
		bool ok = true;

		for (size_t k = 0; k < n_fu && ok; k++)
			ok = split_renders_same(fu[k].f, fu[k].n, p);
		if (ok || p == 0)
			break;
	}
	for (size_t k = 0; k < n_fu; k++)
		free(fu[k].f);
	return p;
}

/* ------------------------------------------------------------------ */
/* Driving a stream                                                    */
/* ------------------------------------------------------------------ */

struct run {
	char *streamed;		/* chunks of the streaming stream, joined */
	size_t n_streamed;
	char *rendered;		/* their JSON renderings, joined */
	size_t n_rendered;
	char *text;		/* the KEEP_TEXT stream's final text */
	size_t n_text;
	uint32_t n_pieces;	/* pieces pushed (tokens generated) */
	bool stopped;
	uint32_t stop_index;
};

static void append(char **buf, size_t *len, const char *p, size_t n)
{
	*buf = realloc(*buf, *len + n + 1);
	assert_non_null(*buf);
	memcpy(*buf + *len, p, n);
	*len += n;
}

static void take_chunk(struct run *r, const struct text_push_result *res)
{
	size_t lr;
	char *rr;

	if (!res->n_final) {
		assert_null(res->final);
		return;
	}
	append(&r->streamed, &r->n_streamed, res->final, res->n_final);
	rr = render(res->final, res->n_final, &lr);
	append(&r->rendered, &r->n_rendered, rr, lr);
	free(rr);
}

static struct text_stop_set *make_set(const struct ref_stops *st)
{
	char err[200] = "";
	struct text_stop_set *set;

	set = text_stop_set_create(st->s, st->len, st->n, err, sizeof(err));
	if (!set)
		print_error("create: %s\n", err);
	assert_non_null(set);
	return set;
}

/*
 * Push the pieces into a streaming stream and a KEEP_TEXT stream; with
 * check_safe, compare the streamed prefix after every piece with the
 * reference's safe prefix.
 */
static struct run drive(const struct ref_stops *st, bool include,
			const char *const *pieces, const size_t *lens,
			const size_t *holds, size_t drop, uint32_t n_pieces,
			bool check_safe)
{
	struct text_stop_set *set = make_set(st);
	unsigned flags = include ? TEXT_STREAM_INCLUDE_STOP : 0;
	struct text_stream live, keep;
	struct text_push_result res, kres;
	struct run r = { .stop_index = TEXT_STOP_NONE };
	char *sofar = NULL;
	size_t n_sofar = 0;

	append(&sofar, &n_sofar, "", 0);

	/* Allocated even when nothing is streamed: memcmp wants pointers. */
	append(&r.streamed, &r.n_streamed, "", 0);
	append(&r.rendered, &r.n_rendered, "", 0);
	text_stream_init(&live, set, flags);
	text_stream_init(&keep, set, flags | TEXT_STREAM_KEEP_TEXT);
	for (uint32_t i = 0; i < n_pieces && !r.stopped; i++) {
		size_t hold = holds ? holds[i] : 0;

		assert_int_equal(text_stream_push(&live, pieces[i], lens[i],
						  hold, &res), 0);
		assert_int_equal(text_stream_push(&keep, pieces[i], lens[i],
						  hold, &kres), 0);
		assert_int_equal(text_stream_check(&live), 0);
		assert_int_equal(text_stream_check(&keep), 0);
		assert_int_equal(res.n_final, kres.n_final);
		assert_int_equal(res.stopped, kres.stopped);
		take_chunk(&r, &res);
		r.n_pieces++;
		r.stopped = res.stopped;
		r.stop_index = res.stop_index;
		append(&sofar, &n_sofar, pieces[i], lens[i]);
		if (check_safe && !res.stopped) {
			size_t want = ref_safe(st, include, sofar, n_sofar,
					       hold);

			if (want != r.n_streamed ||
			    memcmp(r.streamed, sofar, want)) {
				print_error("after piece %u: %zu bytes final, "
					    "expected %zu\n", i, r.n_streamed,
					    want);
				fail();
			}
		}
	}
	if (!r.stopped) {
		assert_int_equal(text_stream_finish(&live, drop, &res), 0);
		assert_int_equal(text_stream_finish(&keep, drop, &kres), 0);
		assert_false(res.stopped);
		take_chunk(&r, &res);
	}
	assert_true(text_stream_done(&live));
	assert_int_equal(text_stream_check(&live), 0);
	assert_int_equal(text_stream_check(&keep), 0);
	assert_int_equal(text_stream_held(&live), 0);
	{
		size_t n;
		const char *t = text_stream_text(&keep, &n);

		r.text = malloc(n + 1);
		assert_non_null(r.text);
		memcpy(r.text, t, n);
		r.n_text = n;
	}
	text_stream_release(&live);
	text_stream_release(&keep);
	text_stop_set_destroy(set);
	free(sofar);
	return r;
}

static void run_free(struct run *r)
{
	free(r->streamed);
	free(r->rendered);
	free(r->text);
}

/* The run against the reference over the whole output. */
static void expect_reference(const struct ref_stops *st, bool include,
			     const char *const *pieces, const size_t *lens,
			     size_t drop, uint32_t n_pieces,
			     const struct run *r)
{
	size_t n = 0, off = 0, lw;
	char *whole, *w;
	struct ref_outcome o;
	uint32_t want_pieces = n_pieces;

	for (uint32_t i = 0; i < n_pieces; i++)
		n += lens[i];
	whole = malloc(n + 1);
	assert_non_null(whole);
	for (uint32_t i = 0; i < n_pieces; i++) {
		memcpy(whole + off, pieces[i], lens[i]);
		off += lens[i];
	}
	o = ref_final(st, include, whole, n, 0);
	if (!o.stopped)
		o.cut = n - drop;	/* what the caller took back */
	if (o.stopped) {
		/* The piece that holds the stop's last byte was the last. */
		off = 0;
		for (want_pieces = 0; off < o.end; want_pieces++)
			off += lens[want_pieces];
	}
	assert_int_equal(r->stopped, o.stopped);
	assert_int_equal(r->stop_index, o.index);
	assert_int_equal(r->n_pieces, want_pieces);
	assert_int_equal(r->n_text, o.cut);
	assert_memory_equal(r->text, whole, o.cut);
	assert_int_equal(r->n_streamed, o.cut);
	assert_memory_equal(r->streamed, whole, o.cut);
	w = render(whole, o.cut, &lw);
	assert_int_equal(r->n_rendered, lw);
	assert_memory_equal(r->rendered, w, lw);
	free(w);
	free(whole);
}

/* Drive, check every step and the whole, for one case by hand. */
static struct run check_case(const struct ref_stops *st, bool include,
			     const char *const *pieces, uint32_t n_pieces)
{
	size_t lens[64];
	struct run r;

	assert_true(n_pieces <= 64);
	for (uint32_t i = 0; i < n_pieces; i++)
		lens[i] = strlen(pieces[i]);
	r = drive(st, include, pieces, lens, NULL, 0, n_pieces, true);
	expect_reference(st, include, pieces, lens, 0, n_pieces, &r);
	return r;
}

static struct ref_stops stops_of(uint32_t n, ...)
{
	struct ref_stops st = { .n = n };
	va_list ap;

	va_start(ap, n);
	for (uint32_t i = 0; i < n; i++) {
		st.s[i] = va_arg(ap, const char *);
		st.len[i] = strlen(st.s[i]);
	}
	va_end(ap);
	return st;
}

/* ------------------------------------------------------------------ */
/* Hand-worked cases                                                   */
/* ------------------------------------------------------------------ */

static void test_stop_at_start(void **state)
{
	struct ref_stops st = stops_of(1, "STOP");
	const char *pieces[] = { "ST", "OPxyz", "never" };
	struct run r = check_case(&st, false, pieces, 3);

	assert_int_equal(r.n_text, 0);
	assert_int_equal(r.n_pieces, 2);
	assert_true(r.stopped);
	run_free(&r);
	r = check_case(&st, true, pieces, 3);
	assert_int_equal(r.n_text, 4);
	assert_memory_equal(r.text, "STOP", 4);
	run_free(&r);
}

/* A stop over three pieces: each step's chunk exactly as worked out. */
static void test_stop_spans_three_pieces(void **state)
{
	struct ref_stops st = stops_of(1, "world");
	const char *pieces[] = { "hello wo", "r", "ld!", "more" };
	struct text_stop_set *set = make_set(&st);
	struct text_stream s;
	struct text_push_result res;
	struct run r;

	text_stream_init(&s, set, 0);
	assert_int_equal(text_stream_push(&s, "hello wo", 8, 0, &res), 0);
	assert_int_equal(res.n_final, 6);
	assert_memory_equal(res.final, "hello ", 6);
	assert_int_equal(text_stream_held(&s), 2);
	assert_int_equal(text_stream_push(&s, "r", 1, 0, &res), 0);
	assert_int_equal(res.n_final, 0);
	assert_false(res.stopped);
	assert_int_equal(text_stream_push(&s, "ld!", 3, 0, &res), 0);
	assert_int_equal(res.n_final, 0);
	assert_true(res.stopped);
	assert_int_equal(res.stop_index, 0);
	assert_true(text_stream_done(&s));
	assert_int_equal(text_stream_push(&s, "x", 1, 0, &res), -EINVAL);
	assert_int_equal(res.n_final, 0);
	text_stream_release(&s);
	text_stop_set_destroy(set);

	r = check_case(&st, false, pieces, 4);
	assert_int_equal(r.n_pieces, 3);
	assert_memory_equal(r.text, "hello ", 6);
	run_free(&r);
	r = check_case(&st, true, pieces, 4);
	assert_int_equal(r.n_text, 11);
	assert_memory_equal(r.text, "hello world", 11);	/* "!" dropped */
	run_free(&r);
}

/* The stop starts inside one piece and ends inside another. */
static void test_stop_inside_pieces(void **state)
{
	struct ref_stops st = stops_of(1, "bcX");
	const char *pieces[] = { "ab", "cXYZdef" };
	struct run r = check_case(&st, false, pieces, 2);

	assert_int_equal(r.n_text, 1);
	assert_memory_equal(r.text, "a", 1);
	run_free(&r);
	r = check_case(&st, true, pieces, 2);
	assert_int_equal(r.n_text, 4);
	assert_memory_equal(r.text, "abcX", 4);
	run_free(&r);
}

/* "ab" is a prefix of "abc": "abc" never wins, nor is it waited for. */
static void test_stop_prefix_of_another(void **state)
{
	struct ref_stops st = stops_of(2, "abc", "ab");
	const char *pieces[] = { "xa", "bc" };
	struct run r = check_case(&st, false, pieces, 2);

	assert_int_equal(r.stop_index, 1);
	assert_memory_equal(r.text, "x", 1);
	run_free(&r);
}

/*
 * "bc" inside "abcd": after "ab" only "b" can still start the winner, so
 * "a" is final; a holdback for "abcd" would be one byte too many.
 */
static void test_stop_inside_another(void **state)
{
	struct ref_stops st = stops_of(2, "abcd", "bc");
	struct text_stop_set *set = make_set(&st);
	const char *pieces[] = { "ab", "cd" };
	struct text_stream s;
	struct text_push_result res;
	struct run r;

	text_stream_init(&s, set, 0);
	assert_int_equal(text_stream_push(&s, "ab", 2, 0, &res), 0);
	assert_int_equal(res.n_final, 1);
	assert_memory_equal(res.final, "a", 1);
	text_stream_release(&s);
	text_stop_set_destroy(set);

	r = check_case(&st, false, pieces, 2);
	assert_int_equal(r.stop_index, 1);
	assert_memory_equal(r.text, "a", 1);
	run_free(&r);
}

/* Overlapping stops: the one that ends first wins, then the longest. */
static void test_overlapping_stops(void **state)
{
	struct ref_stops st = stops_of(2, "yzw", "xyz");
	const char *pieces[] = { "0x", "y", "zw" };
	struct run r = check_case(&st, false, pieces, 3);

	assert_int_equal(r.stop_index, 1);
	assert_memory_equal(r.text, "0", 1);
	run_free(&r);

	st = stops_of(3, "bcd", "abcd", "abcd");
	{
		const char *p2[] = { "ab", "cd" };

		r = check_case(&st, false, p2, 2);
		assert_int_equal(r.stop_index, 1);	/* same end: longest */
		assert_int_equal(r.n_text, 0);
		run_free(&r);
	}
}

/*
 * The stream sees only generated text: a prompt ending in "STO" does not
 * make a generated "P" a stop (the caller never pushes the prompt).
 */
static void test_prompt_not_matched(void **state)
{
	struct ref_stops st = stops_of(1, "STOP");
	const char *pieces[] = { "P and more", " STO" };
	struct run r = check_case(&st, false, pieces, 2);

	assert_false(r.stopped);
	assert_int_equal(r.n_text, 14);
	run_free(&r);
}

/* Incomplete UTF-8 waits; bytes that can never be valid do not. */
static void test_utf8_holdback(void **state)
{
	struct text_stream s;
	struct text_push_result res;

	text_stream_init(&s, NULL, 0);
	assert_int_equal(text_stream_push(&s, "a\xE2", 2, 0, &res), 0);
	assert_int_equal(res.n_final, 1);
	assert_int_equal(text_stream_push(&s, "\x82", 1, 0, &res), 0);
	assert_int_equal(res.n_final, 0);
	assert_int_equal(text_stream_push(&s, "\xAC\xF0\x9F", 3, 0, &res), 0);
	assert_int_equal(res.n_final, 3);
	assert_memory_equal(res.final, "\xE2\x82\xAC", 3);
	assert_int_equal(text_stream_push(&s, "\x98", 1, 0, &res), 0);
	assert_int_equal(res.n_final, 0);
	assert_int_equal(text_stream_held(&s), 3);
	assert_int_equal(text_stream_push(&s, "\x80\xF4\x90", 3, 0, &res), 0);
	assert_int_equal(res.n_final, 6);	/* F4 90: never valid */
	assert_int_equal(text_stream_push(&s, "\xED\xA0", 2, 0, &res), 0);
	assert_int_equal(res.n_final, 2);	/* a surrogate */
	assert_int_equal(text_stream_push(&s, "\xE0\xA0", 2, 0, &res), 0);
	assert_int_equal(res.n_final, 0);
	assert_int_equal(text_stream_check(&s), 0);
	/* The request ends: the incomplete tail goes out as it is. */
	assert_int_equal(text_stream_finish(&s, 0, &res), 0);
	assert_int_equal(res.n_final, 2);
	assert_memory_equal(res.final, "\xE0\xA0", 2);
	assert_int_equal(text_stream_finish(&s, 0, &res), 0);
	assert_int_equal(res.n_final, 0);
	text_stream_release(&s);
}

/* With include_stop a partial stop is kept whatever comes: no wait. */
static void test_include_stop_holds_only_utf8(void **state)
{
	struct ref_stops st = stops_of(1, "ab\xE2\x82\xAC");
	struct text_stop_set *set = make_set(&st);
	struct text_stream s;
	struct text_push_result res;
	const char *pieces[] = { "xa", "b\xE2", "\x82\xAC!", "z" };
	struct run r;

	text_stream_init(&s, set, TEXT_STREAM_INCLUDE_STOP);
	assert_int_equal(text_stream_push(&s, "xa", 2, 0, &res), 0);
	assert_int_equal(res.n_final, 2);
	assert_int_equal(text_stream_push(&s, "b\xE2", 2, 0, &res), 0);
	assert_int_equal(res.n_final, 1);
	assert_int_equal(text_stream_push(&s, "\x82\xAC!", 3, 0, &res), 0);
	assert_true(res.stopped);
	assert_int_equal(res.n_final, 3);
	text_stream_release(&s);
	text_stop_set_destroy(set);

	r = check_case(&st, true, pieces, 4);
	assert_int_equal(r.n_pieces, 3);
	run_free(&r);
	r = check_case(&st, false, pieces, 4);
	assert_int_equal(r.n_text, 1);
	run_free(&r);
}

/*
 * The caller holds the text of tokens a token-id stop may still claim;
 * its hold is widened not to split a character, and a drop takes it back.
 */
static void test_caller_hold(void **state)
{
	struct text_stream s;
	struct text_push_result res;

	text_stream_init(&s, NULL, TEXT_STREAM_KEEP_TEXT);
	assert_int_equal(text_stream_push(&s, "ab\xE2", 3, 0, &res), 0);
	assert_int_equal(res.n_final, 2);
	/* The last token "\x82\xAC" held: so is the E2 that starts it. */
	assert_int_equal(text_stream_push(&s, "\x82\xAC", 2, 2, &res), 0);
	assert_int_equal(res.n_final, 0);
	assert_int_equal(text_stream_held(&s), 3);
	assert_int_equal(text_stream_push(&s, "cd", 2, 4, &res), 0);
	assert_int_equal(res.n_final, 0);
	assert_int_equal(text_stream_push(&s, "e", 1, 1, &res), 0);
	assert_int_equal(res.n_final, 5);
	assert_memory_equal(res.final, "\xE2\x82\xAC" "cd", 5);
	assert_int_equal(text_stream_check(&s), 0);
	/* More than is held cannot be dropped: it is final already. */
	assert_int_equal(text_stream_finish(&s, 2, &res), -EINVAL);
	assert_false(text_stream_done(&s));
	assert_int_equal(text_stream_finish(&s, 1, &res), 0);
	assert_int_equal(res.n_final, 0);
	{
		size_t n;
		const char *t = text_stream_text(&s, &n);

		assert_int_equal(n, 7);
		assert_memory_equal(t, "ab\xE2\x82\xAC" "cd", 7);
	}
	text_stream_release(&s);
}

/* NUL bytes are text like any other, in stops and pieces. */
static void test_nul_bytes(void **state)
{
	const char *stops[] = { "a\0b" };
	size_t lens[] = { 3 };
	struct text_stop_set *set = text_stop_set_create(stops, lens, 1, NULL,
							 0);
	struct text_stream s;
	struct text_push_result res;
	const char *t;
	size_t n;

	assert_non_null(set);
	text_stream_init(&s, set, TEXT_STREAM_KEEP_TEXT);
	assert_int_equal(text_stream_push(&s, "\0xa", 3, 0, &res), 0);
	assert_int_equal(res.n_final, 2);
	assert_int_equal(text_stream_push(&s, "\0", 1, 0, &res), 0);
	assert_int_equal(res.n_final, 0);
	assert_int_equal(text_stream_push(&s, "by", 2, 0, &res), 0);
	assert_true(res.stopped);
	t = text_stream_text(&s, &n);
	assert_int_equal(n, 2);
	assert_memory_equal(t, "\0x", 2);
	text_stream_release(&s);
	text_stop_set_destroy(set);
}

/* Without KEEP_TEXT the buffer stays within the held tail and a piece. */
static void test_memory_bound(void **state)
{
	struct ref_stops st = stops_of(1, "0123456789");
	struct text_stop_set *set = make_set(&st);
	struct text_stream s;
	struct text_push_result res;

	text_stream_init(&s, set, 0);
	for (int i = 0; i < 100000; i++) {
		assert_int_equal(text_stream_push(&s, "01234567xy", 10, 0,
					  &res), 0);
		assert_true(s.buf.len <= 20);
	}
	assert_true(s.buf.cap <= 256);
	text_stream_release(&s);
	text_stop_set_destroy(set);
}

static void test_bad_stops(void **state)
{
	char err[200];
	const char *many[TEXT_STOP_MAX + 1];
	size_t lens[TEXT_STOP_MAX + 1];
	char long_stop[TEXT_STOP_MAX_BYTES + 1];
	const char *s[3] = { "ok", "", "x" };
	size_t l[3] = { 2, 0, 1 };
	struct text_stop_set *set;
	static const struct {
		const char *s;
		size_t bad_at;
	} invalid[] = {
		{ "ab\x80", 2 }, { "\xC0\xAF", 0 }, { "x\xED\xA0\x80", 1 },
		{ "\xE2\x82", 0 }, { "\xF4\x90\x80\x80", 0 }, { "\xFF", 0 },
	};

	for (uint32_t i = 0; i <= TEXT_STOP_MAX; i++) {
		many[i] = "s";
		lens[i] = 1;
	}
	errno = 0;
	assert_null(text_stop_set_create(many, lens, TEXT_STOP_MAX + 1, err,
					 sizeof(err)));
	assert_int_equal(errno, EINVAL);
	assert_string_equal(err, "17 stop strings; at most 16 are allowed");
	set = text_stop_set_create(many, lens, TEXT_STOP_MAX, err, sizeof(err));
	assert_non_null(set);
	text_stop_set_destroy(set);

	assert_null(text_stop_set_create(s, l, 3, err, sizeof(err)));
	assert_string_equal(err, "stop[1] is empty");

	memset(long_stop, 'a', sizeof(long_stop));
	s[1] = long_stop;
	l[1] = TEXT_STOP_MAX_BYTES + 1;
	assert_null(text_stop_set_create(s, l, 3, err, sizeof(err)));
	assert_string_equal(err,
			    "stop[1] is 257 bytes long; at most 256 are allowed");
	l[1] = TEXT_STOP_MAX_BYTES;
	set = text_stop_set_create(s, l, 3, err, sizeof(err));
	assert_non_null(set);
	assert_int_equal(text_stop_set_max_len(set), TEXT_STOP_MAX_BYTES);
	text_stop_set_destroy(set);

	for (size_t i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++) {
		char want[100];

		s[2] = invalid[i].s;
		l[2] = strlen(invalid[i].s);
		errno = 0;
		assert_null(text_stop_set_create(s, l, 3, err, sizeof(err)));
		assert_int_equal(errno, EINVAL);
		snprintf(want, sizeof(want),
			 "stop[2] is not valid UTF-8 (at byte %zu)",
			 invalid[i].bad_at);
		assert_string_equal(err, want);
	}
	/* No message buffer: still refused, nothing written. */
	assert_null(text_stop_set_create(s, l, 3, NULL, 0));
	/* None at all: a set that never matches. */
	set = text_stop_set_create(NULL, NULL, 0, err, sizeof(err));
	assert_non_null(set);
	text_stop_set_destroy(set);
}

/* ------------------------------------------------------------------ */
/* Random cases                                                        */
/* ------------------------------------------------------------------ */

/* Units the generated text is made of: ASCII, characters, broken bytes. */
static const char *const units[] = {
	"a", "b", "c", "a", "b", " ",
	"\xE2\x82\xAC",		/* euro sign, 3 bytes */
	"\xF0\x9F\x98\x80",	/* an emoji, 4 bytes */
	"\xE4\xB8\xAD",		/* a CJK character, 3 bytes */
	"\xC3\xA9",		/* e acute, 2 bytes */
	"\xFF", "\x80", "\xE2\x82", "\xF4\x90", "\xF0\x9F\x98", "\xC3",
};
#define N_UNITS (sizeof(units) / sizeof(units[0]))
/* The valid ones, first in units[]. */
#define N_VALID_UNITS 10

#define RAND_MAX_UNITS 60
#define RAND_TEXT_MAX (RAND_MAX_UNITS * 4)
/* Most bytes a random caller holds (the reference tries each). */
#define RAND_MAX_HOLD 40

/* A random stop: valid units, often copied from the text at hand. */
static size_t random_stop(struct rng *r, const uint32_t *text_units,
			  uint32_t n_units, char *out)
{
	uint32_t k = 1 + rng_below(r, 8);
	size_t n = 0;

	if (rng_below(r, 4) && n_units) {
		/* Mostly from the second half, so that the output is long. */
		uint32_t at = rng_below(r, 3) ?
			      n_units / 2 + rng_below(r, n_units - n_units / 2) :
			      rng_below(r, n_units);

		for (uint32_t i = at; i < n_units && n + 4 <= 24; i++) {
			if (text_units[i] >= N_VALID_UNITS)
				break;	/* stops are valid UTF-8 */
			n += strlen(strcpy(out + n, units[text_units[i]]));
			if (n >= k)
				break;
		}
	}
	while (n == 0 || rng_below(r, 2) == 0) {
		if (n + 4 > 24)
			break;
		n += strlen(strcpy(out + n,
				   units[rng_below(r, N_VALID_UNITS)]));
	}
	return n;
}

/*
 * A piece of stop j cut at character boundaries (it may then be inside
 * another stop, or be one's prefix or suffix).  False when the cut
 * falls inside a character.
 */
static bool inner_stop(struct rng *r, const struct ref_stops *st, uint32_t j,
		       char *out, size_t *len)
{
	const unsigned char *s = (const unsigned char *)st->s[j];
	size_t a = rng_below(r, (uint32_t)st->len[j]);
	size_t b = a + 1 + rng_below(r, (uint32_t)(st->len[j] - a));

	if ((s[a] & 0xC0) == 0x80 || (b < st->len[j] && (s[b] & 0xC0) == 0x80))
		return false;
	memcpy(out, s + a, b - a);
	*len = b - a;
	return true;
}

static void random_case(struct rng *r, bool check_safe)
{
	uint32_t text_units[RAND_MAX_UNITS], n_units, n_pieces = 0;
	char text[RAND_TEXT_MAX + 1], stop_buf[TEXT_STOP_MAX][32];
	const char *pieces[2 * RAND_TEXT_MAX];
	size_t piece_lens[2 * RAND_TEXT_MAX], n = 0, off = 0;
	size_t holds[2 * RAND_TEXT_MAX], drop = 0;
	bool caller_holds = rng_below(r, 3) == 0;
	struct ref_stops st = { .n = rng_below(r, 5) };
	bool include = rng_below(r, 2);
	struct run run;

	n_units = 1 + rng_below(r, RAND_MAX_UNITS);
	for (uint32_t i = 0; i < n_units; i++) {
		/* Broken bytes one time in eight. */
		text_units[i] = rng_below(r, 8) ? rng_below(r, N_VALID_UNITS) :
						  rng_below(r, N_UNITS);
		n += strlen(strcpy(text + n, units[text_units[i]]));
	}
	for (uint32_t i = 0; i < st.n; i++) {
		st.s[i] = stop_buf[i];
		if (i && rng_below(r, 3) == 0 &&
		    inner_stop(r, &st, rng_below(r, i), stop_buf[i], &st.len[i]))
			continue;
		st.len[i] = random_stop(r, text_units, n_units, stop_buf[i]);
	}
	/* Pieces of 0..6 bytes, cutting characters anywhere. */
	while (off < n) {
		size_t k = rng_below(r, 7);

		/* Empty pieces too (a token of no text), not unbounded. */
		if (k == 0 && n_pieces >= RAND_TEXT_MAX / 2)
			k = 1;
		if (k > n - off)
			k = n - off;
		pieces[n_pieces] = text + off;
		piece_lens[n_pieces++] = k;
		off += k;
	}
	/*
	 * A third of the cases play a caller that holds bytes of its own
	 * (token-id stops pending), growing by at most the piece each time,
	 * and drops some of them at the end.
	 */
	for (uint32_t i = 0; i < n_pieces; i++) {
		size_t most = (i ? holds[i - 1] : 0) + piece_lens[i];

		if (most > RAND_MAX_HOLD)
			most = RAND_MAX_HOLD;
		holds[i] = caller_holds ? rng_below(r, (uint32_t)most + 1) : 0;
	}
	if (caller_holds && n_pieces && rng_below(r, 2))
		drop = rng_below(r, (uint32_t)holds[n_pieces - 1] + 1);
	run = drive(&st, include, pieces, piece_lens, holds, drop, n_pieces,
		    check_safe);
	expect_reference(&st, include, pieces, piece_lens, drop, n_pieces,
			 &run);
	run_free(&run);
}

/* Every step against the brute-force safe prefix. */
static void test_random_steps(void **state)
{
	struct rng r = rng_for(1);

	for (int i = 0; i < 3000; i++)
		random_case(&r, true);
}

/* Many more cases, whole results and joined chunks only. */
static void test_random_whole(void **state)
{
	struct rng r = rng_for(2);

	for (int i = 0; i < 20000; i++)
		random_case(&r, false);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stop_at_start),
		cmocka_unit_test(test_stop_spans_three_pieces),
		cmocka_unit_test(test_stop_inside_pieces),
		cmocka_unit_test(test_stop_prefix_of_another),
		cmocka_unit_test(test_stop_inside_another),
		cmocka_unit_test(test_overlapping_stops),
		cmocka_unit_test(test_prompt_not_matched),
		cmocka_unit_test(test_utf8_holdback),
		cmocka_unit_test(test_include_stop_holds_only_utf8),
		cmocka_unit_test(test_caller_hold),
		cmocka_unit_test(test_nul_bytes),
		cmocka_unit_test(test_memory_bound),
		cmocka_unit_test(test_bad_stops),
		cmocka_unit_test(test_random_steps),
		cmocka_unit_test(test_random_whole),
	};

	test_seed_init("text_stop");
	return cmocka_run_group_tests_name("text_stop", tests, NULL, NULL);
}
