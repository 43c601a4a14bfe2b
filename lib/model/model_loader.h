/*
 * model_loader.h - turn a --model SPEC into a callable model.
 *
 * SPEC is one of
 *     sim                       the built-in sim model, defaults
 *     sim:key=value,...         sim with keys (see sim_model.h)
 *     simkv[:key=value,...]     the sim as a stateful model (simkv_model.h)
 *     llama:CHECKPOINT[,k=v]    the llama transformer (llama_model.h)
 *     path/to/plugin.so         a plugin (model.h ABI), no arguments
 *     path/to/plugin.so:ARGS    a plugin; ARGS is passed verbatim to create()
 * A spec names a plugin when its part before the first ':' contains '/' or
 * ends in ".so".
 */
#ifndef DYNBATCH_MODEL_LOADER_H
#define DYNBATCH_MODEL_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct model;
struct dynbatch_model_row;
struct dynbatch_model_api;
struct dynbatch_paged_row;

/*
 * Open the model SPEC names.  Returns NULL after writing a one-line
 * reason naming the bad part of the spec into err.
 */
struct model *model_open(const char *spec, char *err, size_t err_len);

/*
 * Open the model of an API table in hand (a model linked in; the tests'
 * tables of each ABI version), with args for its create() (NULL: "").
 * The table is checked and read as a plugin's is.  NULL after writing a
 * one-line reason into err.
 */
struct model *model_open_table(const struct dynbatch_model_api *api,
			       const char *args, char *err, size_t err_len);

/* Does spec name a plugin (whose code model_open() would run)? */
bool model_spec_names_plugin(const char *spec);

/* Vocabulary size of an open model. */
uint32_t model_vocab(const struct model *m);

/* One batch step; see dynbatch_model_api.next.  0 or a negative errno. */
int model_next(struct model *m, uint32_t n_rows, const int32_t *const *prefixes,
	       const uint32_t *lengths, int32_t *next_tokens);

/*
 * Can the model give logits, so serve requests that sample?  A stateful
 * model always can (step() or step_paged() writes them); a token model when its table
 * (ABI version 3) has logits().
 */
bool model_has_logits(const struct model *m);

/*
 * A token model's logits for a batch, vocab floats per row; see
 * dynbatch_model_api.logits.  Only for a token model with
 * model_has_logits().  0 or a negative errno.  The logits are not
 * checked here: the caller checks them for NaN, as it does step()'s.
 */
int model_logits(struct model *m, uint32_t n_rows, const int32_t *const *prefixes,
		 const uint32_t *lengths, float *logits);

/*
 * The version 2 part of the ABI (model.h); model_runner.h is the one
 * caller.  A stateful model has step() or step_paged() (a paged model is
 * stateful too): step() needs model_bind() once before its first
 * model_step().  model_bind() and model_step() give -ENOTSUP, and
 * model_release() does nothing, for a paged-only model (no step()).
 */
bool model_is_stateful(const struct model *m);

/* The longest prefix the model can hold; 0: no limit of its own. */
uint32_t model_max_context(const struct model *m);

/* See dynbatch_model_api.bind.  0 or a negative errno (err written). */
int model_bind(struct model *m, uint32_t n_slots, uint32_t max_context,
	       char *err, size_t err_len);

/* See dynbatch_model_api.step.  0 or a negative errno. */
int model_step(struct model *m, uint32_t n_rows,
	       const struct dynbatch_model_row *rows, float *logits,
	       uint32_t *refusals);

/* See dynbatch_model_api.release. */
void model_release(struct model *m, uint32_t slot);

/*
 * The version 4 part of the ABI (model.h): a paged model has step_paged()
 * (and may have step() too: it can run either way; the engine then runs
 * it paged).  It needs model_bind_paged() once before its first
 * model_step_paged().
 */
bool model_is_paged(const struct model *m);

/* A paged model's bytes of KV per position (> 0, read once at open);
 * 0 for any other model. */
uint64_t model_kv_bytes_per_token(const struct model *m);

/* The most output rows one row of a stateful step may ask for
 * (model.h, version 5's max_outputs()), clamped to [1,
 * MODEL_MAX_OUTPUTS]; 1 for a token model (the runner verifies a token
 * model's drafts as rows of their own). */
#define MODEL_MAX_OUTPUTS 64u
uint32_t model_max_outputs(const struct model *m);

/* See dynbatch_model_api.bind_paged.  0 or a negative errno (err
 * written); -ENOTSUP when the model is not paged. */
int model_bind_paged(struct model *m, void *pool, uint32_t n_blocks,
		     uint32_t block_tokens, uint32_t max_context,
		     uint32_t max_rows, char *err, size_t err_len);

/* See dynbatch_model_api.step_paged.  0 or a negative errno (-ENOTSUP
 * when the model is not paged). */
int model_step_paged(struct model *m, uint32_t n_rows,
		     const struct dynbatch_paged_row *rows, float *logits,
		     uint32_t *refusals);

/*
 * The spec the workers of an engine that opened m with spec get: for a
 * model read from a file (llama), spec with the identity of the file m
 * read appended (",pin=..."), so that a worker started later refuses a
 * checkpoint replaced since; else a copy of spec.  malloc'd, or NULL.
 */
char *model_worker_spec(const struct model *m, const char *spec);

/* Close the model (and dlclose a plugin).  Accepts NULL. */
void model_close(struct model *m);

#endif /* DYNBATCH_MODEL_LOADER_H */
