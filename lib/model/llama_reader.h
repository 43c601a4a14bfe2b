/*
 * llama_reader.h - what llama_checkpoint.c and the readers of each file
 * layout share: the readers' entry points, and the header and size
 * checks they have in common.  Private to lib/model/llama_*.c.
 *
 * A reader fills struct llama_checkpoint (its config and its tensors,
 * pointing into data) and nothing else: it neither maps the file nor
 * knows the forward pass.  A new format (GGUF, issue 25) is one more
 * reader and one more line of llama_checkpoint.c's table.
 */
#ifndef DYNBATCH_LLAMA_READER_H
#define DYNBATCH_LLAMA_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

/* Defined in llama_checkpoint.h, which the readers include: declared
 * here only, so that this header stays below it (no include circle). */
struct llama_checkpoint;
struct llama_config;

/* The 7 int32 of both llama2.c headers, in file order. */
enum { LLAMA_H_DIM, LLAMA_H_HIDDEN, LLAMA_H_LAYERS, LLAMA_H_HEADS,
       LLAMA_H_KV_HEADS, LLAMA_H_VOCAB, LLAMA_H_SEQ, LLAMA_H_N };

/* Running size in floats, saturating to "overflowed". */
struct llama_size {
	uint64_t floats;
	bool overflow;
};

/* size += a * b * c floats. */
void llama_size_add(struct llama_size *s, uint64_t a, uint64_t b, uint64_t c);

/* Floats of every layer tensor together (the same in every fp32 layout). */
void llama_size_layers(struct llama_size *s, const struct llama_config *c);

/* *bytes = header + 4 * floats; false when it overflows. */
bool llama_size_bytes(uint64_t floats, uint64_t header, uint64_t *bytes);

/* The little-endian int32 at p. */
int32_t llama_read_i32(const unsigned char *p);

/*
 * Check the 7 header ints (vocab already made positive) and fill cfg.
 * Returns 0 or -EINVAL after writing err.
 */
int llama_config_check(struct llama_config *cfg, const int32_t *h,
		       const char *name, char *err, size_t err_len);

/* Write the "header implies N bytes but the file has M" error; -EINVAL. */
int llama_size_mismatch(const char *name, const char *layout, uint64_t want,
			size_t have, char *err, size_t err_len);

/*
 * An F32 tensor of n_layers [rows][cols] matrices at *p, which moves
 * past it; sizes already checked against the file.
 */
struct tensor llama_f32_take(const float **p, uint32_t n_layers,
			     uint32_t rows, uint32_t cols);

/*
 * The readers, each given a file its layout claims (llama_checkpoint.c
 * tells them apart): 0, or -EINVAL after writing a one-line reason.
 */
int llama_read_legacy(struct llama_checkpoint *ck, const unsigned char *data,
		      size_t size, const char *name, char *err,
		      size_t err_len);
int llama_read_ak42(struct llama_checkpoint *ck, const unsigned char *data,
		    size_t size, const char *name, char *err, size_t err_len);
/* GGUF (llama_read_gguf.c): also -ENOMEM; its per-layer parts go in
 * ck->reader_mem. */
int llama_read_gguf(struct llama_checkpoint *ck, const unsigned char *data,
		    size_t size, const char *name, char *err, size_t err_len);

#endif /* DYNBATCH_LLAMA_READER_H */
