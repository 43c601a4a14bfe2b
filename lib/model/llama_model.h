/*
 * llama_model.h - the built-in "llama" model: a llama2.c transformer with
 * a KV cache per slot, served through the stateful model ABI (model.h);
 * or, bound with bind_paged() (ABI version 4), with its KV in the
 * engine's paged pool, giving the same logits bit for bit.
 *
 * Create args: "PATH[,key=value...]" where PATH is a llama2.c checkpoint
 * (llama_checkpoint.h; a PATH cannot contain a comma) and the keys are
 *   kernel=auto|portable|avx2   (auto: avx2 when the CPU has AVX2+FMA;
 *                                avx2 on a CPU without it is an error)
 *   attention=exact|split       (exact, the default: one softmax over a
 *                                token's positions; split: chunks of 64
 *                                positions merged by log-sum-exp, other
 *                                bits, as invariant; llama_split.c)
 *   cascade=on|off              (attention=split only; on, the default:
 *                                rows sharing a chunk's blocks read them
 *                                once; the same bits either way)
 *   quant=q4|none               (q4: a float llama2.c checkpoint's
 *                                matrices quantized at load to 4-bit
 *                                groups of 32 in private memory,
 *                                llama_quant.h; refused for a file
 *                                already quantized; none, the default)
 *
 * Logits are batch invariant (model.h step()): bit-identical for a row
 * whatever the batch, the prefill chunking or a rebuild of the state.
 */
#ifndef DYNBATCH_LLAMA_MODEL_H
#define DYNBATCH_LLAMA_MODEL_H

#include "dynbatch/model.h"

/* The ABI table of the llama model (DYNBATCH_MODEL_ABI_VERSION; step and
 * step_paged both set: it runs either way). */
const struct dynbatch_model_api *llama_model_api(void);

#endif /* DYNBATCH_LLAMA_MODEL_H */
