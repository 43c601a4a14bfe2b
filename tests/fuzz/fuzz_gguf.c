/*
 * fuzz_gguf.c - libFuzzer target for the GGUF reader (lib/model/gguf.c),
 * with the writer (gguf_write.c) as its inverse.
 *
 * The input is a file (the committed seeds, tests/fuzz/gguf_corpus, are
 * tiny valid files made with the writer: see the Makefile).  Each input
 * is used three ways:
 *  1. parsed from an exact-size copy (so ASan sees any read past the
 *     end): it must parse or fail with -EINVAL and a message naming the
 *     file and a byte offset, never crash;
 *  2. parsed, every invariant holds (gguf_check()), every key and tensor
 *     is found by its name (names holding no NUL), every getter answers
 *     0 or a refusal matching the value's type, every string element and
 *     every tensor's first and last byte is read inside the copy;
 *  3. written again through the writer (same alignment, every key,
 *     every tensor with its bytes) and parsed: the same keys with the
 *     same values, the same tensors with the same bytes.  Skipped when a
 *     name holds a NUL (the writer takes C strings);
 *  4. its tokenizer.* keys read as the coordinator reads them
 *     (gguf_vocab_read.h): a tokenizer built (it then encodes and
 *     decodes a text), or a refusal naming the file, or none.
 * Any violation abort()s, which libFuzzer reports with the input.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/gguf_write.h"
#include "text/gguf_tokenizer.h"
#include "text/gguf_vocab_read.h"

#include "tests/fuzz/fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


/* s as a C string (malloc'd), or NULL when it holds a NUL. */
static char *cstr(struct gguf_str s)
{
	char *c;

	if (memchr(s.ptr, 0, (size_t)s.len))
		return NULL;
	c = malloc((size_t)s.len + 1);
	CHECK(c);
	memcpy(c, s.ptr, (size_t)s.len);
	c[s.len] = 0;
	return c;
}

static bool inside(const unsigned char *base, size_t size, const void *p,
		   uint64_t n)
{
	const unsigned char *b = p;

	return b >= base && (size_t)(b - base) <= size &&
	       n <= size - (size_t)(b - base);
}

/* 2: lookups and getters of one key. */
static void check_kv(const struct gguf_file *f, const struct gguf_kv *kv)
{
	char *key = cstr(kv->key), err[256];
	uint32_t u;
	float fl;
	bool b;
	struct gguf_str s;
	struct gguf_array a;
	volatile unsigned char sink = 0;
	int rc;

	if (!key)
		return;
	CHECK(gguf_find_kv(f, key) == kv);
	rc = gguf_get_u32(f, key, &u, err, sizeof(err));
	CHECK(rc == 0 || rc == -EINVAL);
	rc = gguf_get_f32(f, key, &fl, err, sizeof(err));
	CHECK((rc == 0) == (kv->type == GGUF_VT_F32 || kv->type == GGUF_VT_F64));
	rc = gguf_get_bool(f, key, &b, err, sizeof(err));
	CHECK((rc == 0) == (kv->type == GGUF_VT_BOOL));
	rc = gguf_get_str(f, key, &s, err, sizeof(err));
	CHECK((rc == 0) == (kv->type == GGUF_VT_STRING));
	if (rc == 0)
		CHECK(inside(f->base, f->size, s.ptr, s.len));
	rc = gguf_get_array(f, key, &a, err, sizeof(err));
	CHECK((rc == 0) == (kv->type == GGUF_VT_ARRAY));
	for (uint64_t i = 0; rc == 0 && a.type == GGUF_VT_STRING && i < a.n; i++) {
		s = gguf_array_str(&a, i);
		CHECK(inside(f->base, f->size, s.ptr, s.len));
		if (s.len)
			sink ^= (unsigned char)(s.ptr[0] ^ s.ptr[s.len - 1]);
	}
	if (rc == 0 && a.n && a.type == GGUF_VT_F32)
		fl = gguf_array_f32(&a, a.n - 1);
	(void)sink;
	free(key);
}

/* 3: the parsed file through the writer; false when a name holds a NUL. */
static bool rewrite(const struct gguf_file *f, struct strbuf *out)
{
	struct gguf_writer w;
	bool ok = true;

	CHECK(gguf_writer_init(&w, f->alignment) == 0);
	for (uint64_t i = 0; i < f->n_kv && ok; i++) {
		const struct gguf_kv *kv = &f->kv[i];
		char *key = cstr(kv->key);

		ok = key != NULL;
		/* the writer writes general.alignment itself */
		if (!ok || (f->alignment != GGUF_DEFAULT_ALIGNMENT &&
			    strcmp(key, "general.alignment") == 0)) {
			free(key);
			continue;
		}
		if (kv->type == GGUF_VT_STRING) {
			gguf_write_str(&w, key, (const char *)kv->value + 8,
				       (size_t)kv->value_bytes - 8);
		} else if (kv->type == GGUF_VT_ARRAY &&
			   kv->elem_type == GGUF_VT_STRING) {
			struct gguf_array a = { GGUF_VT_STRING, kv->n, kv };
			const char **s = malloc((kv->n + 1) * sizeof(*s));
			size_t *len = malloc((kv->n + 1) * sizeof(*len));

			CHECK(s && len);
			for (uint64_t e = 0; e < kv->n; e++) {
				struct gguf_str x = gguf_array_str(&a, e);

				s[e] = x.ptr;
				len[e] = (size_t)x.len;
			}
			gguf_write_str_array(&w, key, kv->n, s, len);
			free(s);
			free(len);
		} else if (kv->type == GGUF_VT_ARRAY) {
			/* the file's bytes are little-endian C values here */
			gguf_write_array(&w, key, kv->elem_type, kv->n, kv->value);
		} else {
			gguf_write_kv(&w, key, kv->type, kv->value);
		}
		free(key);
	}
	for (uint64_t i = 0; i < f->n_tensors && ok; i++) {
		const struct gguf_tensor *t = &f->tensors[i];
		char *name = cstr(t->name);

		ok = name != NULL;
		if (ok)
			CHECK(gguf_write_tensor(&w, name, t->type, t->n_dims,
						t->dims, t->data, NULL) == 0);
		free(name);
	}
	if (ok)
		CHECK(gguf_write_finish(&w, out) == 0);
	gguf_writer_release(&w);
	return ok;
}

/* 3: the rewritten file holds what the first one did. */
static void check_same(const struct gguf_file *f, const struct gguf_file *g)
{
	CHECK(g->alignment == f->alignment);
	CHECK(g->n_kv == f->n_kv && g->n_tensors == f->n_tensors);
	for (uint64_t i = 0; i < f->n_kv; i++) {
		const struct gguf_kv *a = &f->kv[i];
		char *key = cstr(a->key);
		const struct gguf_kv *b = gguf_find_kv(g, key);

		CHECK(b);
		if (strcmp(key, "general.alignment") != 0) {
			CHECK(b->type == a->type && b->elem_type == a->elem_type);
			CHECK(b->n == a->n && b->value_bytes == a->value_bytes);
			CHECK(memcmp(b->value, a->value, (size_t)a->value_bytes) == 0);
		}
		free(key);
	}
	for (uint64_t i = 0; i < f->n_tensors; i++) {
		const struct gguf_tensor *a = &f->tensors[i], *b = &g->tensors[i];

		CHECK(b->name.len == a->name.len &&
		      memcmp(b->name.ptr, a->name.ptr, (size_t)a->name.len) == 0);
		CHECK(b->type == a->type && b->n_dims == a->n_dims);
		CHECK(memcmp(b->dims, a->dims, sizeof(a->dims)) == 0);
		CHECK(b->n_bytes == a->n_bytes);
		CHECK(memcmp(b->data, a->data, (size_t)a->n_bytes) == 0);
	}
}

/* 4: the tokenizer and chat template the keys describe, for the
 * coordinator (text/gguf_vocab_read.h): built, or refused naming the
 * file, or none; a built one round-trips a text. */
static void check_vocab(const struct gguf_file *f)
{
	static const char text[] = "Hello, w\xc3\xb6rld <|im_start|> 12 \xff";
	struct gguf_tokenizer *t = NULL;
	char err[512], *tmpl = NULL, back[256];
	int32_t ids[2 * sizeof(text) + 3];
	size_t n, n_back;
	int rc = gguf_vocab_read(f, "fuzz.gguf", &t, err, sizeof(err));

	CHECK(rc == 0 || rc == -ENOENT || rc == -EINVAL || rc == -ENOMEM);
	CHECK(rc != -EINVAL || strncmp(err, "gguf 'fuzz.gguf': ", 18) == 0);
	CHECK((rc == 0) == (t != NULL));
	if (t) {
		CHECK(gguf_tokenizer_encode(t, text, sizeof(text) - 1, false, false,
					    ids, sizeof(ids) / sizeof(ids[0]), &n) == 0);
		CHECK(gguf_tokenizer_decode(t, -1, ids, n, true, back, sizeof(back),
					    &n_back) == 0);
		gguf_tokenizer_free(t);
	}
	rc = gguf_chat_template_read(f, "fuzz.gguf", &tmpl, err, sizeof(err));
	CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM);
	CHECK(rc == 0 || tmpl == NULL);
	free(tmpl);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *copy = malloc(size ? size : 1);
	struct strbuf out = STRBUF_INIT;
	struct gguf_file f, g;
	char err[512] = "";
	volatile unsigned char sink = 0;
	int rc;

	CHECK(copy);
	memcpy(copy, data, size);
	rc = gguf_parse(&f, copy, size, "fuzz.gguf", err, sizeof(err));
	if (rc) {
		CHECK(rc == -EINVAL);
		CHECK(strncmp(err, "gguf 'fuzz.gguf': at byte ", 26) == 0);
		CHECK(f.kv == NULL && f.tensors == NULL);
		free(copy);
		return 0;
	}
	CHECK(gguf_check(&f) == 0);
	for (uint64_t i = 0; i < f.n_kv; i++)
		check_kv(&f, &f.kv[i]);
	check_vocab(&f);
	for (uint64_t i = 0; i < f.n_tensors; i++) {
		const struct gguf_tensor *t = &f.tensors[i];
		const unsigned char *d = t->data;
		char *name = cstr(t->name);

		CHECK(inside(copy, size, d, t->n_bytes) && t->n_bytes > 0);
		sink ^= (unsigned char)(d[0] ^ d[t->n_bytes - 1]);
		if (name)
			CHECK(gguf_find_tensor(&f, name) == t);
		free(name);
	}
	(void)sink;
	if (rewrite(&f, &out)) {
		rc = gguf_parse(&g, out.data, out.len, "rewritten.gguf", err,
				sizeof(err));
		if (rc)
			fprintf(stderr, "fuzz_gguf: %s\n", err);
		CHECK(rc == 0);
		check_same(&f, &g);
		gguf_free(&g);
	}
	strbuf_release(&out);
	gguf_free(&f);
	free(copy);
	return 0;
}
