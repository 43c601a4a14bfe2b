/*
 * fault_sim.c - see fault_sim.h.
 */
#include "util/fault_sim.h"

#include <stdlib.h>
#include <string.h>

bool fault_sim(const char *point)
{
	const char *list = getenv("DYNBATCH_FAULT");
	size_t n = strlen(point);

	while (list && *list) {
		const char *end = strchr(list, ',');
		size_t len = end ? (size_t)(end - list) : strlen(list);

		if (len == n && !strncmp(list, point, n))
			return true;
		list = end ? end + 1 : NULL;
	}
	return false;
}
