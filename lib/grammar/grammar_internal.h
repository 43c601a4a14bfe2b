/*
 * grammar_internal.h - the compiled grammar's layout, shared by the
 * parser (gbnf_parse.c) and the matcher (grammar_matcher.c).
 *
 * Every alternative of every rule is a run of elements in one flat array,
 * ended by GR_END; a parse position is an index into it.  An element is
 * (type << 30) | value: GR_CHAR's value is a character class, GR_REF's a
 * rule.  A class is a sorted list of disjoint [lo, hi] code point ranges
 * (negation is resolved at compile time, so matching never negates).
 *
 * The matcher's caps and a few matcher internals are here too, for the
 * token mask (mask_*.c): it replays states from their keys and needs to
 * know how close a step came to a cap (see mask_split.c).
 */
#ifndef DYNBATCH_GRAMMAR_INTERNAL_H
#define DYNBATCH_GRAMMAR_INTERNAL_H

#include <stdint.h>

#include "grammar/grammar.h"

enum { GR_END = 0, GR_CHAR = 1, GR_REF = 2, GR_ALT = 3 };

#define GR_TYPE(e) ((e) >> 30)
#define GR_VAL(e) ((e) & 0x3fffffffu)
#define GR_MAKE(t, v) (((uint32_t)(t) << 30) | (uint32_t)(v))

struct grammar {
	uint32_t *elems;	/* alternatives, each ended by GR_END */
	uint32_t n_elems;
	uint32_t n_rules;
	uint32_t *alt_off;	/* rule r's alternatives: alts[alt_off[r]..alt_off[r+1]) */
	uint32_t *alts;		/* start positions in elems */
	uint32_t n_classes;
	uint32_t *cls_off;	/* class c: ranges[2*cls_off[c]..2*cls_off[c+1]) */
	uint32_t *ranges;	/* lo, hi pairs */
	uint32_t root;
};

/* raw expansion outputs (before duplicates go), all stacks, per character */
#define GR_MAX_RAW (4 * GRAMMAR_MAX_STACKS)
/* expansion steps from one stack, per character */
#define GR_MAX_STEPS (64 * GRAMMAR_MAX_STACKS)
/* words before the stacks in a key: cp so far, need | len << 8, n_stacks */
#define GR_KEY_HDR 3

struct grammar_matcher;

/* What the last successful byte step of a matcher cost. */
struct grammar_step_stats {
	uint32_t n_raw;		/* expansion outputs, all stacks */
	uint32_t max_len;	/* longest stack pushed */
};

/* The hash of n key words (grammar_matcher_hash() is that of m's key). */
uint64_t grammar_key_hash(const uint32_t *key, uint32_t n_words);

/* m's state = the key words (a key of a matcher of m's grammar). */
int grammar_matcher_load(struct grammar_matcher *m, const uint32_t *key,
			 uint32_t n_words);
const struct grammar *grammar_matcher_grammar(const struct grammar_matcher *m);
void grammar_matcher_step_stats(const struct grammar_matcher *m,
				struct grammar_step_stats *st);

#endif /* DYNBATCH_GRAMMAR_INTERNAL_H */
