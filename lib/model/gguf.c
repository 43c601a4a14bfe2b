/*
 * gguf.c - the GGUF reader (gguf.h): header, metadata, tensor infos and
 * the data section's layout, each field checked before it is used.
 *
 * NOTES ON THE DESIGN
 *
 * One cursor walks the bytes front to back; every read asks the cursor
 * whether the bytes are there, so nothing is read past size.  A count
 * from the file is held against the bytes left before anything is
 * allocated for it: each key takes at least KV_MIN_BYTES, each tensor
 * info TENSOR_MIN_BYTES, each array element its size (a string at least
 * its 8-byte length), so what is allocated never exceeds a small
 * multiple of the file's size.
 *
 * Keys and tensor names are sorted (index arrays) once: duplicates are
 * then neighbours, and a lookup is a binary search.  Arrays of strings
 * get the offset of each element, found while checking them, so element
 * i is O(1) and never copied.
 *
 * Messages name the file, the byte offset and what was expected there;
 * names from the file are printed escaped and cut (gguf_quote()), since
 * they are any bytes at all.
 */
#include "model/gguf.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KV_MIN_BYTES 13u	/* empty-key length 8, type 4, a u8 value 1 */
#define TENSOR_MIN_BYTES 32u	/* name length 8, n_dims 4, a dim 8,
				 * type 4, offset 8 */
#define QUOTE_MAX 48u		/* bytes of a name shown in a message */

struct cursor {
	const unsigned char *p;
	size_t size;
	size_t pos;
	const char *name;
	char *err;
	size_t err_len;
};

/* ------------------------------------------------------------------------
 * Messages
 */

/* Write "gguf 'NAME': at byte AT: <fmt>" and return -EINVAL. */
static int gguf_fail(const struct cursor *c, uint64_t at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int gguf_fail(const struct cursor *c, uint64_t at, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!c->err || c->err_len == 0)
		return -EINVAL;
	n = snprintf(c->err, c->err_len, "gguf '%s': at byte %llu: ", c->name,
		     (unsigned long long)at);
	if (n >= 0 && (size_t)n < c->err_len) {
		va_start(ap, fmt);
		vsnprintf(c->err + n, c->err_len - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* s as printable text in buf: ASCII kept, other bytes \xNN, cut with
 * "..." past QUOTE_MAX bytes.  Returns buf. */
static const char *gguf_quote(struct gguf_str s, char *buf, size_t len)
{
	size_t o = 0;

	for (uint64_t i = 0; i < s.len && o + 8 < len; i++) {
		unsigned char ch = (unsigned char)s.ptr[i];

		if (i == QUOTE_MAX) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		if (ch >= 0x20 && ch < 0x7f && ch != '\\' && ch != '\'')
			buf[o++] = (char)ch;
		else
			o += (size_t)snprintf(buf + o, len - o, "\\x%02x", ch);
	}
	buf[o] = '\0';
	return buf;
}

#define QUOTE_BUF (QUOTE_MAX * 4 + 8)
#define QUOTE(s) gguf_quote((s), (char[QUOTE_BUF]){ 0 }, QUOTE_BUF)

/* ------------------------------------------------------------------------
 * Reading the bytes
 */

static uint64_t get_le(const unsigned char *p, unsigned n)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static size_t left(const struct cursor *c)
{
	return c->size - c->pos;
}

/* The n-byte little-endian number at the cursor, for field `what`. */
static int take(struct cursor *c, unsigned n, const char *what, uint64_t *v)
{
	if (left(c) < n)
		return gguf_fail(c, c->pos, "%s: needs %u bytes, %zu left",
				 what, n, left(c));
	*v = get_le(c->p + c->pos, n);
	c->pos += n;
	return 0;
}

static int take_u32(struct cursor *c, const char *what, uint32_t *v)
{
	uint64_t x = 0;
	int rc = take(c, 4, what, &x);

	*v = (uint32_t)x;
	return rc;
}

/* A string: u64 length then the bytes, all inside the file. */
static int take_str(struct cursor *c, const char *what, struct gguf_str *s)
{
	uint64_t at = c->pos, len = 0;
	int rc = take(c, 8, what, &len);

	if (rc)
		return rc;
	if (len > left(c))
		return gguf_fail(c, at, "%s: length %llu runs past the end (%zu bytes left)",
				 what, (unsigned long long)len, left(c));
	s->ptr = (const char *)c->p + c->pos;
	s->len = len;
	c->pos += (size_t)len;
	return 0;
}

/* ------------------------------------------------------------------------
 * Value types
 */

static const char *const vtype_names[GGUF_VT_COUNT] = {
	"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string",
	"array", "u64", "i64", "f64",
};

static const uint8_t vtype_sizes[GGUF_VT_COUNT] = {
	1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8,
};

const char *gguf_vtype_name(uint32_t type)
{
	return type < GGUF_VT_COUNT ? vtype_names[type] : "?";
}

uint32_t gguf_vtype_size(uint32_t type)
{
	return type < GGUF_VT_COUNT ? vtype_sizes[type] : 0;
}

/* n elements of a fixed-size type at the cursor; bools 0 or 1. */
static int take_fixed(struct cursor *c, uint32_t type, uint64_t n,
		      const char *key)
{
	uint32_t size = gguf_vtype_size(type);

	if (n > left(c) / size)
		return gguf_fail(c, c->pos, "value of '%s': %llu %s run past the end (%zu bytes left)",
				 key, (unsigned long long)n, gguf_vtype_name(type),
				 left(c));
	if (type == GGUF_VT_BOOL) {
		for (uint64_t i = 0; i < n; i++) {
			unsigned char b = c->p[c->pos + i];

			if (b > 1)
				return gguf_fail(c, c->pos + i,
						 "value of '%s': bool byte %u, expected 0 or 1",
						 key, b);
		}
	}
	c->pos += (size_t)(n * size);
	return 0;
}

/* kv->n strings at the cursor; an array's offsets of each into
 * kv->str_off. */
static int take_strings(struct cursor *c, struct gguf_kv *kv, const char *key)
{
	size_t start = c->pos;
	struct gguf_str s;
	char what[QUOTE_BUF + 64] = "";
	int rc;

	/* every string takes at least its 8-byte length */
	if (kv->n > left(c) / 8)
		return gguf_fail(c, c->pos, "value of '%s': %llu strings run past the end: each takes at least 8 bytes, %zu left",
				 key, (unsigned long long)kv->n, left(c));
	if (kv->type == GGUF_VT_ARRAY) {
		kv->str_off = malloc((kv->n ? kv->n : 1) * sizeof(*kv->str_off));
		if (!kv->str_off)
			return -ENOMEM;
	}
	for (uint64_t i = 0; i < kv->n; i++) {
		if (kv->str_off)
			kv->str_off[i] = c->pos - start;
		/* the message only for a string that does not fit: a
		 * vocabulary has a hundred thousand that do */
		if (left(c) < 8 || get_le(c->p + c->pos, 8) > left(c) - 8) {
			if (kv->str_off)
				snprintf(what, sizeof(what), "string %llu of '%s'",
					 (unsigned long long)i, key);
			else
				snprintf(what, sizeof(what), "value of '%s'", key);
		}
		rc = take_str(c, what, &s);
		if (rc)
			return rc;
	}
	return 0;
}

/* The value of kv (its key read): type, then the value or the array. */
static int take_value(struct cursor *c, struct gguf_kv *kv)
{
	char key[QUOTE_BUF], what[QUOTE_BUF + 64];
	uint64_t at = c->pos;
	uint32_t type;
	int rc;

	gguf_quote(kv->key, key, sizeof(key));
	snprintf(what, sizeof(what), "value type of '%s'", key);
	rc = take_u32(c, what, &type);
	if (rc)
		return rc;
	if (type >= GGUF_VT_COUNT)
		return gguf_fail(c, at, "key '%s': unknown value type %u (0 to %u)",
				 key, type, GGUF_VT_COUNT - 1);
	kv->type = kv->elem_type = type;
	kv->n = 1;
	if (type == GGUF_VT_ARRAY) {
		at = c->pos;
		snprintf(what, sizeof(what), "array element type of '%s'", key);
		rc = take_u32(c, what, &type);
		if (rc)
			return rc;
		if (type == GGUF_VT_ARRAY)
			return gguf_fail(c, at, "key '%s': array of arrays, not read",
					 key);
		if (type >= GGUF_VT_COUNT)
			return gguf_fail(c, at, "key '%s': unknown array element type %u (0 to %u)",
					 key, type, GGUF_VT_COUNT - 1);
		kv->elem_type = type;
		snprintf(what, sizeof(what), "array count of '%s'", key);
		rc = take(c, 8, what, &kv->n);
		if (rc)
			return rc;
	}
	kv->value = c->p + c->pos;
	at = c->pos;
	if (kv->elem_type == GGUF_VT_STRING)
		rc = take_strings(c, kv, key);
	else
		rc = take_fixed(c, kv->elem_type, kv->n, key);
	kv->value_bytes = c->pos - at;
	return rc;
}

/* ------------------------------------------------------------------------
 * Names: sorting, duplicates, lookup
 */

static int str_cmp(struct gguf_str a, struct gguf_str b)
{
	uint64_t n = a.len < b.len ? a.len : b.len;
	int r = n ? memcmp(a.ptr, b.ptr, (size_t)n) : 0;

	if (r)
		return r;
	return a.len < b.len ? -1 : a.len > b.len;
}

/* The name of element i of a table of kvs or tensors. */
struct name_table {
	const void *base;
	size_t stride;		/* sizeof the element */
	size_t name_off;	/* offsetof its struct gguf_str */
};

static struct gguf_str table_name(const struct name_table *t, size_t i)
{
	struct gguf_str s;

	memcpy(&s, (const char *)t->base + i * t->stride + t->name_off,
	       sizeof(s));
	return s;
}

static int index_cmp(const void *a, const void *b, void *arg)
{
	const struct name_table *t = arg;
	size_t ia = *(const size_t *)a, ib = *(const size_t *)b;
	int r = str_cmp(table_name(t, ia), table_name(t, ib));

	/* equal names: file order, so a duplicate's first is reported first */
	if (r == 0)
		r = ia < ib ? -1 : ia > ib;
	return r;
}

/* *out = the indexes 0..n-1 sorted by name; the first duplicate pair
 * (i before j in the file) in *dup_i, *dup_j, else *dup_j = n. */
static int sort_names(const struct name_table *t, size_t n, size_t **out,
		      size_t *dup_i, size_t *dup_j)
{
	size_t *idx = malloc((n ? n : 1) * sizeof(*idx));

	if (!idx)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		idx[i] = i;
	qsort_r(idx, n, sizeof(*idx), index_cmp, (void *)t);
	*dup_j = n;
	for (size_t i = 1; i < n; i++) {
		if (str_cmp(table_name(t, idx[i - 1]), table_name(t, idx[i])))
			continue;
		/* report the pair whose second comes first in the file */
		if (*dup_j == n || idx[i] < *dup_j) {
			*dup_i = idx[i - 1];
			*dup_j = idx[i];
		}
	}
	*out = idx;
	return 0;
}

/* Index of name in the sorted table, or SIZE_MAX. */
static size_t find_name(const struct name_table *t, const size_t *sorted,
			size_t n, const char *name)
{
	struct gguf_str want = { name, strlen(name) };
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int r = str_cmp(table_name(t, sorted[mid]), want);

		if (r == 0)
			return sorted[mid];
		if (r < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return SIZE_MAX;
}

static struct name_table kv_table(const struct gguf_file *f)
{
	return (struct name_table){ f->kv, sizeof(*f->kv),
				    offsetof(struct gguf_kv, key) };
}

static struct name_table tensor_table(const struct gguf_file *f)
{
	return (struct name_table){ f->tensors, sizeof(*f->tensors),
				    offsetof(struct gguf_tensor, name) };
}

/* Byte offset of a name's length prefix in the file. */
static uint64_t name_at(const struct gguf_file *f, struct gguf_str s)
{
	return (uint64_t)((const unsigned char *)s.ptr - f->base) - 8;
}

/* ------------------------------------------------------------------------
 * Header and metadata
 */

static int parse_header(struct cursor *c, struct gguf_file *f)
{
	int rc;

	if (c->size < 4 || memcmp(c->p, GGUF_MAGIC, 4) != 0)
		return gguf_fail(c, 0, "bad magic, expected \"GGUF\"");
	c->pos = 4;
	rc = take_u32(c, "version", &f->version);
	if (rc)
		return rc;
	if (f->version == 0x02000000u || f->version == 0x03000000u)
		return gguf_fail(c, 4, "version reads 0x%08x: a byte-swapped (big-endian) file, only little-endian is read",
				 f->version);
	if (f->version != 2 && f->version != 3)
		return gguf_fail(c, 4, "version %u, expected 2 or 3", f->version);
	rc = take(c, 8, "tensor count", &f->n_tensors);
	if (!rc)
		rc = take(c, 8, "kv count", &f->n_kv);
	if (rc)
		return rc;
	/* fail early on counts no file of this size can hold */
	if (f->n_tensors > left(c) / TENSOR_MIN_BYTES)
		return gguf_fail(c, 8, "tensor count %llu: each info takes at least %u bytes, %zu left",
				 (unsigned long long)f->n_tensors,
				 TENSOR_MIN_BYTES, left(c));
	if (f->n_kv > left(c) / KV_MIN_BYTES)
		return gguf_fail(c, 16, "kv count %llu: each key takes at least %u bytes, %zu left",
				 (unsigned long long)f->n_kv, KV_MIN_BYTES,
				 left(c));
	return 0;
}

static int parse_kvs(struct cursor *c, struct gguf_file *f)
{
	struct name_table t;
	size_t di, dj;
	int rc;

	f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof(*f->kv));
	if (!f->kv)
		return -ENOMEM;
	for (uint64_t i = 0; i < f->n_kv; i++) {
		struct gguf_kv *kv = &f->kv[i];
		uint64_t at = c->pos;
		char what[32];

		snprintf(what, sizeof(what), "key %llu", (unsigned long long)i);
		rc = take_str(c, what, &kv->key);
		if (rc)
			return rc;
		if (kv->key.len == 0 || kv->key.len > GGUF_MAX_KEY_BYTES)
			return gguf_fail(c, at, "key of %llu bytes, expected 1 to %u",
					 (unsigned long long)kv->key.len,
					 GGUF_MAX_KEY_BYTES);
		rc = take_value(c, kv);
		if (rc)
			return rc;
	}
	t = kv_table(f);
	rc = sort_names(&t, f->n_kv, &f->kv_sorted, &di, &dj);
	if (rc)
		return rc;
	if (dj < f->n_kv)
		return gguf_fail(c, name_at(f, f->kv[dj].key),
				 "duplicate key '%s' (first at byte %llu)",
				 QUOTE(f->kv[dj].key),
				 (unsigned long long)name_at(f, f->kv[di].key));
	return 0;
}

static int parse_alignment(struct cursor *c, struct gguf_file *f)
{
	const struct gguf_kv *kv = gguf_find_kv(f, "general.alignment");
	uint64_t at;
	int rc;

	f->alignment = GGUF_DEFAULT_ALIGNMENT;
	if (!kv)
		return 0;
	at = (uint64_t)(kv->value - f->base);
	rc = gguf_get_u32(f, "general.alignment", &f->alignment, c->err,
			  c->err_len);
	if (rc)
		return gguf_fail(c, at, "general.alignment: expected a u32 power of two");
	if (f->alignment == 0 || (f->alignment & (f->alignment - 1)))
		return gguf_fail(c, at, "general.alignment %u is not a power of two",
				 f->alignment);
	return 0;
}

/* ------------------------------------------------------------------------
 * Tensor infos and the data section
 */

static int parse_dims(struct cursor *c, struct gguf_tensor *t, const char *nm)
{
	char what[QUOTE_BUF + 64];
	uint64_t at = c->pos;
	int rc;

	snprintf(what, sizeof(what), "n_dims of tensor '%s'", nm);
	rc = take_u32(c, what, &t->n_dims);
	if (rc)
		return rc;
	if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
		return gguf_fail(c, at, "tensor '%s': n_dims %u, expected 1 to %u",
				 nm, t->n_dims, GGUF_MAX_DIMS);
	t->n_elems = 1;
	for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
		uint64_t v = 1;

		at = c->pos;
		snprintf(what, sizeof(what), "dimension %u of tensor '%s'", d, nm);
		if (d < t->n_dims && (rc = take(c, 8, what, &v)))
			return rc;
		if (v == 0 || v > INT64_MAX)
			return gguf_fail(c, at, "tensor '%s': dimension %u is %llu, expected 1 to 2^63-1",
					 nm, d, (unsigned long long)v);
		if (t->n_elems > INT64_MAX / v)
			return gguf_fail(c, at, "tensor '%s': the product of its dimensions overflows",
					 nm);
		t->dims[d] = v;
		t->n_elems *= v;
	}
	return 0;
}

/* Tensor info i at the cursor into t. */
static int parse_tensor_info(struct cursor *c, struct gguf_tensor *t,
			     uint64_t i)
{
	const struct gguf_type_info *ti;
	char nm[QUOTE_BUF], what[QUOTE_BUF + 64];
	uint64_t at;
	int rc;

	t->info_at = c->pos;
	snprintf(what, sizeof(what), "name of tensor %llu", (unsigned long long)i);
	rc = take_str(c, what, &t->name);
	if (rc)
		return rc;
	gguf_quote(t->name, nm, sizeof(nm));
	rc = parse_dims(c, t, nm);
	if (rc)
		return rc;
	at = c->pos;
	snprintf(what, sizeof(what), "type of tensor '%s'", nm);
	rc = take_u32(c, what, &t->type);
	if (rc)
		return rc;
	ti = gguf_type_info(t->type);
	if (!ti)
		return gguf_fail(c, at, "tensor '%s': unknown or unsupported type %u",
				 nm, t->type);
	if (t->dims[0] % ti->block_elems)
		return gguf_fail(c, at, "tensor '%s': row length %llu is not a multiple of %s's block of %u",
				 nm, (unsigned long long)t->dims[0], ti->name,
				 ti->block_elems);
	if (!gguf_type_bytes(t->type, t->n_elems, &t->n_bytes) ||
	    t->n_bytes > INT64_MAX)
		return gguf_fail(c, at, "tensor '%s': byte size overflows", nm);
	snprintf(what, sizeof(what), "offset of tensor '%s'", nm);
	return take(c, 8, what, &t->offset);
}

/* Place each tensor in the data section: aligned, in file order, not
 * overlapping, inside the file. */
static int place_tensors(struct cursor *c, struct gguf_file *f)
{
	uint64_t end = 0, room;

	/* the padding after the infos; may run past a file of no tensors */
	f->data_offset = c->pos + (f->alignment - c->pos % f->alignment) %
				  f->alignment;
	room = f->data_offset <= c->size ? c->size - f->data_offset : 0;
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		struct gguf_tensor *t = &f->tensors[i];
		uint64_t at = t->info_at + 8 + t->name.len + 4 + 8 * t->n_dims + 4;
		char nm[QUOTE_BUF];

		gguf_quote(t->name, nm, sizeof(nm));
		if (t->offset % f->alignment)
			return gguf_fail(c, at, "tensor '%s': offset %llu is not a multiple of the alignment %u",
					 nm, (unsigned long long)t->offset,
					 f->alignment);
		if (t->offset < end)
			return gguf_fail(c, at, "tensor '%s': offset %llu overlaps or precedes the previous tensor, which ends at %llu",
					 nm, (unsigned long long)t->offset,
					 (unsigned long long)end);
		if (t->offset > room || t->n_bytes > room - t->offset)
			return gguf_fail(c, at, "tensor '%s': %llu bytes at offset %llu run past the end of the data section (%llu bytes)",
					 nm, (unsigned long long)t->n_bytes,
					 (unsigned long long)t->offset,
					 (unsigned long long)room);
		end = t->offset + t->n_bytes;
		t->data = f->base + f->data_offset + t->offset;
	}
	return 0;
}

static int parse_tensors(struct cursor *c, struct gguf_file *f)
{
	struct name_table t;
	size_t di, dj;
	int rc;

	if (f->n_tensors > left(c) / TENSOR_MIN_BYTES)
		return gguf_fail(c, c->pos, "tensor count %llu: each info takes at least %u bytes, %zu left",
				 (unsigned long long)f->n_tensors,
				 TENSOR_MIN_BYTES, left(c));
	f->tensors = calloc(f->n_tensors ? f->n_tensors : 1,
			    sizeof(*f->tensors));
	if (!f->tensors)
		return -ENOMEM;
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		rc = parse_tensor_info(c, &f->tensors[i], i);
		if (rc)
			return rc;
	}
	t = tensor_table(f);
	rc = sort_names(&t, f->n_tensors, &f->tensor_sorted, &di, &dj);
	if (rc)
		return rc;
	if (dj < f->n_tensors)
		return gguf_fail(c, f->tensors[dj].info_at,
				 "duplicate tensor name '%s' (first at byte %llu)",
				 QUOTE(f->tensors[dj].name),
				 (unsigned long long)f->tensors[di].info_at);
	return place_tensors(c, f);
}

int gguf_parse(struct gguf_file *f, const void *data, size_t size,
	       const char *name, char *err, size_t err_len)
{
	struct cursor c = { data, size, 0, name ? name : "?", err, err_len };
	int rc;

	memset(f, 0, sizeof(*f));
	f->base = data;
	f->size = size;
	rc = parse_header(&c, f);
	if (!rc)
		rc = parse_kvs(&c, f);
	if (!rc)
		rc = parse_alignment(&c, f);
	if (!rc)
		rc = parse_tensors(&c, f);
	if (rc == -ENOMEM && err && err_len)
		snprintf(err, err_len, "gguf '%s': out of memory", c.name);
	if (rc)
		gguf_free(f);
	assert(rc || gguf_check(f) == 0);
	return rc;
}

void gguf_free(struct gguf_file *f)
{
	if (!f)
		return;
	for (uint64_t i = 0; f->kv && i < f->n_kv; i++)
		free(f->kv[i].str_off);
	free(f->kv);
	free(f->kv_sorted);
	free(f->tensors);
	free(f->tensor_sorted);
	memset(f, 0, sizeof(*f));
}

/* ------------------------------------------------------------------------
 * Invariants
 */

static bool inside(const struct gguf_file *f, const void *p, uint64_t n)
{
	const unsigned char *b = p;

	return b >= f->base && (uint64_t)(b - f->base) <= f->size &&
	       n <= f->size - (uint64_t)(b - f->base);
}

static bool sorted_unique(const struct name_table *t, const size_t *idx,
			  size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (idx[i] >= n)
			return false;
		if (i && str_cmp(table_name(t, idx[i - 1]),
				 table_name(t, idx[i])) >= 0)
			return false;
	}
	return true;
}

static bool kv_ok(const struct gguf_file *f, const struct gguf_kv *kv)
{
	if (!inside(f, kv->key.ptr, kv->key.len) || kv->key.len == 0 ||
	    !inside(f, kv->value, kv->value_bytes) ||
	    kv->type >= GGUF_VT_COUNT || kv->elem_type >= GGUF_VT_COUNT ||
	    kv->elem_type == GGUF_VT_ARRAY ||
	    (kv->type != GGUF_VT_ARRAY && (kv->n != 1 ||
					   kv->elem_type != kv->type)))
		return false;
	if (kv->elem_type != GGUF_VT_STRING)
		return kv->value_bytes == kv->n * gguf_vtype_size(kv->elem_type);
	if (!kv->str_off)	/* one string, filling the value */
		return kv->type == GGUF_VT_STRING && kv->value_bytes >= 8 &&
		       get_le(kv->value, 8) == kv->value_bytes - 8;
	for (uint64_t i = 0; i < kv->n; i++) {
		uint64_t o = kv->str_off[i];

		if (o > kv->value_bytes || kv->value_bytes - o < 8 ||
		    get_le(kv->value + o, 8) > kv->value_bytes - o - 8)
			return false;
	}
	return kv->type == GGUF_VT_ARRAY;
}

static bool tensor_ok(const struct gguf_file *f, const struct gguf_tensor *t,
		      uint64_t *end)
{
	const unsigned char *start = f->base + f->data_offset;
	uint64_t n = 1, bytes;

	for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
		if (t->dims[d] == 0 || (d >= t->n_dims && t->dims[d] != 1))
			return false;
		n *= t->dims[d];
	}
	if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS || n != t->n_elems ||
	    !gguf_type_bytes(t->type, n, &bytes) || bytes != t->n_bytes ||
	    t->dims[0] % gguf_type_info(t->type)->block_elems ||
	    t->offset % f->alignment || t->offset < *end ||
	    t->data != start + t->offset || !inside(f, t->data, t->n_bytes))
		return false;
	*end = t->offset + t->n_bytes;
	return true;
}

int gguf_check(const struct gguf_file *f)
{
	struct name_table kt = kv_table(f), tt = tensor_table(f);
	uint64_t end = 0;

	if ((f->version != 2 && f->version != 3) || f->alignment == 0 ||
	    (f->alignment & (f->alignment - 1)) ||
	    f->data_offset % f->alignment)
		return -EINVAL;
	for (uint64_t i = 0; i < f->n_kv; i++)
		if (!kv_ok(f, &f->kv[i]))
			return -EINVAL;
	for (uint64_t i = 0; i < f->n_tensors; i++)
		if (!tensor_ok(f, &f->tensors[i], &end))
			return -EINVAL;
	if (!sorted_unique(&kt, f->kv_sorted, f->n_kv) ||
	    !sorted_unique(&tt, f->tensor_sorted, f->n_tensors))
		return -EINVAL;
	return 0;
}

/* ------------------------------------------------------------------------
 * Lookup
 */

const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key)
{
	struct name_table t = kv_table(f);
	size_t i = find_name(&t, f->kv_sorted, f->n_kv, key);

	return i == SIZE_MAX ? NULL : &f->kv[i];
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f,
					   const char *name)
{
	struct name_table t = tensor_table(f);
	size_t i = find_name(&t, f->tensor_sorted, f->n_tensors, name);

	return i == SIZE_MAX ? NULL : &f->tensors[i];
}

/* The key, or NULL after writing why (-ENOENT into *rc). */
static const struct gguf_kv *get_kv(const struct gguf_file *f,
				    const char *key, const char *want,
				    char *err, size_t err_len, int *rc)
{
	const struct gguf_kv *kv = gguf_find_kv(f, key);

	*rc = 0;
	if (!kv) {
		if (err && err_len)
			snprintf(err, err_len, "key '%s' is missing, expected %s",
				 key, want);
		*rc = -ENOENT;
	}
	return kv;
}

static int wrong_type(const struct gguf_kv *kv, const char *key,
		      const char *want, char *err, size_t err_len)
{
	if (err && err_len)
		snprintf(err, err_len, "key '%s' is %s%s%s, expected %s", key,
			 gguf_vtype_name(kv->type),
			 kv->type == GGUF_VT_ARRAY ? " of " : "",
			 kv->type == GGUF_VT_ARRAY ?
				 gguf_vtype_name(kv->elem_type) : "",
			 want);
	return -EINVAL;
}

int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out,
		 char *err, size_t err_len)
{
	static const bool is_signed[GGUF_VT_COUNT] = {
		[GGUF_VT_I8] = true, [GGUF_VT_I16] = true,
		[GGUF_VT_I32] = true, [GGUF_VT_I64] = true,
	};
	int rc;
	const struct gguf_kv *kv = get_kv(f, key, "a u32", err, err_len, &rc);
	uint64_t v;
	unsigned size;

	if (!kv)
		return rc;
	switch (kv->type) {
	case GGUF_VT_U8: case GGUF_VT_I8: case GGUF_VT_U16: case GGUF_VT_I16:
	case GGUF_VT_U32: case GGUF_VT_I32: case GGUF_VT_U64: case GGUF_VT_I64:
		break;
	default:
		return wrong_type(kv, key, "an integer (u32)", err, err_len);
	}
	size = gguf_vtype_size(kv->type);
	v = get_le(kv->value, size);
	/* a negative signed value has its top bit set */
	if ((is_signed[kv->type] && (v >> (8 * size - 1)) & 1) ||
	    v > UINT32_MAX) {
		if (err && err_len)
			snprintf(err, err_len, "key '%s': %s value out of the u32 range",
				 key, gguf_vtype_name(kv->type));
		return -EINVAL;
	}
	*out = (uint32_t)v;
	return 0;
}

int gguf_get_f32(const struct gguf_file *f, const char *key, float *out,
		 char *err, size_t err_len)
{
	int rc;
	const struct gguf_kv *kv = get_kv(f, key, "an f32", err, err_len, &rc);
	uint64_t bits;

	if (!kv)
		return rc;
	if (kv->type == GGUF_VT_F32) {
		uint32_t b = (uint32_t)get_le(kv->value, 4);

		memcpy(out, &b, sizeof(*out));
	} else if (kv->type == GGUF_VT_F64) {
		double d;

		bits = get_le(kv->value, 8);
		memcpy(&d, &bits, sizeof(d));
		*out = (float)d;
	} else {
		return wrong_type(kv, key, "f32", err, err_len);
	}
	return 0;
}

int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out,
		  char *err, size_t err_len)
{
	int rc;
	const struct gguf_kv *kv = get_kv(f, key, "a bool", err, err_len, &rc);

	if (!kv)
		return rc;
	if (kv->type != GGUF_VT_BOOL)
		return wrong_type(kv, key, "bool", err, err_len);
	*out = kv->value[0] != 0;
	return 0;
}

int gguf_get_str(const struct gguf_file *f, const char *key,
		 struct gguf_str *out, char *err, size_t err_len)
{
	int rc;
	const struct gguf_kv *kv = get_kv(f, key, "a string", err, err_len,
					  &rc);

	if (!kv)
		return rc;
	if (kv->type != GGUF_VT_STRING)
		return wrong_type(kv, key, "string", err, err_len);
	out->len = get_le(kv->value, 8);
	out->ptr = (const char *)kv->value + 8;
	return 0;
}

int gguf_get_array(const struct gguf_file *f, const char *key,
		   struct gguf_array *out, char *err, size_t err_len)
{
	int rc;
	const struct gguf_kv *kv = get_kv(f, key, "an array", err, err_len,
					  &rc);

	if (!kv)
		return rc;
	if (kv->type != GGUF_VT_ARRAY)
		return wrong_type(kv, key, "array", err, err_len);
	out->type = kv->elem_type;
	out->n = kv->n;
	out->kv = kv;
	return 0;
}

/* Element i of a as its raw little-endian bits (type checked). */
static uint64_t array_bits(const struct gguf_array *a, uint64_t i,
			   enum gguf_vtype type)
{
	unsigned size = gguf_vtype_size(type);

	assert(a->type == type && i < a->n);
	return get_le(a->kv->value + i * size, size);
}

struct gguf_str gguf_array_str(const struct gguf_array *a, uint64_t i)
{
	const unsigned char *p;

	assert(a->type == GGUF_VT_STRING && i < a->n && a->kv->str_off);
	p = a->kv->value + a->kv->str_off[i];
	return (struct gguf_str){ (const char *)p + 8, get_le(p, 8) };
}

float gguf_array_f32(const struct gguf_array *a, uint64_t i)
{
	uint32_t b = (uint32_t)array_bits(a, i, GGUF_VT_F32);
	float v;

	memcpy(&v, &b, sizeof(v));
	return v;
}

int32_t gguf_array_i32(const struct gguf_array *a, uint64_t i)
{
	uint32_t b = (uint32_t)array_bits(a, i, GGUF_VT_I32);
	int32_t v;

	memcpy(&v, &b, sizeof(v));
	return v;
}

uint32_t gguf_array_u32(const struct gguf_array *a, uint64_t i)
{
	return (uint32_t)array_bits(a, i, GGUF_VT_U32);
}

uint8_t gguf_array_u8(const struct gguf_array *a, uint64_t i)
{
	return (uint8_t)array_bits(a, i, GGUF_VT_U8);
}
