/*
 * completion_api.h - the OpenAI-style completion API's bodies: parsing a
 * POST /v1/completions body into a request, and writing the answers
 * (a completion object, one Server-Sent Event per streamed step, an error
 * object).  No I/O and no HTTP framing here; see http_server.h.
 *
 * "echo": true puts the prompt's text before each choice's (the string
 * as given, or the token ids decoded; it needs a tokenizer).  With
 * logprobs it would need the prompt's logprobs, which the engine does
 * not compute: refused (400, param "echo").
 *
 * "prompt" may be a batch (a list of strings, or of token-id lists):
 * each prompt is parsed as if the body had it alone, all or none (the
 * first bad one is a 400 naming its index, param "prompt"), and the
 * answer has n choices per prompt, prompt-major (index = prompt * n +
 * choice, as OpenAI numbers them).  "best_of" > n generates best_of
 * candidates per prompt and answers the n of the highest cumulative
 * logprob (completion_rank()); it cannot be streamed.
 *
 * The body takes the docs/DESIGN.md 3.1 request fields (prompt as token ids,
 * max_tokens, stop_token, stop_token_ids, stop_sequence, stop_sequences,
 * include_stop, the sampling fields, and an optional id) plus "stream",
 * "stream_options" and "model"; every other field is refused or taken
 * as request_fields.h says.
 */
#ifndef DYNBATCH_COMPLETION_API_H
#define DYNBATCH_COMPLETION_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/request.h"
#include "server/http/logprob_text.h"
#include "sampling/sampler.h"
#include "util/strbuf.h"
#include "server/request/request_fields.h"
#include "server/request/request_json.h"

/*
 * Ids the server generates for requests without one start with this; a
 * client id that starts with it is refused (400, param "id"), so a client
 * can never take an id the server is about to give out (nor the reverse).
 */
#define COMPLETION_ID_PREFIX "cmpl-"

struct chat_tool_set;
struct chat_tool_calls;

/* "best_of" is at most this (OpenAI's limit). */
#define COMPLETION_MAX_BEST_OF 20u

/* One prompt of a batch after the first (completion_request.more). */
struct completion_prompt {
	struct request req;
	char *echo;		/* as completion_request's */
	size_t echo_len;
};

struct completion_request {
	struct request req;	/* req.id is NULL when the body had none */
	bool stream;		/* answer with Server-Sent Events */
	/* chat without max_tokens: req.max_tokens is the context's rest,
	 * which the server may lower to what it can hold */
	bool max_tokens_defaulted;
	/* stream_options.include_usage: a last event with the usage */
	bool include_usage;
	char *model;		/* "model" as given (malloc'd), NULL: none */
	/* "echo": true: the prompt's text, which each choice's text starts
	 * with (malloc'd, echo_len bytes); NULL: no echo */
	char *echo;
	size_t echo_len;
	/* a batch ("prompt": a list of strings or of token lists): req and
	 * echo are its prompt 0, more[i] its prompt i + 1, each parsed
	 * from the body with that prompt alone; n_prompts >= 1 (1: more
	 * is NULL) */
	struct completion_prompt *more;
	uint32_t n_prompts;
	/* best_of > n: req.n_choices (each prompt's) is best_of, the
	 * candidates, and n_best is n, the choices answered (0: no
	 * ranking); hide_logprobs: the logprobs are best_of's, not asked
	 * for, and left out of the answer */
	uint32_t n_best;
	bool hide_logprobs;
	/* a refused field's name, where an error's param points */
	char param[REQUEST_FIELD_NAME_MAX];
	/* chat's function tools (chat_tools.h), NULL: none; freed here */
	struct chat_tool_set *tools;
};

/*
 * Parse a request body (a client id must not start with
 * COMPLETION_ID_PREFIX).  Returns 0, -EINVAL with err set to what is wrong
 * and *param to the field it names (NULL when it is the body as a whole),
 * or -ENOMEM.  lim->id_optional should be set.  Call
 * completion_request_release() in every case.
 */
int completion_parse(const char *body, size_t len,
		     const struct request_limits *lim,
		     struct completion_request *out, char *err, size_t err_len,
		     const char **param);
void completion_request_release(struct completion_request *c);

/* One best_of candidate: its n_tokens logprobs, logprob_stride apart. */
struct completion_candidate {
	const struct sampler_logprob *logprobs;
	uint32_t n_tokens;
	uint32_t stride;
};

/*
 * best_of's choice among n candidates (n <= REQUEST_MAX_CHOICES): into
 * order[0 .. n_best) the indexes of the n_best with the highest
 * cumulative logprob (the sum of their tokens' logprobs, in token order,
 * in double), best first; on a tie the lower index first.
 */
void completion_rank(const struct completion_candidate *c, uint32_t n,
		     uint32_t n_best, uint32_t *order);

/* What every answer object carries. */
struct completion_meta {
	const char *id;		/* "cmpl-..." or the client's id */
	uint64_t created;	/* Unix seconds at admission */
	const char *model;	/* the served model's name */
	/* a stream that asked for usage (include_usage): OpenAI's chunks
	 * before the usage chunk carry "usage": null */
	bool usage_null;
};

struct completion_usage {
	uint32_t prompt_tokens;
	uint32_t completion_tokens;	/* generated, stop tokens included */
};

/*
 * One choice of an answer (or its new part, in an event).  logprobs,
 * when not NULL, has n_tokens entries of logprob_stride (jsonl_result.h's
 * struct result) and is written in the completions shape, each token
 * named by its text (logprob_text.h; lp says where the tokens start):
 *   "logprobs":{"tokens":[" the",..],"token_logprobs":[..],
 *               "top_logprobs":[{" the":-0.5," a":-1.2},..],
 *               "text_offset":[0,4,..]}
 * text_offset is each token's first byte in the choice's text (bytes
 * of UTF-8, where OpenAI's Python server counts characters).
 */
struct completion_choice {
	uint32_t index;
	const char *text;		/* text_len bytes ("" when NULL) */
	size_t text_len;
	const int32_t *tokens;
	uint32_t n_tokens;
	const char *finish_reason;	/* NULL: JSON null (not the end yet) */
	const struct sampler_logprob *logprobs;
	uint32_t logprob_stride;
	struct logprob_ctx lp;		/* the tokens' names and offsets */
	/* completions' echo: prefix_len bytes written before text */
	const char *prefix;
	size_t prefix_len;
	/* chat: the tool calls the text holds (chat_tools.h), NULL: none;
	 * then text[0 .. calls->content_len) is the content */
	const struct chat_tool_set *tools;
	const struct chat_tool_calls *calls;
};

/* What an answer shape costs at most, for completion_answer_bound(). */
struct answer_sizes {
	size_t fixed;		/* names, numbers and braces of the object */
	size_t per_choice;	/* of each choice, its text aside */
	size_t per_token;	/* per token id listed */
	size_t per_logprob;	/* per logprob entry or alternative */
};

/* The most bytes the answer (or event) with these choices takes in a
 * shape of sizes sz; SIZE_MAX when absurd. */
size_t completion_answer_bound(const struct completion_meta *m,
			       const struct completion_choice *choices,
			       uint32_t n, const struct answer_sizes *sz);

/* ,"usage":{"prompt_tokens":..,"completion_tokens":..,"total_tokens":..}
 * when usage is not NULL, else ,"usage":null when m->usage_null, else
 * nothing (within the answer bounds); the new end. */
char *completion_put_usage(char *p, const struct completion_meta *m,
			   const struct completion_usage *usage);

/* The whole non-streaming answer: a "text_completion" object with
 * n_choices choices; "seed" when has_seed (the request sampled). */
int completion_format(struct strbuf *out, const struct completion_meta *m,
		      const struct completion_choice *choices,
		      uint32_t n_choices, const struct completion_usage *usage,
		      bool has_seed, uint64_t seed);

/*
 * One Server-Sent Event "data: {...}\n\n" with the new tokens of one
 * choice.  Its finish_reason is NULL until the choice's last event;
 * usage NULL: none (the server sends usage in an event of its own,
 * completion_format_usage_event()).
 */
int completion_format_event(struct strbuf *out, const struct completion_meta *m,
			    const struct completion_choice *choice,
			    const struct completion_usage *usage);

/*
 * The frame of one Server-Sent Event: api_event_open() reserves need
 * bytes and 16 more (the frame) and returns where the event's JSON goes
 * after "data: ", or NULL (out of memory, or need SIZE_MAX: too big);
 * api_event_close() ends it at p with the blank line.
 */
char *api_event_open(struct strbuf *out, size_t need);
void api_event_close(struct strbuf *out, char *p);

/*
 * The last event of a stream that asked for usage
 * ("stream_options": {"include_usage": true}), OpenAI's shape: the
 * answer object with "choices": [] and "usage".  0 or -ENOMEM.
 */
int completion_format_usage_event(struct strbuf *out,
				  const struct completion_meta *m,
				  const struct completion_usage *usage);

/*
 * An OpenAI-style error object:
 *   {"error":{"message":"...","type":"...","param":"..."|null,"code":...}}
 * type is e.g. "invalid_request_error"; param and code may be NULL.
 */
int api_format_error(struct strbuf *out, const char *message, const char *type,
		     const char *param, const char *code);

#endif /* DYNBATCH_COMPLETION_API_H */
