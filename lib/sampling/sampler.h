/*
 * sampler.h - picks a request's next token from one row of logits:
 * temperature, top-k, top-p, min-p, logit bias, presence, frequency and
 * repetition penalties, logprobs, seeded draws.
 *
 * SEMANTICS (tools/refdecode/ref_sampler.c implements the same by the definition;
 * tests/unit/test_sampler.c holds the two to agreeing token for token).
 * For a row of vocab float logits l[i]:
 *
 *  1. Bias.  y[i] = l[i] + bias[i] in float (no bias: y[i] = l[i]).  A
 *     bias of exactly -100 (SAMPLER_BIAS_BAN) bans the token: y[i] = -inf.
 *     A logit of -inf is a banned token too.  A NaN or +inf logit fails
 *     the row with -EDOM (the model is broken: the caller fails the step).
 *     No token left (every y[i] = -inf) fails the row with -ENOENT.
 *  1b. Penalties (only with a history, sampler_sample_row()), on y after
 *     the bias, as vLLM orders them (vllm apply_penalties(): repetition,
 *     then frequency, then presence; its logit_bias processor runs
 *     before them).  For each token t with g = the number of times t is
 *     among the GENERATED tokens of the history and seen = t is anywhere
 *     in it (prompt or generated), in float:
 *       repetition r (!= 1, != 0), when seen: y = y > 0 ? y / r : y * r;
 *       then when g > 0: y = (y - frequency * (float)g) - presence.
 *     A finite y the penalties push past FLT_MAX is clamped to +-FLT_MAX
 *     (a banned -inf stays banned).  A history token outside [0, vocab)
 *     fails the row with -EINVAL.
 *  2. temperature == 0: the argmax of y, the lowest id on ties, whatever
 *     the other fields.  Nothing is drawn.
 *  3. Otherwise every token gets an integer weight W (sampler_weight()
 *     below), with M = max y over non-banned tokens and the scale
 *     c = sampler_weight_scale(temperature) = (1.0f / temperature) *
 *     1.44269504f (log2 e; each product a float, FLT_MAX where it
 *     overflows):
 *         x = (y - M) * c  (float, <= 0: the log2 of e^((y - M) / T))
 *         W = trunc(p(f) * 2^(30 + n))  (0 when x < -31 or -inf)
 *     where n = x rounded to the nearest integer (ties to even), f =
 *     x - n in [-1/2, 1/2] (exact), and p is a fixed degree-4 polynomial
 *     for 2^f with p(0) = 1, evaluated in float in the order
 *     sampler_exp2_frac() gives (relative error under 3e-6, far below
 *     what a chi-square test can see), so W[argmax] = 2^30 exactly and
 *     W = 0 below 2^-30 of the most likely token's weight.  p[i] = W[i] /
 *     Z, Z = sum of W (an exact 64-bit integer sum, so its order cannot
 *     matter).  Banned tokens and tokens of weight 0 are never kept.
 *     Every cut-off keeps the tokens with W >= some threshold, so a tie
 *     with the threshold is always kept and the kept set never depends on
 *     the order of a sort.  In this order:
 *     - top_k (0 = off; >= vocab = off): t_k = the k-th largest W
 *       counting multiplicity; keep W >= t_k (ties at the k-th value are
 *       all kept: the set may hold more than k tokens).  K1 = kept.
 *     - top_p: on K1 renormalised.  Z1 = sum of W over K1; target =
 *       sampler_top_p_target(top_p, Z1) = ceil(top_p * Z1) (the product
 *       in double); list K1 by decreasing W, cum_j = the sum of the first
 *       j; j* = the first j with cum_j >= target; keep W >= W of the j*-th.
 *       top_p = 1 gives target = Z1: every token of K1 is kept.
 *     - min_p (0 = off): keep W >= ceil(min_p * 2^30), i.e. p >= min_p *
 *       p_max since the most likely token has W = 2^30.
 *     Then Zk = sum of the kept W, r = the 53-bit Philox draw for
 *     (seed, k, choice) (philox_bits53(), philox.h), target =
 *     floor(r * Zk / 2^53) in [0, Zk), and the token is the first kept
 *     token in id order whose running sum of W exceeds target.  All of
 *     this is integer arithmetic: exact, whatever order sums are formed in.
 *  4. Logprobs (when asked): of the distribution AFTER bias and
 *     temperature and BEFORE the cut-offs: logprob[i] = log(W[i] / Z) in
 *     double, rounded to float (temperature 0 uses temperature 1 here).
 *     So the chosen token's logprob is how likely the biased, tempered
 *     model made it, not how the truncation reshaped it, and it agrees
 *     with the weights the draw used.  The top N alternatives are the N
 *     tokens of highest W, ties by lower id; tokens of weight 0 (banned,
 *     or under 2^-30 of the top token) are never listed, so fewer than N
 *     may come back.
 *
 * NOTES ON THE DESIGN
 * Integer weights make every sum exact, so the engine may add in any
 * order (vector lanes, histogram buckets) and still agree with the naive
 * definition to the bit; a double sum in id order would have been both
 * slower (a chain of dependent adds) and a source of disagreement.  The
 * price: a token under 2^-30 (about 1e-9) of the top token's weight
 * cannot be drawn (all such tokens of a 128K vocabulary hold at most
 * 1.2e-4 of the mass, and far less for any real model's logits), and a
 * weight is truncated to a multiple of 2^-30 of the top one.
 * All cut-offs are thresholds on W, so the kept set is {W > 0, W >= t}
 * with t the largest of the three thresholds, and the draw is one walk in
 * id order.  The engine finds t_k and t_p without sorting the vocabulary:
 * a histogram of W (count and mass per 1/8 octave) names the lowest
 * bucket the threshold can lie in (exactly: the masses are exact), and
 * only the tokens at or above it are gathered and sorted.
 * The weight function is shared by the engine and the naive sampler, like
 * Philox: it is part of the definition, not of the algorithm.  A build
 * that lets the compiler fuse multiply-adds (-march with FMA) must pass
 * -ffp-contract=off for the two to stay bit-identical.
 *
 * A struct sampler owns scratch sized for one vocabulary (allocated once;
 * no stack arrays by vocab, so 128K vocabularies work) and is not
 * thread-safe: one per thread.
 */
#ifndef DYNBATCH_SAMPLER_H
#define DYNBATCH_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "sampling/sampling_params.h"

struct sampler_result {
	int32_t token;
	float logprob;		/* when params.logprobs, else 0 */
	uint32_t n_top;		/* alternatives filled, <= top_logprobs */
	struct sampler_logprob top[SAMPLER_MAX_LOGPROBS];
};

/* The scale of the weights: the most likely token weighs 2^30. */
#define SAMPLER_WEIGHT_ONE (1u << 30)
/* Below this x, p(f) * 2^(30 + n) < 1: the weight is 0 (so is -inf). */
#define SAMPLER_X_MIN (-31.0f)

/* The polynomial p(f) ~ 2^f on [-1/2, 1/2]: p(f) = 1 + c1 f + c2 f^2 +
 * c3 f^3 + c4 f^4, fitted for the least maximum relative error. */
#define SAMPLER_P1 0x1.62e12cp-1f	/* 0.693124175 */
#define SAMPLER_P2 0x1.ec0378p-3f	/* 0.240240991 */
#define SAMPLER_P3 0x1.c9fc4cp-5f	/* 0.0559064373 */
#define SAMPLER_P4 0x1.3a02bap-7f	/* 0.00958284456 */
/* 1.5 * 2^23: x + this, for |x| < 2^22, holds x rounded to an integer
 * (ties to even) in its low mantissa bits; minus this, that integer. */
#define SAMPLER_ROUNDER 12582912.0f

/* The weights' scale c = log2(e) / temperature (temperature > 0). */
static inline float sampler_weight_scale(float temperature)
{
	float c = (1.0f / temperature) * 1.44269504f;

	/* A denormal temperature: FLT_MAX keeps 0 * c at 0. */
	return c > 3.40282347e38f ? 3.40282347e38f : c;
}

/*
 * p(f), in this order: (1 + c1 f) + f^2 ((c2 + c3 f) + c4 f^2): two
 * independent halves, which vector lanes finish sooner than one Horner
 * chain.  The engine's lanes run the same operations.
 */
static inline float sampler_exp2_frac(float f)
{
	float f2 = f * f;
	float lo = 1.0f + SAMPLER_P1 * f;
	float hi = (SAMPLER_P2 + SAMPLER_P3 * f) + SAMPLER_P4 * f2;

	return lo + f2 * hi;
}

/*
 * The weight of a token of biased logit y: trunc(p(f) * 2^(30 + n)) with
 * x = (y - max_y) * scale = n + f (see the SEMANTICS).  The engine
 * evaluates the same operations in vector lanes; any change here changes
 * both.
 */
static inline uint32_t sampler_weight(float y, float max_y, float scale)
{
	float x = (y - max_y) * scale;
	float n, p, pow2;
	uint32_t bits;

	if (!(x >= SAMPLER_X_MIN))
		return 0;
	n = (x + SAMPLER_ROUNDER) - SAMPLER_ROUNDER;
	p = sampler_exp2_frac(x - n);
	/* 2^(30 + n) for n in [-31, 0]: a product by it is exact. */
	bits = (uint32_t)((int32_t)n + 127 + 30) << 23;
	memcpy(&pow2, &bits, sizeof(pow2));
	return (uint32_t)(int32_t)(p * pow2);
}

/* The top_p target: ceil(top_p * z1), the product in double. */
static inline uint64_t sampler_top_p_target(float top_p, uint64_t z1)
{
	return (uint64_t)ceil((double)top_p * (double)z1);
}

/* The min_p threshold on W: ceil(min_p * 2^30), exact. */
static inline uint32_t sampler_min_p_threshold(float min_p)
{
	return (uint32_t)ceil((double)min_p * SAMPLER_WEIGHT_ONE);
}

/* The draw's target in [0, kept_sum): floor(r53 * kept_sum / 2^53). */
static inline uint64_t sampler_draw_target(uint64_t r53, uint64_t kept_sum)
{
	return (uint64_t)(((unsigned __int128)r53 * kept_sum) >> 53);
}

struct sampler;

/*
 * Check p for a vocabulary of vocab tokens.  Returns 0, or -EINVAL after
 * writing a one-line reason naming the field and the value into err:
 * temperature < 0 or not finite, top_p outside (0, 1], min_p outside
 * [0, 1], top_logprobs > 20 or set without logprobs, more than 300 bias
 * entries, a bias token outside [0, vocab) or repeated, a bias value not
 * finite or outside [-100, 100], presence_penalty or frequency_penalty
 * outside [-2, 2], repetition_penalty negative or not finite.  top_k is
 * unsigned; 0 is off.
 */
int sampling_params_validate(const struct sampling_params *p, uint32_t vocab,
			     char *err, size_t err_len);

/* Scratch for rows of vocab logits (vocab >= 1); NULL on ENOMEM. */
struct sampler *sampler_create(uint32_t vocab);

/* Accepts NULL. */
void sampler_destroy(struct sampler *s);

/*
 * The instruction sets the sampler's passes over the vocabulary run on,
 * every one giving the same bits (sampler_avx2.c).  sampler_create()
 * picks the fastest this CPU has, once; the tests and benchmarks set one
 * to hold the paths to each other or to time them.
 */
enum sampler_isa {
	SAMPLER_ISA_PORTABLE,	/* GCC vector extensions, any CPU */
	SAMPLER_ISA_AVX2,	/* x86-64 with AVX2 */
};

/* Does this CPU run isa's passes? */
bool sampler_isa_supported(enum sampler_isa isa);

/* Make s run on isa: 0, or -ENOTSUP where this CPU lacks it. */
int sampler_set_isa(struct sampler *s, enum sampler_isa isa);

/* The instruction set s runs on. */
enum sampler_isa sampler_get_isa(const struct sampler *s);

/*
 * Sample the token for a request's k-th generated token (k = 0, 1, ...)
 * and choice index choice from logits[0 .. vocab) by the SEMANTICS above;
 * p must have passed sampling_params_validate() (a bias token out of
 * range is still caught: -EINVAL).  Fills *out and returns 0; -EDOM for a
 * NaN or +inf logit; -ENOENT when every token is banned.
 */
int sampler_sample(struct sampler *s, const float *logits,
		   const struct sampling_params *p, uint32_t k, uint32_t choice,
		   struct sampler_result *out);

/*
 * sampler_sample() with the row's token history h for the penalties
 * (step 1b; h may be NULL when p sets none, and is read only when it
 * does: no pass over the history, no cost, for the rest).  Counting costs
 * O(h->n_tokens) with scratch of vocab counters allocated once (and left
 * zeroed after each row); -EINVAL for a history token out of range.
 */
int sampler_sample_row(struct sampler *s, const float *logits,
		       const struct sampling_params *p,
		       const struct sampling_history *h, uint32_t k,
		       uint32_t choice, struct sampler_result *out);

/* What a sampler_sample() error means, for a request's error result. */
const char *sampler_strerror(int err);

#endif /* DYNBATCH_SAMPLER_H */
