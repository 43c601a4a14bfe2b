/*
 * jsonl_frontend.c - see jsonl_frontend.h.
 *
 * NOTES ON THE DESIGN
 *
 * Input.  Lines are read and split on the loop (io_uring reads into
 * read_buf, line_reader) and parsed on the parser thread
 * (parser_thread.h), about one batch ahead of need; admission
 * (engine_submit: duplicate ids, the queue) happens back on the loop in
 * input order.  Reading stops while the engine has no room or the output
 * backlog is over JSONL_OUTPUT_HIGH, so memory is bounded by the queue,
 * not by the input.
 *
 * Waking.  The parser thread runs off the loop; when the loop is about to
 * sleep with lines in the thread's hands it asks the thread to write our
 * eventfd once one is parsed (before_sleep), and a read of that eventfd
 * is always queued on the ring, so the write ends the sleep.
 *
 * Output.  Result lines go through an out_writer: appended while the
 * previous batch of lines is being written.
 */
#include "server/jsonl/jsonl_frontend.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "io/io_ring.h"
#include "server/jsonl/line_reader.h"
#include "util/log.h"
#include "io/out_writer.h"
#include "server/jsonl/parser_thread.h"
#include "engine/request.h"
#include "server/request/request_json.h"
#include "server/jsonl/jsonl_result.h"

#define JSONL_READ_SIZE (256u * 1024)
#define JSONL_FLUSH_STALL_MS 1000	/* at exit, a reader that takes
					 * nothing for this long is given up */
#define JSONL_OUTPUT_HIGH (1u << 20)	/* stop admitting above this backlog */

struct jsonl_frontend {
	struct engine *e;
	struct io_ring *io;		/* the engine's */
	uint32_t ahead;			/* requests kept parsed or waiting */
	int in_fd, out_fd;
	/* input: lines are split here and parsed on the parser thread */
	struct line_reader lines;
	struct parser_thread *parser;
	char *read_buf;
	bool read_inflight;
	bool input_eof;
	bool draining;			/* a signal came: read no more */
	int wake_fd;			/* the parser thread writes it */
	uint64_t wake_buf;
	bool want_wake;			/* asked the thread for a wake-up */
	/* output: result lines */
	struct out_writer out;
	struct io_op in_op, out_op, wake_op;	/* arg: this front end */
	bool stream;			/* --stream: delta lines */
	/* a parsed request of n choices that found the queue without room
	 * for all of them: admitted first once there is */
	struct parsed_line held;
	bool has_held;
};

/* ------------------------------------------------------------------------
 * Results
 * ---------------------------------------------------------------------- */

static void jsonl_emit(struct jsonl_frontend *j, const struct result *r)
{
	if (result_format(r, &j->out.fill))
		engine_fail_frontend(j->e, "out of memory formatting a result");
}

/* A line that never became a live request (bad input, a duplicate id). */
static void jsonl_answer_line(struct jsonl_frontend *j, const struct request *req,
			      enum finish_reason reason, const char *error)
{
	struct result r = {
		.id = req->id,
		.line_no = req->line_no,
		.finish_reason = finish_reason_names[reason],
		.error = error,
		.n_prompt = req->n_prompt,
	};

	jsonl_emit(j, &r);
	engine_note_answered(j->e, reason);
}

/* The engine finished a request: its result line. */
static void jsonl_on_finish(void *ctx, uint64_t cookie,
			    const struct frontend_result *fr)
{
	struct result r = {
		.id = fr->req->id,
		.line_no = fr->req->line_no,
		.tokens = fr->tokens,
		.n_tokens = fr->n_tokens,
		.finish_reason = finish_reason_names[fr->reason],
		.error = fr->error,
		.n_prompt = fr->req->n_prompt,
		.n_generated = fr->n_generated,
		.n_choices = fr->req->n_choices,
		.index = fr->req->choice,
		.has_seed = fr->has_seed,
		.seed = fr->seed,
		.logprobs = fr->logprobs,
		.logprob_stride = 1 + fr->req->sampling.top_logprobs,
		.has_text = fr->has_text,
		.text = fr->text,
		.text_len = fr->text_len,
	};
	struct jsonl_frontend *j = ctx;

	if (j->stream && fr->has_text) {
		r.has_delta = true;
		r.delta = fr->text ? fr->text + fr->text_given : NULL;
		r.delta_len = fr->text_len - fr->text_given;
	}
	jsonl_emit(j, &r);
}

/* run --stream: the request's new final tokens and text, one line. */
static void jsonl_on_tokens(void *ctx, uint64_t cookie, const struct request *req,
			    const int32_t *tokens,
			    const struct sampler_logprob *logprobs, uint32_t n,
			    const char *text, size_t text_len)
{
	struct jsonl_frontend *j = ctx;
	struct result_delta d = { .id = req->id, .n_choices = req->n_choices,
				  .index = req->choice, .tokens = tokens,
				  .n_tokens = n, .text = text,
				  .text_len = text_len };

	if (result_delta_format(&d, &j->out.fill))
		engine_fail_frontend(j->e, "out of memory formatting a delta");
}

/* ------------------------------------------------------------------------
 * Input and admission
 * ---------------------------------------------------------------------- */

/* A parsed line becomes a live request, or is answered at once. */
static void jsonl_admit(struct jsonl_frontend *j, struct parsed_line *pl)
{
	struct request *req = &pl->req;
	char err[512];
	uint32_t handles[REQUEST_MAX_CHOICES];
	int ret;

	if (pl->rc == -ENOMEM) {
		engine_fail_frontend(j->e, "out of memory parsing line %llu",
				     (unsigned long long)pl->line_no);
		request_release(req);
		return;
	}
	if (pl->rc) {
		req->line_no = pl->line_no;
		jsonl_answer_line(j, req, FINISH_ERROR, pl->err);
		request_release(req);
		return;
	}
	ret = engine_submit(j->e, req, 0, handles);
	if (ret == -EAGAIN) {	/* room for fewer than its n choices */
		j->held = *pl;
		j->has_held = true;
		return;
	}
	if (ret == -E2BIG) {
		snprintf(err, sizeof(err), "line %llu: n = %u choices is more "
			 "than the waiting queue holds (raise --queue)",
			 (unsigned long long)pl->line_no, req->n_choices);
		jsonl_answer_line(j, req, FINISH_ERROR, err);
	} else if (ret == -ENOSPC) {
		struct engine_kv_pool pool;
		uint32_t need = engine_kv_need(j->e, req->n_prompt + req->max_tokens,
					       &pool);

		snprintf(err, sizeof(err), "line %llu: %u prompt tokens + max_tokens "
			 "%u need %u KV blocks of %u tokens, more than a shard's "
			 "pool of %u blocks (raise --kv-memory)",
			 (unsigned long long)pl->line_no, req->n_prompt,
			 req->max_tokens, need, pool.block_tokens, pool.blocks);
		jsonl_answer_line(j, req, FINISH_ERROR, err);
	} else if (ret == -EEXIST) {
		snprintf(err, sizeof(err), "line %llu: duplicate id '%.200s': a "
			 "request with this id is still live",
			 (unsigned long long)pl->line_no, req->id);
		jsonl_answer_line(j, req, FINISH_ERROR, err);
	} else if (ret == -EIO) {	/* the run gave up on its workers */
		snprintf(err, sizeof(err), "line %llu: engine failed: no worker "
			 "can be kept alive (see the log)",
			 (unsigned long long)pl->line_no);
		jsonl_answer_line(j, req, FINISH_ERROR, err);
	} else if (ret) {	/* cannot happen: admission is gated on room */
		engine_fail_frontend(j->e, "cannot admit line %llu: %s",
				     (unsigned long long)pl->line_no, strerror(-ret));
	}
	request_release(req);	/* on success the engine took it: empty */
}

/* May another request be admitted now? */
static bool jsonl_can_admit(const struct jsonl_frontend *j)
{
	return !j->draining && engine_has_room(j->e) &&
	       j->out.fill.len < JSONL_OUTPUT_HIGH;
}

/* Admit the next line the parser thread has finished, if there is room
 * and one is ready.  Returns true if it took one. */
static bool jsonl_admit_parsed(struct jsonl_frontend *j)
{
	struct parsed_line pl;

	if (j->has_held) {
		if (!jsonl_can_admit(j))
			return false;
		pl = j->held;
		j->has_held = false;
		jsonl_admit(j, &pl);
		return !j->has_held;	/* held again: nothing done */
	}
	if (!jsonl_can_admit(j) || !parser_thread_take(j->parser, &pl))
		return false;
	jsonl_admit(j, &pl);
	return true;
}

/*
 * Hand complete input lines to the parser thread, keeping about one
 * batch's worth of requests parsed or being parsed beyond the queue.
 * Parsing further ahead would only hold more parsed requests (each with
 * its stop automaton) in memory that is fresh for every request instead of
 * recycled.  Overlong lines are answered here.  Returns true if it did
 * anything.
 */
static bool jsonl_feed_parser(struct jsonl_frontend *j)
{
	bool fed = false;

	while (jsonl_can_admit(j) && !parser_thread_full(j->parser) &&
	       engine_n_waiting(j->e) + parser_thread_in_flight(j->parser) < j->ahead) {
		const char *line;
		size_t len;
		enum line_status st = line_reader_next(&j->lines, &line, &len);
		char err[128];

		if (st == LINE_NONE)
			break;
		fed = true;
		if (st == LINE_OVERLONG) {
			struct request none = { .line_no = j->lines.line_no };

			line_reader_overlong_error(&j->lines, err, sizeof(err));
			jsonl_answer_line(j, &none, FINISH_ERROR, err);
			continue;
		}
		if (parser_thread_submit(j->parser, line, len, j->lines.line_no)) {
			engine_fail_frontend(j->e, "out of memory reading line %llu",
					     (unsigned long long)j->lines.line_no);
			break;
		}
	}
	return fed;
}

/* ------------------------------------------------------------------------
 * I/O
 * ---------------------------------------------------------------------- */

/* The input read completed: bytes, end of input, or an error. */
static void jsonl_on_input(struct io_op *op, int32_t res)
{
	struct jsonl_frontend *j = op->arg;

	j->read_inflight = false;
	if (res > 0) {
		if (line_reader_feed(&j->lines, j->read_buf, (size_t)res))
			engine_fail_frontend(j->e, "out of memory reading input");
	} else if (res == 0) {
		j->input_eof = true;
		j->lines.eof = true;
	} else {
		engine_fail_frontend(j->e, "reading input: %s", strerror(-res));
	}
}

/* The output write completed. */
static void jsonl_on_output(struct io_op *op, int32_t res)
{
	struct jsonl_frontend *j = op->arg;

	out_writer_done(&j->out, res);
	if (res < 0) {
		engine_fail_frontend(j->e, "writing output: %s", strerror(-res));
		strbuf_consume(&j->out.write, j->out.write.len);
	}
}

/* The parser thread woke us: read its next wake-up. */
static void jsonl_on_wake(struct io_op *op, int32_t res)
{
	struct jsonl_frontend *j = op->arg;

	io_ring_read(j->io, j->wake_fd, &j->wake_buf, sizeof(j->wake_buf),
		     &j->wake_op);
}

/* Queue the input read and the output write that are due. */
static void jsonl_arm_io(struct jsonl_frontend *j)
{
	if (!j->read_inflight && !j->input_eof && !j->draining &&
	    line_reader_wants_bytes(&j->lines, JSONL_READ_SIZE) && jsonl_can_admit(j) &&
	    !io_ring_read(j->io, j->in_fd, j->read_buf, JSONL_READ_SIZE, &j->in_op))
		j->read_inflight = true;
	out_writer_arm(&j->out, j->io, j->out_fd, false, &j->out_op);
}

/* ------------------------------------------------------------------------
 * The front end's side of frontend.h
 * ---------------------------------------------------------------------- */

/* Admit what the parser has finished, feed it more lines, queue I/O. */
static bool jsonl_pump(void *ctx)
{
	struct jsonl_frontend *j = ctx;
	bool progress = false;

	while (jsonl_admit_parsed(j))
		progress = true;
	progress |= jsonl_feed_parser(j);
	jsonl_arm_io(j);
	return progress;
}

static bool jsonl_on_signal(void *ctx, int signo)
{
	struct jsonl_frontend *j = ctx;

	LOG(LOG_WARN, "%s: draining (no new requests; active ones finish, "
	    "waiting ones are cancelled); signal again to stop now",
	    strsignal(signo));
	j->draining = true;
	return false;
}

/* Input over (or a signal), every line answered and written. */
static bool jsonl_done(void *ctx)
{
	const struct jsonl_frontend *j = ctx;

	return (j->input_eof || j->draining) && !j->out.inflight &&
	       !out_writer_pending(&j->out) &&
	       (j->draining || (line_reader_drained(&j->lines) && !j->has_held &&
				!parser_thread_in_flight(j->parser)));
}

/* The thread writes our eventfd once it has a line we could admit. */
static bool jsonl_before_sleep(void *ctx)
{
	struct jsonl_frontend *j = ctx;

	j->want_wake = jsonl_can_admit(j) && parser_thread_in_flight(j->parser);
	return j->want_wake && parser_thread_want_wakeup(j->parser);
}

static void jsonl_after_sleep(void *ctx)
{
	struct jsonl_frontend *j = ctx;

	if (j->want_wake)
		parser_thread_no_wakeup(j->parser);
	j->want_wake = false;
}

const struct frontend_ops jsonl_frontend_ops = {
	.on_tokens = NULL,	/* results are whole lines: no work per step */
	.on_finish = jsonl_on_finish,
	.pump = jsonl_pump,
	.tick = NULL,
	.on_signal = jsonl_on_signal,
	.done = jsonl_done,
	.before_sleep = jsonl_before_sleep,
	.after_sleep = jsonl_after_sleep,
};

const struct frontend_ops jsonl_stream_frontend_ops = {
	.on_tokens = jsonl_on_tokens,	/* --stream: a delta line per step */
	.on_finish = jsonl_on_finish,
	.pump = jsonl_pump,
	.tick = NULL,
	.on_signal = jsonl_on_signal,
	.done = jsonl_done,
	.before_sleep = jsonl_before_sleep,
	.after_sleep = jsonl_after_sleep,
};

/* ------------------------------------------------------------------------
 * Setup and teardown
 * ---------------------------------------------------------------------- */

/* The input, or -1 with errno set; a directory is refused here (EISDIR),
 * as a configuration error, not found by the first read.  Duplicates of
 * the standard descriptors are close-on-exec: no worker inherits them. */
static int open_input(const char *path)
{
	int fd = strcmp(path, "-") ? open(path, O_RDONLY | O_CLOEXEC) :
				     fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
	struct stat st;

	if (fd >= 0 && !fstat(fd, &st) && S_ISDIR(st.st_mode)) {
		close(fd);
		errno = EISDIR;
		return -1;
	}
	return fd;
}

static int open_output(const char *path)
{
	return strcmp(path, "-") ?
	       open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) :
	       fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
}

/*
 * Is the output the very file our stderr writes to (--output - 2>&1 into a
 * pipe or file)?  Then a worker's stderr would let it write result lines:
 * it gets /dev/null instead, and its log is lost.  A terminal is left
 * alone: nobody parses it, and a worker's error messages matter there.
 */
static bool output_is_stderr(int out_fd)
{
	struct stat out, err;

	if (fstat(out_fd, &out) || fstat(STDERR_FILENO, &err) ||
	    out.st_dev != err.st_dev || out.st_ino != err.st_ino ||
	    isatty(out_fd))
		return false;
	LOG(LOG_WARN, "--output is also our stderr: workers' messages are "
	    "discarded (so that no worker can write a result line)");
	return true;
}

struct jsonl_frontend *jsonl_frontend_create(const struct jsonl_config *cfg,
					     struct engine *e, int *status)
{
	struct jsonl_frontend *j = calloc(1, sizeof(*j));
	struct request_limits lim = { .vocab = engine_vocab(e),
				      .max_context = cfg->max_context,
				      .has_logits = engine_has_logits(e),
				      .tok = engine_tokenizer(e),
				      .grammar_max = engine_grammar_max(e),
				      .default_grammar = engine_default_grammar(e),
				      .default_temperature = cfg->default_temperature };

	*status = ENGINE_EXIT_FAILED;
	if (!j) {
		fprintf(stderr, "dynbatch: out of memory\n");
		return NULL;
	}
	j->e = e;
	j->io = engine_io(e);
	j->stream = cfg->stream;
	j->ahead = cfg->n_slots;
	j->in_fd = j->out_fd = j->wake_fd = -1;
	j->in_op = (struct io_op){ jsonl_on_input, j };
	j->out_op = (struct io_op){ jsonl_on_output, j };
	j->wake_op = (struct io_op){ jsonl_on_wake, j };
	line_reader_init(&j->lines, cfg->max_line);
	j->in_fd = open_input(cfg->input_path);
	if (j->in_fd < 0) {
		fprintf(stderr, "dynbatch: --input %s: %s\n", cfg->input_path, strerror(errno));
		*status = ENGINE_EXIT_USAGE;
		goto out_destroy;
	}
	j->out_fd = open_output(cfg->output_path);
	if (j->out_fd < 0) {
		fprintf(stderr, "dynbatch: --output %s: %s\n", cfg->output_path, strerror(errno));
		*status = ENGINE_EXIT_USAGE;
		goto out_destroy;
	}
	if (output_is_stderr(j->out_fd))
		engine_quiet_workers(e);
	j->read_buf = malloc(JSONL_READ_SIZE);
	if (!j->read_buf) {
		fprintf(stderr, "dynbatch: out of memory\n");
		goto out_destroy;
	}
	j->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (j->wake_fd < 0) {
		fprintf(stderr, "dynbatch: eventfd: %s\n", strerror(errno));
		goto out_destroy;
	}
	j->parser = parser_thread_create(&lim, cfg->n_slots < 16 ? 16 : cfg->n_slots,
					 j->wake_fd);
	if (!j->parser) {
		fprintf(stderr, "dynbatch: cannot start the parser thread: %s\n",
			strerror(errno));
		goto out_destroy;
	}
	io_ring_read(j->io, j->wake_fd, &j->wake_buf, sizeof(j->wake_buf), &j->wake_op);
	*status = ENGINE_EXIT_OK;
	return j;
out_destroy:
	jsonl_frontend_destroy(j);
	return NULL;
}

int jsonl_frontend_destroy(struct jsonl_frontend *j)
{
	int ret = 0;

	if (!j)
		return 0;
	if (j->has_held)	/* a signal drained the run before it fit */
		request_release(&j->held.req);
	/* After a failure the error lines are still here: write them now,
	 * older bytes first (the loop is over). */
	if (j->out_fd >= 0 &&
	    out_writer_flush_sync(&j->out, j->out_fd, JSONL_FLUSH_STALL_MS)) {
		fprintf(stderr, "dynbatch: --output: %zu bytes of result lines "
			"could not be written (the reader takes nothing)\n",
			j->out.write.len + j->out.fill.len);
		ret = -1;
	}
	parser_thread_destroy(j->parser);
	line_reader_release(&j->lines);
	out_writer_release(&j->out);
	free(j->read_buf);
	if (j->wake_fd >= 0)
		close(j->wake_fd);
	if (j->in_fd >= 0)
		close(j->in_fd);
	if (j->out_fd >= 0)
		close(j->out_fd);
	free(j);
	return ret;
}
