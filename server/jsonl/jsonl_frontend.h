/*
 * jsonl_frontend.h - `dynbatch run`: requests as JSON Lines in, results as
 * JSON Lines out, plugged into the engine through frontend.h.
 *
 *   input fd -> io_uring read -> line_reader (split) -> parser thread
 *            -> engine_submit (in input order) ...... engine steps ......
 *            -> on_finish -> result line -> out_writer -> output fd
 *
 * A line that is not a request (bad JSON, overlong, a duplicate live id)
 * is answered with an error line here and never reaches the engine.  The
 * run ends when the input has ended, every request is answered and every
 * line written; a first signal stops reading (the engine cancels what
 * still waits for a slot), a second cancels everything.
 */
#ifndef DYNBATCH_JSONL_FRONTEND_H
#define DYNBATCH_JSONL_FRONTEND_H

#include <stdint.h>

#include "engine/frontend.h"

struct engine;

struct jsonl_config {
	const char *input_path;		/* "-" for stdin */
	const char *output_path;	/* "-" for stdout */
	uint32_t n_slots;		/* parse about one batch ahead of need */
	uint32_t max_context;		/* longest prompt + max_tokens */
	uint32_t max_line;		/* longest input line, bytes (--max-line) */
	float default_temperature;	/* of a request that sets none */
	bool stream;			/* --stream: a "delta" line per step */
};

/* The table to hand engine_set_frontend() with the front end. */
extern const struct frontend_ops jsonl_frontend_ops;
/* The same with a delta line per step (--stream). */
extern const struct frontend_ops jsonl_stream_frontend_ops;

struct jsonl_frontend;

/*
 * Open the input and output, start the parser thread and queue its
 * wake-up read on the engine's io_uring.  NULL on failure, with the reason
 * on stderr and *status the exit status (ENGINE_EXIT_USAGE for a file that
 * cannot be opened).
 */
struct jsonl_frontend *jsonl_frontend_create(const struct jsonl_config *cfg,
					     struct engine *e, int *status);

/*
 * Write what is still buffered (after a failed run: the error lines;
 * after a second signal: the cancelled ones), giving up on a reader that
 * takes nothing for a second, then stop the thread and close everything.
 * Call after engine_destroy() (no operation of ours is in flight then).
 * Accepts NULL.  0, or -1 when result lines could not be written.
 */
int jsonl_frontend_destroy(struct jsonl_frontend *j);

#endif /* DYNBATCH_JSONL_FRONTEND_H */
