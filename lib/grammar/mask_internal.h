/*
 * mask_internal.h - the token mask's parts, shared by token_mask.c (the
 * trie and the cache), mask_dfa.c (matcher states as an automaton),
 * mask_walk.c (the trie walks) and mask_split.c (the per-suffix tables).
 *
 * Layers, top first: token_mask.c -> mask_split.c -> mask_walk.c ->
 * mask_dfa.c -> the matcher.
 */
#ifndef DYNBATCH_MASK_INTERNAL_H
#define DYNBATCH_MASK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar.h"
#include "grammar/grammar_internal.h"

#define MASK_NONE UINT32_MAX

/* ------------------------------------------------------------------ */
/* The vocabulary trie (built in token_mask.c)                         */
/* ------------------------------------------------------------------ */

/*
 * Nodes are in depth-first order and the non-empty tokens sorted by
 * bytes, so a node's subtree holds the tokens ids[tok_begin..sub_end)
 * and its own ones (several ids may share bytes) ids[tok_begin..tok_end).
 */
struct tnode {
	uint32_t first_child, next_sibling;
	uint32_t tok_begin, tok_end;	/* into ids */
	uint32_t sub_end;		/* into ids */
	uint8_t byte;
};

#define MASK_MAX_ENDS 16	/* GRAMMAR_MAX_ENDS */

struct grammar_vocab {
	uint32_t n_vocab;
	/* the tokens that end a sentence (EOS, a chat's end of turn):
	 * allowed iff the matcher accepts; never in the trie */
	uint32_t ends[MASK_MAX_ENDS];
	uint32_t n_ends;
	struct tnode *nodes;
	uint32_t n_nodes;
	uint32_t *ids;		/* non-empty tokens sorted by bytes */
	uint32_t n_ids;
	uint32_t max_len;
	const uint8_t **bytes;	/* copies */
	uint32_t *lens;
};

/* grammar_mask_words(), which this header may not include (layers) */
static inline size_t mask_words(uint32_t n_vocab)
{
	return ((size_t)n_vocab + 63) / 64;
}

static inline void mask_set(uint64_t *mask, uint32_t t)
{
	mask[t / 64] |= 1ull << (t % 64);
}

/* ------------------------------------------------------------------ */
/* Matcher states as a lazy automaton (mask_dfa.c)                     */
/* ------------------------------------------------------------------ */

/*
 * Every state met is interned once (its key, a row of 256 successors
 * filled as they are asked for).  A successor is a state id or one of:
 */
#define DFA_UNKNOWN UINT32_MAX		/* not computed yet */
#define DFA_NOENT (UINT32_MAX - 1)	/* the byte is refused */
#define DFA_TOOBIG (UINT32_MAX - 2)	/* the step passed a cap (-E2BIG) */
#define DFA_MAX_STATES (UINT32_MAX - 3)

struct mask_dfa {
	const struct grammar *g;	/* of every state; NULL: none yet */
	struct grammar_matcher *scratch;	/* replays a state's step */
	uint32_t n_states, cap_states;
	uint32_t *next;		/* (state, byte): successor */
	uint32_t *key_off;	/* (state): its key in words */
	uint32_t *key_len;	/* (state) */
	uint64_t *hash;		/* (state) */
	uint8_t *accepting;	/* (state): holds the empty stack */
	uint32_t *n_stacks;	/* (state) */
	/* (state): the most any computed step out of it cost */
	struct grammar_step_stats *out_max;
	uint32_t *words;
	size_t n_words, cap_words;
	uint32_t *tab;		/* open addressing: state id + 1, 0 empty */
	uint32_t tab_mask;
	size_t max_bytes;	/* cap on all of the above */
	size_t used;		/* bytes they take */
	uint64_t n_full;	/* times a new state did not fit */
};

struct mask_dfa *mask_dfa_create(size_t max_bytes);
void mask_dfa_destroy(struct mask_dfa *d);
/* Forget every state (keeps the buffers). */
void mask_dfa_reset(struct mask_dfa *d);
/*
 * Make d the automaton of m's grammar (a grammar other than its states'
 * resets it; the doc of token_mask.h forbids reusing an address for
 * another grammar): 0 or -ENOMEM.
 */
int mask_dfa_bind(struct mask_dfa *d, const struct grammar_matcher *m);
/*
 * *id = the state with this key (of the bound grammar), interned if new:
 * 0, -ENOSPC (past the cap; nothing changed) or -ENOMEM.
 */
int mask_dfa_intern(struct mask_dfa *d, const uint32_t *key,
		    uint32_t n_words, uint32_t *id);
/* Compute successor (s, b) into *out: 0, -ENOSPC or -ENOMEM. */
int mask_dfa_compute(struct mask_dfa *d, uint32_t s, uint8_t b,
		     uint32_t *out);

static inline int mask_dfa_next(struct mask_dfa *d, uint32_t s, uint8_t b,
				uint32_t *out)
{
	uint32_t n = d->next[(size_t)s * 256 + b];

	if (n != DFA_UNKNOWN) {
		*out = n;
		return 0;
	}
	return mask_dfa_compute(d, s, b, out);
}

static inline const uint32_t *mask_dfa_key(const struct mask_dfa *d,
					   uint32_t s)
{
	return d->words + d->key_off[s];
}

/* ------------------------------------------------------------------ */
/* Trie walks over the automaton (mask_walk.c)                         */
/* ------------------------------------------------------------------ */

/*
 * A split walk runs from a stack's top positions alone and sorts the
 * tokens: accepted without leaving them (acc), refused without leaving
 * them (neither), or undecided (unc, as ranges of ids): they reach the
 * bottom of the positions while bytes remain or at the end, or pass a
 * cap.  The walk also keeps the most a step along the way cost.
 */
struct walk_split {
	bool whole;		/* the positions are the whole stack */
	uint32_t *unc;		/* [begin, end) pairs into ids */
	uint32_t n_unc, cap_unc;	/* in pairs */
	struct grammar_step_stats max;
	uint32_t max_stacks;	/* most stacks of a state met */
};

/*
 * Walk the trie from state root, OR-ing the tokens accepted into acc;
 * split NULL: a plain walk (every refusal cuts).  0, -ENOSPC (the
 * automaton is full) or -ENOMEM.
 */
int mask_walk(const struct grammar_vocab *v, struct mask_dfa *d,
	      uint32_t root, uint64_t *acc, struct walk_split *split);
/*
 * Decide the tokens ids[b..e) of the ranges rng ([b, e) pairs, sorted,
 * disjoint) by a walk from state root: each one's bit in mask is set iff
 * root accepts its bytes.  0, -ENOSPC or -ENOMEM.
 */
int mask_walk_ranges(const struct grammar_vocab *v, struct mask_dfa *d,
		     uint32_t root, const uint32_t *rng, uint32_t n_rng,
		     uint64_t *mask);

/* ------------------------------------------------------------------ */
/* Per-suffix tables (mask_split.c)                                    */
/* ------------------------------------------------------------------ */

/*
 * How many top positions of a stack key a table (the rest is its base):
 * 3 holds a JSON string's closing quote, so a string's inside is decided
 * by its table but for the tokens that close it.  Any depth from 1 to
 * SPLIT_DEPTH_MAX gives the same masks (the tests try them all).
 */
#define SPLIT_DEPTH 3
#define SPLIT_DEPTH_MAX 8

struct mask_split;

struct mask_split *mask_split_create(uint32_t n_vocab, uint32_t n_ids,
				     size_t max_bytes);
void mask_split_destroy(struct mask_split *s);
void mask_split_reset(struct mask_split *s);
/* Tables of the top depth positions from now on (1..SPLIT_DEPTH_MAX). */
void mask_split_set_depth(struct mask_split *s, uint32_t depth);
/*
 * mask = the tokens the state key (of d's grammar) allows, but EOS,
 * from the tables of its stacks: 0, -ENOSPC (a table or a state did
 * not fit, or the state is too near a cap to split: do a plain walk) or
 * -ENOMEM.
 */
int mask_split_compute(struct mask_split *s, const struct grammar_vocab *v,
		       struct mask_dfa *d, const uint32_t *key,
		       uint32_t n_words, uint64_t *mask);
void mask_split_counts(const struct mask_split *s, uint32_t *n_tables,
		       size_t *bytes, double *build_s, uint64_t *n_checked);

#endif /* DYNBATCH_MASK_INTERNAL_H */
