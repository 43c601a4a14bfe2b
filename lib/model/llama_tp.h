/*
 * llama_tp.h - the built-in llama model as one rank of a tensor-parallel
 * group (issue 28): rank r of P holds a Megatron-style slice of every
 * layer and the group sums its partials after attention and after the
 * FFN through a function the caller gives (a ring all-reduce over
 * shared memory: ipc/ring_allreduce.h, bound by whoever wires the group,
 * since lib/model may not include lib/ipc).
 *
 * The slice of rank r, with P dividing n_kv_heads and hidden_dim:
 *   wq, wk, wv  rows of its heads: KV heads [r, r + 1) x n_kv_heads / P
 *               and the query heads that read them (contiguous: a KV
 *               head's query heads are consecutive)
 *   wo          the columns of those query heads (a copy)
 *   w1, w3      rows [r, r + 1) x hidden_dim / P
 *   w2          the same columns (a copy)
 *   classifier  rows [r, r + 1) x vocab / P (rounded down at both ends;
 *               a copy): each rank computes its share of every logit
 *               row, zeros elsewhere, and the group's sum gathers them
 *               (x + 0 == x: each logit is its row's one dot product)
 *   the rest    whole: embeddings and norms, so every rank holds the
 *               same residual
 * Its KV cache holds only its own KV heads.  After wo and after w2 the
 * partial (chunk, dim) is replaced by the group's sum, then added to the
 * residual as in the unsplit forward.
 *
 * Bits.  Every rank gets the same logits (the sums are the same bits on
 * every rank, ring_allreduce.h's canonical order, and the rest is
 * computed whole).  P = 1 is the unsplit model, bit for bit (no slice
 * is made).  P >= 2 is not bit-identical to P = 1 (a logit of -0 may
 * also come out +0 from the gather's sum with zeros): the wo and w2 dot
 * products are summed in P pieces, each piece by the kernel, then the
 * pieces added, where P = 1 sums each row in one kernel pass; the
 * difference is rounding, a few ulps of each partial, and it grows
 * through the layers like any reordering (test_llama_tp.c measures it
 * and holds it under a bound; the chosen token is the same unless the
 * top two logits are within it: a near-tie).  Deterministic run to run
 * for a given P.
 *
 * Not supported with P > 1 (refused with an error naming why): matrices
 * other than F32 (a quantized slice would cut blocks), Q/K/V biases,
 * attention=split and the paged mode.
 */
#ifndef DYNBATCH_LLAMA_TP_H
#define DYNBATCH_LLAMA_TP_H

#include <stddef.h>
#include <stdint.h>

/* Replace v (n floats) by the group's sum of everyone's v; 0 or a
 * negative errno (the step then fails with it).  Called twice a layer
 * per chunk with n = tokens x dim, and once per run of output rows with
 * n = rows x vocab: at most LLAMA_CHUNK (64) x max(dim, vocab) floats,
 * which the group's all-reduce must take. */
typedef int (*llama_tp_sum_fn)(void *ctx, float *v, uint64_t n);

/*
 * Make model (from llama_model_api()->create(), not yet bound) rank
 * rank of n_ranks: slice its weights (private copies of wo's and w2's
 * columns; the row slices point into the file) and sum through sum(ctx).
 * n_ranks 1: nothing changes.  0, or -EINVAL with a reason in err (P
 * not dividing n_kv_heads or hidden_dim, rank out of range, a model
 * already bound or split, a non-F32 matrix, biases), -ENOMEM.
 */
int llama_tp_split(void *model, uint32_t rank, uint32_t n_ranks,
		   llama_tp_sum_fn sum, void *ctx, char *err, size_t err_len);

#endif /* DYNBATCH_LLAMA_TP_H */
