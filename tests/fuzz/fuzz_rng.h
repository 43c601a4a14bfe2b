/*
 * fuzz_rng.h - randomness for the fuzz targets, drawn from the input.
 *
 * A fuzz target must be a pure function of its input, so every choice
 * that is not input bytes (where to split, which limits) comes from a
 * splitmix64 seeded with the FNV-1a hash of the input.  Header-only and
 * self-contained: the fuzz builds link only the sources they exercise.
 */
#ifndef DYNBATCH_FUZZ_RNG_H
#define DYNBATCH_FUZZ_RNG_H

#include <stddef.h>
#include <stdint.h>

struct rng {
	uint64_t s;
};

static inline uint64_t rng_next(struct rng *r)
{
	uint64_t x = (r->s += 0x9E3779B97F4A7C15ull);

	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

static inline size_t rng_below(struct rng *r, size_t n)
{
	return (size_t)(rng_next(r) % n);
}

/* FNV-1a of the input: the seed of every choice that is not input bytes. */
static inline struct rng rng_for(const uint8_t *data, size_t size)
{
	uint64_t h = 0xCBF29CE484222325ull;

	for (size_t i = 0; i < size; i++)
		h = (h ^ data[i]) * 0x100000001B3ull;
	return (struct rng){ h };
}

#endif /* DYNBATCH_FUZZ_RNG_H */
