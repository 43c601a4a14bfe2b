/*
 * sampling_params.h - what a request asks of the sampler (sampler.h has
 * the semantics): its sampling fields and their limits, and the
 * token/logprob pair it reports.  Apart from sampler.h so that the
 * request type (engine/request.h) and the front ends need not see the
 * sampler itself.
 */
#ifndef DYNBATCH_SAMPLING_PARAMS_H
#define DYNBATCH_SAMPLING_PARAMS_H

#include <stdbool.h>
#include <stdint.h>

#define SAMPLER_MAX_LOGPROBS 20		/* OpenAI's top_logprobs limit */
#define SAMPLER_MAX_BIAS 300		/* OpenAI's logit_bias limit */
#define SAMPLER_BIAS_LIMIT 100.0f	/* |bias| <= 100 */
#define SAMPLER_BIAS_BAN (-100.0f)	/* this bias bans the token */
#define SAMPLER_PENALTY_LIMIT 2.0f	/* |presence|, |frequency| <= 2 (OpenAI) */

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
	/* Penalties (sampler.h, step 1b), over the row's token history: */
	float presence_penalty;	/* [-2, 2]; 0 = off; generated tokens */
	float frequency_penalty;	/* [-2, 2]; 0 = off; generated tokens */
	/* finite >= 0; 1 = off, and 0 = unset, off too (so a struct that
	 * names none of the penalties has none; the API refuses 0 as vLLM
	 * does); over the prompt + generated tokens */
	float repetition_penalty;
};

/* Greedy decoding: temperature 0, top_p 1, everything else off. */
#define SAMPLING_PARAMS_GREEDY \
	((struct sampling_params){ .temperature = 0.0f, .top_p = 1.0f })

/* Does p set any penalty (so the sampler needs the row's history)? */
static inline bool sampling_params_penalized(const struct sampling_params *p)
{
	return p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f ||
	       (p->repetition_penalty != 1.0f && p->repetition_penalty != 0.0f);
}

/*
 * A row's token history, for the penalties: tokens[0 .. n_prompt) is the
 * prompt, tokens[n_prompt .. n_tokens) what this choice generated.
 */
struct sampling_history {
	const int32_t *tokens;
	uint32_t n_tokens;
	uint32_t n_prompt;	/* <= n_tokens */
};

struct sampler_logprob {
	int32_t token;
	float logprob;
};

#endif /* DYNBATCH_SAMPLING_PARAMS_H */
