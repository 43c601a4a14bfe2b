/*
 * refdecode_internal.h - what the two halves of bin/refdecode share: the
 * reference decode (refdecode.c: options, decoding, printing) and the
 * check of a run's results against it (ref_check.c).
 */
#ifndef DYNBATCH_REFDECODE_INTERNAL_H
#define DYNBATCH_REFDECODE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tools/refdecode/ref_llama.h"
#include "tools/refdecode/ref_llama_check.h"
#include "tools/refdecode/ref_sampler.h"
#include "tools/refdecode/ref_sim_logits.h"
#include "tools/refdecode/ref_text.h"
#include "engine/request.h"
#include "model/sim_model.h"

#define REF_MAX_PRINTED 20
#define REF_FLUSH_BYTES (1u << 16)

struct ref_opts {
	const char *input;
	const char *check;		/* results file, or NULL */
	struct sim_config model;
	struct ref_llama *llama;	/* --model llama:PATH, else NULL */
	const char *llama_path;
	double near_tie;		/* --near-tie */
	const char *print_logits;	/* --print-logits tokens, or NULL */
	bool max_context_set;
	struct request_limits lim;
	bool allow_cancelled;
	bool allow_errors;
	bool allow_missing;
	const char *tokenizer_path;	/* --tokenizer, or NULL */
	struct ref_text *text;		/* loaded from it: results carry text */
};

/* The reference outcome of one input line. */
struct ref {
	char *id;		/* NULL when the line had no string id */
	uint64_t line_no;
	bool is_error;		/* the line itself is bad */
	int32_t *raw;		/* generated tokens, before stop removal */
	uint32_t n_raw;
	uint32_t n_out;		/* tokens reported: raw[0..n_out) */
	uint32_t n_prompt;
	const char *finish;	/* "stop", "length" or "error" */
	const char *error;	/* llama print mode: why it could not decode */
	/* The request, kept when it is decoded per result or per choice
	 * (llama check mode; sim: it needs logits or has n > 1). */
	struct request *req;
	uint64_t next_same;	/* next ref index + 1 with the same id, 0: none */
	uint32_t seen;		/* results matched to it */
	uint32_t n_choices;	/* results it must get (1 for an error line) */
	uint64_t seen_choices;	/* bit i: the result of choice i came */
	bool has_seed;		/* a result reported the seed ... */
	uint64_t seed;		/* ... this one (all choices must agree) */
	bool has_text;		/* --tokenizer: decoded here, the text is */
	struct strbuf text;
	int32_t prev;		/* the prompt's last token (-1: none) */
};

/* One choice decoded with logits (or with n > 1): what it must report. */
struct ref_out {
	int32_t *raw;		/* generated tokens, before stop removal */
	uint32_t n_raw;
	uint32_t n_out;		/* tokens reported: raw[0..n_out) */
	const char *finish;	/* "stop", "length" or "error" */
	const char *error;	/* with "error": the engine's message */
	bool has_seed;		/* temperature > 0: the seed is reported */
	uint64_t seed;
	/* logprobs asked and max_tokens > 0: n_raw entries of stride */
	struct sampler_logprob *lp;
	uint32_t stride;
	bool has_text;		/* --tokenizer: the answer's text */
	struct strbuf text;
};

/* What a result says beside its tokens: its "text" as jansson decoded it
 * and usage.prompt_tokens. */
struct res_extra {
	bool has_text;
	const char *text;
	size_t text_len;
	bool has_prompt;
	uint64_t n_prompt;
};

struct ref_set {
	struct ref *refs;	/* one per input line, refs[i].line_no == i + 1 */
	uint64_t n_refs;
	uint64_t cap;
	uint64_t *table;	/* id hash: ref index + 1 of the first; 0 empty */
	uint64_t table_mask;
};

struct check_stats {
	uint64_t mismatches;
	uint64_t cancelled;
	uint64_t errors;	/* error results accepted for valid requests */
	uint64_t missing;	/* missing results accepted */
	uint64_t sampled;	/* sim: results checked by the naive sampler */
	struct ref_llama_tally llama;
};

/* refdecode.c: the reference decode, for the check */
int ref_after_token(const struct ref_text *rt, const struct request *req,
		    const int32_t *gen, uint32_t n, bool *ended,
		    uint32_t *n_out, struct strbuf *text);

void ref_out_free(struct ref_out *out);

int ref_decode_choice(const struct request *req,
		      const struct sim_config *m,
		      const struct ref_text *rt, uint64_t seed,
		      uint32_t choice, struct ref_out *out);

int ref_line(const struct ref_opts *o, const char *line, size_t len,
	     uint64_t line_no, struct ref *rf, char *err, size_t err_len);

void ref_free(struct ref *rf);

size_t chomp(char *line, ssize_t n);

/* ref_check.c: refdecode --check */
int run_check(const struct ref_opts *o, FILE *in, FILE *res,
	      int *exit_code);

#endif /* DYNBATCH_REFDECODE_INTERNAL_H */
