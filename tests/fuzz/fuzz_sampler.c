/*
 * fuzz_sampler.c - libFuzzer target for the sampler (every file of
 * lib/sampling: sampler.c and those below it) against the naive sampler
 * written by the definition (tools/refdecode/ref_sampler.c), on both of
 * its instruction sets (sampler_set_isa()).
 *
 * The input is read as a row and a request's sampling fields, so the
 * fuzzer can steer both toward what the engine's shortcuts care about:
 *  - byte 0-1: the vocabulary, 1 to 6000 tokens (over 1024, the weights'
 *    pass gives up gathering on a flat row and top_p takes the bracket
 *    or the histogram);
 *  - byte 2: how the logits are made: one per input byte from a table of
 *    values with ties, -inf, huge and tiny gaps; a flat or a peaked
 *    normal row; a few distinct values; sorted runs; every logit equal;
 *  - then temperature, top_p, top_k, min_p, logprobs, up to 8 logit_bias
 *    entries (bans too), the seed, k and choice, each from a byte into a
 *    table of edge values or a drawn one.
 * The engine's result, AVX2 and portable, must equal the naive one to the
 * bit: the same error or the same token, logprob and alternatives.
 * Anything else abort()s, which libFuzzer reports with the input.
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_rng.h"
#include "tools/refdecode/ref_sampler.h"
#include "sampling/sampler.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_VOCAB 6000u

/* Byte i of the input, 0 past its end. */
static uint8_t byte_at(const uint8_t *data, size_t size, size_t i)
{
	return i < size ? data[i] : 0;
}

static double unit(struct rng *r)
{
	return (double)(rng_next(r) >> 11) * 0x1p-53;
}

static double normal(struct rng *r)
{
	return sqrt(-2.0 * log(unit(r) + 1e-300)) * cos(2 * M_PI * unit(r));
}

static void make_logits(float *y, uint32_t vocab, uint8_t how,
			const uint8_t *data, size_t size, struct rng *r)
{
	static const float table[16] = {
		0.0f, 1.0f, -1.0f, 0.5f, 1.0f, -INFINITY, 30.0f, -30.0f,
		1.0000001f, 0.99999994f, -21.48f, 1e-30f, -1e30f, 3.4e38f,
		-3.4e38f, 2.0f,
	};

	for (uint32_t i = 0; i < vocab; i++) {
		switch (how % 6) {
		case 0:	/* from the input: ties, bans, extremes */
			y[i] = table[byte_at(data, size, 16 + i) & 15];
			break;
		case 1:	/* flat */
			y[i] = (float)(2.0 * normal(r));
			break;
		case 2:	/* peaked, like a model's */
			y[i] = (float)(2.0 * normal(r) +
				       (rng_below(r, 200) == 0 ? 6 + 6 * unit(r) : 0));
			break;
		case 3:	/* a few distinct values */
			y[i] = (float)rng_below(r, 4);
			break;
		case 4:	/* sorted runs */
			y[i] = (float)(i % (1 + how)) * 1e-3f;
			break;
		default:	/* every logit equal */
			y[i] = 1.5f;
			break;
		}
	}
}

static void make_params(struct sampling_params *p, struct sampling_bias *bias,
			uint32_t vocab, const uint8_t *data, size_t size,
			struct rng *r)
{
	static const float temps[8] = { 0.0f, 1e-45f, 0.3f, 0.8f, 1.0f, 2.0f,
					1e30f, 0.05f };
	static const float top_ps[8] = { 1.0f, 0.9f, 0.5f, 1e-6f, 0.99999994f,
					 0.95f, 0.1f, 0.0f };
	static const float min_ps[8] = { 0.0f, 0.05f, 1.0f, 1e-6f, 0.3f, 0.0f,
					 0.0f, 0.0f };
	uint8_t b3 = byte_at(data, size, 3), b4 = byte_at(data, size, 4);
	uint8_t b5 = byte_at(data, size, 5), b6 = byte_at(data, size, 6);

	memset(p, 0, sizeof(*p));
	p->temperature = temps[b3 & 7];
	p->top_p = top_ps[(b3 >> 3) & 7];
	if (p->top_p == 0.0f)	/* drawn in (0, 1] */
		p->top_p = (float)(1.0 - unit(r));
	switch (b4 & 7) {
	case 0: case 1: p->top_k = 0; break;
	case 2: p->top_k = 1; break;
	case 3: p->top_k = 40; break;
	case 4: p->top_k = vocab - 1; break;
	case 5: p->top_k = vocab; break;
	case 6: p->top_k = 1 + (uint32_t)rng_below(r, 1100); break;
	default: p->top_k = 1 + (uint32_t)rng_below(r, 2 * vocab); break;
	}
	p->min_p = min_ps[(b4 >> 3) & 7];
	p->logprobs = b5 & 1;
	p->top_logprobs = p->logprobs ? (b5 >> 1) % (SAMPLER_MAX_LOGPROBS + 1) : 0;
	p->n_bias = (b6 & 7) < vocab ? b6 & 7 : 0;
	for (uint32_t i = 0; i < p->n_bias; i++) {
		/* Distinct tokens: consecutive ids from a drawn start. */
		bias[i].token = (int32_t)((b6 * 31u + i) % vocab);
		bias[i].bias = (b6 >> 3) & 1 ? SAMPLER_BIAS_BAN :
			       (float)(unit(r) * 200.0 - 100.0);
	}
	p->bias = p->n_bias ? bias : NULL;
	p->seed = rng_next(r) >> 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct sampler *engine[FUZZ_MAX_VOCAB + 1];
	static float y[FUZZ_MAX_VOCAB];
	struct rng r = rng_for(data, size);
	uint32_t vocab = 1 + (uint32_t)((byte_at(data, size, 0) |
					 byte_at(data, size, 1) << 8) %
					FUZZ_MAX_VOCAB);
	struct sampling_bias bias[8];
	struct sampling_params p;
	struct sampler_result want, got;
	uint32_t k = byte_at(data, size, 7), choice = byte_at(data, size, 8) & 3;
	char err[160];
	int ret_want;

	make_logits(y, vocab, byte_at(data, size, 2), data, size, &r);
	make_params(&p, bias, vocab, data, size, &r);
	CHECK(sampling_params_validate(&p, vocab, err, sizeof(err)) == 0);
	/* One sampler per vocabulary, kept: the row's scratch is reused as
	 * the engine reuses it from row to row. */
	if (!engine[vocab])
		engine[vocab] = sampler_create(vocab);
	CHECK(engine[vocab] != NULL);
	ret_want = ref_sample(y, vocab, &p, k, choice, &want);
	for (int path = 0; path < 2; path++) {
		struct sampler *s = engine[vocab];
		enum sampler_isa isa = sampler_get_isa(s);
		int ret;

		if (path == 1 && !sampler_isa_supported(SAMPLER_ISA_AVX2))
			break;
		CHECK(sampler_set_isa(s, path == 1 ? SAMPLER_ISA_AVX2 :
					 SAMPLER_ISA_PORTABLE) == 0);
		ret = sampler_sample(s, y, &p, k, choice, &got);
		sampler_set_isa(s, isa);
		CHECK(ret == ret_want);
		CHECK(ret || !memcmp(&got, &want, sizeof(got)));
	}
	return 0;
}
