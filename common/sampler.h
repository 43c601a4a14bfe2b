/*
 * sampler.h - picks a request's next token from one row of logits:
 * temperature, top-k, top-p, min-p, logit bias, logprobs, seeded draws.
 *
 * SEMANTICS (tools/ref_sampler.c implements the same by the definition;
 * tests/test_sampler.c holds the two to agreeing token for token).
 * For a row of vocab float logits l[i]:
 *
 *  1. Bias.  y[i] = l[i] + bias[i] in float (no bias: y[i] = l[i]).  A
 *     bias of exactly -100 (SAMPLER_BIAS_BAN) bans the token: y[i] = -inf.
 *     A logit of -inf is a banned token too.  A NaN or +inf logit fails
 *     the row with -EDOM (the model is broken: the caller fails the step).
 *     No token left (every y[i] = -inf) fails the row with -ENOENT.
 *  2. temperature == 0: the argmax of y, the lowest id on ties, whatever
 *     the other fields.  Nothing is drawn.
 *  3. Otherwise, with M = max y over non-banned tokens and
 *     invT = 1.0 / (double)temperature:
 *         z[i] = (float)(((double)y[i] - (double)M) * invT)   (z <= 0)
 *         w[i] = expf(z[i])                   (w in [0, 1], w[argmax] = 1)
 *     p[i] = w[i] / Z with Z the double sum of w over all tokens in id
 *     order.  A banned token has w = 0; a token whose w underflows to 0
 *     has probability 0 as well.  Only tokens with w > 0 can be kept.
 *     Every cut-off below keeps the tokens with w >= some threshold, so
 *     a tie with the threshold is always kept and the kept set never
 *     depends on the order of a sort.  In this order:
 *     - top_k (0 = off; >= vocab = off): t_k = the k-th largest w
 *       counting multiplicity; keep w >= t_k (so ties at the k-th value
 *       are all kept: the set may hold more than k tokens).  K1 = kept.
 *     - top_p (1 = off): on K1 renormalised.  Z1 = double sum of w over K1
 *       in id order; list K1 by decreasing w, cum_j = double sum of the
 *       first j values in that order; j* = the first j with
 *       cum_j >= top_p * Z1; t_p = the j*-th value; keep w >= t_p.  When
 *       rounding lets no prefix reach it, all of K1 is kept.
 *     - min_p (0 = off): keep (double)w >= (double)min_p, which is
 *       p >= min_p * p_max because w of the most likely token is 1.
 *     Then Zk = double sum of the kept w in id order, u = philox_uniform(
 *     seed, k, choice) (philox.h), target = u * Zk, and the token is the
 *     first kept token in id order whose running double sum of w exceeds
 *     target (the last kept token if rounding lets none).
 *  4. Logprobs (when asked): of the distribution AFTER bias and
 *     temperature and BEFORE the cut-offs: logprob[i] = z[i] - log(Z)
 *     (temperature 0 uses temperature 1 for this).  So the chosen token's
 *     logprob says how likely the model, as biased and tempered, found it,
 *     not how the truncation reshaped it; and it is finite even for a
 *     token that was the only one kept.  The top N alternatives are the N
 *     tokens of highest z, ties by lower id, banned tokens never listed
 *     (fewer than N when fewer are not banned).
 *
 * NOTES ON THE DESIGN
 * All cut-offs are thresholds on w, so the kept set is {w > 0, w >= t}
 * with t the largest of the three thresholds, and the draw is one walk in
 * id order.  The engine finds t_k and t_p without sorting the vocabulary:
 * one pass computes w, Z and a histogram of w's float bits (count and
 * mass per 1/8 octave); the histogram names the lowest bucket the
 * threshold can lie in, and only the tokens at or above it are gathered
 * and sorted.  Sums that decide anything are formed in the order the
 * definition gives (id order, or decreasing w, where ties add equal
 * values so their order cannot matter), so the engine and the naive
 * definition agree to the bit, not just to a tolerance.
 *
 * A struct sampler owns scratch sized for one vocabulary (allocated once;
 * no stack arrays by vocab, so 128K vocabularies work) and is not
 * thread-safe: one per thread.
 */
#ifndef DYNBATCH_SAMPLER_H
#define DYNBATCH_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SAMPLER_MAX_LOGPROBS 20		/* OpenAI's top_logprobs limit */
#define SAMPLER_MAX_BIAS 300		/* OpenAI's logit_bias limit */
#define SAMPLER_BIAS_LIMIT 100.0f	/* |bias| <= 100 */
#define SAMPLER_BIAS_BAN (-100.0f)	/* this bias bans the token */

/* One logit_bias entry. */
struct sampling_bias {
	int32_t token;
	float bias;		/* in [-100, 100]; -100 bans */
};

/*
 * A request's sampling fields.  SAMPLING_PARAMS_GREEDY is what a request
 * that sets none of them gets (a zeroed struct has top_p 0: invalid).
 */
struct sampling_params {
	float temperature;	/* >= 0; 0 = argmax */
	float top_p;		/* (0, 1]; 1 = off */
	uint32_t top_k;		/* 0 = off */
	float min_p;		/* [0, 1]; 0 = off */
	uint64_t seed;		/* the Philox key */
	bool logprobs;		/* report the chosen token's logprob */
	uint32_t top_logprobs;	/* and this many alternatives, <= 20 */
	const struct sampling_bias *bias;	/* n_bias entries, distinct tokens */
	uint32_t n_bias;	/* <= SAMPLER_MAX_BIAS */
};

/* Greedy decoding: temperature 0, top_p 1, everything else off. */
#define SAMPLING_PARAMS_GREEDY \
	((struct sampling_params){ .temperature = 0.0f, .top_p = 1.0f })

struct sampler_logprob {
	int32_t token;
	float logprob;
};

struct sampler_result {
	int32_t token;
	float logprob;		/* when params.logprobs, else 0 */
	uint32_t n_top;		/* alternatives filled, <= top_logprobs */
	struct sampler_logprob top[SAMPLER_MAX_LOGPROBS];
};

struct sampler;

/*
 * Check p for a vocabulary of vocab tokens.  Returns 0, or -EINVAL after
 * writing a one-line reason naming the field and the value into err:
 * temperature < 0 or not finite, top_p outside (0, 1], min_p outside
 * [0, 1], top_logprobs > 20 or set without logprobs, more than 300 bias
 * entries, a bias token outside [0, vocab) or repeated, a bias value not
 * finite or outside [-100, 100].  top_k is unsigned; 0 is off.
 */
int sampling_params_validate(const struct sampling_params *p, uint32_t vocab,
			     char *err, size_t err_len);

/* Scratch for rows of vocab logits (vocab >= 1); NULL on ENOMEM. */
struct sampler *sampler_create(uint32_t vocab);

/* Accepts NULL. */
void sampler_destroy(struct sampler *s);

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

/* What a sampler_sample() error means, for a request's error result. */
const char *sampler_strerror(int err);

#endif /* DYNBATCH_SAMPLER_H */
