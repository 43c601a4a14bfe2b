/*
 * token_mask.h - which tokens a grammar matcher allows next, as a bitmask.
 *
 * A grammar_vocab is a trie over the vocabulary's byte strings (built
 * once per model; lib/text can hand over its pieces).  The mask of a
 * matcher state is found by walking the trie depth first with the
 * matcher, cutting every branch whose bytes kill it: token t is allowed
 * iff feeding its bytes to the matcher succeeds (returns 0).  Empty
 * tokens (special ones) are never allowed; the EOS token is allowed iff
 * the matcher is accepting.
 *
 * A grammar_mask_cache remembers masks by matcher state (the canonical
 * key of grammar_matcher_key(), compared in full, so a hash collision
 * costs a recomputation, never a wrong mask).  It is direct mapped and
 * its memory is fixed at creation.  One cache serves one (grammar,
 * vocabulary) pair: states of different grammars must not share it.
 *
 * A miss is made cheap by what the cache keeps besides masks: the
 * matcher states met, as an automaton over bytes (so a trie walk reads a
 * table instead of stepping a matcher), and per-suffix tables: for each
 * run of top positions a stack has had, the tokens it decides alone, so
 * a state's mask is a union of tables plus a check of the few tokens no
 * table decides.  Both are built lazily and capped; past a cap a mask is
 * walked the plain way.  The cache remembers the grammar of the first
 * matcher it serves and forgets its automaton and tables when another
 * comes, but its masks by state are not told apart by grammar.
 *
 * Masks are n_vocab bits in uint64_t words, token t in word t / 64,
 * bit t % 64.
 */
#ifndef DYNBATCH_TOKEN_MASK_H
#define DYNBATCH_TOKEN_MASK_H

#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar.h"

struct grammar_vocab;
struct grammar_mask_cache;

/* The most end tokens a vocabulary has (EOS, end of turn, ...). */
#define GRAMMAR_MAX_ENDS 16

/* eos_id < 0: none.  NULL on allocation failure. */
struct grammar_vocab *grammar_vocab_create(const uint8_t *const *bytes,
					   const uint32_t *lens,
					   uint32_t n_vocab, int32_t eos_id);
/* The same with n_ends end tokens (ids out of range, and those past
 * GRAMMAR_MAX_ENDS, are left out): each is allowed iff the matcher
 * accepts, and accepting it leaves the matcher as it is. */
struct grammar_vocab *grammar_vocab_create_ends(const uint8_t *const *bytes,
						const uint32_t *lens,
						uint32_t n_vocab,
						const int32_t *ends,
						uint32_t n_ends);
void grammar_vocab_destroy(struct grammar_vocab *v);
uint32_t grammar_vocab_size(const struct grammar_vocab *v);

static inline size_t grammar_mask_words(uint32_t n_vocab)
{
	return ((size_t)n_vocab + 63) / 64;
}

/* mask = the tokens m allows (cache may be NULL): 0 or -ENOMEM. */
int grammar_mask_compute(const struct grammar_vocab *v,
			 const struct grammar_matcher *m,
			 struct grammar_mask_cache *cache, uint64_t *mask);

/*
 * Advance m by token t: 0, or -ENOENT (not allowed; m unchanged).  EOS
 * leaves m as it is and succeeds iff m is accepting.
 */
int grammar_matcher_accept_token(struct grammar_matcher *m,
				 const struct grammar_vocab *v, uint32_t t);

/* A cache of at most about max_bytes; NULL on allocation failure. */
struct grammar_mask_cache *grammar_mask_cache_create(uint32_t n_vocab,
						     size_t max_bytes);
void grammar_mask_cache_destroy(struct grammar_mask_cache *c);
void grammar_mask_cache_stats(const struct grammar_mask_cache *c,
			      uint64_t *hits, uint64_t *misses);

/*
 * A cache with a cap for each part: masks by state (slot_bytes), the
 * state automaton (dfa_bytes) and the per-suffix tables (table_bytes);
 * grammar_mask_cache_create() gives them a half, a quarter and a quarter.
 */
struct grammar_mask_cache *grammar_mask_cache_create_limits(
	uint32_t n_vocab, size_t slot_bytes, size_t dfa_bytes,
	size_t table_bytes);

/*
 * Per-suffix tables of the top depth positions of a stack from now on
 * (0: the default, 3; at most 8).  Masks are the same at any depth; a
 * tuning and test knob.
 */
void grammar_mask_cache_set_split_depth(struct grammar_mask_cache *c,
					uint32_t depth);

/* How a cache's misses were served, and what its parts hold. */
struct grammar_mask_stats {
	uint64_t hits, misses;	/* of the masks by state */
	uint64_t n_split;	/* misses served by the per-suffix tables */
	uint64_t n_dfa;		/* by a whole walk over the automaton */
	uint64_t n_plain;	/* by the plain walk (a cap was reached) */
	uint32_t n_tables;	/* per-suffix tables built */
	size_t table_bytes;	/* their memory */
	double build_s;		/* CPU seconds spent building them */
	uint64_t n_checked;	/* tokens no table decided, fed whole */
	uint32_t n_states;	/* automaton states */
	size_t dfa_bytes;	/* their memory */
	uint64_t dfa_full;	/* times a state did not fit */
};

void grammar_mask_cache_get_stats(const struct grammar_mask_cache *c,
				  struct grammar_mask_stats *st);

#endif /* DYNBATCH_TOKEN_MASK_H */
