/*
 * grammar_pool.h - compiled grammars shared by their source, each with
 * one mask cache (docs/DESIGN.md 2.8).
 *
 * A batch of requests with the same response_format brings the same
 * grammar many times over.  Compiling it once and keeping one mask cache
 * for all its rows means the cache's automaton and tables (built lazily,
 * milliseconds per grammar) are paid once, not once per request.  An
 * entry is found by its source bytes (compared in full); it lives while
 * a row holds it, and, idle, until max_idle others are idle (least
 * recently used first out).  Single-threaded, as a mask cache is.
 */
#ifndef DYNBATCH_GRAMMAR_POOL_H
#define DYNBATCH_GRAMMAR_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar.h"
#include "grammar/token_mask.h"

struct grammar_pool;

struct grammar_pool_entry {
	const struct grammar *grammar;
	struct grammar_mask_cache *cache;	/* every row of it shares it */
};

/* Caches of about cache_bytes for n_vocab tokens.  NULL on no memory. */
struct grammar_pool *grammar_pool_create(uint32_t n_vocab, size_t cache_bytes,
					 uint32_t max_idle);
void grammar_pool_destroy(struct grammar_pool *p);

/*
 * The entry of source[0 .. len) (any bytes), compiled on first sight;
 * one more holder.  NULL with err written when it does not compile, or
 * on no memory.
 */
const struct grammar_pool_entry *grammar_pool_get(struct grammar_pool *p,
						  const char *source, uint32_t len,
						  char *err, size_t err_len);
/* A holder of e lets go. */
void grammar_pool_put(struct grammar_pool *p, const struct grammar_pool_entry *e);

#endif /* DYNBATCH_GRAMMAR_POOL_H */
