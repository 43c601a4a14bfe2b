/*
 * llama_kernels.h - the llama model's arithmetic on fp32 activations:
 * dot products, y += a * x, the attention passes and softmax.  The
 * weights' matmuls are per weight type, behind tensor.h's table; the
 * F32 type's (f32.h) live in llama_kernels.c too, as they share its dot
 * product and its horizontal sum.
 *
 * Two implementations behind one table: AVX2+FMA (chosen at run time when
 * the CPU has it) and portable C.  They do not agree bit for bit with each
 * other, but each is BATCH INVARIANT: an output element is computed by the
 * same operations in the same order whatever the number of rows, the
 * row's place among them and its neighbours.  The model's promise that a
 * row's logits depend only on its tokens rests on this.
 */
#ifndef DYNBATCH_LLAMA_KERNELS_H
#define DYNBATCH_LLAMA_KERNELS_H

#include <stdbool.h>
#include <stddef.h>

enum llama_kernel_kind {
	LLAMA_KERNEL_PORTABLE,
	LLAMA_KERNEL_AVX2,
};

struct llama_kernels {
	const char *name;	/* "portable" or "avx2" */
	/* sum over i < n of a[i] * b[i] */
	float (*dot)(const float *a, const float *b, size_t n);
	/* y[i] += a * x[i] for i < n */
	void (*axpy)(float *y, float a, const float *x, size_t n);
	/*
	 * One query head's scores over n_pos cached keys: att[p] =
	 * dot(q, keys + p * stride, hs) / scale for p < n_pos, each score
	 * computed exactly as dot() computes it, whatever n_pos.
	 */
	void (*attn_scores)(float *att, const float *q, const float *keys,
			    size_t stride, size_t n_pos, size_t hs,
			    float scale);
	/*
	 * out[i] = sum over p < n_pos of att[p] * vals[p * stride + i] for
	 * i < hs, each element summed from 0 in order of p exactly as
	 * repeated axpy() calls would.  out must not overlap the others.
	 */
	void (*attn_mix)(float *out, const float *att, const float *vals,
			 size_t stride, size_t n_pos, size_t hs);
	/*
	 * attn_mix() continued: out[i] += the same sum, each element's chain
	 * picking up from out[i] and going on in order of p exactly as
	 * attn_mix() would.  So positions split into spans (a paged KV
	 * cache's blocks), a zeroed out and one call per span in order give
	 * attn_mix()'s result over them all, bit for bit.
	 */
	void (*attn_mix_acc)(float *out, const float *att, const float *vals,
			     size_t stride, size_t n_pos, size_t hs);
	/*
	 * x[i] = exp(x[i] - max) / sum of those, for i < n (n >= 1), in
	 * place.  The AVX2 one uses its own vector exp (a polynomial, within
	 * a few ulp of expf) and multiplies by 1 / sum.
	 */
	void (*softmax)(float *x, size_t n);
	/*
	 * Split attention (attention=split), one chunk of keys' partial:
	 * *max = the largest x[i], x[i] = exp(x[i] - *max) in place, the
	 * sum of those returned, for i < n.  With no keys (n == 0) or only
	 * -inf scores: *max = -INFINITY, every x[i] = 0, sum 0 (the merge's
	 * identity, and no NaN from -inf - -inf).  The exp is softmax()'s
	 * (AVX2: its vector exp), the sum in a fixed order that depends on
	 * n alone (portable: i ascending; AVX2: 8 lanes, llama_hsum8(),
	 * then the tail in order).
	 */
	float (*attn_chunk_exp)(float *x, size_t n, float *max);
	/*
	 * Merge one chunk's partial (acc[hs], its max m, its sum l) into the
	 * running one (o[hs], *m_run, *l_run) by the log-sum-exp rule: with
	 * M = max(*m_run, m), each side scaled by exp(its max - M), then
	 * added.  A chunk with m == -INFINITY leaves the running one as it
	 * is; a running one that is still empty (-INFINITY, 0, o zeroed)
	 * becomes the chunk's own bits.  The same scalar code in both tables
	 * (expf, a multiply and an add per element, no FMA): its results do
	 * not depend on the ISA, only its inputs do.
	 */
	void (*attn_merge)(float *o, float *m_run, float *l_run,
			   const float *acc, float m, float l, size_t hs);
};

/* Does this CPU run the AVX2+FMA kernels? */
bool llama_kernels_have_avx2(void);

/* The table of kind (the AVX2 one only when llama_kernels_have_avx2()). */
const struct llama_kernels *llama_kernels_get(enum llama_kernel_kind kind);

#endif /* DYNBATCH_LLAMA_KERNELS_H */
