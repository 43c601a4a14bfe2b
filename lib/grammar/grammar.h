/*
 * grammar.h - GBNF grammars compiled to a pushdown matcher over bytes.
 *
 * grammar_parse() reads llama.cpp's GBNF syntax (rules, |, groups, * + ?
 * {m,n}, "strings", [classes], ., escapes, # comments) into an immutable
 * struct grammar; a grammar_matcher is one decoding position in it: a set
 * of stacks (one per live parse), fed bytes one at a time, UTF-8 aware
 * (a character class matches a whole code point; a partial code point
 * keeps only the stacks that some completion could still satisfy).
 *
 * Errors: constructors return NULL and write a message naming the line
 * and column into err; a matcher step returns 0, -ENOENT (the byte is
 * not allowed; the matcher is left unchanged) or -E2BIG (the stack set
 * would pass GRAMMAR_MAX_STACKS or GRAMMAR_MAX_DEPTH; unchanged too).
 */
#ifndef DYNBATCH_GRAMMAR_H
#define DYNBATCH_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bounds on hostile grammars and on a matcher's state. */
#define GRAMMAR_MAX_NEST 64		/* ( ) nesting in the source */
#define GRAMMAR_MAX_ELEMS (1u << 20)	/* elements after expanding {m,n} */
#define GRAMMAR_MAX_REPEAT 10000	/* m and n of {m,n} */
#define GRAMMAR_MAX_STACKS 1024		/* live parses of one matcher */
#define GRAMMAR_MAX_DEPTH 512		/* rule nesting of one parse */

struct grammar;
struct grammar_matcher;

/* Compile GBNF source (len bytes, any bytes); start rule "root". */
struct grammar *grammar_parse(const char *src, size_t len, char *err,
			      size_t err_len);
void grammar_destroy(struct grammar *g);

/* A matcher at the start of g's root rule; g must outlive it. */
struct grammar_matcher *grammar_matcher_create(const struct grammar *g);
struct grammar_matcher *grammar_matcher_clone(const struct grammar_matcher *m);
/* dst = src (same grammar), reusing dst's buffers: 0 or -ENOMEM. */
int grammar_matcher_copy(struct grammar_matcher *dst,
			 const struct grammar_matcher *src);
void grammar_matcher_destroy(struct grammar_matcher *m);

int grammar_matcher_accept_byte(struct grammar_matcher *m, uint8_t b);
/* All of bytes or nothing: on an error m is as before. */
int grammar_matcher_accept_bytes(struct grammar_matcher *m,
				 const uint8_t *bytes, size_t n);
/* The bytes so far form a complete sentence of the root rule. */
bool grammar_matcher_is_accepting(const struct grammar_matcher *m);

/*
 * The canonical form of the state (same for equal states, whatever path
 * led there) as n_words words, and its 64-bit hash: the mask cache's key.
 */
const uint32_t *grammar_matcher_key(const struct grammar_matcher *m,
				    uint32_t *n_words);
uint64_t grammar_matcher_hash(const struct grammar_matcher *m);

#endif /* DYNBATCH_GRAMMAR_H */
