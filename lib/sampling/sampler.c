/*
 * sampler.c - the engine's sampler: one row of logits to one token, by
 * the semantics stated in sampler.h, without sorting the vocabulary.
 *
 * NOTES ON THE DESIGN
 * A row costs a few linear passes: check + max, bias and penalties (a
 * copy only when biased or penalized; the penalties then cost two walks
 * of the row's history, none over the vocabulary), and when sampling one pass computing the weights W with exact
 * sums per block of 1024 tokens, which also gathers (in id order) the
 * tokens the cut-offs can only keep (lib/sampling/sampler_select.c says which
 * and finds the kept set).  The draw walks the gathered tokens when they
 * hold the kept set, else skips whole blocks by their sums and walks one.
 * The passes over the vocabulary are one table per instruction set
 * (sampler_internal.h), chosen once by sampler_create() and called
 * through s->k: AVX2 (sampler_avx2.c: 8 lanes, intrinsics under
 * target("avx2") without FMA) where the CPU has it, else GCC vector
 * extensions (sampler_portable.c: 4 lanes, the x86-64 baseline) and
 * scalar code.  Both compute sampler_weight()'s float
 * operations lane by lane, so every path gives the same bits; the lanes
 * clamp x instead of branching and apply 2^n to the exponent bits (see
 * sampler_weight_v4()), and the AVX2 pass skips 16 tokens at once when
 * all are under SAMPLER_X_MIN.  tests/unit/test_sampler.c holds each AVX2
 * kernel to its portable twin on random rows.  On the machines measured
 * the weights' pass is bound by the vector units, not by memory: the
 * polynomial is most of a row's cost (bench/bench_sampler.c).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampling/philox.h"
#include "sampling/sampler.h"
#include "sampling/sampler_internal.h"

/* ------------------------------------------------------------------ */
/* Parameters                                                          */
/* ------------------------------------------------------------------ */

int sampling_params_validate(const struct sampling_params *p, uint32_t vocab,
			     char *err, size_t err_len)
{
#define BAD(...) do { snprintf(err, err_len, __VA_ARGS__); return -EINVAL; } while (0)
	if (!(p->temperature >= 0.0f) || isinf(p->temperature))
		BAD("temperature %g: must be a finite number >= 0", p->temperature);
	if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
		BAD("top_p %g: must be in (0, 1]", p->top_p);
	if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
		BAD("min_p %g: must be in [0, 1]", p->min_p);
	if (p->top_logprobs > SAMPLER_MAX_LOGPROBS)
		BAD("top_logprobs %u: at most %d", p->top_logprobs,
		    SAMPLER_MAX_LOGPROBS);
	if (p->top_logprobs && !p->logprobs)
		BAD("top_logprobs %u needs logprobs", p->top_logprobs);
	if (p->n_bias > SAMPLER_MAX_BIAS)
		BAD("logit_bias has %u entries: at most %d", p->n_bias,
		    SAMPLER_MAX_BIAS);
	if (p->n_bias && !p->bias)
		BAD("logit_bias: %u entries but no array", p->n_bias);
	for (uint32_t i = 0; i < p->n_bias; i++) {
		const struct sampling_bias *b = &p->bias[i];

		if (b->token < 0 || (uint32_t)b->token >= vocab)
			BAD("logit_bias token %d: outside the vocabulary [0, %u)",
			    b->token, vocab);
		if (!(b->bias >= -SAMPLER_BIAS_LIMIT && b->bias <= SAMPLER_BIAS_LIMIT))
			BAD("logit_bias for token %d is %g: must be in [-100, 100]",
			    b->token, b->bias);
		/* At most 300 entries: the quadratic check costs nothing. */
		for (uint32_t j = 0; j < i; j++)
			if (p->bias[j].token == b->token)
				BAD("logit_bias token %d appears twice", b->token);
	}
	if (!(fabsf(p->presence_penalty) <= SAMPLER_PENALTY_LIMIT))
		BAD("presence_penalty %g: must be in [-2, 2]", p->presence_penalty);
	if (!(fabsf(p->frequency_penalty) <= SAMPLER_PENALTY_LIMIT))
		BAD("frequency_penalty %g: must be in [-2, 2]", p->frequency_penalty);
	if (!(p->repetition_penalty >= 0.0f) || isinf(p->repetition_penalty))
		BAD("repetition_penalty %g: must be a finite number > 0",
		    p->repetition_penalty);
	return 0;
#undef BAD
}

const char *sampler_strerror(int err)
{
	switch (err) {
	case 0:
		return "no error";
	case -EDOM:
		return "the model produced a NaN or +inf logit";
	case -ENOENT:
		return "every token is banned (logit_bias -100 or -inf logits)";
	case -EINVAL:
		return "invalid sampling parameters or token history";
	default:
		return "sampling failed";
	}
}

/* ------------------------------------------------------------------ */
/* Lifetime                                                            */
/* ------------------------------------------------------------------ */

struct sampler *sampler_create(uint32_t vocab)
{
	struct sampler *s;

	if (!vocab)
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->vocab = vocab;
	/* the instruction set, once: every pass then calls through s->k */
	sampler_set_isa(s, sampler_isa_supported(SAMPLER_ISA_AVX2) ?
			   SAMPLER_ISA_AVX2 : SAMPLER_ISA_PORTABLE);
	s->n_blocks = (vocab + SAMPLER_BLOCK - 1) / SAMPLER_BLOCK;
	s->y_copy = malloc(sizeof(*s->y_copy) * vocab);
	s->block_sum = malloc(sizeof(*s->block_sum) * s->n_blocks);
	s->w = malloc(sizeof(*s->w) * vocab);
	s->by_id = malloc(sizeof(*s->by_id) * vocab);
	s->scratch = malloc(sizeof(*s->scratch) * vocab);
	/* calloc: untouched pages until a request sets a penalty */
	s->pen_count = calloc(vocab, sizeof(*s->pen_count));
	if (!s->y_copy || !s->block_sum || !s->w || !s->by_id || !s->scratch ||
	    !s->pen_count) {
		sampler_destroy(s);
		return NULL;
	}
	return s;
}

void sampler_destroy(struct sampler *s)
{
	if (!s)
		return;
	free(s->y_copy);
	free(s->block_sum);
	free(s->w);
	free(s->by_id);
	free(s->scratch);
	free(s->pen_count);
	free(s);
}

/* The table of isa, or NULL where this CPU lacks it. */
static const struct sampler_kernels *sampler_kernels_of(enum sampler_isa isa)
{
	if (isa == SAMPLER_ISA_PORTABLE)
		return &sampler_kernels_portable;
#if defined(__x86_64__) || defined(__i386__)
	if (isa == SAMPLER_ISA_AVX2 && sampler_have_avx2())
		return &sampler_kernels_avx2;
#endif
	return NULL;
}

bool sampler_isa_supported(enum sampler_isa isa)
{
	return sampler_kernels_of(isa) != NULL;
}

int sampler_set_isa(struct sampler *s, enum sampler_isa isa)
{
	const struct sampler_kernels *k = sampler_kernels_of(isa);

	if (!k)
		return -ENOTSUP;
	s->k = k;
	return 0;
}

enum sampler_isa sampler_get_isa(const struct sampler *s)
{
	return s->k->isa;
}

/* ------------------------------------------------------------------ */
/* Bias, max, weights                                                  */
/* ------------------------------------------------------------------ */

float sampler_row_max(const struct sampler *s, const float *y, bool *bad)
{
	return s->k->max(y, s->vocab, bad);
}

/* pen_count's flag: the token is in the history (its low bits count the
 * generated ones, under 2^24: SHM_MAX_CONTEXT). */
#define SAMPLER_SEEN 0x80000000u

/* One token's penalties (sampler.h, step 1b): g generated, seen in the
 * history at all. */
static float sampler_penalize(float y, const struct sampling_params *p,
			      uint32_t g, bool seen)
{
	float r = p->repetition_penalty, v = y;

	if (isinf(y))
		return y;	/* a banned token stays banned */
	if (seen && r != 1.0f && r != 0.0f)
		v = v > 0.0f ? v / r : v * r;
	if (g)
		v = (v - p->frequency_penalty * (float)g) - p->presence_penalty;
	if (isinf(v))
		v = v > 0.0f ? 3.40282347e38f : -3.40282347e38f;
	return v;
}

/*
 * Apply the penalties to s->y_copy from the history h: count the
 * generated tokens (and flag the prompt's, for repetition) in
 * s->pen_count, then walk the history again, penalizing each token the
 * first time it comes and zeroing its counter, which leaves pen_count
 * zeroed.  O(h->n_tokens); -EINVAL (pen_count zeroed) for a token out of
 * range or a prompt longer than the history.
 */
static int sampler_penalties(struct sampler *s, const struct sampling_params *p,
			     const struct sampling_history *h)
{
	bool rep = p->repetition_penalty != 1.0f && p->repetition_penalty != 0.0f;
	/* without repetition only the generated tokens matter */
	uint32_t from, n = h ? h->n_tokens : 0;

	if (!n)
		return 0;
	if (h->n_prompt > n || !h->tokens)
		return -EINVAL;
	from = rep ? 0 : h->n_prompt;
	for (uint32_t i = from; i < n; i++)
		if (h->tokens[i] < 0 || (uint32_t)h->tokens[i] >= s->vocab)
			return -EINVAL;
	/* Each read checked again: a worker's history is shared memory, and
	 * a token that changed under us must not index past the counters. */
	for (uint32_t i = h->n_prompt; i < n; i++)
		if ((uint32_t)h->tokens[i] < s->vocab)
			s->pen_count[h->tokens[i]]++;
	for (uint32_t i = from; i < h->n_prompt; i++)
		if ((uint32_t)h->tokens[i] < s->vocab)
			s->pen_count[h->tokens[i]] |= SAMPLER_SEEN;
	/* every history token's counter is nonzero until its first visit */
	for (uint32_t i = from; i < n; i++) {
		uint32_t t = (uint32_t)h->tokens[i], c;

		if (t >= s->vocab || !(c = s->pen_count[t]))
			continue;
		s->pen_count[t] = 0;
		s->y_copy[t] = sampler_penalize(s->y_copy[t], p, c & ~SAMPLER_SEEN,
						true);
	}
	return 0;
}

/*
 * Point s->y at the biased, penalized logits (the row itself when there
 * is neither) and set *max_y = max y; -EDOM on a NaN or +inf logit,
 * -EINVAL on a bias or history token out of range, -ENOENT when all are
 * banned.  h is read only when p sets a penalty.
 */
static int sampler_bias(struct sampler *s, const float *logits,
			const struct sampling_params *p,
			const struct sampling_history *h, float *max_y)
{
	bool bad, pen = sampling_params_penalized(p);
	float m = sampler_row_max(s, logits, &bad);
	int ret;

	if (bad)
		return -EDOM;
	s->y = logits;
	if (p->n_bias || pen) {
		memcpy(s->y_copy, logits, sizeof(*logits) * s->vocab);
		/* bias first, then the penalties: vLLM's order */
		for (uint32_t i = 0; i < p->n_bias; i++) {
			const struct sampling_bias *b = &p->bias[i];
			float *y = &s->y_copy[b->token];

			if (b->token < 0 || (uint32_t)b->token >= s->vocab)
				return -EINVAL;
			/* |bias| <= 100 cannot overflow a finite float. */
			*y = b->bias == SAMPLER_BIAS_BAN ? -INFINITY : *y + b->bias;
		}
		if (pen && (ret = sampler_penalties(s, p, h)))
			return ret;
		s->y = s->y_copy;
		m = sampler_row_max(s, s->y, &bad);
	}
	if (m == -INFINITY)
		return -ENOENT;
	*max_y = m;
	return 0;
}

uint32_t sampler_argmax(const struct sampler *s, float max_y)
{
	return s->k->find(s->y, s->vocab, 0, max_y);
}

/*
 * The weights' pass (s->k->weights) also gathers into s->by_id, in id
 * order (s->n_by_id of them), what sampler_gather_plan() set: with a
 * fixed bar under SAMPLER_NO_GATHER the tokens of W > bar, or
 * SAMPLER_NOT_GATHERED when they are over SAMPLER_PASS_GATHER_MAX (the
 * gathering stops there: a flat row); for top_k (s->gather_k) every
 * token that can be among the k largest, and some more
 * (sampler_top_k_gathered() cuts them).
 */
uint64_t sampler_weights(struct sampler *s, float max_y, float scale)
{
	bool gather = s->gather_bar < SAMPLER_NO_GATHER;
	uint64_t total;

	s->n_by_id = 0;
	total = s->k->weights(s, max_y, scale);
	if (!gather || s->n_by_id > s->gather_limit)
		s->n_by_id = SAMPLER_NOT_GATHERED;
	s->sums_t = 0;
	s->sums_total = total;
	return total;
}

uint64_t sampler_block_sums(struct sampler *s, uint32_t t)
{
	uint64_t total = s->k->block_sums(s, t);

	s->sums_t = t;
	s->sums_total = total;
	return total;
}

/* ------------------------------------------------------------------ */
/* The draw                                                            */
/* ------------------------------------------------------------------ */

/* Inverse CDF over the gathered tokens of W >= t (in id order), which
 * hold the whole kept set. */
static uint32_t sampler_draw_gathered(const struct sampler *s, uint32_t t,
				      uint64_t r53)
{
	uint64_t kept_sum = 0, target, acc = 0;
	uint32_t last = 0;

	for (uint32_t j = 0; j < s->n_by_id; j++)
		kept_sum += s->by_id[j].w >= t ? s->by_id[j].w : 0;
	target = sampler_draw_target(r53, kept_sum);
	for (uint32_t j = 0; j < s->n_by_id; j++) {
		if (s->by_id[j].w < t)
			continue;
		acc += s->by_id[j].w;
		last = s->by_id[j].id;
		if (acc > target)
			return last;
	}
	return last;	/* unreachable: target < kept_sum */
}

/*
 * Inverse CDF over every token with W > 0 and W >= t in id order, whose
 * block sums are in s->block_sum and total kept_sum: skip whole blocks
 * by their sums, then walk one.  The same token as one walk over the
 * vocabulary, since every sum is exact.
 */
static uint32_t sampler_draw_blocks(const struct sampler *s, uint32_t t,
				    uint64_t kept_sum, uint64_t r53)
{
	uint64_t target = sampler_draw_target(r53, kept_sum), acc = 0;
	uint32_t b = 0, i, end;

	while (b + 1 < s->n_blocks && acc + s->block_sum[b] <= target)
		acc += s->block_sum[b++];
	end = (b + 1) * SAMPLER_BLOCK;
	end = end < s->vocab ? end : s->vocab;
	/* W = 0 adds nothing and so is never where acc passes target. */
	for (i = b * SAMPLER_BLOCK; i < end; i++) {
		if (s->w[i] < t)
			continue;
		acc += s->w[i];
		if (acc > target)
			return i;
	}
	return end - 1;	/* unreachable: target < kept_sum */
}

/*
 * The drawn token.  The weights are in s->w, their block sums in
 * s->block_sum, and the tokens sampler_gather_plan() names gathered.
 */
static uint32_t sampler_draw(struct sampler *s, const struct sampling_params *p,
			     uint64_t z_sum, uint64_t r53)
{
	uint32_t t = sampler_min_p_threshold(p->min_p);

	if ((p->top_k && p->top_k < s->vocab) || p->top_p < 1.0f) {
		uint32_t t_select = sampler_select(s, p, z_sum);

		t = t_select > t ? t_select : t;
	} else if (t <= 1) {
		/* Nothing cut: the weights' pass summed the blocks. */
		return sampler_draw_blocks(s, 0, z_sum, r53);
	}
	/* min_p alone: the pass gathered W >= t when they were few. */
	if (s->n_by_id != SAMPLER_NOT_GATHERED)
		return sampler_draw_gathered(s, t, r53);
	/* top_p's bracket left the block sums of W >= t. */
	if (s->sums_t != t)
		sampler_block_sums(s, t);
	return sampler_draw_blocks(s, t, s->sums_total, r53);
}

/* ------------------------------------------------------------------ */
/* Logprobs                                                            */
/* ------------------------------------------------------------------ */

/* Insert token id of weight w into top[0 .. *n), by decreasing weight. */
static void top_insert(struct sampler_cand *top, uint32_t *n, uint32_t cap,
		       uint32_t id, uint32_t w)
{
	uint32_t j;

	/* Ids come in increasing order: an equal weight never enters. */
	if (*n == cap && w <= top[cap - 1].w)
		return;
	j = *n < cap ? (*n)++ : cap - 1;
	while (j > 0 && top[j - 1].w < w) {
		top[j] = top[j - 1];
		j--;
	}
	top[j] = (struct sampler_cand){ w, id };
}

static float sampler_logprob(uint32_t w, double log_z)
{
	return (float)(log((double)w) - log_z);
}

/* The logprobs from the weights in s->w, whose sum is z_sum. */
static void sampler_logprobs(const struct sampler *s,
			     const struct sampling_params *p, uint64_t z_sum,
			     uint32_t chosen, struct sampler_result *out)
{
	struct sampler_cand top[SAMPLER_MAX_LOGPROBS];
	uint32_t cap = p->top_logprobs, n = 0;
	double log_z = log((double)z_sum);

	out->logprob = sampler_logprob(s->w[chosen], log_z);
	if (!cap)
		return;
	if (s->n_by_id != SAMPLER_NOT_GATHERED && s->n_by_id >= cap) {
		/* Gathered tokens are a prefix of the order by W (all of
		 * W >= some bar): the top cap are among them. */
		for (uint32_t j = 0; j < s->n_by_id; j++)
			top_insert(top, &n, cap, s->by_id[j].id, s->by_id[j].w);
	} else {
		/* One compare per token, rarely true: half the weights may be
		 * 0 in random order ("W != 0" would be a coin-toss branch). */
		for (uint32_t i = s->k->next_above(s, 0, 0), bar = 0;
		     i < s->vocab; i = s->k->next_above(s, i + 1, bar)) {
			top_insert(top, &n, cap, i, s->w[i]);
			bar = n == cap ? top[cap - 1].w : 0;
		}
	}
	for (uint32_t j = 0; j < n; j++)
		out->top[j] = (struct sampler_logprob){
			(int32_t)top[j].id, sampler_logprob(top[j].w, log_z) };
	out->n_top = n;
}

int sampler_sample(struct sampler *s, const float *logits,
		   const struct sampling_params *p, uint32_t k, uint32_t choice,
		   struct sampler_result *out)
{
	return sampler_sample_row(s, logits, p, NULL, k, choice, out);
}

int sampler_sample_row(struct sampler *s, const float *logits,
		       const struct sampling_params *p,
		       const struct sampling_history *h, uint32_t k,
		       uint32_t choice, struct sampler_result *out)
{
	uint64_t z_sum = 0;
	uint32_t chosen;
	float max_y;
	int ret;

	memset(out, 0, sizeof(*out));
	ret = sampler_bias(s, logits, p, h, &max_y);
	if (ret)
		return ret;
	if (p->temperature > 0.0f) {
		sampler_gather_plan(s, p);
		z_sum = sampler_weights(s, max_y,
					sampler_weight_scale(p->temperature));
		chosen = sampler_draw(s, p, z_sum,
				      philox_bits53(p->seed, k, choice));
	} else {
		chosen = sampler_argmax(s, max_y);
		/* Logprobs at temperature 1. */
		if (p->logprobs) {
			sampler_gather_none(s);
			z_sum = sampler_weights(s, max_y, sampler_weight_scale(1.0f));
		}
	}
	out->token = (int32_t)chosen;
	if (p->logprobs)
		sampler_logprobs(s, p, z_sum, chosen, out);
	return 0;
}
