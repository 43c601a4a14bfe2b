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
 * A request that needs logits (sampling, logit_bias, logprobs) is walked
 * the same way, but each step draws: the reference logits, rounded to
 * float, go through the naive sampler (ref_sample()) with the request's
 * seed (or the one the engine reports) and the step and choice numbers.
 * Agreement is exact only when the logits are; the engine's float kernels
 * move every weight by a few ulps, so a draw that falls within rounding of
 * the boundary between two tokens' shares may land on either.  So when
 * the tokens differ, the engine's token must be in the reference's kept
 * set (computed here once more from the SEMANTICS' thresholds) and the
 * draw must lie within REF_LLAMA_NEAR_BOUNDARY of the kept mass from the
 * edge of that token's share: counted as near-boundary and accepted
 * (temperature 0 with a bias or logprobs: the near-tie rule on the biased
 * logits).  Logprobs are not compared: they carry the logits' rounding.
 * A bias that bans every token must get the engine's error.
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

#include "util/parse_num.h"
#include "sampling/philox.h"
#include "tools/refdecode/ref_llama_check.h"
#include "tools/refdecode/ref_sampler.h"

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

/* The engine's words for a request whose bias bans every token. */
#define REF_ALL_BANNED_ERROR \
	"no token can be sampled: logit_bias (or the model) bans every token"

/* The bias of token v under p, 0 when it has none. */
static float bias_of(const struct sampling_params *p, uint32_t v)
{
	for (uint32_t i = 0; i < p->n_bias; i++)
		if ((uint32_t)p->bias[i].token == v)
			return p->bias[i].bias;
	return 0.0f;
}

/* Does req's bias ban the whole vocabulary?  (The model's logits are
 * finite, so nothing else can.) */
static bool bans_all(const struct request *req, uint32_t vocab)
{
	uint32_t banned = 0;

	for (uint32_t i = 0; i < req->sampling.n_bias; i++)
		banned += req->sampling.bias[i].bias == SAMPLER_BIAS_BAN;
	return banned >= vocab;
}

static int cmp_desc_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? 1 : x > y ? -1 : 0;
}

/* Scratch for the sampled steps of one walk. */
struct ref_step_buf {
	float *row;		/* reference logits, as floats */
	uint32_t *w;		/* weights */
	uint32_t *sorted;	/* weights, largest first */
};

/*
 * Step k of a sampled walk: does the engine's token tok follow from the
 * reference logits l?  1 yes (*near set when only as near a boundary), 0
 * no (why says so), -ENOMEM.
 */
static int sampled_step(const struct sampling_params *sp, uint32_t choice,
			const double *l, uint32_t vocab, uint32_t k,
			int32_t tok, double near_tie, struct ref_step_buf *b,
			bool *near, char *why, size_t why_len)
{
	struct sampler_result sr;
	uint64_t z1 = 0, zk = 0, cum = 0, target, lo = 0;
	float max_y = -INFINITY, scale;
	uint32_t t = 1, v;
	int rc;

	*near = false;
	for (v = 0; v < vocab; v++)
		b->row[v] = (float)l[v];
	rc = ref_sample(b->row, vocab, sp, k, choice, &sr);
	if (rc == -ENOMEM)
		return rc;
	if (rc) {
		snprintf(why, why_len, "token %u: the reference cannot draw: %s",
			 k, strerror(-rc));
		return 0;
	}
	if (sr.token == tok)
		return 1;
	/* the biased logits, as the SEMANTICS define them */
	for (v = 0; v < vocab; v++) {
		float bias = bias_of(sp, v);

		b->row[v] = bias == SAMPLER_BIAS_BAN ? -INFINITY : b->row[v] + bias;
		if (b->row[v] > max_y)
			max_y = b->row[v];
	}
	if (sp->temperature == 0.0f) {
		double margin = (double)b->row[sr.token] - (double)b->row[tok];

		if (margin < near_tie) {
			*near = true;
			return 1;
		}
		snprintf(why, why_len, "token %u: got %d, want %d (biased reference logits %.6g vs %.6g: margin %.3g >= near-tie %.3g)",
			 k, tok, sr.token, (double)b->row[tok],
			 (double)b->row[sr.token], margin, near_tie);
		return 0;
	}
	/* the kept set: W >= the largest of the three thresholds (W > 0) */
	scale = sampler_weight_scale(sp->temperature);
	for (v = 0; v < vocab; v++)
		b->sorted[v] = b->w[v] = sampler_weight(b->row[v], max_y, scale);
	qsort(b->sorted, vocab, sizeof(*b->sorted), cmp_desc_u32);
	if (sp->top_k && sp->top_k < vocab && b->sorted[sp->top_k - 1] > t)
		t = b->sorted[sp->top_k - 1];
	for (v = 0; v < vocab && b->sorted[v] >= t; v++)
		z1 += b->sorted[v];
	target = sampler_top_p_target(sp->top_p, z1);
	for (v = 0; v < vocab && b->sorted[v] >= t; v++) {
		cum += b->sorted[v];
		if (cum >= target) {
			t = b->sorted[v];
			break;
		}
	}
	if (sp->min_p > 0.0f && sampler_min_p_threshold(sp->min_p) > t)
		t = sampler_min_p_threshold(sp->min_p);
	for (v = 0; v < vocab; v++) {
		if (b->w[v] < t)
			continue;
		if (v < (uint32_t)tok)
			lo += b->w[v];
		zk += b->w[v];
	}
	if (b->w[tok] < t) {
		snprintf(why, why_len, "token %u: got %d, want %d, and %d is not in the reference's kept set (weight %u < threshold %u)",
			 k, tok, sr.token, tok, b->w[tok], t);
		return 0;
	}
	target = sampler_draw_target(philox_bits53(sp->seed, k, choice), zk);
	{
		uint64_t hi = lo + b->w[tok];
		uint64_t off;

		if (target >= lo && target < hi) {	/* cannot be: a bug here */
			snprintf(why, why_len, "token %u: the naive sampler drew %d, but the draw %llu lies in %d's share [%llu, %llu) of the kept set computed here",
				 k, sr.token, (unsigned long long)target, tok,
				 (unsigned long long)lo, (unsigned long long)hi);
			return 0;
		}
		off = target < lo ? lo - target : target - hi + 1;
		if ((double)off <= REF_LLAMA_NEAR_BOUNDARY * (double)zk) {
			*near = true;
			return 1;
		}
		snprintf(why, why_len, "token %u: got %d, want %d (the draw %llu of kept mass %llu is %llu away from %d's share [%llu, %llu): more than %g of the mass)",
			 k, tok, sr.token, (unsigned long long)target,
			 (unsigned long long)zk, (unsigned long long)off, tok,
			 (unsigned long long)lo, (unsigned long long)hi,
			 REF_LLAMA_NEAR_BOUNDARY);
	}
	return 0;
}

/*
 * Walk gen[0 .. n_gen) as the generation of req: 1 when every token and
 * the end agree (want_finish: "stop" or "length"; NULL for a cancelled
 * result, which may end anywhere before a stop), 0 with why, -ENOMEM.
 */
static int walk(const struct ref_llama *m, const struct request *req,
		const struct sampling_params *sp, uint32_t choice,
		const int32_t *gen, uint32_t n_gen, const char *want_finish,
		double near_tie, struct ref_llama_tally *tally, char *why,
		size_t why_len)
{
	uint32_t vocab = ref_llama_shape(m)->vocab, n_prompt = req->n_prompt;
	bool sampled = request_needs_logits(req);
	struct ref_step_buf sb = { 0 };
	uint64_t near = 0, near_boundary = 0;
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
		if (sampled) {
			sb.row = malloc(vocab * sizeof(*sb.row));
			sb.w = malloc(vocab * sizeof(*sb.w));
			sb.sorted = malloc(vocab * sizeof(*sb.sorted));
		}
		if (!seq || !logits ||
		    (sampled && (!sb.row || !sb.w || !sb.sorted))) {
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
		uint32_t top;

		if (sampled) {
			bool at_boundary;

			rc = sampled_step(sp, choice, l, vocab, i, gen[i],
					  near_tie, &sb, &at_boundary, why,
					  why_len);
			if (rc <= 0)
				goto out;
			if (at_boundary && sp->temperature > 0.0f)
				near_boundary++;
			else if (at_boundary)
				near++;
			goto stop_rule;
		}
		top = argmax(l, vocab);
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
stop_rule:
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
		tally->near_boundary += near_boundary;
		if (sampled)
			tally->sampled += n_gen;
	}
out:
	free(seq);
	free(logits);
	free(sb.row);
	free(sb.w);
	free(sb.sorted);
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
			     const struct sampling_params *sp, uint32_t choice,
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
		rc = walk(m, req, sp, choice, gen, (uint32_t)n, "stop",
			  near_tie, tally,
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
	struct sampling_params sp = req->sampling;
	uint64_t hidden = 0;

	if (req->n_prompt == 0)
		return check_empty(req, res, why, why_len);
	if (sp.temperature > 0.0f) {	/* draw with the seed it reports */
		if (!res->has_seed) {
			snprintf(why, why_len, "no 'seed' in the result of a sampled request");
			return 0;
		}
		if (req->seed_given && res->seed != sp.seed) {
			snprintf(why, why_len, "seed %llu, but the request gave %llu",
				 (unsigned long long)res->seed,
				 (unsigned long long)sp.seed);
			return 0;
		}
		sp.seed = res->seed;
	}
	if (req->max_tokens && bans_all(req, ref_llama_shape(m)->vocab)) {
		if (strcmp(fin, "error") == 0 && res->n_tokens == 0 &&
		    res->error && strcmp(res->error, REF_ALL_BANNED_ERROR) == 0)
			return 1;
		snprintf(why, why_len, "logit_bias bans every token: want the error '%s', got finish_reason '%s'",
			 REF_ALL_BANNED_ERROR, fin);
		return 0;
	}
	if (res->n_tokens > req->max_tokens) {
		snprintf(why, why_len, "%zu tokens, more than max_tokens %u",
			 res->n_tokens, req->max_tokens);
		return 0;
	}
	if (allow_cancelled && strcmp(fin, "cancelled") == 0)
		return walk(m, req, &sp, res->index, res->tokens,
			    (uint32_t)res->n_tokens, NULL,
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
		return check_hidden_stop(m, req, &sp, res->index, res, hidden,
					 near_tie, tally,
					 why, why_len);
	return walk(m, req, &sp, res->index, res->tokens,
		    (uint32_t)res->n_tokens, fin,
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
