/*
 * test_chat_tools.c - server/http/chat_tools.c and server/request/json_py.c.
 *
 *   - the tool fields' errors name the field and what is wrong;
 *   - the call grammar of a required or named choice accepts exactly the
 *     texts a naive validator written here accepts: random functions with
 *     random parameter schemas, and random candidate answers (valid calls
 *     and mutations of them: another name, a required property dropped,
 *     an extra one, a wrong type, a string too long, keys out of order,
 *     a broken tag, two calls, a tail);
 *   - the split of an answer into content and calls equals a reference
 *     split written another way, and a stream that sends what
 *     chat_tools_content_ready() allows, in random pieces, sends exactly
 *     the content and never a byte of a call;
 *   - json_py writes what Python's json.dumps writes (vectors from
 *     Python 3.11).
 * SEED= replays.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "grammar/grammar.h"
#include "server/http/chat_tools.h"
#include "server/request/json_py.h"
#include "util/strbuf.h"
#include "tests/unit/test_rng.h"

static json_t *load(const char *s)
{
	json_error_t je;
	json_t *v = json_loads(s, 0, &je);

	if (!v)
		fail_msg("bad test JSON: %s: %s", s, je.text);
	return v;
}

/* ------------------------------------------------------------------------
 * The fields
 */

static void expect_error(const char *body, const char *param, const char *want)
{
	json_t *obj = load(body);
	struct chat_tool_set *t = NULL;
	const char *p = NULL;
	char err[512] = "";
	int rc = chat_tools_parse(obj, &t, err, sizeof(err), &p);

	if (rc != -EINVAL || t || !p || strcmp(p, param) || !strstr(err, want))
		fail_msg("%s: rc %d param %s err '%s'; wanted param %s and '%s'",
			 body, rc, p ? p : "(null)", err, param, want);
	json_decref(obj);
}

#define FN(name) "{\"type\":\"function\",\"function\":{\"name\":\"" name "\"}}"

static void test_fields(void **state)
{
	static const char *const off[] = {
		"{}", "{\"tools\":[]}", "{\"tools\":null,\"tool_choice\":\"auto\"}",
		"{\"tools\":[" FN("f") "],\"tool_choice\":\"none\"}",
	};
	struct chat_tool_set *t;
	const char *p;
	char err[256];

	for (size_t i = 0; i < sizeof(off) / sizeof(off[0]); i++) {
		json_t *obj = load(off[i]);

		assert_int_equal(chat_tools_parse(obj, &t, err, sizeof(err), &p), 0);
		assert_null(t);
		json_decref(obj);
	}
	expect_error("{\"tools\":{}}", "tools", "must be an array");
	expect_error("{\"tools\":[3]}", "tools", "tools[0] must be an object");
	expect_error("{\"tools\":[{\"type\":\"web\"}]}", "tools", "tools[0].type");
	expect_error("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}",
		     "tools", "tools[0].function.name must be");
	expect_error("{\"tools\":[" FN("f") "," FN("f") "]}", "tools",
		     "tools[1].function.name 'f' is tools[0]'s too");
	expect_error("{\"tools\":[{\"type\":\"function\",\"x\":1,\"function\":{\"name\":\"f\"}}]}",
		     "tools", "tools[0] has an unknown member 'x'");
	expect_error("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
		     "\"parameters\":[]}}]}", "tools", "parameters must be a JSON schema");
	expect_error("{\"tools\":[" FN("f") "],\"tool_choice\":\"any\"}", "tool_choice",
		     "'tool_choice' is 'any'");
	expect_error("{\"tool_choice\":\"required\"}", "tool_choice", "offers no function");
	expect_error("{\"tools\":[" FN("f") "],\"tool_choice\":{\"type\":\"function\","
		     "\"function\":{\"name\":\"g\"}}}", "tool_choice", "names the function 'g'");
	expect_error("{\"tools\":[" FN("f") "],\"parallel_tool_calls\":1}",
		     "parallel_tool_calls", "true or false");
	/* an unsupported keyword is named with its tool */
	expect_error("{\"tools\":[" FN("f") ",{\"type\":\"function\",\"function\":{\"name\":"
		     "\"g\",\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":"
		     "{\"type\":\"string\",\"pattern\":\"a+\"}}}}}],\"tool_choice\":\"required\"}",
		     "tools", "tools[1].function.parameters: schema at /properties/x");
	{
		struct strbuf sb = STRBUF_INIT;
		json_t *obj;

		strbuf_append(&sb, "{\"tools\":[", 10);
		for (int i = 0; i <= CHAT_MAX_TOOLS; i++)
			strbuf_printf(&sb, "%s{\"type\":\"function\",\"function\":"
				      "{\"name\":\"f%d\"}}", i ? "," : "", i);
		strbuf_append(&sb, "]}", 3);
		obj = load(sb.data);
		assert_int_equal(chat_tools_parse(obj, &t, err, sizeof(err), &p), -EINVAL);
		assert_non_null(strstr(err, "at most"));
		json_decref(obj);
		strbuf_release(&sb);
	}
}

/* ------------------------------------------------------------------------
 * The call grammar against a naive validator
 */

enum ptype { P_STRING, P_INT, P_BOOL, P_ENUM, P_ARRAY, P_REF, P_COUNT };

struct prop {
	char name[8];
	enum ptype type;
	int max_len;		/* P_STRING; P_ARRAY: maxItems */
	bool required;
};

struct fn {
	char name[16];
	struct prop props[4];
	int n_props;
};

static const char *const ENUM_VALUES[] = { "red", "green", "blue" };

static void random_fn(struct rng *r, struct fn *f, int i)
{
	snprintf(f->name, sizeof(f->name), "%s%d", i % 2 ? "get_w" : "do-x", i);
	f->n_props = (int)rng_below(r, 5);
	for (int j = 0; j < f->n_props; j++) {
		struct prop *p = &f->props[j];

		snprintf(p->name, sizeof(p->name), "p%d", j);
		p->type = (enum ptype)rng_below(r, P_COUNT);
		p->max_len = 1 + (int)rng_below(r, 4);
		p->required = rng_below(r, 2);
	}
}

static void put_schema(struct strbuf *sb, const struct fn *f)
{
	bool any_req = false, refs = false;

	strbuf_printf(sb, "{\"type\":\"function\",\"function\":{\"name\":\"%s\","
		      "\"parameters\":{\"type\":\"object\",\"properties\":{", f->name);
	for (int j = 0; j < f->n_props; j++) {
		const struct prop *p = &f->props[j];

		strbuf_printf(sb, "%s\"%s\":", j ? "," : "", p->name);
		switch (p->type) {
		case P_STRING:
			strbuf_printf(sb, "{\"type\":\"string\",\"maxLength\":%d}",
				      p->max_len);
			break;
		case P_INT: strbuf_printf(sb, "{\"type\":\"integer\"}"); break;
		case P_BOOL: strbuf_printf(sb, "{\"type\":\"boolean\"}"); break;
		case P_ENUM:
			strbuf_printf(sb, "{\"enum\":[\"red\",\"green\",\"blue\"]}");
			break;
		case P_ARRAY:
			strbuf_printf(sb, "{\"type\":\"array\",\"items\":{\"type\":"
				      "\"integer\"},\"maxItems\":%d}", p->max_len);
			break;
		case P_REF:	/* a definition of this function's own */
			strbuf_printf(sb, "{\"$ref\":\"#/$defs/flag\"}");
			refs = true;
			break;
		case P_COUNT: break;
		}
	}
	strbuf_printf(sb, "},\"required\":[");
	for (int j = 0; j < f->n_props; j++)
		if (f->props[j].required) {
			strbuf_printf(sb, "%s\"%s\"", any_req ? "," : "", f->props[j].name);
			any_req = true;
		}
	strbuf_printf(sb, "]");
	if (refs)	/* another function's "flag" is another type */
		strbuf_printf(sb, ",\"$defs\":{\"flag\":{\"type\":\"%s\"}}",
			      f->name[0] == 'g' ? "boolean" : "integer");
	strbuf_printf(sb, "}}}");
}

/* A value of p's type (valid true) or of another. */
static void put_value(struct strbuf *sb, struct rng *r, const struct fn *f,
		      const struct prop *p, bool valid)
{
	enum ptype t = p->type;

	if (t == P_REF)
		t = f->name[0] == 'g' ? P_BOOL : P_INT;
	if (!valid)	/* a string for a number, a number for the rest */
		t = t == P_INT ? P_STRING : P_INT;
	switch (t) {
	case P_STRING: {
		int n = (int)rng_below(r, (uint32_t)p->max_len + 1);

		strbuf_append(sb, "\"", 1);
		/* letters, a lone backslash or quote (bad JSON), or \n */
		static const char chars[] = "ab\\\"z";

		for (int k = 0; k < n; k++)
			strbuf_append(sb, rng_below(r, 4) ? &chars[rng_below(r, 5)] :
				      "\\n", rng_below(r, 4) ? 1 : 2);
		strbuf_append(sb, "\"", 1);
		break;
	}
	case P_INT: strbuf_printf(sb, "%d", (int)rng_below(r, 2000) - 1000); break;
	case P_BOOL: strbuf_printf(sb, "%s", rng_below(r, 2) ? "true" : "false"); break;
	case P_ENUM: strbuf_printf(sb, "\"%s\"", ENUM_VALUES[rng_below(r, 3)]); break;
	case P_ARRAY: {
		int n = (int)rng_below(r, (uint32_t)p->max_len + 1);

		strbuf_append(sb, "[", 1);
		for (int k = 0; k < n; k++)
			strbuf_printf(sb, "%s%d", k ? ", " : "", (int)rng_below(r, 9));
		strbuf_append(sb, "]", 1);
		break;
	}
	default: break;
	}
}

/* One call's JSON, valid or with one mutation m (0: none). */
static void put_call_json(struct strbuf *sb, struct rng *r, const struct fn *fns,
			  int n_fns, int which, int m)
{
	const struct fn *f = &fns[which];
	const char *sp = rng_below(r, 2) ? " " : "";
	bool first = true;

	if (m == 6) {	/* keys out of order */
		strbuf_printf(sb, "{\"arguments\":{},%s\"name\":\"%s\"}", sp, f->name);
		return;
	}
	strbuf_printf(sb, "{\"name\":%s\"%s\",%s\"arguments\":%s{", sp,
		      m == 1 ? "nosuch" : f->name, sp, sp);
	for (int j = 0; j < f->n_props; j++) {
		const struct prop *p = &f->props[j];

		if (!p->required && rng_below(r, 2))
			continue;
		if (m == 2 && p->required)
			continue;	/* a required one dropped */
		strbuf_printf(sb, "%s\"%s\":%s", first ? "" : ",", p->name, sp);
		put_value(sb, r, f, p, m != 4);
		first = false;
	}
	if (m == 3)
		strbuf_printf(sb, "%s\"zz\":1", first ? "" : ",");
	strbuf_printf(sb, "}}");
	(void)n_fns;
}

/* The naive validator: one call's JSON text against the offered fns. */
static bool ref_value_ok(const json_t *v, const struct fn *f, const struct prop *p)
{
	enum ptype t = p->type == P_REF ? (f->name[0] == 'g' ? P_BOOL : P_INT) : p->type;
	size_t i;
	json_t *x;

	switch (t) {
	case P_STRING:
		return json_is_string(v) && json_string_length(v) <= (size_t)p->max_len;
	case P_INT: return json_is_integer(v);
	case P_BOOL: return json_is_boolean(v);
	case P_ENUM:
		for (int k = 0; k < 3; k++)
			if (json_is_string(v) && !strcmp(json_string_value(v), ENUM_VALUES[k]))
				return true;
		return false;
	case P_ARRAY:
		if (!json_is_array(v) || json_array_size(v) > (size_t)p->max_len)
			return false;
		json_array_foreach(v, i, x)
			if (!json_is_integer(x))
				return false;
		return true;
	default: return false;
	}
}

static bool ref_call_ok(const char *s, size_t len, const struct fn *fns, int n_fns,
			int only)
{
	json_t *o = json_loadb(s, len, JSON_REJECT_DUPLICATES, NULL);
	const char *k;
	json_t *v, *args;
	const struct fn *f = NULL;
	int last = -1;
	bool ok = false;

	if (!json_is_object(o) || json_object_size(o) != 2)
		goto out;
	/* the name comes first (the schema's order) */
	k = json_object_iter_key(json_object_iter(o));
	if (strcmp(k, "name") || !json_is_string(json_object_get(o, "name")))
		goto out;
	for (int i = 0; i < n_fns; i++)
		if ((only < 0 || only == i) &&
		    !strcmp(fns[i].name, json_string_value(json_object_get(o, "name"))))
			f = &fns[i];
	args = json_object_get(o, "arguments");
	if (!f || !json_is_object(args))
		goto out;
	json_object_foreach(args, k, v) {
		int j;

		for (j = 0; j < f->n_props && strcmp(f->props[j].name, k); j++)
			;
		/* known, in the schema's order, of its type */
		if (j == f->n_props || j <= last || !ref_value_ok(v, f, &f->props[j]))
			goto out;
		last = j;
	}
	for (int j = 0; j < f->n_props; j++)
		if (f->props[j].required && !json_object_get(args, f->props[j].name))
			goto out;
	ok = true;
out:
	json_decref(o);
	return ok;
}

/* The naive reading of an answer under a constrained choice: calls
 * "<tool_call>\n" JSON "\n</tool_call>" joined by "\n", each valid;
 * one for a named choice (only >= 0) or parallel false. */
static bool ref_answer_ok(const char *s, size_t len, const struct fn *fns,
			  int n_fns, int only, bool parallel)
{
	size_t i = 0;
	int calls = 0;

	for (;;) {
		const char *end;

		if (len - i < 12 || memcmp(s + i, "<tool_call>\n", 12))
			return false;
		i += 12;
		end = memmem(s + i, len - i, "\n</tool_call>", 13);
		if (!end || !ref_call_ok(s + i, (size_t)(end - (s + i)), fns, n_fns, only))
			return false;
		i = (size_t)(end - s) + 13;
		calls++;
		if (i == len)
			return true;
		if (!parallel || only >= 0 || s[i] != '\n')
			return false;
		i++;
	}
	(void)calls;
}

static bool grammar_accepts(const struct grammar *g, const char *s, size_t len)
{
	struct grammar_matcher *m = grammar_matcher_create(g);
	bool ok = m != NULL;

	for (size_t i = 0; ok && i < len; i++)
		ok = grammar_matcher_accept_byte(m, (uint8_t)s[i]) == 0;
	ok = ok && grammar_matcher_is_accepting(m);
	grammar_matcher_destroy(m);
	return ok;
}

#define GRAMMAR_ROUNDS 60
#define CANDIDATES 60

static void test_call_grammar(void **state)
{
	struct rng r = rng_for(2);
	int agree_valid = 0, agree_invalid = 0;

	for (int round = 0; round < GRAMMAR_ROUNDS; round++) {
		struct fn fns[4];
		int n_fns = 1 + (int)rng_below(&r, 4);
		int named = rng_below(&r, 2) ? (int)rng_below(&r, (uint32_t)n_fns) : -1;
		bool parallel = rng_below(&r, 2);
		struct strbuf body = STRBUF_INIT;
		struct chat_tool_set *t;
		struct grammar *g;
		const char *p;
		char err[512];
		json_t *obj;

		for (int i = 0; i < n_fns; i++)
			random_fn(&r, &fns[i], i);
		strbuf_printf(&body, "{\"tools\":[");
		for (int i = 0; i < n_fns; i++) {
			if (i)
				strbuf_append(&body, ",", 1);
			put_schema(&body, &fns[i]);
		}
		if (named >= 0)
			strbuf_printf(&body, "],\"tool_choice\":{\"type\":\"function\","
				      "\"function\":{\"name\":\"%s\"}}", fns[named].name);
		else
			strbuf_printf(&body, "],\"tool_choice\":\"required\"");
		strbuf_printf(&body, ",\"parallel_tool_calls\":%s}", parallel ? "true" : "false");
		obj = load(body.data);
		if (chat_tools_parse(obj, &t, err, sizeof(err), &p) || !t || !t->grammar)
			fail_msg("round %d: %s: %s", round, body.data, err);
		g = grammar_parse(t->grammar, strlen(t->grammar), err, sizeof(err));
		if (!g)
			fail_msg("round %d: the call grammar: %s\n%s", round, err, t->grammar);
		for (int c = 0; c < CANDIDATES; c++) {
			struct strbuf s = STRBUF_INIT;
			int n_calls = 1 + (rng_below(&r, 3) == 0);
			int mut = rng_below(&r, 2) ? 0 : 1 + (int)rng_below(&r, 8);
			bool want, got;

			for (int k = 0; k < n_calls; k++) {
				int which = named >= 0 && rng_below(&r, 4) ? named :
					    (int)rng_below(&r, (uint32_t)n_fns);

				if (k)
					strbuf_append(&s, "\n", 1);
				strbuf_append(&s, mut == 7 ? "<tool_cal>\n" : "<tool_call>\n",
					      mut == 7 ? 11 : 12);
				put_call_json(&s, &r, fns, n_fns, which, k ? 0 : mut);
				strbuf_append(&s, "\n</tool_call>", 13);
			}
			if (mut == 8)
				strbuf_append(&s, " tail", 5);
			want = ref_answer_ok(s.data, s.len, fns, n_fns, named, parallel);
			got = grammar_accepts(g, s.data, s.len);
			if (want != got)
				fail_msg("round %d candidate %d (mutation %d): grammar %s, "
					 "reference %s:\n%s\nschema %s\ngrammar:\n%s (SEED=%llu)",
					 round, c, mut, got ? "accepts" : "refuses",
					 want ? "accepts" : "refuses", s.data, body.data,
					 t->grammar, test_seed);
			want ? agree_valid++ : agree_invalid++;
			strbuf_release(&s);
		}
		grammar_destroy(g);
		chat_tools_free(t);
		json_decref(obj);
		strbuf_release(&body);
	}
	printf("call grammar: %d valid and %d invalid answers judged alike\n",
	       agree_valid, agree_invalid);
	/* both kinds were met: the comparison was not one-sided */
	assert_true(agree_valid > GRAMMAR_ROUNDS && agree_invalid > GRAMMAR_ROUNDS);
}

/* ------------------------------------------------------------------------
 * The split and the stream's hold
 */

static struct chat_tool_set *two_tools(const char *choice)
{
	char body[512], err[256];
	struct chat_tool_set *t;
	const char *p;
	json_t *obj;

	snprintf(body, sizeof(body), "{\"tools\":[" FN("f") "," FN("g") "],"
		 "\"tool_choice\":%s}", choice);
	obj = load(body);
	assert_int_equal(chat_tools_parse(obj, &t, err, sizeof(err), &p), 0);
	assert_non_null(t);
	json_decref(obj);
	return t;
}

static const char *const PIECES[] = {
	"hi ", "<tool_call>", "</tool_call>", "\n", " ", "<tool_", "call>",
	"{\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5e3]}}",
	"{\"name\":\"g\",\"arguments\":{}}", "{\"name\": \"h\", \"arguments\": {}}",
	"{\"name\": \"f\"}", "{\"name\": \"f\", \"arguments\": 3}", "<", "x<t",
	"{\"name\": \"f\", \"arguments\": {}, \"z\": 1}", "é",
};
#define N_PIECES (sizeof(PIECES) / sizeof(PIECES[0]))

/* The reference split: content up to the first tag; the rest must be
 * blocks OPEN json CLOSE with whitespace around, each json an object of
 * exactly name (offered) and arguments (an object). */
static int ref_split(const char *s, size_t len, size_t *content_len, int *n_calls)
{
	const char *open = memmem(s, len, "<tool_call>", 11);
	const char *at, *end = s + len;

	*n_calls = 0;
	if (!open)
		return 0;
	*content_len = (size_t)(open - s);
	at = open;
	while (at < end) {
		const char *close;
		json_t *o, *name;
		bool ok;

		if ((size_t)(end - at) < 11 || memcmp(at, "<tool_call>", 11))
			return 0;
		close = memmem(at + 11, (size_t)(end - at - 11), "</tool_call>", 12);
		if (!close)
			return 0;
		o = json_loadb(at + 11, (size_t)(close - at - 11), 0, NULL);
		name = json_object_get(o, "name");
		ok = json_object_size(o) == 2 && json_is_string(name) &&
		     (!strcmp(json_string_value(name), "f") ||
		      !strcmp(json_string_value(name), "g")) &&
		     json_is_object(json_object_get(o, "arguments"));
		json_decref(o);
		if (!ok)
			return 0;
		(*n_calls)++;
		at = close + 12;
		while (at < end && strchr(" \n\t\r", *at))
			at++;
	}
	return 1;
}

static void test_split_and_hold(void **state)
{
	struct rng r = rng_for(3);
	struct chat_tool_set *t = two_tools("\"auto\"");
	int with_calls = 0;

	for (int round = 0; round < 4000; round++) {
		struct strbuf s = STRBUF_INIT, sent = STRBUF_INIT, held = STRBUF_INIT;
		struct chat_tool_calls calls;
		int n = (int)rng_below(&r, 9), want_calls = 0, rc;
		size_t want_content = 0, at = 0;

		/* sometimes a well-formed tail of calls */
		for (int i = 0; i < n; i++) {
			const char *pc = PIECES[rng_below(&r, N_PIECES)];

			strbuf_append(&s, pc, strlen(pc));
		}
		if (rng_below(&r, 2))
			for (int k = (int)rng_below(&r, 3); k >= 0; k--)
				strbuf_printf(&s, "<tool_call>\n%s\n</tool_call>%s",
					      PIECES[7 + rng_below(&r, 2)],
					      rng_below(&r, 2) ? "\n" : "");
		rc = chat_tools_split(t, s.data ? s.data : "", s.len, "req", 0, &calls);
		if (ref_split(s.data ? s.data : "", s.len, &want_content, &want_calls) !=
		    (rc > 0) || (rc > 0 && (calls.content_len != want_content ||
					    (int)calls.n != want_calls)))
			fail_msg("round %d: split %d (%u calls, content %zu), reference "
				 "%d calls content %zu: %.*s (SEED=%llu)", round, rc,
				 calls.n, calls.content_len, want_calls, want_content,
				 (int)s.len, s.data, test_seed);
		for (uint32_t k = 0; k < calls.n; k++) {
			/* arguments as Python writes them; ids unique */
			json_t *a = json_loadb(calls.calls[k].arguments,
					       calls.calls[k].arguments_len, 0, NULL);

			assert_true(json_is_object(a));
			json_decref(a);
			assert_int_equal(strlen(calls.calls[k].id), 29);
			if (k)
				assert_string_not_equal(calls.calls[k].id,
							calls.calls[k - 1].id);
		}
		with_calls += rc > 0;
		/* a stream in random pieces sends what may go out */
		while (at < s.len) {
			size_t step = 1 + rng_below(&r, 8), ready;

			if (step > s.len - at)
				step = s.len - at;
			strbuf_append(&held, s.data + at, step);
			at += step;
			ready = chat_tools_content_ready(t, held.data, held.len);
			strbuf_append(&sent, held.data, ready);
			memmove(held.data, held.data + ready, held.len - ready);
			held.len -= ready;
		}
		/* never a byte at or after the first tag; all the content when
		 * the answer has calls, all of it otherwise once the rest goes */
		{
			const char *open = s.len ? memmem(s.data, s.len, "<tool_call>", 11) : NULL;
			size_t limit = open ? (size_t)(open - s.data) : s.len;

			assert_true(sent.len <= limit);
			assert_memory_equal(sent.data ? sent.data : "", s.data ? s.data : "",
					    sent.len);
			assert_int_equal(sent.len + held.len, s.len);
		}
		chat_tool_calls_release(&calls);
		strbuf_release(&s);
		strbuf_release(&sent);
		strbuf_release(&held);
	}
	printf("split: %d of 4000 answers held calls\n", with_calls);
	assert_true(with_calls > 400);
	chat_tools_free(t);
	/* the constrained choices send nothing before the end */
	t = two_tools("\"required\"");
	assert_int_equal(chat_tools_content_ready(t, "plain text", 10), 0);
	chat_tools_free(t);
}

/* ------------------------------------------------------------------------
 * json_py against Python's json.dumps(v, ensure_ascii=False)
 */

static void test_json_py(void **state)
{
	static const struct { const char *in, *py; } v[] = {
		{ "{\"a\":1,\"b\":[true,false,null],\"c\":{}}",
		  "{\"a\": 1, \"b\": [true, false, null], \"c\": {}}" },
		{ "[1.0, 0.5, -0.0, 1e16, 1e15, 0.0001, 0.00001, 123.456, 2.5e-5]",
		  "[1.0, 0.5, -0.0, 1e+16, 1000000000000000.0, 0.0001, 1e-05, "
		  "123.456, 2.5e-05]" },
		{ "[1e300, 1.7976931348623157e308, 5e-324, 0.1, 100.0, 1e22, 3.14159]",
		  "[1e+300, 1.7976931348623157e+308, 5e-324, 0.1, 100.0, 1e+22, 3.14159]" },
		{ "[\"\\u00e9\\n\\t\\\"\\\\\\u0001\\u007f\\u2028/\"]",
		  "[\"\xc3\xa9\\n\\t\\\"\\\\\\u0001\x7f\xe2\x80\xa8/\"]" },
		{ "{\"k\":\"\\b\\f\\r\\u0000\"}", "{\"k\": \"\\b\\f\\r\\u0000\"}" },
		{ "[-9223372036854775808, 9223372036854775807, []]",
		  "[-9223372036854775808, 9223372036854775807, []]" },
	};

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		json_t *j = json_loads(v[i].in, JSON_ALLOW_NUL, NULL);
		struct strbuf sb = STRBUF_INIT;

		assert_non_null(j);
		assert_int_equal(json_py_dump(j, &sb), 0);
		if (strcmp(sb.data, v[i].py))
			fail_msg("json_py %s: got %s, Python writes %s", v[i].in, sb.data,
				 v[i].py);
		strbuf_release(&sb);
		json_decref(j);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fields),
		cmocka_unit_test(test_call_grammar),
		cmocka_unit_test(test_split_and_hold),
		cmocka_unit_test(test_json_py),
	};

	test_seed_init("chat_tools");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
