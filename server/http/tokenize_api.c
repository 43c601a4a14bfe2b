/*
 * tokenize_api.c - see tokenize_api.h.
 *
 * The text is encoded by text_tokenizer_encode() and the ids decoded by
 * text_tokenizer_piece(), one piece after its predecessor, as the engine
 * decodes a completion (request_text.c): /detokenize of a completion's
 * token_ids gives its text.  Bodies are bounded by --max-body, so the
 * answers are too (a token per byte and a few bytes more, or the longest
 * piece per id).
 */
#include "server/http/tokenize_api.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "server/request/request_fields.h"
#include "text/text_tokenizer.h"
#include "util/err_fail.h"
#include "util/json_writer.h"

static void set_param(char *param, const char *field)
{
	snprintf(param, REQUEST_FIELD_NAME_MAX, "%s", field);
}

/* The body as an object whose every member is one of names[]; NULL
 * with err and param written otherwise. */
static json_t *body_object(const char *body, size_t len,
			   const char *const *names, char *err, size_t err_len,
			   char *param)
{
	json_error_t jerr;
	json_t *obj = json_loadb(body, len, JSON_REJECT_DUPLICATES |
				 JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
	const char *key;
	json_t *v;

	param[0] = '\0';
	if (!obj) {
		err_fail(err, err_len, "not valid JSON: %s at column %d",
			 jerr.text, jerr.column);
		return NULL;
	}
	if (!json_is_object(obj)) {
		err_fail(err, err_len, "the body is %s, expected an object",
			 request_json_kind(obj));
		json_decref(obj);
		return NULL;
	}
	json_object_foreach(obj, key, v) {
		size_t i = 0;

		while (names[i] && strcmp(names[i], key))
			i++;
		if (!names[i]) {
			err_fail(err, err_len, "unknown field '%.64s'", key);
			set_param(param, key);
			json_decref(obj);
			return NULL;
		}
	}
	return obj;
}

static const char *const tokenize_fields[] = {
	"content", "add_special", "with_pieces", NULL,
};

int tokenize_answer(const char *body, size_t len, const struct request_limits *lim,
		    struct strbuf *out, char *err, size_t err_len,
		    char *param)
{
	json_t *obj, *content, *special, *pieces;
	int32_t *ids = NULL;
	size_t n = 0, cap;
	int rc = -EINVAL;
	char *p;

	param[0] = '\0';
	if (!lim->tok)
		return err_fail(err, err_len, "this server has no tokenizer "
				"(--tokenizer): it takes token ids only");
	obj = body_object(body, len, tokenize_fields, err, err_len, param);
	if (!obj)
		return -EINVAL;
	content = json_object_get(obj, "content");
	special = json_object_get(obj, "add_special");
	pieces = json_object_get(obj, "with_pieces");
	if (!json_is_string(content)) {
		set_param(param, "content");
		err_fail(err, err_len, "field 'content' must be a string");
		goto out;
	}
	if (special && !json_is_null(special) && !json_is_boolean(special)) {
		set_param(param, "add_special");
		err_fail(err, err_len, "field 'add_special' must be true or false");
		goto out;
	}
	if (pieces && !json_is_null(pieces) && !json_is_false(pieces)) {
		set_param(param, "with_pieces");
		err_fail(err, err_len, "field 'with_pieces' is not implemented by "
			 "this server: only false is taken");
		goto out;
	}
	cap = text_tokenizer_encode_max(json_string_length(content));
	ids = malloc(cap * sizeof(*ids));
	rc = ids ? text_tokenizer_encode(lim->tok, json_string_value(content),
					 json_string_length(content),
					 json_is_true(special), ids, cap, &n) : -ENOMEM;
	if (rc && rc != -ENOMEM) {
		set_param(param, "content");
		rc = err_fail(err, err_len, "content: cannot encode: %s",
			      strerror(-rc));
	}
	if (rc || (rc = strbuf_reserve(out, 16 + n * (JSON_TOKEN_MAX + 1))))
		goto out;
	p = JSON_PUT_LIT(out->data + out->len, "{\"tokens\":[");
	for (size_t i = 0; i < n; i++) {
		if (i)
			*p++ = ',';
		p = json_put_i32(p, ids[i]);
	}
	p = JSON_PUT_LIT(p, "]}");
	*p = '\0';
	out->len = (size_t)(p - out->data);
out:
	free(ids);
	json_decref(obj);
	return rc;
}

static const char *const detokenize_fields[] = { "tokens", NULL };

int detokenize_answer(const char *body, size_t len,
		      const struct request_limits *lim, struct strbuf *out,
		      char *err, size_t err_len, char *param)
{
	struct strbuf text = STRBUF_INIT;
	json_t *obj, *tokens, *t;
	int32_t prev = -1;
	size_t i, piece_len, bound;
	const char *piece;
	int rc = -EINVAL;
	char *p;

	param[0] = '\0';
	if (!lim->tok)
		return err_fail(err, err_len, "this server has no tokenizer "
				"(--tokenizer): it has no text for token ids");
	obj = body_object(body, len, detokenize_fields, err, err_len, param);
	if (!obj)
		return -EINVAL;
	tokens = json_object_get(obj, "tokens");
	set_param(param, "tokens");
	if (!json_is_array(tokens)) {
		err_fail(err, err_len, "field 'tokens' must be an array of token ids");
		goto out;
	}
	json_array_foreach(tokens, i, t) {
		json_int_t id = json_integer_value(t);

		if (!json_is_integer(t) || id < 0 || (uint64_t)id >= lim->vocab) {
			err_fail(err, err_len, "tokens[%zu]: not a token id in [0, %u)",
				 i, lim->vocab);
			goto out;
		}
		piece = text_tokenizer_piece(lim->tok, prev, (int32_t)id, &piece_len);
		if (!piece) {
			err_fail(err, err_len, "tokens[%zu]: token %lld has no text in "
				 "this tokenizer", i, (long long)id);
			goto out;
		}
		if (strbuf_append(&text, piece, piece_len)) {
			rc = -ENOMEM;
			goto out;
		}
		prev = (int32_t)id;
	}
	param[0] = '\0';
	bound = json_strn_bound(text.len);
	if (bound == SIZE_MAX || strbuf_reserve(out, 16 + bound)) {
		rc = -ENOMEM;
		goto out;
	}
	p = JSON_PUT_LIT(out->data + out->len, "{\"content\":");
	p = json_put_strn(p, text.data ? text.data : "", text.len);
	*p++ = '}';
	*p = '\0';
	out->len = (size_t)(p - out->data);
	rc = 0;
out:
	strbuf_release(&text);
	json_decref(obj);
	return rc;
}
