/*
 * vocab_file.h - a tokenizer vocabulary in the text format
 * tests/tokenizers/export_vocab.js writes (the real tokenizers' vocab,
 * as a GGUF file would hold it), read into a tokenizer_vocab_spec for
 * bin/tok_compare and bin/make_gguf --vocab-file.
 *
 * Format, one record a line; hex is the bytes in hex, "-" empty:
 * "key value" lines (model, pre, bos, eos, eot, unk, pad, add_bos,
 * add_eos, add_space_prefix), "tokens N" then N lines "type score hex",
 * "merges M" then M lines "hex".
 */
#ifndef DYNBATCH_TOOLS_VOCAB_FILE_H
#define DYNBATCH_TOOLS_VOCAB_FILE_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "text/gguf_vocab_spec.h"

struct vocab_file {
	struct tokenizer_vocab_spec spec;
	char **texts;
	uint32_t *lens;
	float *scores;
	int32_t *types;
	char **merges;
	uint32_t *merge_lens;
	char model[32];
	char pre[64];
};

/* Read path into v (spec pointing into v's arrays).  0, or -EINVAL for
 * a bad file, or the open error. */
int vocab_file_load(const char *path, struct vocab_file *v);

/* Free what vocab_file_load() allocated (also after it failed). */
void vocab_file_free(struct vocab_file *v);

/* Decode hex ("-" for empty) into a new NUL-terminated buffer of *len
 * bytes; NULL on a bad digit or no memory. */
char *vocab_unhex(const char *h, uint32_t *len);

/* One line of f without its newline into *buf (getline's), or NULL. */
char *vocab_read_line(FILE *f, char **buf, size_t *cap);

#endif /* DYNBATCH_TOOLS_VOCAB_FILE_H */
