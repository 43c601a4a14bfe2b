/*
 * spec.h - speculative decoding's proposers and their pacing: what a row
 * guesses it will generate next, and how many guesses it is worth
 * (docs/DESIGN.md 2.7).  Pure functions of a row's tokens and of its own
 * acceptance record: no model, no engine state.  The model runner
 * (lib/model/model_runner.c) verifies the guesses; whatever they are,
 * the tokens it emits are the ones decoding without them would give.
 */
#ifndef DYNBATCH_SPEC_H
#define DYNBATCH_SPEC_H

#include <stdbool.h>
#include <stdint.h>

/* Most tokens one row may guess in one step (--draft-tokens). */
#define SPEC_MAX_DRAFT 8u
/* The suffix lengths prompt lookup tries, longest first. */
#define SPEC_NGRAM_MIN 1u
#define SPEC_NGRAM_MAX 3u

enum spec_mode {
	SPEC_OFF = 0,
	SPEC_NGRAM = 1,		/* prompt lookup: no model needed */
};

struct spec_config {
	uint32_t mode;		/* enum spec_mode */
	uint32_t max_draft;	/* 1 .. SPEC_MAX_DRAFT */
	uint32_t ngram_min;	/* shortest suffix matched, >= 1 */
	uint32_t ngram_max;	/* longest, >= ngram_min */
};

/*
 * Prompt lookup: the longest suffix of tokens[0 .. n) of length
 * ngram_max down to ngram_min that occurred earlier in tokens (its
 * latest earlier occurrence, so recent text wins) proposes the tokens
 * that followed that occurrence, and past the end of tokens the text
 * continued with the match's period (the tokens it proposed itself), so
 * max_out of them into out.  Returns how many: max_out, or 0 when no
 * suffix recurs.  O(n * ngram_max) at worst.
 */
uint32_t spec_ngram_propose(const int32_t *tokens, uint32_t n,
			    uint32_t ngram_min, uint32_t ngram_max,
			    uint32_t max_out, int32_t *out);

/*
 * A row's pacing: how many guesses its next step makes, from how its
 * recent guesses fared.  Full acceptance doubles the length (up to the
 * configured most), a miss cuts it to what was accepted; at 0 the row
 * rests for a while (2 steps, twice as long after each further step
 * that took nothing, at most 64) and then tries one guess again, so a
 * row whose guesses keep failing costs a verify step only now and then.
 */
struct spec_pace {
	uint8_t k;		/* guesses the next step may make */
	uint8_t rest;		/* steps left without guessing */
	uint8_t misses;		/* times in a row k fell to 0 */
	uint8_t primed;		/* 1 once k was set for this request */
};

/* The guesses the row may make now (0 while it rests); counts a step. */
uint32_t spec_pace_allow(struct spec_pace *p, uint32_t max_draft);

/* Record a verified step: `drafted` guesses, `accepted` of them taken. */
void spec_pace_update(struct spec_pace *p, uint32_t max_draft,
		      uint32_t drafted, uint32_t accepted);

#endif /* DYNBATCH_SPEC_H */
