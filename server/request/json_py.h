/*
 * json_py.h - JSON written as Python's json.dumps(v, ensure_ascii=False)
 * writes it: what chat templates' `tojson` filter renders under
 * transformers (and vLLM), so the tools and tool-call arguments in a
 * prompt read exactly as the model saw them in training.
 *
 * Separators ", " and ": ", keys in the object's order (jansson keeps
 * insertion order), strings with \" \\ \n \r \t \b \f escaped and other
 * bytes below 0x20 as \u00xx, everything else (UTF-8 included) as it is.
 * Integers in decimal; reals as Python's repr() of a float: the shortest
 * digits that read back to the same double, fixed notation with at least
 * one fractional digit ("1.0", "0.0001") when the decimal exponent is in
 * [-4, 16), else "1e+16" / "2.5e-05".  (JavaScript Jinja engines write
 * 1.0 as "1": only reals with no fraction differ.)
 */
#ifndef DYNBATCH_JSON_PY_H
#define DYNBATCH_JSON_PY_H

#include <jansson.h>

#include "util/strbuf.h"

/* Append v's text to *out.  0, -ENOMEM, or -EINVAL for nesting deeper
 * than JSON_PY_MAX_DEPTH (what a request parser lets through is less). */
#define JSON_PY_MAX_DEPTH 256
int json_py_dump(const json_t *v, struct strbuf *out);

#endif /* DYNBATCH_JSON_PY_H */
