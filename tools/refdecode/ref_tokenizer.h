/*
 * ref_tokenizer.h - the naive reference encoder: llama2.c's encode() loop
 * written again (every adjacent pair rescanned after each merge, O(n^2)),
 * with its own lookup (binary search over the pieces sorted by bytes).
 * tests/unit/test_tokenizer.c holds lib/text/tokenizer.c's fast encoder to it
 * token for token; tools/bench_tokenizer times the two.
 */
#ifndef DYNBATCH_REF_TOKENIZER_H
#define DYNBATCH_REF_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "text/tokenizer.h"

struct ref_tokenizer;

/* The reference's view of a loaded tokenizer (pieces and scores); NULL
 * when out of memory. */
struct ref_tokenizer *ref_tokenizer_new(const struct tokenizer *t);
void ref_tokenizer_free(struct ref_tokenizer *r);

/* tokenizer_encode()'s contract; out must hold tokenizer_encode_max(len).
 * Returns the token count, or -1 when out of memory. */
long ref_tokenizer_encode(const struct ref_tokenizer *r, const char *text,
			  size_t len, bool bos, bool eos, int32_t *out);

#endif /* DYNBATCH_REF_TOKENIZER_H */
