/*
 * philox.h - Philox4x32-10, the counter-based generator behind sampling.
 *
 * Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1,
 * 2, 3" (SC 2011): a 128-bit counter and a 64-bit key go through ten
 * rounds of two 32x32->64 multiplications and xors, with the key bumped
 * by two Weyl constants between rounds.  Written here from that
 * description; tests/unit/test_sampler.c checks it against the known answers
 * Random123 publishes and against a separate Python implementation.
 *
 * NOTES ON THE DESIGN
 * The draw for a request's k-th generated token and choice c is
 * philox_bits53(seed, k, c): key = (seed low 32 bits, seed high 32 bits),
 * counter = (k, c, 0, 0).  It is a pure function of those three numbers,
 * never a stream consumed in launch order, so a seeded request draws the
 * same numbers whatever batch, worker or restart it runs in.  This is the
 * contract shared by the engine's sampler and the reference decoder's
 * naive one (tools/refdecode/ref_sampler.c), hence a header of static inlines.
 */
#ifndef DYNBATCH_PHILOX_H
#define DYNBATCH_PHILOX_H

#include <stdint.h>

#define PHILOX_M0 0xD2511F53u	/* round multipliers */
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u	/* key schedule: golden ratio */
#define PHILOX_W1 0xBB67AE85u	/* key schedule: sqrt(3) - 1 */
#define PHILOX_ROUNDS 10

/* out = Philox4x32-10(ctr, key). */
static inline void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
				 uint32_t out[4])
{
	uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
	uint32_t k0 = key[0], k1 = key[1];

	for (int r = 0; r < PHILOX_ROUNDS; r++) {
		uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
		uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
		uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
		uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;

		c1 = (uint32_t)p1;
		c3 = (uint32_t)p0;
		c0 = n0;
		c2 = n2;
		k0 += PHILOX_W0;
		k1 += PHILOX_W1;
	}
	out[0] = c0;
	out[1] = c1;
	out[2] = c2;
	out[3] = c3;
}

/* The draw for (seed, k, choice): the top 53 bits of out[0]:out[1]. */
static inline uint64_t philox_bits53(uint64_t seed, uint32_t k, uint32_t choice)
{
	const uint32_t ctr[4] = { k, choice, 0, 0 };
	const uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) };
	uint32_t out[4];

	philox4x32_10(ctr, key, out);
	return (((uint64_t)out[0] << 32) | out[1]) >> 11;
}

/* The same as a uniform double in [0, 1), a multiple of 2^-53. */
static inline double philox_uniform(uint64_t seed, uint32_t k, uint32_t choice)
{
	return (double)philox_bits53(seed, k, choice) * 0x1p-53;
}

#endif /* DYNBATCH_PHILOX_H */
