/*
 * jsonl_result.h - the result lines of `dynbatch run`: a finished request
 * as one JSON object, and a streamed step's delta line (docs/DESIGN.md 3).
 * Written by the JSON Lines front end and by tools/refdecode, which must
 * agree byte for byte.
 */
#ifndef DYNBATCH_JSONL_RESULT_H
#define DYNBATCH_JSONL_RESULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sampling/sampling_params.h"
#include "util/strbuf.h"

/* What a finished request reports. */
struct result {
	const char *id;		/* NULL is written as JSON null */
	uint64_t line_no;
	const int32_t *tokens;	/* generated tokens to report */
	uint32_t n_tokens;
	const char *finish_reason; /* "stop", "length", "error", "cancelled" */
	const char *error;	/* message when finish_reason is "error" */
	uint32_t n_prompt;	/* usage.prompt_tokens */
	uint32_t n_generated;	/* usage.completion_tokens (before stop removal) */
	uint32_t n_choices;	/* the request's n: index is written when > 1 */
	uint32_t index;		/* which choice this is */
	bool has_seed;		/* the request sampled: report its seed */
	uint64_t seed;
	/* When the request asked for logprobs: per reported token, stride
	 * entries: [0] the token and its logprob, then its top alternatives
	 * (token -1 past the last one).  NULL: none asked. */
	const struct sampler_logprob *logprobs;
	uint32_t logprob_stride;
	/* With a tokenizer: "text", the answer's text_len bytes */
	bool has_text;
	const char *text;
	size_t text_len;
	/* run --stream: "delta", the text not yet sent in a delta line */
	bool has_delta;
	const char *delta;
	size_t delta_len;
};

/* One step of a streamed request (run --stream): its new final tokens
 * and text, before its result line. */
struct result_delta {
	const char *id;
	uint32_t n_choices;	/* index is written when > 1 */
	uint32_t index;
	const int32_t *tokens;
	uint32_t n_tokens;
	const char *text;	/* text_len bytes */
	size_t text_len;
};

/*
 * Append r as one JSON object and a '\n' to out:
 *   {"id":"a","tokens":[1,2],"finish_reason":"length",
 *    "usage":{"prompt_tokens":3,"completion_tokens":2},"line":7}
 * plus "error":"..." when r->error is set, "index" for a choice of n > 1,
 * "seed" when the request sampled, "text" with a tokenizer (and "delta",
 * the text no delta line carried, in run --stream), and with logprobs
 *   "logprobs":[{"token":1,"logprob":-0.25,"top_logprobs":[{"token":1,
 *    "logprob":-0.25},...]},...]
 * (logprobs printed with 9 significant digits: the float, exactly).  Strings are escaped as JSON
 * requires; valid UTF-8 is kept as is, an invalid byte becomes U+FFFD, so
 * the line is always valid JSON.  0 or -ENOMEM (out unchanged).
 */
int result_format(const struct result *r, struct strbuf *out);

/* The most bytes result_format() may write for r (its NUL included);
 * SIZE_MAX when that does not fit a size_t. */
size_t result_format_bound(const struct result *r);

/*
 * Append d as one line {"id":"a","index":1,"tokens":[..],"delta":"..."}
 * (no finish_reason: that tells it from a result line).  0 or -ENOMEM.
 */
int result_delta_format(const struct result_delta *d, struct strbuf *out);

#endif /* DYNBATCH_JSONL_RESULT_H */
