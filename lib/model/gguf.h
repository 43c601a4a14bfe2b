/*
 * gguf.h - the GGUF file reader: versions 2 and 3, over bytes the caller
 * mapped read-only.  No I/O here, so a test or the fuzzer hands it any
 * bytes it likes.
 *
 * The layout (all numbers little-endian; a string is a u64 byte length
 * then that many bytes, no NUL):
 *
 *   "GGUF"  u32 version (2 or 3)  u64 n_tensors  u64 n_kv
 *   n_kv times:      string key, u32 value type, the value
 *   n_tensors times: string name, u32 n_dims, n_dims u64 dims (dims[0]
 *                    is the row length, the fastest-moving index),
 *                    u32 ggml type (gguf_types.h), u64 offset
 *   padding to the alignment, then the data section; a tensor's data is
 *   at data section + offset.
 *
 * A value is one of the scalar types below (bool is one byte, 0 or 1),
 * a string, or an array: u32 element type, u64 count, the elements.
 * Arrays of arrays are refused.  general.alignment (default 32) must be
 * a power of two.
 *
 * What a parsed file guarantees (gguf_check() verifies it):
 *   - every key, string and array lies inside the bytes, and no two keys
 *     or tensor names are equal;
 *   - every tensor has 1..4 dims, each > 0, whose product and byte size
 *     fit in 63 bits; a type dynbatch reads; a row length that is a
 *     whole number of its type's blocks; an aligned offset; its bytes
 *     inside the file, after the previous tensor's bytes (file order).
 * Nothing is copied: keys, strings and tensor data point into the
 * caller's bytes, which must outlive the struct.  A refusal names the
 * byte offset and what was expected there.
 */
#ifndef DYNBATCH_GGUF_H
#define DYNBATCH_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gguf_types.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_DIMS 4u
#define GGUF_MAX_KEY_BYTES 65535u	/* the spec's limit on a key */

/* The value types of the metadata (file format: never renumber). */
enum gguf_vtype {
	GGUF_VT_U8 = 0,
	GGUF_VT_I8 = 1,
	GGUF_VT_U16 = 2,
	GGUF_VT_I16 = 3,
	GGUF_VT_U32 = 4,
	GGUF_VT_I32 = 5,
	GGUF_VT_F32 = 6,
	GGUF_VT_BOOL = 7,
	GGUF_VT_STRING = 8,
	GGUF_VT_ARRAY = 9,
	GGUF_VT_U64 = 10,
	GGUF_VT_I64 = 11,
	GGUF_VT_F64 = 12,
	GGUF_VT_COUNT
};

/* Bytes in the mapping, not NUL-terminated. */
struct gguf_str {
	const char *ptr;
	uint64_t len;
};

/* One key and its value. */
struct gguf_kv {
	struct gguf_str key;
	enum gguf_vtype type;		/* the value's type */
	enum gguf_vtype elem_type;	/* an array's elements; else = type */
	uint64_t n;			/* an array's count; else 1 */
	const unsigned char *value;	/* first byte of the value (of an
					 * array: of its first element) */
	uint64_t value_bytes;		/* bytes from value to the value's end */
	uint64_t *str_off;		/* an array of strings: n offsets from
					 * value of each element's length
					 * prefix (malloc'd); else NULL */
};

/* A view of an array value (gguf_get_array()). */
struct gguf_array {
	enum gguf_vtype type;		/* the elements' type */
	uint64_t n;			/* elements */
	const struct gguf_kv *kv;	/* where they live */
};

struct gguf_tensor {
	struct gguf_str name;
	uint32_t n_dims;		/* 1..GGUF_MAX_DIMS */
	uint64_t dims[GGUF_MAX_DIMS];	/* dims[0] the row length; unused 1 */
	uint32_t type;			/* enum gguf_tensor_type */
	uint64_t offset;		/* from the data section's start */
	uint64_t n_elems;		/* product of dims */
	uint64_t n_bytes;		/* its size in the file */
	const void *data;		/* in the mapping */
	uint64_t info_at;		/* byte offset of its info, for messages */
};

struct gguf_file {
	const unsigned char *base;	/* the caller's bytes */
	size_t size;
	uint32_t version;		/* 2 or 3 */
	uint32_t alignment;		/* general.alignment or 32 */
	uint64_t data_offset;		/* start of the data section */
	uint64_t n_kv;
	struct gguf_kv *kv;		/* n_kv, file order (malloc'd) */
	size_t *kv_sorted;		/* indexes of kv by key (malloc'd) */
	uint64_t n_tensors;
	struct gguf_tensor *tensors;	/* n_tensors, file order (malloc'd) */
	size_t *tensor_sorted;		/* indexes of tensors by name */
};

/*
 * Parse data[0..size) (name is for messages only) into f.  Returns 0;
 * -EINVAL after writing a one-line reason into err ("gguf 'NAME': at
 * byte N: ..."); -ENOMEM.  On failure f holds nothing to free.  Undo a
 * success with gguf_free().
 */
int gguf_parse(struct gguf_file *f, const void *data, size_t size,
	       const char *name, char *err, size_t err_len);

/* Free what gguf_parse() allocated; accepts a zeroed struct. */
void gguf_free(struct gguf_file *f);

/* Verify every invariant listed in the file comment: 0 or -EINVAL. */
int gguf_check(const struct gguf_file *f);

/* The key of that name, or NULL. */
const struct gguf_kv *gguf_find_kv(const struct gguf_file *f,
				   const char *key);

/*
 * Typed getters.  Each returns 0; -ENOENT when the key is absent;
 * -EINVAL when its value has another type or does not fit; both write
 * err naming the key and what was expected.
 *   u32:    any integer type whose value fits (files differ in width)
 *   f32:    f32, or f64 (narrowed)
 *   bool:   bool
 *   string: string, as bytes in the mapping
 *   array:  an array of any element type
 */
int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out,
		 char *err, size_t err_len);
int gguf_get_f32(const struct gguf_file *f, const char *key, float *out,
		 char *err, size_t err_len);
int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out,
		  char *err, size_t err_len);
int gguf_get_str(const struct gguf_file *f, const char *key,
		 struct gguf_str *out, char *err, size_t err_len);
int gguf_get_array(const struct gguf_file *f, const char *key,
		   struct gguf_array *out, char *err, size_t err_len);

/*
 * Element i of an array (i < a->n, the type as named; no conversion):
 * string returns the bytes in the mapping; the numeric ones read the
 * little-endian value.  A wrong type or index is a caller's bug
 * (assert), so they cannot fail.
 */
struct gguf_str gguf_array_str(const struct gguf_array *a, uint64_t i);
float gguf_array_f32(const struct gguf_array *a, uint64_t i);
int32_t gguf_array_i32(const struct gguf_array *a, uint64_t i);
uint32_t gguf_array_u32(const struct gguf_array *a, uint64_t i);
uint8_t gguf_array_u8(const struct gguf_array *a, uint64_t i);

/* The tensor of that name, or NULL. */
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f,
					   const char *name);

/* "u8", "string", "array", ...; "?" for a value out of range. */
const char *gguf_vtype_name(uint32_t type);

/* Bytes of one element of a fixed-size value type; 0 for string, array
 * and unknown types. */
uint32_t gguf_vtype_size(uint32_t type);

#endif /* DYNBATCH_GGUF_H */
