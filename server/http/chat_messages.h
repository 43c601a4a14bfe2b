/*
 * chat_messages.h - a chat body's "messages" array read into
 * chat_message entries for the templates (chat_api.h).
 *
 * Each message is {"role": R, "content": C, ...}:
 *   - R is "system", "user", "assistant" or "tool";
 *   - C is a string or an array of {"type":"text","text":S} parts
 *     (concatenated as they are, no separator);
 *   - an assistant message may carry "tool_calls": [{"id": S, "type":
 *     "function", "function": {"name": S, "arguments": S}}, ...], OpenAI's
 *     shape; its content may then be null or absent (read as "").  The
 *     arguments string must hold a JSON object; it is parsed and written
 *     again as the templates' tojson writes it (json_py.h), as vLLM hands
 *     templates a parsed object;
 *   - a tool message ("role": "tool") carries the result as content and
 *     the call's "tool_call_id" (a string; templates do not render it).
 * Other message fields ("name", ...) are ignored, as they were before
 * tools.  Errors name the message and the field ("messages[2].tool_calls
 * [0].function.arguments ...").
 */
#ifndef DYNBATCH_CHAT_MESSAGES_H
#define DYNBATCH_CHAT_MESSAGES_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "text/chat_template.h"
#include "util/strbuf.h"

enum chat_role {
	CHAT_ROLE_SYSTEM,
	CHAT_ROLE_USER,
	CHAT_ROLE_ASSISTANT,
	CHAT_ROLE_TOOL,		/* a tool's result (chat_messages.h) */
};

/* "system", "user", "assistant", "tool" (chat_messages.c). */
const char *chat_role_name(enum chat_role r);

struct chat_message {
	enum chat_role role;
	const char *content;	/* len bytes (may hold any byte but NUL) */
	size_t len;
	/* an assistant's tool calls (text/chat_template.h), n_calls */
	const struct chat_call *calls;
	size_t n_calls;
};


/* Most tool calls one message may carry. */
#define CHAT_MAX_CALLS 128

struct chat_messages {
	struct chat_message *msgs;	/* n of them, malloc'd */
	size_t n;
	struct chat_call *calls;	/* all messages' calls, malloc'd */
	size_t n_calls;
	struct strbuf store;		/* the texts msgs and calls point into */
	bool has_tool_parts;		/* a tool message or a call is among them */
};

/* obj's "messages" into *out (zeroed first).  0, -EINVAL with err set,
 * or -ENOMEM.  Call chat_messages_release() in every case. */
int chat_messages_get(const json_t *obj, struct chat_messages *out, char *err,
		      size_t err_len);
void chat_messages_release(struct chat_messages *m);

#endif /* DYNBATCH_CHAT_MESSAGES_H */
