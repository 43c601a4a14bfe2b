/*
 * request_grammar.c - see request_grammar.h.
 *
 * response_format {"type": "json_schema", "json_schema": {"name",
 * "description", "schema", "strict"}} follows OpenAI's shape; strict may
 * be true or false, and either way the output is held to the schema (a
 * constraint that holds always is what strict asks for, and a non-strict
 * request loses nothing by it).  A schema of no keywords ({}) or none at
 * all is any JSON value with an object at the top, as json_object.
 */
#include "server/request/request_grammar.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "server/request/request_fields.h"
#include "util/err_fail.h"

/* The json_schema member's GBNF (malloc'd), or NULL with why written. */
static char *schema_source(const json_t *js, char *why, size_t why_len)
{
	const char *key;
	json_t *v, *schema = NULL;
	char *text, *src, err[256];

	if (!json_is_object(js)) {
		err_fail(why, why_len, "field 'response_format': 'json_schema' "
			 "must be an object, not %s", request_json_kind(js));
		return NULL;
	}
	json_object_foreach((json_t *)js, key, v) {
		if (!strcmp(key, "schema")) {
			schema = v;
		} else if (!strcmp(key, "name") || !strcmp(key, "description")) {
			if (!json_is_string(v)) {
				err_fail(why, why_len, "field 'response_format': "
					 "json_schema '%s' must be a string", key);
				return NULL;
			}
		} else if (!strcmp(key, "strict")) {
			if (!json_is_boolean(v) && !json_is_null(v)) {
				err_fail(why, why_len, "field 'response_format': "
					 "json_schema 'strict' must be true or false");
				return NULL;
			}
		} else {
			err_fail(why, why_len, "field 'response_format': unknown "
				 "json_schema member '%.64s' (name, description, "
				 "schema and strict are)", key);
			return NULL;
		}
	}
	if (!schema || json_is_null(schema))
		return json_mode_gbnf();
	if (!json_is_object(schema)) {
		err_fail(why, why_len, "field 'response_format': json_schema "
			 "'schema' must be an object, not %s",
			 request_json_kind(schema));
		return NULL;
	}
	text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
	if (!text) {
		err_fail(why, why_len, "out of memory");
		return NULL;
	}
	src = json_schema_to_gbnf(text, strlen(text), err, sizeof(err));
	free(text);
	if (!src)
		err_fail(why, why_len, "field 'response_format': json_schema: %s",
			 err);
	return src;
}

/* response_format's GBNF (malloc'd; *none when it asks for plain text),
 * or NULL with why written. */
static char *format_source(const json_t *rf, bool *none, char *why,
			   size_t why_len)
{
	const json_t *type = json_object_get(rf, "type");
	const char *key, *t;
	json_t *v;

	*none = false;
	if (!json_is_object(rf)) {
		err_fail(why, why_len, "field 'response_format' must be an object, "
			 "not %s", request_json_kind(rf));
		return NULL;
	}
	if (!json_is_string(type)) {
		err_fail(why, why_len, "field 'response_format' needs a 'type' "
			 "string (\"text\", \"json_object\" or \"json_schema\")");
		return NULL;
	}
	t = json_string_value(type);
	json_object_foreach((json_t *)rf, key, v) {
		if (strcmp(key, "type") &&
		    !(!strcmp(t, "json_schema") && !strcmp(key, "json_schema"))) {
			err_fail(why, why_len, "field 'response_format': unknown "
				 "member '%.64s' for type \"%.32s\"", key, t);
			return NULL;
		}
	}
	if (!strcmp(t, "text")) {
		*none = true;
		return NULL;
	}
	if (!strcmp(t, "json_object"))
		return json_mode_gbnf();
	if (!strcmp(t, "json_schema")) {
		v = json_object_get(rf, "json_schema");
		if (!v) {
			err_fail(why, why_len, "field 'response_format': type "
				 "\"json_schema\" needs a 'json_schema' object");
			return NULL;
		}
		return schema_source(v, why, why_len);
	}
	err_fail(why, why_len, "field 'response_format': unknown type \"%.32s\" "
		 "(\"text\", \"json_object\" and \"json_schema\" are known)", t);
	return NULL;
}

int request_parse_grammar(const json_t *obj, const struct request_limits *lim,
			  struct request *req, char *why, size_t why_len)
{
	const json_t *gv = json_object_get(obj, "grammar");
	const json_t *rf = json_object_get(obj, "response_format");
	const char *field = gv && !json_is_null(gv) ? "grammar" : "response_format";
	struct grammar *g;
	char *src = NULL, err[256];
	bool none = false;
	size_t len;

	if (gv && json_is_null(gv))
		gv = NULL;
	if (rf && json_is_null(rf))
		rf = NULL;
	if (!gv && !rf) {
		if (lim->default_grammar && !req->ignore_eos) {
			req->grammar = lim->default_grammar;
			req->grammar->refs++;
		}
		return 0;
	}
	if (gv && rf)
		return err_fail(why, why_len, "fields 'grammar' and "
				"'response_format' cannot both be given: each "
				"sets the whole grammar");
	if (gv) {
		if (!json_is_string(gv))
			return err_fail(why, why_len, "field 'grammar' must be a "
					"string (GBNF), not %s", request_json_kind(gv));
		len = json_string_length(gv);
		src = malloc(len + 1);
		if (!src)
			return -ENOMEM;
		memcpy(src, json_string_value(gv), len + 1);
	} else {
		/* {"type": "text"} asks for plain text: no default grammar */
		src = format_source(rf, &none, why, why_len);
		if (!src)
			return none ? 0 : -EINVAL;
		len = strlen(src);
	}
	if (!lim->grammar_max || !lim->has_logits) {
		free(src);
		return err_fail(why, why_len, "field '%s': %s", field,
				!lim->has_logits ? "the model gives no logits to "
				"mask, so its output cannot be constrained" :
				"grammars need the model's tokenizer (--tokenizer), "
				"and --grammar-max-bytes above 0");
	}
	if (len > lim->grammar_max) {
		free(src);
		return err_fail(why, why_len, "field '%s': the grammar is %zu bytes, "
				"more than --grammar-max-bytes (%u)", field, len,
				lim->grammar_max);
	}
	if (req->ignore_eos) {
		free(src);
		return err_fail(why, why_len, "field '%s' cannot be combined with "
				"ignore_eos: a finished grammar ends with EOS", field);
	}
	g = grammar_parse(src, len, err, sizeof(err));
	if (!g) {
		free(src);
		return err_fail(why, why_len, "field '%s': %s", field, err);
	}
	req->grammar = request_grammar_new(src, (uint32_t)len, g);
	return req->grammar ? 0 : -ENOMEM;
}
