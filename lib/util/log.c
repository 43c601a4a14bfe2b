/*
 * log.c - see log.h.  Lines go to stderr with one write() each so lines
 * from several processes do not interleave mid-line.
 */
#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int log_level_current = LOG_WARN;
static char log_role[48] = "dynbatch";

static const char *const log_level_names[] = { "error", "warn", "info", "debug" };

void log_set_role(const char *role)
{
	snprintf(log_role, sizeof(log_role), "%s", role);
}

void log_init_from_env(void)
{
	const char *v = getenv("DYNBATCH_LOG");

	if (!v)
		return;
	for (int i = 0; i < 4; i++)
		if (!strcmp(v, log_level_names[i]))
			log_level_current = i;
}

void log_write(int level, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	n = snprintf(line, sizeof(line), "dynbatch[%d] %s: %s: ", (int)getpid(),
		     log_role, log_level_names[level & 3]);
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;
}
