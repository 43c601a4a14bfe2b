/*
 * chat_tools.c - see chat_tools.h.
 *
 * NOTES ON THE DESIGN
 *
 * The constrained choices reuse JSON schemas (grammar/json_schema.h): a
 * call is itself a JSON object, {"name": {"const": N}, "arguments":
 * PARAMETERS}, so "required" is an anyOf over the offered functions' call
 * objects and a named choice is one of them; the Hermes tags around a
 * call are written as a GBNF root of our own.  A function's "$defs" move
 * to the root under "f<i>-<name>" with its "$ref"s rewritten to match, so
 * two functions' definitions never meet.  Each function's parameters are
 * first compiled alone, so an unsupported keyword is named with the tool
 * it is in.
 *
 * The answer's split follows the same form; the arguments are parsed
 * and written again as tojson writes them (json_py.h), so a call sent
 * back in a later assistant message renders as the model wrote it.
 */
#include "server/http/chat_tools.h"
#include "server/request/json_py.h"
#include "grammar/json_schema.h"
#include "util/err_fail.h"
#include "util/json_writer.h"
#include "util/strbuf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPEN_TAG "<tool_call>"
#define CLOSE_TAG "</tool_call>"

/* ------------------------------------------------------------------------
 * The request's fields
 * ---------------------------------------------------------------------- */

static bool name_ok(const char *s, size_t n)
{
	if (!n || n > CHAT_TOOL_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
			return false;
	return true;
}

/* Every key of o is one of keys (NULL-ended); else the error names it. */
static int keys_known(const json_t *o, const char *const *keys,
		      const char *where, char *err, size_t err_len)
{
	const char *k;
	json_t *v;

	json_object_foreach((json_t *)o, k, v) {
		size_t i;

		for (i = 0; keys[i] && strcmp(keys[i], k); i++)
			;
		if (!keys[i])
			return err_fail(err, err_len, "%s has an unknown member "
					"'%.64s'", where, k);
	}
	return 0;
}

static int tool_get(const json_t *tool, uint32_t i, struct chat_tool_set *t,
		    char *err, size_t err_len)
{
	static const char *const tool_keys[] = { "type", "function", NULL };
	static const char *const fn_keys[] = { "name", "description",
		"parameters", "strict", NULL };
	const json_t *fn = json_object_get(tool, "function");
	const json_t *type = json_object_get(tool, "type");
	const json_t *name, *v;
	char where[48];
	struct strbuf sb = STRBUF_INIT;
	int rc;

	snprintf(where, sizeof(where), "tools[%u]", i);
	if (!json_is_object(tool))
		return err_fail(err, err_len, "%s must be an object {\"type\":"
				"\"function\",\"function\":{...}}", where);
	rc = keys_known(tool, tool_keys, where, err, err_len);
	if (rc)
		return rc;
	if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
		return err_fail(err, err_len, "%s.type must be \"function\" (the "
				"only tool type)", where);
	snprintf(where, sizeof(where), "tools[%u].function", i);
	if (!json_is_object(fn))
		return err_fail(err, err_len, "%s must be an object", where);
	rc = keys_known(fn, fn_keys, where, err, err_len);
	if (rc)
		return rc;
	name = json_object_get(fn, "name");
	if (!json_is_string(name) ||
	    !name_ok(json_string_value(name), json_string_length(name)))
		return err_fail(err, err_len, "%s.name must be 1 to %d letters, "
				"digits, '_' or '-'", where, CHAT_TOOL_NAME_MAX);
	for (uint32_t j = 0; j < i; j++)
		if (!strcmp(t->names[j], json_string_value(name)))
			return err_fail(err, err_len, "%s.name '%s' is tools[%u]'s "
					"too: names must differ", where,
					json_string_value(name), j);
	if ((v = json_object_get(fn, "description")) && !json_is_string(v))
		return err_fail(err, err_len, "%s.description must be a string", where);
	if ((v = json_object_get(fn, "parameters")) && !json_is_object(v))
		return err_fail(err, err_len, "%s.parameters must be a JSON schema "
				"object", where);
	if ((v = json_object_get(fn, "strict")) && !json_is_boolean(v))
		return err_fail(err, err_len, "%s.strict must be true or false", where);
	strcpy(t->names[i], json_string_value(name));
	rc = json_py_dump(tool, &sb);
	if (rc == -EINVAL)
		return err_fail(err, err_len, "tools[%u] is nested too deep", i);
	if (rc) {
		strbuf_release(&sb);
		return -ENOMEM;
	}
	t->json[i] = sb.data ? sb.data : strdup("");
	t->json_len[i] = sb.len;
	return t->json[i] ? 0 : -ENOMEM;
}

/* tool_choice into t->choice (and t->named). */
static int choice_get(const json_t *v, struct chat_tool_set *t, char *err,
		      size_t err_len)
{
	const json_t *fn, *name, *type;

	if (!v || json_is_null(v)) {
		t->choice = t->n ? CHAT_TOOLS_AUTO : CHAT_TOOLS_OFF;
		return 0;
	}
	if (json_is_string(v)) {
		const char *s = json_string_value(v);

		if (!strcmp(s, "none"))
			t->choice = CHAT_TOOLS_OFF;
		else if (!strcmp(s, "auto"))
			t->choice = t->n ? CHAT_TOOLS_AUTO : CHAT_TOOLS_OFF;
		else if (!strcmp(s, "required"))
			t->choice = CHAT_TOOLS_REQUIRED;
		else
			return err_fail(err, err_len, "field 'tool_choice' is '%.40s': "
					"\"none\", \"auto\", \"required\" or "
					"{\"type\":\"function\",\"function\":"
					"{\"name\":...}}", s);
	} else if (json_is_object(v)) {
		type = json_object_get(v, "type");
		fn = json_object_get(v, "function");
		name = json_object_get(fn, "name");
		if (!json_is_string(type) || strcmp(json_string_value(type), "function") ||
		    !json_is_string(name) || json_object_size(v) != 2 ||
		    json_object_size(fn) != 1)
			return err_fail(err, err_len, "field 'tool_choice' as an object "
					"is {\"type\":\"function\",\"function\":"
					"{\"name\":...}}");
		for (t->named = 0; t->named < t->n; t->named++)
			if (!strcmp(t->names[t->named], json_string_value(name)))
				break;
		if (t->named == t->n)
			return err_fail(err, err_len, "field 'tool_choice' names the "
					"function '%.64s', which 'tools' does not "
					"offer", json_string_value(name));
		t->choice = CHAT_TOOLS_NAMED;
	} else {
		return err_fail(err, err_len, "field 'tool_choice' must be a string "
				"or an object");
	}
	if (t->choice == CHAT_TOOLS_REQUIRED && !t->n)
		return err_fail(err, err_len, "field 'tool_choice' is \"required\" "
				"but 'tools' offers no function");
	return 0;
}

/* ------------------------------------------------------------------------
 * The grammar of a required or named call
 * ---------------------------------------------------------------------- */

static bool ref_target(const char *r, const char **name)
{
	if (!strncmp(r, "#/$defs/", 8))
		*name = r + 8;
	else if (!strncmp(r, "#/definitions/", 14))
		*name = r + 14;
	else
		return false;
	return true;
}

/* Every "$ref" to a definition in v now points at f<fn>-<name>.  Values
 * that are data, not schemas (const, enum, default, examples), are left. */
static int rewrite_refs(json_t *v, uint32_t fn, int depth)
{
	const char *k, *name;
	json_t *x;
	size_t i;

	if (depth > JSON_PY_MAX_DEPTH)
		return -EINVAL;
	if (json_is_array(v)) {
		json_array_foreach(v, i, x)
			if (rewrite_refs(x, fn, depth + 1))
				return -EINVAL;
		return 0;
	}
	if (!json_is_object(v))
		return 0;
	json_object_foreach(v, k, x) {
		if (!strcmp(k, "const") || !strcmp(k, "enum") ||
		    !strcmp(k, "default") || !strcmp(k, "examples"))
			continue;
		if (!strcmp(k, "$ref") && json_is_string(x) &&
		    ref_target(json_string_value(x), &name)) {
			char buf[512];

			snprintf(buf, sizeof(buf), "#/$defs/f%u-%s", fn, name);
			if (json_string_set(x, buf))
				return -ENOMEM;
		} else if (rewrite_refs(x, fn, depth + 1)) {
			return -EINVAL;
		}
	}
	return 0;
}

/* Move params' definitions into defs as f<fn>-<name>. */
static int hoist_defs(json_t *params, uint32_t fn, json_t *defs)
{
	static const char *const keys[] = { "$defs", "definitions" };

	for (int j = 0; j < 2; j++) {
		json_t *d = json_object_get(params, keys[j]);
		const char *k;
		json_t *x;

		if (!json_is_object(d))
			continue;
		json_object_foreach(d, k, x) {
			char buf[512];

			snprintf(buf, sizeof(buf), "f%u-%s", fn, k);
			if (json_object_set(defs, buf, x))
				return -ENOMEM;
		}
		json_object_del(params, keys[j]);
	}
	return 0;
}

/* The call object schema of function i, its definitions hoisted. */
static json_t *call_schema(const json_t *tools, uint32_t i, const char *name,
			   json_t *defs, char *err, size_t err_len, int *rc)
{
	const json_t *fn = json_object_get(json_array_get(tools, i), "function");
	json_t *params = json_object_get(fn, "parameters");
	char *text, *gbnf, why[256];

	params = params ? json_deep_copy(params) :
		 json_pack("{s:s, s:{}}", "type", "object", "properties");
	if (!params) {
		*rc = -ENOMEM;
		return NULL;
	}
	/* alone first: an unsupported keyword is named in its tool */
	text = json_dumps(params, JSON_COMPACT);
	gbnf = text ? json_schema_to_gbnf(text, strlen(text), why, sizeof(why)) : NULL;
	free(text);
	if (!gbnf) {
		json_decref(params);
		*rc = text ? err_fail(err, err_len, "tools[%u].function.parameters: "
				      "%s", i, why) : -ENOMEM;
		return NULL;
	}
	free(gbnf);
	*rc = hoist_defs(params, i, defs);
	if (!*rc)
		*rc = rewrite_refs(params, i, 0);
	if (*rc) {
		json_decref(params);
		if (*rc == -EINVAL)
			*rc = err_fail(err, err_len, "tools[%u].function.parameters "
				       "is nested too deep", i);
		return NULL;
	}
	return json_pack("{s:s, s:{s:{s:s}, s:o}, s:[s,s], s:b}", "type", "object",
			 "properties", "name", "const", name, "arguments", params,
			 "required", "name", "arguments", "additionalProperties", 0);
}

static int build_grammar(const json_t *tools, struct chat_tool_set *t,
			 char *err, size_t err_len)
{
	json_t *defs = json_object(), *any = json_array(), *schema = NULL;
	char *text = NULL, *rules = NULL, why[256];
	struct strbuf sb = STRBUF_INIT;
	int rc = 0;

	if (!defs || !any) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < t->n && !rc; i++) {
		json_t *one;

		if (t->choice == CHAT_TOOLS_NAMED && i != t->named)
			continue;
		one = call_schema(tools, i, t->names[i], defs, err, err_len, &rc);
		if (one && json_array_append_new(any, one))
			rc = -ENOMEM;
	}
	if (rc)
		goto out;
	schema = json_array_size(any) == 1 ? json_incref(json_array_get(any, 0)) :
		 json_pack("{s:O}", "anyOf", any);
	if (!schema || (json_object_size(defs) &&
			json_object_set(schema, "$defs", defs))) {
		rc = -ENOMEM;
		goto out;
	}
	text = json_dumps(schema, JSON_COMPACT);
	rules = text ? json_schema_to_gbnf_rule(text, strlen(text), "tool-json",
						why, sizeof(why)) : NULL;
	if (!rules) {
		rc = text ? err_fail(err, err_len, "tools: the call schema: %s", why) :
		     -ENOMEM;
		goto out;
	}
	/* Hermes: calls one after another, "\n" between; a named choice
	 * makes one call */
	if (strbuf_printf(&sb, "root ::= tool-call%s\n"
			  "tool-call ::= \"" OPEN_TAG "\\n\" tool-json \"\\n"
			  CLOSE_TAG "\"\n%s",
			  t->parallel && t->choice == CHAT_TOOLS_REQUIRED ?
			  " ( \"\\n\" tool-call )*" : "", rules)) {
		rc = -ENOMEM;
		goto out;
	}
	t->grammar = sb.data;
	sb.data = NULL;
out:
	strbuf_release(&sb);
	free(rules);
	free(text);
	json_decref(schema);
	json_decref(any);
	json_decref(defs);
	return rc;
}

int chat_tools_parse(const json_t *obj, struct chat_tool_set **out, char *err,
		     size_t err_len, const char **param)
{
	const json_t *tools = json_object_get(obj, "tools");
	const json_t *par = json_object_get(obj, "parallel_tool_calls");
	struct chat_tool_set *t;
	size_t n;
	int rc = 0;

	*out = NULL;
	*param = "tools";
	if (tools && !json_is_null(tools) && !json_is_array(tools))
		return err_fail(err, err_len, "field 'tools' must be an array of "
				"{\"type\":\"function\",\"function\":{...}}");
	n = json_array_size(tools);
	if (n > CHAT_MAX_TOOLS)
		return err_fail(err, err_len, "field 'tools' has %zu tools: at most "
				"%d", n, CHAT_MAX_TOOLS);
	t = calloc(1, sizeof(*t));
	if (!t || !(t->names = calloc(n ? n : 1, sizeof(*t->names))) ||
	    !(t->json = calloc(n ? n : 1, sizeof(*t->json))) ||
	    !(t->json_len = calloc(n ? n : 1, sizeof(*t->json_len)))) {
		chat_tools_free(t);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n && !rc; i++, t->n = i)
		rc = tool_get(json_array_get(tools, i), i, t, err, err_len);
	if (!rc && par && !json_is_null(par) && !json_is_boolean(par)) {
		*param = "parallel_tool_calls";
		rc = err_fail(err, err_len, "field 'parallel_tool_calls' must be "
			      "true or false");
	}
	t->parallel = !json_is_false(par);
	if (!rc) {
		*param = "tool_choice";
		rc = choice_get(json_object_get(obj, "tool_choice"), t, err, err_len);
	}
	if (!rc && (t->choice == CHAT_TOOLS_REQUIRED || t->choice == CHAT_TOOLS_NAMED)) {
		*param = "tools";
		rc = build_grammar(tools, t, err, err_len);
	}
	if (rc || t->choice == CHAT_TOOLS_OFF) {
		chat_tools_free(t);
		return rc;
	}
	t->render = (struct chat_tools){ (const char *const *)t->json, t->json_len,
					 t->n };
	*param = NULL;
	*out = t;
	return 0;
}

void chat_tools_free(struct chat_tool_set *t)
{
	if (!t)
		return;
	for (uint32_t i = 0; t->json && i < t->n; i++)
		free(t->json[i]);
	free(t->json);
	free(t->json_len);
	free(t->names);
	free(t->grammar);
	free(t);
}

/* ------------------------------------------------------------------------
 * The answer
 * ---------------------------------------------------------------------- */

static const char *find(const char *s, size_t len, const char *needle)
{
	return memmem(s, len, needle, strlen(needle));
}

static size_t skip_space(const char *s, size_t i, size_t len)
{
	while (i < len && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' ||
			   s[i] == '\r'))
		i++;
	return i;
}

/* splitmix64: the id's letters from a hash of (request, choice, call) */
static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void make_id(char id[32], const char *req_id, uint32_t choice, uint32_t k)
{
	static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
				  "0123456789";
	uint64_t h = 0xcbf29ce484222325ull;	/* FNV-1a of the request id */

	for (const char *p = req_id ? req_id : ""; *p; p++)
		h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
	h = mix(h ^ ((uint64_t)choice << 32 | k));
	memcpy(id, "call_", 5);
	for (int i = 0; i < 24; i++) {	/* a fresh draw per letter */
		h = mix(h + 0x9e3779b97f4a7c15ull);
		id[5 + i] = abc[h % 62];
	}
	id[29] = 0;
}

/* The call in s[0..len) (between the tags): its function and arguments. */
static int call_parse(const struct chat_tool_set *t, const char *s, size_t len,
		      struct chat_tool_call *c)
{
	json_t *o = json_loadb(s, len, JSON_REJECT_DUPLICATES, NULL);
	json_t *name = json_object_get(o, "name");
	json_t *args = json_object_get(o, "arguments");
	struct strbuf sb = STRBUF_INIT;
	int rc = 0;

	if (!json_is_object(o) || json_object_size(o) != 2 ||
	    !json_is_string(name) || !json_is_object(args)) {
		json_decref(o);
		return 0;
	}
	for (c->fn = 0; c->fn < t->n; c->fn++)
		if (!strcmp(t->names[c->fn], json_string_value(name)))
			break;
	if (c->fn < t->n) {
		rc = json_py_dump(args, &sb);
		if (!rc) {
			c->arguments = sb.data ? sb.data : strdup("{}");
			c->arguments_len = sb.data ? sb.len : 2;
			rc = c->arguments ? 1 : -ENOMEM;
		} else {
			strbuf_release(&sb);
			rc = rc == -ENOMEM ? rc : 0;
		}
	}
	json_decref(o);
	return rc;
}

int chat_tools_split(const struct chat_tool_set *t, const char *text,
		     size_t len, const char *req_id, uint32_t choice,
		     struct chat_tool_calls *out)
{
	const char *open = t ? find(text, len, OPEN_TAG) : NULL;
	size_t i, cap = 0;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	if (!open)
		return 0;
	out->content_len = (size_t)(open - text);
	for (i = out->content_len; i < len && rc >= 0;) {
		const char *body = text + i + strlen(OPEN_TAG), *close;
		struct chat_tool_call *c;

		if (len - i < strlen(OPEN_TAG) || memcmp(text + i, OPEN_TAG,
							  strlen(OPEN_TAG)))
			break;
		close = find(body, len - (size_t)(body - text), CLOSE_TAG);
		if (!close)
			break;
		if (out->n == cap) {
			size_t ncap = cap ? 2 * cap : 4;
			struct chat_tool_call *p = realloc(out->calls, ncap * sizeof(*p));

			if (!p) {
				rc = -ENOMEM;
				break;
			}
			out->calls = p;
			cap = ncap;
		}
		c = &out->calls[out->n];
		memset(c, 0, sizeof(*c));
		rc = call_parse(t, body, (size_t)(close - body), c);
		if (rc <= 0)
			break;
		make_id(c->id, req_id, choice, out->n);
		out->n++;
		i = skip_space(text, (size_t)(close - text) + strlen(CLOSE_TAG), len);
	}
	if (rc < 0 || i < len || !out->n) {
		/* not all calls: the whole text is content */
		chat_tool_calls_release(out);
		return rc < 0 ? rc : 0;
	}
	return 1;
}

void chat_tool_calls_release(struct chat_tool_calls *c)
{
	for (uint32_t i = 0; c->calls && i < c->n; i++)
		free(c->calls[i].arguments);
	free(c->calls);
	memset(c, 0, sizeof(*c));
}

size_t chat_tools_content_ready(const struct chat_tool_set *t,
				const char *text, size_t len)
{
	const char *open;
	size_t k;

	if (!t || t->choice != CHAT_TOOLS_AUTO)
		return t ? 0 : len;
	open = find(text, len, OPEN_TAG);
	if (open)
		return (size_t)(open - text);
	/* a tail that may grow into the tag waits */
	for (k = strlen(OPEN_TAG) - 1; k > 0; k--)
		if (k <= len && !memcmp(text + len - k, OPEN_TAG, k))
			return len - k;
	return len;
}

/* {"index":K,"id":..,"type":"function","function":{"name":..,"arguments":..}} */
#define CALL_FIXED 96

size_t chat_tool_calls_bound(const struct chat_tool_set *t,
			     const struct chat_tool_calls *c)
{
	size_t n = 16;

	(void)t;
	for (uint32_t i = 0; c && i < c->n; i++)
		n += CALL_FIXED + JSON_TOKEN_MAX + sizeof(c->calls[i].id) +
		     CHAT_TOOL_NAME_MAX + json_strn_bound(c->calls[i].arguments_len);
	return n;
}

char *chat_put_tool_calls(char *p, const struct chat_tool_set *t,
			  const struct chat_tool_calls *c, bool stream)
{
	p = JSON_PUT_LIT(p, "\"tool_calls\":[");
	for (uint32_t i = 0; i < c->n; i++) {
		const struct chat_tool_call *x = &c->calls[i];

		if (i)
			*p++ = ',';
		*p++ = '{';
		if (stream) {
			p = JSON_PUT_LIT(p, "\"index\":");
			p = json_put_u64(p, i);
			*p++ = ',';
		}
		p = JSON_PUT_LIT(p, "\"id\":");
		p = json_put_str(p, x->id);
		p = JSON_PUT_LIT(p, ",\"type\":\"function\",\"function\":{\"name\":");
		p = json_put_str(p, t->names[x->fn]);
		p = JSON_PUT_LIT(p, ",\"arguments\":");
		p = json_put_strn(p, x->arguments, x->arguments_len);
		p = JSON_PUT_LIT(p, "}}");
	}
	*p++ = ']';
	return p;
}
