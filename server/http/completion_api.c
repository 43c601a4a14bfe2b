/*
 * completion_api.c - see completion_api.h.
 *
 * The docs/DESIGN.md 3.1 fields are validated by request_parse(), so a body
 * is judged by exactly the rules a JSON Lines request is; this file adds
 * the HTTP-only fields.  The body is therefore parsed twice (once here for
 * "stream" and "model", once by request_parse); bodies are small and the
 * second parse is what keeps one set of rules.
 *
 * OpenAI's errors name the offending field in "param".  request_parse()
 * names the field in its message ("field 'max_tokens' must be ...",
 * "prompt[3]: token ..."), so param is the first known field name that
 * appears there as a whole word.
 */
#include "server/http/completion_api.h"
#include "server/http/chat_tools.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "util/json_writer.h"
#include "text/text_tokenizer.h"
#include "server/request/request_fields.h"
#include "server/request/request_json.h"

static bool is_ident(char c)
{
	return isalnum((unsigned char)c) || c == '_';
}

/* The field of the table named first in msg, as a whole word; NULL if none. */
static const char *field_named_in(const char *msg)
{
	const char *best = NULL, *best_at = NULL;

	const char *name;

	for (size_t i = 0; (name = request_field_name(i)); i++) {
		size_t n = strlen(name);

		for (const char *at = strstr(msg, name); at;
		     at = strstr(at + 1, name)) {
			if ((at > msg && is_ident(at[-1])) || is_ident(at[n]))
				continue;
			if (!best_at || at < best_at) {
				best_at = at;
				best = name;
			}
			break;
		}
	}
	return best;
}

static int body_error(char *err, size_t err_len, const char **param,
		      const char *field, const char *msg)
{
	snprintf(err, err_len, "%s", msg);
	*param = field;
	return -EINVAL;
}

/*
 * "stream_options": {"include_usage": bool, "include_obfuscation": bool},
 * with "stream": true only (as vLLM; OpenAI says to set it only then).
 * Obfuscation (random padding against length side channels) is not
 * done, so only false is taken.
 */
static int parse_stream_options(const json_t *v, struct completion_request *out,
				 char *err, size_t err_len, const char **param)
{
	const json_t *u, *o;
	const char *key;
	json_t *m;

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v))
		return body_error(err, err_len, param, "stream_options", "field "
				  "'stream_options' must be an object");
	if (!out->stream)
		return body_error(err, err_len, param, "stream_options", "field "
				  "'stream_options' goes with \"stream\": true");
	json_object_foreach((json_t *)v, key, m)
		if (strcmp(key, "include_usage") && strcmp(key, "include_obfuscation"))
			return body_error(err, err_len, param, "stream_options",
					  "stream_options: unknown member (it takes "
					  "include_usage and include_obfuscation)");
	u = json_object_get(v, "include_usage");
	o = json_object_get(v, "include_obfuscation");
	if ((u && !json_is_null(u) && !json_is_boolean(u)) ||
	    (o && !json_is_null(o) && !json_is_boolean(o)))
		return body_error(err, err_len, param, "stream_options",
				  "stream_options: include_usage and "
				  "include_obfuscation must be true or false");
	if (json_is_true(o))
		return body_error(err, err_len, param, "stream_options",
				  "stream_options.include_obfuscation is not "
				  "implemented by this server: only false is taken");
	out->include_usage = json_is_true(u);
	return 0;
}

/* The HTTP-only fields: stream, model and stream_options.  *is_json says whether the
 * body parsed as JSON at all. */
static int parse_http_fields(const char *body, size_t len,
			     struct completion_request *out, char *err,
			     size_t err_len, const char **param, bool *is_json)
{
	json_error_t jerr;
	json_t *obj, *v;
	int rc = 0;

	obj = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY |
			 JSON_ALLOW_NUL, &jerr);
	*is_json = obj != NULL;
	if (!obj)	/* request_parse() words the syntax error */
		return 0;
	if (!json_is_object(obj))
		goto out;
	rc = request_fields_check(obj, REQUEST_API_COMPLETIONS, err, err_len,
				  out->param, sizeof(out->param));
	if (rc) {
		*param = out->param;
		goto out;
	}
	v = json_object_get(obj, "stream");
	if (v && !json_is_null(v)) {
		if (!json_is_boolean(v)) {
			rc = body_error(err, err_len, param, "stream",
					"field 'stream' must be true or false");
			goto out;
		}
		out->stream = json_is_true(v);
	}
	v = json_object_get(obj, "model");
	if (v && !json_is_null(v) && !json_is_string(v)) {
		rc = body_error(err, err_len, param, "model",
				"field 'model' must be a string");
		goto out;
	}
	if (json_is_string(v) && strlen(json_string_value(v)) != json_string_length(v)) {
		rc = body_error(err, err_len, param, "model",
				"field 'model' must not contain a NUL character");
		goto out;
	}
	/* the server judges the name (404 for one it does not serve) */
	if (json_is_string(v) && !(out->model = strndup(json_string_value(v),
							 json_string_length(v)))) {
		rc = -ENOMEM;
		goto out;
	}
	rc = parse_stream_options(json_object_get(obj, "stream_options"), out,
				  err, err_len, param);
	if (rc)
		goto out;
	/* the table checked its type: true or false */
	if (json_is_true(json_object_get(obj, "echo"))) {
		v = json_object_get(obj, "prompt");
		/* a string prompt is echoed as given; ids once decoded */
		out->echo = json_is_string(v) ?
			    malloc(json_string_length(v) + 1) : strdup("");
		if (!out->echo) {
			rc = -ENOMEM;
			goto out;
		}
		if (json_is_string(v)) {
			out->echo_len = json_string_length(v);
			memcpy(out->echo, json_string_value(v), out->echo_len);
		}
		out->echo_from_ids = !json_is_string(v);
	}
out:
	json_decref(obj);
	return rc;
}

/* A body refused after request_parse() took it (field: msg): -EINVAL,
 * the request emptied as on any other error but its id kept for the
 * error answer. */
static int refuse_parsed(struct completion_request *out, char *err,
			 size_t err_len, const char **param, const char *field,
			 const char *msg)
{
	char *id = out->req.id;

	out->req.id = NULL;
	request_release(&out->req);
	out->req.id = id;
	return body_error(err, err_len, param, field, msg);
}

/*
 * The text of a token-id prompt, as /detokenize writes it: each piece
 * after the token before, end tokens (BOS) none.  Into c->echo.
 * 0 or -ENOMEM.
 */
static int decode_prompt(const struct text_tokenizer *tok,
			 struct completion_request *c)
{
	const struct request *r = &c->req;
	size_t cap = 0, len, n = 0;
	int32_t prev = -1;
	const char *piece;
	char *buf;

	for (uint32_t i = 0; i < r->n_prompt; i++)
		if (!text_tokenizer_ends(tok, r->prompt[i]) &&
		    text_tokenizer_piece(tok, prev, r->prompt[i], &len))
			cap += len;	/* prev only strips a space: an upper bound */
	buf = malloc(cap + 1);
	if (!buf)
		return -ENOMEM;
	for (uint32_t i = 0; i < r->n_prompt; prev = r->prompt[i++]) {
		/* BOS writes nothing, but the piece after it knows it */
		if (text_tokenizer_ends(tok, r->prompt[i]))
			continue;
		piece = text_tokenizer_piece(tok, prev, r->prompt[i], &len);
		if (!piece || n + len > cap)
			continue;
		memcpy(buf + n, piece, len);
		n += len;
	}
	free(c->echo);
	c->echo = buf;
	c->echo_len = n;
	return 0;
}

/* echo's rules, once request_parse() took the body. */
static int check_echo(const struct request_limits *lim,
		      struct completion_request *out, char *err,
		      size_t err_len, const char **param)
{
	if (!out->echo)
		return 0;
	if (out->req.sampling.logprobs)
		return refuse_parsed(out, err, err_len, param, "echo", "field "
				     "'echo' with 'logprobs' needs the prompt's "
				     "logprobs, which this server does not compute: "
				     "ask for one or the other");
	if (!lim->tok)
		return refuse_parsed(out, err, err_len, param, "echo", "field "
				     "'echo' needs a tokenizer to write the prompt's "
				     "text, and this server has none (--tokenizer)");
	return out->echo_from_ids ? decode_prompt(lim->tok, out) : 0;
}

int completion_parse(const char *body, size_t len,
		     const struct request_limits *lim,
		     struct completion_request *out, char *err, size_t err_len,
		     const char **param)
{
	struct request_limits l = *lim;
	bool is_json;
	int rc;

	memset(out, 0, sizeof(*out));
	*param = NULL;
	l.api = REQUEST_API_COMPLETIONS;
	rc = parse_http_fields(body, len, out, err, err_len, param, &is_json);
	if (rc)
		return rc;
	rc = request_parse(body, len, 0, &l, &out->req, err, err_len);
	/* A syntax error quotes the body ("near 'prompt'"), not a field. */
	if (rc == -EINVAL && is_json)
		*param = field_named_in(err);
	if (!rc && out->req.id && !strncmp(out->req.id, COMPLETION_ID_PREFIX,
					   strlen(COMPLETION_ID_PREFIX)))
		rc = refuse_parsed(out, err, err_len, param, "id", "field 'id' must "
				   "not start with '" COMPLETION_ID_PREFIX "': such ids "
				   "are the ones the server gives requests sent "
				   "without an id");
	/* a `run` line may be empty (a model that can, continues nothing);
	 * OpenAI's API needs a token, and a client must not retry this */
	if (!rc && !out->req.n_prompt)
		rc = refuse_parsed(out, err, err_len, param, "prompt", "field "
				   "'prompt' is empty: a completion continues at "
				   "least one token");
	if (!rc)
		rc = check_echo(lim, out, err, err_len, param);
	return rc;
}

void completion_request_release(struct completion_request *c)
{
	request_release(&c->req);
	free(c->model);
	c->model = NULL;
	free(c->echo);
	c->echo = NULL;
	chat_tools_free(c->tools);
	c->tools = NULL;
}


/* The completions shape: its fixed text, per choice, per token id, and
 * per logprob entry (two numbers and separators; the names are
 * logprob_entry_bound()'s). */
static const struct answer_sizes completion_sizes = {
	.fixed = 384, .per_choice = 160, .per_token = JSON_TOKEN_MAX,
	.per_logprob = 64,
};

size_t completion_answer_bound(const struct completion_meta *m,
			       const struct completion_choice *choices,
			       uint32_t n, const struct answer_sizes *sz)
{
	size_t b_id = json_str_bound(m->id), b_model = json_str_bound(m->model);
	size_t need;

	if (b_id == SIZE_MAX || b_model == SIZE_MAX)
		return SIZE_MAX;
	need = sz->fixed + b_id + b_model;
	for (uint32_t i = 0; i < n; i++) {
		size_t b_fr = json_str_bound(choices[i].finish_reason);
		size_t b_text = json_strn_bound(choices[i].text_len +
						choices[i].prefix_len);

		if (b_fr == SIZE_MAX || b_text == SIZE_MAX)
			return SIZE_MAX;
		need += sz->per_choice + b_fr + b_text +
			(size_t)choices[i].n_tokens * sz->per_token;
		if (choices[i].logprobs)
			need += (size_t)choices[i].n_tokens *
				(choices[i].logprob_stride + 1) *
				(sz->per_logprob +
				 logprob_entry_bound(choices[i].lp.tok));
	}
	return need;
}

char *completion_put_usage(char *p, const struct completion_meta *m,
			   const struct completion_usage *usage)
{
	if (!usage)
		return m->usage_null ? JSON_PUT_LIT(p, ",\"usage\":null") : p;
	p = JSON_PUT_LIT(p, ",\"usage\":{\"prompt_tokens\":");
	p = json_put_u64(p, usage->prompt_tokens);
	p = JSON_PUT_LIT(p, ",\"completion_tokens\":");
	p = json_put_u64(p, usage->completion_tokens);
	p = JSON_PUT_LIT(p, ",\"total_tokens\":");
	p = json_put_u64(p, (uint64_t)usage->prompt_tokens +
			 usage->completion_tokens);
	*p++ = '}';
	return p;
}

static char *put_float(char *p, float v)
{
	/* 9 significant digits: the float exactly */
	return p + snprintf(p, 24, "%.9g", (double)v);
}

/* "logprobs":{...} of one choice (see completion_api.h).  Each list
 * walks the tokens again from c->lp: a token's text depends on the one
 * before it. */
static char *put_logprobs(char *p, const struct completion_choice *c)
{
	const struct sampler_logprob *e;
	struct logprob_token t, alt;
	struct logprob_ctx cx = c->lp;

	p = JSON_PUT_LIT(p, "\"logprobs\":{\"tokens\":[");
	for (uint32_t i = 0; i < c->n_tokens; i++) {
		if (i)
			*p++ = ',';
		logprob_token_of(&cx, cx.prev_token, c->tokens[i], &t);
		p = logprob_put_name(p, &cx, c->tokens[i], &t);
		logprob_ctx_advance(&cx, c->tokens + i, 1);
	}
	p = JSON_PUT_LIT(p, "],\"token_logprobs\":[");
	for (uint32_t i = 0; i < c->n_tokens; i++) {
		if (i)
			*p++ = ',';
		p = put_float(p, c->logprobs[(size_t)i * c->logprob_stride].logprob);
	}
	p = JSON_PUT_LIT(p, "],\"top_logprobs\":[");
	cx = c->lp;
	for (uint32_t i = 0; i < c->n_tokens; i++) {
		e = c->logprobs + (size_t)i * c->logprob_stride;
		if (i)
			*p++ = ',';
		*p++ = '{';
		/* the alternatives follow the same token the chosen one does */
		for (uint32_t j = 1; j < c->logprob_stride && e[j].token >= 0; j++) {
			if (j > 1)
				*p++ = ',';
			logprob_token_of(&cx, cx.prev_token, e[j].token, &alt);
			p = logprob_put_name(p, &cx, e[j].token, &alt);
			*p++ = ':';
			p = put_float(p, e[j].logprob);
		}
		*p++ = '}';
		logprob_ctx_advance(&cx, c->tokens + i, 1);
	}
	p = JSON_PUT_LIT(p, "],\"text_offset\":[");
	cx = c->lp;
	for (uint32_t i = 0; i < c->n_tokens; i++) {
		if (i)
			*p++ = ',';
		p = json_put_u64(p, cx.text_offset);
		logprob_ctx_advance(&cx, c->tokens + i, 1);
	}
	return JSON_PUT_LIT(p, "]}");
}

/* The prefix (echo) and the text as one JSON string. */
static char *put_text(char *p, const struct completion_choice *c)
{
	char *second;

	if (!c->prefix_len)
		return json_put_strn(p, c->text ? c->text : "",
				     c->text ? c->text_len : 0);
	/* the prefix's string without its closing quote, then the text's
	 * without its opening one (the prefix is whole text: no character
	 * is cut between the two) */
	p = json_put_strn(p, c->prefix, c->prefix_len) - 1;
	second = p;
	p = json_put_strn(p, c->text ? c->text : "", c->text ? c->text_len : 0);
	memmove(second, second + 1, (size_t)(p - second - 1));
	return p - 1;
}

static char *put_choice(char *p, const struct completion_choice *c)
{
	p = JSON_PUT_LIT(p, "{\"index\":");
	p = json_put_u64(p, c->index);
	p = JSON_PUT_LIT(p, ",\"text\":");
	p = put_text(p, c);
	p = JSON_PUT_LIT(p, ",\"token_ids\":[");
	for (uint32_t i = 0; i < c->n_tokens; i++) {
		if (i)
			*p++ = ',';
		p = json_put_i32(p, c->tokens[i]);
	}
	p = JSON_PUT_LIT(p, "],\"finish_reason\":");
	p = json_put_str(p, c->finish_reason);
	*p++ = ',';
	if (c->logprobs)
		p = put_logprobs(p, c);
	else
		p = JSON_PUT_LIT(p, "\"logprobs\":null");
	*p++ = '}';
	return p;
}

/* The object both answer shapes share, up to and excluding its last '}'. */
static char *put_answer(char *p, const struct completion_meta *m,
			const struct completion_choice *choices, uint32_t n,
			const struct completion_usage *usage)
{
	p = JSON_PUT_LIT(p, "{\"id\":");
	p = json_put_str(p, m->id);
	p = JSON_PUT_LIT(p, ",\"object\":\"text_completion\",\"created\":");
	p = json_put_u64(p, m->created);
	p = JSON_PUT_LIT(p, ",\"model\":");
	p = json_put_str(p, m->model);
	p = JSON_PUT_LIT(p, ",\"choices\":[");
	for (uint32_t i = 0; i < n; i++) {
		if (i)
			*p++ = ',';
		p = put_choice(p, &choices[i]);
	}
	*p++ = ']';
	return completion_put_usage(p, m, usage);
}

int completion_format(struct strbuf *out, const struct completion_meta *m,
		      const struct completion_choice *choices,
		      uint32_t n_choices, const struct completion_usage *usage,
		      bool has_seed, uint64_t seed)
{
	size_t need = completion_answer_bound(m, choices, n_choices, &completion_sizes);
	char *p;

	if (need == SIZE_MAX || strbuf_reserve(out, need))
		return -ENOMEM;
	p = out->data + out->len;
	p = put_answer(p, m, choices, n_choices, usage);
	if (has_seed) {
		p = JSON_PUT_LIT(p, ",\"seed\":");
		p = json_put_u64(p, seed);
	}
	*p++ = '}';
	*p = '\0';
	out->len = (size_t)(p - out->data);
	return 0;
}

char *api_event_open(struct strbuf *out, size_t need)
{
	if (need == SIZE_MAX || need > SIZE_MAX - 16 || strbuf_reserve(out, need + 16))
		return NULL;
	return JSON_PUT_LIT(out->data + out->len, "data: ");
}

void api_event_close(struct strbuf *out, char *p)
{
	p = JSON_PUT_LIT(p, "\n\n");
	*p = '\0';
	out->len = (size_t)(p - out->data);
}

int completion_format_event(struct strbuf *out, const struct completion_meta *m,
			    const struct completion_choice *choice,
			    const struct completion_usage *usage)
{
	char *p = api_event_open(out, completion_answer_bound(m, choice, 1,
							       &completion_sizes));

	if (!p)
		return -ENOMEM;
	p = put_answer(p, m, choice, 1, usage);
	*p++ = '}';
	api_event_close(out, p);
	return 0;
}

int completion_format_usage_event(struct strbuf *out,
				  const struct completion_meta *m,
				  const struct completion_usage *usage)
{
	char *p = api_event_open(out, completion_answer_bound(m, NULL, 0,
							       &completion_sizes));

	if (!p)
		return -ENOMEM;
	p = put_answer(p, m, NULL, 0, usage);
	*p++ = '}';
	api_event_close(out, p);
	return 0;
}

int api_format_error(struct strbuf *out, const char *message, const char *type,
		     const char *param, const char *code)
{
	size_t b_msg = json_str_bound(message), b_type = json_str_bound(type);
	size_t b_param = json_str_bound(param), b_code = json_str_bound(code);
	char *p;

	if (b_msg == SIZE_MAX || b_type == SIZE_MAX || b_param == SIZE_MAX ||
	    b_code == SIZE_MAX ||
	    strbuf_reserve(out, 64 + b_msg + b_type + b_param + b_code))
		return -ENOMEM;
	p = out->data + out->len;
	p = JSON_PUT_LIT(p, "{\"error\":{\"message\":");
	p = json_put_str(p, message);
	p = JSON_PUT_LIT(p, ",\"type\":");
	p = json_put_str(p, type);
	p = JSON_PUT_LIT(p, ",\"param\":");
	p = json_put_str(p, param);
	p = JSON_PUT_LIT(p, ",\"code\":");
	p = json_put_str(p, code);
	p = JSON_PUT_LIT(p, "}}");
	*p = '\0';
	out->len = (size_t)(p - out->data);
	return 0;
}
