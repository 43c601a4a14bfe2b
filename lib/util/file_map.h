/*
 * file_map.h - a whole regular file mapped read-only (MAP_SHARED, so
 * every process that maps it shares the page cache's one copy).
 */
#ifndef DYNBATCH_FILE_MAP_H
#define DYNBATCH_FILE_MAP_H

#include <stddef.h>

struct file_map {
	void *data;		/* NULL when nothing is mapped */
	size_t size;
};

/*
 * Map path.  A FIFO, a directory or an empty file is refused without
 * waiting for anything.  Returns 0; or a negative errno after writing
 * "cannot open WHAT 'PATH': ..." (or why it is refused) into err.
 */
int file_map_open(struct file_map *m, const char *path, const char *what,
		  char *err, size_t err_len);

/* Unmap; accepts a zeroed struct. */
void file_map_close(struct file_map *m);

#endif /* DYNBATCH_FILE_MAP_H */
