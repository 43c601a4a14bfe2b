/*
 * json_schema.c - JSON schema to GBNF; see json_schema.h.
 *
 * Each schema node becomes a rule s<N>; the shared JSON rules (value,
 * string, number, ...) follow.  An object with properties p1..pn in
 * order becomes, per property i, two rules: o<N>-a<i> (the members from
 * i on when none came before: no leading comma) and o<N>-b<i> (after one
 * came: each with a comma).  a_i is "kv_i b_{i+1}" for a required
 * property and "kv_i b_{i+1} | a_{i+1}" for an optional one, b_i is
 * "(, kv_i) b_{i+1}" with the group optional for an optional property:
 * linear in the number of properties, and every sentence has each
 * required property once, optional ones at most once, in order.
 * $ref targets are generated once, by name, so recursive schemas work.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "grammar/json_schema.h"
#include "util/strbuf.h"

#define MAX_SCHEMA_DEPTH 64

static const char JSON_RULES[] =
	"ws ::= [ \\t\\n]{0,8}\n"
	"value ::= object | array | string | number | boolean | null\n"
	"object ::= \"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* )? \"}\"\n"
	"array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
	"string ::= \"\\\"\" char* \"\\\"\"\n"
	/* \u escapes of the basic plane but no surrogate halves: a lone
	 * half is not a character, and parsers refuse it (characters past
	 * the basic plane come as UTF-8) */
	"char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" hex4 )\n"
	"hex4 ::= [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}\n"
	"integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
	"number ::= integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?\n"
	"boolean ::= \"true\" | \"false\"\n"
	"null ::= \"null\"\n";

struct conv {
	struct strbuf out;
	json_t *root;
	json_t *refs;		/* ref string -> rule number */
	unsigned n_rules;
	char *err;
	size_t err_len;
	int failed;
};

static void cerr(struct conv *c, const char *path, const char *fmt, ...)
{
	va_list ap;
	int k;

	if (c->failed)
		return;
	c->failed = 1;
	if (!c->err || !c->err_len)
		return;
	k = snprintf(c->err, c->err_len, "schema at %s: ", *path ? path : "/");
	if (k < 0 || (size_t)k >= c->err_len)
		return;
	va_start(ap, fmt);
	vsnprintf(c->err + k, c->err_len - (size_t)k, fmt, ap);
	va_end(ap);
}

/* A JSON value's exact text as a GBNF string literal. */
static int put_literal(struct conv *c, json_t *v)
{
	char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	const char *p;
	int rc = 0;

	if (!s)
		return -ENOMEM;
	rc |= strbuf_append(&c->out, "\"", 1);
	for (p = s; *p && !rc; p++) {
		if (*p == '"' || *p == '\\')
			rc |= strbuf_append(&c->out, "\\", 1);
		rc |= strbuf_append(&c->out, p, 1);
	}
	rc |= strbuf_append(&c->out, "\"", 1);
	free(s);
	return rc;
}

static int gen(struct conv *c, json_t *s, const char *path, int depth);

static const char *const ANNOTATIONS[] = { "title", "description", "$schema",
	"$id", "$comment", "default", "examples", "$defs", "definitions", NULL };

static int known(const char *k, const char *const *list)
{
	for (; *list; list++)
		if (!strcmp(k, *list))
			return 1;
	return 0;
}

/* Refuse keywords outside allowed (and the annotations). */
static int check_keys(struct conv *c, json_t *s, const char *path,
		      const char *const *allowed)
{
	const char *k;
	json_t *v;

	json_object_foreach(s, k, v) {
		if (!known(k, allowed) && !known(k, ANNOTATIONS)) {
			cerr(c, path, "unsupported keyword '%s'", k);
			return -1;
		}
	}
	return 0;
}

static int sub_path(char *buf, size_t n, const char *path, const char *a,
		    const char *b)
{
	snprintf(buf, n, "%s/%s%s%s", path, a, b ? "/" : "", b ? b : "");
	return 0;
}

static int ulimit(struct conv *c, json_t *s, const char *key, const char *path,
		  long long *out)
{
	json_t *v = json_object_get(s, key);

	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > 10000) {
		cerr(c, path, "'%s' must be an integer in 0..10000", key);
		return -1;
	}
	*out = json_integer_value(v);
	return 0;
}

/* The body of an object type: writes rules, returns the start's name. */
static int gen_object(struct conv *c, json_t *s, unsigned id, const char *path,
		      int depth)
{
	json_t *props = json_object_get(s, "properties");
	json_t *req = json_object_get(s, "required");
	json_t *ap = json_object_get(s, "additionalProperties");
	size_t n = 0, i;
	const char *k;
	json_t *v;
	unsigned *kv;
	int *is_req;
	int rc = -1;

	if (ap && !json_is_false(ap)) {
		cerr(c, path, "unsupported keyword 'additionalProperties' "
		     "other than false");
		return -1;
	}
	if (props && !json_is_object(props)) {
		cerr(c, path, "'properties' must be an object");
		return -1;
	}
	if (req && !json_is_array(req)) {
		cerr(c, path, "'required' must be an array");
		return -1;
	}
	if (!props && !ap)	/* {"type": "object"}: any object */
		return strbuf_printf(&c->out, "o%u ::= object\n", id);
	n = props ? json_object_size(props) : 0;
	kv = calloc(n + 1, sizeof(unsigned));
	is_req = calloc(n + 1, sizeof(int));
	if (!kv || !is_req)
		goto out;
	i = 0;
	if (props) {
		json_object_foreach(props, k, v) {
			char sub[512];
			size_t j;
			json_t *r;

			sub_path(sub, sizeof(sub), path, "properties", k);
			json_array_foreach(req, j, r)
				if (json_is_string(r) && !strcmp(json_string_value(r), k))
					is_req[i] = 1;
			if (gen(c, v, sub, depth + 1) < 0)
				goto out;
			kv[i++] = c->n_rules - 1;
		}
	}
	if (req) {
		json_t *r;

		json_array_foreach(req, i, r) {
			if (!json_is_string(r) || !props ||
			    !json_object_get(props, json_string_value(r))) {
				cerr(c, path, "required property %s is not in "
				     "'properties'", json_is_string(r) ?
				     json_string_value(r) : "(not a string)");
				goto out;
			}
		}
	}
	/* a_i and b_i, from the end; kv_i is key ws : ws value */
	i = 0;
	if (props) {
		json_object_foreach(props, k, v) {
			json_t *key = json_string(k);
			int e = 0;

			e |= strbuf_printf(&c->out, "o%u-kv%zu ::= ", id, i);
			e |= key ? put_literal(c, key) : -1;
			e |= strbuf_printf(&c->out, " ws \":\" ws s%u ws\n", kv[i]);
			json_decref(key);
			if (e)
				goto out;
			i++;
		}
	}
	for (i = 0; i < n; i++) {
		int e = 0;

		if (is_req[i])
			e |= strbuf_printf(&c->out, "o%u-a%zu ::= o%u-kv%zu o%u-b%zu\n",
					   id, i, id, i, id, i + 1);
		else
			e |= strbuf_printf(&c->out, "o%u-a%zu ::= o%u-kv%zu o%u-b%zu | o%u-a%zu\n",
					   id, i, id, i, id, i + 1, id, i + 1);
		e |= strbuf_printf(&c->out, "o%u-b%zu ::= (\",\" ws o%u-kv%zu)%s o%u-b%zu\n",
				   id, i, id, i, is_req[i] ? "" : "?", id, i + 1);
		if (e)
			goto out;
	}
	if (strbuf_printf(&c->out, "o%u-a%zu ::= \"\"\no%u-b%zu ::= \"\"\n"
			  "o%u ::= \"{\" ws o%u-a0 \"}\"\n", id, n, id, n, id, id))
		goto out;
	rc = 0;
out:
	free(kv);
	free(is_req);
	return rc;
}

static int gen_array(struct conv *c, json_t *s, unsigned id, const char *path,
		     int depth)
{
	json_t *items = json_object_get(s, "items");
	long long mn = 0, mx = -1;
	char sub[512];
	unsigned it;

	if (ulimit(c, s, "minItems", path, &mn) ||
	    ulimit(c, s, "maxItems", path, &mx))
		return -1;
	if (mx >= 0 && mx < mn) {
		cerr(c, path, "maxItems below minItems");
		return -1;
	}
	if (items) {
		sub_path(sub, sizeof(sub), path, "items", NULL);
		if (gen(c, items, sub, depth + 1) < 0)
			return -1;
		it = c->n_rules - 1;
		if (strbuf_printf(&c->out, "o%u-item ::= s%u\n", id, it))
			return -1;
	} else if (strbuf_printf(&c->out, "o%u-item ::= value\n", id)) {
		return -1;
	}
	if (mx == 0)
		return strbuf_printf(&c->out, "o%u ::= \"[\" ws \"]\"\n", id);
	if (strbuf_printf(&c->out, "o%u ::= \"[\" ws %s o%u-item ws (\",\" ws o%u-item ws)",
			  id, mn ? "(" : "(", id, id))
		return -1;
	if (mx < 0 && strbuf_printf(&c->out, "{%lld,}", mn ? mn - 1 : 0))
		return -1;
	if (mx >= 0 && strbuf_printf(&c->out, "{%lld,%lld}", mn ? mn - 1 : 0, mx - 1))
		return -1;
	return strbuf_printf(&c->out, ")%s \"]\"\n", mn ? "" : "?");
}

static int gen_string(struct conv *c, json_t *s, unsigned id, const char *path)
{
	long long mn = 0, mx = -1;

	if (ulimit(c, s, "minLength", path, &mn) ||
	    ulimit(c, s, "maxLength", path, &mx))
		return -1;
	if (mx >= 0 && mx < mn) {
		cerr(c, path, "maxLength below minLength");
		return -1;
	}
	if (mx < 0)
		return strbuf_printf(&c->out, "o%u ::= \"\\\"\" char{%lld,} \"\\\"\"\n",
				     id, mn);
	return strbuf_printf(&c->out, "o%u ::= \"\\\"\" char{%lld,%lld} \"\\\"\"\n",
			     id, mn, mx);
}

static const char *const OBJECT_KEYS[] = { "type", "properties", "required",
	"additionalProperties", NULL };
static const char *const ARRAY_KEYS[] = { "type", "items", "minItems",
	"maxItems", NULL };
static const char *const STRING_KEYS[] = { "type", "minLength", "maxLength",
	NULL };
static const char *const PLAIN_KEYS[] = { "type", NULL };
static const char *const ALL_TYPED[] = { "type", "properties", "required",
	"additionalProperties", "items", "minItems", "maxItems", "minLength",
	"maxLength", NULL };

/* One "type" name for node id. */
static int gen_type(struct conv *c, json_t *s, const char *t, unsigned id,
		    const char *path, int depth)
{
	if (!strcmp(t, "object"))
		return gen_object(c, s, id, path, depth);
	if (!strcmp(t, "array"))
		return gen_array(c, s, id, path, depth);
	if (!strcmp(t, "string"))
		return gen_string(c, s, id, path);
	if (!strcmp(t, "number") || !strcmp(t, "integer") ||
	    !strcmp(t, "boolean") || !strcmp(t, "null"))
		return strbuf_printf(&c->out, "o%u ::= %s\n", id, t);
	cerr(c, path, "unknown type '%s'", t);
	return -1;
}

/* Rule s<N> for schema s; returns 0 with N = c->n_rules - 1 at return. */
static int gen(struct conv *c, json_t *s, const char *path, int depth)
{
	unsigned id = c->n_rules++;
	json_t *v;
	char sub[512];
	int e;

	if (depth > MAX_SCHEMA_DEPTH) {
		cerr(c, path, "schema nested deeper than %d", MAX_SCHEMA_DEPTH);
		return -1;
	}
	if (json_is_true(s) || (json_is_object(s) && !json_object_size(s)))
		goto done_any;
	if (!json_is_object(s)) {
		cerr(c, path, "a schema must be an object or true");
		return -1;
	}
	if ((v = json_object_get(s, "$ref"))) {
		const char *r = json_string_value(v), *name = NULL;
		json_t *defs = NULL, *target, *num;

		if (check_keys(c, s, path, (const char *const[]){ "$ref", NULL }))
			return -1;
		if (r && !strncmp(r, "#/$defs/", 8)) {
			defs = json_object_get(c->root, "$defs");
			name = r + 8;
		} else if (r && !strncmp(r, "#/definitions/", 14)) {
			defs = json_object_get(c->root, "definitions");
			name = r + 14;
		}
		target = defs && name ? json_object_get(defs, name) : NULL;
		if (!target) {
			cerr(c, path, "$ref '%s' is not a #/$defs/ entry",
			     r ? r : "(not a string)");
			return -1;
		}
		num = json_object_get(c->refs, r);
		if (num)
			return strbuf_printf(&c->out, "s%u ::= s%lld\n", id,
					     json_integer_value(num)) ? -1 : 0;
		json_object_set_new(c->refs, r, json_integer(c->n_rules));
		if (strbuf_printf(&c->out, "s%u ::= s%u\n", id, c->n_rules) ||
		    gen(c, target, r + 1, depth + 1))
			return -1;
		goto keep_id;
	}
	if ((v = json_object_get(s, "const"))) {
		if (check_keys(c, s, path, (const char *const[]){ "const", NULL }))
			return -1;
		e = strbuf_printf(&c->out, "s%u ::= ", id);
		e |= put_literal(c, v);
		e |= strbuf_printf(&c->out, "\n");
		goto keep_rc;
	}
	if ((v = json_object_get(s, "enum"))) {
		size_t i;
		json_t *x;

		if (check_keys(c, s, path, (const char *const[]){ "enum", "type", NULL }))
			return -1;
		if (!json_is_array(v) || !json_array_size(v)) {
			cerr(c, path, "'enum' must be a non-empty array");
			return -1;
		}
		e = strbuf_printf(&c->out, "s%u ::= ", id);
		json_array_foreach(v, i, x) {
			e |= i ? strbuf_printf(&c->out, " | ") : 0;
			e |= put_literal(c, x);
		}
		e |= strbuf_printf(&c->out, "\n");
		goto keep_rc;
	}
	if ((v = json_object_get(s, "anyOf"))) {
		size_t i, n;
		unsigned *alt;
		json_t *x;

		if (check_keys(c, s, path, (const char *const[]){ "anyOf", NULL }))
			return -1;
		if (!json_is_array(v) || !(n = json_array_size(v))) {
			cerr(c, path, "'anyOf' must be a non-empty array");
			return -1;
		}
		alt = calloc(n, sizeof(unsigned));
		if (!alt)
			return -1;
		json_array_foreach(v, i, x) {
			snprintf(sub, sizeof(sub), "%s/anyOf/%zu", path, i);
			if (gen(c, x, sub, depth + 1)) {
				free(alt);
				return -1;
			}
			alt[i] = c->n_rules - 1;
		}
		e = strbuf_printf(&c->out, "s%u ::= ", id);
		for (i = 0; i < n; i++)
			e |= strbuf_printf(&c->out, "%ss%u", i ? " | " : "", alt[i]);
		e |= strbuf_printf(&c->out, "\n");
		free(alt);
		goto keep_id_rc;
	}
	v = json_object_get(s, "type");
	if (!v) {
		if (check_keys(c, s, path, PLAIN_KEYS + 1))
			return -1;
		goto done_any;
	}
	if (json_is_string(v)) {
		const char *t = json_string_value(v);
		const char *const *keys = !strcmp(t, "object") ? OBJECT_KEYS :
					  !strcmp(t, "array") ? ARRAY_KEYS :
					  !strcmp(t, "string") ? STRING_KEYS : PLAIN_KEYS;

		if (check_keys(c, s, path, keys) ||
		    gen_type(c, s, t, id, path, depth))
			return -1;
		e = strbuf_printf(&c->out, "s%u ::= o%u\n", id, id);
		goto keep_id_rc;
	}
	if (json_is_array(v) && json_array_size(v)) {
		size_t i;
		json_t *x;

		if (check_keys(c, s, path, ALL_TYPED))
			return -1;
		e = strbuf_printf(&c->out, "s%u ::= ", id);
		json_array_foreach(v, i, x) {
			if (!json_is_string(x)) {
				cerr(c, path, "'type' list entries must be strings");
				return -1;
			}
			/* each type gets its own o-rules under a fresh id */
			e |= strbuf_printf(&c->out, "%so%u", i ? " | " : "",
					   c->n_rules++);
		}
		e |= strbuf_printf(&c->out, "\n");
		json_array_foreach(v, i, x)
			if (gen_type(c, s, json_string_value(x), id + 1 + (unsigned)i,
				     path, depth))
				return -1;
		goto keep_id_rc;
	}
	cerr(c, path, "'type' must be a string or a non-empty list");
	return -1;

done_any:
	return strbuf_printf(&c->out, "s%u ::= value\n", id) ? -1 : 0;
keep_rc:
	return e ? -1 : 0;
keep_id_rc:
	if (e)
		return -1;
keep_id:
	/* the caller reads this node's rule as c->n_rules - 1 */
	if (strbuf_printf(&c->out, "s%u ::= s%u\n", c->n_rules, id))
		return -1;
	c->n_rules++;
	return 0;
}

char *json_schema_to_gbnf(const char *schema, size_t len, char *err,
			  size_t err_len)
{
	return json_schema_to_gbnf_rule(schema, len, "root", err, err_len);
}

char *json_schema_to_gbnf_rule(const char *schema, size_t len,
			       const char *rule, char *err, size_t err_len)
{
	struct conv c = { .err = err, .err_len = err_len };
	json_error_t je;
	char *res = NULL;

	if (err && err_len)
		err[0] = 0;
	c.root = json_loadb(schema ? schema : "", schema ? len : 0,
			    JSON_DECODE_ANY, &je);
	if (!c.root) {
		if (err && err_len)
			snprintf(err, err_len, "schema is not JSON: line %d "
				 "column %d: %s", je.line, je.column, je.text);
		return NULL;
	}
	c.refs = json_object();
	if (!c.refs)
		goto out;
	if (gen(&c, c.root, "", 0) ||
	    strbuf_printf(&c.out, "%s ::= s%u\n%s", rule, c.n_rules - 1,
			  JSON_RULES)) {
		if (!c.failed)
			cerr(&c, "", "out of memory");
		goto out;
	}
	res = c.out.data;
	c.out.data = NULL;
out:
	strbuf_release(&c.out);
	json_decref(c.refs);
	json_decref(c.root);
	return res;
}

char *json_mode_gbnf(void)
{
	size_t n = sizeof(JSON_RULES) + 32;
	char *s = malloc(n);

	if (s)
		snprintf(s, n, "root ::= object\n%s", JSON_RULES);
	return s;
}
