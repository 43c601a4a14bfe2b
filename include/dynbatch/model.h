/*
 * model.h - the model ABI: how a worker (or the in-process engine) asks a
 * model for the next token of each row of a batch.
 *
 * A model is either built in ("sim", sim_model.h; "llama", llama_model.h)
 * or a shared object loaded with dlopen() that exports one symbol:
 *
 *     const struct dynbatch_model_api *dynbatch_model_plugin(void);
 *
 * This header has no dependency on the rest of dynbatch, so a plugin can
 * be built from it alone.  docs/DESIGN.md 2 is the design behind it.
 *
 * TWO KINDS OF MODEL
 *
 * A token model (ABI version 1, and later versions that leave step NULL)
 * is a stateless black box: next() gets every row's whole prefix on every
 * step and returns one token per row.  The sim model is one.  A token
 * model may also give logits (version 3, logits()): the engine needs them
 * only for requests that sample (temperature > 0, logit_bias, logprobs),
 * and refuses such requests at admission on a token model without them.
 *
 * A stateful model (version 2 with step non-NULL) keeps state per slot in
 * the worker (a transformer's KV cache) and computes only the tokens it
 * has not seen: step() gets each row with its identity and position and
 * writes logits; the worker picks the token (greedy: the argmax, the
 * lowest id on ties; or sampled from them).  The engine never assumes that a model's state
 * survived anything: after a new request in the slot, a replacement
 * worker, a run-ahead reset, a resume or an isolation run it hands the
 * row over with n_cached = 0 and the model rebuilds the state from the
 * tokens ("re-prefill").
 *
 * A paged model (version 4 with step_paged non-NULL) is a stateful model
 * whose state is only KV in fixed-size blocks of a pool the engine maps
 * and hands it (bind_paged()); the engine decides which blocks hold which
 * positions of each row (docs/DESIGN.md 11), so rows can share blocks
 * (a common prefix), and hands each step the rows' block tables.  A
 * paged model keeps nothing per slot: what a row may read is exactly
 * positions [0, n_cached) of its blocks, which the engine vouches hold
 * that row's tokens' KV; it writes positions [n_cached, n_cached +
 * n_consume) before any of them attends.  The engine copies whole blocks
 * itself (copy-on-write), so a block's bytes must depend only on the
 * positions written into it, never on where the block lies.
 *
 * VERSIONING
 *
 * A plugin sets abi_version to the DYNBATCH_MODEL_ABI_VERSION it was
 * compiled against.  The loader accepts 1 to 5.  A version 1 table ends
 * at destroy, a version 2 table at release, a version 3 at logits, a
 * version 4 at step_paged: the
 * loader never reads the fields after its version's last.  Only append fields at the end of the
 * struct, and bump the version when you do.
 *
 * THREADS AND LIFETIME
 *
 * One thread calls into a model handle at a time, always the same one in
 * a worker.  Every pointer the engine passes in (prefixes, rows, tokens,
 * logits, refusals) is valid only during the call: a model must not keep
 * it.  Prefix tokens are read-only (in a worker they are mapped
 * read-only: a write faults).  In a worker, bind() runs before the worker
 * enters its sandbox (worker/sandbox.c) and step() after it: reserve every
 * mapping in create() or bind(); step() and release() may only touch
 * memory (madvise(MADV_DONTNEED) is allowed to give pages back) and
 * compute.  No file, socket or process system call works in next(),
 * logits() or step().
 *
 * ERRORS
 *
 * A negative errno from next(), logits() or step() fails the whole step:
 * the engine restarts the worker and isolates the request that made it
 * fail (docs/DESIGN.md 9.3).  A row the model cannot serve at all is
 * refused instead (refusals[], below): that request alone ends with an
 * error naming the reason.  Logits that are NaN fail the step.
 */
#ifndef DYNBATCH_MODEL_H
#define DYNBATCH_MODEL_H

#include <stddef.h>
#include <stdint.h>

#define DYNBATCH_MODEL_ABI_VERSION 5u
#define DYNBATCH_MODEL_PLUGIN_SYMBOL "dynbatch_model_plugin"

/* Why a stateful model refuses a row (refusals[] of step()). */
enum dynbatch_refusal {
	DYNBATCH_REFUSE_NONE = 0,	/* the row is served */
	DYNBATCH_REFUSE_EMPTY_PROMPT = 1, /* no token to start from */
	DYNBATCH_REFUSE_CONTEXT = 2,	/* longer than the model can hold */
	DYNBATCH_REFUSE_TOKEN = 3,	/* a token the model cannot embed */
	DYNBATCH_REFUSE_OTHER = 4,	/* anything else */
};

/*
 * One row of a stateful step.  The row asks the model to continue
 * tokens[0 .. n_tokens) of the request in slot `slot`.
 */
struct dynbatch_model_row {
	uint32_t slot;		/* [0, n_slots) of bind(): which state to use */
	uint32_t generation;	/* the slot's request; informational (a new
				 * one always comes with n_cached = 0) */
	const int32_t *tokens;	/* the prefix, read-only, valid in the call */
	uint32_t n_tokens;	/* prefix length; <= max_context of bind() */
	/*
	 * The model may take tokens[0 .. n_cached) from its own state for
	 * this slot (it consumed exactly them before).  0: throw the slot's
	 * state away first.  Never more than the model has consumed.
	 */
	uint32_t n_cached;
	/*
	 * Consume tokens[n_cached .. n_cached + n_consume) in this step
	 * (a prefill chunk may stop before the prompt ends).  At least 1,
	 * except for an empty prefix (n_tokens == 0), which has nothing to
	 * consume.  After the step the model holds state for
	 * tokens[0 .. n_cached + n_consume).
	 */
	uint32_t n_consume;
	/*
	 * 1 when n_cached + n_consume == n_tokens: write the logits of the
	 * token that follows tokens[n_tokens - 1].  0: consume only.
	 * A model whose max_outputs() (version 5) gives W > 1 may get up
	 * to min(W, n_consume) here: write the logits that follow each of
	 * the last want_output positions consumed, in position order, as
	 * that many output rows (speculative decoding verifies a row's
	 * drafted tokens this way).  Each must equal what a step ending at
	 * that position would write.
	 */
	uint32_t want_output;
};

/* Declared here, defined below the table: step_paged() names it, and a
 * struct first named in a parameter list would be a different type. */
struct dynbatch_paged_row;

struct dynbatch_model_api {
	uint32_t abi_version;	/* DYNBATCH_MODEL_ABI_VERSION */
	const char *name;	/* short name for logs, e.g. "example" */

	/*
	 * Build a model from the argument string that followed "plugin.so:"
	 * on the command line ("" when none).  Returns an opaque handle, or
	 * NULL after writing a one-line reason into err (err_len bytes).
	 */
	void *(*create)(const char *args, char *err, size_t err_len);

	/* Vocabulary size: every token the model returns is in [0, vocab). */
	uint32_t (*vocab)(void *model);

	/*
	 * One token-model step.  For each row i < n_rows, write into
	 * next_tokens[i] the token that continues prefixes[i][0..lengths[i]).
	 * Returns 0, or a negative errno on failure (the engine then treats
	 * the step as failed).  Must be deterministic: the same prefix gives
	 * the same token whatever else is in the batch.  May be NULL in a
	 * version 2 table whose step is set.
	 */
	int (*next)(void *model, uint32_t n_rows, const int32_t *const *prefixes,
		    const uint32_t *lengths, int32_t *next_tokens);

	/* Release everything create() made.  Accepts NULL. */
	void (*destroy)(void *model);

	/* ---- version 2: the loader reads these only when abi_version >= 2 */

	/*
	 * The longest prefix, in tokens, the model can hold (a checkpoint's
	 * seq_len); 0: no limit of its own.  The engine's --max-context
	 * defaults to it, and a larger --max-context is a usage error.
	 * May be NULL (no limit).
	 */
	uint32_t (*max_context)(void *model);

	/*
	 * Stateful models: called once before the first step.  The model
	 * will see slots [0, n_slots), each with prefixes of at most
	 * max_context tokens.  Reserve the state here (address space; touch
	 * pages only as they are used).  Returns 0, or a negative errno
	 * after writing a one-line reason into err.
	 */
	int (*bind)(void *model, uint32_t n_slots, uint32_t max_context,
		    char *err, size_t err_len);

	/*
	 * Stateful models: one step over n_rows rows (at most one per slot).
	 * Each row has want_output output rows (0 or 1, or up to
	 * max_outputs()); write the k-th output row of the step (in row
	 * order, then position order) to logits[k * vocab ..
	 * (k + 1) * vocab).  Set refusals[i] to a dynbatch_refusal for each
	 * row i (DYNBATCH_REFUSE_NONE when served); a refused row's logits
	 * slot is still reserved and its contents ignored, and its slot's
	 * state is dropped by the engine.  Returns 0, or a negative errno:
	 * the whole step failed.  The logits of a row must depend only on
	 * its tokens: never on the batch, the row's place in it, the
	 * chunking of its prefill or whether its state was rebuilt.
	 * NULL: a token model (next() is used).
	 */
	int (*step)(void *model, uint32_t n_rows,
		    const struct dynbatch_model_row *rows, float *logits,
		    uint32_t *refusals);

	/*
	 * Stateful models: drop the state of slot (its request ended, or
	 * the engine cannot vouch for it) and give its memory back.  May be
	 * NULL when step is NULL.
	 */
	void (*release)(void *model, uint32_t slot);

	/* ---- version 3: the loader reads this only when abi_version >= 3 */

	/*
	 * Token models only, optional: for each row i < n_rows, write the
	 * logits of the token that continues prefixes[i][0..lengths[i]) to
	 * logits[i * vocab .. (i + 1) * vocab).  Their argmax (the lowest id
	 * on ties) must be the token next() gives for the row, and like it
	 * they depend on the row's prefix alone.  Returns 0, or a negative
	 * errno (the step failed).  The engine calls it, instead of next(),
	 * only for rows that sample (temperature > 0, logit_bias or
	 * logprobs).  NULL: the model cannot serve such requests, and the
	 * engine refuses them at admission.  A stateful model (step set)
	 * must leave it NULL (its step() writes logits already): the loader
	 * refuses a table with both.
	 */
	int (*logits)(void *model, uint32_t n_rows, const int32_t *const *prefixes,
		      const uint32_t *lengths, float *logits);

	/* ---- version 4: the loader reads these only when abi_version >= 4 */

	/*
	 * Paged models: the bytes of KV one position takes (every layer, K
	 * and V).  The engine sizes the pool and its blocks from it.  NULL,
	 * or 0: the model is not paged.
	 */
	uint64_t (*kv_bytes_per_token)(void *model);

	/*
	 * Paged models, instead of bind(): the pool is n_blocks blocks of
	 * block_tokens positions at pool (mapped by the engine, zero at
	 * first, never moved while the model lives); rows have prefixes of
	 * at most max_context tokens, and a step has at most max_rows rows.
	 * Reserve scratch here.  0, or a negative errno after writing a
	 * one-line reason into err.
	 */
	int (*bind_paged)(void *model, void *pool, uint32_t n_blocks,
			  uint32_t block_tokens, uint32_t max_context,
			  uint32_t max_rows, char *err, size_t err_len);

	/*
	 * Paged models: one step, as step() (logits, refusals, errors and
	 * the same promise: a row's logits depend only on its tokens, never
	 * on its blocks, its batch, its chunking or its n_cached), over rows
	 * whose state is in the pool.  A block id at or past n_blocks, or
	 * too few blocks for a row, fails the step with -EINVAL.  A table
	 * may also set step, bind and release (a model that can run either
	 * way): the engine then runs it paged, and never mixes the two.
	 */
	int (*step_paged)(void *model, uint32_t n_rows,
			  const struct dynbatch_paged_row *rows, float *logits,
			  uint32_t *refusals);

	/* ---- version 5: the loader reads this only when abi_version >= 5 */

	/*
	 * Stateful models, optional: the most output rows one row of a step
	 * may ask for (want_output), at least 1.  NULL, 0 or 1: one, the
	 * logits after the row's last token.  More lets the engine verify
	 * speculated tokens in one step (docs/DESIGN.md 2.7).
	 */
	uint32_t (*max_outputs)(void *model);
};

/*
 * One row of a paged step: the row as in step(), and where its KV lives.
 * Position p of the row is at offset p % block_tokens of block
 * blocks[p / block_tokens]; block b occupies bytes [b * block_bytes,
 * (b + 1) * block_bytes) of the pool, block_bytes = block_tokens *
 * kv_bytes_per_token().
 */
struct dynbatch_paged_row {
	struct dynbatch_model_row row;	/* slot and generation: informational;
					 * n_cached: positions already in the
					 * blocks (the engine vouches) */
	const uint32_t *blocks;		/* read-only, valid in the call; each
					 * entry below bind_paged()'s n_blocks */
	uint32_t n_blocks;		/* entries: cover at least n_cached +
					 * n_consume positions */
};

typedef const struct dynbatch_model_api *(*dynbatch_model_plugin_fn)(void);

#endif /* DYNBATCH_MODEL_H */
