/*
 * chat_messages.c - see chat_messages.h.
 *
 * Texts go to one store while it grows, recorded as offsets, and become
 * pointers once it no longer moves.
 */
#include "server/http/chat_messages.h"
#include "server/request/json_py.h"
#include "util/err_fail.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *const role_names[] = {
	[CHAT_ROLE_SYSTEM] = "system",
	[CHAT_ROLE_USER] = "user",
	[CHAT_ROLE_ASSISTANT] = "assistant",
	[CHAT_ROLE_TOOL] = "tool",
};
#define N_ROLES (sizeof(role_names) / sizeof(role_names[0]))

const char *chat_role_name(enum chat_role r)
{
	return (size_t)r < N_ROLES ? role_names[r] : "?";
}

/* Where a text lies in the store while it grows. */
struct span_at {
	size_t from, len;
};

struct call_at {
	struct span_at name, args;
};

struct msg_at {
	struct span_at content;
	size_t first_call, n_calls;
};

static struct span_at span_from(const struct strbuf *sb, size_t from)
{
	return (struct span_at){ from, sb->len - from };
}

/* "content": a string, or an array of {"type":"text","text":S} parts,
 * appended to store. */
static int content_get(const json_t *v, size_t i, struct strbuf *store,
		       char *err, size_t err_len)
{
	if (json_is_string(v))
		return strbuf_append(store, json_string_value(v),
				     json_string_length(v)) ? -ENOMEM : 0;
	if (!json_is_array(v))
		return err_fail(err, err_len, "messages[%zu].content must be a string "
			    "or an array of text parts", i);
	for (size_t j = 0; j < json_array_size(v); j++) {
		const json_t *part = json_array_get(v, j);
		const json_t *type = json_object_get(part, "type");
		const json_t *text = json_object_get(part, "text");

		if (!json_is_object(part))
			return err_fail(err, err_len, "messages[%zu].content[%zu] must "
				    "be an object {\"type\":\"text\",\"text\":...}",
				    i, j);
		if (!json_is_string(type) || strcmp(json_string_value(type), "text"))
			return err_fail(err, err_len, "messages[%zu].content[%zu].type "
				    "must be \"text\": only text parts are taken",
				    i, j);
		if (!json_is_string(text))
			return err_fail(err, err_len, "messages[%zu].content[%zu].text "
				    "must be a string", i, j);
		if (strbuf_append(store, json_string_value(text),
				  json_string_length(text)))
			return -ENOMEM;
	}
	return 0;
}

/* One of messages[i].tool_calls[k]: its name and arguments to the store. */
static int call_get(const json_t *tc, size_t i, size_t k, struct strbuf *store,
		    struct call_at *at, char *err, size_t err_len)
{
	const json_t *fn = json_object_get(tc, "function");
	const json_t *type = json_object_get(tc, "type");
	const json_t *id = json_object_get(tc, "id");
	const json_t *name = json_object_get(fn, "name");
	const json_t *args = json_object_get(fn, "arguments");
	json_error_t je;
	json_t *parsed;
	size_t from;
	int rc;

	if (!json_is_object(tc) || !json_is_object(fn))
		return err_fail(err, err_len, "messages[%zu].tool_calls[%zu] must be "
				"{\"id\":...,\"type\":\"function\",\"function\":"
				"{\"name\":...,\"arguments\":...}}", i, k);
	if (type && !(json_is_string(type) &&
		      !strcmp(json_string_value(type), "function")))
		return err_fail(err, err_len, "messages[%zu].tool_calls[%zu].type "
				"must be \"function\"", i, k);
	if (id && !json_is_string(id))
		return err_fail(err, err_len, "messages[%zu].tool_calls[%zu].id "
				"must be a string", i, k);
	if (!json_is_string(name) || !json_string_length(name))
		return err_fail(err, err_len, "messages[%zu].tool_calls[%zu].function"
				".name must be a non-empty string", i, k);
	if (!json_is_string(args))
		return err_fail(err, err_len, "messages[%zu].tool_calls[%zu].function"
				".arguments must be a string holding a JSON object",
				i, k);
	parsed = json_loadb(json_string_value(args), json_string_length(args),
			    JSON_REJECT_DUPLICATES, &je);
	if (!json_is_object(parsed)) {
		json_decref(parsed);
		return err_fail(err, err_len, "messages[%zu].tool_calls[%zu].function"
				".arguments is not a JSON object%s%s", i, k,
				parsed ? "" : ": ", parsed ? "" : je.text);
	}
	from = store->len;
	if (strbuf_append(store, json_string_value(name), json_string_length(name))) {
		json_decref(parsed);
		return -ENOMEM;
	}
	at->name = span_from(store, from);
	from = store->len;
	rc = json_py_dump(parsed, store);
	json_decref(parsed);
	if (rc == -EINVAL)
		return err_fail(err, err_len, "messages[%zu].tool_calls[%zu].function"
				".arguments is nested too deep", i, k);
	if (rc)
		return -ENOMEM;
	at->args = span_from(store, from);
	return 0;
}

/* messages[i]'s role into *role. */
static int role_get(const json_t *m, size_t i, enum chat_role *role, char *err,
		    size_t err_len)
{
	const json_t *v = json_object_get(m, "role");

	if (!json_is_string(v))
		return err_fail(err, err_len, "messages[%zu].role must be one of "
				"\"system\", \"user\", \"assistant\", \"tool\"", i);
	for (size_t r = 0; r < N_ROLES; r++)
		if (!strcmp(json_string_value(v), role_names[r])) {
			*role = (enum chat_role)r;
			return 0;
		}
	return err_fail(err, err_len, "messages[%zu].role is '%.40s': it must be "
			"one of \"system\", \"user\", \"assistant\", \"tool\"", i,
			json_string_value(v));
}

/* messages[i] into at (its calls appended to calls[*n_calls ..]). */
static int message_get(const json_t *m, size_t i, struct chat_messages *out,
		       struct msg_at *at, struct call_at **calls,
		       size_t *cap_calls, char *err, size_t err_len)
{
	const json_t *content = json_object_get(m, "content");
	const json_t *tcs = json_object_get(m, "tool_calls");
	const json_t *tcid = json_object_get(m, "tool_call_id");
	enum chat_role role = CHAT_ROLE_USER;
	size_t from;
	int rc;

	if (!json_is_object(m))
		return err_fail(err, err_len, "messages[%zu] must be an object "
				"{\"role\":...,\"content\":...}", i);
	rc = role_get(m, i, &role, err, err_len);
	if (rc)
		return rc;
	out->msgs[i].role = role;
	if (tcs && !json_is_null(tcs)) {
		if (role != CHAT_ROLE_ASSISTANT || !json_is_array(tcs))
			return err_fail(err, err_len, "messages[%zu].tool_calls %s", i,
					role != CHAT_ROLE_ASSISTANT ?
					"belongs to an assistant message" :
					"must be an array");
		if (json_array_size(tcs) > CHAT_MAX_CALLS)
			return err_fail(err, err_len, "messages[%zu].tool_calls has %zu "
					"calls: at most %u", i, json_array_size(tcs),
					CHAT_MAX_CALLS);
	}
	if (tcid && !json_is_null(tcid) &&
	    (role != CHAT_ROLE_TOOL || !json_is_string(tcid)))
		return err_fail(err, err_len, "messages[%zu].tool_call_id %s", i,
				role != CHAT_ROLE_TOOL ? "belongs to a tool message" :
				"must be a string");
	from = out->store.len;
	if ((!content || json_is_null(content)) && role == CHAT_ROLE_ASSISTANT &&
	    json_array_size(tcs)) {
		/* OpenAI: an assistant that calls tools may say nothing */
	} else if (!content) {
		return err_fail(err, err_len, "messages[%zu].content is missing", i);
	} else {
		rc = content_get(content, i, &out->store, err, err_len);
		if (rc)
			return rc;
	}
	at->content = span_from(&out->store, from);
	at->first_call = out->n_calls;
	at->n_calls = json_array_size(tcs);
	if (role == CHAT_ROLE_TOOL || at->n_calls)
		out->has_tool_parts = true;
	for (size_t k = 0; k < at->n_calls; k++) {
		if (out->n_calls == *cap_calls) {
			size_t cap = *cap_calls ? 2 * *cap_calls : 8;
			struct call_at *p = realloc(*calls, cap * sizeof(*p));

			if (!p)
				return -ENOMEM;
			*calls = p;
			*cap_calls = cap;
		}
		rc = call_get(json_array_get(tcs, k), i, k, &out->store,
			      &(*calls)[out->n_calls], err, err_len);
		if (rc)
			return rc;
		out->n_calls++;
	}
	return 0;
}

static const char *at_ptr(const struct strbuf *sb, struct span_at s)
{
	return sb->data ? sb->data + s.from : "";
}

int chat_messages_get(const json_t *obj, struct chat_messages *out, char *err,
		      size_t err_len)
{
	const json_t *arr = json_object_get(obj, "messages");
	struct call_at *calls = NULL;
	struct msg_at *at = NULL;
	size_t count, cap_calls = 0;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	if (!arr || json_is_null(arr))
		return err_fail(err, err_len, "missing required field 'messages'");
	if (!json_is_array(arr))
		return err_fail(err, err_len, "field 'messages' must be an array of "
			    "{\"role\":...,\"content\":...} objects");
	count = json_array_size(arr);
	if (!count)
		return err_fail(err, err_len, "field 'messages' must not be empty");
	out->msgs = calloc(count, sizeof(*out->msgs));
	at = calloc(count, sizeof(*at));
	if (!out->msgs || !at) {
		free(at);
		return -ENOMEM;
	}
	for (size_t i = 0; i < count && !rc; i++)
		rc = message_get(json_array_get(arr, i), i, out, &at[i], &calls,
				 &cap_calls, err, err_len);
	if (!rc && out->n_calls &&
	    !(out->calls = calloc(out->n_calls, sizeof(*out->calls))))
		rc = -ENOMEM;
	if (!rc) {
		/* the store no longer moves: point into it */
		for (size_t k = 0; k < out->n_calls; k++)
			out->calls[k] = (struct chat_call){
				at_ptr(&out->store, calls[k].name), calls[k].name.len,
				at_ptr(&out->store, calls[k].args), calls[k].args.len };
		for (size_t i = 0; i < count; i++) {
			out->msgs[i].content = at_ptr(&out->store, at[i].content);
			out->msgs[i].len = at[i].content.len;
			out->msgs[i].calls = at[i].n_calls ?
					     out->calls + at[i].first_call : NULL;
			out->msgs[i].n_calls = at[i].n_calls;
		}
		out->n = count;
	}
	free(calls);
	free(at);
	return rc;
}

void chat_messages_release(struct chat_messages *m)
{
	free(m->msgs);
	free(m->calls);
	strbuf_release(&m->store);
	memset(m, 0, sizeof(*m));
}
