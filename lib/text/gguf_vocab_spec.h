/*
 * gguf_vocab_spec.h - a tokenizer vocabulary as a GGUF file holds it
 * (the tokenizer.ggml.* keys), the input of gguf_tokenizer_create()
 * (gguf_tokenizer.h): token texts, scores and types, merges, special
 * ids and flags.  Header only: both the public API and the inside of
 * the tokenizer (gguf_tokenizer_impl.h) read it.
 */
#ifndef DYNBATCH_GGUF_VOCAB_SPEC_H
#define DYNBATCH_GGUF_VOCAB_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* tokenizer.ggml.token_type values (0, undefined, is taken as normal). */
enum gguf_token_type {
	GGUF_TOKEN_UNDEFINED = 0,
	GGUF_TOKEN_NORMAL = 1,
	GGUF_TOKEN_UNKNOWN = 2,
	GGUF_TOKEN_CONTROL = 3,
	GGUF_TOKEN_USER_DEFINED = 4,
	GGUF_TOKEN_UNUSED = 5,
	GGUF_TOKEN_BYTE = 6,
};

/* The largest vocabulary, merge list and token accepted. */
#define GGUF_TOKENIZER_MAX_VOCAB (1u << 24)
#define GGUF_TOKENIZER_MAX_MERGES (1u << 24)
#define GGUF_TOKENIZER_MAX_TOKEN_LEN (1u << 16)
/* The longest text encode() takes, in bytes: SentencePiece's escaped
 * text (3 bytes a space) must index with int32_t. */
#define GGUF_TOKENIZER_MAX_TEXT ((size_t)1 << 29)

/*
 * A vocabulary as a GGUF file holds it; nothing is kept after
 * gguf_tokenizer_create() returns (it copies).  Ids are -1 for none.
 */
struct tokenizer_vocab_spec {
	const char *model;		/* tokenizer.ggml.model: "llama" or "gpt2" */
	const char *pre;		/* tokenizer.ggml.pre (gpt2: required) */
	uint32_t n_tokens;
	const char *const *tokens;	/* token i is tokens[i][0..token_lens[i]) */
	const uint32_t *token_lens;
	const float *scores;		/* llama: required; gpt2: NULL or ignored */
	const int32_t *token_types;	/* NULL: all normal */
	uint32_t n_merges;		/* gpt2: "left right", rank = index */
	const char *const *merges;
	const uint32_t *merge_lens;
	int32_t bos_id;
	int32_t eos_id;
	int32_t eot_id;
	int32_t unk_id;
	int32_t pad_id;
	bool add_bos;
	bool add_eos;
	bool add_space_prefix;		/* llama only */
};

#endif /* DYNBATCH_GGUF_VOCAB_SPEC_H */
