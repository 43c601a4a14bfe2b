/*
 * http_routes.c - the application side of `dynbatch serve` (http_server.h):
 * what a parsed request gets.  The route table http_api_routes
 * (/health, /metrics, /v1/models and /v1/models/{id} (http_models.c),
 * /tokenize and /detokenize, /v1/completions and /v1/chat/completions, the last two
 * with their admission through engine_submit()) and the engine callbacks that answer or stream a
 * completion, in the completions shapes (completion_api.h) or, for a chat
 * request (conn.chat), the chat shapes (chat_api.h).  Connections, I/O,
 * timers, draining, the lookup in the table (API key, 404, 405) and the
 * answers' framing (respond(), respond_error()) are http_server.c's; a
 * route uses only what http_conn.h offers.
 */
#include "server/http/http_routes.h"

#include "server/http/http_conn.h"
#include "server/http/http_server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "server/http/chat_api.h"
#include "server/http/chat_tools.h"
#include "server/http/completion_api.h"
#include "server/http/http_models.h"
#include "server/http/tokenize_api.h"
#include "server/http/tenant_http.h"
#include "server/http/tenant_table.h"
#include "engine/engine.h"
#include "util/json_writer.h"
#include "text/text_tokenizer.h"
#include "util/log.h"
#include "engine/request.h"

static uint64_t cookie_of(const struct http_server *srv, const struct conn *c)
{
	return ((uint64_t)c->req_serial << 32) | (uint32_t)(c - srv->conns);
}

/* The connection waiting for the request with this cookie, or NULL. */
static struct conn *conn_of_cookie(struct http_server *srv, uint64_t cookie)
{
	uint32_t index = (uint32_t)cookie;
	struct conn *c;

	if (index >= srv->n_conns)
		return NULL;
	c = &srv->conns[index];
	if (c->fd < 0 || !c->busy || c->req_serial != (uint32_t)(cookie >> 32))
		return NULL;
	return c;
}

/* ------------------------------------------------------------------------
 * Answers
 * ---------------------------------------------------------------------- */

/* Append body as one HTTP chunk. */
static int put_chunk(struct strbuf *out, const struct strbuf *body)
{
	if (!body->len)
		return 0;
	if (strbuf_printf(out, "%zx\r\n", body->len) ||
	    strbuf_append(out, body->data, body->len) ||
	    strbuf_append(out, "\r\n", 2))
		return -1;
	return 0;
}

/* ------------------------------------------------------------------------
 * Routes
 * ---------------------------------------------------------------------- */

static void route_health(struct http_server *srv, struct conn *c)
{
	bool ok = engine_healthy(srv->e) && srv->accepting;

	srv->body.len = 0;
	if (strbuf_printf(&srv->body, "{\"status\":\"%s\"}",
			  ok ? "ok" : srv->accepting ? "no worker" : "draining")) {
		conn_drop(srv, c);
		return;
	}
	respond(srv, c, ok ? 200 : 503, "application/json", NULL);
}

/* A new request of n choices on c: nothing sent, nothing kept; each
 * choice's logprobs start at lp[i] (set by the caller), each prompt's
 * after its last token. */
static void conn_choices_start(struct conn *c, uint32_t n)
{
	struct conn_choices *ch = &c->ch;

	c->handle = ch->handles[0];
	ch->n = n;
	ch->n_done = 0;
	ch->n_generated = 0;
	ch->failed = false;
	ch->kept = NULL;
}

/* POST /tokenize (detok false) or /detokenize: answered at once. */
static void route_tokens(struct http_server *srv, struct conn *c, bool detok)
{
	const struct strbuf *body = &c->reader.msg.body;
	char err[320], param[REQUEST_FIELD_NAME_MAX];
	int rc;

	srv->body.len = 0;
	rc = (detok ? detokenize_answer : tokenize_answer)(
		body->len ? body->data : "", body->len, &srv->lim, &srv->body, err,
		sizeof(err), param);
	if (rc == -ENOMEM)
		respond_error(srv, c, 500, "out of memory", "server_error", NULL, NULL);
	else if (rc)
		respond_error(srv, c, 400, err, "invalid_request_error",
			      param[0] ? param : NULL, NULL);
	else
		respond(srv, c, 200, "application/json", NULL);
}

static void route_tokenize(struct http_server *srv, struct conn *c)
{
	route_tokens(srv, c, false);
}

static void route_detokenize(struct http_server *srv, struct conn *c)
{
	route_tokens(srv, c, true);
}

static void route_metrics(struct http_server *srv, struct conn *c)
{
	srv->body.len = 0;
	if (engine_metrics(srv->e, &srv->body) ||
	    http_server_metrics(srv, &srv->body) ||
	    tenant_table_metrics(srv->cfg->tenants, &srv->body)) {
		conn_drop(srv, c);
		return;
	}
	respond(srv, c, 200, "text/plain; version=0.0.4; charset=utf-8", NULL);
}

/* A chat stream opens with a chunk per choice naming the role. */
static int chat_stream_start(struct http_server *srv, struct conn *c,
			     const char *id, uint32_t n_choices)
{
	struct completion_meta m = { id, c->created, srv->cfg->model_name,
					 c->include_usage };

	srv->body.len = 0;
	for (uint32_t i = 0; i < n_choices; i++) {
		struct completion_choice one = { .index = i };

		if (chat_format_chunk(&srv->body, &m, CHAT_CHUNK_ROLE, &one, NULL))
			return -1;
	}
	if (put_chunk(&c->out.fill, &srv->body))
		return -1;
	srv->body.len = 0;
	return 0;
}

/* A completions stream with echo opens with an event per choice
 * carrying the prompt's text (as vLLM streams it). */
static int echo_stream_start(struct http_server *srv, struct conn *c,
			     const char *id)
{
	struct completion_meta m = { id, c->created, srv->cfg->model_name,
				     c->include_usage };

	srv->body.len = 0;
	for (uint32_t i = 0; i < c->ch.n; i++) {
		struct completion_choice one = { .index = i,
			.text = c->ch.echo[i / c->ch.per],
			.text_len = c->ch.echo_len[i / c->ch.per] };

		if (completion_format_event(&srv->body, &m, &one, NULL))
			return -1;
	}
	if (put_chunk(&c->out.fill, &srv->body))
		return -1;
	srv->body.len = 0;
	return 0;
}

/* c's request answers with tool calls (chat_tools.h): the connection
 * owns tools from here on, and a stream holds text back per choice.
 * 0, or -1 when out of memory (tools freed all the same). */
static int conn_tools_start(struct conn *c, struct chat_tool_set *tools)
{
	c->ch.tools = tools;
	if (!c->stream)
		return 0;
	c->ch.tool_held = calloc(c->ch.n ? c->ch.n : 1, sizeof(*c->ch.tool_held));
	return c->ch.tool_held ? 0 : -1;
}

/* POST /v1/completions (chat false) or /v1/chat/completions (chat). */
/*
 * The most bytes a non-streamed answer to req can reach, kept while its
 * choices finish and then written whole: per choice a fixed part, per
 * token its id, its text (every byte escaped as \uXXXX, the longest
 * piece) and its logprob entries.  Streams send as they go and are
 * bounded by --conn-buffer instead.
 */
#define ANSWER_CHOICE_BYTES 512u
#define ANSWER_LOGPROB_BYTES 64u	/* a logprob, offset and separators */
static uint64_t answer_per_token(const struct http_server *srv,
				 const struct request *req)
{
	const struct text_tokenizer *tok = srv->lim.tok;

	return JSON_TOKEN_MAX +
	       (tok ? 6ull * text_tokenizer_longest_piece(tok) : 0) +
	       (req->sampling.logprobs ?
		(1ull + req->sampling.top_logprobs) *
		(ANSWER_LOGPROB_BYTES + logprob_entry_bound(tok)) : 0);
}

static uint64_t answer_bound(const struct http_server *srv,
			     const struct request *req, size_t echo_len)
{
	/* an echoed prompt: every byte escaped, in each choice */
	return (uint64_t)req->n_choices *
	       (ANSWER_CHOICE_BYTES + 6ull * echo_len +
		(uint64_t)req->max_tokens * answer_per_token(srv, req));
}

/*
 * A chat's max_tokens left out is the context's rest (chat_api.c); lower
 * it to what a non-streamed answer (--max-answer-bytes) and a shard's KV
 * pool hold, so that leaving it out never earns a 400 of its own.
 */
static void clamp_default_max_tokens(struct http_server *srv,
				     const struct completion_request *cr,
				     struct request *req)
{
	struct engine_kv_pool pool;
	uint64_t fit, per_choice;

	if (!cr->max_tokens_defaulted || !req->n_choices)
		return;
	if (!cr->stream) {
		per_choice = srv->cfg->max_answer_bytes / req->n_choices;
		fit = per_choice > ANSWER_CHOICE_BYTES ?
		      (per_choice - ANSWER_CHOICE_BYTES) / answer_per_token(srv, req) : 0;
		if (fit < req->max_tokens)
			req->max_tokens = (uint32_t)fit;
	}
	engine_kv_need(srv->e, 0, &pool);
	if (pool.block_tokens) {
		/* engine_kv_need(): n tokens take ceil((n - 1) / block) blocks */
		fit = (uint64_t)pool.blocks * pool.block_tokens + 1;
		fit = fit > req->n_prompt ? fit - req->n_prompt : 0;
		if (fit < req->max_tokens)
			req->max_tokens = (uint32_t)fit;
	}
}

/*
 * Reserve a non-streamed answer's bytes (every prompt's, with its
 * echo), or answer 400 (it could never fit) or 429 (too many large
 * answers are being built now).  True when reserved.
 */
static bool reserve_answer(struct http_server *srv, struct conn *c,
			   struct request *const *reqs, uint32_t n_reqs,
			   const size_t *echo_len)
{
	const struct request *req = reqs[0];
	uint64_t need = 0;
	char err[320];

	for (uint32_t i = 0; i < n_reqs; i++)
		need += answer_bound(srv, reqs[i], echo_len[i]);

	if (need > srv->cfg->max_answer_bytes) {
		snprintf(err, sizeof(err), "the answer could reach %llu bytes "
			 "(%u prompts x n %u x max_tokens %u, with its text and "
			 "logprobs), more than this server builds "
			 "(--max-answer-bytes %llu): ask for fewer, or set "
			 "\"stream\": true", (unsigned long long)need, n_reqs,
			 req->n_choices, req->max_tokens,
			 (unsigned long long)srv->cfg->max_answer_bytes);
		respond_error(srv, c, 400, err, "invalid_request_error",
			      "max_tokens", NULL);
		return false;
	}
	if (srv->answer_reserved + need > srv->cfg->answer_budget) {
		respond_error(srv, c, 429, "the server is building as many large "
			      "answers as it holds (--answer-budget); retry later, "
			      "or stream", "rate_limit_error", NULL,
			      "Retry-After: 1\r\n");
		return false;
	}
	srv->answer_reserved += need;
	c->answer_reserved += need;	/* a pipelined one may still be unsent */
	return true;
}

/*
 * The request's prompts (a batch's, or its one) as engine_submit_batch()
 * takes them, each with the id (a copy of prompt 0's) and each of its
 * choices' logprobs starting after its last token (c->ch.lp, flat).
 * The number of prompts, or 0 out of memory.
 */
static uint32_t conn_prompts(struct http_server *srv, struct conn *c,
			     struct completion_request *cr,
			     struct request **reqs, size_t *echo_len)
{
	uint32_t n = cr->n_prompts ? cr->n_prompts : 1;
	struct request *r;

	c->ch.n_prompt_tokens = 0;
	for (uint32_t p = 0; p < n; p++) {
		r = reqs[p] = p ? &cr->more[p - 1].req : &cr->req;
		echo_len[p] = p ? cr->more[p - 1].echo_len : cr->echo_len;
		if (!r->id && !(r->id = strdup(cr->req.id)))
			return 0;
		c->ch.n_prompt_tokens += r->n_prompt;
		/* the first generated token's text follows the prompt's last */
		for (uint32_t j = 0; j < r->n_choices; j++)
			c->ch.lp[p * r->n_choices + j] = (struct logprob_ctx){
				.tok = srv->lim.tok,
				.prev_token = r->n_prompt ? r->prompt[r->n_prompt - 1] : -1,
				.ignore_eos = r->ignore_eos };
	}
	return n;
}

/* 400 for the prompt of reqs that needs the most KV blocks, more than
 * a shard's pool has (engine_submit_batch()'s -ENOSPC). */
static void respond_no_kv(struct http_server *srv, struct conn *c,
			  struct request *const *reqs, uint32_t n_reqs)
{
	struct engine_kv_pool pool;
	uint32_t need = 0, at = 0;
	char err[320], which[48] = "";

	for (uint32_t p = 0; p < n_reqs; p++) {
		uint32_t k = engine_kv_need(srv->e, reqs[p]->n_prompt +
					    reqs[p]->max_tokens, &pool);

		if (k > need) {
			need = k;
			at = p;
		}
	}
	if (n_reqs > 1)
		snprintf(which, sizeof(which), "prompt %u of the batch: ", at);
	snprintf(err, sizeof(err), "%s%u prompt tokens + max_tokens %u need "
		 "%u KV blocks of %u tokens, more than a shard's pool of %u "
		 "blocks", which, reqs[at]->n_prompt, reqs[at]->max_tokens, need,
		 pool.block_tokens, pool.blocks);
	respond_error(srv, c, 400, err, "invalid_request_error",
		      n_reqs > 1 ? "prompt" : "max_tokens", NULL);
}

/* The request's echoes (one per prompt) are the connection's now. */
static void conn_take_echo(struct conn *c, struct completion_request *cr)
{
	c->ch.echo[0] = cr->echo;
	c->ch.echo_len[0] = cr->echo_len;
	cr->echo = NULL;
	for (uint32_t p = 1; p < cr->n_prompts; p++) {
		c->ch.echo[p] = cr->more[p - 1].echo;
		c->ch.echo_len[p] = cr->more[p - 1].echo_len;
		cr->more[p - 1].echo = NULL;
	}
}

static void route_generate(struct http_server *srv, struct conn *c, bool chat)
{
	const struct strbuf *body = &c->reader.msg.body;
	struct request *reqs[REQUEST_MAX_CHOICES];
	size_t echo_len[REQUEST_MAX_CHOICES];
	struct completion_request cr;
	const char *param;
	char err[512], *chat_id = NULL;
	struct chat_tool_set *tools;
	size_t before;
	uint32_t n_choices, n_reqs;
	int ret;

	if (chat)
		ret = chat_parse(body->len ? body->data : "", body->len,
				 &srv->cfg->chat, &srv->lim, &cr, err,
				 sizeof(err), &param);
	else
		ret = completion_parse(body->len ? body->data : "", body->len,
				       &srv->lim, &cr, err, sizeof(err), &param);
	if (ret) {
		if (ret == -ENOMEM)
			respond_error(srv, c, 500, "out of memory", "server_error", NULL, NULL);
		else
			respond_error(srv, c, 400, err, "invalid_request_error", param, NULL);
		goto out;
	}
	/* vLLM's rule: a name not served is a 404; no name is fine */
	if (cr.model && !http_model_served(srv->cfg, cr.model, strlen(cr.model))) {
		http_respond_no_model(srv, c, cr.model, strlen(cr.model));
		goto out;
	}
	if (!cr.req.id) {
		if (asprintf(&cr.req.id, COMPLETION_ID_PREFIX "%x-%llu", (unsigned)getpid(),
			     (unsigned long long)++srv->next_id) < 0) {
			cr.req.id = NULL;
			respond_error(srv, c, 500, "out of memory", "server_error", NULL, NULL);
			goto out;
		}
	}
	/* a chat (or echo) stream's first chunks name the id, and the engine owns the
	 * request (its id included) once it takes it */
	if ((chat || cr.echo) && cr.stream && !(chat_id = strdup(cr.req.id))) {
		respond_error(srv, c, 500, "out of memory", "server_error", NULL, NULL);
		goto out;
	}
	c->req_serial++;
	clamp_default_max_tokens(srv, &cr, &cr.req);
	n_reqs = conn_prompts(srv, c, &cr, reqs, echo_len);
	if (!n_reqs) {
		respond_error(srv, c, 500, "out of memory", "server_error", NULL, NULL);
		goto out;
	}
	n_choices = n_reqs * cr.req.n_choices;
	if (!tenant_http_admit(srv, c, reqs, n_reqs))
		goto out;
	if (!cr.stream && !reserve_answer(srv, c, reqs, n_reqs, echo_len)) {
		tenant_http_unreserve(c);
		goto out;
	}
	ret = engine_submit_batch(srv->e, reqs, n_reqs, cookie_of(srv, c),
				  c->ch.handles);
	if (ret) {	/* nothing admitted: nothing to build, nothing used */
		conn_release_answer(srv, c);
		tenant_http_unreserve(c);
	}
	switch (ret) {
	case 0:
		break;
	case -EAGAIN:
		respond_error(srv, c, 429, "the waiting queue is full; retry later",
			      "rate_limit_error", NULL, "Retry-After: 1\r\n");
		goto out;
	case -EEXIST:
		snprintf(err, sizeof(err), "a request with id '%.200s' is still running",
			 cr.req.id);
		respond_error(srv, c, 409, err, "invalid_request_error", "id", NULL);
		goto out;
	case -EIO:
		respond_error(srv, c, 503, "no model worker can be kept alive",
			      "server_error", NULL, "Retry-After: 5\r\n");
		goto out;
	case -ESHUTDOWN:
		respond_error(srv, c, 503, "the server is shutting down",
			      "server_error", NULL, NULL);
		goto out;
	case -E2BIG:
		respond_error(srv, c, 400, "the request's choices (n, or best_of, "
			      "per prompt) are more than the server's waiting queue "
			      "holds", "invalid_request_error", "n", NULL);
		goto out;
	case -ENOSPC:
		respond_no_kv(srv, c, reqs, n_reqs);
		goto out;
	default:
		respond_error(srv, c, 500, "out of memory", "server_error", NULL, NULL);
		goto out;
	}
	c->busy = true;
	c->stream = cr.stream;
	c->chat = chat;
	c->include_usage = cr.include_usage;
	conn_choices_start(c, n_choices);
	c->ch.n_prompts = n_reqs;
	c->ch.per = n_choices / n_reqs;
	c->ch.n_best = cr.n_best;
	c->ch.hide_logprobs = cr.hide_logprobs;
	conn_take_echo(c, &cr);
	tools = cr.tools;		/* the connection's now, too */
	cr.tools = NULL;
	if (tools && conn_tools_start(c, tools)) {
		conn_drop(srv, c);
		goto out;
	}
	c->created = (uint64_t)time(NULL);
	c->request_start_ns = 0;
	if (c->stream) {
		before = conn_buffered(c);
		srv->n_status[200]++;
		/* X-Accel-Buffering: proxies such as nginx pass events at once */
		if (strbuf_printf(&c->out.fill, "HTTP/1.1 200 OK\r\n"
				  "Content-Type: text/event-stream\r\n"
				  "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n"
				  "Transfer-Encoding: chunked\r\n%s", c->rate_headers) ||
		    conn_put_cors(c, &c->out.fill) ||
		    strbuf_printf(&c->out.fill, "%s\r\n",
				  c->keep_alive ? "" : "Connection: close\r\n")) {
			conn_drop(srv, c);
			goto out;
		}
		if ((chat && chat_stream_start(srv, c, chat_id, n_choices)) ||
		    (c->ch.echo[0] && echo_stream_start(srv, c, chat_id))) {
			conn_drop(srv, c);
			goto out;
		}
		conn_note_output(c, before);
		conn_mark(srv, c);
	}
out:
	free(chat_id);
	completion_request_release(&cr);
}

static void route_completions(struct http_server *srv, struct conn *c)
{
	route_generate(srv, c, false);
}

static void route_chat(struct http_server *srv, struct conn *c)
{
	route_generate(srv, c, true);
}

/* ------------------------------------------------------------------------
 * Engine callbacks
 * ---------------------------------------------------------------------- */

/* A connection a callback cannot serve (out of memory): dropped from
 * pump, where cancelling its request is allowed. */
static void conn_drop_later(struct http_server *srv, struct conn *c)
{
	c->drop_due = true;
	conn_mark(srv, c);
}

/*
 * A stream with tools: one's text joins what choice holds back, and one
 * becomes the part of it that is content for sure (chat_tools.h), taken
 * out of the hold.  0, or -1 when out of memory.
 */
static int tools_hold(struct conn *c, uint32_t choice,
		      struct completion_choice *one)
{
	struct strbuf *held = &c->ch.tool_held[choice];
	size_t ready;

	if (strbuf_append(held, one->text, one->text_len))
		return -1;
	ready = chat_tools_content_ready(c->ch.tools, held->data, held->len);
	/* the chunk's text is copied out before the hold moves */
	one->text = ready ? held->data : NULL;
	one->text_len = ready;
	return 0;
}

/* Take the first n bytes out of a hold once they were sent. */
static void tools_sent(struct strbuf *held, size_t n)
{
	memmove(held->data, held->data + n, held->len - n);
	held->len -= n;
}

/* n more tokens of one choice are final: one event. */
static void http_on_tokens(void *ctx, uint64_t cookie, const struct request *req,
		    const int32_t *tokens, const struct sampler_logprob *logprobs,
		    uint32_t n, const char *text, size_t text_len)
{
	struct http_server *srv = ctx;
	struct conn *c = conn_of_cookie(srv, cookie);
	struct completion_meta m;
	struct completion_choice one;
	uint32_t at = request_flat_choice(req);
	size_t before;

	if (c)		/* what a refund must not give back (tenant_http.h) */
		c->tenant_streamed += n;
	if (!c || !c->stream || c->drop_due || at >= c->ch.n)
		return;
	m = (struct completion_meta){ req->id, c->created, srv->cfg->model_name,
				      c->include_usage };
	one = (struct completion_choice){ .index = at, .tokens = tokens,
		.n_tokens = n, .logprobs = logprobs,
		.logprob_stride = 1 + req->sampling.top_logprobs,
		.text = text, .text_len = text_len, .lp = c->ch.lp[at] };
	/* the next event's tokens follow these */
	logprob_ctx_advance(&c->ch.lp[at], tokens, n);
	/* a chat chunk is content: none when the tokens made no text yet
	 * (a character cut between tokens) and carry no logprobs */
	if (c->chat && !text_len && !logprobs)
		return;
	if (c->ch.tool_held && tools_hold(c, req->choice, &one)) {
		conn_drop_later(srv, c);
		return;
	}
	if (c->ch.tool_held && !one.text_len)
		return;		/* all of it may be a call: held */
	srv->body.len = 0;
	before = conn_buffered(c);
	if ((c->chat ? chat_format_chunk(&srv->body, &m, CHAT_CHUNK_CONTENT, &one, NULL) :
	     completion_format_event(&srv->body, &m, &one, NULL)) ||
	    put_chunk(&c->out.fill, &srv->body)) {
		conn_drop_later(srv, c);
		return;
	}
	if (c->ch.tool_held)
		tools_sent(&c->ch.tool_held[req->choice], one.text_len);
	conn_note_output(c, before);
	conn_mark(srv, c);
	if (!c->paused && conn_buffered(c) >= srv->cfg->conn_buffer) {
		c->paused = true;
		c->pause_due = true;
		srv->n_pauses++;
	}
}

/*
 * The end of a streamed choice with tools: the rest of its text joins
 * the hold, which is then split.  With calls: the content before them
 * (if any), a chunk of the calls, and finish_reason "tool_calls";
 * without, the hold as content and one's own finish.  0 or -1.
 */
static int tools_finish(struct conn *c, const struct completion_meta *m,
			struct completion_choice *one, struct strbuf *body)
{
	struct strbuf *held = &c->ch.tool_held[one->index];
	struct chat_tool_calls calls;
	int rc;

	if (strbuf_append(held, one->text, one->text_len))
		return -1;
	rc = chat_tools_split(c->ch.tools, held->data, held->len, m->id,
			      one->index, &calls);
	if (rc < 0)
		return -1;
	one->text = held->data;
	one->text_len = rc ? calls.content_len : held->len;
	one->tools = c->ch.tools;
	one->calls = &calls;
	if (one->text_len)
		rc = chat_format_chunk(body, m, CHAT_CHUNK_CONTENT, one, NULL) ? -1 : rc;
	if (rc > 0) {
		one->finish_reason = "tool_calls";
		rc = chat_format_chunk(body, m, CHAT_CHUNK_TOOL_CALLS, one, NULL) ?
		     -1 : 0;
	}
	one->calls = NULL;
	if (rc >= 0 && chat_format_chunk(body, m, CHAT_CHUNK_FINISH, one, NULL))
		rc = -1;
	chat_tool_calls_release(&calls);
	held->len = 0;
	return rc < 0 ? -1 : 0;
}

/* The last event of one choice of a stream; after the last choice's,
 * [DONE] and the end of the chunked body. */
static int stream_finish(struct http_server *srv, struct conn *c,
			 const struct frontend_result *r, const char *error)
{
	struct completion_meta m = { r->req->id, c->created, srv->cfg->model_name,
				     c->include_usage };
	struct completion_usage u = { c->ch.n_prompt_tokens, c->ch.n_generated };
	uint32_t n = r->n_tokens, choice = request_flat_choice(r->req);
	bool last = c->ch.n_done == c->ch.n;

	srv->body.len = 0;
	if (r->reason == FINISH_STOP || r->reason == FINISH_LENGTH) {
		/* the rest after what on_tokens handed out */
		uint32_t from = r->n_given < n ? r->n_given : n;
		uint32_t stride = 1 + r->req->sampling.top_logprobs;
		size_t t_from = r->text_given;
		struct completion_choice one = { .index = choice,
			.text = r->text ? r->text + t_from : NULL,
			.text_len = r->text_len - t_from,
			.tokens = r->tokens ? r->tokens + from : NULL,
			.n_tokens = n - from,
			.finish_reason = finish_reason_names[r->reason],
			.logprobs = r->logprobs ? r->logprobs + (size_t)from * stride : NULL,
			.logprob_stride = stride,
			.lp = choice < c->ch.n ? c->ch.lp[choice] : c->ch.lp[0] };

		if (c->chat && c->ch.tool_held && choice < c->ch.n) {
			if (tools_finish(c, &m, &one, &srv->body))
				return -1;
		} else if (c->chat) {
			/* the rest of the content, then the end */
			if ((one.text_len || (one.logprobs && one.n_tokens)) &&
			    chat_format_chunk(&srv->body, &m, CHAT_CHUNK_CONTENT,
					      &one, NULL))
				return -1;
			if (chat_format_chunk(&srv->body, &m, CHAT_CHUNK_FINISH,
					      &one, NULL))
				return -1;
		} else if (completion_format_event(&srv->body, &m, &one, NULL)) {
			return -1;
		}
	} else {
		if (strbuf_append(&srv->body, "data: ", 6) ||
		    api_format_error(&srv->body, error, "server_error", NULL,
				     finish_reason_names[r->reason]))
			return -1;
		/* with n > 1 the other choices go on: say which one ended */
		if (c->ch.n > 1) {
			srv->body.len--;	/* the error object's last '}' */
			if (strbuf_printf(&srv->body, ",\"index\":%u}", choice))
				return -1;
		}
		if (strbuf_append(&srv->body, "\n\n", 2))
			return -1;
	}
	/* OpenAI's stream_options.include_usage: usage in a last chunk of
	 * its own, none elsewhere */
	if (last && c->include_usage &&
	    (c->chat ? chat_format_usage_chunk(&srv->body, &m, &u) :
	     completion_format_usage_event(&srv->body, &m, &u)))
		return -1;
	if (last && strbuf_append(&srv->body, "data: [DONE]\n\n", 14))
		return -1;
	if (put_chunk(&c->out.fill, &srv->body) ||
	    (last && strbuf_append(&c->out.fill, "0\r\n\r\n", 5)))
		return -1;
	srv->body.len = 0;
	return 0;
}

/* Keep a finished choice of a non-streaming answer of n > 1.  0 or -1. */
static int conn_keep_choice(struct conn *c, const struct frontend_result *r)
{
	struct conn_choices *ch = &c->ch;
	struct http_choice *k;
	uint32_t stride = 1 + r->req->sampling.top_logprobs;

	if (!ch->kept && !(ch->kept = calloc(ch->n, sizeof(*ch->kept))))
		return -1;
	if (request_flat_choice(r->req) >= ch->n)
		return -1;	/* not one of ours: cannot be */
	k = &ch->kept[request_flat_choice(r->req)];
	k->reason = r->reason;
	k->n_tokens = r->n_tokens;
	if (r->text_len) {
		k->text = malloc(r->text_len);
		if (!k->text)
			return -1;
		memcpy(k->text, r->text, r->text_len);
		k->text_len = r->text_len;
	}
	if (r->n_tokens) {
		k->tokens = malloc(r->n_tokens * sizeof(int32_t));
		if (!k->tokens)
			return -1;
		memcpy(k->tokens, r->tokens, r->n_tokens * sizeof(int32_t));
	}
	if (r->logprobs && r->n_tokens) {
		size_t sz = (size_t)r->n_tokens * stride * sizeof(*r->logprobs);

		k->logprobs = malloc(sz);
		if (!k->logprobs)
			return -1;
		memcpy(k->logprobs, r->logprobs, sz);
	}
	return 0;
}

/* A chat answer with tools: each choice's text split into content and
 * calls (chat_tools.h); a choice with calls finishes "tool_calls". */
static int tools_answer(struct http_server *srv, struct conn *c,
			const struct completion_meta *m,
			struct completion_choice *choices, uint32_t n,
			const struct completion_usage *u,
			const struct frontend_result *r)
{
	struct chat_tool_calls calls[REQUEST_MAX_CHOICES];
	int rc = 0;

	memset(calls, 0, sizeof(calls));
	for (uint32_t i = 0; i < n && !rc; i++) {
		int found = chat_tools_split(c->ch.tools, choices[i].text,
					     choices[i].text_len, m->id, i, &calls[i]);

		if (found < 0)
			rc = -1;
		if (found > 0) {
			choices[i].tools = c->ch.tools;
			choices[i].calls = &calls[i];
			choices[i].finish_reason = "tool_calls";
		}
	}
	if (!rc)
		rc = chat_format(&srv->body, m, choices, n, u, r->has_seed, r->seed);
	for (uint32_t i = 0; i < n; i++)
		chat_tool_calls_release(&calls[i]);
	return rc;
}

/* Kept choice k as answer choice index (its prompt's echo first). */
static struct completion_choice kept_choice(const struct conn *c, uint32_t k,
					    uint32_t index, uint32_t stride)
{
	const struct http_choice *h = &c->ch.kept[k];
	uint32_t p = k / c->ch.per;

	return (struct completion_choice){ .index = index,
		.text = h->text, .text_len = h->text_len,
		.tokens = h->tokens, .n_tokens = h->n_tokens,
		.finish_reason = finish_reason_names[h->reason],
		.logprobs = c->ch.hide_logprobs ? NULL : h->logprobs,
		.logprob_stride = stride, .lp = c->ch.lp[k],
		.prefix = c->ch.echo[p], .prefix_len = c->ch.echo_len[p] };
}

/* The kept choices as answered: all, or best_of's n_best per prompt in
 * rank order, numbered prompt-major.  Their number. */
static uint32_t kept_answer(const struct conn *c, uint32_t stride,
			    struct completion_choice *out)
{
	const struct conn_choices *ch = &c->ch;
	struct completion_candidate cand[REQUEST_MAX_CHOICES];
	uint32_t order[REQUEST_MAX_CHOICES], n = 0;

	if (!ch->n_best) {
		for (uint32_t i = 0; i < ch->n; i++)
			out[i] = kept_choice(c, i, i, stride);
		return ch->n;
	}
	for (uint32_t p = 0; p < ch->n_prompts; p++) {
		const struct http_choice *k = ch->kept + p * ch->per;

		for (uint32_t j = 0; j < ch->per; j++)
			cand[j] = (struct completion_candidate){ k[j].logprobs,
				k[j].n_tokens, stride };
		completion_rank(cand, ch->per, ch->n_best, order);
		for (uint32_t j = 0; j < ch->n_best; j++, n++)
			out[n] = kept_choice(c, p * ch->per + order[j], n, stride);
	}
	return n;
}

/* The whole answer of a non-streaming request, from one result (one
 * choice) or the kept choices.  0 or -1 (out of memory). */
static int conn_answer(struct http_server *srv, struct conn *c,
		       const struct frontend_result *r)
{
	struct completion_meta m = { r->req->id, c->created, srv->cfg->model_name,
				     false };
	struct completion_usage u = { c->ch.n_prompt_tokens, c->ch.n_generated };
	struct completion_choice choices[REQUEST_MAX_CHOICES];
	uint32_t stride = 1 + r->req->sampling.top_logprobs, n = 1;

	if (!c->ch.kept) {
		choices[0] = (struct completion_choice){ .index = 0,
			.text = r->text, .text_len = r->text_len,
			.tokens = r->tokens, .n_tokens = r->n_tokens,
			.finish_reason = finish_reason_names[r->reason],
			.logprobs = r->logprobs, .logprob_stride = stride,
			.lp = c->ch.lp[0], .prefix = c->ch.echo[0],
			.prefix_len = c->ch.echo_len[0] };
	} else {
		n = kept_answer(c, stride, choices);
	}
	srv->body.len = 0;
	if (c->chat && c->ch.tools)
		return tools_answer(srv, c, &m, choices, n,
				    &u, r);
	if (c->chat)
		return chat_format(&srv->body, &m, choices, n, &u, r->has_seed,
				   r->seed);
	return completion_format(&srv->body, &m, choices, n, &u, r->has_seed,
				 r->seed);
}

/* One choice of c's request ended: note it, and hand c->handle to a
 * choice still live.  Returns true when it was the last. */
static bool conn_choice_ended(struct conn *c, const struct frontend_result *r)
{
	struct conn_choices *ch = &c->ch;

	if (request_flat_choice(r->req) < ch->n)
		ch->handles[request_flat_choice(r->req)] = REQUEST_NONE;
	ch->n_done++;
	ch->n_generated += r->n_generated;
	if (r->reason != FINISH_STOP && r->reason != FINISH_LENGTH && !ch->failed) {
		ch->failed = true;
		ch->fail_reason = r->reason;
		snprintf(ch->fail_msg, sizeof(ch->fail_msg), "%s",
			 r->error ? r->error : "request failed");
	}
	for (uint32_t i = 0; i < ch->n; i++)
		if (ch->handles[i] != REQUEST_NONE) {
			c->handle = ch->handles[i];
			break;
		}
	return ch->n_done >= ch->n;
}

/* A choice of the request ended: the answer once all have, or the end
 * of the choice's stream. */
static void http_on_finish(void *ctx, uint64_t cookie, const struct frontend_result *r)
{
	struct http_server *srv = ctx;
	struct conn *c = conn_of_cookie(srv, cookie);
	/* The engine cancels requests the server did not give up on only
	 * when it shuts down (a second signal). */
	const char *error = r->error ? r->error :
			    r->reason == FINISH_CANCELLED ? "the server is shutting down" :
			    "request failed";
	bool last;
	size_t before;
	int ret;

	if (!c)
		return;		/* its client is gone */
	last = conn_choice_ended(c, r);
	if (c->drop_due) {
		if (last) {
			conn_detach(srv, c);
			conn_choices_free(&c->ch);
		}
		return;		/* pump drops the connection */
	}
	if (c->stream) {
		before = conn_buffered(c);
		if (stream_finish(srv, c, r, error)) {
			conn_choices_free(&c->ch);
			conn_drop(srv, c);
			return;
		}
		conn_note_output(c, before);
		if (last) {
			conn_detach(srv, c);
			conn_request_done(srv, c);
		}
		return;
	}
	if (c->ch.n > 1 && !last) {
		if (!c->ch.failed && conn_keep_choice(c, r))
			conn_drop_later(srv, c);
		return;
	}
	if (c->ch.n > 1 && !c->ch.failed && conn_keep_choice(c, r)) {
		conn_choices_free(&c->ch);
		conn_drop(srv, c);
		return;
	}
	if (c->ch.failed) {
		conn_detach(srv, c);
		respond_error(srv, c, c->ch.fail_reason == FINISH_ERROR ? 500 : 503,
			      c->ch.fail_msg, "server_error", NULL, NULL);
		return;
	}
	ret = conn_answer(srv, c, r);	/* before conn_detach() frees the kept choices */
	conn_detach(srv, c);
	if (ret) {
		conn_drop(srv, c);
		return;
	}
	respond(srv, c, 200, "application/json",
		c->rate_headers[0] ? c->rate_headers : NULL);
}

/* ------------------------------------------------------------------------
 * The table (http_conn.h): the server looks each request up in it
 * ---------------------------------------------------------------------- */

static const struct http_route api_routes[] = {
	{ "/v1/completions", HTTP_ROUTE_METHOD(HTTP_POST), false, route_completions, false },
	{ "/v1/chat/completions", HTTP_ROUTE_METHOD(HTTP_POST), false, route_chat, false },
	{ "/v1/models", HTTP_ROUTE_METHOD(HTTP_GET), false, http_route_models, false },
	{ "/v1/models/", HTTP_ROUTE_METHOD(HTTP_GET), false, http_route_model, true },
	{ "/tokenize", HTTP_ROUTE_METHOD(HTTP_POST), false, route_tokenize, false },
	{ "/detokenize", HTTP_ROUTE_METHOD(HTTP_POST), false, route_detokenize, false },
	/* Everything but /health needs the key, unknown paths included:
	 * without it a client learns nothing, not even what exists. */
	{ "/health", HTTP_ROUTE_METHOD(HTTP_GET), true, route_health, false },
	{ "/metrics", HTTP_ROUTE_METHOD(HTTP_GET), false, route_metrics, false },
};

const struct http_route_table http_api_routes = {
	.routes = api_routes,
	.n_routes = sizeof(api_routes) / sizeof(api_routes[0]),
	.on_tokens = http_on_tokens,
	.on_finish = http_on_finish,
};
