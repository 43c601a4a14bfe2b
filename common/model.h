/*
 * model.h - the model ABI: how a worker (or the in-process engine) asks a
 * model for the next token of each row of a batch.
 *
 * The engine treats the model as a black box:
 *
 *     model_next(batch_prefixes) -> next_tokens
 *
 * A model is either the built-in "sim" model (sim_model.h) or a shared
 * object loaded with dlopen() that exports one symbol:
 *
 *     const struct dynbatch_model_api *dynbatch_model_plugin(void);
 *
 * The ABI is versioned: a plugin sets abi_version to the
 * DYNBATCH_MODEL_ABI_VERSION it was compiled against, and the loader
 * refuses any other value.  Only append fields at the end of the struct and
 * bump the version when you do.
 *
 * Prefixes are handed to the model in place: prefixes[i] points straight
 * into the engine's shared token buffer and must not be written or kept
 * past the call.  This header has no dependency on the rest of dynbatch so
 * a plugin can be built from it alone.
 */
#ifndef DYNBATCH_MODEL_H
#define DYNBATCH_MODEL_H

#include <stddef.h>
#include <stdint.h>

#define DYNBATCH_MODEL_ABI_VERSION 1u
#define DYNBATCH_MODEL_PLUGIN_SYMBOL "dynbatch_model_plugin"

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
	 * One decoding step.  For each row i < n_rows, write into
	 * next_tokens[i] the token that continues prefixes[i][0..lengths[i]).
	 * Returns 0, or a negative errno on failure (the engine then treats
	 * the step as failed).  Must be deterministic: the same prefix gives
	 * the same token whatever else is in the batch.
	 */
	int (*next)(void *model, uint32_t n_rows, const int32_t *const *prefixes,
		    const uint32_t *lengths, int32_t *next_tokens);

	/* Release everything create() made.  Accepts NULL. */
	void (*destroy)(void *model);
};

typedef const struct dynbatch_model_api *(*dynbatch_model_plugin_fn)(void);

#endif /* DYNBATCH_MODEL_H */
