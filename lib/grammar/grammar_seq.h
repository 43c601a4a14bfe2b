/*
 * grammar_seq.h - one generated sequence held to a grammar: the matcher
 * after the tokens generated so far, kept in step with a row that grows
 * one token (or is sent back) at a time, and the mask of its next token.
 *
 * The owner (the worker's per-slot state, the in-process step, the
 * coordinator's check at commit) hands the row's generated tokens each
 * time; the seq keeps its own copy of the ones it has fed the matcher,
 * so a row that was sent back or rewritten is replayed from the start
 * instead of trusted (docs/DESIGN.md 2.8).
 */
#ifndef DYNBATCH_GRAMMAR_SEQ_H
#define DYNBATCH_GRAMMAR_SEQ_H

#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar.h"
#include "grammar/token_mask.h"

struct grammar_seq;

/*
 * A sequence at the start of g over v, with a mask cache of about
 * cache_bytes (0: none); g and v must outlive it.  NULL on no memory.
 */
struct grammar_seq *grammar_seq_create(const struct grammar *g,
				       const struct grammar_vocab *v,
				       size_t cache_bytes);
/* The same with a cache shared with other sequences of g (borrowed: it
 * must outlive the sequence; NULL: none). */
struct grammar_seq *grammar_seq_create_shared(const struct grammar *g,
					      const struct grammar_vocab *v,
					      struct grammar_mask_cache *cache);
void grammar_seq_destroy(struct grammar_seq *s);

/*
 * Bring the matcher to the state after gen[0 .. n): only the new tokens
 * are fed when gen starts with what was fed before, else it starts over.
 * 0; -ENOENT when a token of gen breaks the grammar (the seq then stays
 * at the longest prefix that did not); -E2BIG when the matcher's stack
 * set would grow past its bounds; -ENOMEM.
 */
int grammar_seq_sync(struct grammar_seq *s, const int32_t *gen, uint32_t n);

/* The tokens allowed after what was synced (token_mask.h's format). */
int grammar_seq_mask(struct grammar_seq *s, uint64_t *mask);

/* Tokens fed so far (the n of the last successful sync). */
uint32_t grammar_seq_length(const struct grammar_seq *s);

#endif /* DYNBATCH_GRAMMAR_SEQ_H */
