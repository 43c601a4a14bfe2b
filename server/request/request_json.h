/*
 * request_json.h - a request's JSON into a struct request: the codec both
 * front ends share (a `run` input line, a completions body after
 * completion_api.c's own fields) and the tools that read workloads
 * (docs/DESIGN.md 3).
 *
 * Parsing uses jansson, after a fast path that reads the common shape (id,
 * prompt, max_tokens; request_fast.h) without building a tree and leaves
 * every other line, and every error, to jansson.  Each rule of docs/DESIGN.md 3
 * that can be judged from the line alone is checked here (JSON syntax,
 * required and typed fields, tokens in [0, vocab), empty stop sequences,
 * prompt + max_tokens over the context limit); the duplicate-live-id rule
 * needs engine state and is the coordinator's.  Every field must be one
 * of lim->api's (request_fields.h): an unknown one, or one not
 * implemented, is refused with its name.
 */
#ifndef DYNBATCH_REQUEST_JSON_H
#define DYNBATCH_REQUEST_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/request.h"
#include "server/request/request_limits.h"



/*
 * Parse one input line (len bytes, no newline needed, need not be
 * NUL-terminated) into req.  Returns 0, or -EINVAL after writing
 * "line N: <what is wrong>" into err (err may be NULL; line_no 0, an HTTP
 * body, writes just "<what is wrong>"); on error req->id
 * is still set when the line had a string "id" (so the error result can
 * name it), req->line_no is set and every other member is released.
 * -ENOMEM (err says "out of memory") is the one failure that is not the
 * line's fault.  Optional fields given as JSON null count as absent.  The
 * stop list is stop_token, stop_token_ids, stop_sequence, stop_sequences
 * in that order.  Call request_release() in every case.
 */
int request_parse(const char *line, size_t len, uint64_t line_no,
		  const struct request_limits *lim, struct request *req,
		  char *err, size_t err_len);

#endif /* DYNBATCH_REQUEST_JSON_H */
