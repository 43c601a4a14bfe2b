/*
 * llama_checkpoint.c - parse and map llama2.c checkpoints; see
 * llama_checkpoint.h for the three layouts.
 *
 * NOTES ON THE DESIGN
 *
 * Every size is computed in 64-bit with overflow checks before any
 * pointer is formed, and the sum must equal the file size exactly: after
 * that, every weight pointer is in bounds by construction.
 *
 * The legacy layout carries RoPE tables nobody reads (run.c skips them).
 * A file without them is accepted too: whether vocab_size is negative
 * fixes whether wcls is there, so the two candidate sizes differ by the
 * tables' size (seq_len x head_size floats, never 0) and the file size
 * picks one without ambiguity.
 *
 * Version 2 is laid out by one function run twice: first without the data
 * (it only adds up the size, with overflow checks), then, once the size
 * matches the file's, pointing into the mapping.  The norms come first,
 * so the Q8_0 values start 4-byte aligned; scales may not be (see
 * llama_q8.c), so they are never read through a float pointer.
 *
 * The file is mapped MAP_SHARED + PROT_READ: the weights are used in
 * place, never copied, and N workers share one page-cache copy.
 */
#include "model/llama_checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The 7 int32 of both headers, in file order. */
enum { H_DIM, H_HIDDEN, H_LAYERS, H_HEADS, H_KV_HEADS, H_VOCAB, H_SEQ, H_N };

static const char *const llama_header_names[H_N] = {
	"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
	"vocab_size", "seq_len",
};

/* Running size in floats, saturating to "overflowed". */
struct llama_size {
	uint64_t floats;
	bool overflow;
};

/* size += a * b * c floats. */
static void llama_size_add(struct llama_size *s, uint64_t a, uint64_t b,
			   uint64_t c)
{
	uint64_t ab, abc;

	if (__builtin_mul_overflow(a, b, &ab) ||
	    __builtin_mul_overflow(ab, c, &abc) ||
	    __builtin_add_overflow(s->floats, abc, &s->floats))
		s->overflow = true;
}

static int32_t llama_read_i32(const unsigned char *p)
{
	uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
		     (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	int32_t out;

	memcpy(&out, &v, sizeof(out));
	return out;
}

/*
 * Check the 7 header ints (vocab already made positive) and fill cfg.
 * Returns 0 or -EINVAL after writing err.
 */
static int llama_config_check(struct llama_config *cfg, const int32_t *h,
			      const char *name, char *err, size_t err_len)
{
	for (int i = 0; i < H_N; i++) {
		if (h[i] <= 0) {
			snprintf(err, err_len,
				 "checkpoint '%s': %s is %d, must be positive",
				 name, llama_header_names[i], (int)h[i]);
			return -EINVAL;
		}
	}
	if (h[H_DIM] % h[H_HEADS] != 0) {
		snprintf(err, err_len,
			 "checkpoint '%s': n_heads %d does not divide dim %d",
			 name, (int)h[H_HEADS], (int)h[H_DIM]);
		return -EINVAL;
	}
	if ((h[H_DIM] / h[H_HEADS]) % 2 != 0) {
		snprintf(err, err_len,
			 "checkpoint '%s': head size %d (dim %d / n_heads %d) is odd; RoPE rotates pairs",
			 name, (int)(h[H_DIM] / h[H_HEADS]), (int)h[H_DIM],
			 (int)h[H_HEADS]);
		return -EINVAL;
	}
	if (h[H_HEADS] % h[H_KV_HEADS] != 0) {
		snprintf(err, err_len,
			 "checkpoint '%s': n_kv_heads %d does not divide n_heads %d",
			 name, (int)h[H_KV_HEADS], (int)h[H_HEADS]);
		return -EINVAL;
	}
	cfg->dim = (uint32_t)h[H_DIM];
	cfg->hidden_dim = (uint32_t)h[H_HIDDEN];
	cfg->n_layers = (uint32_t)h[H_LAYERS];
	cfg->n_heads = (uint32_t)h[H_HEADS];
	cfg->n_kv_heads = (uint32_t)h[H_KV_HEADS];
	cfg->vocab = (uint32_t)h[H_VOCAB];
	cfg->seq_len = (uint32_t)h[H_SEQ];
	cfg->head_size = cfg->dim / cfg->n_heads;
	cfg->kv_dim = cfg->n_kv_heads * cfg->head_size;
	return 0;
}

/* Floats of every layer tensor together (the same in both layouts). */
static void llama_size_layers(struct llama_size *s,
			      const struct llama_config *c)
{
	uint64_t L = c->n_layers;

	llama_size_add(s, L, c->dim, 2);			/* rms_att, rms_ffn */
	llama_size_add(s, L, c->dim, c->dim);			/* wq */
	llama_size_add(s, L, c->kv_dim, 2ull * c->dim);		/* wk, wv */
	llama_size_add(s, L, c->dim, c->dim);			/* wo */
	llama_size_add(s, L, c->hidden_dim, 3ull * c->dim);	/* w1, w2, w3 */
}

/* *bytes = header + 4 * floats; false when it overflows. */
static bool llama_size_bytes(uint64_t floats, uint64_t header, uint64_t *bytes)
{
	return !__builtin_mul_overflow(floats, 4, bytes) &&
	       !__builtin_add_overflow(*bytes, header, bytes) &&
	       *bytes <= SIZE_MAX;
}

/* Point the weights at data, in legacy order; sizes already checked. */
static void llama_map_legacy(struct llama_checkpoint *ck, const float *p,
			     bool with_rope)
{
	const struct llama_config *c = &ck->cfg;
	struct llama_weights *w = &ck->w;
	size_t L = c->n_layers, dim = c->dim, hid = c->hidden_dim;

	w->token_embedding = p;	p += (size_t)c->vocab * dim;
	w->rms_att = p;		p += L * dim;
	w->wq = p;		p += L * dim * dim;
	w->wk = p;		p += L * c->kv_dim * dim;
	w->wv = p;		p += L * c->kv_dim * dim;
	w->wo = p;		p += L * dim * dim;
	w->rms_ffn = p;		p += L * dim;
	w->w1 = p;		p += L * hid * dim;
	w->w2 = p;		p += L * dim * hid;
	w->w3 = p;		p += L * hid * dim;
	w->rms_final = p;	p += dim;
	if (with_rope)
		p += (size_t)c->seq_len * c->head_size;	/* real + imag */
	w->wcls = ck->shared_classifier ? w->token_embedding : p;
}

/* Point the weights at data, in ak42 version 1 order. */
static void llama_map_ak42(struct llama_checkpoint *ck, const float *p)
{
	const struct llama_config *c = &ck->cfg;
	struct llama_weights *w = &ck->w;
	size_t L = c->n_layers, dim = c->dim, hid = c->hidden_dim;

	w->rms_att = p;		p += L * dim;
	w->rms_ffn = p;		p += L * dim;
	w->rms_final = p;	p += dim;
	w->token_embedding = p;	p += (size_t)c->vocab * dim;
	w->wq = p;		p += L * dim * dim;
	w->wk = p;		p += L * c->kv_dim * dim;
	w->wv = p;		p += L * c->kv_dim * dim;
	w->wo = p;		p += L * dim * dim;
	w->w1 = p;		p += L * hid * dim;
	w->w2 = p;		p += L * dim * hid;
	w->w3 = p;		p += L * hid * dim;
	w->wcls = ck->shared_classifier ? w->token_embedding : p;
}

static int llama_size_mismatch(const char *name, const char *layout,
			       uint64_t want, size_t have, char *err,
			       size_t err_len)
{
	snprintf(err, err_len,
		 "checkpoint '%s': %s header implies %llu bytes but the file has %zu (%s)",
		 name, layout, (unsigned long long)want, have,
		 have < want ? "truncated" : "trailing bytes");
	return -EINVAL;
}

static int llama_parse_legacy(struct llama_checkpoint *ck,
			      const unsigned char *data, size_t size,
			      const char *name, char *err, size_t err_len)
{
	struct llama_config *c = &ck->cfg;
	struct llama_size s = { 0, false };
	int32_t h[H_N];
	uint64_t base, with_rope;
	int rc;

	for (int i = 0; i < H_N; i++)
		h[i] = llama_read_i32(data + 4 * i);
	ck->shared_classifier = h[H_VOCAB] > 0;
	if (h[H_VOCAB] < 0) {
		if (h[H_VOCAB] == INT32_MIN) {
			snprintf(err, err_len,
				 "checkpoint '%s': vocab_size is %d, out of range",
				 name, (int)h[H_VOCAB]);
			return -EINVAL;
		}
		h[H_VOCAB] = -h[H_VOCAB];
	}
	rc = llama_config_check(c, h, name, err, err_len);
	if (rc)
		return rc;
	llama_size_add(&s, c->vocab, c->dim, ck->shared_classifier ? 1 : 2);
	llama_size_layers(&s, c);
	llama_size_add(&s, 1, c->dim, 1);
	base = s.floats;
	llama_size_add(&s, c->seq_len, c->head_size, 1);	/* RoPE tables */
	if (s.overflow ||
	    !llama_size_bytes(s.floats, LLAMA_LEGACY_HEADER_BYTES, &with_rope) ||
	    !llama_size_bytes(base, LLAMA_LEGACY_HEADER_BYTES, &base)) {
		snprintf(err, err_len,
			 "checkpoint '%s': header sizes overflow (dim %u, hidden_dim %u, n_layers %u, vocab_size %u, seq_len %u)",
			 name, c->dim, c->hidden_dim, c->n_layers, c->vocab,
			 c->seq_len);
		return -EINVAL;
	}
	if (size != with_rope && size != base)
		return llama_size_mismatch(name, "legacy", with_rope, size,
					   err, err_len);
	ck->format_version = 0;
	llama_map_legacy(ck, (const float *)(data + LLAMA_LEGACY_HEADER_BYTES),
			 size == with_rope);
	return 0;
}

/* The ak42 header fields after the version, common to versions 1 and 2. */
static int llama_ak42_header(struct llama_checkpoint *ck,
			     const unsigned char *data, size_t size,
			     const char *name, char *err, size_t err_len)
{
	int32_t h[H_N];
	unsigned shared;

	if (size < LLAMA_AK42_HEADER_BYTES) {
		snprintf(err, err_len,
			 "checkpoint '%s': %zu bytes, shorter than the %u-byte ak42 header",
			 name, size, LLAMA_AK42_HEADER_BYTES);
		return -EINVAL;
	}
	for (int i = 0; i < H_N; i++)
		h[i] = llama_read_i32(data + 8 + 4 * i);
	shared = data[8 + 4 * H_N];
	if (shared > 1) {
		snprintf(err, err_len,
			 "checkpoint '%s': shared_classifier byte is %u, must be 0 or 1",
			 name, shared);
		return -EINVAL;
	}
	ck->shared_classifier = shared == 1;
	return llama_config_check(&ck->cfg, h, name, err, err_len);
}

static int llama_parse_ak42_v1(struct llama_checkpoint *ck,
			       const unsigned char *data, size_t size,
			       const char *name, char *err, size_t err_len)
{
	struct llama_config *c = &ck->cfg;
	struct llama_size s = { 0, false };
	uint64_t want;
	int rc;

	rc = llama_ak42_header(ck, data, size, name, err, err_len);
	if (rc)
		return rc;
	llama_size_add(&s, c->vocab, c->dim, ck->shared_classifier ? 1 : 2);
	llama_size_layers(&s, c);
	llama_size_add(&s, 1, c->dim, 1);
	if (s.overflow ||
	    !llama_size_bytes(s.floats, LLAMA_AK42_HEADER_BYTES, &want)) {
		snprintf(err, err_len,
			 "checkpoint '%s': header sizes overflow (dim %u, hidden_dim %u, n_layers %u, vocab_size %u)",
			 name, c->dim, c->hidden_dim, c->n_layers, c->vocab);
		return -EINVAL;
	}
	if (size != want)
		return llama_size_mismatch(name, "ak42", want, size, err,
					   err_len);
	ck->format_version = 1;
	llama_map_ak42(ck, (const float *)(data + LLAMA_AK42_HEADER_BYTES));
	return 0;
}

/*
 * Lay out the next Q8_0 tensor of n_layers [rows][cols] matrices at *at
 * (an offset from the file start): fills t and advances *at.  Returns
 * false on overflow.  With base NULL it only counts.
 */
static bool llama_q8_take(struct llama_q8_tensor *t, const unsigned char *base,
			  uint64_t *at, uint64_t n_layers, uint32_t rows,
			  uint32_t cols, uint32_t group)
{
	uint64_t one = llama_q8_matrix_bytes(rows, cols, group), all;

	if (!one || __builtin_mul_overflow(one, n_layers, &all) ||
	    __builtin_add_overflow(*at, all, &all) || all > SIZE_MAX)
		return false;
	*t = (struct llama_q8_tensor){
		.base = base ? base + *at : NULL, .layer_bytes = (size_t)one,
		.rows = rows, .cols = cols, .group = group,
	};
	*at = all;
	return true;
}

/*
 * Lay out a version 2 file after its header: the norms into ck->w, the
 * Q8_0 tensors into ck->q8; *end gets the size it implies.  With data
 * NULL nothing points anywhere.  Returns false on overflow.
 */
static bool llama_lay_out_v2(struct llama_checkpoint *ck,
			     const unsigned char *data, uint64_t *end)
{
	const struct llama_config *c = &ck->cfg;
	struct llama_q8_weights *q = &ck->q8;
	struct llama_size s = { 0, false };
	uint64_t at, L = c->n_layers;
	uint32_t dim = c->dim, hid = c->hidden_dim, kvd = c->kv_dim;
	uint32_t gs = ck->group_size;
	bool ok;

	llama_size_add(&s, 2 * L + 1, dim, 1);	/* rms_att, rms_ffn, final */
	if (s.overflow || !llama_size_bytes(s.floats, LLAMA_AK42_HEADER_BYTES,
					    &at))
		return false;
	if (data) {
		const float *p = (const float *)(data + LLAMA_AK42_HEADER_BYTES);

		ck->w.rms_att = p;
		ck->w.rms_ffn = p + L * dim;
		ck->w.rms_final = p + 2 * L * dim;
	}
	ok = llama_q8_take(&q->token_embedding, data, &at, 1, c->vocab, dim, gs) &&
	     llama_q8_take(&q->wq, data, &at, L, dim, dim, gs) &&
	     llama_q8_take(&q->wk, data, &at, L, kvd, dim, gs) &&
	     llama_q8_take(&q->wv, data, &at, L, kvd, dim, gs) &&
	     llama_q8_take(&q->wo, data, &at, L, dim, dim, gs) &&
	     llama_q8_take(&q->w1, data, &at, L, hid, dim, gs) &&
	     llama_q8_take(&q->w2, data, &at, L, dim, hid, gs) &&
	     llama_q8_take(&q->w3, data, &at, L, hid, dim, gs);
	if (ok && ck->shared_classifier)
		q->wcls = q->token_embedding;
	else if (ok)
		ok = llama_q8_take(&q->wcls, data, &at, 1, c->vocab, dim, gs);
	*end = at;
	return ok;
}

static int llama_parse_ak42_v2(struct llama_checkpoint *ck,
			       const unsigned char *data, size_t size,
			       const char *name, char *err, size_t err_len)
{
	struct llama_config *c = &ck->cfg;
	int32_t group;
	uint64_t want;
	int rc;

	rc = llama_ak42_header(ck, data, size, name, err, err_len);
	if (rc)
		return rc;
	group = llama_read_i32(data + 8 + 4 * H_N + 1);
	if (group <= 0 || c->dim % (uint32_t)group ||
	    c->hidden_dim % (uint32_t)group) {
		snprintf(err, err_len,
			 "checkpoint '%s': group_size is %d, must be positive and divide dim %u and hidden_dim %u",
			 name, (int)group, c->dim, c->hidden_dim);
		return -EINVAL;
	}
	ck->group_size = (uint32_t)group;
	if (!llama_lay_out_v2(ck, NULL, &want)) {
		snprintf(err, err_len,
			 "checkpoint '%s': header sizes overflow (dim %u, hidden_dim %u, n_layers %u, vocab_size %u)",
			 name, c->dim, c->hidden_dim, c->n_layers, c->vocab);
		return -EINVAL;
	}
	if (size != want)
		return llama_size_mismatch(name, "ak42 version 2", want, size,
					   err, err_len);
	ck->format_version = 2;
	llama_lay_out_v2(ck, data, &want);
	return 0;
}

static int llama_parse_ak42(struct llama_checkpoint *ck,
			    const unsigned char *data, size_t size,
			    const char *name, char *err, size_t err_len)
{
	int32_t version = llama_read_i32(data + 4);

	if (version == 1)
		return llama_parse_ak42_v1(ck, data, size, name, err, err_len);
	if (version == 2)
		return llama_parse_ak42_v2(ck, data, size, name, err, err_len);
	snprintf(err, err_len,
		 "checkpoint '%s': unknown ak42 version %d (versions 1, fp32, and 2, Q8_0, are read)",
		 name, (int)version);
	return -EINVAL;
}

int llama_checkpoint_parse(struct llama_checkpoint *ck, const void *data,
			   size_t size, const char *name, char *err,
			   size_t err_len)
{
	const unsigned char *p = data;

	memset(ck, 0, sizeof(*ck));
	if (size >= 4 && (uint32_t)llama_read_i32(p) == LLAMA_AK42_MAGIC) {
		if (size < 8) {
			snprintf(err, err_len,
				 "checkpoint '%s': %zu bytes, shorter than the %u-byte ak42 header",
				 name, size, LLAMA_AK42_HEADER_BYTES);
			return -EINVAL;
		}
		return llama_parse_ak42(ck, p, size, name, err, err_len);
	}
	if (size < LLAMA_LEGACY_HEADER_BYTES) {
		snprintf(err, err_len,
			 "checkpoint '%s': %zu bytes, shorter than the %u-byte llama2.c header",
			 name, size, LLAMA_LEGACY_HEADER_BYTES);
		return -EINVAL;
	}
	return llama_parse_legacy(ck, p, size, name, err, err_len);
}

int llama_checkpoint_open(struct llama_checkpoint *ck, const char *path,
			  char *err, size_t err_len)
{
	struct stat st;
	void *map;
	int fd, rc;

	memset(ck, 0, sizeof(*ck));
	/* O_NONBLOCK: a FIFO must not block us until a writer comes (the
	 * check below refuses it); it means nothing for a regular file */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, err_len, "cannot open checkpoint '%s': %s", path,
			 strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		snprintf(err, err_len, "cannot stat checkpoint '%s': %s", path,
			 strerror(-rc));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode) || st.st_size == 0) {
		rc = -EINVAL;
		snprintf(err, err_len, "checkpoint '%s': %s", path,
			 S_ISREG(st.st_mode) ? "empty file (0 bytes)" :
					       "not a regular file");
		goto out_close;
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		rc = -errno;
		snprintf(err, err_len, "cannot map checkpoint '%s': %s", path,
			 strerror(-rc));
		goto out_close;
	}
	rc = llama_checkpoint_parse(ck, map, (size_t)st.st_size, path, err,
				    err_len);
	if (rc) {
		munmap(map, (size_t)st.st_size);
		goto out_close;
	}
	ck->map = map;
	ck->map_len = (size_t)st.st_size;
out_close:
	close(fd);
	return rc;
}

void llama_checkpoint_close(struct llama_checkpoint *ck)
{
	if (ck && ck->map) {
		munmap(ck->map, ck->map_len);
		ck->map = NULL;
	}
}
