/*
 * text_stop.h - stop strings matched on the decoded text of generated
 * tokens, and which of that text is final for streaming.
 *
 * A request's stop strings ("stop": a string or an array of strings) are
 * compiled once into an immutable struct text_stop_set.  Each request then
 * keeps a struct text_stream and pushes into it the decoded bytes of each
 * generated token, in order; the stream says after every push which new
 * bytes became final and whether a stop string completed.  Only generated
 * text is pushed (never the prompt's), so a stop never matches inside the
 * prompt or across the prompt/output boundary.
 *
 * MATCHING RULE.  Over the concatenated generated text T, the stop that
 * wins is the one whose first occurrence ENDS first in T; of several that
 * end at the same byte, the longest (the one that starts first).  T is cut
 * just before the winner's first byte, or just after its last byte with
 * include_stop.  The bytes of the completing token after the cut are
 * dropped and the stream is done: that token is the last one generated
 * (a result's tokens run up to and including it).  The order of the
 * stops given plays no part: the text decides (when two stops complete in
 * one token, the one that ends first in its bytes wins, not the one listed
 * first).  Duplicate stops count once; the index reported is the lowest
 * among equal strings.
 *
 * HOLDBACK RULE.  After a push, the final text is the longest prefix of
 * the text so far that no continuation can change, neither its bytes nor
 * how the JSON writer renders them (an invalid byte there becomes U+FFFD,
 * a valid sequence is copied).  So the held-back tail is exactly the
 * longer of:
 *
 *   stop part   without include_stop: the longest suffix of T that a
 *               continuation could still turn into the winning stop, i.e.
 *               the longest suffix that is a proper prefix of a stop that
 *               can ever win (see text_stop.c: a stop that contains another
 *               stop before its own last byte can never win, so it is not
 *               held for).  With include_stop nothing: a future stop ends
 *               after all of T, so all of T is kept whatever comes;
 *   UTF-8 part  an incomplete UTF-8 sequence at the very end: a lead byte
 *               and the continuation bytes after it that a later byte
 *               could still make a valid character (E2 82 is held, F4 90
 *               is not: it can never be valid).
 *
 * A stop part never starts inside a character, because stops must be
 * valid UTF-8.  So the held tail is at most max(longest stop - 1, 3)
 * bytes, and the streamed chunks, each rendered by the JSON writer on its
 * own, concatenate to the rendering of the whole final text, byte for
 * byte.  When the request ends for another reason (length, EOS, a token
 * stop), text_stream_finish() makes the held tail final as it is: a
 * partial stop was no stop, and an incomplete UTF-8 sequence at the very
 * end is rendered as one U+FFFD per byte either way.
 *
 * The caller may hold more: text_stream_push()'s hold keeps the text of
 * the newest tokens back (a token-id stop sequence may still claim them;
 * text_stream_finish()'s drop removes them).  The held tail is then the
 * longest of the three parts, widened to the start of a character that
 * the caller's part would split; that is still exactly what must wait.
 *
 * MEMORY.  With TEXT_STREAM_KEEP_TEXT the stream keeps the whole final
 * text (for a non-streamed result: up to the sum of the pushed pieces,
 * i.e. max_tokens times the longest token piece) and text_stream_text()
 * returns it.  Without it the stream forgets final bytes once it has
 * handed them out, and holds only the held tail plus the latest piece.
 * Either way a push costs O(piece length) amortised and never rescans
 * older text.
 */
#ifndef DYNBATCH_TEXT_STOP_H
#define DYNBATCH_TEXT_STOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/strbuf.h"

/* Most stop strings per request, and most bytes per stop string. */
#define TEXT_STOP_MAX 16u
#define TEXT_STOP_MAX_BYTES 256u

/* stop_index when no stop string matched. */
#define TEXT_STOP_NONE UINT32_MAX

struct text_stop_set;

/*
 * Compile n stop strings; stops[i] has lens[i] bytes (it may hold NUL
 * bytes; it need not be NUL-terminated).  Refuses, with errno EINVAL and
 * a message in err naming the stop (its index) and why: more than
 * TEXT_STOP_MAX stops, an empty stop, one over TEXT_STOP_MAX_BYTES bytes,
 * one that is not valid UTF-8.  n == 0 is fine: a set that never matches
 * (a stream over it only holds back incomplete UTF-8).  Returns NULL with
 * errno ENOMEM and "out of memory" in err when allocation fails.  err may
 * be NULL when err_len is 0.
 */
struct text_stop_set *text_stop_set_create(const char *const *stops,
					   const size_t *lens, uint32_t n,
					   char *err, size_t err_len);

/*
 * Free the set.  Accepts NULL.  No stream may still use it.  A set is
 * immutable: streams on several threads may share it.
 */
void text_stop_set_destroy(struct text_stop_set *set);

/* Bytes of the longest stop string (0 for none or NULL). */
size_t text_stop_set_max_len(const struct text_stop_set *set);

/* Flags of text_stream_init(). */
#define TEXT_STREAM_INCLUDE_STOP 1u	/* keep the matched stop in the text */
#define TEXT_STREAM_KEEP_TEXT 2u	/* keep all final text: text_stream_text() */

/*
 * One request's state.  Embed it (in the request); its fields are the
 * module's own, read them only through the functions below.
 */
struct text_stream {
	const struct text_stop_set *set; /* NULL: no stop strings */
	struct strbuf buf;	/* [0, n_final) final, [n_final, len) held */
	size_t n_final;		/* bytes of buf that are final */
	size_t caller_held;	/* bytes at the end the caller holds */
	uint32_t state;		/* stop automaton cursor */
	uint32_t stop_index;	/* the stop that matched, or TEXT_STOP_NONE */
	unsigned flags;		/* TEXT_STREAM_* */
	bool done;		/* a stop matched or text_stream_finish() ran */
};

/* What one push or the finish made final. */
struct text_push_result {
	const char *final;	/* the new final bytes; valid until the next
				 * call on the stream; NULL when n_final == 0 */
	size_t n_final;		/* how many */
	bool stopped;		/* a stop string completed in this piece: the
				 * stream is done, the token was the last */
	uint32_t stop_index;	/* which (index given to create), or
				 * TEXT_STOP_NONE */
};

/*
 * Start a stream over set (NULL: no stop strings) with flags.  Allocates
 * nothing; call text_stream_release() in every case.
 */
void text_stream_init(struct text_stream *s, const struct text_stop_set *set,
		      unsigned flags);

/*
 * Feed the decoded bytes of the next generated token (len may be 0).
 *
 * hold: the caller's own holdback, in bytes at the end of the text after
 * this piece, that must not become final yet because the caller may still
 * take them back with text_stream_finish()'s drop: the text of the tokens
 * a token-id stop sequence may still claim (stop_matcher_pending() tokens,
 * as bytes).  0 when there is none.  The held tail is the longer of the
 * stream's own and this one, widened to the start of a character it would
 * split.  Bytes already final stay final: hold may grow by at most len
 * from one push to the next (what stop_matcher_pending() gives does so).
 *
 * Returns 0 and fills *out; -ENOMEM (the stream is as it was: the caller
 * may fail the request), or -EINVAL when the stream is already done (a
 * caller bug: out reports nothing).
 */
int text_stream_push(struct text_stream *s, const void *piece, size_t len,
		     size_t hold, struct text_push_result *out);

/*
 * The request ended for another reason than a stop string: the last drop
 * bytes of the text are removed (a token-id stop matched without
 * include_stop: the text of its tokens; 0 otherwise) and every other held
 * byte becomes final as it is.  The stream is done; calling it again
 * reports nothing new.  Returns 0, or -EINVAL when drop is more than the
 * bytes held (they are final already; nothing changes).
 */
int text_stream_finish(struct text_stream *s, size_t drop,
		       struct text_push_result *out);

/* A stop matched or the stream was finished: push no more. */
bool text_stream_done(const struct text_stream *s);

/*
 * With TEXT_STREAM_KEEP_TEXT, all the final text so far (once done: the
 * result's "text"), *len bytes, NUL-terminated (the text itself may hold
 * NUL bytes).  Without that flag only what the latest call handed out.
 * Valid until the next call on the stream.
 */
const char *text_stream_text(const struct text_stream *s, size_t *len);

/* Bytes held back now, not yet final. */
size_t text_stream_held(const struct text_stream *s);

/* Free the buffer.  The stream may be initialised again. */
void text_stream_release(struct text_stream *s);

/* Verify every invariant of the stream; 0 when it holds, else -EINVAL. */
int text_stream_check(const struct text_stream *s);

#endif /* DYNBATCH_TEXT_STOP_H */
