/*
 * chat_api.c - see chat_api.h.
 *
 * NOTES ON THE DESIGN
 *
 * One set of rules: a chat body is turned into a completions body (the
 * messages rendered and encoded into a "prompt" of token ids, "stop"
 * extended for chatml, max_completion_tokens renamed) and dumped for
 * completion_parse(), so every field but "messages" is judged exactly as
 * /v1/completions judges it.  The body is parsed once more there; bodies
 * are small (--max-body) and that is what keeps the rules in one place.
 *
 * The prompt goes as token ids, not as text, because llama2's turns are
 * separated by the BOS and EOS tokens, which no text encodes to
 * (chat_api.h, BOS AND EOS).  A one-turn prompt's ids are exactly those
 * of the same text sent to /v1/completions as a string.
 *
 * The answers are written like completion_api.c's: one worst-case
 * reservation, then unchecked writes (json_writer.h).
 */
#include "server/http/chat_api.h"
#include "util/err_fail.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "util/json_writer.h"
#include "text/text_stop.h"
#include "text/text_tokenizer.h"
#include "server/request/request_fields.h"
#include "server/request/request_json.h"
#include "text/chat_template.h"
#include "server/http/chat_tools.h"

int chat_template_from_name(const char *name, enum chat_template *out)
{
	if (!strcmp(name, "llama2"))
		*out = CHAT_TEMPLATE_LLAMA2;
	else if (!strcmp(name, "chatml"))
		*out = CHAT_TEMPLATE_CHATML;
	else
		return -EINVAL;
	return 0;
}

const char *chat_template_name(enum chat_template t)
{
	switch (t) {
	case CHAT_TEMPLATE_LLAMA2: return "llama2";
	case CHAT_TEMPLATE_CHATML: return "chatml";
	default: return "none";
	}
}


/* ------------------------------------------------------------------------
 * Rendering
 * ---------------------------------------------------------------------- */

void chat_prompt_release(struct chat_prompt *p)
{
	strbuf_release(&p->text);
	free(p->turn_end);
	memset(p, 0, sizeof(*p));
}

/* The current text ends a turn.  turn_end has room for n_msgs entries:
 * no template makes more turns than messages. */
static void end_turn(struct chat_prompt *p)
{
	p->turn_end[p->n_turns++] = p->text.len;
}

static bool is_ascii_space(char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Append s[0..n) without its leading and trailing ASCII whitespace. */
static int append_stripped(struct strbuf *sb, const char *s, size_t n)
{
	while (n && is_ascii_space(*s))
		s++, n--;
	while (n && is_ascii_space(s[n - 1]))
		n--;
	return strbuf_append(sb, s, n);
}

/* Meta's llama-2-chat order: [system] user (assistant user)*. */
static int llama2_check_order(const struct chat_message *msgs, size_t n,
			      char *err, size_t err_len)
{
	size_t first = msgs[0].role == CHAT_ROLE_SYSTEM;

	if (first == n)
		return err_fail(err, err_len, "messages: the llama2 template needs a "
			    "user message after the system message");
	for (size_t i = first; i < n; i++) {
		enum chat_role want = (i - first) % 2 ? CHAT_ROLE_ASSISTANT :
							CHAT_ROLE_USER;

		if (msgs[i].role != want)
			return err_fail(err, err_len, "messages[%zu].role is '%s' where "
				    "the llama2 template needs '%s': it takes one "
				    "optional system message first, then user and "
				    "assistant messages in turn, the last one the "
				    "user's", i, chat_role_name(msgs[i].role),
				    chat_role_name(want));
	}
	if (msgs[n - 1].role != CHAT_ROLE_USER)
		return err_fail(err, err_len, "messages[%zu].role is 'assistant': the "
			    "llama2 template needs the last message to be the "
			    "user's", n - 1);
	return 0;
}

static int render_llama2(const struct chat_message *msgs, size_t n,
			 struct chat_prompt *p, char *err, size_t err_len)
{
	const struct chat_message *sys = NULL;
	struct strbuf merged = { 0 };
	size_t first = 0;
	int rc;

	rc = llama2_check_order(msgs, n, err, err_len);
	if (rc)
		return rc;
	if (msgs[0].role == CHAT_ROLE_SYSTEM) {
		sys = &msgs[0];
		first = 1;
	}
	for (size_t i = first; i < n; i += 2) {
		const char *user = msgs[i].content;
		size_t user_len = msgs[i].len;

		/* Meta folds the system message into the first user message
		 * and strips the whole: the user's text is stripped at its
		 * end only, the system's not at all */
		if (i == first && sys) {
			if (strbuf_append(&merged, "<<SYS>>\n", 8) ||
			    strbuf_append(&merged, sys->content, sys->len) ||
			    strbuf_append(&merged, "\n<</SYS>>\n\n", 11) ||
			    strbuf_append(&merged, user, user_len))
				goto nomem;
			user = merged.data;
			user_len = merged.len;
		}
		if (strbuf_append(&p->text, "[INST] ", 7) ||
		    append_stripped(&p->text, user, user_len) ||
		    strbuf_append(&p->text, " [/INST]", 8))
			goto nomem;
		if (i + 1 < n) {	/* answered: the turn closes (EOS) */
			if (strbuf_append(&p->text, " ", 1) ||
			    append_stripped(&p->text, msgs[i + 1].content,
					    msgs[i + 1].len) ||
			    strbuf_append(&p->text, " ", 1))
				goto nomem;
		}
		end_turn(p);
	}
	strbuf_release(&merged);
	return 0;
nomem:
	strbuf_release(&merged);
	return -ENOMEM;
}

static int render_chatml(const struct chat_message *msgs, size_t n,
			 struct chat_prompt *p)
{
	for (size_t i = 0; i < n; i++) {
		const char *role = chat_role_name(msgs[i].role);

		if (strbuf_append(&p->text, "<|im_start|>", 12) ||
		    strbuf_append(&p->text, role, strlen(role)) ||
		    strbuf_append(&p->text, "\n", 1) ||
		    strbuf_append(&p->text, msgs[i].content, msgs[i].len) ||
		    strbuf_append(&p->text, CHAT_CHATML_END "\n",
				  sizeof(CHAT_CHATML_END)))
			return -ENOMEM;
	}
	if (strbuf_append(&p->text, "<|im_start|>assistant\n", 22))
		return -ENOMEM;
	end_turn(p);
	return 0;
}

int chat_render(enum chat_template t, const struct chat_message *msgs,
		size_t n, struct chat_prompt *out, char *err, size_t err_len)
{
	memset(out, 0, sizeof(*out));
	if (!n)
		return err_fail(err, err_len, "field 'messages' must not be empty");
	out->turn_end = calloc(n, sizeof(*out->turn_end));
	if (!out->turn_end)
		return -ENOMEM;
	switch (t) {
	case CHAT_TEMPLATE_LLAMA2:
		return render_llama2(msgs, n, out, err, err_len);
	case CHAT_TEMPLATE_CHATML:
		return render_chatml(msgs, n, out);
	default:
		return err_fail(err, err_len, "this server has no chat template "
			    "(--chat-template " CHAT_TEMPLATE_NAMES ")");
	}
}

static size_t turn_start(const struct chat_prompt *p, uint32_t i)
{
	return i ? p->turn_end[i - 1] : 0;
}

int chat_prompt_text(const struct chat_prompt *p, struct strbuf *out)
{
	for (uint32_t i = 0; i < p->n_turns; i++) {
		size_t from = turn_start(p, i);

		if ((i && strbuf_append(out, "</s><s>", 7)) ||
		    strbuf_append(out, p->text.data + from, p->turn_end[i] - from))
			return -ENOMEM;
	}
	return 0;
}

int chat_prompt_encode(const struct chat_prompt *p,
		       const struct text_tokenizer *tok,
		       int32_t **tokens, size_t *n)
{
	/* each turn: text_tokenizer_encode_max() of its bytes, then EOS */
	size_t cap = 2 * p->text.len + 4 * (size_t)p->n_turns, used = 0, got;
	int32_t *ids = malloc(cap * sizeof(*ids));
	int rc;

	*tokens = NULL;
	*n = 0;
	if (!ids)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n_turns; i++) {
		size_t from = turn_start(p, i), len = p->turn_end[i] - from;

		rc = text_tokenizer_encode(tok, p->text.data + from, len, true,
					   ids + used, cap - used, &got);
		if (rc) {
			free(ids);
			return rc;
		}
		used += got;
		if (i + 1 < p->n_turns)
			ids[used++] = text_tokenizer_eos(tok);
	}
	*tokens = ids;
	*n = used;
	return 0;
}

/* ------------------------------------------------------------------------
 * Parsing
 * ---------------------------------------------------------------------- */

/* chatml: "stop" (absent, a string, or an array) gets CHAT_CHATML_END
 * unless it holds it.  A non-string "stop" is left for request_parse()
 * to refuse. */
static int add_chatml_stop(json_t *obj, char *err, size_t err_len)
{
	json_t *stop = json_object_get(obj, "stop"), *arr;

	if (!stop || json_is_null(stop)) {
		arr = json_array();
	} else if (json_is_string(stop)) {
		arr = json_array();
		if (arr && json_array_append(arr, stop)) {
			json_decref(arr);
			arr = NULL;
		}
	} else if (json_is_array(stop)) {
		size_t i;
		json_t *e;

		json_array_foreach(stop, i, e)
			if (json_is_string(e) && !strcmp(json_string_value(e),
							 CHAT_CHATML_END))
				return 0;
		if (json_array_size(stop) >= TEXT_STOP_MAX)
			return err_fail(err, err_len, "field 'stop' has %zu strings: "
				    "at most %u with the chatml template, which "
				    "adds \"" CHAT_CHATML_END "\"",
				    json_array_size(stop), TEXT_STOP_MAX - 1);
		arr = json_copy(stop);
	} else {
		return 0;
	}
	if (!arr || json_array_append_new(arr, json_string(CHAT_CHATML_END)) ||
	    json_object_set_new(obj, "stop", arr))
		return -ENOMEM;
	return 0;
}

/* max_completion_tokens (chat's newer name) becomes max_tokens. */
static int rename_max_tokens(json_t *obj, bool *renamed, char *err,
			     size_t err_len)
{
	json_t *v = json_object_get(obj, "max_completion_tokens");
	json_t *old = json_object_get(obj, "max_tokens");

	*renamed = false;
	if (!v || json_is_null(v))
		return 0;
	if (old && !json_is_null(old) && !json_equal(old, v))
		return err_fail(err, err_len, "fields 'max_tokens' and "
			    "'max_completion_tokens' are the same limit: they "
			    "differ, give one");
	if (json_object_set(obj, "max_tokens", v))
		return -ENOMEM;
	json_object_del(obj, "max_completion_tokens");
	*renamed = true;
	return 0;
}

/*
 * No max_tokens: up to the context limit, as users of chat servers
 * expect (OpenAI, vLLM), not the 16 of a `run` line.  The server may
 * still lower it to what an answer or a KV pool holds (the route, with
 * max_tokens_defaulted).  0 or -ENOMEM.
 */
static int default_max_tokens(json_t *obj, const struct request_limits *lim,
			      bool *defaulted)
{
	const json_t *v = json_object_get(obj, "max_tokens");
	size_t n_prompt = json_array_size(json_object_get(obj, "prompt"));

	*defaulted = false;
	if ((v && !json_is_null(v)) || n_prompt > lim->max_context)
		return 0;	/* a long prompt: completion_parse() words it */
	if (json_object_set_new(obj, "max_tokens",
				json_integer((json_int_t)(lim->max_context - n_prompt))))
		return -ENOMEM;
	*defaulted = true;
	return 0;
}

/*
 * The GGUF path (chat_setup.h): msgs[0 .. n) rendered by family and
 * encoded by tok into *ids (malloc'd, *n_ids of them).  0; -EINVAL with
 * err (a template's refusal naming the message, or a prompt past
 * max_context); -ENOMEM.
 */
/* The text of special token id, NUL-terminated, or "" for none. */
static const char *special_text(const struct text_tokenizer *tok, int32_t id,
				size_t *len)
{
	const char *s = text_tokenizer_token_text(tok, id, len);

	return s ? s : "";
}

static int chat_family_encode(int family, const struct chat_message *msgs, size_t n,
		       const struct chat_tools *tools,
		       const struct text_tokenizer *tok, uint32_t max_context,
		       int32_t **ids, size_t *n_ids, char *err, size_t err_len)
{
	struct strbuf text = STRBUF_INIT;
	struct chat_msg *m = calloc(n ? n : 1, sizeof(*m));
	size_t bos_len, eos_len, skip = 0, cap;
	const char *bos = special_text(tok, text_tokenizer_bos(tok), &bos_len);
	const char *eos = special_text(tok, text_tokenizer_eos(tok), &eos_len);
	int rc;

	*ids = NULL;
	*n_ids = 0;
	if (!m)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		m[i] = (struct chat_msg){
			.role = msgs[i].role == CHAT_ROLE_SYSTEM ? CHAT_MSG_SYSTEM :
				msgs[i].role == CHAT_ROLE_USER ? CHAT_MSG_USER :
				msgs[i].role == CHAT_ROLE_TOOL ? CHAT_MSG_TOOL :
				CHAT_MSG_ASSISTANT,
			.content = msgs[i].content, .len = msgs[i].len,
			.calls = msgs[i].calls, .n_calls = msgs[i].n_calls };
	rc = chat_template_render_tools((enum chat_family)family, m, n, tools,
					bos, eos, true, &text, err, err_len);
	free(m);
	if (rc)
		goto out;
	/* the tokenizer puts BOS first itself: not twice (llama.cpp too) */
	if (text_tokenizer_adds_bos(tok) && bos_len && text.len >= bos_len &&
	    !memcmp(text.data, bos, bos_len))
		skip = bos_len;
	/* no token stands for more text than the longest piece (+1: a
	 * dummy-prefix space): a longer text cannot fit the context */
	if ((text.len - skip) / (text_tokenizer_longest_piece(tok) + 1) > max_context) {
		rc = -EINVAL;
		snprintf(err, err_len, "messages: the prompt the chat template "
			 "renders (%zu bytes) exceeds the context limit %u",
			 text.len - skip, max_context);
		goto out;
	}
	cap = text_tokenizer_encode_max(text.len - skip);
	*ids = malloc(cap * sizeof(**ids));
	if (!*ids) {
		rc = -ENOMEM;
		goto out;
	}
	rc = text_tokenizer_encode(tok, text.data + skip, text.len - skip, true,
				   *ids, cap, n_ids);
	if (rc && rc != -ENOMEM) {
		snprintf(err, err_len, "messages: cannot encode: %s", strerror(-rc));
		rc = -EINVAL;
	}
	if (rc) {
		free(*ids);
		*ids = NULL;
	}
out:
	strbuf_release(&text);
	return rc;
}

/* Render and encode the messages (with tools' tools, when not NULL);
 * put them in obj as "prompt". */
static int set_prompt(json_t *obj, const struct chat_config *cc,
		      const struct chat_tool_set *tools,
		      const struct request_limits *lim, char *err,
		      size_t err_len)
{
	struct chat_messages cm;
	struct chat_prompt p = { 0 };
	int32_t *ids = NULL;
	json_t *arr = NULL;
	size_t n_ids = 0;
	int rc;

	rc = chat_messages_get(obj, &cm, err, err_len);
	if (!rc && cc->family >= 0)	/* a GGUF tokenizer's template */
		rc = chat_family_encode(cc->family, cm.msgs, cm.n,
					tools ? &tools->render : NULL, lim->tok,
					lim->max_context, &ids, &n_ids, err,
					err_len);
	else if (!rc && (tools || cm.has_tool_parts))
		rc = err_fail(err, err_len, "%s: the %s chat template renders no "
			      "tools (a GGUF model's qwen2.5 or qwen3 template "
			      "does)", tools ? "tools" : "messages",
			      chat_template_name(cc->builtin));
	else if (!rc)
		rc = chat_render(cc->builtin, cm.msgs, cm.n, &p, err, err_len);
	if (!rc && cc->family < 0) {
		/* a prompt longer than the context is refused before the cost
		 * of encoding it: no token stands for more text than the
		 * longest piece (+1: a dummy-prefix space may join it) */
		if (p.text.len / (text_tokenizer_longest_piece(lim->tok) + 1) >
		    lim->max_context)
			rc = err_fail(err, err_len, "messages: the prompt the chat "
				  "template renders (%zu bytes) exceeds the context "
				  "limit %u", p.text.len, lim->max_context);
		else
			rc = chat_prompt_encode(&p, lim->tok, &ids, &n_ids);
		if (rc && rc != -EINVAL && rc != -ENOMEM)
			rc = err_fail(err, err_len, "messages: cannot encode: %s",
				  strerror(-rc));
	}
	if (!rc) {
		arr = json_array();
		for (size_t i = 0; arr && i < n_ids; i++)
			if (json_array_append_new(arr, json_integer(ids[i])))
				rc = -ENOMEM;
		if (!arr || rc || json_object_set_new(obj, "prompt", arr))
			rc = -ENOMEM;
		arr = NULL;
	}
	json_decref(arr);
	free(ids);
	chat_prompt_release(&p);
	chat_messages_release(&cm);
	return rc;
}

/*
 * A required or named tool choice decodes under its call grammar, given
 * to completion_parse() as the request's "grammar"; a grammar of the
 * client's own would fight it, and so would response_format.  A stream
 * holds back what may be a call, so its logprobs would come apart from
 * its text: refused together.
 */
static int tools_fit(json_t *obj, const struct chat_tool_set *t, char *err,
		     size_t err_len, const char **param)
{
	const json_t *rf = json_object_get(obj, "response_format");
	const json_t *type = json_object_get(rf, "type");
	const json_t *g = json_object_get(obj, "grammar");
	const json_t *lp = json_object_get(obj, "logprobs");

	if ((g && !json_is_null(g)) ||
	    (rf && !json_is_null(rf) &&
	     !(json_is_string(type) && !strcmp(json_string_value(type), "text")))) {
		*param = g && !json_is_null(g) ? "grammar" : "response_format";
		return err_fail(err, err_len, "field '%s' and tool calls both "
				"constrain the answer: give one (or tool_choice "
				"\"none\")", *param);
	}
	if (json_is_true(json_object_get(obj, "stream")) && json_is_true(lp)) {
		*param = "logprobs";
		return err_fail(err, err_len, "field 'logprobs' with tools: a "
				"stream holds back what may be a tool call, so "
				"its logprobs are only given unstreamed");
	}
	if (t->grammar &&
	    json_object_set_new(obj, "grammar", json_string(t->grammar)))
		return -ENOMEM;
	return 0;
}

int chat_parse(const char *body, size_t len, const struct chat_config *cc,
	       const struct request_limits *lim, struct completion_request *out,
	       char *err, size_t err_len, const char **param)
{
	json_error_t jerr;
	json_t *obj;
	char *dumped = NULL;
	bool renamed = false, defaulted = false;
	struct chat_tool_set *tools = NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	*param = NULL;
	if (cc->refusal[0])
		return err_fail(err, err_len, "%s", cc->refusal);
	if (!lim->tok || (cc->family < 0 && cc->builtin == CHAT_TEMPLATE_NONE))
		return err_fail(err, err_len, "this server has no chat template: it "
			    "was started without --chat-template "
			    CHAT_TEMPLATE_NAMES);
	obj = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY |
			 JSON_ALLOW_NUL, &jerr);
	if (!obj || !json_is_object(obj)) {
		json_decref(obj);
		/* completion_parse() words what is wrong with it */
		return completion_parse(body, len, lim, out, err, err_len, param);
	}
	if (json_object_get(obj, "prompt")) {
		*param = "prompt";
		rc = err_fail(err, err_len, "field 'prompt' is /v1/completions'; a chat "
			  "request sends 'messages'");
		goto out;
	}
	rc = request_fields_check(obj, REQUEST_API_CHAT, err, err_len, out->param,
				  sizeof(out->param));
	if (rc) {
		*param = out->param;
		goto out;
	}
	rc = chat_tools_parse(obj, &tools, err, err_len, param);
	if (!rc && tools)
		rc = tools_fit(obj, tools, err, err_len, param);
	if (rc)
		goto out;
	rc = set_prompt(obj, cc, tools, lim, err, err_len);
	if (rc) {
		*param = !strncmp(err, "tools", 5) ? "tools" : "messages";
		goto out;
	}
	json_object_del(obj, "messages");
	rc = rename_max_tokens(obj, &renamed, err, err_len);
	if (rc) {
		*param = "max_completion_tokens";
		goto out;
	}
	rc = default_max_tokens(obj, lim, &defaulted);
	if (rc)
		goto out;
	if (cc->family < 0 && cc->builtin == CHAT_TEMPLATE_CHATML) {
		rc = add_chatml_stop(obj, err, err_len);
		if (rc) {
			*param = "stop";
			goto out;
		}
	}
	/* chat's own fields, checked above, are not completions' */
	if (request_fields_keep(obj, REQUEST_API_COMPLETIONS)) {
		rc = -ENOMEM;
		goto out;
	}
	dumped = json_dumps(obj, JSON_COMPACT);
	if (!dumped) {
		rc = -ENOMEM;
		goto out;
	}
	rc = completion_parse(dumped, strlen(dumped), lim, out, err, err_len, param);
	out->max_tokens_defaulted = defaulted;
	out->tools = tools;		/* the request's now */
	tools = NULL;
	if (rc == -EINVAL && *param && !strcmp(*param, "prompt")) {
		/* the prompt is the rendered messages: say so */
		char why[256];

		snprintf(why, sizeof(why), "%s", err);
		snprintf(err, err_len, "messages, as the chat template renders "
			 "them: %s", why);
		*param = "messages";
	} else if (rc == -EINVAL && renamed && *param &&
		   !strcmp(*param, "max_tokens")) {
		char why[256];

		snprintf(why, sizeof(why), "%s", err);
		snprintf(err, err_len, "max_completion_tokens (as max_tokens): %s",
			 why);
		*param = "max_completion_tokens";
	} else if (rc == -EINVAL && out->tools && out->tools->grammar && *param &&
		   !strcmp(*param, "grammar")) {
		*param = "tools";	/* the call grammar is ours, from the tools */
	}
out:
	chat_tools_free(tools);
	free(dumped);
	json_decref(obj);
	if (rc == -ENOMEM)
		snprintf(err, err_len, "out of memory");
	return rc;
}

/* ------------------------------------------------------------------------
 * Answers
 * ---------------------------------------------------------------------- */

/* The chat shapes: the fixed text of an answer or chunk, per choice (its
 * content aside), no token ids, and per logprob entry
 * {"token":..,"logprob":L,"bytes":[..],"top_logprobs":[...]} or one of
 * its alternatives (the name and bytes: logprob_entry_bound()). */
static const struct answer_sizes chat_sizes = {
	.fixed = 448, .per_choice = 192, .per_token = 0, .per_logprob = 96,
};

/* "chat" + a server-made id: OpenAI's "chatcmpl-" ids. */
static char *put_id(char *p, const char *id)
{
	char *end;

	if (!id || strncmp(id, COMPLETION_ID_PREFIX, strlen(COMPLETION_ID_PREFIX)))
		return json_put_str(p, id);
	/* the escaped id with its quotes from p + 4, then "chat over the
	 * opening quote and the four bytes before it */
	end = json_put_str(p + 4, id);
	memcpy(p, "\"chat", 5);
	return end;
}

/* {"token":..,"logprob":L,"bytes":[..] of token after prev (logprob_text.h). */
static char *put_logprob(char *p, const struct logprob_ctx *cx, int32_t prev,
			 int32_t token, float logprob)
{
	struct logprob_token t;

	logprob_token_of(cx, prev, token, &t);
	p = JSON_PUT_LIT(p, "{\"token\":");
	p = logprob_put_name(p, cx, token, &t);
	p = JSON_PUT_LIT(p, ",\"logprob\":");
	/* 9 significant digits: the float exactly */
	p += snprintf(p, 24, "%.9g", (double)logprob);
	p = JSON_PUT_LIT(p, ",\"bytes\":");
	return logprob_put_bytes(p, cx, &t);
}

/* "logprobs":{"content":[...]} or "logprobs":null. */
static char *put_logprobs(char *p, const struct completion_choice *c)
{
	struct logprob_ctx cx = c->lp;

	if (!c->logprobs)
		return JSON_PUT_LIT(p, "\"logprobs\":null");
	p = JSON_PUT_LIT(p, "\"logprobs\":{\"content\":[");
	for (uint32_t i = 0; i < c->n_tokens; i++) {
		const struct sampler_logprob *e = c->logprobs +
						  (size_t)i * c->logprob_stride;

		if (i)
			*p++ = ',';
		p = put_logprob(p, &cx, cx.prev_token, e[0].token, e[0].logprob);
		p = JSON_PUT_LIT(p, ",\"top_logprobs\":[");
		/* the alternatives follow the same token the chosen one does */
		for (uint32_t j = 1; j < c->logprob_stride && e[j].token >= 0; j++) {
			if (j > 1)
				*p++ = ',';
			p = put_logprob(p, &cx, cx.prev_token, e[j].token,
					e[j].logprob);
			*p++ = '}';
		}
		p = JSON_PUT_LIT(p, "]}");
		logprob_ctx_advance(&cx, &e[0].token, 1);
	}
	return JSON_PUT_LIT(p, "]}");
}

static char *put_text(char *p, const struct completion_choice *c)
{
	return json_put_strn(p, c->text ? c->text : "", c->text ? c->text_len : 0);
}

/* A message's "content":TEXT, or with calls the text before them (null
 * for none) and ,"tool_calls":[..]. */
static char *put_message(char *p, const struct completion_choice *c)
{
	p = JSON_PUT_LIT(p, "\"content\":");
	if (!c->calls)
		return put_text(p, c);
	if (!c->calls->content_len)
		p = JSON_PUT_LIT(p, "null");
	else
		p = json_put_strn(p, c->text, c->calls->content_len);
	*p++ = ',';
	return chat_put_tool_calls(p, c->tools, c->calls, false);
}

/* What the calls of choices add to an answer's bound. */
static size_t calls_bound(const struct completion_choice *choices, uint32_t n)
{
	size_t sum = 0;

	for (uint32_t i = 0; choices && i < n; i++)
		if (choices[i].calls)
			sum += chat_tool_calls_bound(choices[i].tools, choices[i].calls);
	return sum;
}

/* {"id":..,"object":OBJECT,"created":..,"model":..,"choices":[ */
static char *put_head(char *p, const struct completion_meta *m,
		      const char *object)
{
	p = JSON_PUT_LIT(p, "{\"id\":");
	p = put_id(p, m->id);
	p = JSON_PUT_LIT(p, ",\"object\":");
	p = json_put_str(p, object);
	p = JSON_PUT_LIT(p, ",\"created\":");
	p = json_put_u64(p, m->created);
	p = JSON_PUT_LIT(p, ",\"model\":");
	p = json_put_str(p, m->model);
	return JSON_PUT_LIT(p, ",\"choices\":[");
}

/* ] then ,"usage":{..} when given. */
static char *put_tail(char *p, const struct completion_meta *m,
		      const struct completion_usage *usage)
{
	*p++ = ']';
	return completion_put_usage(p, m, usage);
}

int chat_format(struct strbuf *out, const struct completion_meta *m,
		const struct completion_choice *choices, uint32_t n_choices,
		const struct completion_usage *usage, bool has_seed,
		uint64_t seed)
{
	size_t need = completion_answer_bound(m, choices, n_choices, &chat_sizes);
	char *p;

	if (need != SIZE_MAX)
		need += calls_bound(choices, n_choices);
	if (need == SIZE_MAX || strbuf_reserve(out, need))
		return -ENOMEM;
	p = put_head(out->data + out->len, m, "chat.completion");
	for (uint32_t i = 0; i < n_choices; i++) {
		const struct completion_choice *c = &choices[i];

		if (i)
			*p++ = ',';
		p = JSON_PUT_LIT(p, "{\"index\":");
		p = json_put_u64(p, c->index);
		p = JSON_PUT_LIT(p, ",\"message\":{\"role\":\"assistant\",");
		p = put_message(p, c);
		p = JSON_PUT_LIT(p, "},");
		p = put_logprobs(p, c);
		p = JSON_PUT_LIT(p, ",\"finish_reason\":");
		p = json_put_str(p, c->finish_reason);
		*p++ = '}';
	}
	p = put_tail(p, m, usage);
	if (has_seed) {
		p = JSON_PUT_LIT(p, ",\"seed\":");
		p = json_put_u64(p, seed);
	}
	*p++ = '}';
	*p = '\0';
	out->len = (size_t)(p - out->data);
	return 0;
}

int chat_format_chunk(struct strbuf *out, const struct completion_meta *m,
		      enum chat_chunk kind, const struct completion_choice *choice,
		      const struct completion_usage *usage)
{
	size_t need = completion_answer_bound(m, choice, 1, &chat_sizes);
	char *p = api_event_open(out, need == SIZE_MAX ? need :
				 need + calls_bound(choice, 1));

	if (!p)
		return -ENOMEM;
	p = put_head(p, m, "chat.completion.chunk");
	p = JSON_PUT_LIT(p, "{\"index\":");
	p = json_put_u64(p, choice->index);
	p = JSON_PUT_LIT(p, ",\"delta\":");
	switch (kind) {
	case CHAT_CHUNK_ROLE:
		p = JSON_PUT_LIT(p, "{\"role\":\"assistant\",\"content\":\"\"},"
				 "\"logprobs\":null,\"finish_reason\":null}");
		break;
	case CHAT_CHUNK_CONTENT:
		p = JSON_PUT_LIT(p, "{\"content\":");
		p = put_text(p, choice);
		p = JSON_PUT_LIT(p, "},");
		p = put_logprobs(p, choice);
		p = JSON_PUT_LIT(p, ",\"finish_reason\":null}");
		break;
	case CHAT_CHUNK_TOOL_CALLS:
		*p++ = '{';
		p = chat_put_tool_calls(p, choice->tools, choice->calls, true);
		p = JSON_PUT_LIT(p, "},\"logprobs\":null,\"finish_reason\":null}");
		break;
	case CHAT_CHUNK_FINISH:
		p = JSON_PUT_LIT(p, "{},\"logprobs\":null,\"finish_reason\":");
		p = json_put_str(p, choice->finish_reason);
		*p++ = '}';
		break;
	}
	p = put_tail(p, m, usage);
	*p++ = '}';
	api_event_close(out, p);
	return 0;
}

int chat_format_usage_chunk(struct strbuf *out, const struct completion_meta *m,
			    const struct completion_usage *usage)
{
	char *p = api_event_open(out, completion_answer_bound(m, NULL, 0,
							       &chat_sizes));

	if (!p)
		return -ENOMEM;
	p = put_head(p, m, "chat.completion.chunk");
	p = put_tail(p, m, usage);
	*p++ = '}';
	api_event_close(out, p);
	return 0;
}
