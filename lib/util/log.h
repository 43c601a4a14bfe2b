/*
 * log.h - one logging macro for both processes.
 *
 * LOG(level, fmt, ...) tests the level before evaluating its arguments, so
 * a disabled message costs one compare.  Every message names the process
 * role and pid ("dynbatch[1234] coordinator: ...").  Nothing on the
 * per-token path logs unless built with -DDYNBATCH_DEBUG.
 */
#ifndef DYNBATCH_LOG_H
#define DYNBATCH_LOG_H

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

extern int log_level_current;

/* Set the role printed in every line ("coordinator", "worker 3"). */
void log_set_role(const char *role);
/* Read DYNBATCH_LOG=error|warn|info|debug from the environment. */
void log_init_from_env(void);

void log_write(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define LOG(level, ...)						\
	do {							\
		if ((level) <= log_level_current)		\
			log_write((level), __VA_ARGS__);	\
	} while (0)

#ifdef DYNBATCH_DEBUG
#define LOG_HOT(level, ...) LOG(level, __VA_ARGS__)
#else
#define LOG_HOT(level, ...) do { } while (0)
#endif

#endif /* DYNBATCH_LOG_H */
