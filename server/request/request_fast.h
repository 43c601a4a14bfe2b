/*
 * request_fast.h - a fast path for the common request line.
 *
 * Most input lines are one flat object of "id" (a plain string),
 * "prompt" (integers) and "max_tokens", perhaps with stop tokens and
 * sequences (integers, arrays of integers) and "include_stop".  jansson
 * builds a tree for every line, with a node per integer, which made
 * parsing a third of the coordinator's CPU with a fast model, and most of
 * the cost of a request with 100 stop sequences.  This scanner reads
 * exactly those fields straight into a struct request, and gives up on
 * anything else: any other field, null, a string with an escape, a
 * control byte or a byte >= 0x80, a number that is not a plain
 * non-negative integer, an empty stop sequence, a duplicate key, a token
 * or length out of the limits, trailing bytes.  Giving up costs nothing but
 * the scan: request_parse() then parses the line with jansson, which
 * also writes every error message, so the fast path never decides that
 * a line is wrong and never changes what a line means.
 */
#ifndef DYNBATCH_REQUEST_FAST_H
#define DYNBATCH_REQUEST_FAST_H

#include <stddef.h>

#include "engine/request.h"
#include "server/request/request_limits.h"

/*
 * Parse line[0..len) if it has the common shape and is valid under lim.
 * Returns 1 with req filled as request_parse() would fill it (req->line_no
 * is the caller's), 0 to say "use the full parser" (req untouched: still
 * zeroed), or -ENOMEM.
 */
int request_parse_fast(const char *line, size_t len,
		       const struct request_limits *lim, struct request *req);

#endif /* DYNBATCH_REQUEST_FAST_H */
