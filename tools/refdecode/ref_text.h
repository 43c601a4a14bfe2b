/*
 * ref_text.h - the reference decoder's text rules (refdecode --tokenizer),
 * written the naive way and apart from the engine's (lib/text/text_stop.c,
 * engine/request_text.c): every generated token decoded again from
 * the file's raw pieces after each step, stop strings found by a plain
 * search over the whole text so far, the end tokens, and how the JSON
 * writer must show the bytes.
 *
 * SEMANTICS (issue 16, as the engine must follow them)
 *  - A token's bytes: its raw piece, except that a piece "<0xNN>" is the
 *    one raw byte NN, and after BOS (the previous token is 1) a piece
 *    loses one leading space.  The first generated token comes after the
 *    prompt's last token (none for an empty prompt).
 *  - After each generated token, in this order: the end tokens (EOS 2 or
 *    BOS 1, unless ignore_eos) end the request: its text is that of the
 *    tokens before it; then the stop strings, over the text of all the
 *    generated tokens so far: the one whose first occurrence ends first
 *    wins, of those ending at the same byte the longest; the text is cut
 *    before it (after it with include_stop); then the caller's token-id
 *    stops; then max_tokens.
 *  - In JSON every byte that is not part of a valid UTF-8 sequence is
 *    written as U+FFFD (one per byte); a valid sequence is copied.
 */
#ifndef DYNBATCH_REF_TEXT_H
#define DYNBATCH_REF_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/request.h"
#include "util/strbuf.h"
#include "server/request/request_json.h"

struct text_tokenizer;
struct ref_text;

/* Load tokenizer.bin of vocab tokens (lib/text/tokenizer.c's loader: it
 * defines which files are valid) and build the naive views of it.  NULL
 * after writing why to err. */
struct ref_text *ref_text_load(const char *path, uint32_t vocab, char *err,
			       size_t err_len);
void ref_text_free(struct ref_text *rt);

/* The loaded tokenizer, for request_parse()'s limits (it accepts string
 * prompts and stop strings only with one). */
const struct text_tokenizer *ref_text_tokenizer(const struct ref_text *rt);

/* Encode a string prompt with the naive encoder (tools/refdecode/ref_tokenizer.c),
 * BOS first.  *out is malloc'd.  0 or -ENOMEM. */
int ref_text_encode(const struct ref_text *rt, const char *s, size_t len,
		    int32_t **out, uint32_t *n_out);

/* Append the bytes of tokens[0..n), the first after prev (-1: none), to
 * out.  0, -ENOMEM or -EINVAL (a token out of range). */
int ref_text_decode(const struct ref_text *rt, int32_t prev,
		    const int32_t *tokens, uint32_t n, struct strbuf *out);

/* What the newest generated token did. */
enum ref_text_event {
	REF_TEXT_MORE,	/* nothing: on to the token stops and max_tokens */
	REF_TEXT_END,	/* an end token: *text is the tokens before it */
	REF_TEXT_STOP,	/* a stop string: *text is cut as include_stop says */
};

/*
 * The text rules after gen[n - 1], the newest of the n generated tokens
 * of req (whose prompt gives the first token's predecessor).  *text is
 * emptied and given the answer's text when the event ends the request,
 * else all the text so far.  0, -ENOMEM or -EINVAL.
 */
int ref_text_step(const struct ref_text *rt, const struct request *req,
		  const int32_t *gen, uint32_t n, enum ref_text_event *ev,
		  struct strbuf *text);

/* Append s[0..n) as the JSON writer must show it, once decoded: valid
 * UTF-8 sequences copied, every other byte U+FFFD.  0 or -ENOMEM. */
int ref_text_shown(const char *s, size_t n, struct strbuf *out);

#endif /* DYNBATCH_REF_TEXT_H */
