/*
 * ref_llama_check.c - refdecode's llama mode: does an engine's result
 * follow from the naive forward pass (ref_llama.c)?
 *
 * NOTES ON THE DESIGN
 *
 * Float32 kernels and a double reference can disagree on the argmax when
 * two logits are within rounding of each other, and after one such token
 * the two generations part for good.  So the check walks the ENGINE's
 * generation (teacher forcing): at every index i it takes the reference
 * logits that follow prompt + engine tokens [0, i) and asks whether the
 * engine's token i is the argmax (lowest id on ties).  When it is not, the
 * reference's own margin between its top token and the engine's token
 * decides: under --near-tie EPS (default 1e-3, REF_LLAMA_NEAR_TIE_DEFAULT)
 * it is a near-tie, counted and accepted, and the walk goes on with the
 * engine's token so the rest is still checked; otherwise a mismatch.
 * Stop decisions are checked on the same walk with refdecode's naive stop
 * rule: the generation must end exactly where the first stop sequence
 * completes, or at max_tokens.
 *
 * Every reference logit is a full recompute from the first token (no
 * cache).  Position p's logits depend only on tokens [0, p], so one
 * forward call over prompt + engine tokens yields, at every position, the
 * very numbers a separate call per prefix would (bit for bit: the same
 * operations in the same order); the walk makes that one call, which is
 * O(n) matrix work per request instead of O(n^2).
 *
 * A result whose stop tokens were removed (include_stop false) does not
 * show them; usage.completion_tokens says how many.  The hidden suffix
 * must be one of the request's stop sequences of exactly that length:
 * each candidate is walked, and the first that passes decides.
 *
 * An empty prompt gives the model no token to start from: the engine
 * answers with an error whose message mentions "empty".  With max_tokens
 * 0 the engine need not call the model at all, so "length" with no tokens
 * is accepted too.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parse_num.h"
#include "ref_llama_check.h"

#define REF_EMPTY_PROMPT_ERROR "prompt is empty: the llama model has no token to start from"

/* Index of the largest of v[0 .. n), the lowest on ties. */
static uint32_t argmax(const double *v, uint32_t n)
{
	uint32_t best = 0;

	for (uint32_t i = 1; i < n; i++)
		if (v[i] > v[best])
			best = i;
	return best;
}

/*
 * Walk gen[0 .. n_gen) as the generation of req: 1 when every token and
 * the end agree (want_finish: "stop" or "length"; NULL for a cancelled
 * result, which may end anywhere before a stop), 0 with why, -ENOMEM.
 */
static int walk(const struct ref_llama *m, const struct request *req,
		const int32_t *gen, uint32_t n_gen, const char *want_finish,
		double near_tie, struct ref_llama_tally *tally, char *why,
		size_t why_len)
{
	uint32_t vocab = ref_llama_shape(m)->vocab, n_prompt = req->n_prompt;
	uint64_t near = 0;
	uint32_t stop = 0, i;
	int32_t *seq = NULL;
	double *logits = NULL;
	int rc;

	if (n_gen > req->max_tokens) {
		snprintf(why, why_len, "%u generated tokens, more than max_tokens %u",
			 n_gen, req->max_tokens);
		return 0;
	}
	for (i = 0; i < n_gen; i++) {
		if (gen[i] < 0 || (uint32_t)gen[i] >= vocab) {
			snprintf(why, why_len, "token %d at index %u is outside the vocabulary (%u)",
				 gen[i], i, vocab);
			return 0;
		}
	}
	if (n_gen) {
		seq = malloc(((uint64_t)n_prompt + n_gen) * sizeof(*seq));
		logits = malloc((uint64_t)n_gen * vocab * sizeof(*logits));
		if (!seq || !logits) {
			rc = -ENOMEM;
			goto out;
		}
		memcpy(seq, req->prompt, n_prompt * sizeof(*seq));
		memcpy(seq + n_prompt, gen, n_gen * sizeof(*seq));
		/* Logits after positions n_prompt - 1 .. n_prompt + n_gen - 2. */
		rc = ref_llama_forward(m, seq, n_prompt + n_gen - 1, n_prompt - 1,
				       logits);
		if (rc == -EINVAL) {
			snprintf(why, why_len, "the reference cannot run %u tokens (seq_len %u)",
				 n_prompt + n_gen - 1, ref_llama_shape(m)->seq_len);
			rc = 0;
			goto out;
		}
		if (rc)
			goto out;
	}
	for (i = 0; i < n_gen; i++) {
		const double *l = logits + (uint64_t)i * vocab;
		uint32_t top = argmax(l, vocab);

		if ((uint32_t)gen[i] != top) {
			double margin = l[top] - l[gen[i]];

			if (!(margin < near_tie)) {
				snprintf(why, why_len,
					 "token %u: got %d, want %u (reference logits %.6g vs %.6g: margin %.3g >= near-tie %.3g)",
					 i, gen[i], top, l[gen[i]], l[top], margin,
					 near_tie);
				rc = 0;
				goto out;
			}
			near++;
		}
		stop = ref_naive_stop(req, gen, i + 1);
		if (stop && i + 1 < n_gen) {
			snprintf(why, why_len,
				 "a stop sequence (%u tokens) ends at token %u, but the generation goes on to %u tokens",
				 stop, i, n_gen);
			rc = 0;
			goto out;
		}
	}
	rc = 1;
	if (!want_finish) {
		tally->cancelled++;
	} else if (strcmp(want_finish, "stop") == 0 && !stop) {
		snprintf(why, why_len, "finish_reason 'stop' after %u tokens, but no stop sequence ends there",
			 n_gen);
		rc = 0;
	} else if (strcmp(want_finish, "length") == 0 &&
		   (stop || n_gen != req->max_tokens)) {
		if (stop)
			snprintf(why, why_len, "finish_reason 'length', want 'stop': a stop sequence ends at token %u",
				 n_gen - 1);
		else
			snprintf(why, why_len, "finish_reason 'length' after %u tokens, max_tokens is %u",
				 n_gen, req->max_tokens);
		rc = 0;
	}
	if (rc == 1) {
		tally->tokens += n_gen;
		tally->near_ties += near;
	}
out:
	free(seq);
	free(logits);
	return rc;
}

/* The answer to an empty prompt: an error naming it (or nothing to do). */
static int check_empty(const struct request *req,
		       const struct ref_engine_result *res, char *why,
		       size_t why_len)
{
	if (strcmp(res->finish, "error") == 0 && res->error &&
	    strstr(res->error, "empty"))
		return 1;
	if (req->max_tokens == 0 && strcmp(res->finish, "length") == 0 &&
	    res->n_tokens == 0)
		return 1;
	snprintf(why, why_len,
		 "empty prompt: want an error result that mentions 'empty', got finish_reason '%s'%s%s",
		 res->finish, res->error ? " with error: " : "",
		 res->error ? res->error : "");
	return 0;
}

/*
 * A "stop" result without its stop tokens: try each stop sequence of the
 * hidden length as the missing suffix.
 */
static int check_hidden_stop(const struct ref_llama *m,
			     const struct request *req,
			     const struct ref_engine_result *res,
			     uint64_t hidden, double near_tie,
			     struct ref_llama_tally *tally, char *why,
			     size_t why_len)
{
	const int32_t *s = req->stop_tokens;
	uint64_t n = res->n_tokens + hidden;
	uint32_t len, i;
	int32_t *gen;
	int rc = 0, tried = 0;

	if (n > req->max_tokens) {
		snprintf(why, why_len, "usage.completion_tokens %llu is more than max_tokens %u",
			 (unsigned long long)n, req->max_tokens);
		return 0;
	}
	gen = malloc((n ? n : 1) * sizeof(*gen));
	if (!gen)
		return -ENOMEM;
	memcpy(gen, res->tokens, res->n_tokens * sizeof(*gen));
	for (i = 0; i < req->n_stop_seqs && rc != 1; s += len, i++) {
		char tmp[512];

		len = req->stop_lens[i];
		if (len != hidden)
			continue;
		memcpy(gen + res->n_tokens, s, len * sizeof(*gen));
		rc = walk(m, req, gen, (uint32_t)n, "stop", near_tie, tally,
			  tried ? tmp : why, tried ? sizeof(tmp) : why_len);
		tried++;
		if (rc < 0)
			break;
	}
	if (!tried)
		snprintf(why, why_len, "finish_reason 'stop' with %llu tokens removed, but no stop sequence has that length",
			 (unsigned long long)hidden);
	free(gen);
	return rc;
}

int ref_llama_check(const struct ref_llama *m, const struct request *req,
		    const struct ref_engine_result *res, double near_tie,
		    bool allow_cancelled, struct ref_llama_tally *tally,
		    char *why, size_t why_len)
{
	const char *fin = res->finish;
	uint64_t hidden = 0;

	if (req->n_prompt == 0)
		return check_empty(req, res, why, why_len);
	if (res->n_tokens > req->max_tokens) {
		snprintf(why, why_len, "%zu tokens, more than max_tokens %u",
			 res->n_tokens, req->max_tokens);
		return 0;
	}
	if (allow_cancelled && strcmp(fin, "cancelled") == 0)
		return walk(m, req, res->tokens, (uint32_t)res->n_tokens, NULL,
			    near_tie, tally, why, why_len);
	if (strcmp(fin, "length") && strcmp(fin, "stop")) {
		snprintf(why, why_len, "finish_reason '%s'%s%s, want 'stop' or 'length'",
			 fin, res->error ? " with error: " : "",
			 res->error ? res->error : "");
		return 0;
	}
	if (res->has_generated) {
		if (res->n_generated < res->n_tokens ||
		    (res->n_generated > res->n_tokens &&
		     (strcmp(fin, "stop") || req->include_stop))) {
			snprintf(why, why_len, "usage.completion_tokens %llu does not fit %zu tokens with finish_reason '%s'",
				 (unsigned long long)res->n_generated,
				 res->n_tokens, fin);
			return 0;
		}
		hidden = res->n_generated - res->n_tokens;
	} else if (strcmp(fin, "stop") == 0 && !req->include_stop) {
		snprintf(why, why_len, "no usage.completion_tokens: cannot tell how many stop tokens were removed");
		return 0;
	}
	if (hidden)
		return check_hidden_stop(m, req, res, hidden, near_tie, tally,
					 why, why_len);
	return walk(m, req, res->tokens, (uint32_t)res->n_tokens, fin,
		    near_tie, tally, why, why_len);
}

int ref_llama_decode(const struct ref_llama *m, const struct request *req,
		     int32_t **raw, uint32_t *n_raw, uint32_t *n_out,
		     const char **finish, const char **error)
{
	uint32_t vocab = ref_llama_shape(m)->vocab, n_gen = 0, stop = 0;
	uint64_t cap = (uint64_t)req->n_prompt + req->max_tokens;
	double *logits;
	int32_t *seq;
	int rc = 0;

	*raw = NULL;
	*n_raw = *n_out = 0;
	*error = NULL;
	*finish = "length";
	if (req->n_prompt == 0 && req->max_tokens) {
		*finish = "error";
		*error = REF_EMPTY_PROMPT_ERROR;
	}
	seq = malloc((cap ? cap : 1) * sizeof(*seq));
	logits = malloc(vocab * sizeof(*logits));
	if (!seq || !logits) {
		rc = -ENOMEM;
		goto out;
	}
	if (req->n_prompt)	/* prompt is NULL when empty */
		memcpy(seq, req->prompt, req->n_prompt * sizeof(*seq));
	while (!*error && n_gen < req->max_tokens && !stop) {
		uint32_t n = req->n_prompt + n_gen;

		/* A full recompute of the whole prefix for every token. */
		rc = ref_llama_forward(m, seq, n, n - 1, logits);
		if (rc == -EINVAL) {
			*finish = "error";
			*error = "the reference cannot run this prefix (beyond seq_len)";
			rc = 0;
			break;
		}
		if (rc)
			goto out;
		seq[n] = (int32_t)argmax(logits, vocab);
		n_gen++;
		stop = ref_naive_stop(req, seq + req->n_prompt, n_gen);
	}
	if (stop)
		*finish = "stop";
	*n_raw = n_gen;
	*n_out = stop && !req->include_stop ? n_gen - stop : n_gen;
	*raw = malloc((n_gen ? n_gen : 1) * sizeof(**raw));
	if (!*raw) {
		rc = -ENOMEM;
		goto out;
	}
	memcpy(*raw, seq + req->n_prompt, n_gen * sizeof(**raw));
out:
	free(seq);
	free(logits);
	return rc;
}

int ref_llama_print_logits(const struct ref_llama *m, const char *list,
			   FILE *out)
{
	uint32_t vocab = ref_llama_shape(m)->vocab, n = 0, cap = 16;
	int32_t *tok = malloc(cap * sizeof(*tok));
	const char *p = list;
	double *logits = NULL;
	int rc = 1;

	while (tok && *p) {
		const char *end = p + strcspn(p, ",");
		uint64_t t;

		if (parse_u64_n(p, (size_t)(end - p), 0, vocab - 1, &t)) {
			fprintf(stderr, "refdecode: --print-logits: '%.*s' is not a token in [0, %u)\n",
				(int)(end - p), p, vocab);
			rc = 2;
			goto out;
		}
		if (n == cap) {
			int32_t *more = realloc(tok, 2 * cap * sizeof(*tok));

			if (!more)
				goto out;
			tok = more;
			cap *= 2;
		}
		tok[n++] = (int32_t)t;
		p = *end ? end + 1 : end;
	}
	if (!tok)
		goto out;
	logits = n ? malloc((uint64_t)n * vocab * sizeof(*logits)) : NULL;
	if (!n || !logits || ref_llama_forward(m, tok, n, 0, logits)) {
		fprintf(stderr, "refdecode: --print-logits: cannot run %u tokens (seq_len %u)\n",
			n, ref_llama_shape(m)->seq_len);
		goto out;
	}
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t v = 0; v < vocab; v++)
			fprintf(out, "%.17g%c", logits[(uint64_t)i * vocab + v],
				v + 1 < vocab ? ' ' : '\n');
	rc = fflush(out) ? 1 : 0;
out:
	free(tok);
	free(logits);
	return rc;
}
