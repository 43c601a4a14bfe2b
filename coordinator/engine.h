/*
 * engine.h - the coordinator's scheduler: one run of `dynbatch run` or
 * `dynbatch serve`.
 *
 * Request flow:
 *
 *   input -> line_reader -> parser thread (request_parse) -> admission
 *         -> waiting queue (FIFO, shm)
 *         -> free slot of a shard (slot_table_assign, generation++)
 *         -> dispatch ring -> worker -> model_next -> result ring
 *         -> validate (dispatch id, slot, generation, position, token range)
 *         -> commit token, stop matcher, max_tokens -> output line
 *
 * Each shard (a fixed range of slots served by one worker) steps on its
 * own, whatever the other shards are doing, and its worker runs ahead: it
 * is sent the shard's rows only when they change, and posts one result
 * per step, up to a ring of results ahead of what the coordinator has
 * read (docs/DESIGN.md 7).  The coordinator commits each result in order,
 * refills the shard's freed slots from the queue and sends the new rows.
 * With zero workers the same loop calls the model in-process on a single
 * shard, one step at a time.
 *
 * `dynbatch serve` runs the same loop with requests coming from HTTP
 * (http_server.h) instead of JSON Lines: cfg->http is set, and the server
 * drives the engine through the functions at the end of this file.
 */
#ifndef DYNBATCH_ENGINE_H
#define DYNBATCH_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

struct http_config;
struct request;
struct strbuf;

struct engine_config {
	uint32_t n_workers;		/* worker processes; 0 = in-process */
	uint32_t n_slots;		/* batch capacity B */
	const char *model_spec;		/* --model */
	uint32_t max_context;		/* most tokens in one sequence */
	const char *input_path;		/* "-" for stdin */
	const char *output_path;	/* "-" for stdout */
	const char *stats_path;		/* --stats FILE, or NULL */
	uint32_t max_line;		/* run: longest input line, bytes */
	uint32_t queue_capacity;	/* waiting queue bound */
	uint64_t step_timeout_ms;	/* a step past this kills its worker */
	uint64_t start_timeout_ms;	/* a worker not ready by then is killed */
	bool policy_static;		/* refill a shard only when it is empty */
	uint32_t spin_us;		/* spin this long before sleeping */
	uint32_t garbage_every;		/* test: worker garbles every Nth result */
	uint32_t poison_attempts;	/* lone failures before a request fails */
	uint32_t worker_nice;		/* workers' nice value, 0..19 */
	int progress;			/* 1 on, 0 off, -1 when stderr is a tty */
	const struct http_config *http;	/* serve: the HTTP front end, else NULL */
};

#define ENGINE_EXIT_OK 0
#define ENGINE_EXIT_FAILED 1
#define ENGINE_EXIT_USAGE 2

/* Run to completion.  Returns the process exit status (docs/DESIGN.md 4.3). */
int engine_run(const struct engine_config *cfg);

/* ------------------------------------------------------------------------
 * For the HTTP front end (dynbatch serve)
 * ---------------------------------------------------------------------- */

struct engine;

/*
 * Admit req (req->id set, max_tokens > 0) for the client cookie.  On 0 the
 * engine owns req and *handle names the live request; otherwise req is
 * untouched: -EAGAIN the waiting queue is full, -EEXIST a live request
 * has this id, -ESHUTDOWN the engine is draining, -EIO no worker can be
 * kept alive, -ENOMEM.
 */
int engine_submit(struct engine *e, struct request *req, uint64_t client,
		  uint32_t *handle);
/* The client is gone: finish the request as cancelled (its slot is freed
 * and refilled; a result still in flight for it is stale). */
void engine_cancel(struct engine *e, uint32_t handle);
/* The client's output buffer is full: give up the slot, keep the tokens. */
void engine_pause(struct engine *e, uint32_t handle);
/* The buffer drained: back to the front of the line for a slot. */
void engine_resume(struct engine *e, uint32_t handle);
/* True while a worker is ready to step (or the engine runs in-process). */
bool engine_healthy(const struct engine *e);
/* Write the engine's Prometheus metrics.  0 or -ENOMEM. */
int engine_metrics(const struct engine *e, struct strbuf *out);

#endif /* DYNBATCH_ENGINE_H */
