/*
 * engine.h - the coordinator's scheduler: the one core of `dynbatch run`
 * and `dynbatch serve`.
 *
 * Request flow:
 *
 *   front end (frontend.h) -> engine_submit -> waiting queue (FIFO, shm)
 *         -> free slot of a shard (slot_table_assign, generation++)
 *         -> dispatch ring -> worker -> model_next -> result ring
 *         -> validate (dispatch id, slot, generation, token range)
 *         -> commit token, stop matcher, max_tokens
 *         -> front end: on_tokens (final tokens), on_finish (the answer)
 *
 * Each shard (a fixed range of slots served by one worker) runs ahead on
 * its own: its worker extends the rows it was sent, posting a result per
 * step, while the coordinator commits those results in order, refills the
 * shard's freed slots from the queue and sends changed rows, whatever the
 * other shards are doing.  With zero workers the same loop calls the
 * model in-process on a single shard.
 *
 * The engine knows no protocol.  A front end plugs in through struct
 * frontend_ops (frontend.h): the JSON Lines reader and writer of `run`
 * (jsonl_frontend.h) or the HTTP server of `serve` (http_server.h).
 * main() wires them: engine_create(), the front end's constructor (on the
 * engine's io_ring), engine_set_frontend(), engine_run(), then the front
 * end's destructor and engine_destroy().
 */
#ifndef DYNBATCH_ENGINE_H
#define DYNBATCH_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/stats.h"
#include "spec/spec.h"

struct frontend_ops;
struct io_ring;
struct request;
struct strbuf;

struct engine_config {
	uint32_t n_workers;		/* worker processes; 0 = in-process */
	uint32_t n_slots;		/* batch capacity B */
	const char *model_spec;		/* --model */
	const char *tokenizer_path;	/* --tokenizer; NULL: a llama
					 * checkpoint's tokenizer.bin beside it
					 * when there is one, else none */
	uint32_t max_context;		/* most tokens in one sequence; 0:
					 * the model's own limit, else 4096 */
	uint32_t step_tokens;		/* --step-tokens: a stateful model's
					 * token budget per step; 0: none */
	struct spec_config spec;	/* --speculate, --draft-tokens
					 * (docs/DESIGN.md 2.7) */
	uint32_t grammar_max_bytes;	/* --grammar-max-bytes; 0: no grammars */
	const char *grammar_file;	/* --grammar-file; NULL: none */
	uint32_t block_tokens;		/* --block-tokens: positions per KV
					 * block of a paged model */
	uint64_t kv_memory;		/* --kv-memory: KV bytes of all shards;
					 * 0: engine_size_kv() chooses */
	bool prefix_cache;		/* --prefix-cache on */
	const char *stats_path;		/* --stats FILE, or NULL */
	uint32_t queue_capacity;	/* waiting queue bound */
	uint64_t step_timeout_ms;	/* a step past this kills its worker */
	uint64_t start_timeout_ms;	/* a worker not ready by then is killed */
	bool policy_static;		/* refill a shard only when it is empty */
	uint32_t spin_us;		/* spin this long before sleeping */
	uint32_t garbage_every;		/* test: worker garbles every Nth result */
	uint32_t poison_attempts;	/* lone failures before a request fails */
	uint32_t worker_nice;		/* workers' nice value, 0..19 */
	int progress;			/* 1 on, 0 off, -1 when stderr is a tty */
	bool keep_running;		/* serve: when no worker can be kept
					 * alive, fail the requests and keep
					 * trying (not: fail the run) */
	uint32_t io_entries;		/* io_uring entries the front end may
					 * queue in one round */
};

#define ENGINE_EXIT_OK 0
#define ENGINE_EXIT_FAILED 1
#define ENGINE_EXIT_USAGE 2

/* --step-tokens by default: a 1,000-token prompt of a 110M-parameter model
 * in one step takes about 10 s on one core, the default step timeout,
 * and stalls the shard's decoding rows all that time. */
#define ENGINE_DEFAULT_STEP_TOKENS 512u

/* --block-tokens by default (vLLM's and SGLang's page size). */
#define ENGINE_DEFAULT_BLOCK_TOKENS 16u

/* --max-context when neither the user nor the model sets one. */
#define ENGINE_DEFAULT_MAX_CONTEXT 4096u

struct engine;

/*
 * Everything up to the first worker start: the model, the shared segment,
 * the io_uring loop, the signalfd.  NULL on failure, with *status the
 * process exit status (ENGINE_EXIT_USAGE for a bad --model) and the reason
 * printed on stderr.
 */
struct engine *engine_create(const struct engine_config *cfg, int *status);
/* The engine's io_uring loop, for the front end's own operations. */
struct io_ring *engine_io(struct engine *e);
/* Plug the front end in (before engine_run). */
void engine_set_frontend(struct engine *e, const struct frontend_ops *ops,
			 void *ctx);
/* Start the workers and run until the front end is done (or a failure,
 * or signals).  Returns the process exit status (docs/DESIGN.md 4.3). */
int engine_run(struct engine *e);
/* Stop the workers, remove the segment, free everything.  Accepts NULL. */
void engine_destroy(struct engine *e);

/* ------------------------------------------------------------------------
 * For front ends (frontend.h says which may be called from a callback)
 * ---------------------------------------------------------------------- */

/*
 * The KV blocks a sequence of n_tokens positions (prompt + max_tokens)
 * needs in a shard's pool, and in *pool (when not NULL) the blocks a pool
 * has and in *block_tokens their size; 0 needed (and 0 in both) when the
 * model is not paged.  engine_submit() refuses a request that needs more
 * than a pool has with -ENOSPC; front ends name both numbers.
 */
struct engine_kv_pool {
	uint32_t blocks;
	uint32_t block_tokens;
};
uint32_t engine_kv_need(const struct engine *e, uint32_t n_tokens,
			struct engine_kv_pool *pool);

/*
 * Admit req (req->id set) for the front end's cookie.  On 0 the engine
 * owns req (it is left zeroed) and handles[0 .. req->n_choices) name the
 * live requests, one per choice (choice i is a copy of req with choice
 * i, each answered through on_finish on its own: later, never from
 * inside this call).  A request that samples without a seed gets one
 * here, shared by its choices.  Otherwise req is untouched: -EAGAIN the
 * waiting queue has no room for every choice, -EEXIST a live request
 * has this id, -ESHUTDOWN the engine is draining or has failed, -EIO no
 * worker can be kept alive, -E2BIG more choices than the queue holds,
 * -ENOSPC prompt + max_tokens needs more KV blocks than a shard's pool
 * has (engine_kv_need()), -ENOMEM.
 */
int engine_submit(struct engine *e, struct request *req, uint64_t cookie,
		  uint32_t *handles);
/*
 * A batch of prompts (OpenAI's "prompt": [..] lists): n_reqs requests of
 * one id (reqs[0]'s is the one held live), each with the same n_choices
 * n, admitted all or none as engine_submit() admits one request's
 * choices.  handles[p * n + j] names prompt p's choice j (its
 * request_flat_choice()); each request's prompt_index is p, and its
 * choice j draws as choice j of that prompt alone would, so a prompt's
 * answer in a batch is its answer alone.  Every choice of every prompt
 * shares one seed and one ring (cancel, pause and resume reach them
 * all).  Errors as engine_submit()'s, checked for every prompt, and
 * -EINVAL when n_reqs is 0 or the n_choices differ; -E2BIG also when
 * n_reqs * n exceeds REQUEST_MAX_CHOICES.  On 0 every reqs[p] is left
 * zeroed; otherwise all are untouched.
 */
int engine_submit_batch(struct engine *e, struct request **reqs,
			uint32_t n_reqs, uint64_t cookie, uint32_t *handles);
/* The client is gone: finish the request as cancelled (its slot is freed
 * and refilled; a result still in flight for it is stale).  Pause,
 * resume and cancel act on every live choice of handle's request. */
void engine_cancel(struct engine *e, uint32_t handle);
/* The client's output buffer is full: give up the slot, keep the tokens. */
void engine_pause(struct engine *e, uint32_t handle);
/* The buffer drained: back to the front of the line for a slot. */
void engine_resume(struct engine *e, uint32_t handle);
/* Workers get /dev/null as stderr from now on: the front end's output is
 * our stderr, and no worker may write a line there.  Before engine_run(). */
void engine_quiet_workers(struct engine *e);
/* Would engine_submit() take a request now or refuse it at once (-EIO:
 * workers lost), rather than -EAGAIN or -ESHUTDOWN? */
bool engine_has_room(const struct engine *e);
/* Requests waiting for a slot. */
uint32_t engine_n_waiting(const struct engine *e);
/* The tokenizer (--tokenizer, a llama checkpoint's tokenizer.bin beside
 * it, or a GGUF file's own), or NULL: requests then carry no text. */
const struct text_tokenizer *engine_tokenizer(const struct engine *e);
/* A GGUF file's tokenizer.chat_template (Jinja source), or NULL. */
const char *engine_chat_template(const struct engine *e);
/* Does the model give logits (may requests sample, bias, get logprobs)? */
bool engine_has_logits(const struct engine *e);
/* The longest grammar source a request may bring; 0: grammars are
 * refused (no tokenizer, or --grammar-max-bytes 0). */
uint32_t engine_grammar_max(const struct engine *e);
/* --grammar-file's grammar, compiled at start (NULL: none); the front
 * ends take a reference for each request that brings no grammar. */
struct request_grammar *engine_default_grammar(const struct engine *e);
/* The model's vocabulary size (token ids are below it). */
uint32_t engine_vocab(const struct engine *e);

/* The most tokens in one sequence (--max-context, or the model's). */
uint32_t engine_max_context(const struct engine *e);
/* A front end answered a line or request itself (it never became a live
 * request): count it with the engine's finished requests. */
void engine_note_answered(struct engine *e, enum finish_reason reason);
/* The front end cannot go on (out of memory, its output failed): the run
 * fails, every live request gets an error.  Only records the failure; the
 * loop acts on it. */
void engine_fail_frontend(struct engine *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* True while a worker is ready to step (or the engine runs in-process). */
bool engine_healthy(const struct engine *e);
/* Write the engine's Prometheus metrics.  0 or -ENOMEM. */
int engine_metrics(const struct engine *e, struct strbuf *out);

#endif /* DYNBATCH_ENGINE_H */
