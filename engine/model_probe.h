/*
 * model_probe.h - learn a plugin model's vocabulary (and context limit,
 * and whether it gives logits) without running any of its code in the
 * coordinator.
 *
 * The coordinator needs the vocabulary before it starts a worker (it
 * sizes the shared segment's checks with it), but a plugin's
 * constructors, create(), vocab() and destroy() are untrusted code
 * (docs/DESIGN.md 12.1).  So with --workers N > 0 a plugin is opened only
 * in a probe: dynbatch-worker --probe-fd 3 --model SPEC
 * (worker_spawn_probe()), which loads the model as a worker does, enters
 * the same sandbox, writes one line to its answer pipe and exits:
 *
 *     vocab N context M logits L\n
 *                       N: the vocabulary, 1 .. 2^31; M: the longest
 *                       prefix, 0 .. 2^32 - 1 (0: no limit); both in
 *                       decimal, no sign, no leading 0; L: 1 when the
 *                       model gives logits (model_has_logits()), else 0
 *     error TEXT\n      why the model cannot be opened (one line)
 *
 * The probe is always the coordinator's own build of dynbatch-worker, so
 * only this form is accepted, never an older one.
 *
 * Everything that comes back is untrusted: the line is checked strictly,
 * read with a deadline (--start-timeout), and every piece of it that
 * reaches a message is escaped.  The probe is killed and reaped on every
 * path, so a plugin that hangs, crashes, says nothing or says garbage
 * costs at most the timeout and leaves nothing behind.
 */
#ifndef DYNBATCH_MODEL_PROBE_H
#define DYNBATCH_MODEL_PROBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What model_probe_vocab() returns besides 0 and a negative errno: the
 * model cannot be used (it failed, hung, crashed or answered garbage). */
#define MODEL_PROBE_REFUSED 1

/* What a probe learns of a model. */
struct model_probe {
	uint32_t vocab;		/* its vocabulary */
	uint32_t max_context;	/* its longest prefix; 0: no limit */
	bool logits;		/* it gives logits: can serve requests that
				 * sample (model_has_logits()) */
	uint32_t kv_bytes_per_token; /* a paged model's (model_is_paged());
				 * 0: not paged */
};

/* The most KV bytes per position a probe may report (1 GiB). */
#define PROBE_KV_BYTES_MAX (1u << 30)

/*
 * Run a probe of worker_path on spec, for at most timeout_ms.  Returns 0
 * with *out set; MODEL_PROBE_REFUSED after writing into err (err_len
 * bytes) a line that says why, the probe's own words escaped; or a
 * negative errno when the probe could not be run at all (err says why).
 */
int model_probe_vocab(const char *worker_path, const char *spec,
		      uint64_t timeout_ms, struct model_probe *out, char *err,
		      size_t err_len);

#endif /* DYNBATCH_MODEL_PROBE_H */
