/*
 * test_gguf.c - unit tests of the GGUF reader and writer
 * (lib/model/gguf.c, gguf_write.c, gguf_types.c).
 *
 * The reference is a naive serializer written here from the format's
 * definition (docs/gguf.md of ggml): a random model of keys, arrays and
 * tensors is laid out by it byte by byte, and
 *   - the writer must produce exactly those bytes;
 *   - the reader must give back every key, value, array element and
 *     tensor of the model from them (and from the same file as v2).
 * The refusals are hostile files built with the naive serializer, each
 * checked for -EINVAL and for its message (what was wrong and the byte
 * offset).  Every prefix of a valid file and random byte mutations of
 * one are parsed from exact-size copies, so an over-read shows under
 * ASan.  Seeded (SEED= replays; tests/unit/test_rng.h).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/gguf.h"
#include "model/gguf_types.h"
#include "model/gguf_write.h"
#include "tests/unit/test_rng.h"

/* ------------------------------------------------------------------------
 * The naive serializer: bytes appended to a growing buffer
 */

struct nb {
	unsigned char *p;
	size_t len, cap;
};

static void nb_bytes(struct nb *b, const void *p, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2 + 64;
		b->p = realloc(b->p, b->cap);
		assert_non_null(b->p);
	}
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
}

static void nb_le(struct nb *b, uint64_t v, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		unsigned char c = (unsigned char)(v >> (8 * i));

		nb_bytes(b, &c, 1);
	}
}

static void nb_u32(struct nb *b, uint32_t v) { nb_le(b, v, 4); }
static void nb_u64(struct nb *b, uint64_t v) { nb_le(b, v, 8); }

static void nb_str(struct nb *b, const char *s, size_t n)
{
	nb_u64(b, n);
	nb_bytes(b, s, n);
}

static void nb_cstr(struct nb *b, const char *s)
{
	nb_str(b, s, strlen(s));
}

static void nb_pad(struct nb *b, uint32_t align)
{
	while (b->len % align)
		nb_le(b, 0, 1);
}

static void nb_header(struct nb *b, uint32_t version, uint64_t n_tensors,
		      uint64_t n_kv)
{
	nb_bytes(b, "GGUF", 4);
	nb_u32(b, version);
	nb_u64(b, n_tensors);
	nb_u64(b, n_kv);
}

/* Start b again as a file of one key of that value type (the value
 * follows). */
static void nb_one_kv(struct nb *b, const char *key, uint32_t type)
{
	b->len = 0;
	nb_header(b, 3, 0, 1);
	nb_cstr(b, key);
	nb_u32(b, type);
}

/* The same for an array's head: element type and count. */
static void nb_one_array(struct nb *b, const char *key, uint32_t elem,
			 uint64_t n)
{
	nb_one_kv(b, key, 9);
	nb_u32(b, elem);
	nb_u64(b, n);
}

/* A tensor info. */
static void nb_tinfo(struct nb *b, const char *name, uint32_t n_dims,
		     const uint64_t *dims, uint32_t type, uint64_t offset)
{
	nb_cstr(b, name);
	nb_u32(b, n_dims);
	for (uint32_t d = 0; d < n_dims; d++)
		nb_u64(b, dims[d]);
	nb_u32(b, type);
	nb_u64(b, offset);
}

/* ------------------------------------------------------------------------
 * A random model
 */

#define MAX_KV 40
#define MAX_T 8
#define MAX_ARRAY 24

/* The element sizes of the fixed value types, from the format's table. */
static const unsigned ref_size[13] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };

struct m_kv {
	char key[40];
	uint32_t type, elem;
	uint64_t n;
	struct nb raw;		/* the value's bytes after its type (and an
				 * array's element type and count) */
	char *strs[MAX_ARRAY];	/* string elements (a string: strs[0]) */
	size_t lens[MAX_ARRAY];
};

struct m_tensor {
	char name[40];
	uint32_t type, n_dims;
	uint64_t dims[4];
	uint64_t bytes;
	unsigned char *data;
};

struct model {
	uint32_t alignment;
	uint32_t n_kv, n_t;
	struct m_kv kv[MAX_KV];
	struct m_tensor t[MAX_T];
};

/* The types the reader reads, and their block shape from ggml's block
 * structs (fp16 d / dmin, nibbles, high bits, 6-bit scales). */
static const struct { uint32_t id, elems, bytes; } ref_types[] = {
	{ 0, 1, 4 }, { 1, 1, 2 }, { 30, 1, 2 },
	{ 2, 32, 2 + 16 }, { 3, 32, 2 + 2 + 16 },
	{ 6, 32, 2 + 4 + 16 }, { 7, 32, 2 + 2 + 4 + 16 },
	{ 8, 32, 2 + 32 },
	{ 12, 256, 2 + 2 + 12 + 128 }, { 13, 256, 2 + 2 + 12 + 32 + 128 },
	{ 14, 256, 128 + 64 + 16 + 2 },
};
#define N_REF_TYPES (sizeof(ref_types) / sizeof(ref_types[0]))

static void random_str(struct rng *r, char **s, size_t *len)
{
	size_t n = rng_below(r, 12);

	*s = malloc(n + 1);
	assert_non_null(*s);
	for (size_t i = 0; i < n; i++)
		(*s)[i] = (char)rng_below(r, 256);	/* any bytes, NUL too */
	(*s)[n] = 0;
	*len = n;
}

static void random_kv(struct rng *r, struct m_kv *kv, uint32_t i)
{
	uint32_t type = rng_below(r, 13);

	snprintf(kv->key, sizeof(kv->key), "k%u.%c%u", i,
		 'a' + (char)rng_below(r, 26), rng_below(r, 1000));
	kv->type = kv->elem = type;
	kv->n = 1;
	if (type == 9) {
		do
			kv->elem = rng_below(r, 13);
		while (kv->elem == 9);
		kv->n = rng_below(r, MAX_ARRAY + 1);
	}
	for (uint64_t e = 0; e < kv->n; e++) {
		if (kv->elem == 8) {
			random_str(r, &kv->strs[e], &kv->lens[e]);
			nb_str(&kv->raw, kv->strs[e], kv->lens[e]);
		} else if (kv->elem == 7) {
			nb_le(&kv->raw, rng_below(r, 2), 1);
		} else {
			nb_le(&kv->raw, rng_next(r), ref_size[kv->elem]);
		}
	}
}

static void random_tensor(struct rng *r, struct m_tensor *t, uint32_t i)
{
	uint32_t k = rng_below(r, N_REF_TYPES);
	uint64_t n;

	snprintf(t->name, sizeof(t->name), "blk.%u.w%u.weight", i,
		 rng_below(r, 100));
	t->type = ref_types[k].id;
	t->n_dims = 1 + rng_below(r, 4);
	t->dims[0] = ref_types[k].elems * (1 + rng_below(r, 3));
	for (uint32_t d = 1; d < t->n_dims; d++)
		t->dims[d] = 1 + rng_below(r, 3);
	n = 1;
	for (uint32_t d = 0; d < t->n_dims; d++)
		n *= t->dims[d];
	t->bytes = n / ref_types[k].elems * ref_types[k].bytes;
	t->data = malloc(t->bytes);
	assert_non_null(t->data);
	for (uint64_t b = 0; b < t->bytes; b++)
		t->data[b] = (unsigned char)rng_next(r);
}

static void random_model(struct rng *r, struct model *m)
{
	static const uint32_t aligns[] = { 1, 2, 4, 8, 16, 32, 32, 32, 64, 256 };

	memset(m, 0, sizeof(*m));
	m->alignment = aligns[rng_below(r, 10)];
	m->n_kv = rng_below(r, MAX_KV + 1);
	m->n_t = rng_below(r, MAX_T + 1);
	for (uint32_t i = 0; i < m->n_kv; i++)
		random_kv(r, &m->kv[i], i);
	for (uint32_t i = 0; i < m->n_t; i++)
		random_tensor(r, &m->t[i], i);
}

static void free_model(struct model *m)
{
	for (uint32_t i = 0; i < m->n_kv; i++) {
		free(m->kv[i].raw.p);
		for (uint64_t e = 0; e < MAX_ARRAY; e++)
			free(m->kv[i].strs[e]);
	}
	for (uint32_t i = 0; i < m->n_t; i++)
		free(m->t[i].data);
}

/* The model as the format lays it out; *min_len the shortest prefix that
 * is still a whole file (the last tensor's padding may go). */
static void naive_file(const struct model *m, struct nb *b, size_t *min_len)
{
	bool akey = m->alignment != 32;
	uint64_t off = 0;
	size_t data_start;

	nb_header(b, 3, m->n_t, m->n_kv + akey);
	if (akey) {	/* the writer puts it first (gguf_writer_init()) */
		nb_cstr(b, "general.alignment");
		nb_u32(b, 4);
		nb_u32(b, m->alignment);
	}
	for (uint32_t i = 0; i < m->n_kv; i++) {
		const struct m_kv *kv = &m->kv[i];

		nb_cstr(b, kv->key);
		nb_u32(b, kv->type);
		if (kv->type == 9) {
			nb_u32(b, kv->elem);
			nb_u64(b, kv->n);
		}
		nb_bytes(b, kv->raw.p, kv->raw.len);
	}
	for (uint32_t i = 0; i < m->n_t; i++) {
		nb_tinfo(b, m->t[i].name, m->t[i].n_dims, m->t[i].dims,
			 m->t[i].type, off);
		off += m->t[i].bytes;
		off += (m->alignment - off % m->alignment) % m->alignment;
	}
	*min_len = b->len;
	nb_pad(b, m->alignment);
	data_start = b->len;
	for (uint32_t i = 0; i < m->n_t; i++) {
		nb_bytes(b, m->t[i].data, m->t[i].bytes);
		*min_len = b->len;
		nb_pad(b, m->alignment);
	}
	if (m->n_t == 0)
		assert_true(*min_len <= data_start);
}

static void write_model(const struct model *m, struct strbuf *out)
{
	struct gguf_writer w;

	assert_int_equal(gguf_writer_init(&w, m->alignment), 0);
	for (uint32_t i = 0; i < m->n_kv; i++) {
		const struct m_kv *kv = &m->kv[i];

		if (kv->type == 8)
			gguf_write_str(&w, kv->key, kv->strs[0], kv->lens[0]);
		else if (kv->type == 9 && kv->elem == 8)
			gguf_write_str_array(&w, kv->key, kv->n,
					     (const char *const *)kv->strs,
					     kv->lens);
		else if (kv->type == 9)
			gguf_write_array(&w, kv->key, kv->elem, kv->n,
					 kv->raw.p);
		else
			gguf_write_kv(&w, kv->key, kv->type, kv->raw.p);
	}
	for (uint32_t i = 0; i < m->n_t; i++)
		gguf_write_tensor(&w, m->t[i].name, m->t[i].type,
				  m->t[i].n_dims, m->t[i].dims, m->t[i].data,
				  NULL);
	assert_int_equal(gguf_write_finish(&w, out), 0);
	gguf_writer_release(&w);
}

/* ------------------------------------------------------------------------
 * The reader against the model
 */

static uint64_t raw_le(const unsigned char *p, unsigned n)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* The typed getters of one scalar key against its raw bytes. */
static void check_getters(const struct gguf_file *f, const struct m_kv *kv)
{
	char err[256];
	uint32_t u = 0;
	float fl;
	bool bo;
	struct gguf_str s;
	const unsigned char *p = kv->raw.p;
	int rc = gguf_get_u32(f, kv->key, &u, err, sizeof(err));

	if (kv->type <= 5 || kv->type == 10 || kv->type == 11) {
		unsigned size = ref_size[kv->type];
		uint64_t v = raw_le(p, size);
		bool sgn = kv->type == 1 || kv->type == 3 || kv->type == 5 ||
			   kv->type == 11;
		bool neg = sgn && (v >> (size * 8 - 1));

		if (neg || v > UINT32_MAX) {
			assert_int_equal(rc, -EINVAL);
			assert_non_null(strstr(err, "out of the u32 range"));
		} else {
			assert_int_equal(rc, 0);
			assert_int_equal(u, v);
		}
	} else {
		assert_int_equal(rc, -EINVAL);
		assert_non_null(strstr(err, kv->key));
		assert_non_null(strstr(err, "expected an integer"));
	}
	rc = gguf_get_f32(f, kv->key, &fl, err, sizeof(err));
	if (kv->type == 6) {
		uint32_t bits = (uint32_t)raw_le(p, 4), got;

		assert_int_equal(rc, 0);
		memcpy(&got, &fl, 4);
		assert_int_equal(got, bits);
	} else if (kv->type != 12) {
		assert_int_equal(rc, -EINVAL);
	}
	rc = gguf_get_bool(f, kv->key, &bo, err, sizeof(err));
	assert_int_equal(rc, kv->type == 7 ? 0 : -EINVAL);
	if (kv->type == 7)
		assert_int_equal(bo, p[0]);
	rc = gguf_get_str(f, kv->key, &s, err, sizeof(err));
	assert_int_equal(rc, kv->type == 8 ? 0 : -EINVAL);
	if (kv->type == 8) {
		assert_int_equal(s.len, kv->lens[0]);
		if (s.len)
			assert_memory_equal(s.ptr, kv->strs[0], s.len);
	}
}

static void check_array(const struct gguf_file *f, const struct m_kv *kv)
{
	struct gguf_array a;
	char err[256];

	assert_int_equal(gguf_get_array(f, kv->key, &a, err, sizeof(err)), 0);
	assert_int_equal(a.type, kv->elem);
	assert_int_equal(a.n, kv->n);
	for (uint64_t e = 0; e < kv->n; e++) {
		const unsigned char *p = kv->raw.p + e * ref_size[kv->elem];
		uint32_t bits;

		switch (kv->elem) {
		case 8: {
			struct gguf_str s = gguf_array_str(&a, e);

			assert_int_equal(s.len, kv->lens[e]);
			if (s.len)
				assert_memory_equal(s.ptr, kv->strs[e], s.len);
			break;
		}
		case 6: {
			float v = gguf_array_f32(&a, e);

			memcpy(&bits, &v, 4);
			assert_int_equal(bits, raw_le(p, 4));
			break;
		}
		case 5:
			assert_int_equal((uint32_t)gguf_array_i32(&a, e),
					 raw_le(p, 4));
			break;
		case 4:
			assert_int_equal(gguf_array_u32(&a, e), raw_le(p, 4));
			break;
		case 0:
			assert_int_equal(gguf_array_u8(&a, e), p[0]);
			break;
		default:
			break;
		}
	}
}

/* Parse an exact-size copy of b and compare with m. */
static void check_read(const struct model *m, const unsigned char *bytes,
		       size_t len, uint32_t version)
{
	unsigned char *copy = malloc(len);
	struct gguf_file f;
	char err[512] = "";

	assert_non_null(copy);
	memcpy(copy, bytes, len);
	copy[4] = (unsigned char)version;
	if (gguf_parse(&f, copy, len, "model.gguf", err, sizeof(err)) != 0)
		fail_msg("parse: %s", err);
	assert_int_equal(gguf_check(&f), 0);
	assert_int_equal(f.version, version);
	assert_int_equal(f.alignment, m->alignment);
	assert_int_equal(f.n_kv, m->n_kv + (m->alignment != 32));
	assert_int_equal(f.n_tensors, m->n_t);
	assert_int_equal(f.data_offset % m->alignment, 0);
	for (uint32_t i = 0; i < m->n_kv; i++) {
		const struct m_kv *kv = &m->kv[i];
		const struct gguf_kv *got = gguf_find_kv(&f, kv->key);

		assert_non_null(got);
		assert_int_equal(got->type, kv->type);
		assert_int_equal(got->elem_type, kv->elem);
		assert_int_equal(got->n, kv->n);
		assert_int_equal(got->value_bytes, kv->raw.len);
		if (kv->raw.len)
			assert_memory_equal(got->value, kv->raw.p, kv->raw.len);
		if (kv->type == 9)
			check_array(&f, kv);
		else
			check_getters(&f, kv);
	}
	for (uint32_t i = 0; i < m->n_t; i++) {
		const struct m_tensor *t = &m->t[i];
		const struct gguf_tensor *got = gguf_find_tensor(&f, t->name);

		assert_non_null(got);
		assert_ptr_equal(got, &f.tensors[i]);
		assert_int_equal(got->type, t->type);
		assert_int_equal(got->n_dims, t->n_dims);
		for (uint32_t d = 0; d < 4; d++)
			assert_int_equal(got->dims[d],
					 d < t->n_dims ? t->dims[d] : 1);
		assert_int_equal(got->n_bytes, t->bytes);
		assert_int_equal(((const unsigned char *)got->data - copy) %
					 m->alignment, 0);
		assert_memory_equal(got->data, t->data, t->bytes);
	}
	assert_null(gguf_find_kv(&f, "no.such.key"));
	assert_null(gguf_find_tensor(&f, "no.such.tensor"));
	gguf_free(&f);
	free(copy);
}

/* ------------------------------------------------------------------------
 * Round trips
 */

static void test_round_trip(void **state)
{
	struct rng r = rng_for(1);

	(void)state;
	for (int iter = 0; iter < 300; iter++) {
		struct model m;
		struct nb ref = { 0 };
		struct strbuf out = STRBUF_INIT;
		size_t min_len;

		random_model(&r, &m);
		naive_file(&m, &ref, &min_len);
		write_model(&m, &out);
		assert_int_equal(out.len, ref.len);
		assert_memory_equal(out.data, ref.p, ref.len);
		check_read(&m, ref.p, ref.len, 3);
		check_read(&m, ref.p, ref.len, 2);
		strbuf_release(&out);
		free(ref.p);
		free_model(&m);
	}
}

/* Tensors added without bytes: the head, then the caller's bytes and
 * padding, make the same file as the in-memory writer. */
static void test_streamed(void **state)
{
	struct rng r = rng_for(2);

	(void)state;
	for (int iter = 0; iter < 50; iter++) {
		struct model m;
		struct nb ref = { 0 };
		struct strbuf out = STRBUF_INIT;
		struct gguf_writer w;
		size_t min_len;
		uint64_t off, want = 0;
		uint32_t n_kv;

		random_model(&r, &m);
		n_kv = m.n_kv;
		m.n_kv = 0;	/* tensors only; restored for free_model() */
		naive_file(&m, &ref, &min_len);
		assert_int_equal(gguf_writer_init(&w, m.alignment), 0);
		for (uint32_t i = 0; i < m.n_t; i++) {
			assert_int_equal(gguf_write_tensor(&w, m.t[i].name,
					m.t[i].type, m.t[i].n_dims, m.t[i].dims,
					NULL, &off), 0);
			assert_int_equal(off, want);
			want += m.t[i].bytes +
				gguf_write_pad(m.t[i].bytes, m.alignment);
		}
		if (m.n_t)
			assert_int_equal(gguf_write_finish(&w, &out), -EINVAL);
		assert_int_equal(gguf_write_head(&w, &out), 0);
		for (uint32_t i = 0; i < m.n_t; i++) {
			static const unsigned char z[256];

			strbuf_append(&out, m.t[i].data, m.t[i].bytes);
			strbuf_append(&out, z, gguf_write_pad(m.t[i].bytes,
							      m.alignment));
		}
		assert_int_equal(out.len, ref.len);
		assert_memory_equal(out.data, ref.p, ref.len);
		gguf_writer_release(&w);
		strbuf_release(&out);
		free(ref.p);
		m.n_kv = n_kv;
		free_model(&m);
	}
}

static void test_writer_refuses(void **state)
{
	struct gguf_writer w;
	uint64_t dims[5] = { 32, 1, 1, 1, 1 };

	(void)state;
	assert_int_equal(gguf_writer_init(&w, 48), -EINVAL);
	gguf_writer_release(&w);
	assert_int_equal(gguf_writer_init(&w, 0), -EINVAL);
	gguf_writer_release(&w);
	assert_int_equal(gguf_writer_init(&w, 32), 0);
	assert_int_equal(gguf_write_kv(&w, "s", GGUF_VT_STRING, "x"), -EINVAL);
	gguf_writer_release(&w);
	assert_int_equal(gguf_writer_init(&w, 32), 0);
	dims[0] = 48;	/* not whole Q4_0 blocks */
	assert_int_equal(gguf_write_tensor(&w, "t", GGUF_TENSOR_Q4_0, 1, dims,
					   NULL, NULL), -EINVAL);
	/* sticky */
	assert_int_equal(gguf_write_u32(&w, "k", 1), -EINVAL);
	gguf_writer_release(&w);
	assert_int_equal(gguf_writer_init(&w, 32), 0);
	assert_int_equal(gguf_write_tensor(&w, "t", 10, 1, dims, NULL, NULL),
			 -EINVAL);	/* Q2_K: not read */
	gguf_writer_release(&w);
	assert_int_equal(gguf_writer_init(&w, 32), 0);
	assert_int_equal(gguf_write_tensor(&w, "t", 0, 5, dims, NULL, NULL),
			 -EINVAL);
	gguf_writer_release(&w);
}

static void test_types(void **state)
{
	(void)state;
	for (uint32_t id = 0; id < 64; id++) {
		const struct gguf_type_info *t = gguf_type_info(id);
		size_t k;

		for (k = 0; k < N_REF_TYPES && ref_types[k].id != id; k++)
			;
		if (k == N_REF_TYPES) {
			assert_null(t);
			continue;
		}
		assert_non_null(t);
		assert_int_equal(t->block_elems, ref_types[k].elems);
		assert_int_equal(t->block_bytes, ref_types[k].bytes);
	}
	assert_null(gguf_type_info(UINT32_MAX));
	{
		uint64_t b;

		assert_true(gguf_type_bytes(GGUF_TENSOR_Q6_K, 512, &b));
		assert_int_equal(b, 420);
		assert_false(gguf_type_bytes(GGUF_TENSOR_Q6_K, 100, &b));
		assert_false(gguf_type_bytes(GGUF_TENSOR_F32, UINT64_MAX / 2, &b));
	}
}

/* ------------------------------------------------------------------------
 * Refusals
 */

/* Parse an exact-size copy: -EINVAL, a message naming the file, holding
 * want, and "at byte AT:" when at >= 0. */
static void expect_refusal(const struct nb *b, const char *want, long at)
{
	unsigned char *copy = malloc(b->len ? b->len : 1);
	struct gguf_file f;
	char err[512] = "", where[64];
	int rc;

	assert_non_null(copy);
	memcpy(copy, b->p, b->len);
	rc = gguf_parse(&f, copy, b->len, "bad.gguf", err, sizeof(err));
	if (rc != -EINVAL)
		fail_msg("want -EINVAL with '%s', got %d (%s)", want, rc, err);
	if (!strstr(err, want) || !strstr(err, "gguf 'bad.gguf'"))
		fail_msg("want '%s' in: %s", want, err);
	if (at >= 0) {
		snprintf(where, sizeof(where), "at byte %ld:", at);
		if (!strstr(err, where))
			fail_msg("want '%s' in: %s", where, err);
	}
	assert_null(f.kv);
	assert_null(f.tensors);
	free(copy);
}

/* Start b again as a file of n tensors given whole (infos then data)
 * after one key. */
static void tensor_file(struct nb *b, uint32_t n, const char *const *names,
			const uint32_t *n_dims, const uint64_t (*dims)[4],
			const uint32_t *types, const uint64_t *offsets,
			uint64_t data_bytes)
{
	b->len = 0;
	nb_header(b, 3, n, 1);
	nb_cstr(b, "general.architecture");
	nb_u32(b, 8);
	nb_cstr(b, "llama");
	for (uint32_t i = 0; i < n; i++)
		nb_tinfo(b, names[i], n_dims[i], dims[i], types[i], offsets[i]);
	nb_pad(b, 32);
	for (uint64_t i = 0; i < data_bytes; i++)
		nb_le(b, i, 1);
}

static void test_refuse_header(void **state)
{
	struct nb b = { 0 };

	(void)state;
	nb_bytes(&b, "GGUG", 4);
	nb_u32(&b, 3);
	nb_u64(&b, 0);
	nb_u64(&b, 0);
	expect_refusal(&b, "bad magic, expected \"GGUF\"", 0);
	b.len = 0;
	expect_refusal(&b, "bad magic", 0);
	b.len = 0;
	nb_header(&b, 0x03000000u, 0, 0);
	expect_refusal(&b, "byte-swapped (big-endian)", 4);
	for (uint32_t v = 0; v < 6; v++) {
		char want[64];

		if (v == 2 || v == 3)
			continue;
		b.len = 0;
		nb_header(&b, v, 0, 0);
		snprintf(want, sizeof(want), "version %u, expected 2 or 3", v);
		expect_refusal(&b, want, 4);
	}
	/* counts no file of this size holds: refused before any malloc */
	b.len = 0;
	nb_header(&b, 3, 0, UINT64_MAX);
	expect_refusal(&b, "kv count 18446744073709551615: each key takes at least 13 bytes, 0 left", 16);
	b.len = 0;
	nb_header(&b, 3, 1ull << 60, 0);
	expect_refusal(&b, "tensor count 1152921504606846976: each info takes at least 32 bytes, 0 left", 8);
	b.len = 0;
	nb_header(&b, 3, 0, 0);
	b.len = 20;
	expect_refusal(&b, "kv count: needs 8 bytes, 4 left", 16);
	free(b.p);
}

static void test_refuse_kv(void **state)
{
	struct nb b = { 0 };

	(void)state;
	/* a key's length past the end */
	nb_header(&b, 3, 0, 1);
	nb_u64(&b, 1000);
	nb_bytes(&b, "abcdefgh", 8);
	expect_refusal(&b, "key 0: length 1000 runs past the end (8 bytes left)", 24);

	/* an empty key */
	b.len = 0;
	nb_header(&b, 3, 0, 1);
	nb_str(&b, "", 0);
	nb_u32(&b, 0);
	nb_le(&b, 0, 1);
	expect_refusal(&b, "key of 0 bytes, expected 1 to 65535", 24);

	/* a string value past the end */
	nb_one_kv(&b, "name", 8);
	nb_u64(&b, 1ull << 62);
	nb_bytes(&b, "x", 1);
	expect_refusal(&b, "value of 'name': length 4611686018427387904 runs past the end (1 bytes left)", 40);

	/* an unknown value type */
	nb_one_kv(&b, "k", 13);
	nb_u64(&b, 0);
	expect_refusal(&b, "key 'k': unknown value type 13 (0 to 12)", 33);

	/* a nested array */
	nb_one_array(&b, "nest", 9, 1);
	nb_u32(&b, 0);
	nb_u64(&b, 0);
	expect_refusal(&b, "key 'nest': array of arrays, not read", 40);

	/* an unknown element type */
	nb_one_array(&b, "arr", 77, 0);
	expect_refusal(&b, "unknown array element type 77", 39);

	/* array counts past the end, fixed and string elements */
	nb_one_array(&b, "arr", 12, 1ull << 61);
	nb_u64(&b, 0);
	expect_refusal(&b, "value of 'arr': 2305843009213693952 f64 run past the end (8 bytes left)", 51);
	nb_one_array(&b, "tokens", 8, 3);
	nb_cstr(&b, "a");
	nb_u64(&b, 5);
	expect_refusal(&b, "value of 'tokens': 3 strings run past the end: each takes at least 8 bytes, 17 left", 54);
	/* ... and a string element past the end */
	nb_one_array(&b, "tokens", 8, 2);
	nb_cstr(&b, "a");
	nb_u64(&b, 500);
	nb_bytes(&b, "0123456789", 10);
	expect_refusal(&b, "string 1 of 'tokens': length 500 runs past the end (10 bytes left)", 63);

	/* a bool that is not 0 or 1 */
	nb_one_array(&b, "flags", 7, 3);
	nb_le(&b, 0x000201, 3);
	expect_refusal(&b, "value of 'flags': bool byte 2, expected 0 or 1", 54);

	/* duplicate keys: the second is named, with the first's offset */
	b.len = 0;
	nb_header(&b, 3, 0, 3);
	nb_cstr(&b, "a");
	nb_u32(&b, 0);
	nb_le(&b, 1, 1);
	nb_cstr(&b, "b");
	nb_u32(&b, 0);
	nb_le(&b, 1, 1);
	nb_cstr(&b, "a");
	nb_u32(&b, 4);
	nb_u32(&b, 7);
	expect_refusal(&b, "duplicate key 'a' (first at byte 24)", 52);

	/* names are shown escaped and cut */
	b.len = 0;
	nb_header(&b, 3, 0, 1);
	nb_str(&b, "\n\x1b[2J\0ev'il", 11);
	nb_u32(&b, 99);
	nb_u32(&b, 0);
	nb_le(&b, 0, 1);
	expect_refusal(&b, "key '\\x0a\\x1b[2J\\x00ev\\x27il': unknown value type 99", 43);
	free(b.p);
}

static void test_refuse_alignment(void **state)
{
	struct nb b = { 0 };

	(void)state;
	for (uint32_t a = 0; a < 70; a++) {
		char want[80];

		if (a && !(a & (a - 1)))
			continue;
		nb_one_kv(&b, "general.alignment", 4);
		nb_u32(&b, a);
		snprintf(want, sizeof(want),
			 "general.alignment %u is not a power of two", a);
		expect_refusal(&b, want, 53);
	}
	nb_one_kv(&b, "general.alignment", 8);
	nb_cstr(&b, "32");
	expect_refusal(&b, "general.alignment: expected a u32 power of two", 53);
	free(b.p);
}

static void test_refuse_tensors(void **state)
{
	static const char *const names[] = { "a.weight", "b.weight", "a.weight" };
	static const uint32_t nd1[] = { 1, 1, 1 };
	uint64_t dims[3][4] = { { 32 }, { 32 }, { 32 } };
	uint32_t types[3] = { 0, 0, 0 };
	uint64_t offs[3] = { 0, 128, 256 };
	struct nb b = { 0 };
	/* the first info starts after the header and the one key */
	const long info0 = 24 + 8 + 20 + 4 + 8 + 5;
	const long type0 = info0 + 8 + 8 + 4 + 8;	/* its type field */
	const long off0 = type0 + 4, off1 = off0 + 40;	/* infos of 40 bytes */

	(void)state;
	/* the baseline parses */
	tensor_file(&b, 2, names, nd1, (const uint64_t (*)[4])dims, types,
		    offs, 256);
	{
		struct gguf_file f;
		char err[256];

		assert_int_equal(gguf_parse(&f, b.p, b.len, "ok", err,
					    sizeof(err)), 0);
		assert_int_equal(f.tensors[0].info_at, info0);
		gguf_free(&f);
	}

	tensor_file(&b, 3, names, nd1, (const uint64_t (*)[4])dims, types,
		    offs, 384);
	expect_refusal(&b, "duplicate tensor name 'a.weight' (first at byte 69)",
		       info0 + 2 * 40);

	b.len = 0;
	{
		uint32_t nd[1] = { 0 };
		uint64_t d5[1][4] = { { 1, 1, 1, 1 } };

		tensor_file(&b, 0, names, nd, (const uint64_t (*)[4])d5, types,
			    offs, 0);
		b.p[8] = 1;	/* one tensor, its info by hand: 5 dims */
		b.len = info0;
		nb_cstr(&b, "a.weight");
		nb_u32(&b, 5);
		for (int i = 0; i < 5; i++)
			nb_u64(&b, 1);
		nb_u32(&b, 0);
		nb_u64(&b, 0);
		expect_refusal(&b, "tensor 'a.weight': n_dims 5, expected 1 to 4",
			       info0 + 16);
		tensor_file(&b, 1, names, nd, (const uint64_t (*)[4])d5, types,
			    offs, 0);
		expect_refusal(&b, "n_dims 0, expected 1 to 4", info0 + 16);
	}

	/* dims: zero, above 2^63-1, a product that overflows */
	b.len = 0;
	{
		uint32_t nd[1] = { 2 };
		uint64_t d[1][4] = { { 32, 0 } };

		tensor_file(&b, 1, names, nd, (const uint64_t (*)[4])d, types,
			    offs, 128);
		expect_refusal(&b, "tensor 'a.weight': dimension 1 is 0", info0 + 28);
		d[0][1] = 1ull << 63;
		tensor_file(&b, 1, names, nd, (const uint64_t (*)[4])d, types,
			    offs, 128);
		expect_refusal(&b, "dimension 1 is 9223372036854775808", info0 + 28);
		b.len = 0;
		d[0][0] = 1ull << 32;
		d[0][1] = 1ull << 31;
		tensor_file(&b, 1, names, nd, (const uint64_t (*)[4])d, types,
			    offs, 128);
		expect_refusal(&b, "the product of its dimensions overflows",
			       info0 + 28);
		/* elements fit, bytes do not: 2^62 f32 */
		b.len = 0;
		d[0][0] = 1ull << 31;
		d[0][1] = 1ull << 31;
		tensor_file(&b, 1, names, nd, (const uint64_t (*)[4])d, types,
			    offs, 128);
		expect_refusal(&b, "tensor 'a.weight': byte size overflows",
			       type0 + 8);
	}

	/* types: unsupported, unknown, a row not whole blocks */
	for (uint32_t ty = 4; ty < 40; ty++) {
		char want[80];

		if (gguf_type_info(ty))
			continue;
		types[0] = ty;
		tensor_file(&b, 1, names, nd1, (const uint64_t (*)[4])dims,
			    types, offs, 128);
		snprintf(want, sizeof(want),
			 "tensor 'a.weight': unknown or unsupported type %u", ty);
		expect_refusal(&b, want, type0);
	}
	types[0] = GGUF_TENSOR_Q4_K;
	tensor_file(&b, 1, names, nd1, (const uint64_t (*)[4])dims, types,
		    offs, 128);
	expect_refusal(&b, "tensor 'a.weight': row length 32 is not a multiple of q4_k's block of 256",
		       type0);
	types[0] = 0;

	/* offsets: unaligned, out of order, overlapping, past the end */
	offs[0] = 16;
	tensor_file(&b, 1, names, nd1, (const uint64_t (*)[4])dims, types,
		    offs, 256);
	expect_refusal(&b, "tensor 'a.weight': offset 16 is not a multiple of the alignment 32",
		       off0);
	b.len = 0;
	offs[0] = 128;
	offs[1] = 0;
	tensor_file(&b, 2, names, nd1, (const uint64_t (*)[4])dims, types,
		    offs, 256);
	expect_refusal(&b, "tensor 'b.weight': offset 0 overlaps or precedes the previous tensor, which ends at 256",
		       off1);
	b.len = 0;
	offs[0] = 0;
	offs[1] = 96;	/* a.weight is 128 bytes */
	tensor_file(&b, 2, names, nd1, (const uint64_t (*)[4])dims, types,
		    offs, 256);
	expect_refusal(&b, "tensor 'b.weight': offset 96 overlaps", off1);
	offs[1] = 128;
	tensor_file(&b, 2, names, nd1, (const uint64_t (*)[4])dims, types,
		    offs, 255);
	expect_refusal(&b, "tensor 'b.weight': 128 bytes at offset 128 run past the end of the data section (255 bytes)",
		       off1);
	offs[1] = UINT64_MAX - 31;	/* aligned, and near wrapping */
	tensor_file(&b, 2, names, nd1, (const uint64_t (*)[4])dims, types,
		    offs, 256);
	expect_refusal(&b, "run past the end of the data section", off1);
	/* the infos' count against the bytes left after the keys */
	tensor_file(&b, 0, names, nd1, (const uint64_t (*)[4])dims, types,
		    offs, 0);
	b.p[8] = 2;
	b.len = info0 + 40;
	expect_refusal(&b, "tensor count 2: each info takes at least 32 bytes, 40 left",
		       info0);
	free(b.p);
}

/* ------------------------------------------------------------------------
 * Truncations and mutations
 */

/* 0, or -EINVAL with a message naming the file; a parsed file checks. */
static int parse_copy(const unsigned char *p, size_t len)
{
	unsigned char *copy = malloc(len ? len : 1);
	struct gguf_file f;
	char err[512] = "";
	int rc;

	assert_non_null(copy);
	memcpy(copy, p, len);
	rc = gguf_parse(&f, copy, len, "cut.gguf", err, sizeof(err));
	if (rc == 0) {
		assert_int_equal(gguf_check(&f), 0);
		for (uint64_t i = 0; i < f.n_tensors; i++) {
			const unsigned char *d = f.tensors[i].data;

			assert_true(d >= copy && d + f.tensors[i].n_bytes <=
						 copy + len);
		}
		gguf_free(&f);
	} else {
		assert_int_equal(rc, -EINVAL);
		assert_non_null(strstr(err, "gguf 'cut.gguf': at byte "));
	}
	free(copy);
	return rc;
}

static void test_truncations(void **state)
{
	struct rng r = rng_for(3);

	(void)state;
	for (int iter = 0; iter < 30; iter++) {
		struct model m;
		struct nb b = { 0 };
		size_t min_len;

		random_model(&r, &m);
		naive_file(&m, &b, &min_len);
		for (size_t len = 0; len <= b.len; len++) {
			int rc = parse_copy(b.p, len);

			if (len >= min_len)
				assert_int_equal(rc, 0);
			else if (rc == 0)
				fail_msg("prefix of %zu bytes of %zu parsed (min %zu)",
					 len, b.len, min_len);
		}
		free(b.p);
		free_model(&m);
	}
}

static void test_mutations(void **state)
{
	struct rng r = rng_for(4);
	int parsed = 0, refused = 0;

	(void)state;
	for (int iter = 0; iter < 100; iter++) {
		struct model m;
		struct nb b = { 0 };
		size_t min_len;

		random_model(&r, &m);
		naive_file(&m, &b, &min_len);
		for (int k = 0; k < 100 && b.len; k++) {
			unsigned char *mut = malloc(b.len);
			int n = 1 + rng_below(&r, 4);

			memcpy(mut, b.p, b.len);
			for (int j = 0; j < n; j++) {
				size_t at = rng_below(&r, (uint32_t)b.len);

				/* a byte of a small value, or a wild one */
				mut[at] = rng_below(&r, 2) ?
					(unsigned char)rng_below(&r, 16) :
					(unsigned char)rng_next(&r);
			}
			if (parse_copy(mut, b.len) == 0)
				parsed++;
			else
				refused++;
			free(mut);
		}
		free(b.p);
		free_model(&m);
	}
	/* both outcomes happen, so the test is not vacuous */
	assert_true(parsed > 0 && refused > 0);
}

/* The getters' refusals and their messages. */
static void test_getters(void **state)
{
	struct gguf_writer w;
	struct strbuf out = STRBUF_INIT;
	struct gguf_file f;
	char err[256];
	uint32_t u;
	float fl;
	bool bo;
	struct gguf_str s;
	struct gguf_array a;
	int64_t neg = -1;
	uint64_t big = 1ull << 32;
	double d = 0.25;
	int8_t small = 7;

	(void)state;
	assert_int_equal(gguf_writer_init(&w, 32), 0);
	gguf_write_kv(&w, "neg", GGUF_VT_I64, &neg);
	gguf_write_kv(&w, "big", GGUF_VT_U64, &big);
	gguf_write_kv(&w, "dbl", GGUF_VT_F64, &d);
	gguf_write_kv(&w, "small", GGUF_VT_I8, &small);
	gguf_write_str(&w, "name", "llama", 5);
	gguf_write_str_array(&w, "tok", 2, (const char *const[]){ "a", "bc" },
			     NULL);
	assert_int_equal(gguf_write_finish(&w, &out), 0);
	assert_int_equal(gguf_parse(&f, out.data, out.len, "g", err,
				    sizeof(err)), 0);
	assert_int_equal(gguf_get_u32(&f, "neg", &u, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "key 'neg': i64 value out of the u32 range");
	assert_int_equal(gguf_get_u32(&f, "big", &u, err, sizeof(err)), -EINVAL);
	assert_int_equal(gguf_get_u32(&f, "small", &u, err, sizeof(err)), 0);
	assert_int_equal(u, 7);
	assert_int_equal(gguf_get_u32(&f, "gone", &u, err, sizeof(err)), -ENOENT);
	assert_string_equal(err, "key 'gone' is missing, expected a u32");
	assert_int_equal(gguf_get_u32(&f, "name", &u, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "key 'name' is string, expected an integer (u32)");
	assert_int_equal(gguf_get_f32(&f, "dbl", &fl, err, sizeof(err)), 0);
	assert_true(fl == 0.25f);
	assert_int_equal(gguf_get_bool(&f, "tok", &bo, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "key 'tok' is array of string, expected bool");
	assert_int_equal(gguf_get_str(&f, "name", &s, err, sizeof(err)), 0);
	assert_int_equal(s.len, 5);
	assert_memory_equal(s.ptr, "llama", 5);
	assert_true((const unsigned char *)s.ptr > f.base &&
		    (const unsigned char *)s.ptr < f.base + f.size);
	assert_int_equal(gguf_get_array(&f, "name", &a, err, sizeof(err)), -EINVAL);
	assert_int_equal(gguf_get_array(&f, "tok", &a, err, sizeof(err)), 0);
	s = gguf_array_str(&a, 1);
	assert_int_equal(s.len, 2);
	assert_memory_equal(s.ptr, "bc", 2);
	gguf_free(&f);
	gguf_free(&f);	/* a freed struct is zeroed: freeing it again is fine */
	strbuf_release(&out);
	gguf_writer_release(&w);
}

/* A vocabulary-sized string array: every element found in O(1), in the
 * mapping, equal to what was written. */
static void test_big_vocab(void **state)
{
	enum { N = 60000 };
	struct rng r = rng_for(5);
	struct gguf_writer w;
	struct strbuf out = STRBUF_INIT;
	struct gguf_file f;
	struct gguf_array a;
	char err[256];
	char **s = malloc(N * sizeof(*s));
	size_t *len = malloc(N * sizeof(*len));
	float *scores = malloc(N * sizeof(*scores));

	(void)state;
	assert_true(s && len && scores);
	for (uint32_t i = 0; i < N; i++) {
		random_str(&r, &s[i], &len[i]);
		scores[i] = -(float)i;
	}
	assert_int_equal(gguf_writer_init(&w, 32), 0);
	gguf_write_str_array(&w, "tokenizer.ggml.tokens", N,
			     (const char *const *)s, len);
	gguf_write_array(&w, "tokenizer.ggml.scores", GGUF_VT_F32, N, scores);
	assert_int_equal(gguf_write_finish(&w, &out), 0);
	assert_int_equal(gguf_parse(&f, out.data, out.len, "vocab", err,
				    sizeof(err)), 0);
	assert_int_equal(gguf_get_array(&f, "tokenizer.ggml.tokens", &a, err,
					sizeof(err)), 0);
	assert_int_equal(a.n, N);
	for (uint32_t i = 0; i < N; i++) {
		struct gguf_str p = gguf_array_str(&a, i);

		assert_int_equal(p.len, len[i]);
		if (p.len)
			assert_memory_equal(p.ptr, s[i], p.len);
		assert_true((const unsigned char *)p.ptr >= f.base &&
			    (const unsigned char *)p.ptr + p.len <= f.base + f.size);
	}
	assert_int_equal(gguf_get_array(&f, "tokenizer.ggml.scores", &a, err,
					sizeof(err)), 0);
	assert_true(gguf_array_f32(&a, N - 1) == -(float)(N - 1));
	gguf_free(&f);
	for (uint32_t i = 0; i < N; i++)
		free(s[i]);
	free(s);
	free(len);
	free(scores);
	strbuf_release(&out);
	gguf_writer_release(&w);
}

/*
 * A file of every value type (scalar and array) and every tensor type
 * read, built with the writer: it parses and holds them all.  With
 * GGUF_SEED_OUT=FILE it is also written there (the fuzzer's seed
 * tests/fuzz/gguf_corpus/kinds.gguf).
 */
static void test_kinds_file(void **state)
{
	static const uint64_t vals[2] = { 0x0123456789abcdefull, 1 };
	struct gguf_writer w;
	struct strbuf out = STRBUF_INIT;
	struct gguf_file f;
	char key[32], err[256];
	const char *path = getenv("GGUF_SEED_OUT");
	unsigned char *data = calloc(1, 256 * 4);

	(void)state;
	assert_non_null(data);
	assert_int_equal(gguf_writer_init(&w, 16), 0);
	for (uint32_t t = 0; t < GGUF_VT_COUNT; t++) {
		const void *v = t == GGUF_VT_BOOL ? (const void *)&vals[1] : vals;

		snprintf(key, sizeof(key), "scalar.%s", gguf_vtype_name(t));
		if (t == GGUF_VT_STRING)
			gguf_write_str(&w, key, "llama", 5);
		else if (t != GGUF_VT_ARRAY)
			gguf_write_kv(&w, key, t, v);
		snprintf(key, sizeof(key), "array.%s", gguf_vtype_name(t));
		if (t == GGUF_VT_STRING)
			gguf_write_str_array(&w, key, 3, (const char *const[]){
					     "<s>", "", "\xe2\x96\x81" "a" }, NULL);
		else if (t == GGUF_VT_BOOL)
			gguf_write_array(&w, key, t, 1, &vals[1]);
		else if (t != GGUF_VT_ARRAY)
			gguf_write_array(&w, key, t, 2, vals);
	}
	for (size_t k = 0; k < N_REF_TYPES; k++) {
		uint64_t dims[2] = { ref_types[k].elems == 1 ? 4 : ref_types[k].elems, 1 };
		uint64_t bytes = dims[0] / ref_types[k].elems * ref_types[k].bytes;

		for (uint64_t b = 0; b < bytes; b++)
			data[b] = (unsigned char)(b * 37 + k);
		snprintf(key, sizeof(key), "t.%u.weight", ref_types[k].id);
		gguf_write_tensor(&w, key, ref_types[k].id, 2, dims, data, NULL);
	}
	assert_int_equal(gguf_write_finish(&w, &out), 0);
	assert_int_equal(gguf_parse(&f, out.data, out.len, "kinds", err,
				    sizeof(err)), 0);
	assert_int_equal(f.n_kv, 1 + 2 * (GGUF_VT_COUNT - 1));
	assert_int_equal(f.n_tensors, N_REF_TYPES);
	assert_int_equal(f.alignment, 16);
	gguf_free(&f);
	if (path) {
		FILE *fp = fopen(path, "wb");

		assert_non_null(fp);
		assert_int_equal(fwrite(out.data, 1, out.len, fp), out.len);
		assert_int_equal(fclose(fp), 0);
	}
	strbuf_release(&out);
	gguf_writer_release(&w);
	free(data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_types),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_streamed),
		cmocka_unit_test(test_writer_refuses),
		cmocka_unit_test(test_getters),
		cmocka_unit_test(test_refuse_header),
		cmocka_unit_test(test_refuse_kv),
		cmocka_unit_test(test_refuse_alignment),
		cmocka_unit_test(test_refuse_tensors),
		cmocka_unit_test(test_truncations),
		cmocka_unit_test(test_mutations),
		cmocka_unit_test(test_kinds_file),
		cmocka_unit_test(test_big_vocab),
	};

	test_seed_init("test_gguf");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
