/*
 * gguf_vocab_read.h - the tokenizer and chat template a GGUF file holds
 * (its tokenizer.* keys), for the coordinator, which needs them without
 * the model: the tokenizer.ggml.* keys become a tokenizer_vocab_spec
 * (text/gguf_vocab_spec.h) and gguf_tokenizer_create() builds it.
 *
 * Keys read (llama.cpp's names; docs/DESIGN.md 2.6.1):
 *   tokenizer.ggml.model       string, "llama" or "gpt2"; absent: the
 *                              file has no tokenizer (-ENOENT)
 *   tokenizer.ggml.pre         string (gpt2's pre-tokenizer)
 *   tokenizer.ggml.tokens      array of strings, the vocabulary
 *   tokenizer.ggml.scores      array of f32, one a token (llama)
 *   tokenizer.ggml.token_type  array of i32, one a token (absent: normal)
 *   tokenizer.ggml.merges      array of strings "left right" (gpt2)
 *   tokenizer.ggml.{bos,eos,eot,unknown,padding}_token_id  integers
 *   tokenizer.ggml.add_bos_token, add_eos_token, add_space_prefix  bool
 *   tokenizer.chat_template    string
 * Absent flags take llama.cpp's defaults: add_bos true for "llama" and
 * for gpt2's "llama-bpe" (Llama 3), else false; add_eos false;
 * add_space_prefix true for "llama".
 */
#ifndef DYNBATCH_GGUF_VOCAB_READ_H
#define DYNBATCH_GGUF_VOCAB_READ_H

#include <stddef.h>

struct gguf_file;
struct gguf_tokenizer;

/*
 * The file's tokenizer into *out.  0; -ENOENT when the file has none
 * (no tokenizer.ggml.model); -EINVAL after writing err ("gguf 'NAME':
 * ..." naming the key, or what the tokenizer refused); -ENOMEM.
 */
int gguf_vocab_read(const struct gguf_file *f, const char *name,
		    struct gguf_tokenizer **out, char *err, size_t err_len);

/*
 * tokenizer.chat_template as a malloc'd NUL-terminated string into
 * *out (NULL when absent).  0; -EINVAL (not a string, or one holding a
 * NUL) after writing err; -ENOMEM.
 */
int gguf_chat_template_read(const struct gguf_file *f, const char *name,
			    char **out, char *err, size_t err_len);

/*
 * Both from the file at path (mapped for the call only): *tok (the
 * -ENOENT above leaves it NULL and returns 0) and *chat_template.
 * 0, or a negative errno after writing err.
 */
int gguf_vocab_read_file(const char *path, struct gguf_tokenizer **tok,
			 char **chat_template, char *err, size_t err_len);

#endif /* DYNBATCH_GGUF_VOCAB_READ_H */
