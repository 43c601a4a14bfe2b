/*
 * ref_sampler.c - the naive sampler of the reference decoder: the
 * semantics of lib/sampling/sampler.h by their definition, with a full stable
 * sort of the vocabulary and no cleverness.  It shares with the engine
 * only the definition's arithmetic (sampler_weight() and the target
 * helpers of sampler.h, Philox): the kept set is built here its own way.
 * See ref_sampler.h.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sampling/philox.h"
#include "tools/refdecode/ref_sampler.h"

/* The per-token arrays of one call. */
/* Stable merge sort of ids by decreasing w[id]: equal weights keep id order. */
static void ref_sort_desc(uint32_t *ids, uint32_t *tmp, uint32_t n,
			  const uint32_t *w)
{
	uint32_t mid = n / 2, i = 0, j = mid, o = 0;

	if (n < 2)
		return;
	ref_sort_desc(ids, tmp, mid, w);
	ref_sort_desc(ids + mid, tmp, n - mid, w);
	while (i < mid && j < n)
		tmp[o++] = w[ids[j]] > w[ids[i]] ? ids[j++] : ids[i++];
	while (i < mid)
		tmp[o++] = ids[i++];
	while (j < n)
		tmp[o++] = ids[j++];
	memcpy(ids, tmp, sizeof(*ids) * n);
}

/* Weights at temperature t and the order by them; returns Z. */
uint64_t ref_weigh(struct ref_row *r, float max_y, float temperature)
{
	float scale = sampler_weight_scale(temperature);
	uint64_t z_sum = 0;

	for (uint32_t i = 0; i < r->vocab; i++) {
		r->w[i] = sampler_weight(r->y[i], max_y, scale);
		z_sum += r->w[i];
		r->order[i] = i;
	}
	ref_sort_desc(r->order, r->tmp, r->vocab, r->w);
	return z_sum;
}

static uint64_t ref_kept_sum(const struct ref_row *r)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; i < r->vocab; i++)
		if (r->keep[i])
			sum += r->w[i];
	return sum;
}

static void ref_drop_below(struct ref_row *r, uint32_t t)
{
	for (uint32_t i = 0; i < r->vocab; i++)
		if (r->w[i] < t)
			r->keep[i] = false;
}

/* Apply top_k, top_p and min_p to r->keep, in that order. */
void ref_cut(struct ref_row *r, const struct sampling_params *p)
{
	for (uint32_t i = 0; i < r->vocab; i++)
		r->keep[i] = r->w[i] > 0;
	if (p->top_k > 0 && p->top_k < r->vocab)
		ref_drop_below(r, r->w[r->order[p->top_k - 1]]);
	{
		uint64_t target = sampler_top_p_target(p->top_p, ref_kept_sum(r));
		uint64_t cum = 0;

		for (uint32_t j = 0; j < r->vocab; j++) {
			uint32_t id = r->order[j];

			if (!r->keep[id])
				continue;
			cum += r->w[id];
			if (cum >= target) {
				ref_drop_below(r, r->w[id]);
				break;
			}
		}
	}
	ref_drop_below(r, sampler_min_p_threshold(p->min_p));
}

uint32_t ref_draw(const struct ref_row *r, uint64_t r53)
{
	uint64_t target = sampler_draw_target(r53, ref_kept_sum(r)), acc = 0;

	for (uint32_t i = 0; i < r->vocab; i++) {
		if (!r->keep[i])
			continue;
		acc += r->w[i];
		if (acc > target)
			return i;
	}
	abort();	/* target < the kept sum: cannot happen */
}

/* Logprobs from the weights in r (their sum z_sum) and their order. */
static void ref_logprobs(const struct ref_row *r, const struct sampling_params *p,
			 uint64_t z_sum, uint32_t chosen,
			 struct sampler_result *out)
{
	double log_z = log((double)z_sum);

	out->logprob = (float)(log((double)r->w[chosen]) - log_z);
	for (uint32_t j = 0; j < r->vocab && out->n_top < p->top_logprobs; j++) {
		uint32_t id = r->order[j];

		if (r->w[id] == 0)
			break;
		out->top[out->n_top++] = (struct sampler_logprob){
			(int32_t)id, (float)(log((double)r->w[id]) - log_z) };
	}
}

/*
 * The penalties of sampler.h's step 1b on the biased r->y, read
 * literally: for every token, a scan of the whole history for how often
 * it was generated and whether it is there at all (O(vocab x history)).
 */
static int ref_penalize(struct ref_row *r, const struct sampling_params *p,
			const struct sampling_history *h)
{
	float rep = p->repetition_penalty;

	if (!h || !h->n_tokens)
		return 0;
	if (h->n_prompt > h->n_tokens || !h->tokens)
		return -EINVAL;
	for (uint32_t i = 0; i < h->n_tokens; i++) {
		bool counted = i >= h->n_prompt || (rep != 1.0f && rep != 0.0f);

		if (counted && (h->tokens[i] < 0 || (uint32_t)h->tokens[i] >= r->vocab))
			return -EINVAL;
	}
	for (uint32_t v = 0; v < r->vocab; v++) {
		uint32_t generated = 0;
		bool seen = false;
		float x = r->y[v];

		for (uint32_t i = 0; i < h->n_tokens; i++) {
			if (h->tokens[i] != (int32_t)v)
				continue;
			seen = true;
			if (i >= h->n_prompt)
				generated++;
		}
		if (x == -INFINITY)
			continue;	/* banned stays banned */
		if (seen && rep != 1.0f && rep != 0.0f)
			x = x > 0.0f ? x / rep : x * rep;
		if (generated > 0) {
			x = x - p->frequency_penalty * (float)generated;
			x = x - p->presence_penalty;
		}
		if (x == INFINITY)
			x = FLT_MAX;
		else if (x == -INFINITY)
			x = -FLT_MAX;
		r->y[v] = x;
	}
	return 0;
}

static int ref_sample_row(struct ref_row *r, const float *logits,
			  const struct sampling_params *p,
			  const struct sampling_history *h, uint32_t k,
			  uint32_t choice, struct sampler_result *out)
{
	int ret;
	uint32_t best = 0, chosen;
	uint64_t z_sum = 0;
	bool any = false;

	for (uint32_t i = 0; i < r->vocab; i++) {
		if (isnan(logits[i]) || logits[i] == INFINITY)
			return -EDOM;
		r->y[i] = logits[i];
	}
	for (uint32_t b = 0; b < p->n_bias; b++) {
		int32_t t = p->bias[b].token;

		if (t < 0 || (uint32_t)t >= r->vocab)
			return -EINVAL;
		if (p->bias[b].bias == SAMPLER_BIAS_BAN)
			r->y[t] = -INFINITY;
		else
			r->y[t] = r->y[t] + p->bias[b].bias;
	}
	/* after the bias, as the engine (and vLLM) orders them */
	if ((ret = ref_penalize(r, p, h)))
		return ret;
	for (uint32_t i = 0; i < r->vocab; i++) {
		if (r->y[i] == -INFINITY)
			continue;
		if (!any || r->y[i] > r->y[best])
			best = i;
		any = true;
	}
	if (!any)
		return -ENOENT;
	chosen = best;
	if (p->temperature > 0.0f) {
		z_sum = ref_weigh(r, r->y[best], p->temperature);
		ref_cut(r, p);
		chosen = ref_draw(r, philox_bits53(p->seed, k, choice));
	} else if (p->logprobs) {
		z_sum = ref_weigh(r, r->y[best], 1.0f);
	}
	out->token = (int32_t)chosen;
	if (p->logprobs)
		ref_logprobs(r, p, z_sum, chosen, out);
	return 0;
}

int ref_sample(const float *logits, uint32_t vocab,
	       const struct sampling_params *p, uint32_t k, uint32_t choice,
	       struct sampler_result *out)
{
	return ref_sample_hist(logits, vocab, p, NULL, k, choice, out);
}

int ref_sample_hist(const float *logits, uint32_t vocab,
		    const struct sampling_params *p,
		    const struct sampling_history *h, uint32_t k,
		    uint32_t choice, struct sampler_result *out)
{
	struct ref_row r = { .vocab = vocab };
	int ret = -ENOMEM;

	memset(out, 0, sizeof(*out));
	r.y = malloc(sizeof(*r.y) * vocab);
	r.w = malloc(sizeof(*r.w) * vocab);
	r.keep = malloc(sizeof(*r.keep) * vocab);
	r.order = malloc(sizeof(*r.order) * vocab);
	r.tmp = malloc(sizeof(*r.tmp) * vocab);
	if (vocab && r.y && r.w && r.keep && r.order && r.tmp)
		ret = ref_sample_row(&r, logits, p, h, k, choice, out);
	free(r.y);
	free(r.w);
	free(r.keep);
	free(r.order);
	free(r.tmp);
	return ret;
}
