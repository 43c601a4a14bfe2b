/*
 * fuzz_http.c - libFuzzer target for the HTTP input path of `dynbatch
 * serve`: http_reader cutting a connection's bytes into requests,
 * completion_parse() on each body, and the answer writers
 * (completion_format, completion_format_event, api_format_error) on what
 * came of it.
 *
 * The input is one control byte and then the raw bytes of a connection,
 * so seed files (tests/fuzz/http_corpus) are a byte and a request.  The
 * control byte picks how the bytes arrive (bits 0-1: one piece, single
 * bytes, small or large random pieces, drawn from a generator seeded with
 * a hash of the input), the HTTP limits (bits 2-3: roomy, tiny, small,
 * random, so that 431 and 413 are reached) and the request limits (bit 4:
 * vocab 1000 / context 512, or as large as an int32_t token allows).
 *
 * What is checked (any violation abort()s; leaks are LeakSanitizer's):
 *  - http_reader: MORE and HEADERS consume every byte fed, DONE and ERROR
 *    at most those; HEADERS comes at most once per request; an ERROR has
 *    a 4xx/5xx status and a message and sticks until reset; a request
 *    read respects max_body and max_header_bytes (for its target);
 *  - the same bytes read in one piece give the same requests (method,
 *    target, body, Authorization, keep-alive, 100-continue), in the same
 *    order, and end in an error or not alike;
 *  - completion_parse() on every body returns 0 or -EINVAL (-ENOMEM is
 *    allowed); on -EINVAL err is set and param is NULL or a field name,
 *    NULL when jansson does not read the body as an object; on 0 it is
 *    an object and "stream" is what jansson reads;
 *  - on 0, completion_format() and completion_format_event() of the
 *    prompt (and of the stop tokens) are valid JSON that read back with
 *    the same id and token ids; the event is "data: " + one line + "\n\n";
 *    the raw target and Authorization bytes, used as id and model, and
 *    every error message (parser's or reader's) through api_format_error()
 *    are valid JSON too;
 *  - chat_parse() on every body too, with a tokenizer trained once and the
 *    template bit 5 picks (llama2, chatml): 0 or -EINVAL (-ENOMEM), param
 *    NULL or a field name, NULL for a body that is not an object; on 0 the
 *    body had a "messages" array, the prompt starts with BOS, chatml's
 *    stop "<|im_end|>" is there; chat_format() and every
 *    chat_format_chunk() kind, with the body's bytes as the text, are
 *    valid JSON with the id read back ("chat" + a server id).
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "server/http/chat_api.h"
#include "server/http/completion_api.h"
#include "server/http/http_reader.h"
#include "engine/request.h"
#include "util/strbuf.h"
#include "text/text_tokenizer.h"
#include "text/tokenizer.h"
#include "text/tokenizer_train.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_rng.h"
#include "server/request/request_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ------------------------------------------------------------------------
 * Answers: every one must be JSON
 */

static const char *const known_params[] = {
	"id", "prompt", "max_tokens", "stop_token", "stop_token_ids",
	"stop_sequence", "stop_sequences", "include_stop", "stream", "model",
	"temperature", "top_p", "top_k", "min_p", "seed", "logit_bias",
	"logprobs", "top_logprobs", "n", "stop", "ignore_eos",
	"messages", "max_completion_tokens",
};

static bool known_param(const char *p)
{
	for (size_t i = 0; i < sizeof(known_params) / sizeof(known_params[0]); i++)
		if (!strcmp(p, known_params[i]))
			return true;
	return false;
}

/* text[0..len) must be one JSON object; returns it (caller decrefs). */
static json_t *must_json(const char *text, size_t len)
{
	json_error_t jerr;
	json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);

	if (!o || !json_is_object(o)) {
		fprintf(stderr, "not a JSON object (%s at %d): %.*s\n",
			o ? "not an object" : jerr.text, jerr.column,
			(int)(len < 400 ? len : 400), text);
		abort();
	}
	return o;
}

/* An answer object: id as given (when valid UTF-8), the same token ids. */
static void check_answer(json_t *o, const char *want_id, const int32_t *tokens,
			 uint32_t n_tokens)
{
	json_t *choice, *ids, *id = json_object_get(o, "id");
	uint32_t i;

	CHECK(want_id ? json_is_string(id) : json_is_null(id));
	choice = json_array_get(json_object_get(o, "choices"), 0);
	CHECK(json_is_object(choice));
	ids = json_object_get(choice, "token_ids");
	CHECK(json_is_array(ids) && json_array_size(ids) == n_tokens);
	for (i = 0; i < n_tokens; i++)
		CHECK(json_integer_value(json_array_get(ids, i)) == tokens[i]);
}

/* Format both shapes with m and read them back. */
static void check_formats(struct strbuf *out, const struct completion_meta *m,
			  const char *exact_id, const int32_t *tokens,
			  uint32_t n_tokens, const struct completion_usage *usage)
{
	struct completion_choice one;
	json_t *o;
	size_t old;

	out->len = 0;
	one = (struct completion_choice){ .tokens = tokens, .n_tokens = n_tokens,
					  .finish_reason = "length" };
	CHECK(completion_format(out, m, &one, 1, usage, false, 0) == 0);
	CHECK(out->data[out->len] == '\0');
	o = must_json(out->data, out->len);
	check_answer(o, m->id, tokens, n_tokens);
	if (exact_id)
		CHECK(!strcmp(json_string_value(json_object_get(o, "id")), exact_id));
	json_decref(o);

	old = out->len;
	one.finish_reason = NULL;
	CHECK(completion_format_event(out, m, &one, NULL) == 0);
	CHECK(out->len - old > 8);
	CHECK(!memcmp(out->data + old, "data: ", 6));
	CHECK(!memcmp(out->data + out->len - 2, "\n\n", 2));
	CHECK(!memchr(out->data + old, '\n', out->len - old - 2));
	o = must_json(out->data + old + 6, out->len - old - 8);
	check_answer(o, m->id, tokens, n_tokens);
	CHECK(json_is_null(json_object_get(json_array_get(json_object_get(o, "choices"), 0),
					   "finish_reason")));
	CHECK(!json_object_get(o, "usage"));
	json_decref(o);
}

static void check_error_format(struct strbuf *out, const char *message,
			       const char *param)
{
	json_t *o;

	out->len = 0;
	CHECK(api_format_error(out, message, "invalid_request_error", param,
			       NULL) == 0);
	o = must_json(out->data, out->len);
	CHECK(json_is_object(json_object_get(o, "error")));
	json_decref(o);
}

/* A strbuf's bytes, NUL-terminated ("" when empty, never NULL). */
static const char *sb_str(const struct strbuf *sb)
{
	return sb->len ? sb->data : "";
}

/* ------------------------------------------------------------------------
 * Chat bodies
 */

/* Fields an error may name: the completion API's and chat's own. */
static const char *const chat_params[] = {
	"messages", "max_completion_tokens", "temperature", "top_p", "top_k",
	"min_p", "seed", "logit_bias", "logprobs", "top_logprobs", "n", "stop",
	"ignore_eos",
};

static bool chat_param(const char *p)
{
	for (size_t i = 0; i < sizeof(chat_params) / sizeof(chat_params[0]); i++)
		if (!strcmp(p, chat_params[i]))
			return true;
	return known_param(p);
}

/* Is p a top-level field of the body ref (an unknown or refused field
 * a 400 names, request_fields.c)? */
static bool body_field(const json_t *ref, const char *p)
{
	return json_is_object(ref) && json_object_get(ref, p) != NULL;
}

static enum chat_template chat_tmpl;	/* this input's: control bit 5 */

/* The tokenizer chat bodies are encoded with, trained once. */
static const struct text_tokenizer *chat_tokenizer(void)
{
	static struct text_tokenizer *tt;
	struct tokenizer *tok;
	struct strbuf file = STRBUF_INIT;
	char err[256];

	if (tt)
		return tt;
	CHECK(tokenizer_train(tokenizer_builtin_corpus,
			      strlen(tokenizer_builtin_corpus), 512, &file, NULL,
			      err, sizeof(err)) == 0);
	CHECK(tokenizer_load_mem(file.data, file.len, 512, "fuzz", &tok, err,
				 sizeof(err)) == 0);
	strbuf_release(&file);
	CHECK(text_tokenizer_from_llama2c(tok, &tt) == 0);
	return tt;
}

/* An answer or chunk of chat: JSON, the id as the server writes it. */
static void check_chat_json(const char *text, size_t len, const char *id)
{
	json_t *o = must_json(text, len), *got = json_object_get(o, "id");

	CHECK(json_is_string(got));
	if (!strncmp(id, COMPLETION_ID_PREFIX, strlen(COMPLETION_ID_PREFIX)))
		CHECK(!strncmp(json_string_value(got), "chat", 4) &&
		      !strcmp(json_string_value(got) + 4, id));
	else
		CHECK(!strcmp(json_string_value(got), id));
	CHECK(json_is_object(json_array_get(json_object_get(o, "choices"), 0)));
	json_decref(o);
}

static void check_chat(const struct http_message *msg,
		       const struct request_limits *lim, struct strbuf *out)
{
	struct request_limits cl = *lim;
	struct completion_request c;
	struct completion_choice one;
	struct completion_meta m = { 0 };
	struct completion_usage usage;
	const char *param = "unset";
	char err[512];
	json_t *ref;
	int rc;

	cl.tok = chat_tokenizer();
	err[0] = '\0';
	rc = chat_parse(sb_str(&msg->body), msg->body.len,
			&(struct chat_config){ .builtin = chat_tmpl, .family = -1 },
			&cl, &c,
			err, sizeof(err), &param);
	CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM);
	ref = json_loadb(sb_str(&msg->body), msg->body.len,
			 JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, NULL);
	if (rc) {
		CHECK(err[0] != '\0');
		/* a known field, or the body's own (refused) one */
		CHECK(!param || chat_param(param) || body_field(ref, param));
		if (rc == -EINVAL && !json_is_object(ref))
			CHECK(param == NULL);
		check_error_format(out, err, param);
		json_decref(ref);
		completion_request_release(&c);
		return;
	}
	CHECK(param == NULL);
	CHECK(json_is_object(ref));
	CHECK(json_array_size(json_object_get(ref, "messages")) > 0);
	CHECK(c.stream == json_is_true(json_object_get(ref, "stream")));
	json_decref(ref);
	CHECK(c.req.n_prompt > 0 && c.req.prompt[0] == TOKENIZER_BOS);
	if (chat_tmpl == CHAT_TEMPLATE_CHATML) {
		bool found = false;

		for (uint32_t i = 0; i < c.req.n_stop_strs; i++)
			found |= !strcmp(c.req.stop_strs[i], CHAT_CHATML_END);
		CHECK(found);
	}

	m.created = msg->body.len;
	m.id = c.req.id ? c.req.id : "cmpl-fuzz";
	m.model = "sim";
	usage = (struct completion_usage){ c.req.n_prompt, c.req.max_tokens };
	/* the body's bytes as the answer's text: any bytes, still JSON */
	one = (struct completion_choice){ .text = sb_str(&msg->body),
		.text_len = msg->body.len, .tokens = c.req.prompt,
		.n_tokens = c.req.n_prompt, .finish_reason = "stop" };
	out->len = 0;
	CHECK(chat_format(out, &m, &one, 1, &usage, true, 1) == 0);
	check_chat_json(out->data, out->len, m.id);
	for (int kind = CHAT_CHUNK_ROLE; kind <= CHAT_CHUNK_FINISH; kind++) {
		out->len = 0;
		CHECK(chat_format_chunk(out, &m, (enum chat_chunk)kind, &one,
					kind == CHAT_CHUNK_FINISH ? &usage : NULL) == 0);
		CHECK(out->len > 8 && !memcmp(out->data, "data: ", 6));
		CHECK(!memcmp(out->data + out->len - 2, "\n\n", 2));
		CHECK(!memchr(out->data, '\n', out->len - 2));
		check_chat_json(out->data + 6, out->len - 8, m.id);
	}
	completion_request_release(&c);
}

/* One complete request: its body through the completion API. */
static void check_request(const struct http_message *msg,
			  const struct request_limits *lim, struct strbuf *out)
{
	struct completion_request c;
	struct completion_usage usage;
	struct completion_meta m = { 0 };
	const char *param = "unset";
	char err[256];
	uint64_t n_stop = 0;
	json_t *ref;
	int rc;

	check_chat(msg, lim, out);
	err[0] = '\0';
	rc = completion_parse(sb_str(&msg->body), msg->body.len, lim, &c, err,
			      sizeof(err), &param);
	CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM);
	ref = json_loadb(sb_str(&msg->body), msg->body.len,
			 JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, NULL);
	if (rc) {
		CHECK(err[0] != '\0');
		CHECK(!param || known_param(param) || body_field(ref, param));
		/* Not a JSON object: no field to name. */
		if (rc == -EINVAL && !json_is_object(ref))
			CHECK(param == NULL);
		check_error_format(out, err, param);
		json_decref(ref);
		completion_request_release(&c);
		return;
	}
	CHECK(param == NULL);
	CHECK(json_is_object(ref));
	CHECK(c.stream == json_is_true(json_object_get(ref, "stream")));
	json_decref(ref);
	CHECK((uint64_t)c.req.n_prompt + c.req.max_tokens <= lim->max_context);

	usage.prompt_tokens = c.req.n_prompt;
	usage.completion_tokens = c.req.max_tokens;
	m.created = msg->body.len;
	m.id = c.req.id ? c.req.id : "cmpl-fuzz";
	m.model = msg->authorization.len ? msg->authorization.data : "sim";
	/* jansson gave the id, so it is valid UTF-8 and must read back as is. */
	check_formats(out, &m, m.id, c.req.prompt, c.req.n_prompt, &usage);
	for (uint32_t i = 0; i < c.req.n_stop_seqs; i++)
		n_stop += c.req.stop_lens[i];
	if (n_stop)
		check_formats(out, &m, m.id, c.req.stop_tokens, (uint32_t)n_stop,
			      NULL);

	/* Raw header bytes as id and model: any bytes, still JSON. */
	m.id = sb_str(&msg->target);
	m.model = sb_str(&msg->authorization);
	check_formats(out, &m, NULL, c.req.prompt, c.req.n_prompt, &usage);
	completion_request_release(&c);
}

/* ------------------------------------------------------------------------
 * Reading the connection
 */

enum piece_mode { PIECE_ALL, PIECE_BYTE, PIECE_SMALL, PIECE_RANDOM };

static size_t next_piece(enum piece_mode mode, struct rng *rng, size_t left)
{
	size_t n;

	switch (mode) {
	case PIECE_ALL:
		n = left;
		break;
	case PIECE_BYTE:
		n = 1;
		break;
	case PIECE_SMALL:
		n = 1 + rng_below(rng, 16);
		break;
	default:
		n = 1 + rng_below(rng, left);
		break;
	}
	return n < left ? n : left;
}

/* Append what the server acts on in msg to log, to compare two reads. */
static void log_message(struct strbuf *log, const struct http_message *msg)
{
	CHECK(strbuf_printf(log, "[%u %d %d %zu %zu %zu]", msg->method,
			    msg->keep_alive, msg->expect_continue,
			    msg->target.len, msg->body.len,
			    msg->authorization.len) == 0);
	CHECK(strbuf_append(log, sb_str(&msg->target), msg->target.len) == 0);
	CHECK(strbuf_append(log, sb_str(&msg->body), msg->body.len) == 0);
	CHECK(strbuf_append(log, sb_str(&msg->authorization),
			    msg->authorization.len) == 0);
}

/*
 * Read data[0..size) arriving in pieces as mode says, the way the server
 * does (reset after each DONE and feed the rest again).  Logs each request
 * and ends the log with "E" after an error; with check_body, every request
 * also goes through check_request().
 */
static void read_connection(const uint8_t *data, size_t size,
			    const struct http_limits *hl,
			    const struct request_limits *rl,
			    enum piece_mode mode, struct rng *rng,
			    bool check_body, struct strbuf *log,
			    struct strbuf *out)
{
	const char *text = (const char *)data;
	struct http_reader r;
	size_t off = 0, avail = 0, used;
	unsigned n_hdr = 0;
	enum http_read_status st;

	http_reader_init(&r, hl);
	while (avail < size) {
		avail += next_piece(mode, rng, size - avail);
		for (;;) {
			used = SIZE_MAX;
			st = http_reader_feed(&r, text + off, avail - off, &used);
			CHECK(used <= avail - off);
			off += used;
			if (st == HTTP_READ_ERROR) {
				CHECK(r.error_status >= 400 && r.error_status < 600);
				CHECK(r.error[0] != '\0');
				CHECK(http_reader_feed(&r, text, size, &used) ==
				      HTTP_READ_ERROR && used == 0);
				if (check_body)
					check_error_format(out, r.error, NULL);
				CHECK(strbuf_append(log, "E", 1) == 0);
				goto out;
			}
			if (st == HTTP_READ_DONE) {
				CHECK(n_hdr <= 1);
				CHECK(r.msg.body.len <= hl->max_body);
				CHECK(r.msg.target.len <= hl->max_header_bytes);
				CHECK(r.msg.authorization.len <= hl->max_header_bytes);
				log_message(log, &r.msg);
				if (check_body)
					check_request(&r.msg, rl, out);
				n_hdr = 0;
				http_reader_reset(&r);
				continue;
			}
			CHECK(st == HTTP_READ_MORE || st == HTTP_READ_HEADERS);
			CHECK(off == avail);
			n_hdr += st == HTTP_READ_HEADERS;
			break;
		}
	}
out:
	http_reader_release(&r);
}

static void pick_http_limits(unsigned ctl, struct rng *rng,
			     struct http_limits *hl)
{
	switch ((ctl >> 2) & 3) {
	case 0:
		*hl = (struct http_limits){ 8192, 64, 1 << 20 };
		break;
	case 1:
		*hl = (struct http_limits){ 64, 4, 16 };
		break;
	case 2:
		*hl = (struct http_limits){ 512, 16, 256 };
		break;
	default:
		hl->max_header_bytes = (uint32_t)rng_below(rng, 2048);
		hl->max_headers = (uint32_t)rng_below(rng, 32);
		hl->max_body = (uint32_t)rng_below(rng, 2048);
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct request_limits rl_small = {
		.vocab = 1000, .max_context = 512, .id_optional = true,
	};
	static const struct request_limits rl_large = {
		.vocab = 1u << 31, .max_context = UINT32_MAX, .id_optional = true,
	};
	struct strbuf log_pieces = STRBUF_INIT, log_whole = STRBUF_INIT;
	struct strbuf out = STRBUF_INIT;
	struct rng rng = rng_for(data, size);
	struct http_limits hl;
	unsigned ctl;

	if (size < 1)
		return 0;
	ctl = data[0];
	chat_tmpl = ctl & 32 ? CHAT_TEMPLATE_CHATML : CHAT_TEMPLATE_LLAMA2;
	pick_http_limits(ctl, &rng, &hl);
	read_connection(data + 1, size - 1, &hl, ctl & 16 ? &rl_large : &rl_small,
			(enum piece_mode)(ctl & 3), &rng, true, &log_pieces, &out);
	read_connection(data + 1, size - 1, &hl, NULL, PIECE_ALL, NULL, false,
			&log_whole, &out);
	if (log_pieces.len != log_whole.len ||
	    memcmp(sb_str(&log_pieces), sb_str(&log_whole), log_pieces.len)) {
		fprintf(stderr, "pieces (mode %u) and one piece read differently:\n"
			"%.*s\n---\n%.*s\n", ctl & 3,
			(int)(log_pieces.len < 600 ? log_pieces.len : 600),
			sb_str(&log_pieces),
			(int)(log_whole.len < 600 ? log_whole.len : 600),
			sb_str(&log_whole));
		abort();
	}
	strbuf_release(&log_pieces);
	strbuf_release(&log_whole);
	strbuf_release(&out);
	return 0;
}
