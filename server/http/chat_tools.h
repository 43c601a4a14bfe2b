/*
 * chat_tools.h - OpenAI's function tools on /v1/chat/completions: the
 * request's "tools", "tool_choice" and "parallel_tool_calls" read into a
 * tool set, the grammar that holds a required or named call to the
 * functions' parameter schemas, and the model's answer split into
 * content and tool calls (docs/DESIGN.md 2.9).
 *
 * The call form is Hermes', as Qwen 2.5 and Qwen 3 are trained on it
 * (text/chat_template.h renders the tools): each call is
 *   <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
 * and several follow one another, "\n" between.  tool_choice:
 *   "none"      tools are not rendered and nothing is parsed (vLLM's
 *               default for none);
 *   "auto"      (the default with tools) rendered; the answer is free and
 *               split afterwards: text before the first <tool_call> is
 *               the content, and the calls count only when everything
 *               from there on is well-formed calls of offered functions
 *               (else it all stays content, as vLLM's Hermes parser does);
 *   "required"  the answer is held by a grammar to one or more calls
 *               (one with parallel_tool_calls false) of any function,
 *               arguments valid for its parameters;
 *   {"type":"function","function":{"name":N}}  the same, exactly one call
 *               of N.
 */
#ifndef DYNBATCH_CHAT_TOOLS_H
#define DYNBATCH_CHAT_TOOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "text/chat_template.h"

/* Most tools a request may offer. */
#define CHAT_MAX_TOOLS 128
/* A function name: OpenAI's [a-zA-Z0-9_-]{1,64}. */
#define CHAT_TOOL_NAME_MAX 64

enum chat_tool_choice {
	CHAT_TOOLS_OFF,		/* no tools, or "none" */
	CHAT_TOOLS_AUTO,
	CHAT_TOOLS_REQUIRED,
	CHAT_TOOLS_NAMED,
};

struct chat_tool_set {
	enum chat_tool_choice choice;
	bool parallel;		/* parallel_tool_calls (default true) */
	uint32_t named;		/* CHAT_TOOLS_NAMED: the function's index */
	uint32_t n;		/* tools offered */
	char (*names)[CHAT_TOOL_NAME_MAX + 1];	/* n of them */
	/* each tool as the template's tojson writes it, for chat_tools */
	char **json;
	size_t *json_len;
	struct chat_tools render;	/* json/json_len/n for the template */
	char *grammar;		/* REQUIRED, NAMED: GBNF source; else NULL */
};

/*
 * obj's tool fields into *out (NULL when the request offers none, or
 * tool_choice is "none").  0; -EINVAL with err and *param naming the
 * field ("tools", "tool_choice", "parallel_tool_calls"); -ENOMEM.
 */
int chat_tools_parse(const json_t *obj, struct chat_tool_set **out, char *err,
		     size_t err_len, const char **param);
void chat_tools_free(struct chat_tool_set *t);

/* One call found in an answer. */
struct chat_tool_call {
	char id[32];		/* "call_" + 24 letters and digits */
	uint32_t fn;		/* index into the set's names */
	char *arguments;	/* the arguments object as tojson writes it */
	size_t arguments_len;
};

struct chat_tool_calls {
	size_t content_len;	/* the text before the first call */
	uint32_t n;
	struct chat_tool_call *calls;
};

/*
 * Split an answer's text by the rules above into *out (zeroed first):
 * 1 and calls in *out; 0 when it holds none (all of it is content);
 * -ENOMEM.  Call ids are made of req_id, the choice and the call's
 * place, so they are unique within a server's answers and replay the
 * same.  Call chat_tool_calls_release() in every case.
 */
int chat_tools_split(const struct chat_tool_set *t, const char *text,
		     size_t len, const char *req_id, uint32_t choice,
		     struct chat_tool_calls *out);
void chat_tool_calls_release(struct chat_tool_calls *c);

/*
 * How many leading bytes of a streamed answer's text so far may go out
 * as content now: all of it but a tail that could begin "<tool_call>"
 * (up to its first "<tool_call>", if one is there).  0 for the
 * constrained choices, which answer with calls only.
 */
size_t chat_tools_content_ready(const struct chat_tool_set *t,
				const char *text, size_t len);

/*
 * The "tool_calls" array of a message (stream false) or delta (true,
 * each call with its "index"), written unchecked at p (json_writer.h);
 * at most chat_tool_calls_bound() bytes.  Returns the new end.
 */
size_t chat_tool_calls_bound(const struct chat_tool_set *t,
			     const struct chat_tool_calls *c);
char *chat_put_tool_calls(char *p, const struct chat_tool_set *t,
			  const struct chat_tool_calls *c, bool stream);

#endif /* DYNBATCH_CHAT_TOOLS_H */
