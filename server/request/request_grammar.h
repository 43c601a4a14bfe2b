/*
 * request_grammar.h - a request's constraint on its output (docs/DESIGN.md
 * 2.8): the "grammar" field (llama.cpp's GBNF) or response_format
 * (OpenAI's json_object and json_schema), compiled once here, so a bad
 * grammar or schema is a 400 that names what is wrong.
 */
#ifndef DYNBATCH_REQUEST_GRAMMAR_H
#define DYNBATCH_REQUEST_GRAMMAR_H

#include <stddef.h>

#include <jansson.h>

#include "engine/request.h"
#include "server/request/request_limits.h"

/*
 * Read obj's "grammar" and "response_format" into req->grammar (left
 * NULL when neither asks for a constraint).  0; -EINVAL with why written
 * (the field and what is wrong); -ENOMEM.
 */
int request_parse_grammar(const json_t *obj, const struct request_limits *lim,
			  struct request *req, char *why, size_t why_len);

#endif /* DYNBATCH_REQUEST_GRAMMAR_H */
