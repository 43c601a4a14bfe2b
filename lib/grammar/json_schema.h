/*
 * json_schema.h - JSON schemas and JSON mode as GBNF grammars.
 *
 * json_schema_to_gbnf() turns a JSON schema (the text of a
 * response_format json_schema) into GBNF source for grammar_parse(); the
 * grammar's sentences are JSON documents that validate against the
 * schema.  Supported: type (one or a list), properties, required,
 * additionalProperties (false, or absent: no extra properties are
 * produced), items, minItems, maxItems, enum, const, minLength,
 * maxLength, anyOf, $ref to #/$defs/ or #/definitions/ (recursion
 * allowed), and the annotations title, description, $schema, $id,
 * $comment, default, examples.  Properties come in the schema's order.
 * Any other keyword is refused, naming it and where it is (the HTTP
 * layer answers 400).  Whitespace between tokens is bounded (0 to 8
 * blanks), so the output cannot grow without end in blanks.
 *
 * json_mode_gbnf() is JSON mode: any JSON value with an object at top.
 * Both return malloc'd NUL-terminated source, or NULL with err set.
 */
#ifndef DYNBATCH_JSON_SCHEMA_H
#define DYNBATCH_JSON_SCHEMA_H

#include <stddef.h>

char *json_schema_to_gbnf(const char *schema, size_t len, char *err,
			  size_t err_len);
/* The same with the schema's top rule named rule (a GBNF name) instead
 * of root, so a caller can write a root of its own around it. */
char *json_schema_to_gbnf_rule(const char *schema, size_t len,
			       const char *rule, char *err, size_t err_len);
char *json_mode_gbnf(void);

#endif /* DYNBATCH_JSON_SCHEMA_H */
