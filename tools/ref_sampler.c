/*
 * ref_sampler.c - the naive sampler of the reference decoder: the
 * semantics of common/sampler.h by their definition, with a full stable
 * sort of the vocabulary and no cleverness.  See ref_sampler.h.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "philox.h"
#include "ref_sampler.h"

/* The per-token arrays of one call. */
struct ref_row {
	uint32_t vocab;
	float *y;	/* biased logits */
	float *w;	/* expf(z) at the sampling temperature */
	float *z;	/* scaled logits, for the logprobs */
	bool *keep;
	uint32_t *order;	/* ids by decreasing key, ties by id */
	uint32_t *tmp;
};

/* Stable merge sort of ids by decreasing key[id]: equal keys keep id order. */
static void ref_sort_desc(uint32_t *ids, uint32_t *tmp, uint32_t n,
			  const float *key)
{
	uint32_t mid = n / 2, i = 0, j = mid, o = 0;

	if (n < 2)
		return;
	ref_sort_desc(ids, tmp, mid, key);
	ref_sort_desc(ids + mid, tmp, n - mid, key);
	while (i < mid && j < n)
		tmp[o++] = key[ids[j]] > key[ids[i]] ? ids[j++] : ids[i++];
	while (i < mid)
		tmp[o++] = ids[i++];
	while (j < n)
		tmp[o++] = ids[j++];
	memcpy(ids, tmp, sizeof(*ids) * n);
}

static void ref_order_by(struct ref_row *r, const float *key)
{
	for (uint32_t i = 0; i < r->vocab; i++)
		r->order[i] = i;
	ref_sort_desc(r->order, r->tmp, r->vocab, key);
}

/* z and w at temperature t, from the max non-banned y. */
static void ref_scale(struct ref_row *r, float max_y, float temperature)
{
	double inv_t = 1.0 / (double)temperature;

	for (uint32_t i = 0; i < r->vocab; i++) {
		r->z[i] = (float)(((double)r->y[i] - (double)max_y) * inv_t);
		r->w[i] = expf(r->z[i]);
	}
}

static double ref_kept_sum(const struct ref_row *r)
{
	double sum = 0.0;

	for (uint32_t i = 0; i < r->vocab; i++)
		if (r->keep[i])
			sum += r->w[i];
	return sum;
}

/* Apply top_k, top_p and min_p to r->keep, in that order. */
static void ref_cut(struct ref_row *r, const struct sampling_params *p)
{
	for (uint32_t i = 0; i < r->vocab; i++)
		r->keep[i] = r->w[i] > 0.0f;
	ref_order_by(r, r->w);
	if (p->top_k > 0 && p->top_k < r->vocab) {
		float t = r->w[r->order[p->top_k - 1]];

		for (uint32_t i = 0; i < r->vocab; i++)
			if (r->w[i] < t)
				r->keep[i] = false;
	}
	if (p->top_p < 1.0f) {
		double target = (double)p->top_p * ref_kept_sum(r), cum = 0.0;

		for (uint32_t j = 0; j < r->vocab; j++) {
			uint32_t id = r->order[j];

			if (!r->keep[id])
				continue;
			cum += r->w[id];
			if (cum >= target) {
				float t = r->w[id];

				for (uint32_t i = 0; i < r->vocab; i++)
					if (r->w[i] < t)
						r->keep[i] = false;
				break;
			}
		}
	}
	for (uint32_t i = 0; i < r->vocab; i++)
		if ((double)r->w[i] < (double)p->min_p)
			r->keep[i] = false;
}

static uint32_t ref_draw(const struct ref_row *r, double u)
{
	double target = u * ref_kept_sum(r), acc = 0.0;
	uint32_t last = 0;

	for (uint32_t i = 0; i < r->vocab; i++) {
		if (!r->keep[i])
			continue;
		acc += r->w[i];
		last = i;
		if (acc > target)
			return i;
	}
	return last;
}

static void ref_logprobs(struct ref_row *r, const struct sampling_params *p,
			 float max_y, uint32_t chosen, struct sampler_result *out)
{
	double z_sum = 0.0, log_z;

	ref_scale(r, max_y, p->temperature > 0.0f ? p->temperature : 1.0f);
	for (uint32_t i = 0; i < r->vocab; i++)
		z_sum += expf(r->z[i]);
	log_z = log(z_sum);
	out->logprob = (float)((double)r->z[chosen] - log_z);
	ref_order_by(r, r->z);
	for (uint32_t j = 0; j < r->vocab && out->n_top < p->top_logprobs; j++) {
		uint32_t id = r->order[j];

		if (r->z[id] == -INFINITY)
			break;
		out->top[out->n_top++] = (struct sampler_logprob){
			(int32_t)id, (float)((double)r->z[id] - log_z) };
	}
}

static int ref_sample_row(struct ref_row *r, const float *logits,
			  const struct sampling_params *p, uint32_t k,
			  uint32_t choice, struct sampler_result *out)
{
	uint32_t best = 0, chosen;
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
		ref_scale(r, r->y[best], p->temperature);
		ref_cut(r, p);
		chosen = ref_draw(r, philox_uniform(p->seed, k, choice));
	}
	out->token = (int32_t)chosen;
	if (p->logprobs)
		ref_logprobs(r, p, r->y[best], chosen, out);
	return 0;
}

int ref_sample(const float *logits, uint32_t vocab,
	       const struct sampling_params *p, uint32_t k, uint32_t choice,
	       struct sampler_result *out)
{
	struct ref_row r = { .vocab = vocab };
	int ret = -ENOMEM;

	memset(out, 0, sizeof(*out));
	r.y = malloc(sizeof(float) * vocab);
	r.w = malloc(sizeof(float) * vocab);
	r.z = malloc(sizeof(float) * vocab);
	r.keep = malloc(sizeof(bool) * vocab);
	r.order = malloc(sizeof(uint32_t) * vocab);
	r.tmp = malloc(sizeof(uint32_t) * vocab);
	if (vocab && r.y && r.w && r.z && r.keep && r.order && r.tmp)
		ret = ref_sample_row(&r, logits, p, k, choice, out);
	free(r.y);
	free(r.w);
	free(r.z);
	free(r.keep);
	free(r.order);
	free(r.tmp);
	return ret;
}
