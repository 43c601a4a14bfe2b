/*
 * ref_llama_check.h - refdecode's llama mode: checking an engine's result
 * against the naive forward (ref_llama.h), and decoding alone for print
 * mode.  See ref_llama_check.c.
 */
#ifndef DYNBATCH_REF_LLAMA_CHECK_H
#define DYNBATCH_REF_LLAMA_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tools/refdecode/ref_llama.h"
#include "engine/request.h"

/* Default of --near-tie: see ref_llama_check.c. */
#define REF_LLAMA_NEAR_TIE_DEFAULT 1e-3

/*
 * Length of the longest stop sequence of req that is a suffix of
 * gen[0 .. n): refdecode's naive stop rule (refdecode.c), shared so both
 * models stop the same way.
 */
uint32_t ref_naive_stop(const struct request *req, const int32_t *gen,
			uint32_t n);

/* One logprob of a result line: the JSON number read as a double. */
struct ref_logprob {
	int64_t token;
	double logprob;
};

/* A result's logprob entry: the token, then up to 20 alternatives. */
#define REF_LOGPROB_STRIDE (1 + SAMPLER_MAX_LOGPROBS)

/* One engine result line, as refdecode read it. */
struct ref_engine_result {
	const char *finish;	/* finish_reason */
	const char *error;	/* "error" field, NULL when absent */
	const int32_t *tokens;
	size_t n_tokens;
	bool has_generated;	/* usage.completion_tokens was there */
	uint64_t n_generated;
	bool has_index;		/* "index" was there */
	uint32_t index;		/* "index": the choice (0 when absent) */
	bool has_seed;		/* "seed" was there */
	uint64_t seed;
	/* "logprobs", when there: n_logprobs entries of REF_LOGPROB_STRIDE,
	 * [0] the token and its logprob, then the alternatives (token -1 past
	 * the last); each logprob as the double the JSON text reads as. */
	bool has_logprobs;
	const struct ref_logprob *logprobs;
	size_t n_logprobs;
};

struct ref_llama_tally {
	uint64_t tokens;	/* generated tokens checked against logits */
	uint64_t near_ties;	/* engine tokens accepted as near-ties */
	uint64_t cancelled;	/* cancelled results accepted */
	uint64_t sampled;	/* of tokens: drawn by the request's sampling */
	uint64_t near_boundary;	/* sampled tokens accepted near a boundary */
};

/* The most a draw may be off the engine token's share of the kept mass,
 * relative to that mass, for the token to pass as near a boundary. */
#define REF_LLAMA_NEAR_BOUNDARY 1e-4

/*
 * Check res, the engine's answer to the valid request req.  Returns 1
 * when it agrees (tally updated), 0 when not (why gets a one-line
 * reason), or -ENOMEM.  allow_cancelled: a "cancelled" result is accepted
 * when its tokens are a correct start of the generation.
 */
int ref_llama_check(const struct ref_llama *m, const struct request *req,
		    const struct ref_engine_result *res, double near_tie,
		    bool allow_cancelled, struct ref_llama_tally *tally,
		    char *why, size_t why_len);

/*
 * Decode req greedily alone (print mode).  Fills *raw (malloc'd, the
 * generated tokens before stop removal), *n_raw, *n_out (tokens to
 * report) and *finish ("stop", "length" or "error"; *error then names
 * why).  0 or -ENOMEM.
 */
int ref_llama_decode(const struct ref_llama *m, const struct request *req,
		     int32_t **raw, uint32_t *n_raw, uint32_t *n_out,
		     const char **finish, const char **error);

/*
 * refdecode --print-logits: the logits after every position of list
 * ("T1,T2,...") to out, one line per position, %.17g separated by spaces.
 * Returns an exit status: 0, 1 (failure) or 2 (a bad list).
 */
int ref_llama_print_logits(const struct ref_llama *m, const char *list,
			   FILE *out);

#endif /* DYNBATCH_REF_LLAMA_CHECK_H */
