/*
 * http_head_text.c - the words in an answer's head: the reason phrase of
 * a status code and the Allow list of a route (http_conn.h).
 */
#include "server/http/http_conn.h"

#include <stdio.h>

const char *http_status_text(int status)
{
	switch (status) {
	case 100: return "Continue";
	case 200: return "OK";
	case 204: return "No Content";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 409: return "Conflict";
	case 413: return "Content Too Large";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 503: return "Service Unavailable";
	case 505: return "HTTP Version Not Supported";
	default:  return "Error";
	}
}

/* The methods route r answers, for a 405's Allow header. */
void http_route_allow(const struct http_route *r, char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = '\0';
	for (unsigned m = 0; m < 32 && at < len; m++) {
		if (!(r->methods & HTTP_ROUTE_METHOD(m)))
			continue;
		at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? ", " : "",
				       m == HTTP_GET ? "GET, HEAD" :
				       http_method_str((enum http_method)m));
	}
}
