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

#endif /* DYNBATCH_TOKEN_MASK_H */
