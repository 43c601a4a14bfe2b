/*
 * sim_model.h - the built-in simulated model (docs/DESIGN.md 2.1, normative).
 *
 * The next token is a hash of the sequence length and the last four tokens
 * of the prefix, so output is deterministic and cheap to recompute in a
 * reference decoder.  Its logits (sim_logits(), for sampling) are another
 * hash of the same inputs, whose argmax is that token.  Its cost per call can be configured so the engine can
 * be measured against a model of known speed, and it can be told to crash
 * or hang on a chosen token for fault tests.
 *
 * Keys of "sim:key=value,...":
 *   vocab=N (32000)  seed=N (0)
 *   call_us=N  row_us=N  token_ns=N   cost per call, per row, per prefix
 *                                      token (all 0 by default)
 *   mode=spin|sleep (spin)            burn the CPU or sleep for the cost
 *   crash_token=T   abort() when a prefix given to the model ends in T
 *   hang_token=T    never return when a prefix ends in T
 */
#ifndef DYNBATCH_SIM_MODEL_H
#define DYNBATCH_SIM_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dynbatch/model.h"

struct sim_config {
	uint32_t vocab;		/* tokens are in [0, vocab); > 0 */
	uint64_t seed;
	uint64_t call_us;	/* fixed cost per model call, microseconds */
	uint64_t row_us;	/* cost per row of the batch, microseconds */
	uint64_t token_ns;	/* cost per prefix token, nanoseconds */
	bool mode_sleep;	/* true: sleep the cost; false: spin it */
	bool has_crash_token;
	int32_t crash_token;
	bool has_hang_token;
	int32_t hang_token;
};

/* splitmix64 finaliser. */
uint64_t sim_mix(uint64_t x);

/*
 * splitmix64 as a generator: the value sim_mix() gives for *state, then
 * *state advances by the golden-ratio increment.  One definition for the
 * workload generator, the fault injector and the randomized tests.
 */
static inline uint64_t sim_splitmix64(uint64_t *state)
{
	uint64_t x = sim_mix(*state);

	*state += 0x9E3779B97F4A7C15ull;
	return x;
}

/* The next token after p[0..n). */
int32_t sim_next(const int32_t *p, size_t n, uint32_t vocab, uint64_t seed);

/* "logits" in ASCII: keeps sim_logits()' stream apart from sim_next()'s. */
#define SIM_LOGITS_SALT 0x6C6F67697473ull

/*
 * The logits after p[0..n) (docs/DESIGN.md 2.1, normative): vocab floats
 * into out, a pure function of (prefix, vocab, seed) whose argmax is
 * unique and is sim_next(p, n, vocab, seed), so greedy decoding of them
 * gives the sim's tokens.  With h the 64-bit hash that sim_next() reduces
 * (h = mix(seed xor n), then h = mix(h xor t) for each of the last four
 * tokens, oldest first; sim_next() is h mod vocab):
 *
 *     t     = h mod vocab
 *     h0    = mix(h xor SIM_LOGITS_SALT)
 *     depth = the bit length of vocab (1 for 1, 15 for 32000, 31 for 2^31-1)
 *     for every v != t, with r = mix(h0 + v) (mod 2^64):
 *         level  = min(leading zero bits of r (64 for r = 0), depth)
 *         out[v] = (8 * (level - depth) + (r & 7)) / 8
 *     out[t] = 1
 *
 * Every value is a multiple of 1/8 of magnitude at most 32, so it is
 * exact in a float and a reference recomputes it bit for bit; the other
 * tokens' values are in [-depth, 0.875], below the 1 of out[t].  Cost:
 * one mix() per vocabulary entry.
 *
 * Why levels, not uniform noise: a token's level is geometric (half the
 * vocabulary is at -depth, a quarter one level up, ...; about one token
 * reaches the top level [0, 0.875]), like the long tail of a language
 * model.  Scaling the depth with the vocabulary keeps the shape the same
 * for any vocab: at temperature 1 the argmax gets about 40% of the
 * probability (70% at vocab 16), the five most likely tokens over 80%,
 * the tail the rest, so sampling often differs from greedy and top-k and
 * top-p cut something real.  Uniform values in a fixed range would give
 * the argmax a share falling as 1/vocab (0.06% at 32000 and
 * temperature 1): sampling would be near-uniform noise.  The low 3 bits
 * spread each level over 8 values, so that ties are rare near the top.
 */
void sim_logits(const int32_t *p, size_t n, uint32_t vocab, uint64_t seed,
		float *out);

/*
 * What one sim call over these rows does besides its tokens: crash or
 * hang on a poison token, then spend the configured cost.  For models
 * built on the sim (simkv_model.c).
 */
void sim_act(const struct sim_config *cfg, uint32_t n_rows,
	     const int32_t *const *prefixes, const uint32_t *lengths);

/* Defaults: vocab 32000, seed 0, no cost, spin, no faults. */
void sim_config_default(struct sim_config *cfg);

/*
 * Parse "key=value,..." (the part after "sim:"; "" for none) into cfg,
 * starting from the defaults.  Returns 0, or -EINVAL after writing a
 * reason naming the bad key or value into err.
 */
int sim_config_parse(const char *args, struct sim_config *cfg, char *err,
		     size_t err_len);

/* The model.h ABI table of the sim model; create() takes the same args. */
const struct dynbatch_model_api *sim_model_api(void);

#endif /* DYNBATCH_SIM_MODEL_H */
