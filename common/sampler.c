/*
 * sampler.c - the engine's sampler: one row of logits to one token, by
 * the semantics stated in sampler.h, without sorting the vocabulary.
 *
 * NOTES ON THE DESIGN
 * A row costs a few linear passes: copy + check + bias, argmax, and (when
 * sampling) one pass computing w = expf(z), Z and, when top_k or top_p is
 * on, a histogram of w.  The histogram buckets w by its float bits >> 20
 * (w >= 0, so the bits order like the values): 1017 buckets of 1/8 octave
 * each, with a count and a mass per bucket.  Walking it from the top
 * gives the lowest bucket that can hold the k-th largest w, or where the
 * mass passes top_p * Z; only tokens at or above that bucket are gathered
 * and sorted.  The bucket masses are sums in another order than the
 * definition's, so they only choose what to gather: the decision itself
 * is made on the gathered tokens sorted by decreasing w, summed in that
 * order, exactly as the definition says; if rounding made the histogram
 * too optimistic, everything with w > 0 is gathered and the decision
 * made again.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "philox.h"
#include "sampler.h"

#define SAMPLER_BUCKET_SHIFT 20
/* Buckets of w in [0, 1]: the bits of 1.0f are 0x3F800000. */
#define SAMPLER_N_BUCKETS ((0x3F800000u >> SAMPLER_BUCKET_SHIFT) + 1)

struct sampler_cand {
	float w;
	uint32_t id;
};

struct sampler {
	uint32_t vocab;
	float *y;			/* biased logits, -inf = banned */
	float *w;			/* expf(z) */
	struct sampler_cand *cand;	/* gathered, by decreasing w */
	struct sampler_cand *kept;	/* the kept set, by id */
	uint32_t hist_count[SAMPLER_N_BUCKETS];
	double hist_mass[SAMPLER_N_BUCKETS];
};

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
		return "invalid sampling parameters";
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
	s->y = malloc(sizeof(*s->y) * vocab);
	s->w = malloc(sizeof(*s->w) * vocab);
	s->cand = malloc(sizeof(*s->cand) * vocab);
	s->kept = malloc(sizeof(*s->kept) * vocab);
	if (!s->y || !s->w || !s->cand || !s->kept) {
		sampler_destroy(s);
		return NULL;
	}
	return s;
}

void sampler_destroy(struct sampler *s)
{
	if (!s)
		return;
	free(s->y);
	free(s->w);
	free(s->cand);
	free(s->kept);
	free(s);
}

/* ------------------------------------------------------------------ */
/* Bias, argmax, weights                                               */
/* ------------------------------------------------------------------ */

/* y = logits + bias; -EDOM on NaN/+inf, -EINVAL on a bias token out of range. */
static int sampler_bias(struct sampler *s, const float *logits,
			const struct sampling_params *p)
{
	int bad = 0;

	for (uint32_t i = 0; i < s->vocab; i++) {
		/* False for NaN and +inf alone; -inf is a banned token. */
		bad |= !(logits[i] < INFINITY);
		s->y[i] = logits[i];
	}
	if (bad)
		return -EDOM;
	for (uint32_t i = 0; i < p->n_bias; i++) {
		const struct sampling_bias *b = &p->bias[i];

		if (b->token < 0 || (uint32_t)b->token >= s->vocab)
			return -EINVAL;
		/* |bias| <= 100 cannot overflow a finite float: it rounds. */
		s->y[b->token] = b->bias == SAMPLER_BIAS_BAN ? -INFINITY :
				 s->y[b->token] + b->bias;
	}
	return 0;
}

/* The lowest id of the largest y; -ENOENT when every y is -inf. */
static int sampler_argmax(const struct sampler *s, uint32_t *best_id)
{
	uint32_t best = 0;

	for (uint32_t i = 1; i < s->vocab; i++)
		if (s->y[i] > s->y[best])
			best = i;
	if (s->y[best] == -INFINITY)
		return -ENOENT;
	*best_id = best;
	return 0;
}

static inline float sampler_z(float y, float max_y, double inv_t)
{
	return (float)(((double)y - (double)max_y) * inv_t);
}

static inline uint32_t sampler_bucket(float w)
{
	uint32_t bits;

	memcpy(&bits, &w, sizeof(bits));
	return bits >> SAMPLER_BUCKET_SHIFT;
}

/* w = expf(z) for every token; returns Z; fills the histogram if asked. */
static double sampler_weights(struct sampler *s, float max_y, double inv_t,
			      bool histogram)
{
	double z_sum = 0.0;

	if (histogram) {
		memset(s->hist_count, 0, sizeof(s->hist_count));
		memset(s->hist_mass, 0, sizeof(s->hist_mass));
	}
	for (uint32_t i = 0; i < s->vocab; i++) {
		float w = expf(sampler_z(s->y[i], max_y, inv_t));

		s->w[i] = w;
		z_sum += w;
		if (histogram) {
			uint32_t b = sampler_bucket(w);

			s->hist_count[b]++;
			s->hist_mass[b] += w;
		}
	}
	return z_sum;
}

/* ------------------------------------------------------------------ */
/* The kept set                                                        */
/* ------------------------------------------------------------------ */

static int cand_by_w_desc(const void *a, const void *b)
{
	const struct sampler_cand *x = a, *y = b;

	if (x->w != y->w)
		return x->w > y->w ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static int cand_by_id(const void *a, const void *b)
{
	const struct sampler_cand *x = a, *y = b;

	return x->id < y->id ? -1 : x->id > y->id;
}

/* Gather the tokens with w > 0 in bucket >= lowest, by decreasing w. */
static uint32_t sampler_gather(struct sampler *s, uint32_t lowest)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->vocab; i++)
		if (s->w[i] > 0.0f && sampler_bucket(s->w[i]) >= lowest)
			s->cand[n++] = (struct sampler_cand){ s->w[i], i };
	qsort(s->cand, n, sizeof(*s->cand), cand_by_w_desc);
	return n;
}

/* The highest bucket b with at least k tokens in buckets >= b. */
static uint32_t sampler_bucket_of_kth(const struct sampler *s, uint32_t k)
{
	uint32_t n = 0;

	for (uint32_t b = SAMPLER_N_BUCKETS; b-- > 0;) {
		n += s->hist_count[b];
		if (n >= k)
			return b;
	}
	return 0;
}

/* The highest bucket b whose buckets >= b hold a mass >= target. */
static uint32_t sampler_bucket_of_mass(const struct sampler *s, double target)
{
	double mass = 0.0;

	for (uint32_t b = SAMPLER_N_BUCKETS; b-- > 0;) {
		mass += s->hist_mass[b];
		if (mass >= target)
			return b;
	}
	return 0;
}

/*
 * The top_p threshold on the first n1 gathered tokens (K1, by decreasing
 * w): the value at the first prefix whose sum reaches target, or 0 (keep
 * all) when none does; *reached says whether one did.
 */
static float sampler_top_p_cut(const struct sampler *s, uint32_t n1,
			       double target, bool *reached)
{
	double cum = 0.0;

	for (uint32_t j = 0; j < n1; j++) {
		cum += s->cand[j].w;
		if (cum >= target) {
			*reached = true;
			return s->cand[j].w;
		}
	}
	*reached = false;
	return 0.0f;
}

/* Sum of the first n kept tokens in id order (they are sorted by id). */
static double sampler_kept_sum(const struct sampler *s, uint32_t n)
{
	double sum = 0.0;

	for (uint32_t i = 0; i < n; i++)
		sum += s->kept[i].w;
	return sum;
}

/*
 * The threshold t of the kept set {w > 0, w >= t} for top_k and top_p
 * (min_p is applied by the caller).  Sets *n_cand to the number of
 * gathered tokens, which then hold the whole kept set.  z_sum is Z.
 */
static float sampler_select(struct sampler *s, const struct sampling_params *p,
			    double z_sum, uint32_t *n_cand)
{
	bool top_k = p->top_k && p->top_k < s->vocab;
	uint32_t lowest, n, n1;
	double z1 = z_sum;
	float t = 0.0f;

	/* The bucket masses carry rounding of their own: aim a little low
	 * so that the fallback below (gather everything) stays rare. */
	lowest = top_k ? sampler_bucket_of_kth(s, p->top_k) :
			 sampler_bucket_of_mass(s, (double)p->top_p * z_sum *
						   (1.0 - 1e-9));
	n = sampler_gather(s, lowest);
	n1 = n;
	if (top_k && n >= p->top_k) {
		t = s->cand[p->top_k - 1].w;
		while (n1 > 0 && s->cand[n1 - 1].w < t)
			n1--;
		/* Z1 in id order, as the definition sums it. */
		memcpy(s->kept, s->cand, sizeof(*s->kept) * n1);
		qsort(s->kept, n1, sizeof(*s->kept), cand_by_id);
		z1 = sampler_kept_sum(s, n1);
	}
	if (p->top_p < 1.0f) {
		double target = (double)p->top_p * z1;
		bool reached;
		float t_p = sampler_top_p_cut(s, n1, target, &reached);

		/* The histogram was too optimistic: gather everything. */
		if (!reached && !top_k && lowest > 0) {
			n = n1 = sampler_gather(s, 0);
			t_p = sampler_top_p_cut(s, n1, target, &reached);
		}
		if (t_p > t)
			t = t_p;
	}
	*n_cand = n;
	return t;
}

/* ------------------------------------------------------------------ */
/* The draw                                                            */
/* ------------------------------------------------------------------ */

/* Inverse CDF over the first n kept tokens (sorted by id). */
static uint32_t sampler_draw_kept(const struct sampler *s, uint32_t n, double u)
{
	double target = u * sampler_kept_sum(s, n), acc = 0.0;

	for (uint32_t i = 0; i < n; i++) {
		acc += s->kept[i].w;
		if (acc > target)
			return s->kept[i].id;
	}
	return s->kept[n - 1].id;
}

/* Inverse CDF over every token with w > 0 and w >= t, in one walk. */
static uint32_t sampler_draw_all(const struct sampler *s, float t,
				 double kept_sum, double u)
{
	double target = u * kept_sum, acc = 0.0;
	uint32_t last = 0;

	for (uint32_t i = 0; i < s->vocab; i++) {
		float w = s->w[i];

		if (w > 0.0f && w >= t) {
			acc += w;
			last = i;
			if (acc > target)
				return i;
		}
	}
	return last;
}

static double sampler_sum_above(const struct sampler *s, float t)
{
	double sum = 0.0;

	for (uint32_t i = 0; i < s->vocab; i++)
		if (s->w[i] > 0.0f && s->w[i] >= t)
			sum += s->w[i];
	return sum;
}

static uint32_t sampler_draw(struct sampler *s, const struct sampling_params *p,
			     float max_y, double u)
{
	double inv_t = 1.0 / (double)p->temperature;
	bool select = (p->top_k && p->top_k < s->vocab) || p->top_p < 1.0f;
	double z_sum = sampler_weights(s, max_y, inv_t, select);
	uint32_t n_cand = 0, n_kept = 0;
	float t = 0.0f;

	if (select)
		t = sampler_select(s, p, z_sum, &n_cand);
	if (p->min_p > t)
		t = p->min_p;
	if (!select)
		return sampler_draw_all(s, t, t > 0.0f ? sampler_sum_above(s, t) :
					z_sum, u);
	/* The kept set is a prefix of the gathered tokens. */
	while (n_kept < n_cand && s->cand[n_kept].w >= t)
		n_kept++;
	memcpy(s->kept, s->cand, sizeof(*s->kept) * n_kept);
	qsort(s->kept, n_kept, sizeof(*s->kept), cand_by_id);
	return sampler_draw_kept(s, n_kept, u);
}

/* ------------------------------------------------------------------ */
/* Logprobs                                                            */
/* ------------------------------------------------------------------ */

/* Insert (id, z) into top[0 .. *n) kept by decreasing z, at most cap. */
static void top_insert(struct sampler_logprob *top, uint32_t *n, uint32_t cap,
		       int32_t id, float z)
{
	uint32_t j;

	if (*n == cap && !(z > top[cap - 1].logprob))
		return;	/* ids come in increasing order: a tie never enters */
	j = *n < cap ? (*n)++ : cap - 1;
	while (j > 0 && top[j - 1].logprob < z) {
		top[j] = top[j - 1];
		j--;
	}
	top[j] = (struct sampler_logprob){ id, z };
}

static void sampler_logprobs(const struct sampler *s,
			     const struct sampling_params *p, float max_y,
			     uint32_t chosen, struct sampler_result *out)
{
	float temperature = p->temperature > 0.0f ? p->temperature : 1.0f;
	double inv_t = 1.0 / (double)temperature, z_sum = 0.0, log_z;
	uint32_t cap = p->top_logprobs;

	/* Z again rather than kept from the draw: the cut-offs' pass may
	 * not have run (temperature 0), and this is only paid when asked. */
	for (uint32_t i = 0; i < s->vocab; i++) {
		float z = sampler_z(s->y[i], max_y, inv_t);

		z_sum += expf(z);
		if (cap && z > -INFINITY)
			top_insert(out->top, &out->n_top, cap, (int32_t)i, z);
	}
	log_z = log(z_sum);
	out->logprob = (float)((double)sampler_z(s->y[chosen], max_y, inv_t) - log_z);
	for (uint32_t j = 0; j < out->n_top; j++)
		out->top[j].logprob = (float)((double)out->top[j].logprob - log_z);
}

int sampler_sample(struct sampler *s, const float *logits,
		   const struct sampling_params *p, uint32_t k, uint32_t choice,
		   struct sampler_result *out)
{
	uint32_t best, chosen;
	int ret;

	memset(out, 0, sizeof(*out));
	ret = sampler_bias(s, logits, p);
	if (ret)
		return ret;
	ret = sampler_argmax(s, &best);
	if (ret)
		return ret;
	chosen = best;
	if (p->temperature > 0.0f)
		chosen = sampler_draw(s, p, s->y[best],
				      philox_uniform(p->seed, k, choice));
	out->token = (int32_t)chosen;
	if (p->logprobs)
		sampler_logprobs(s, p, s->y[best], chosen, out);
	return 0;
}
