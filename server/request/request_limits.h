/*
 * request_limits.h - what a request line is checked against (the model's
 * vocabulary and context, the serve defaults, the tokenizer): one header
 * of its own because both parsers take it, the jansson one
 * (request_json.h) and the fast path (request_fast.h), and the fast path
 * must not include the parser that calls it.
 */
#ifndef DYNBATCH_REQUEST_LIMITS_H
#define DYNBATCH_REQUEST_LIMITS_H

#include <stdbool.h>
#include <stdint.h>

struct request_grammar;
struct text_tokenizer;

/* The front end a request comes from: each has its own set of fields
 * (request_fields.h). */
enum request_api {
	REQUEST_API_JSONL = 0,	/* `dynbatch run` input lines (the zero value) */
	REQUEST_API_COMPLETIONS,
	REQUEST_API_CHAT,
};

struct request_limits {
	uint32_t vocab;		/* tokens must be in [0, vocab) */
	uint32_t max_context;	/* n_prompt + max_tokens must be <= this */
	enum request_api api;	/* whose field set a request is checked against */
	bool id_optional;	/* HTTP: the server names a request without one */
	float default_temperature; /* for a request that sets none (0: greedy;
				    * serve --default-temperature) */
	bool has_logits;	/* the model gives logits: sampling, bias and
				 * logprobs are possible */
	/* --tokenizer (NULL: none): string prompts and stop strings are
	 * possible, and results carry text */
	const struct text_tokenizer *tok;
	/* the longest grammar source a request may have (the "grammar"
	 * field, or what response_format compiles to); 0: grammars are
	 * refused (no tokenizer, or --grammar-max-bytes 0) */
	uint32_t grammar_max;
	/* --grammar-file: the grammar of a request that brings none (a
	 * reference is taken for each); NULL: none */
	struct request_grammar *default_grammar;
};

#endif /* DYNBATCH_REQUEST_LIMITS_H */
