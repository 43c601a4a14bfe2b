/*
 * example_plugin.c - an example model plugin: copy this file to put your
 * own model behind dynbatch.
 *
 * WHAT A PLUGIN IS
 *
 * A shared object that exports one function,
 *
 *     const struct dynbatch_model_api *dynbatch_model_plugin(void);
 *
 * returning a table of four callbacks (create, vocab, next, destroy) and
 * the ABI version it was built against.  Everything a plugin needs is in
 * include/dynbatch/model.h; it links against nothing from dynbatch.
 *
 * Build and run it (from the repository root):
 *
 *     cc -O2 -fPIC -shared -Icommon -o my_model.so my_model.c
 *     dynbatch run --model ./my_model.so:vocab=1000,a=3,b=5 --input req.jsonl
 *
 * Everything after the first ':' of --model is handed verbatim to
 * create(); its format is yours to choose (this one takes key=value,...).
 * `make` builds this file into build/example_plugin.so.
 *
 * THE MODEL
 *
 * A toy "bigram" model: the next token depends on the last token and the
 * length of the prefix,
 *
 *     next = (a * last + b + length) % vocab,     empty prefix: b % vocab
 *
 * with args "vocab=N,a=N,b=N" (defaults 32000, 31, 7).  It stands in for
 * the place where a real plugin runs a network forward pass.
 *
 * THE RULES A PLUGIN MUST KEEP
 *
 * 1. Process and threads.  Each worker process dlopen()s the plugin and
 *    calls create() once, then next() once per decoding step, then
 *    destroy() at exit, all from that process's one engine thread.  No
 *    two calls on the same model overlap, so a model needs no locks; it
 *    may start threads of its own inside create() (a thread pool, a GPU
 *    stream) as long as destroy() stops them.  Workers are separate
 *    processes: globals are per worker, never shared between them.  With
 *    --workers 0 the coordinator calls the model itself, in-process.
 *
 * 2. Prefixes are borrowed.  prefixes[i] points straight into the engine's
 *    shared-memory token buffer (no copy is made, for speed).  Read them
 *    during next() only: never write through them and never keep the
 *    pointer after next() returns, because the slot is reused for another
 *    request right after.  Copy whatever you need to keep (a KV cache key,
 *    say) into your own memory.
 *
 * 3. Determinism.  The same prefix must give the same next token whatever
 *    else is in the batch and whichever worker runs it: the engine re-runs
 *    a step when a worker dies, and checks its output against a
 *    one-process reference decode.  Sample with a seed derived from the
 *    prefix if you sample at all.
 *
 * 4. Tokens in range.  Every token next() writes must be in [0, vocab);
 *    the engine fails the step otherwise.
 *
 * 5. Failures.  create() reports a bad argument by writing one line into
 *    err and returning NULL; next() returns a negative errno (e.g. -EIO)
 *    when a step cannot be computed.  Do not call exit() or print to
 *    stdout: stdout may be the engine's result stream.
 *
 * 6. Speed.  next() is the hot path: avoid allocating or logging in it;
 *    allocate the buffers you need in create(), sized for the batch.
 *
 * 7. The sandbox.  After create() a worker allows only what a step needs
 *    (worker/sandbox.c): open and map your files and devices in create();
 *    next() cannot open files, make sockets, fork, exec or write anywhere
 *    but stderr (docs/plugins.md; DYNBATCH_NO_SANDBOX=1 turns it off).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dynbatch/model.h"

/* Everything one model instance needs; create() allocates it. */
struct bigram_model {
	uint32_t vocab;		/* tokens are in [0, vocab) */
	uint32_t a;		/* weight of the last token */
	uint32_t b;		/* constant offset */
};

/* -------------------------------------------------------- argument parsing */

/*
 * Parse s[0..len) as a decimal integer in [min, max] into *out.
 * Returns true on success.  Digits only: "-1", "+1", " 1", "1x" are
 * refused rather than read as something the user did not mean.
 */
static bool bigram_parse_u32(const char *s, size_t len, uint32_t min,
			     uint32_t max, uint32_t *out)
{
	uint64_t v = 0;

	if (len == 0 || len > 10)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v < min || v > max)
		return false;
	*out = (uint32_t)v;
	return true;
}

/*
 * Apply "key=value,key=value" to m.  Returns 0, or -EINVAL after writing
 * a one-line reason into err.
 */
static int bigram_parse_args(const char *args, struct bigram_model *m,
			     char *err, size_t err_len)
{
	const char *p = args;

	while (*p) {
		size_t item_len = strcspn(p, ",");
		const char *eq = memchr(p, '=', item_len);
		size_t key_len, val_len;
		const char *val;
		uint32_t *dst;
		uint32_t min = 0;

		if (!eq) {
			snprintf(err, err_len,
				 "example: expected key=value, got '%.*s'",
				 (int)item_len, p);
			return -EINVAL;
		}
		key_len = (size_t)(eq - p);
		val = eq + 1;
		val_len = item_len - key_len - 1;
		if (key_len == 5 && memcmp(p, "vocab", 5) == 0) {
			dst = &m->vocab;
			min = 1;	/* a model with no tokens can't answer */
		} else if (key_len == 1 && p[0] == 'a') {
			dst = &m->a;
		} else if (key_len == 1 && p[0] == 'b') {
			dst = &m->b;
		} else {
			snprintf(err, err_len,
				 "example: unknown key '%.*s' (expected vocab, a or b)",
				 (int)key_len, p);
			return -EINVAL;
		}
		/* vocab <= INT32_MAX: tokens are int32_t */
		if (!bigram_parse_u32(val, val_len, min,
				      dst == &m->vocab ? INT32_MAX : UINT32_MAX,
				      dst)) {
			snprintf(err, err_len,
				 "example: bad value '%.*s' for key '%.*s'",
				 (int)val_len, val, (int)key_len, p);
			return -EINVAL;
		}
		p += item_len;
		if (*p == ',')
			p++;
	}
	return 0;
}

/* ------------------------------------------------------------- callbacks */

/*
 * create(): build a model from the text after "plugin.so:" ("" when the
 * spec had none).  This is where a real plugin loads its weights, opens
 * its device and allocates its batch buffers.  Return an opaque handle
 * the other callbacks get back, or NULL after writing one line into err.
 * It runs once per worker process, before the first step.
 */
static void *bigram_create(const char *args, char *err, size_t err_len)
{
	struct bigram_model *m;

	m = malloc(sizeof(*m));
	if (!m) {
		snprintf(err, err_len, "example: out of memory");
		return NULL;
	}
	m->vocab = 32000;
	m->a = 31;
	m->b = 7;
	if (bigram_parse_args(args ? args : "", m, err, err_len)) {
		free(m);	/* leave nothing behind on failure */
		return NULL;
	}
	return m;
}

/*
 * vocab(): the vocabulary size.  The engine reads it once after create()
 * and uses it to validate request tokens, so it must not change.
 */
static uint32_t bigram_vocab(void *model)
{
	const struct bigram_model *m = model;

	return m->vocab;
}

/*
 * next(): one decoding step for a batch of n_rows rows.  Row i is the
 * token sequence prefixes[i][0..lengths[i]) (prompt plus the tokens
 * generated so far; lengths[i] may be 0 for an empty prompt); write the
 * token that continues it into next_tokens[i].  Rows are independent and
 * come in no particular order.  Return 0, or a negative errno to fail the
 * whole step.
 *
 * prefixes[i] is shared memory owned by the engine: read it now, do not
 * write it, do not keep the pointer (rule 2 in the file comment).
 */
static int bigram_next(void *model, uint32_t n_rows,
		       const int32_t *const *prefixes, const uint32_t *lengths,
		       int32_t *next_tokens)
{
	const struct bigram_model *m = model;

	for (uint32_t i = 0; i < n_rows; i++) {
		uint32_t len = lengths[i];
		uint64_t last, h;

		if (len == 0) {
			next_tokens[i] = (int32_t)(m->b % m->vocab);
			continue;
		}
		/* the engine only hands us tokens it validated, but a
		 * plugin that trusts nothing costs one compare */
		if (prefixes[i][len - 1] < 0)
			return -EINVAL;
		last = (uint32_t)prefixes[i][len - 1];
		/* a, last < 2^32 and b, len < 2^32: no 64-bit overflow */
		h = (uint64_t)m->a * last + m->b + len;
		next_tokens[i] = (int32_t)(h % m->vocab);
	}
	return 0;
}

/*
 * destroy(): release everything create() made (weights, buffers,
 * threads).  Called once at worker exit; must accept NULL.
 */
static void bigram_destroy(void *model)
{
	free(model);
}

/* ------------------------------------------------------------ the export */

/*
 * The table the engine reads.  abi_version is what makes an old plugin
 * fail cleanly at load time instead of crashing on a changed struct:
 * always set it to the DYNBATCH_MODEL_ABI_VERSION of the model.h you build
 * against.  Static storage: the table must outlive the call below.
 */
static const struct dynbatch_model_api bigram_api = {
	.abi_version = DYNBATCH_MODEL_ABI_VERSION,
	.name = "example",
	.create = bigram_create,
	.vocab = bigram_vocab,
	.next = bigram_next,
	.destroy = bigram_destroy,
};

/* The one exported symbol (DYNBATCH_MODEL_PLUGIN_SYMBOL); keep it extern
 * and, in C++, wrap it in extern "C". */
const struct dynbatch_model_api *dynbatch_model_plugin(void);

const struct dynbatch_model_api *dynbatch_model_plugin(void)
{
	return &bigram_api;
}
