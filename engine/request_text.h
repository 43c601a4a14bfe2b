/*
 * request_text.h - the text side of a live request, with a tokenizer
 * (docs/DESIGN.md 3.6): each committed token's piece pushed into the
 * request's text stream (text_stop.h), the model's end tokens, and which
 * text is final.
 *
 * The engine calls request_text_commit() for every committed token after
 * feeding the token-id stop matcher, and request_text_finish() when the
 * request ends for a reason the text did not decide.  The stream holds
 * back, besides what could still become a stop string or a character,
 * the text of the tokens a token-id stop sequence may still claim
 * (stop_matcher_pending()), so every byte handed out as final stays in
 * the answer whichever kind of stop ends it.
 */
#ifndef DYNBATCH_REQUEST_TEXT_H
#define DYNBATCH_REQUEST_TEXT_H

#include <stdbool.h>
#include <stdint.h>

#include "text/text_stop.h"

struct live_request;
struct text_tokenizer;

/* What a committed token did to the request's text. */
enum request_text_event {
	REQUEST_TEXT_MORE = 0,	/* nothing ends: go on */
	REQUEST_TEXT_STOP,	/* a stop string completed in this token:
				 * the request ends (stop), tokens kept */
	REQUEST_TEXT_END,	/* the model's end token (BOS or EOS, not
				 * ignore_eos): ends (stop), the token is
				 * not in the text */
};

/* Start the request's text (keep_text: the whole text is kept for the
 * result).  Allocates nothing (the first commit does). */
void request_text_init(struct live_request *lr, bool keep_text);

/*
 * Token, the request's newest (lr->n_generated counts it), was committed;
 * pending is stop_matcher_pending() after it (0 with no token stops).
 * Fills *res with the text that became final.  0 with *event set, or
 * -ENOMEM.
 */
int request_text_commit(const struct text_tokenizer *tok, struct live_request *lr,
			int32_t token, uint32_t pending,
			enum request_text_event *event,
			struct text_push_result *res);

/*
 * The request ends otherwise (length, a token stop of drop_tokens tokens
 * that the answer leaves out, cancel, error): everything held becomes
 * final but the text of the last drop_tokens tokens.  Fills *res; 0 or
 * -EINVAL when the text already ended.
 */
int request_text_finish(struct live_request *lr, uint32_t drop_tokens,
			struct text_push_result *res);

/* The whole final text (keep_text) and its length. */
const char *request_text_get(const struct live_request *lr, size_t *len);

/* The pool frees the text state with the live request
 * (request_pool_free()). */

#endif /* DYNBATCH_REQUEST_TEXT_H */
