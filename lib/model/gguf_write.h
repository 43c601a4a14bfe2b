/*
 * gguf_write.h - build a GGUF version 3 file in memory, for tests and
 * tools (bin/make_gguf): keys of each value type, arrays, tensors, an
 * alignment.
 *
 * The writer lays out bytes; it checks only what the layout needs (a
 * key's type, a tensor's dims and type give its size) and not what
 * makes a file good: duplicate keys or names, a general.alignment that
 * is not a power of two are written as asked, so that tests can build
 * the files the reader (gguf.h) must refuse.
 *
 * Tensors are placed in the order they are added, each at the next
 * multiple of the alignment.  A tensor added without its bytes (data
 * NULL) reserves its place only: the caller then writes
 * gguf_write_head() and streams each tensor's bytes and padding itself
 * (gguf_write_pad()), so a large model never sits in memory.
 *
 * Errors are sticky: after the first failure every call returns it and
 * the file is not produced.
 */
#ifndef DYNBATCH_GGUF_WRITE_H
#define DYNBATCH_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"
#include "util/strbuf.h"

struct gguf_writer {
	struct strbuf kv;	/* the key-value section */
	struct strbuf info;	/* the tensor infos */
	struct strbuf data;	/* tensor bytes, each padded */
	uint64_t n_kv;
	uint64_t n_tensors;
	uint64_t data_bytes;	/* the data section so far, padded */
	uint32_t alignment;
	bool data_missing;	/* some tensor was added without bytes */
	int err;		/* the first failure, or 0 */
};

/*
 * Start an empty file whose tensors align to alignment (a power of two;
 * any other value is -EINVAL).  An alignment other than the default
 * also writes the general.alignment key.  0 or -EINVAL / -ENOMEM.
 * Release with gguf_writer_release() either way.
 */
int gguf_writer_init(struct gguf_writer *w, uint32_t alignment);
void gguf_writer_release(struct gguf_writer *w);

/*
 * A key with a scalar value of type (not string or array): value points
 * at the C type of that width (uint8_t for bool).  0 or a negative
 * errno (-EINVAL for string, array or an unknown type).
 */
int gguf_write_kv(struct gguf_writer *w, const char *key,
		  enum gguf_vtype type, const void *value);
int gguf_write_u32(struct gguf_writer *w, const char *key, uint32_t v);
int gguf_write_f32(struct gguf_writer *w, const char *key, float v);
int gguf_write_bool(struct gguf_writer *w, const char *key, bool v);
/* A string value of len bytes (any bytes). */
int gguf_write_str(struct gguf_writer *w, const char *key, const char *s,
		   size_t len);

/* An array of n fixed-size elements of type, a C array of that width. */
int gguf_write_array(struct gguf_writer *w, const char *key,
		     enum gguf_vtype type, uint64_t n, const void *elems);
/* An array of n strings; len[i] their lengths (NULL: strlen each). */
int gguf_write_str_array(struct gguf_writer *w, const char *key, uint64_t n,
			 const char *const *s, const size_t *len);

/*
 * A tensor of ggml type (gguf_types.h) and n_dims dims (dims[0] the row
 * length) with its bytes, exactly gguf_type_bytes() of them, or NULL to
 * reserve its place (see the file comment).  *offset_out, when not
 * NULL, gets its offset in the data section.  0 or -EINVAL (a type not
 * read, a row not whole blocks, 0 or > 4 dims) / -ENOMEM.
 */
int gguf_write_tensor(struct gguf_writer *w, const char *name,
		      uint32_t type, uint32_t n_dims, const uint64_t *dims,
		      const void *data, uint64_t *offset_out);

/* Append the header, keys, infos and padding (everything before the
 * data section) to out.  0 or the sticky error. */
int gguf_write_head(struct gguf_writer *w, struct strbuf *out);

/* Append the whole file to out; -EINVAL when a tensor has no bytes. */
int gguf_write_finish(struct gguf_writer *w, struct strbuf *out);

/* Padding after n bytes to reach a multiple of alignment. */
static inline uint64_t gguf_write_pad(uint64_t n, uint32_t alignment)
{
	return (alignment - n % alignment) % alignment;
}

#endif /* DYNBATCH_GGUF_WRITE_H */
