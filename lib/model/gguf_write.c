/*
 * gguf_write.c - the in-memory GGUF writer (gguf_write.h).
 *
 * Three buffers grow side by side (keys, tensor infos, tensor data) and
 * are joined behind the header at the end, since the header's counts and
 * the infos' offsets are known only then.  Numbers are written byte by
 * byte, little-endian whatever the host.
 */
#include "model/gguf_write.h"

#include <errno.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Bytes
 */

static void put_le(struct gguf_writer *w, struct strbuf *sb, uint64_t v,
		   unsigned n)
{
	unsigned char b[8];

	for (unsigned i = 0; i < n; i++)
		b[i] = (unsigned char)(v >> (8 * i));
	if (!w->err && strbuf_append(sb, b, n))
		w->err = -ENOMEM;
}

static void put_bytes(struct gguf_writer *w, struct strbuf *sb,
		      const void *p, size_t n)
{
	if (!w->err && n && strbuf_append(sb, p, n))
		w->err = -ENOMEM;
}

static void put_str(struct gguf_writer *w, struct strbuf *sb, const char *s,
		    size_t len)
{
	put_le(w, sb, len, 8);
	put_bytes(w, sb, s, len);
}

static void put_zeros(struct gguf_writer *w, struct strbuf *sb, uint64_t n)
{
	static const unsigned char zeros[64];

	while (n) {
		size_t k = n < sizeof(zeros) ? (size_t)n : sizeof(zeros);

		put_bytes(w, sb, zeros, k);
		n -= k;
	}
}

/* The writer's callers hand it C values: their bytes are the file's
 * little-endian bytes only on a little-endian host (x86, arm64). */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "gguf_write.c reads C values as little-endian");

/* Element i of a C array of fixed-size values as its number. */
static uint64_t elem_bits(const void *elems, uint64_t i, unsigned size)
{
	uint64_t v = 0;

	memcpy(&v, (const unsigned char *)elems + i * size, size);
	return v;
}

/* ------------------------------------------------------------------------
 * Keys
 */

int gguf_writer_init(struct gguf_writer *w, uint32_t alignment)
{
	memset(w, 0, sizeof(*w));
	if (alignment == 0 || (alignment & (alignment - 1)))
		return w->err = -EINVAL;
	w->alignment = alignment;
	if (alignment != GGUF_DEFAULT_ALIGNMENT)
		return gguf_write_u32(w, "general.alignment", alignment);
	return 0;
}

void gguf_writer_release(struct gguf_writer *w)
{
	strbuf_release(&w->kv);
	strbuf_release(&w->info);
	strbuf_release(&w->data);
}

/* The key and the value type; false when the writer has failed. */
static bool begin_kv(struct gguf_writer *w, const char *key,
		     enum gguf_vtype type)
{
	put_str(w, &w->kv, key, strlen(key));
	put_le(w, &w->kv, type, 4);
	w->n_kv++;
	return !w->err;
}

int gguf_write_kv(struct gguf_writer *w, const char *key,
		  enum gguf_vtype type, const void *value)
{
	unsigned size = gguf_vtype_size(type);

	if (w->err)
		return w->err;
	if (size == 0)
		return w->err = -EINVAL;
	if (begin_kv(w, key, type))
		put_le(w, &w->kv, elem_bits(value, 0, size), size);
	return w->err;
}

int gguf_write_u32(struct gguf_writer *w, const char *key, uint32_t v)
{
	return gguf_write_kv(w, key, GGUF_VT_U32, &v);
}

int gguf_write_f32(struct gguf_writer *w, const char *key, float v)
{
	return gguf_write_kv(w, key, GGUF_VT_F32, &v);
}

int gguf_write_bool(struct gguf_writer *w, const char *key, bool v)
{
	uint8_t b = v;

	return gguf_write_kv(w, key, GGUF_VT_BOOL, &b);
}

int gguf_write_str(struct gguf_writer *w, const char *key, const char *s,
		   size_t len)
{
	if (begin_kv(w, key, GGUF_VT_STRING))
		put_str(w, &w->kv, s, len);
	return w->err;
}

int gguf_write_array(struct gguf_writer *w, const char *key,
		     enum gguf_vtype type, uint64_t n, const void *elems)
{
	unsigned size = gguf_vtype_size(type);

	if (w->err)
		return w->err;
	if (size == 0)
		return w->err = -EINVAL;
	if (!begin_kv(w, key, GGUF_VT_ARRAY))
		return w->err;
	put_le(w, &w->kv, type, 4);
	put_le(w, &w->kv, n, 8);
	if (!w->err && n > (SIZE_MAX - w->kv.len) / size)
		w->err = -ENOMEM;
	if (!w->err && strbuf_reserve(&w->kv, (size_t)(n * size)))
		w->err = -ENOMEM;
	for (uint64_t i = 0; i < n && !w->err; i++)
		put_le(w, &w->kv, elem_bits(elems, i, size), size);
	return w->err;
}

int gguf_write_str_array(struct gguf_writer *w, const char *key, uint64_t n,
			 const char *const *s, const size_t *len)
{
	if (!begin_kv(w, key, GGUF_VT_ARRAY))
		return w->err;
	put_le(w, &w->kv, GGUF_VT_STRING, 4);
	put_le(w, &w->kv, n, 8);
	for (uint64_t i = 0; i < n && !w->err; i++)
		put_str(w, &w->kv, s[i], len ? len[i] : strlen(s[i]));
	return w->err;
}

/* ------------------------------------------------------------------------
 * Tensors and the file
 */

int gguf_write_tensor(struct gguf_writer *w, const char *name,
		      uint32_t type, uint32_t n_dims, const uint64_t *dims,
		      const void *data, uint64_t *offset_out)
{
	const struct gguf_type_info *ti = gguf_type_info(type);
	uint64_t n = 1, bytes;

	if (w->err)
		return w->err;
	if (!ti || n_dims < 1 || n_dims > GGUF_MAX_DIMS)
		return w->err = -EINVAL;
	for (uint32_t d = 0; d < n_dims; d++) {
		if (dims[d] == 0 || n > INT64_MAX / dims[d])
			return w->err = -EINVAL;
		n *= dims[d];
	}
	if (dims[0] % ti->block_elems || !gguf_type_bytes(type, n, &bytes) ||
	    bytes > UINT64_MAX - w->data_bytes - w->alignment)
		return w->err = -EINVAL;
	put_str(w, &w->info, name, strlen(name));
	put_le(w, &w->info, n_dims, 4);
	for (uint32_t d = 0; d < n_dims; d++)
		put_le(w, &w->info, dims[d], 8);
	put_le(w, &w->info, type, 4);
	put_le(w, &w->info, w->data_bytes, 8);
	if (offset_out)
		*offset_out = w->data_bytes;
	if (data) {
		if (bytes > SIZE_MAX)
			return w->err = -ENOMEM;
		put_bytes(w, &w->data, data, (size_t)bytes);
		put_zeros(w, &w->data, gguf_write_pad(bytes, w->alignment));
	} else {
		w->data_missing = true;
	}
	w->data_bytes += bytes + gguf_write_pad(bytes, w->alignment);
	w->n_tensors++;
	return w->err;
}

int gguf_write_head(struct gguf_writer *w, struct strbuf *out)
{
	size_t start = out->len;
	uint64_t head;

	put_bytes(w, out, GGUF_MAGIC, 4);
	put_le(w, out, 3, 4);
	put_le(w, out, w->n_tensors, 8);
	put_le(w, out, w->n_kv, 8);
	put_bytes(w, out, w->kv.data, w->kv.len);
	put_bytes(w, out, w->info.data, w->info.len);
	head = out->len - start;
	put_zeros(w, out, gguf_write_pad(head, w->alignment));
	return w->err;
}

int gguf_write_finish(struct gguf_writer *w, struct strbuf *out)
{
	if (!w->err && w->data_missing)
		return -EINVAL;
	gguf_write_head(w, out);
	put_bytes(w, out, w->data.data, w->data.len);
	return w->err;
}
