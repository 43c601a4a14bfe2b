/*
 * text_stop.c - stop strings over decoded text and the final-text
 * holdback; see text_stop.h for the rules.
 *
 * NOTES ON THE DESIGN
 *
 * Matching reuses the token automaton of stop_matcher.c: each byte is fed
 * as a token (0..255).  Its cursor gives, per byte, the longest stop that
 * ends here (the tie rule: same end, longest wins) and the longest suffix
 * of the text that is a prefix of some stop (the stop part of the
 * holdback).  So a push costs O(piece length) amortised.
 *
 * Dominated stops.  A stop S that contains another stop T anywhere but as
 * a suffix (T ends before S's last byte) can never win: wherever S ends,
 * T ended earlier inside it.  Keeping S would still be correct for
 * matching, but the holdback would wait for S to complete although it
 * never can (stops "abcd" and "bc": after "ab", "a" is already final,
 * since a continuation can only ever cut at "b").  So create drops
 * dominated stops, and duplicates, and compiles the rest.  In what
 * remains no stop occurs inside a proper prefix of another, so:
 *
 *   - a stop is matched exactly when the cursor stands on its end (the
 *     match length equals the cursor's depth), which identifies it;
 *   - the holdback's stop part is the cursor's depth: every suffix that
 *     is a proper prefix of a kept stop can be completed into a win (the
 *     completion holds no earlier-ending stop), so nothing less is safe.
 *
 * The cut never splits a character: stops are valid UTF-8, so a stop
 * starts with an ASCII or lead byte, which the JSON writer's left-to-right
 * scan never skips as part of a valid sequence.  The same holds for the
 * start of the stop part of the holdback (it is where a stop would
 * start).  The UTF-8 part is the one suffix of at most 3 bytes that is a
 * proper prefix of a valid sequence (only one can be: it starts at a lead
 * byte and the rest are continuation bytes).  Both parts are suffixes, so
 * the held tail is the longer one.  Neither reaches back into bytes
 * already final: the cursor's depth grows by at most one per byte, and an
 * incomplete sequence that grows stays one that was held before.
 *
 * The caller's hold ends the final text at a token boundary, which may
 * fall inside a character; it is moved back to the start of a sequence
 * that crosses it and is valid or may still be (utf8_align_back()).  Its
 * start never moves back past bytes already final, as long as the hold
 * grows by at most the piece per push (what the caller promises; a hold
 * larger than the bytes not yet final is cut to them).
 *
 * The stream's buffer holds the final text (all of it with KEEP_TEXT, else
 * only what was handed out by the latest call) and the held tail after
 * it.  Without KEEP_TEXT each call first drops what it handed out last
 * time, so the buffer stays within the held tail plus one piece.
 */
#include "text/text_stop.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/stop_matcher.h"

/* One stop that can win: its automaton end state and caller's index. */
struct text_stop_end {
	uint32_t state;		/* cursor after feeding the stop from the root */
	uint32_t index;		/* lowest index given to create for it */
};

struct text_stop_set {
	struct stop_matcher *sm;	/* over the kept stops; NULL for none */
	struct text_stop_end ends[TEXT_STOP_MAX];
	uint32_t n_kept;		/* stops that can win */
	size_t max_len;			/* longest stop given, bytes */
	size_t max_kept_len;		/* longest kept stop, bytes */
};

/* ------------------------------------------------------------------ */
/* UTF-8                                                               */
/* ------------------------------------------------------------------ */

/*
 * The UTF-8 sequence at s[0..n), n > 0, by the JSON writer's rules
 * (shortest form, no surrogates, at most U+10FFFF): its length 1..4 when
 * complete and valid, 0 when invalid whatever follows, or -1 when s[0..n)
 * is a proper prefix of a valid sequence (more bytes may complete it).
 */
static int utf8_seq_status(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t need;
	unsigned lo = 0x80, hi = 0xBF;	/* range of the second byte */

	if (c < 0x80)
		return 1;
	if (c < 0xC2 || c > 0xF4)
		return 0;
	need = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
	if (c == 0xE0)
		lo = 0xA0;	/* overlong below */
	else if (c == 0xED)
		hi = 0x9F;	/* surrogates above */
	else if (c == 0xF0)
		lo = 0x90;	/* overlong below */
	else if (c == 0xF4)
		hi = 0x8F;	/* above U+10FFFF */
	for (size_t i = 1; i < need; i++) {
		if (i >= n)
			return -1;
		if (i == 1 ? s[i] < lo || s[i] > hi : (s[i] & 0xC0) != 0x80)
			return 0;
	}
	return (int)need;
}

/* Byte offset of the first invalid sequence in s[0..n), or n if valid. */
static size_t utf8_first_invalid(const unsigned char *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		int k = utf8_seq_status(s + i, n - i);

		if (k <= 0)
			return i;
		i += (size_t)k;
	}
	return n;
}

/*
 * Bytes at the end of s[0..n) that are a proper prefix of a valid
 * sequence (0..3): a later byte could still complete them.
 */
static size_t utf8_incomplete_tail(const unsigned char *s, size_t n)
{
	for (size_t k = 1; k <= 3 && k <= n; k++) {
		unsigned c = s[n - k];

		if ((c & 0xC0) == 0x80)
			continue;	/* a continuation byte: look further */
		return utf8_seq_status(s + n - k, k) == -1 ? k : 0;
	}
	return 0;
}

/*
 * Where to end the final text at or before b in s[0..n) so that it does
 * not split a character: the start of a sequence that crosses b and is
 * valid or may still become valid.  A split anywhere else renders the
 * same apart as whole (the bytes around it are invalid either way).
 */
static size_t utf8_align_back(const unsigned char *s, size_t n, size_t b)
{
	for (size_t k = 1; k <= 3 && k <= b; k++) {
		size_t i = b - k;
		int len;

		if ((s[i] & 0xC0) == 0x80)
			continue;	/* a continuation byte: look further */
		len = utf8_seq_status(s + i, n - i);
		if (len == -1 || (size_t)len > k)
			return i;
		return b;
	}
	return b;
}

/* ------------------------------------------------------------------ */
/* Stop set                                                            */
/* ------------------------------------------------------------------ */

static void set_err(char *err, size_t err_len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t err_len, const char *fmt, ...)
{
	va_list ap;

	if (!err || !err_len)
		return;
	va_start(ap, fmt);
	vsnprintf(err, err_len, fmt, ap);
	va_end(ap);
}

/* Whether needle occurs in hay[0..hay_len). */
static bool contains(const char *hay, size_t hay_len, const char *needle,
		     size_t needle_len)
{
	return needle_len <= hay_len &&
	       memmem(hay, hay_len, needle, needle_len) != NULL;
}

/*
 * Whether stop i can never win or repeats an earlier one: some other
 * stop occurs in it ending before its last byte, or an equal stop has a
 * lower index.
 */
static bool stop_is_shadowed(const char *const *stops, const size_t *lens,
			     uint32_t n, uint32_t i)
{
	for (uint32_t j = 0; j < n; j++) {
		if (j == i)
			continue;
		if (lens[j] == lens[i] && !memcmp(stops[j], stops[i], lens[i])) {
			if (j < i)
				return true;
			continue;
		}
		if (contains(stops[i], lens[i] - 1, stops[j], lens[j]))
			return true;
	}
	return false;
}

/* Validate the stops as text_stop_set_create() documents; 0 or -EINVAL. */
static int stops_validate(const char *const *stops, const size_t *lens,
			  uint32_t n, char *err, size_t err_len)
{
	if (n > TEXT_STOP_MAX) {
		set_err(err, err_len, "%u stop strings; at most %u are allowed",
			n, TEXT_STOP_MAX);
		return -EINVAL;
	}
	if (n && (!stops || !lens)) {
		set_err(err, err_len, "stop strings missing");
		return -EINVAL;
	}
	for (uint32_t i = 0; i < n; i++) {
		size_t bad;

		if (!lens[i] || !stops[i]) {
			set_err(err, err_len, "stop[%u] is empty", i);
			return -EINVAL;
		}
		if (lens[i] > TEXT_STOP_MAX_BYTES) {
			set_err(err, err_len,
				"stop[%u] is %zu bytes long; at most %u are allowed",
				i, lens[i], TEXT_STOP_MAX_BYTES);
			return -EINVAL;
		}
		bad = utf8_first_invalid((const unsigned char *)stops[i],
					 lens[i]);
		if (bad < lens[i]) {
			set_err(err, err_len,
				"stop[%u] is not valid UTF-8 (at byte %zu)", i,
				bad);
			return -EINVAL;
		}
	}
	return 0;
}

/* Build the automaton over the kept stops and find their end states. */
static int set_compile(struct text_stop_set *set, const char *const *stops,
		       const size_t *lens, const uint32_t *kept)
{
	int32_t bytes[TEXT_STOP_MAX * TEXT_STOP_MAX_BYTES];
	const int32_t *seqs[TEXT_STOP_MAX];
	uint32_t seq_lens[TEXT_STOP_MAX];
	size_t off = 0;

	for (uint32_t k = 0; k < set->n_kept; k++) {
		const unsigned char *p = (const unsigned char *)stops[kept[k]];

		seqs[k] = bytes + off;
		seq_lens[k] = (uint32_t)lens[kept[k]];
		for (size_t b = 0; b < lens[kept[k]]; b++)
			bytes[off++] = p[b];
	}
	set->sm = stop_matcher_create(seqs, seq_lens, set->n_kept);
	if (!set->sm)
		return -ENOMEM;
	for (uint32_t k = 0; k < set->n_kept; k++) {
		uint32_t state = STOP_MATCHER_ROOT, match = 0;

		for (uint32_t b = 0; b < seq_lens[k]; b++)
			state = stop_matcher_feed(set->sm, state, seqs[k][b],
						  &match);
		/* A kept stop holds no other: it matches at its own end. */
		assert(match == seq_lens[k]);
		set->ends[k].state = state;
		set->ends[k].index = kept[k];
	}
	return 0;
}

struct text_stop_set *text_stop_set_create(const char *const *stops,
					   const size_t *lens, uint32_t n,
					   char *err, size_t err_len)
{
	uint32_t kept[TEXT_STOP_MAX];
	struct text_stop_set *set;

	if (stops_validate(stops, lens, n, err, err_len)) {
		errno = EINVAL;
		return NULL;
	}
	set = calloc(1, sizeof(*set));
	if (!set)
		goto out_nomem;
	for (uint32_t i = 0; i < n; i++) {
		if (lens[i] > set->max_len)
			set->max_len = lens[i];
		if (stop_is_shadowed(stops, lens, n, i))
			continue;
		kept[set->n_kept++] = i;
		if (lens[i] > set->max_kept_len)
			set->max_kept_len = lens[i];
	}
	if (set->n_kept && set_compile(set, stops, lens, kept))
		goto out_free_set;
	return set;

out_free_set:
	free(set);
out_nomem:
	set_err(err, err_len, "out of memory");
	errno = ENOMEM;
	return NULL;
}

void text_stop_set_destroy(struct text_stop_set *set)
{
	if (!set)
		return;
	stop_matcher_destroy(set->sm);
	free(set);
}

size_t text_stop_set_max_len(const struct text_stop_set *set)
{
	return set ? set->max_len : 0;
}

/* The caller's index of the kept stop that ends at state. */
static uint32_t set_stop_at(const struct text_stop_set *set, uint32_t state)
{
	for (uint32_t k = 0; k < set->n_kept; k++)
		if (set->ends[k].state == state)
			return set->ends[k].index;
	assert(!"a match on no stop's end state");
	return TEXT_STOP_NONE;
}

/* ------------------------------------------------------------------ */
/* Stream                                                              */
/* ------------------------------------------------------------------ */

void text_stream_init(struct text_stream *s, const struct text_stop_set *set,
		      unsigned flags)
{
	memset(s, 0, sizeof(*s));
	s->set = set && set->n_kept ? set : NULL;
	s->state = STOP_MATCHER_ROOT;
	s->stop_index = TEXT_STOP_NONE;
	s->flags = flags;
}

void text_stream_release(struct text_stream *s)
{
	strbuf_release(&s->buf);
	s->n_final = 0;
}

bool text_stream_done(const struct text_stream *s)
{
	return s->done;
}

size_t text_stream_held(const struct text_stream *s)
{
	return s->buf.len - s->n_final;
}

const char *text_stream_text(const struct text_stream *s, size_t *len)
{
	*len = s->n_final;
	return s->n_final ? s->buf.data : "";
}

/*
 * Bytes at the end of the text that must wait, given the cursor and the
 * caller's hold: the longest of the stop part, the UTF-8 part and the
 * caller's part, the latter widened so as not to split a character
 * (text_stop.h).
 */
static size_t stream_holdback(const struct text_stream *s)
{
	const unsigned char *text = (const unsigned char *)s->buf.data;
	size_t stop_part = 0, held, end;

	if (s->set && !(s->flags & TEXT_STREAM_INCLUDE_STOP))
		stop_part = stop_matcher_pending(s->set->sm, s->state);
	held = utf8_incomplete_tail(text, s->buf.len);
	if (stop_part > held)
		held = stop_part;
	if (s->caller_held <= held)
		return held;
	end = utf8_align_back(text, s->buf.len, s->buf.len - s->caller_held);
	return s->buf.len - end;
}

/* Report buf[from, n_final) as newly final. */
static void stream_report(const struct text_stream *s, size_t from,
			  struct text_push_result *out)
{
	out->n_final = s->n_final - from;
	out->final = out->n_final ? s->buf.data + from : NULL;
	out->stopped = s->stop_index != TEXT_STOP_NONE;
	out->stop_index = s->stop_index;
}

/* Without KEEP_TEXT, forget what the previous call handed out. */
static void stream_forget_final(struct text_stream *s)
{
	if (s->flags & TEXT_STREAM_KEEP_TEXT || !s->n_final)
		return;
	strbuf_consume(&s->buf, s->n_final);
	s->n_final = 0;
}

/*
 * Feed bytes p[0..len) to the automaton until a stop completes.  Returns
 * the bytes of p consumed (len when none completed); on a match sets
 * s->stop_index and *match_len.
 */
static size_t stream_scan(struct text_stream *s, const unsigned char *p,
			  size_t len, uint32_t *match_len)
{
	const struct stop_matcher *sm = s->set->sm;

	for (size_t i = 0; i < len; i++) {
		uint32_t match;

		s->state = stop_matcher_feed(sm, s->state, p[i], &match);
		if (match) {
			/* Kept stops: a match ends on the stop's own state. */
			assert(match == stop_matcher_pending(sm, s->state));
			s->stop_index = set_stop_at(s->set, s->state);
			*match_len = match;
			return i + 1;
		}
	}
	return len;
}

int text_stream_push(struct text_stream *s, const void *piece, size_t len,
		     size_t hold, struct text_push_result *out)
{
	size_t from, used = len;
	uint32_t match_len = 0;

	memset(out, 0, sizeof(*out));
	out->stop_index = TEXT_STOP_NONE;
	if (s->done)
		return -EINVAL;
	stream_forget_final(s);
	from = s->n_final;
	if (strbuf_reserve(&s->buf, len))
		return -ENOMEM;
	if (s->set)
		used = stream_scan(s, piece, len, &match_len);
	/* Reserved above: the append cannot fail; bytes past a stop are
	 * dropped. */
	strbuf_append(&s->buf, piece, used);

	/* What was final stays final, whatever the caller asks. */
	s->caller_held = hold < s->buf.len - s->n_final ?
			 hold : s->buf.len - s->n_final;
	if (s->stop_index != TEXT_STOP_NONE) {
		/* The match starts at or after n_final: it was held. */
		if (!(s->flags & TEXT_STREAM_INCLUDE_STOP))
			s->buf.len -= match_len;
		s->buf.data[s->buf.len] = '\0';
		assert(s->buf.len >= s->n_final);
		s->n_final = s->buf.len;
		s->caller_held = 0;
		s->done = true;
	} else {
		size_t held = stream_holdback(s);

		assert(held <= s->buf.len - s->n_final);
		s->n_final = s->buf.len - held;
	}
	stream_report(s, from, out);
	return 0;
}

int text_stream_finish(struct text_stream *s, size_t drop,
		       struct text_push_result *out)
{
	size_t from;

	memset(out, 0, sizeof(*out));
	out->stop_index = TEXT_STOP_NONE;
	if (drop > s->buf.len - s->n_final)
		return -EINVAL;
	stream_forget_final(s);
	from = s->n_final;
	s->buf.len -= drop;
	if (s->buf.data)
		s->buf.data[s->buf.len] = '\0';
	s->n_final = s->buf.len;
	s->caller_held = 0;
	s->done = true;
	stream_report(s, from, out);
	/* A stop reported already: the finish only closes the stream. */
	out->stopped = false;
	return 0;
}

int text_stream_check(const struct text_stream *s)
{
	size_t held, limit, bound;

	if (s->n_final > s->buf.len || (s->buf.len && !s->buf.data))
		return -EINVAL;
	if (s->buf.data && s->buf.data[s->buf.len] != '\0')
		return -EINVAL;
	held = s->buf.len - s->n_final;
	if (s->caller_held > held)
		return -EINVAL;
	if (s->done)
		return held || s->caller_held ? -EINVAL : 0;
	if (s->stop_index != TEXT_STOP_NONE)
		return -EINVAL;
	if (!s->set && s->state != STOP_MATCHER_ROOT)
		return -EINVAL;
	/* The holdback is exactly the rule's, never more than its bound. */
	if (held != stream_holdback(s))
		return -EINVAL;
	limit = s->set ? s->set->max_kept_len - 1 : 0;
	bound = limit > 3 ? limit : 3;
	if (held > bound && held > s->caller_held + 3)
		return -EINVAL;
	return 0;
}
