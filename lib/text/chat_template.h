/*
 * chat_template.h - the chat templates of GGUF files: recognising the
 * Jinja source in `tokenizer.chat_template` as one of the common families
 * and rendering a conversation exactly as that template renders it.
 *
 * No Jinja interpreter: each family is written out in C from its
 * template's definition, and the test (tests/chat_templates/) holds every
 * family to the real template rendered by a Jinja engine, byte for byte.
 * A template that is not recognised is refused with a reason, so a server
 * answers 400 rather than guessing a prompt format (unless the operator
 * names a family with --chat-template NAME).
 *
 * The text is what the template writes: special tokens as their text
 * ("<|im_start|>", "[INST]"), bos_token/eos_token where the template puts
 * them.  Turning it into tokens needs a tokenizer that parses special
 * tokens (gguf_tokenizer.h); this module knows no tokens.
 *
 * String methods follow Python's Jinja2 (what transformers and llama.cpp
 * render with): strip()/trim with no argument remove Python's whitespace
 * (str.isspace: ASCII \t\n\v\f\r, space, \x1c-\x1f, U+0085, U+00A0,
 * U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000), and
 * strip('\n') removes only newlines.
 */
#ifndef DYNBATCH_CHAT_TEMPLATE_H
#define DYNBATCH_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "util/strbuf.h"

enum chat_family {
	CHAT_FAMILY_UNKNOWN = -1,
	CHAT_FAMILY_LLAMA2 = 0,	/* Llama-2-chat: <<SYS>>, BOS per [INST] turn */
	CHAT_FAMILY_MISTRAL_V1,	/* Mistral-7B-Instruct v0.1: "[/INST]" ANSWER EOS " " */
	CHAT_FAMILY_MIXTRAL,	/* Mixtral-8x7B-Instruct v0.1: ANSWER EOS, no space */
	CHAT_FAMILY_LLAMA3,	/* <|start_header_id|>ROLE<|end_header_id|>\n\n */
	CHAT_FAMILY_CHATML,	/* <|im_start|>ROLE\n...<|im_end|>\n, no default */
	CHAT_FAMILY_QWEN2,	/* ChatML, default "You are a helpful assistant." */
	CHAT_FAMILY_QWEN25,	/* ChatML, default "You are Qwen, created by ..." */
	CHAT_FAMILY_QWEN3,	/* ChatML, <think> blocks on the last answers */
	CHAT_FAMILY_SMOLLM,	/* ChatML, SmolLM2's default system prompt */
	CHAT_FAMILY_ZEPHYR,	/* <|user|>\n...EOS\n */
	CHAT_FAMILY_COUNT
};

/* The names chat_family_from_name() takes, as --help and errors list them. */
#define CHAT_FAMILY_NAMES \
	"llama2|mistral-v1|mixtral|llama3|chatml|qwen2|qwen2.5|qwen3|smollm|zephyr"

enum chat_msg_role {
	CHAT_MSG_SYSTEM,
	CHAT_MSG_USER,
	CHAT_MSG_ASSISTANT,
	CHAT_MSG_TOOL,		/* a tool's result (only where tools render) */
};

/* A tool call an assistant message made: the function's name and its
 * arguments as the template's tojson filter writes them (JSON text). */
struct chat_call {
	const char *name;
	size_t name_len;
	const char *arguments;
	size_t arguments_len;
};

/* One message; content is len bytes, any bytes (NUL included). */
struct chat_msg {
	enum chat_msg_role role;
	const char *content;
	size_t len;
	const struct chat_call *calls;	/* an assistant's calls, n_calls */
	size_t n_calls;
};

/* The tools a request offers, each as tojson writes the request's tool
 * object ({"type": "function", "function": {...}}): json[i], len[i]. */
struct chat_tools {
	const char *const *json;
	const size_t *len;
	size_t n;
};

/*
 * The family of a template's Jinja source (len bytes), or
 * CHAT_FAMILY_UNKNOWN with *why (when why is not NULL) set to a static
 * sentence saying what was not recognised.  Detection looks for
 * distinctive substrings (markers, default system prompts) and refuses
 * variants with features this module does not render (Llama 3.1's date
 * header and tools, Mistral v3/v7 tool and system markers, ChatML with an
 * unknown default system prompt).
 */
enum chat_family chat_template_detect(const char *jinja, size_t len,
				      const char **why);

/* The family named name (one of CHAT_FAMILY_NAMES), or CHAT_FAMILY_UNKNOWN. */
enum chat_family chat_family_from_name(const char *name);
/* Its name; "unknown" for anything else. */
const char *chat_family_name(enum chat_family f);

/*
 * The text that ends an assistant turn in family f, for the caller to
 * stop at (as a token or as text): "<|eot_id|>" (llama3), "<|im_end|>"
 * (the ChatML families), or NULL where it is the file's EOS token
 * (llama2, mistral-v1, mixtral, zephyr) or f is not a family.
 */
const char *chat_family_end_text(enum chat_family f);

/*
 * Append to *out the text family f's template renders for the n messages,
 * with bos_text/eos_text (NUL-terminated, NULL for "") as bos_token and
 * eos_token and add_generation_prompt as given.  Returns 0; -EINVAL with
 * err naming the message ("messages[3]: ...") where the template would
 * raise an exception (role order of llama2 and mistral) or n == 0 or f is
 * not a family; -ENOMEM.  On error *out may hold part of the text: the
 * caller discards it.
 *
 * Llama 3 as Meta's Llama-3-8B-Instruct ships it writes the assistant
 * header whatever add_generation_prompt says; this renders it only when
 * asked (as the later Llama 3 templates do): a chat request always asks.
 */
int chat_template_render(enum chat_family f, const struct chat_msg *msgs,
			 size_t n, const char *bos_text, const char *eos_text,
			 bool add_generation_prompt, struct strbuf *out,
			 char *err, size_t err_len);

/*
 * Whether family f renders tools, tool calls and tool messages: the
 * Hermes form of Qwen 2.5 and Qwen 3 (a "# Tools" system block listing
 * the tools in <tools></tools>, each call as
 * "<tool_call>\n{"name": N, "arguments": A}\n</tool_call>", a run of
 * tool messages as one user turn of <tool_response> blocks).
 */
bool chat_family_has_tools(enum chat_family f);

/*
 * chat_template_render() with tools (NULL or tools->n == 0: none).  A
 * family without tools (chat_family_has_tools()) refuses tools, calls
 * and tool messages with -EINVAL naming them.
 */
int chat_template_render_tools(enum chat_family f, const struct chat_msg *msgs,
			       size_t n, const struct chat_tools *tools,
			       const char *bos_text, const char *eos_text,
			       bool add_generation_prompt, struct strbuf *out,
			       char *err, size_t err_len);

#endif /* DYNBATCH_CHAT_TEMPLATE_H */
