/*
 * model_probe.h - learn a plugin model's vocabulary without running any
 * of its code in the coordinator.
 *
 * The coordinator needs the vocabulary before it starts a worker (it
 * sizes the shared segment's checks with it), but a plugin's
 * constructors, create(), vocab() and destroy() are untrusted code
 * (docs/DESIGN.md 11.1).  So with --workers N > 0 a plugin is opened only
 * in a probe: dynbatch-worker --probe-fd 3 --model SPEC
 * (worker_spawn_probe()), which loads the model as a worker does, enters
 * the same sandbox, writes one line to its answer pipe and exits:
 *
 *     vocab N\n         N in decimal, 1 .. 2^31, no sign, no leading 0
 *     error TEXT\n      why the model cannot be opened (one line)
 *
 * Everything that comes back is untrusted: the line is checked strictly,
 * read with a deadline (--start-timeout), and every piece of it that
 * reaches a message is escaped.  The probe is killed and reaped on every
 * path, so a plugin that hangs, crashes, says nothing or says garbage
 * costs at most the timeout and leaves nothing behind.
 */
#ifndef DYNBATCH_MODEL_PROBE_H
#define DYNBATCH_MODEL_PROBE_H

#include <stddef.h>
#include <stdint.h>

/* What model_probe_vocab() returns besides 0 and a negative errno: the
 * model cannot be used (it failed, hung, crashed or answered garbage). */
#define MODEL_PROBE_REFUSED 1

/* What a probe learns of a model. */
struct model_probe {
	uint32_t vocab;		/* its vocabulary */
	uint32_t max_context;	/* its longest prefix; 0: no limit */
};

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
