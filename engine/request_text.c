/*
 * request_text.c - see request_text.h.
 *
 * NOTES ON THE DESIGN
 * text_ends[i] is the number of text bytes pushed for tokens [0, i], so
 * the text of the newest p tokens is text_pushed - text_ends[n - p - 1]
 * bytes: what a token stop still pending on them must keep held, and
 * what a matched one that the answer leaves out drops.  An end token
 * pushes nothing (its end is the previous token's).
 */
#include "engine/request_text.h"

#include <errno.h>
#include <stdlib.h>

#include "engine/request_pool.h"
#include "text/text_tokenizer.h"

void request_text_init(struct live_request *lr, bool keep_text)
{
	unsigned flags = (lr->req.include_stop ? TEXT_STREAM_INCLUDE_STOP : 0) |
			 (keep_text ? TEXT_STREAM_KEEP_TEXT : 0);

	lr->text_ends = NULL;	/* at the first token: admission cannot fail */
	text_stream_init(&lr->text, lr->req.text_stops, flags);
	lr->text_pushed = 0;
	lr->prev_token = lr->req.n_prompt ? lr->req.prompt[lr->req.n_prompt - 1] : -1;
	lr->has_text = true;
}

/* Bytes of text of the newest p of the n tokens committed. */
static uint64_t text_of_newest(const struct live_request *lr, uint32_t n,
			       uint32_t p)
{
	if (p > n)
		p = n;
	return lr->text_pushed - (n > p ? lr->text_ends[n - p - 1] : 0);
}

int request_text_commit(const struct text_tokenizer *tok, struct live_request *lr,
			int32_t token, uint32_t pending,
			enum request_text_event *event,
			struct text_push_result *res)
{
	uint32_t n = lr->n_generated;
	const char *piece;
	size_t len;
	int ret;

	*event = REQUEST_TEXT_MORE;
	*res = (struct text_push_result){ .stop_index = TEXT_STOP_NONE };
	if (!lr->text_ends) {
		lr->text_ends = calloc(lr->req.max_tokens, sizeof(*lr->text_ends));
		if (!lr->text_ends)
			return -ENOMEM;
	}
	if (!lr->req.ignore_eos && text_tokenizer_ends(tok, token)) {
		lr->text_ends[n - 1] = lr->text_pushed;
		*event = REQUEST_TEXT_END;
		return 0;
	}
	piece = text_tokenizer_piece(tok, lr->prev_token, token, &len);
	if (!piece) {	/* committed tokens are in the vocabulary */
		piece = "";
		len = 0;
	}
	lr->prev_token = token;
	lr->text_pushed += len;
	lr->text_ends[n - 1] = lr->text_pushed;
	ret = text_stream_push(&lr->text, piece, len,
			       (size_t)text_of_newest(lr, n, pending), res);
	if (ret)
		return ret;
	if (res->stopped)
		*event = REQUEST_TEXT_STOP;
	return 0;
}

int request_text_finish(struct live_request *lr, uint32_t drop_tokens,
			struct text_push_result *res)
{
	*res = (struct text_push_result){ .stop_index = TEXT_STOP_NONE };
	if (text_stream_done(&lr->text))
		return -EINVAL;
	return text_stream_finish(&lr->text,
				  (size_t)text_of_newest(lr, lr->n_generated,
							 drop_tokens), res);
}

const char *request_text_get(const struct live_request *lr, size_t *len)
{
	return text_stream_text(&lr->text, len);
}
