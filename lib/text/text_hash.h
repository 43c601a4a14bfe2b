/*
 * text_hash.h - the string hash both tokenizers' lookup tables use
 * (tokenizer.c, gguf_vocab.c): FNV-1a, continued over a second string
 * to hash a concatenation without building it, then mixed before
 * masking because FNV's low bits alone are weak.
 */
#ifndef DYNBATCH_TEXT_HASH_H
#define DYNBATCH_TEXT_HASH_H

#include <stddef.h>
#include <stdint.h>

#define TEXT_HASH_OFFSET 0xCBF29CE484222325ull

/* FNV-1a state h continued over s[0..len). */
static inline uint64_t text_hash_continue(uint64_t h, const char *s,
					  size_t len)
{
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001B3ull;
	return h;
}

/* A finished hash, its bits spread for masking to a table size. */
static inline uint64_t text_hash_mix(uint64_t h)
{
	h ^= h >> 29;
	h *= 0xBF58476D1CE4E5B9ull;
	return h ^ (h >> 32);
}

#endif /* DYNBATCH_TEXT_HASH_H */
