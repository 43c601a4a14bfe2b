/*
 * request_fields.h - which fields a request body may name, per front end
 * (a `run` JSON Lines line, POST /v1/completions, POST
 * /v1/chat/completions), and what each gets: parsed (implemented),
 * accepted as metadata, or refused unless it holds its neutral value.
 *
 * Nothing is ignored silently: a field of OpenAI's request schemas that
 * we do not implement is refused with its name unless it says "do
 * nothing" (echo false, best_of 1, tool_choice "none", ...),
 * because clients send defaults; a field that is neither OpenAI's nor one
 * of our documented extensions (a typo such as "max_token") is refused
 * too, where vLLM and llama.cpp ignore it.  Types are checked for every
 * field here or by the parser that reads it.
 */
#ifndef DYNBATCH_REQUEST_FIELDS_H
#define DYNBATCH_REQUEST_FIELDS_H

#include <stddef.h>

#include <jansson.h>

#include "server/request/request_limits.h"

/* Room for a refused field's name in a param buffer (longer: cut). */
#define REQUEST_FIELD_NAME_MAX 64u

/*
 * Check every member of obj against api's field set.  Returns 0, or
 * -EINVAL with err saying what is wrong and param (param_len bytes, may
 * be NULL) holding the field's name: an unknown field, one of another
 * front end, a wrong type, or a value this server does not implement.
 * Implemented fields are left to their parsers, except where noted in
 * the table (request_fields.c).
 */
int request_fields_check(const json_t *obj, enum request_api api, char *err,
			 size_t err_len, char *param, size_t param_len);

/*
 * Delete from obj every member that api does not know (after a check
 * against another front end's set: chat's fields before the body goes on
 * as a completions body).  0 or -ENOMEM.
 */
int request_fields_keep(json_t *obj, enum request_api api);

/* What a JSON value is, for "must be X, not Y" messages. */
const char *request_json_kind(const json_t *v);

/* The i-th field of the table (any front end), NULL past the last: for
 * naming the field an error message speaks of. */
const char *request_field_name(size_t i);

#endif /* DYNBATCH_REQUEST_FIELDS_H */
