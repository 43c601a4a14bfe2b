/*
 * ref_sim_logits.c - the sim model's logits by the letter of their
 * definition (lib/model/sim_model.h, docs/DESIGN.md 2.1), for refdecode.
 *
 * NOTES ON THE DESIGN
 * Nothing here comes from lib/model/sim_model.c: the splitmix64 finaliser,
 * the prefix hash and the leading-zero count are written out again in the
 * plainest form (a bit loop, not __builtin_clzll; a division by 8 in
 * double, not a multiply by 0.125f).  Every value is a multiple of 1/8 of
 * magnitude at most 32, so both forms give the same float; if the engine's
 * sim and this ever disagree, refdecode --check reports it.
 */
#include "tools/refdecode/ref_sim_logits.h"

#define REF_SIM_SALT 0x6C6F67697473ull	/* "logits" */

/* The splitmix64 output function of x + golden ratio. */
static uint64_t ref_mix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* Leading zero bits of x, 64 for 0, by walking down from the top bit. */
static int ref_leading_zeros(uint64_t x)
{
	int n = 0;

	for (uint64_t bit = 1ull << 63; bit && !(x & bit); bit >>= 1)
		n++;
	return n;
}

/* Bits needed to write v: 1 for 1, 15 for 32000. */
static int ref_bit_length(uint32_t v)
{
	int n = 0;

	for (; v; v >>= 1)
		n++;
	return n;
}

int32_t ref_sim_logits(const int32_t *p, size_t n, uint32_t vocab,
		       uint64_t seed, float *out)
{
	/* h: the sequence length, then the last four tokens oldest first */
	uint64_t h = ref_mix(seed ^ (uint64_t)n), h0;
	size_t first = n >= 4 ? n - 4 : 0;
	int depth = ref_bit_length(vocab);
	uint32_t top;

	for (size_t i = first; i < n; i++)
		h = ref_mix(h ^ (uint64_t)(uint32_t)p[i]);
	top = (uint32_t)(h % vocab);
	h0 = ref_mix(h ^ REF_SIM_SALT);
	for (uint32_t v = 0; v < vocab; v++) {
		uint64_t r = ref_mix(h0 + (uint64_t)v);
		int level = ref_leading_zeros(r);

		if (level > depth)
			level = depth;
		out[v] = (float)((double)(8 * (level - depth) +
					  (int)(r % 8)) / 8.0);
	}
	out[top] = 1.0f;
	return (int32_t)top;
}
