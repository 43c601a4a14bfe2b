/*
 * request.h - one decoding request: parsing a JSON Lines input line into
 * it, and formatting its result line (docs/DESIGN.md 3).
 *
 * Parsing uses jansson, after a fast path that reads the common shape (id,
 * prompt, max_tokens; request_fast.h) without building a tree and leaves
 * every other line, and every error, to jansson.  Each rule of docs/DESIGN.md 3
 * that can be judged from the line alone is checked here (JSON syntax,
 * required and typed fields, tokens in [0, vocab), empty stop sequences,
 * prompt + max_tokens over the context limit); the duplicate-live-id rule
 * needs engine state and is the coordinator's.  Unknown fields are
 * ignored, as OpenAI-style servers do.
 */
#ifndef DYNBATCH_REQUEST_H
#define DYNBATCH_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sampling/sampler.h"
#include "util/strbuf.h"

struct stop_matcher;
struct text_stop_set;
struct tokenizer;

#define REQUEST_DEFAULT_MAX_TOKENS 16u
#define REQUEST_MAX_CHOICES 64u		/* most "n" a request may ask */
#define REQUEST_MAX_SEED ((uint64_t)INT64_MAX)	/* seeds are [0, 2^63) */

struct request_limits {
	uint32_t vocab;		/* tokens must be in [0, vocab) */
	uint32_t max_context;	/* n_prompt + max_tokens must be <= this */
	bool id_optional;	/* HTTP: the server names a request without one */
	float default_temperature; /* for a request that sets none (0: greedy;
				    * serve --default-temperature) */
	bool has_logits;	/* the model gives logits: sampling, bias and
				 * logprobs are possible */
	/* --tokenizer (NULL: none): string prompts and stop strings are
	 * possible, and results carry text */
	const struct tokenizer *tok;
};

struct request {
	char *id;		/* malloc'd; NULL only when the line had none */
	uint64_t line_no;	/* 1-based input line it came from */
	int32_t *prompt;	/* malloc'd, n_prompt tokens (NULL when 0) */
	uint32_t n_prompt;
	uint32_t max_tokens;	/* most generated tokens */
	bool include_stop;	/* keep the matched stop tokens in the output */
	struct stop_matcher *stops; /* NULL when no stop token or sequence */
	/* The stop sequences as given (stop_token/stop_token_ids become
	 * sequences of length one), kept for reference checks and streaming:
	 * sequence i is stop_lens[i] tokens of stop_tokens, in order. */
	int32_t *stop_tokens;	/* malloc'd, all sequences concatenated */
	uint32_t *stop_lens;	/* malloc'd, n_stop_seqs lengths */
	uint32_t n_stop_seqs;
	/* Sampling (docs/DESIGN.md 2.4); SAMPLING_PARAMS_GREEDY when the
	 * line sets none of its fields.  sampling.bias is malloc'd, owned. */
	struct sampling_params sampling;
	bool seed_given;	/* else the engine picks sampling.seed */
	uint32_t n_choices;	/* "n": independent samples, >= 1 */
	uint32_t choice;	/* which of them this is (engine_submit) */
	/* Text (with a tokenizer): "stop" strings, matched on the decoded
	 * text of the generated tokens (text_stop.h); NULL when none */
	struct text_stop_set *text_stops;
	char **stop_strs;	/* malloc'd, n_stop_strs strings as given */
	size_t *stop_str_lens;
	uint32_t n_stop_strs;
	bool ignore_eos;	/* do not end at the tokenizer's BOS/EOS */
};

/* Does req need the model's logits (not just its greedy token)?  It does
 * when it samples, biases or reports logprobs. */
static inline bool request_needs_logits(const struct request *req)
{
	return req->sampling.temperature > 0.0f || req->sampling.n_bias ||
	       req->sampling.logprobs;
}

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

/* Free every member; req is zeroed.  Accepts a zeroed request. */
void request_release(struct request *req);

/*
 * A deep copy of src into *dst (its own id, prompt, stops, bias): one
 * more choice of the same request.  0 or -ENOMEM (dst zeroed).
 */
int request_clone(struct request *dst, const struct request *src);

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

/*
 * Append d as one line {"id":"a","index":1,"tokens":[..],"delta":"..."}
 * (no finish_reason: that tells it from a result line).  0 or -ENOMEM.
 */
int result_delta_format(const struct result_delta *d, struct strbuf *out);

#endif /* DYNBATCH_REQUEST_H */
