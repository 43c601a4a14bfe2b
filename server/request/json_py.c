/*
 * json_py.c - see json_py.h.
 */
#include "server/request/json_py.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int put_string(const char *s, size_t n, struct strbuf *out)
{
	int rc = strbuf_append(out, "\"", 1);

	for (size_t i = 0; i < n && !rc; i++) {
		unsigned char c = (unsigned char)s[i];
		const char *esc = NULL;

		switch (c) {
		case '"': esc = "\\\""; break;
		case '\\': esc = "\\\\"; break;
		case '\n': esc = "\\n"; break;
		case '\r': esc = "\\r"; break;
		case '\t': esc = "\\t"; break;
		case '\b': esc = "\\b"; break;
		case '\f': esc = "\\f"; break;
		}
		if (esc)
			rc = strbuf_append(out, esc, 2);
		else if (c < 0x20)
			rc = strbuf_printf(out, "\\u%04x", c);
		else
			rc = strbuf_append(out, &s[i], 1);
	}
	return rc ? rc : strbuf_append(out, "\"", 1);
}

/* Python's repr(float): the shortest round-trip digits, laid out as the
 * header says. */
static int put_real(double v, struct strbuf *out)
{
	char buf[40], digits[24];
	int p, e, nd = 0;
	char *x;

	for (p = 1; p <= 17; p++) {
		snprintf(buf, sizeof(buf), "%.*e", p - 1, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	/* buf is [-]D[.DDD]e[+-]XX */
	x = buf;
	if (*x == '-') {
		if (strbuf_append(out, "-", 1))
			return -ENOMEM;
		x++;
	}
	for (; *x && *x != 'e'; x++)
		if (*x != '.')
			digits[nd++] = *x;
	digits[nd] = 0;
	e = atoi(x + 1);
	if (e >= -4 && e < 16) {
		if (e < 0)
			return strbuf_printf(out, "0.%.*s%s", -e - 1,
					     "0000", digits);
		/* the integer part, padded with zeros, then the fraction */
		for (int i = 0; i <= e; i++)
			if (strbuf_append(out, i < nd ? &digits[i] : "0", 1))
				return -ENOMEM;
		return strbuf_printf(out, ".%s", nd > e + 1 ? digits + e + 1 : "0");
	}
	return strbuf_printf(out, "%c%s%se%c%02d", digits[0], nd > 1 ? "." : "",
			     digits + 1, e < 0 ? '-' : '+', e < 0 ? -e : e);
}

static int dump(const json_t *v, struct strbuf *out, int depth)
{
	const char *key;
	json_t *x;
	size_t i;
	int rc = 0;

	if (depth > JSON_PY_MAX_DEPTH)
		return -EINVAL;
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		rc = strbuf_append(out, "{", 1);
		i = 0;
		json_object_foreach((json_t *)v, key, x) {
			if (!rc && i++)
				rc = strbuf_append(out, ", ", 2);
			if (!rc)
				rc = put_string(key, strlen(key), out);
			if (!rc)
				rc = strbuf_append(out, ": ", 2);
			if (!rc)
				rc = dump(x, out, depth + 1);
		}
		return rc ? rc : strbuf_append(out, "}", 1);
	case JSON_ARRAY:
		rc = strbuf_append(out, "[", 1);
		json_array_foreach(v, i, x) {
			if (!rc && i)
				rc = strbuf_append(out, ", ", 2);
			if (!rc)
				rc = dump(x, out, depth + 1);
		}
		return rc ? rc : strbuf_append(out, "]", 1);
	case JSON_STRING:
		return put_string(json_string_value(v), json_string_length(v), out);
	case JSON_INTEGER:
		return strbuf_printf(out, "%lld", (long long)json_integer_value(v));
	case JSON_REAL:
		return put_real(json_real_value(v), out);
	case JSON_TRUE:
		return strbuf_append(out, "true", 4);
	case JSON_FALSE:
		return strbuf_append(out, "false", 5);
	case JSON_NULL:
		return strbuf_append(out, "null", 4);
	}
	return -EINVAL;
}

int json_py_dump(const json_t *v, struct strbuf *out)
{
	int rc = dump(v, out, 0);

	return rc == -EINVAL ? rc : rc ? -ENOMEM : 0;
}
