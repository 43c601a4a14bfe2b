/*
 * stop_matcher.h - finds stop sequences in a stream of generated tokens.
 *
 * An Aho-Corasick automaton over int32 tokens, built once per request from
 * its stop sequences (a stop token is a sequence of length one).  Feeding
 * one token costs O(1) amortised, whatever the number and length of the
 * sequences: goto edges live in one open-addressing hash table keyed by
 * (state, token), and each state stores the length of the longest stop
 * sequence that is a suffix of the text read so far, so a match never
 * needs a walk up the failure links.
 *
 * The automaton is immutable after stop_matcher_create(); the per-request
 * cursor is a plain uint32_t state, starting at STOP_MATCHER_ROOT.
 */
#ifndef DYNBATCH_STOP_MATCHER_H
#define DYNBATCH_STOP_MATCHER_H

#include <stdint.h>

#define STOP_MATCHER_ROOT 0u

struct stop_matcher;

/*
 * Build the automaton for n_seqs sequences; seqs[i] has lens[i] > 0
 * tokens (the caller rejects empty sequences).  Duplicate sequences are
 * fine.  Returns NULL on allocation failure or a zero length.
 */
struct stop_matcher *stop_matcher_create(const int32_t *const *seqs,
					 const uint32_t *lens, uint32_t n_seqs);

/* Free the automaton.  Accepts NULL. */
void stop_matcher_destroy(struct stop_matcher *sm);

/*
 * Advance from state by one token.  Returns the new state and sets
 * *match_len to the length of the longest stop sequence that is a suffix
 * of all tokens fed since STOP_MATCHER_ROOT (0 when none matches).
 */
uint32_t stop_matcher_feed(const struct stop_matcher *sm, uint32_t state,
			   int32_t token, uint32_t *match_len);

/*
 * How many of the newest tokens fed may still turn out to be the start of
 * a stop sequence: the depth of state, i.e. the longest suffix of the
 * tokens fed that is a prefix of some sequence.  A streaming server holds
 * these back; every older token is final whatever comes next.
 */
uint32_t stop_matcher_pending(const struct stop_matcher *sm, uint32_t state);

/* Length of the longest stop sequence (0 for none). */
uint32_t stop_matcher_max_len(const struct stop_matcher *sm);

/* Verify every invariant of the automaton; 0 when it holds, else -EINVAL. */
int stop_matcher_check(const struct stop_matcher *sm);

#endif /* DYNBATCH_STOP_MATCHER_H */
