/*
 * grammar_internal.h - the compiled grammar's layout, shared by the
 * parser (gbnf_parse.c) and the matcher (grammar_matcher.c).
 *
 * Every alternative of every rule is a run of elements in one flat array,
 * ended by GR_END; a parse position is an index into it.  An element is
 * (type << 30) | value: GR_CHAR's value is a character class, GR_REF's a
 * rule.  A class is a sorted list of disjoint [lo, hi] code point ranges
 * (negation is resolved at compile time, so matching never negates).
 */
#ifndef DYNBATCH_GRAMMAR_INTERNAL_H
#define DYNBATCH_GRAMMAR_INTERNAL_H

#include <stdint.h>

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

#endif /* DYNBATCH_GRAMMAR_INTERNAL_H */
