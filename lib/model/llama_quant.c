/*
 * llama_quant.c - quant=q4 (llama_quant.h): a float checkpoint's
 * matrices quantized to Q4G once, at load, into memory of our own.
 *
 * NOTES ON THE DESIGN
 *
 * The file's mapping is read-only and shared by every worker; the
 * quantized copy cannot live there, so each process that loads the model
 * makes its own (anonymous, private): about 20 bytes per 32 weights,
 * 0.16 of the fp32 bytes.  What the forward pass then streams per token
 * is that copy, not the file.  The fp32 pages each matrix was read from
 * are dropped from this process's page tables after quantizing (they
 * stay in the page cache, shared and reclaimable), so the process's
 * resident set is the embedding plus the copy, not both versions.
 *
 * The token embedding stays F32 in the mapping: a token's row is read
 * once per token (get_row), so it costs no bandwidth worth saving and
 * quantizing it would change every input, not just the products.  A
 * shared classifier is quantized as its own copy of the embedding.
 *
 * Only F32 sources are taken: a file already quantized (ak42 version 2,
 * a GGUF file's typed tensors) would be quantized twice, and its error
 * compounded; it is refused with the reason.
 */
#include "model/llama_quant.h"
#include "kernels/q4g.h"
#include "kernels/tensor.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define LLAMA_QUANT_ALIGN 64

/* The matrices quant=q4 quantizes, with their names for messages. */
static size_t llama_quant_targets(struct llama_checkpoint *ck,
				  struct tensor **t, const char **names)
{
	struct llama_weights *w = &ck->w;
	size_t n = 0;

#define TARGET(field) (t[n] = &w->field, names[n++] = #field)
	TARGET(wq); TARGET(wk); TARGET(wv); TARGET(wo);
	TARGET(w1); TARGET(w2); TARGET(w3); TARGET(wcls);
#undef TARGET
	return n;
}

/* The bytes of t's layers quantized, 0 when it overflows. */
static uint64_t llama_quant_bytes(const struct tensor *t, uint32_t group)
{
	uint64_t one = dtype_matrix_bytes(DTYPE_Q4G, t->rows, t->cols, group);
	uint64_t all;

	if (!one || __builtin_mul_overflow(one, (uint64_t)t->n_layers, &all) ||
	    all > UINT64_MAX - LLAMA_QUANT_ALIGN)
		return 0;
	return (all + LLAMA_QUANT_ALIGN - 1) / LLAMA_QUANT_ALIGN *
	       LLAMA_QUANT_ALIGN;
}

/* Drop the whole pages of [p, p + len) of the file's mapping from this
 * process: the next touch (none: the matrix is no longer used) would
 * read them back from the page cache. */
static void llama_quant_drop(const void *p, size_t len)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = ((uintptr_t)p + page - 1) / page * page;
	uintptr_t hi = ((uintptr_t)p + len) / page * page;

	if (hi > lo)
		madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

int llama_quantize_q4(struct llama_checkpoint *ck, uint32_t group,
		      struct llama_quant *q, char *err, size_t err_len)
{
	struct tensor *t[8];
	const char *names[8];
	size_t n = llama_quant_targets(ck, t, names);
	uint64_t total = 0, at = 0;
	unsigned char *mem;

	memset(q, 0, sizeof(*q));
	if (ck->format_version == LLAMA_FORMAT_GGUF || ck->format_version == 2) {
		snprintf(err, err_len,
			 "llama: quant=q4 applies to a float llama2.c checkpoint (legacy or ak42 version 1), not %s; drop quant=q4",
			 ck->format_version == 2 ?
			 "an ak42 version 2 file (already Q8_0)" :
			 "a GGUF file (its tensors keep the types the file gives them)");
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t b = llama_quant_bytes(t[i], group);

		if (t[i]->type != DTYPE_F32 || t[i]->layers) {
			snprintf(err, err_len,
				 "llama: quant=q4 needs float matrices, but %s is %s",
				 names[i], dtype_name(t[i]->type));
			return -EINVAL;
		}
		if (!b || __builtin_add_overflow(total, b, &total) ||
		    total > SIZE_MAX) {
			snprintf(err, err_len,
				 "llama: quant=q4: %s's quantized size overflows",
				 names[i]);
			return -EOVERFLOW;
		}
	}
	mem = mmap(NULL, (size_t)total, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		snprintf(err, err_len,
			 "llama: quant=q4: cannot map %llu bytes for the quantized weights: %s",
			 (unsigned long long)total, strerror(errno));
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		struct tensor *m = t[i];
		size_t one = (size_t)dtype_matrix_bytes(DTYPE_Q4G, m->rows,
							m->cols, group);

		for (uint32_t l = 0; l < m->n_layers; l++)
			q4g_quantize_matrix(mem + at + (size_t)l * one,
					    (const float *)m->data +
					    (size_t)l * m->rows * m->cols,
					    m->rows, m->cols, group);
		/* only a file llama_checkpoint_open() mapped: a caller's
		 * buffer (the tests') would lose its contents */
		if (ck->map && m->data != ck->w.token_embedding.data)
			llama_quant_drop(m->data, (size_t)m->n_layers *
						  m->layer_bytes);
		m->type = DTYPE_Q4G;
		m->data = mem + at;
		m->group = group;
		m->layer_bytes = one;
		at += llama_quant_bytes(m, group);
	}
	/* read-only from here on, as the file's weights: a stray write
	 * faults instead of changing the model */
	mprotect(mem, (size_t)total, PROT_READ);
	q->mem = mem;
	q->bytes = (size_t)total;
	return 0;
}

void llama_quant_free(struct llama_quant *q)
{
	if (q && q->mem) {
		munmap(q->mem, q->bytes);
		q->mem = NULL;
	}
}
