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

#endif /* DYNBATCH_SAMPLING_PARAMS_H */
