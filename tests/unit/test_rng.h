/*
 * test_rng.h - the shared seeded PRNG of the randomized unit tests.
 *
 * One seed per run: test_seed_init() takes it from SEED= in the
 * environment (strtoull, so 0x... works too) or, without it, derives one
 * from the time and the pid, and prints "<module>: seed=<n>" so that a
 * failing run can be replayed with SEED=<n>.  Each test derives its own
 * generator with rng_for(test_id), so one test replays the same whatever
 * runs before it.  The generator is splitmix64.
 *
 * Header-only, for the test programs (one translation unit each): the
 * functions are static inline, so a test need not use all of them.
 */
#ifndef DYNBATCH_TEST_RNG_H
#define DYNBATCH_TEST_RNG_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "model/sim_model.h"

static unsigned long long test_seed;

struct rng {
	uint64_t s;
};

static inline uint64_t rng_next(struct rng *r)
{
	return sim_splitmix64(&r->s);
}

/* Uniform enough in [0, n) for test purposes; n > 0. */
static inline uint32_t rng_below(struct rng *r, uint32_t n)
{
	return (uint32_t)(rng_next(r) % n);
}

/* The generator of test test_id, from test_seed. */
static inline struct rng rng_for(uint64_t test_id)
{
	struct rng r = { test_seed ^ (test_id * 0xD1B54A32D192ED03ull) };

	rng_next(&r);
	return r;
}

/* Set test_seed from SEED= or the time and pid, and print it. */
static inline void test_seed_init(const char *module)
{
	const char *env = getenv("SEED");

	if (env && *env)
		test_seed = strtoull(env, NULL, 0);
	else
		test_seed = (unsigned long long)time(NULL) * 1000003ull ^
			    (unsigned long long)getpid();
	printf("%s: seed=%llu\n", module, test_seed);
	fflush(stdout);
}

#endif /* DYNBATCH_TEST_RNG_H */
