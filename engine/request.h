/*
 * request.h - one decoding request: the type the engine schedules, and its
 * lifetime (docs/DESIGN.md 3).
 *
 * A front end makes one from its wire format (server/request/request_json.h: a
 * JSON Lines input line or an HTTP body) and hands it to engine_submit();
 * the engine clones it per choice and releases it.  Nothing here knows a
 * wire format: the result line of `run` is server/jsonl/jsonl_result.h's.
 */
#ifndef DYNBATCH_REQUEST_H
#define DYNBATCH_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sampling/sampling_params.h"

struct grammar;
struct stop_matcher;
struct text_stop_set;

/*
 * A request's grammar (docs/DESIGN.md 2.8): the GBNF source its
 * generated text must follow (the "grammar" field, or compiled from
 * response_format), and the grammar compiled from it, which the
 * coordinator checks every committed token against.  Immutable once
 * made, and shared by the request's choices (refs counts them).
 */
struct request_grammar {
	uint32_t refs;
	char *source;		/* malloc'd, len bytes */
	uint32_t len;
	struct grammar *compiled;
};

/* A grammar of one reference owning source and compiled (both freed
 * with it, also on failure).  NULL on no memory. */
struct request_grammar *request_grammar_new(char *source, uint32_t len,
					    struct grammar *compiled);
void request_grammar_put(struct request_grammar *g);

#define REQUEST_DEFAULT_MAX_TOKENS 16u
#define REQUEST_MAX_CHOICES 64u		/* most "n" a request may ask */
#define REQUEST_MAX_SEED ((uint64_t)INT64_MAX)	/* seeds are [0, 2^63) */
/* Seeds the engine picks are in [0, 2^53): a client that reads JSON
 * numbers as doubles (JavaScript) reads them exactly and can replay. */
#define REQUEST_PICKED_SEED_MASK ((UINT64_C(1) << 53) - 1)

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
	/* which prompt of a batch this is (engine_submit_batch(); 0 for
	 * one prompt): its choices are request_flat_choice() onwards */
	uint32_t prompt_index;
	/* Text (with a tokenizer): "stop" strings, matched on the decoded
	 * text of the generated tokens (text_stop.h); NULL when none */
	struct text_stop_set *text_stops;
	char **stop_strs;	/* malloc'd, n_stop_strs strings as given */
	size_t *stop_str_lens;
	uint32_t n_stop_strs;
	bool ignore_eos;	/* do not end at the tokenizer's BOS/EOS */
	bool no_spec;		/* "speculate": false: no guesses for it
				 * (docs/DESIGN.md 2.7) */
	struct request_grammar *grammar;	/* NULL: unconstrained; one
				 * reference is this request's */
	/* The waiting queue's class (wait_queue.h): 0 none, else the
	 * tenant's number + 1 (--tenants), queued fairly against others */
	uint32_t queue_class;
};

/* Does req need the model's logits (not just its greedy token)?  It does
 * when it samples, biases, penalizes or reports logprobs. */
static inline bool request_needs_logits(const struct request *req)
{
	return req->sampling.temperature > 0.0f || req->sampling.n_bias ||
	       req->grammar ||
	       req->sampling.logprobs || sampling_params_penalized(&req->sampling);
}

/* Where a choice stands among all its request's choices, prompt-major
 * (OpenAI's "index" of a batch: prompt_index * n + choice). */
static inline uint32_t request_flat_choice(const struct request *req)
{
	return req->prompt_index * req->n_choices + req->choice;
}

/* Free every member; req is zeroed.  Accepts a zeroed request. */
void request_release(struct request *req);

/*
 * A deep copy of src into *dst (its own id, prompt, stops, bias): one
 * more choice of the same request.  0 or -ENOMEM (dst zeroed).
 */
int request_clone(struct request *dst, const struct request *src);

#endif /* DYNBATCH_REQUEST_H */
