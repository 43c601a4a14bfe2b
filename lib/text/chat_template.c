/*
 * chat_template.c - the chat template families of chat_template.h:
 * detection by distinctive substrings, and one renderer a family written
 * from the template's Jinja source.
 *
 * NOTES ON THE DESIGN
 *
 * Each renderer follows its template statement by statement, so the
 * comment above it quotes what it implements.  What the templates ask of
 * strings is small: concatenation, Python's strip() family, `in`,
 * startswith/endswith and split(SEP)[0] / [-1] (Qwen 3's <think> split).
 * Contents are bytes; the strip helpers only remove whitespace that is a
 * valid UTF-8 sequence, so invalid bytes stay as they are (a Jinja engine
 * never sees them: its input is text).
 *
 * Detection is deliberately narrow: a family is named only when the
 * source holds the markers and default strings its renderer writes, and a
 * variant with features not rendered here (tools, date headers, another
 * default system prompt) is unknown, so the server refuses it rather
 * than serving a prompt the model was not trained on.
 */
#include "text/chat_template.h"
#include "util/err_fail.h"
#include "text/unicode.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const char *const family_names[CHAT_FAMILY_COUNT] = {
	[CHAT_FAMILY_LLAMA2] = "llama2",
	[CHAT_FAMILY_MISTRAL_V1] = "mistral-v1",
	[CHAT_FAMILY_MIXTRAL] = "mixtral",
	[CHAT_FAMILY_LLAMA3] = "llama3",
	[CHAT_FAMILY_CHATML] = "chatml",
	[CHAT_FAMILY_QWEN2] = "qwen2",
	[CHAT_FAMILY_QWEN25] = "qwen2.5",
	[CHAT_FAMILY_QWEN3] = "qwen3",
	[CHAT_FAMILY_SMOLLM] = "smollm",
	[CHAT_FAMILY_ZEPHYR] = "zephyr",
};

/* The default system prompts, as the templates write them. */
#define QWEN2_DEFAULT_SYSTEM "You are a helpful assistant."
#define QWEN25_DEFAULT_SYSTEM \
	"You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
#define SMOLLM_DEFAULT_SYSTEM \
	"You are a helpful AI assistant named SmolLM, trained by Hugging Face"

enum chat_family chat_family_from_name(const char *name)
{
	if (!name)
		return CHAT_FAMILY_UNKNOWN;
	for (int f = 0; f < CHAT_FAMILY_COUNT; f++)
		if (!strcmp(name, family_names[f]))
			return (enum chat_family)f;
	return CHAT_FAMILY_UNKNOWN;
}

const char *chat_family_name(enum chat_family f)
{
	if (f < 0 || f >= CHAT_FAMILY_COUNT)
		return "unknown";
	return family_names[f];
}

const char *chat_family_end_text(enum chat_family f)
{
	switch (f) {
	case CHAT_FAMILY_LLAMA3:
		return "<|eot_id|>";
	case CHAT_FAMILY_CHATML:
	case CHAT_FAMILY_QWEN2:
	case CHAT_FAMILY_QWEN25:
	case CHAT_FAMILY_QWEN3:
	case CHAT_FAMILY_SMOLLM:
		return "<|im_end|>";
	default:
		return NULL;
	}
}

// ------------------------------------------------------------------------
// Detection

/* Does s (len bytes, not NUL-terminated) contain the string needle? */
static bool has(const char *s, size_t len, const char *needle)
{
	return memmem(s, len, needle, strlen(needle)) != NULL;
}

/*
 * A ChatML template that writes a system message of its own: the text
 * "<|im_start|>system\n" (the \n as the two characters of a Jinja string
 * escape) followed by more literal text rather than the closing quote.
 */
static bool chatml_has_own_default(const char *s, size_t len)
{
	static const char mark[] = "<|im_start|>system\\n";
	const size_t mlen = sizeof(mark) - 1;
	const char *p = s, *end = s + len;

	while ((p = memmem(p, (size_t)(end - p), mark, mlen)) != NULL) {
		p += mlen;
		if (p < end && *p != '\'' && *p != '"')
			return true;
	}
	return false;
}

static enum chat_family detect_chatml(const char *s, size_t len,
				      const char **why)
{
	if (has(s, len, "<think>") && has(s, len, "</think>"))
		return CHAT_FAMILY_QWEN3;
	if (has(s, len, QWEN25_DEFAULT_SYSTEM))
		return CHAT_FAMILY_QWEN25;
	if (has(s, len, SMOLLM_DEFAULT_SYSTEM))
		return CHAT_FAMILY_SMOLLM;
	if (has(s, len, "<|im_start|>system\\n" QWEN2_DEFAULT_SYSTEM "<|im_end|>"))
		return CHAT_FAMILY_QWEN2;
	if (chatml_has_own_default(s, len)) {
		*why = "a ChatML template with a default system prompt that is "
		       "not Qwen's or SmolLM's";
		return CHAT_FAMILY_UNKNOWN;
	}
	if (has(s, len, "tools")) {
		*why = "a ChatML template with tool calls that is not a known "
		       "Qwen template";
		return CHAT_FAMILY_UNKNOWN;
	}
	return CHAT_FAMILY_CHATML;
}

static enum chat_family detect_inst(const char *s, size_t len,
				    const char **why)
{
	if (has(s, len, "<<SYS>>")) {
		/* Meta's: BOS before each [INST], stripped contents. */
		if (has(s, len, "bos_token + '[INST] '") &&
		    has(s, len, "content.strip()"))
			return CHAT_FAMILY_LLAMA2;
		*why = "a Llama 2 ([INST] <<SYS>>) template other than Meta's "
		       "Llama-2-chat one";
		return CHAT_FAMILY_UNKNOWN;
	}
	if (has(s, len, "[AVAILABLE_TOOLS]") || has(s, len, "[SYSTEM_PROMPT]") ||
	    has(s, len, "[TOOL_CALLS]")) {
		*why = "a Mistral v3/v7 template (tools or [SYSTEM_PROMPT]), "
		       "not rendered here";
		return CHAT_FAMILY_UNKNOWN;
	}
	if (has(s, len, "'[INST] ' + message['content'] + ' [/INST]'")) {
		if (has(s, len, "eos_token + ' '"))
			return CHAT_FAMILY_MISTRAL_V1;
		if (has(s, len, "message['content'] + eos_token}}") ||
		    has(s, len, "message['content'] + eos_token }}"))
			return CHAT_FAMILY_MIXTRAL;
	}
	*why = "an [INST] template that is not Mistral v0.1's or Mixtral's";
	return CHAT_FAMILY_UNKNOWN;
}

enum chat_family chat_template_detect(const char *jinja, size_t len,
				      const char **why)
{
	const char *dummy;

	if (!why)
		why = &dummy;
	*why = NULL;
	if (!jinja || !len) {
		*why = "the chat template is empty";
		return CHAT_FAMILY_UNKNOWN;
	}
	if (has(jinja, len, "<|start_header_id|>")) {
		if (has(jinja, len, "Cutting Knowledge Date") ||
		    has(jinja, len, "tools")) {
			*why = "a Llama 3.1+ template (date header, tools), "
			       "not rendered here";
			return CHAT_FAMILY_UNKNOWN;
		}
		if (has(jinja, len, "<|eot_id|>"))
			return CHAT_FAMILY_LLAMA3;
	}
	if (has(jinja, len, "<|im_start|>"))
		return detect_chatml(jinja, len, why);
	if (has(jinja, len, "[INST]"))
		return detect_inst(jinja, len, why);
	if (has(jinja, len, "<|user|>") && has(jinja, len, "<|assistant|>") &&
	    has(jinja, len, "eos_token") && !has(jinja, len, "<|end|>"))
		return CHAT_FAMILY_ZEPHYR;
	*why = "no known chat template family's markers ([INST], "
	       "<|start_header_id|>, <|im_start|>, <|user|>)";
	return CHAT_FAMILY_UNKNOWN;
}

// ------------------------------------------------------------------------
// Strings as the templates use them

/* A piece of text: a message's content or part of it. */
struct span {
	const char *p;
	size_t len;
};

/* Python's str.isspace() for one code point. */
static bool py_space(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) ||
	       c == 0x85 || c == 0xa0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202f || c == 0x205f || c == 0x3000;
}

/* The length of the whitespace character that ends s, or 0. */
static size_t trailing_space(struct span s)
{
	for (size_t k = 1; k <= 4 && k <= s.len; k++) {
		const char *at = s.p + s.len - k;
		size_t n;
		uint32_t c;

		/* Back over continuation bytes to where the character starts. */
		if (((unsigned char)*at & 0xc0) == 0x80)
			continue;
		c = unicode_decode(at, k, &n);
		return c != UNICODE_INVALID && n == k && py_space(c) ? k : 0;
	}
	return 0;
}

/* The length of the whitespace character that starts s, or 0. */
static size_t leading_space(struct span s)
{
	size_t n;
	uint32_t c = unicode_decode(s.p, s.len, &n);

	return c != UNICODE_INVALID && py_space(c) ? n : 0;
}

/* Python's s.strip() (left and/or right), Unicode whitespace. */
static struct span py_strip(struct span s, bool left, bool right)
{
	size_t k;

	while (left && s.len && (k = leading_space(s)) > 0)
		s.p += k, s.len -= k;
	while (right && s.len && (k = trailing_space(s)) > 0)
		s.len -= k;
	return s;
}

/* Python's s.strip('\n') (left and/or right). */
static struct span strip_newlines(struct span s, bool left, bool right)
{
	while (left && s.len && s.p[0] == '\n')
		s.p++, s.len--;
	while (right && s.len && s.p[s.len - 1] == '\n')
		s.len--;
	return s;
}

/* Where needle first occurs in s, or NULL. */
static const char *span_find(struct span s, const char *needle)
{
	return memmem(s.p, s.len, needle, strlen(needle));
}

/* Where needle last occurs in s, or NULL. */
static const char *span_find_last(struct span s, const char *needle)
{
	const char *last = NULL, *p;
	struct span rest = s;

	while ((p = span_find(rest, needle)) != NULL) {
		last = p;
		rest.len -= (size_t)(p + 1 - rest.p);
		rest.p = p + 1;
	}
	return last;
}

static bool span_starts(struct span s, const char *prefix)
{
	size_t n = strlen(prefix);

	return s.len >= n && !memcmp(s.p, prefix, n);
}

static bool span_ends(struct span s, const char *suffix)
{
	size_t n = strlen(suffix);

	return s.len >= n && !memcmp(s.p + s.len - n, suffix, n);
}

static struct span msg_span(const struct chat_msg *m)
{
	return (struct span){ m->content ? m->content : "", m->content ? m->len : 0 };
}

// ------------------------------------------------------------------------
// Output

/* What a renderer writes to: the buffer and the first error. */
struct out {
	struct strbuf *sb;
	int rc;
};

static void put(struct out *o, const char *p, size_t n)
{
	if (!o->rc && n)
		o->rc = strbuf_append(o->sb, p, n);
}

static void put_str(struct out *o, const char *s)
{
	if (s)
		put(o, s, strlen(s));
}

static void put_span(struct out *o, struct span s)
{
	put(o, s.p, s.len);
}

static const char *role_name(enum chat_msg_role r)
{
	switch (r) {
	case CHAT_MSG_SYSTEM: return "system";
	case CHAT_MSG_USER: return "user";
	case CHAT_MSG_ASSISTANT: return "assistant";
	case CHAT_MSG_TOOL: return "tool";
	}
	return "?";
}


// ------------------------------------------------------------------------
// The [INST] families

/*
 * The alternation check the [INST] templates share, for the message at
 * loop index loop_i (messages[i] of the request):
 *   {% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
 *   {{ raise_exception('Conversation roles must alternate ...') }}
 */
static int inst_check_order(const struct chat_msg *m, size_t loop_i, size_t i,
			    char *err, size_t err_len)
{
	if ((m->role == CHAT_MSG_USER) == (loop_i % 2 == 0))
		return 0;
	return err_fail(err, err_len, "messages[%zu]: role '%s': the template "
		    "needs roles to alternate user/assistant/user/... %s", i,
		    role_name(m->role), i != loop_i ? "after the first system "
		    "message" : "from the first message");
}

/*
 * meta-llama/Llama-2-*-chat-hf:
 *   a first system message is taken out (loop_messages = messages[1:]) and
 *   folded into the first loop message as
 *   '<<SYS>>\n' + system + '\n<</SYS>>\n\n' + content; then per message:
 *   user:      bos_token + '[INST] ' + content.strip() + ' [/INST]'
 *   assistant: ' ' + content.strip() + ' ' + eos_token
 *   (a system message at an odd place passes the order check and writes
 *   nothing); no generation prompt.
 */
static int render_llama2(const struct chat_msg *msgs, size_t n, const char *bos,
			 const char *eos, struct out *o, char *err, size_t err_len)
{
	const struct chat_msg *sys = NULL;
	size_t base = 0;
	int rc;

	if (msgs[0].role == CHAT_MSG_SYSTEM)
		sys = &msgs[0], base = 1;
	for (size_t i = base; i < n; i++) {
		rc = inst_check_order(&msgs[i], i - base, i, err, err_len);
		if (rc)
			return rc;
	}
	for (size_t i = base; i < n; i++) {
		struct span c = msg_span(&msgs[i]);

		if (msgs[i].role == CHAT_MSG_USER) {
			put_str(o, bos);
			put_str(o, "[INST] ");
			if (i == base && sys) {
				/*
				 * strip() of '<<SYS>>\n' + system + '\n<</SYS>>\n\n'
				 * + content: the start is '<', and an end stripped
				 * past content stops at the '>' of <</SYS>>.
				 */
				c = py_strip(c, false, true);
				put_str(o, "<<SYS>>\n");
				put_span(o, msg_span(sys));
				put_str(o, c.len ? "\n<</SYS>>\n\n" : "\n<</SYS>>");
				put_span(o, c);
			} else {
				put_span(o, py_strip(c, true, true));
			}
			put_str(o, " [/INST]");
		} else if (msgs[i].role == CHAT_MSG_ASSISTANT) {
			put_str(o, " ");
			put_span(o, py_strip(c, true, true));
			put_str(o, " ");
			put_str(o, eos);
		}
	}
	return 0;
}

/*
 * mistralai/Mistral-7B-Instruct-v0.1 (eos_space) and
 * Mixtral-8x7B-Instruct-v0.1:
 *   bos_token, then per message (the order check first):
 *   user:      '[INST] ' + content + ' [/INST]'
 *   assistant: content + eos_token [+ ' ']
 *   else raise_exception('Only user and assistant roles are supported!')
 */
static int render_mistral(const struct chat_msg *msgs, size_t n, bool eos_space,
			  const char *bos, const char *eos, struct out *o,
			  char *err, size_t err_len)
{
	put_str(o, bos);
	for (size_t i = 0; i < n; i++) {
		int rc = inst_check_order(&msgs[i], i, i, err, err_len);

		if (rc)
			return rc;
		if (msgs[i].role == CHAT_MSG_SYSTEM)
			return err_fail(err, err_len, "messages[%zu]: role 'system': the "
				    "template takes only user and assistant messages", i);
		if (msgs[i].role == CHAT_MSG_USER) {
			put_str(o, "[INST] ");
			put_span(o, msg_span(&msgs[i]));
			put_str(o, " [/INST]");
		} else {
			put_span(o, msg_span(&msgs[i]));
			put_str(o, eos);
			if (eos_space)
				put_str(o, " ");
		}
	}
	return 0;
}

// ------------------------------------------------------------------------
// Llama 3, Zephyr

/*
 * Meta-Llama-3-8B-Instruct:
 *   per message '<|start_header_id|>' + role + '<|end_header_id|>\n\n' +
 *   (content | trim) + '<|eot_id|>', bos_token before the first; then
 *   '<|start_header_id|>assistant<|end_header_id|>\n\n'.
 */
static void render_llama3(const struct chat_msg *msgs, size_t n, const char *bos,
			  bool gen, struct out *o)
{
	for (size_t i = 0; i < n; i++) {
		if (i == 0)
			put_str(o, bos);
		put_str(o, "<|start_header_id|>");
		put_str(o, role_name(msgs[i].role));
		put_str(o, "<|end_header_id|>\n\n");
		put_span(o, py_strip(msg_span(&msgs[i]), true, true));
		put_str(o, "<|eot_id|>");
	}
	if (gen)
		put_str(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/*
 * HuggingFaceH4/zephyr-7b-beta (TinyLlama-Chat too), rendered with
 * trim_blocks: per message '<|' + role + '|>\n' + content + eos_token +
 * '\n', and after the last '<|assistant|>\n' when add_generation_prompt.
 */
static void render_zephyr(const struct chat_msg *msgs, size_t n, const char *eos,
			  bool gen, struct out *o)
{
	for (size_t i = 0; i < n; i++) {
		put_str(o, "<|");
		put_str(o, role_name(msgs[i].role));
		put_str(o, "|>\n");
		put_span(o, msg_span(&msgs[i]));
		put_str(o, eos);
		put_str(o, "\n");
	}
	if (gen)
		put_str(o, "<|assistant|>\n");
}

// ------------------------------------------------------------------------
// ChatML and Qwen

static void chatml_msg(struct out *o, const char *role, struct span content)
{
	put_str(o, "<|im_start|>");
	put_str(o, role);
	put_str(o, "\n");
	put_span(o, content);
	put_str(o, "<|im_end|>\n");
}

/* Hermes tool blocks (Qwen 2.5 and 3): the tools listing, after which
 * the system block ends. */
static const char TOOLS_HEAD[] = "# Tools\n\nYou may call one or more functions "
	"to assist with the user query.\n\nYou are provided with function "
	"signatures within <tools></tools> XML tags:\n<tools>";
static const char TOOLS_TAIL[] = "\n</tools>\n\nFor each function call, return "
	"a json object with function name and arguments within "
	"<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
	"<function-name>, \"arguments\": <args-json-object>}\n"
	"</tool_call><|im_end|>\n";

static void hermes_tools(struct out *o, const struct chat_tools *t)
{
	put_str(o, TOOLS_HEAD);
	for (size_t i = 0; i < t->n; i++) {
		put_str(o, "\n");
		put(o, t->json[i], t->len[i]);
	}
	put_str(o, TOOLS_TAIL);
}

/* '<tool_call>\n{"name": "' name '", "arguments": ' args '}\n</tool_call>' */
static void hermes_call(struct out *o, const struct chat_call *c)
{
	put_str(o, "<tool_call>\n{\"name\": \"");
	put(o, c->name, c->name_len);
	put_str(o, "\", \"arguments\": ");
	put(o, c->arguments, c->arguments_len);
	put_str(o, "}\n</tool_call>");
}

/*
 * Tool message i: a run of them is one user turn,
 *   if first or messages[i-1].role != 'tool': '<|im_start|>user'
 *   '\n<tool_response>\n' + content + '\n</tool_response>'
 *   if last or messages[i+1].role != 'tool': '<|im_end|>\n'
 */
static void hermes_tool_msg(struct out *o, const struct chat_msg *msgs,
			    size_t n, size_t i)
{
	if (!i || msgs[i - 1].role != CHAT_MSG_TOOL)
		put_str(o, "<|im_start|>user");
	put_str(o, "\n<tool_response>\n");
	put_span(o, msg_span(&msgs[i]));
	put_str(o, "\n</tool_response>");
	if (i == n - 1 || msgs[i + 1].role != CHAT_MSG_TOOL)
		put_str(o, "<|im_end|>\n");
}

/*
 * Qwen2.5-Instruct with tools (or with tool messages or calls):
 *   '<|im_start|>system\n' + (messages[0].content if a system message
 *   else the default) + '\n\n' + the tools listing; without tools the
 *   system message (or the default) as ChatML.  Then per message: user,
 *   a later system, or an assistant without calls as ChatML; an
 *   assistant with calls '<|im_start|>assistant' + ('\n' + content if
 *   content) + per call '\n' + the call, then '<|im_end|>\n'; tool
 *   messages by hermes_tool_msg().
 */
static void render_qwen25(const struct chat_msg *msgs, size_t n,
			  const struct chat_tools *tools, bool gen, struct out *o)
{
	bool sys = msgs[0].role == CHAT_MSG_SYSTEM;
	struct span first = sys ? msg_span(&msgs[0]) :
		(struct span){ QWEN25_DEFAULT_SYSTEM, strlen(QWEN25_DEFAULT_SYSTEM) };

	if (tools && tools->n) {
		put_str(o, "<|im_start|>system\n");
		put_span(o, first);
		put_str(o, "\n\n");
		hermes_tools(o, tools);
	} else {
		chatml_msg(o, "system", first);
	}
	for (size_t i = sys ? 1 : 0; i < n; i++) {
		const struct chat_msg *m = &msgs[i];

		if (m->role == CHAT_MSG_TOOL) {
			hermes_tool_msg(o, msgs, n, i);
		} else if (m->role != CHAT_MSG_ASSISTANT || !m->n_calls) {
			chatml_msg(o, role_name(m->role), msg_span(m));
		} else {
			put_str(o, "<|im_start|>assistant");
			if (m->len) {
				put_str(o, "\n");
				put_span(o, msg_span(m));
			}
			for (size_t k = 0; k < m->n_calls; k++) {
				put_str(o, "\n");
				hermes_call(o, &m->calls[k]);
			}
			put_str(o, "<|im_end|>\n");
		}
	}
	if (gen)
		put_str(o, "<|im_start|>assistant\n");
}

/*
 * ChatML: per message '<|im_start|>' + role + '\n' + content +
 * '<|im_end|>\n', then '<|im_start|>assistant\n' when asked.  With a
 * default system prompt (Qwen2, Qwen2.5, SmolLM2), it is written first
 * as a system message when messages[0] is not one.
 */
static void render_chatml(const struct chat_msg *msgs, size_t n,
			  const char *default_system, bool gen, struct out *o)
{
	if (default_system && msgs[0].role != CHAT_MSG_SYSTEM)
		chatml_msg(o, "system", (struct span){ default_system,
						       strlen(default_system) });
	for (size_t i = 0; i < n; i++)
		chatml_msg(o, role_name(msgs[i].role), msg_span(&msgs[i]));
	if (gen)
		put_str(o, "<|im_start|>assistant\n");
}

/*
 * Qwen3's last_query_index: the last user message that is not a tool
 * response ('<tool_response>' ... '</tool_response>'), else n - 1.
 */
static size_t qwen3_last_query(const struct chat_msg *msgs, size_t n)
{
	for (size_t i = n; i-- > 0;) {
		struct span c = msg_span(&msgs[i]);

		if (msgs[i].role == CHAT_MSG_USER &&
		    !(span_starts(c, "<tool_response>") &&
		      span_ends(c, "</tool_response>")))
			return i;
	}
	return n - 1;
}

/*
 * Qwen3's assistant message i:
 *   content, reasoning = message.content, ''
 *   if '</think>' in content:
 *     content = content.split('</think>')[-1].lstrip('\n')
 *     reasoning = content.split('</think>')[0].rstrip('\n')
 *                        .split('<think>')[-1].lstrip('\n')
 *   after the last query, if last or reasoning:
 *     '<|im_start|>assistant\n<think>\n' + reasoning.strip('\n') +
 *     '\n</think>\n\n' + content.lstrip('\n')
 *   else '<|im_start|>assistant\n' + content; then '<|im_end|>\n'.
 */
static void qwen3_assistant(struct out *o, const struct chat_msg *m,
			    bool after_query, bool last)
{
	struct span content = msg_span(m), reasoning = { "", 0 };
	const char *end_think = span_find(content, "</think>");

	if (end_think) {
		const char *after = span_find_last(content, "</think>") + 8;
		struct span before = { content.p, (size_t)(end_think - content.p) };
		const char *open;

		before = strip_newlines(before, false, true);
		open = span_find_last(before, "<think>");
		if (open) {
			before.len -= (size_t)(open + 7 - before.p);
			before.p = open + 7;
		}
		reasoning = strip_newlines(before, true, false);
		content = strip_newlines((struct span){ after,
			(size_t)(content.p + content.len - after) }, true, false);
	}
	put_str(o, "<|im_start|>assistant\n");
	if (after_query && (last || reasoning.len)) {
		put_str(o, "<think>\n");
		put_span(o, strip_newlines(reasoning, true, true));
		put_str(o, "\n</think>\n\n");
		put_span(o, strip_newlines(content, true, false));
	} else {
		put_span(o, content);
	}
	/* the '\n' before a call tests the content variable, not the
	 * lstripped text written */
	for (size_t k = 0; k < m->n_calls; k++) {
		if (k || content.len)
			put_str(o, "\n");
		hermes_call(o, &m->calls[k]);
	}
	put_str(o, "<|im_end|>\n");
}

/*
 * Qwen/Qwen3-*: with tools, '<|im_start|>system\n' + (messages[0].content
 * + '\n\n' if a system message) + the tools listing; without, a first
 * system message as ChatML.  Then users and later system messages as
 * ChatML, assistants by qwen3_assistant(), tool messages by
 * hermes_tool_msg(), then '<|im_start|>assistant\n' when asked
 * (enable_thinking undefined).
 */
static void render_qwen3(const struct chat_msg *msgs, size_t n,
			 const struct chat_tools *tools, bool gen, struct out *o)
{
	size_t last_query = qwen3_last_query(msgs, n);

	if (tools && tools->n) {
		put_str(o, "<|im_start|>system\n");
		if (msgs[0].role == CHAT_MSG_SYSTEM) {
			put_span(o, msg_span(&msgs[0]));
			put_str(o, "\n\n");
		}
		hermes_tools(o, tools);
	} else if (msgs[0].role == CHAT_MSG_SYSTEM) {
		chatml_msg(o, "system", msg_span(&msgs[0]));
	}
	for (size_t i = 0; i < n; i++) {
		if (msgs[i].role == CHAT_MSG_ASSISTANT)
			qwen3_assistant(o, &msgs[i], i > last_query, i == n - 1);
		else if (msgs[i].role == CHAT_MSG_TOOL)
			hermes_tool_msg(o, msgs, n, i);
		else if (msgs[i].role == CHAT_MSG_USER || i > 0)
			chatml_msg(o, role_name(msgs[i].role), msg_span(&msgs[i]));
	}
	if (gen)
		put_str(o, "<|im_start|>assistant\n");
}

// ------------------------------------------------------------------------

bool chat_family_has_tools(enum chat_family f)
{
	return f == CHAT_FAMILY_QWEN25 || f == CHAT_FAMILY_QWEN3;
}

int chat_template_render(enum chat_family f, const struct chat_msg *msgs,
			 size_t n, const char *bos_text, const char *eos_text,
			 bool add_generation_prompt, struct strbuf *out,
			 char *err, size_t err_len)
{
	return chat_template_render_tools(f, msgs, n, NULL, bos_text, eos_text,
					  add_generation_prompt, out, err,
					  err_len);
}

/* A family without tools takes none, and no message of theirs. */
static int check_no_tools(enum chat_family f, const struct chat_msg *msgs,
			  size_t n, const struct chat_tools *tools, char *err,
			  size_t err_len)
{
	if (chat_family_has_tools(f))
		return 0;
	if (tools && tools->n)
		return err_fail(err, err_len, "tools: the chat template %s renders "
				"no tools (qwen2.5 and qwen3 do)", chat_family_name(f));
	for (size_t i = 0; i < n; i++)
		if (msgs[i].role == CHAT_MSG_TOOL || msgs[i].n_calls)
			return err_fail(err, err_len, "messages[%zu]: the chat template "
					"%s renders no %s", i, chat_family_name(f),
					msgs[i].n_calls ? "tool calls" : "tool messages");
	return 0;
}

int chat_template_render_tools(enum chat_family f, const struct chat_msg *msgs,
			       size_t n, const struct chat_tools *tools,
			       const char *bos_text, const char *eos_text,
			       bool add_generation_prompt, struct strbuf *out,
			       char *err, size_t err_len)
{
	struct out o = { out, 0 };
	int rc = 0;

	if (!n || !msgs)
		return err_fail(err, err_len, "messages: the conversation is empty");
	for (size_t i = 0; i < n; i++)
		if (msgs[i].role != CHAT_MSG_SYSTEM && msgs[i].role != CHAT_MSG_USER &&
		    msgs[i].role != CHAT_MSG_ASSISTANT && msgs[i].role != CHAT_MSG_TOOL)
			return err_fail(err, err_len, "messages[%zu]: unknown role", i);
		else if (msgs[i].n_calls && msgs[i].role != CHAT_MSG_ASSISTANT)
			return err_fail(err, err_len, "messages[%zu]: only an assistant "
					"message makes tool calls", i);
	rc = check_no_tools(f, msgs, n, tools, err, err_len);
	if (rc)
		return rc;
	switch (f) {
	case CHAT_FAMILY_LLAMA2:
		rc = render_llama2(msgs, n, bos_text, eos_text, &o, err, err_len);
		break;
	case CHAT_FAMILY_MISTRAL_V1:
	case CHAT_FAMILY_MIXTRAL:
		rc = render_mistral(msgs, n, f == CHAT_FAMILY_MISTRAL_V1, bos_text,
				    eos_text, &o, err, err_len);
		break;
	case CHAT_FAMILY_LLAMA3:
		render_llama3(msgs, n, bos_text, add_generation_prompt, &o);
		break;
	case CHAT_FAMILY_CHATML:
		render_chatml(msgs, n, NULL, add_generation_prompt, &o);
		break;
	case CHAT_FAMILY_QWEN2:
		render_chatml(msgs, n, QWEN2_DEFAULT_SYSTEM, add_generation_prompt, &o);
		break;
	case CHAT_FAMILY_QWEN25:
		render_qwen25(msgs, n, tools, add_generation_prompt, &o);
		break;
	case CHAT_FAMILY_SMOLLM:
		render_chatml(msgs, n, SMOLLM_DEFAULT_SYSTEM, add_generation_prompt, &o);
		break;
	case CHAT_FAMILY_QWEN3:
		render_qwen3(msgs, n, tools, add_generation_prompt, &o);
		break;
	case CHAT_FAMILY_ZEPHYR:
		render_zephyr(msgs, n, eos_text, add_generation_prompt, &o);
		break;
	default:
		return err_fail(err, err_len, "chat template: no family %d", (int)f);
	}
	if (rc)
		return rc;
	return o.rc;
}
