/*
 * completion_api.c - see completion_api.h.
 *
 * The docs/DESIGN.md 3.1 fields are validated by request_parse(), so a body
 * is judged by exactly the rules a JSON Lines request is; this file adds
 * the HTTP-only fields.  The body is therefore parsed twice (once here for
 * "stream" and "model", once by request_parse); bodies are small and the
 * second parse is what keeps one set of rules.
 *
 * A batch prompt ("prompt": a list of strings or of token lists) is
 * parsed one prompt at a time: the body is written again with that
 * prompt alone and handed to request_parse(), so every prompt is judged
 * by the one set of rules, and an error of prompt i (any error but the
 * other fields' of prompt 0, which all prompts share) is prefixed
 * "prompt i of the batch: ".  The number of prompts x choices is checked
 * first, so a long list costs nothing before it is refused.
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

/* The HTTP-only fields: stream, model and stream_options.  *objp is the
 * body parsed (NULL when it is no JSON: request_parse() words that);
 * the caller frees it. */
static int parse_http_fields(const char *body, size_t len,
			     struct completion_request *out, char *err,
			     size_t err_len, const char **param, json_t **objp)
{
	json_error_t jerr;
	json_t *obj, *v;
	int rc;

	obj = *objp = json_loadb(body, len, JSON_REJECT_DUPLICATES |
				 JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
	if (!obj || !json_is_object(obj))
		return 0;
	rc = request_fields_check(obj, REQUEST_API_COMPLETIONS, err, err_len,
				  out->param, sizeof(out->param));
	if (rc) {
		*param = out->param;
		return rc;
	}
	v = json_object_get(obj, "stream");
	if (v && !json_is_null(v)) {
		if (!json_is_boolean(v))
			return body_error(err, err_len, param, "stream",
					  "field 'stream' must be true or false");
		out->stream = json_is_true(v);
	}
	v = json_object_get(obj, "model");
	if (v && !json_is_null(v) && !json_is_string(v))
		return body_error(err, err_len, param, "model",
				  "field 'model' must be a string");
	if (json_is_string(v) && strlen(json_string_value(v)) != json_string_length(v))
		return body_error(err, err_len, param, "model",
				  "field 'model' must not contain a NUL character");
	/* the server judges the name (404 for one it does not serve) */
	if (json_is_string(v) && !(out->model = strndup(json_string_value(v),
							 json_string_length(v))))
		return -ENOMEM;
	return parse_stream_options(json_object_get(obj, "stream_options"), out,
				    err, err_len, param);
}

/*
 * The text of a token-id prompt r, as /detokenize writes it: each piece
 * after the token before, end tokens (BOS) none.  Into *echo (malloc'd,
 * *echo_len bytes).  0 or -ENOMEM.
 */
static int decode_prompt(const struct text_tokenizer *tok,
			 const struct request *r, char **echo, size_t *echo_len)
{
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
	*echo = buf;
	*echo_len = n;
	return 0;
}

/*
 * echo's rules, once request_parse() took one prompt v into *req: its
 * text (v as given, or its ids decoded) into *echo, *echo_len.  0,
 * -EINVAL (err, *param) or -ENOMEM.
 */
static int check_echo(const struct request_limits *lim, const json_t *v,
		      const struct request *req, char **echo, size_t *echo_len,
		      char *err, size_t err_len, const char **param)
{
	if (req->sampling.logprobs)
		return body_error(err, err_len, param, "echo", "field 'echo' "
				  "with 'logprobs' needs the prompt's logprobs, "
				  "which this server does not compute: ask for "
				  "one or the other");
	if (!lim->tok)
		return body_error(err, err_len, param, "echo", "field 'echo' "
				  "needs a tokenizer to write the prompt's text, "
				  "and this server has none (--tokenizer)");
	if (!json_is_string(v))
		return decode_prompt(lim->tok, req, echo, echo_len);
	*echo = malloc(json_string_length(v) + 1);
	if (!*echo)
		return -ENOMEM;
	*echo_len = json_string_length(v);
	memcpy(*echo, json_string_value(v), *echo_len);
	return 0;
}

/* Empty req but keep its id, for the error answer. */
static void keep_only_id(struct request *req)
{
	char *id = req->id;

	req->id = NULL;
	request_release(req);
	req->id = id;
}

/*
 * One prompt's body (len bytes; the prompt is v, NULL when the body is
 * no object) into *req and, with echo, *echo: request_parse()'s rules
 * and the completions API's own (an id the server's, an empty prompt).
 * 0, -EINVAL (err, *param) or -ENOMEM; req keeps only its id on error.
 */
static int parse_one(const char *body, size_t len, const struct request_limits *l,
		     const json_t *v, bool echo, struct request *req,
		     char **echo_text, size_t *echo_len, char *err,
		     size_t err_len, const char **param)
{
	int rc = request_parse(body, len, 0, l, req, err, err_len);

	if (rc == -EINVAL && v)
		*param = field_named_in(err);
	if (rc)
		return rc;
	if (req->id && !strncmp(req->id, COMPLETION_ID_PREFIX,
				strlen(COMPLETION_ID_PREFIX)))
		rc = body_error(err, err_len, param, "id", "field 'id' must "
				"not start with '" COMPLETION_ID_PREFIX "': such ids "
				"are the ones the server gives requests sent "
				"without an id");
	/* a `run` line may be empty (a model that can, continues nothing);
	 * OpenAI's API needs a token, and a client must not retry this */
	else if (!req->n_prompt)
		rc = body_error(err, err_len, param, "prompt", "field "
				"'prompt' is empty: a completion continues at "
				"least one token");
	else if (echo)
		rc = check_echo(l, v, req, echo_text, echo_len, err, err_len, param);
	if (rc)
		keep_only_id(req);
	return rc;
}

/* Is the prompt v a batch: a list of strings or of token lists? */
static bool is_batch(const json_t *v)
{
	const json_t *first = json_array_get(v, 0);

	return json_is_string(first) || json_is_array(first);
}

/* The body obj with prompt i of the batch as its prompt, parsed into
 * out's prompt i.  Errors name the prompt's index. */
static int parse_batch_prompt(json_t *obj, json_t *batch, uint32_t i,
			      const struct request_limits *l, bool echo,
			      struct completion_request *out, char *err,
			      size_t err_len, const char **param)
{
	json_t *v = json_array_get(batch, i);
	struct completion_prompt *p = i ? &out->more[i - 1] : NULL;
	struct request *req = p ? &p->req : &out->req;
	char why[448], *dumped;
	int rc;

	if ((!json_is_string(v) && !json_is_array(v)) ||
	    json_is_string(v) != json_is_string(json_array_get(batch, 0))) {
		snprintf(err, err_len, "field 'prompt': a batch is a list of "
			 "strings or one of token lists, and its item %u is %s",
			 i, request_json_kind(v));
		*param = "prompt";
		return -EINVAL;
	}
	if (json_object_set(obj, "prompt", v) ||
	    !(dumped = json_dumps(obj, JSON_COMPACT)))
		return -ENOMEM;
	rc = parse_one(dumped, strlen(dumped), l, v, echo, req,
		       p ? &p->echo : &out->echo, p ? &p->echo_len : &out->echo_len,
		       why, sizeof(why), param);
	free(dumped);
	/* the other fields are prompt 0's: only its errors may be theirs */
	if (rc == -EINVAL && (i || (*param && !strcmp(*param, "prompt")))) {
		snprintf(err, err_len, "prompt %u of the batch: %s", i, why);
		*param = "prompt";
	} else if (rc == -EINVAL) {
		snprintf(err, err_len, "%s", why);
	}
	return rc;
}

/* The most prompts x candidates one request's choices hold. */
static int batch_fits(const json_t *obj, size_t n_prompts, char *err,
		      size_t err_len, const char **param)
{
	const json_t *n = json_object_get(obj, "n");
	const json_t *b = json_object_get(obj, "best_of");
	json_int_t per = json_is_integer(n) ? json_integer_value(n) : 1;

	if (json_is_integer(b) && json_integer_value(b) > per)
		per = json_integer_value(b);
	if (per < 1 || per > REQUEST_MAX_CHOICES)
		return 0;	/* request_parse() or best_of's rules word it */
	if (n_prompts <= REQUEST_MAX_CHOICES / (size_t)per)
		return 0;
	snprintf(err, err_len, "field 'prompt': a batch of %zu prompts x %lld "
		 "choices each (n, or best_of) is more than the %u choices one "
		 "request may have", n_prompts, (long long)per,
		 REQUEST_MAX_CHOICES);
	*param = "prompt";
	return -EINVAL;
}

/* Every prompt of the batch ("prompt": a list) in obj, all or none. */
static int parse_batch(json_t *obj, const struct request_limits *l, bool echo,
		       struct completion_request *out, char *err,
		       size_t err_len, const char **param)
{
	json_t *batch = json_incref(json_object_get(obj, "prompt"));
	size_t n = json_array_size(batch);
	int rc = batch_fits(obj, n, err, err_len, param);

	if (rc)
		goto out;
	rc = -ENOMEM;
	if (n > 1 && !(out->more = calloc(n - 1, sizeof(*out->more))))
		goto out;
	out->n_prompts = (uint32_t)n;
	for (uint32_t i = 0; i < n; i++) {
		rc = parse_batch_prompt(obj, batch, i, l, echo, out, err,
					err_len, param);
		if (rc)
			goto out;
	}
out:
	/* back as given: obj is read again for best_of */
	if (json_object_set(obj, "prompt", batch))
		rc = -ENOMEM;
	json_decref(batch);
	return rc;
}

/*
 * "best_of" (obj's, null or absent: n): best_of candidates per prompt,
 * of which the n with the highest cumulative logprob are answered
 * (completion_rank()).  The candidates are the request's choices, so
 * each prompt's n_choices becomes best_of; their logprobs are asked for
 * (hidden from the answer when the client did not ask).
 */
static int parse_best_of(const json_t *obj, const struct request_limits *lim,
			 struct completion_request *out, char *err,
			 size_t err_len, const char **param)
{
	const json_t *v = json_object_get(obj, "best_of");
	uint32_t n = out->req.n_choices;
	json_int_t b;

	if (!v || json_is_null(v))
		return 0;
	b = json_integer_value(v);	/* the table checked its type */
	if (b < n || b > COMPLETION_MAX_BEST_OF) {
		snprintf(err, err_len, "field 'best_of' must be an integer in "
			 "[n, %u] (n is %u)", COMPLETION_MAX_BEST_OF, n);
		*param = "best_of";
		return -EINVAL;
	}
	if (b == n)
		return 0;	/* every candidate is answered: nothing to rank */
	if (out->stream)
		return body_error(err, err_len, param, "best_of", "field "
				  "'best_of' cannot be streamed: the best are "
				  "known only once every candidate has ended");
	if (!lim->has_logits)
		return body_error(err, err_len, param, "best_of", "field "
				  "'best_of' ranks by logprobs, and this model "
				  "gives tokens, not logits");
	out->n_best = n;
	out->hide_logprobs = !out->req.sampling.logprobs;
	for (uint32_t i = 0; i < out->n_prompts; i++) {
		struct request *r = i ? &out->more[i - 1].req : &out->req;

		r->n_choices = (uint32_t)b;
		r->sampling.logprobs = true;
	}
	return 0;
}

int completion_parse(const char *body, size_t len,
		     const struct request_limits *lim,
		     struct completion_request *out, char *err, size_t err_len,
		     const char **param)
{
	struct request_limits l = *lim;
	json_t *obj = NULL, *v = NULL;
	bool echo;
	int rc;

	memset(out, 0, sizeof(*out));
	*param = NULL;
	out->n_prompts = 1;
	l.api = REQUEST_API_COMPLETIONS;
	rc = parse_http_fields(body, len, out, err, err_len, param, &obj);
	if (rc)
		goto out;
	if (json_is_object(obj))
		v = json_object_get(obj, "prompt");
	/* the table checked its type: true or false */
	echo = json_is_true(json_object_get(obj, "echo"));
	if (json_is_array(v) && is_batch(v))
		rc = parse_batch(obj, &l, echo, out, err, err_len, param);
	else	/* a syntax error quotes the body ("near 'prompt'"), not a field */
		rc = parse_one(body, len, &l, v ? v : obj, echo, &out->req,
			       &out->echo, &out->echo_len, err, err_len, param);
	if (!rc && obj)
		rc = parse_best_of(obj, lim, out, err, err_len, param);
out:
	json_decref(obj);
	return rc;
}

void completion_request_release(struct completion_request *c)
{
	for (uint32_t i = 0; c->more && i + 1 < c->n_prompts; i++) {
		request_release(&c->more[i].req);
		free(c->more[i].echo);
	}
	free(c->more);
	c->more = NULL;
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

/* ------------------------------------------------------------------------
 * best_of
 */

/* Is candidate a (sum sa) ranked before b (sum sb)?  Higher first, the
 * lower index on a tie; NaN never before a number. */
static bool ranks_before(double sa, uint32_t a, double sb, uint32_t b)
{
	return sa > sb || (sa == sb && a < b) || (sb != sb && sa == sa);
}

void completion_rank(const struct completion_candidate *c, uint32_t n,
		     uint32_t n_best, uint32_t *order)
{
	double sum[REQUEST_MAX_CHOICES];
	uint32_t all[REQUEST_MAX_CHOICES];

	if (n > REQUEST_MAX_CHOICES)
		n = REQUEST_MAX_CHOICES;
	for (uint32_t i = 0; i < n; i++) {
		sum[i] = 0.0;
		/* in token order, in double: a client summing the answer's
		 * token_logprobs the same way gets the same number */
		for (uint32_t t = 0; c[i].logprobs && t < c[i].n_tokens; t++)
			sum[i] += (double)c[i].logprobs[(size_t)t * c[i].stride].logprob;
		/* insertion: n is at most REQUEST_MAX_CHOICES */
		uint32_t at = i;

		while (at && ranks_before(sum[i], i, sum[all[at - 1]], all[at - 1])) {
			all[at] = all[at - 1];
			at--;
		}
		all[at] = i;
	}
	for (uint32_t i = 0; i < n_best && i < n; i++)
		order[i] = all[i];
}
