/*
 * chat_render.c - bin/chat_render: renders conversations with
 * lib/text/chat_template.c for the comparison against a Jinja engine
 * (tests/chat_templates/compare.js, make test-chat-templates).
 *
 *   chat_render CASES.json > RESULTS.json
 *
 * CASES.json: {"templates": {"ID": JINJA_SOURCE, ...},
 *              "cases": [{"template": "ID", "bos": S, "eos": S,
 *                         "add_generation_prompt": B,
 *                         "messages": [{"role": R, "content": S,
 *                                       "tool_calls": [{"function": {"name": S,
 *                                           "arguments": OBJ}}]}, ...],
 *                         "tools": [TOOL, ...]}]}
 * (tools and each tool's arguments written as tojson writes them,
 * server/request/json_py.h).
 * RESULTS.json: {"families": {"ID": FAMILY_NAME, ...},
 *                "results": [{"ok": true, "text": S} |
 *                            {"ok": false, "error": S}, ...]}
 * Each template is detected from its source (so detection is checked
 * too); a case whose template is unknown is an error result.  Exit 0,
 * or 1 with a message when the input cannot be read.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "text/chat_template.h"
#include "server/request/json_py.h"
#include "util/strbuf.h"

static int parse_role(const char *s, enum chat_msg_role *out)
{
	if (!strcmp(s, "system"))
		*out = CHAT_MSG_SYSTEM;
	else if (!strcmp(s, "user"))
		*out = CHAT_MSG_USER;
	else if (!strcmp(s, "assistant"))
		*out = CHAT_MSG_ASSISTANT;
	else if (!strcmp(s, "tool"))
		*out = CHAT_MSG_TOOL;
	else
		return -EINVAL;
	return 0;
}

/* Texts a case's tools and calls point into, each its own allocation. */
struct texts {
	struct strbuf *sb;
	size_t n, cap;
};

/* v as tojson writes it, kept in t: *p and *len, or -1. */
static int keep_json(struct texts *t, const json_t *v, const char **p, size_t *len)
{
	struct strbuf *sb;

	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 16;
		struct strbuf *x = realloc(t->sb, cap * sizeof(*x));

		if (!x)
			return -1;
		t->sb = x;
		t->cap = cap;
	}
	sb = &t->sb[t->n++];
	*sb = (struct strbuf)STRBUF_INIT;
	if (json_py_dump(v, sb))
		return -1;
	*p = sb->data ? sb->data : "";
	*len = sb->len;
	return 0;
}

/* messages[i]'s tool_calls into calls (malloc'd, *n). */
static int calls_get(json_t *e, struct texts *t, struct chat_call **calls,
		     size_t *n)
{
	json_t *tc = json_object_get(e, "tool_calls");

	*n = json_array_size(tc);
	*calls = *n ? calloc(*n, sizeof(**calls)) : NULL;
	if (*n && !*calls)
		return -1;
	for (size_t k = 0; k < *n; k++) {
		json_t *fn = json_object_get(json_array_get(tc, k), "function");
		json_t *name = json_object_get(fn, "name");

		if (!json_is_string(name) ||
		    keep_json(t, json_object_get(fn, "arguments"),
			      &(*calls)[k].arguments, &(*calls)[k].arguments_len))
			return -1;
		(*calls)[k].name = json_string_value(name);
		(*calls)[k].name_len = json_string_length(name);
	}
	return 0;
}

/* The result object of one case; NULL on a malformed case (said). */
static json_t *render_case(json_t *c, json_t *families, size_t idx)
{
	json_t *msgs = json_object_get(c, "messages");
	json_t *tools = json_object_get(c, "tools");
	const char *id = json_string_value(json_object_get(c, "template"));
	const char *fam = id ? json_string_value(json_object_get(families, id)) : NULL;
	size_t n = json_array_size(msgs), n_tools = json_array_size(tools);
	struct chat_msg *m = calloc(n ? n : 1, sizeof(*m));
	const char **tj = calloc(n_tools ? n_tools : 1, sizeof(*tj));
	size_t *tl = calloc(n_tools ? n_tools : 1, sizeof(*tl));
	struct texts t = { 0 };
	struct strbuf sb = STRBUF_INIT;
	char err[256] = "";
	json_t *res = NULL;
	int rc;

	if (!m || !tj || !tl || !fam || !json_is_array(msgs)) {
		fprintf(stderr, "chat_render: cases[%zu]: malformed\n", idx);
		goto out;
	}
	for (size_t i = 0; i < n_tools; i++)
		if (keep_json(&t, json_array_get(tools, i), &tj[i], &tl[i]))
			goto out;
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(msgs, i);
		json_t *content = json_object_get(e, "content");
		const char *role = json_string_value(json_object_get(e, "role"));
		struct chat_call *calls;

		if (!role || !json_is_string(content) || parse_role(role, &m[i].role) ||
		    calls_get(e, &t, &calls, &m[i].n_calls)) {
			fprintf(stderr, "chat_render: cases[%zu].messages[%zu]: "
				"malformed\n", idx, i);
			goto out;
		}
		m[i].calls = calls;
		m[i].content = json_string_value(content);
		m[i].len = json_string_length(content);
	}
	rc = chat_template_render_tools(chat_family_from_name(fam), m, n,
				  &(struct chat_tools){ tj, tl, n_tools },
				  json_string_value(json_object_get(c, "bos")),
				  json_string_value(json_object_get(c, "eos")),
				  json_is_true(json_object_get(c, "add_generation_prompt")),
				  &sb, err, sizeof(err));
	if (rc)
		res = json_pack("{s:b, s:s}", "ok", 0,
				"error", rc == -ENOMEM ? "out of memory" : err);
	else
		res = json_pack("{s:b, s:s%}", "ok", 1, "text", sb.data ? sb.data : "",
				sb.len);
out:
	strbuf_release(&sb);
	for (size_t i = 0; m && i < n; i++)
		free((void *)m[i].calls);
	for (size_t i = 0; i < t.n; i++)
		strbuf_release(&t.sb[i]);
	free(t.sb);
	free(tj);
	free(tl);
	free(m);
	return res;
}

int main(int argc, char **argv)
{
	json_error_t jerr;
	json_t *in, *families, *results, *out;
	const char *id;
	json_t *src;
	int status = 1;

	if (argc != 2) {
		fprintf(stderr, "usage: chat_render CASES.json\n");
		return 2;
	}
	in = json_load_file(argv[1], 0, &jerr);
	if (!in) {
		fprintf(stderr, "chat_render: %s:%d: %s\n", argv[1], jerr.line, jerr.text);
		return 1;
	}
	families = json_object();
	results = json_array();
	json_object_foreach(json_object_get(in, "templates"), id, src) {
		const char *why = NULL;
		enum chat_family f = chat_template_detect(json_string_value(src),
							  json_string_length(src), &why);

		json_object_set_new(families, id, json_string(chat_family_name(f)));
		if (f == CHAT_FAMILY_UNKNOWN)
			fprintf(stderr, "chat_render: template %s: %s\n", id, why);
	}
	for (size_t i = 0; i < json_array_size(json_object_get(in, "cases")); i++) {
		json_t *r = render_case(json_array_get(json_object_get(in, "cases"), i),
					families, i);

		if (!r)
			goto out;
		json_array_append_new(results, r);
	}
	out = json_pack("{s:O, s:O}", "families", families, "results", results);
	if (out && json_dumpf(out, stdout, JSON_COMPACT) == 0) {
		putchar('\n');
		status = 0;
	}
	json_decref(out);
out:
	json_decref(results);
	json_decref(families);
	json_decref(in);
	return status;
}
