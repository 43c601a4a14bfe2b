/*
 * llama_checkpoint.c - map a llama2.c checkpoint and hand it to the
 * reader of its layout (llama_read_legacy.c, llama_read_ak42.c; see
 * llama_checkpoint.h for the layouts), and the checks the readers share
 * (llama_reader.h).
 *
 * NOTES ON THE DESIGN
 *
 * Every size is computed in 64-bit with overflow checks before any
 * pointer is formed, and the sum must equal the file size exactly: after
 * that, every weight pointer is in bounds by construction.
 *
 * A reader fills the one weight set of tensors (struct llama_weights),
 * each tensor typed as the file stores it; the forward pass multiplies
 * through the type's kernels (tensor.h) and never learns the layout.
 *
 * The file is mapped MAP_SHARED + PROT_READ: the weights are used in
 * place, never copied, and N workers share one page-cache copy.
 */
#include "model/llama_checkpoint.h"
#include "model/llama_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/file_map.h"

static const char *const llama_header_names[LLAMA_H_N] = {
	"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
	"vocab_size", "seq_len",
};

void llama_size_add(struct llama_size *s, uint64_t a, uint64_t b,
			   uint64_t c)
{
	uint64_t ab, abc;

	if (__builtin_mul_overflow(a, b, &ab) ||
	    __builtin_mul_overflow(ab, c, &abc) ||
	    __builtin_add_overflow(s->floats, abc, &s->floats))
		s->overflow = true;
}

int32_t llama_read_i32(const unsigned char *p)
{
	uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
		     (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	int32_t out;

	memcpy(&out, &v, sizeof(out));
	return out;
}

int llama_config_check(struct llama_config *cfg, const int32_t *h,
			      const char *name, char *err, size_t err_len)
{
	for (int i = 0; i < LLAMA_H_N; i++) {
		if (h[i] <= 0) {
			snprintf(err, err_len,
				 "checkpoint '%s': %s is %d, must be positive",
				 name, llama_header_names[i], (int)h[i]);
			return -EINVAL;
		}
	}
	if (h[LLAMA_H_DIM] % h[LLAMA_H_HEADS] != 0) {
		snprintf(err, err_len,
			 "checkpoint '%s': n_heads %d does not divide dim %d",
			 name, (int)h[LLAMA_H_HEADS], (int)h[LLAMA_H_DIM]);
		return -EINVAL;
	}
	if ((h[LLAMA_H_DIM] / h[LLAMA_H_HEADS]) % 2 != 0) {
		snprintf(err, err_len,
			 "checkpoint '%s': head size %d (dim %d / n_heads %d) is odd; RoPE rotates pairs",
			 name, (int)(h[LLAMA_H_DIM] / h[LLAMA_H_HEADS]), (int)h[LLAMA_H_DIM],
			 (int)h[LLAMA_H_HEADS]);
		return -EINVAL;
	}
	if (h[LLAMA_H_HEADS] % h[LLAMA_H_KV_HEADS] != 0) {
		snprintf(err, err_len,
			 "checkpoint '%s': n_kv_heads %d does not divide n_heads %d",
			 name, (int)h[LLAMA_H_KV_HEADS], (int)h[LLAMA_H_HEADS]);
		return -EINVAL;
	}
	cfg->dim = (uint32_t)h[LLAMA_H_DIM];
	cfg->hidden_dim = (uint32_t)h[LLAMA_H_HIDDEN];
	cfg->n_layers = (uint32_t)h[LLAMA_H_LAYERS];
	cfg->n_heads = (uint32_t)h[LLAMA_H_HEADS];
	cfg->n_kv_heads = (uint32_t)h[LLAMA_H_KV_HEADS];
	cfg->vocab = (uint32_t)h[LLAMA_H_VOCAB];
	cfg->seq_len = (uint32_t)h[LLAMA_H_SEQ];
	cfg->head_size = cfg->dim / cfg->n_heads;
	cfg->kv_dim = cfg->n_kv_heads * cfg->head_size;
	cfg->rms_eps = 1e-5f;
	cfg->rope_theta = 10000.0f;
	cfg->rope_dim = cfg->head_size;
	cfg->rope_half = false;
	return 0;
}

void llama_size_layers(struct llama_size *s,
			      const struct llama_config *c)
{
	uint64_t L = c->n_layers;

	llama_size_add(s, L, c->dim, 2);			/* rms_att, rms_ffn */
	llama_size_add(s, L, c->dim, c->dim);			/* wq */
	llama_size_add(s, L, c->kv_dim, 2ull * c->dim);		/* wk, wv */
	llama_size_add(s, L, c->dim, c->dim);			/* wo */
	llama_size_add(s, L, c->hidden_dim, 3ull * c->dim);	/* w1, w2, w3 */
}

bool llama_size_bytes(uint64_t floats, uint64_t header, uint64_t *bytes)
{
	return !__builtin_mul_overflow(floats, 4, bytes) &&
	       !__builtin_add_overflow(*bytes, header, bytes) &&
	       *bytes <= SIZE_MAX;
}

int llama_size_mismatch(const char *name, const char *layout, uint64_t want,
			size_t have, char *err, size_t err_len)
{
	snprintf(err, err_len,
		 "checkpoint '%s': %s header implies %llu bytes but the file has %zu (%s)",
		 name, layout, (unsigned long long)want, have,
		 have < want ? "truncated" : "trailing bytes");
	return -EINVAL;
}

struct tensor llama_f32_take(const float **p, uint32_t n_layers,
			     uint32_t rows, uint32_t cols)
{
	struct tensor t = {
		.type = DTYPE_F32, .data = *p, .n_layers = n_layers,
		.rows = rows, .cols = cols, .group = 0,
		.layer_bytes = (size_t)rows * cols * sizeof(float),
	};

	*p += (size_t)n_layers * rows * cols;
	return t;
}

/*
 * The readers, in the order they are asked: the first whose magic the
 * file has reads it.  The legacy layout has no magic, so it comes last
 * and takes whatever the others do not.
 */
struct llama_reader {
	uint32_t magic;		/* the first 4 bytes, little-endian; 0: any */
	int (*read)(struct llama_checkpoint *ck, const unsigned char *data,
		    size_t size, const char *name, char *err, size_t err_len);
};

static const struct llama_reader llama_readers[] = {
	{ LLAMA_AK42_MAGIC, llama_read_ak42 },
	{ LLAMA_GGUF_MAGIC, llama_read_gguf },
	{ 0, llama_read_legacy },
};

int llama_checkpoint_parse(struct llama_checkpoint *ck, const void *data,
			   size_t size, const char *name, char *err,
			   size_t err_len)
{
	const unsigned char *p = data;
	uint32_t magic = size >= 4 ? (uint32_t)llama_read_i32(p) : 0;
	size_t i = 0;

	memset(ck, 0, sizeof(*ck));
	while (llama_readers[i].magic && llama_readers[i].magic != magic)
		i++;
	return llama_readers[i].read(ck, p, size, name, err, err_len);
}

int llama_checkpoint_open(struct llama_checkpoint *ck, const char *path,
			  char *err, size_t err_len)
{
	struct file_map m;
	int rc;

	memset(ck, 0, sizeof(*ck));
	rc = file_map_open(&m, path, "checkpoint", err, err_len);
	if (rc)
		return rc;
	rc = llama_checkpoint_parse(ck, m.data, m.size, path, err, err_len);
	if (rc) {
		file_map_close(&m);
		return rc;
	}
	ck->map = m.data;
	ck->map_len = m.size;
	return 0;
}

void llama_checkpoint_close(struct llama_checkpoint *ck)
{
	if (ck && ck->map) {
		munmap(ck->map, ck->map_len);
		ck->map = NULL;
	}
	if (ck) {
		free(ck->reader_mem);
		ck->reader_mem = NULL;
	}
}
