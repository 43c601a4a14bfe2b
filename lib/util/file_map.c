/*
 * file_map.c - see file_map.h.
 */
#include "util/file_map.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int file_map_open(struct file_map *m, const char *path, const char *what,
		  char *err, size_t err_len)
{
	struct stat st;
	void *map;
	int fd, rc = 0;

	m->data = NULL;
	m->size = 0;
	/* O_NONBLOCK: a FIFO must not block us until a writer comes (the
	 * check below refuses it); it means nothing for a regular file */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, err_len, "cannot open %s '%s': %s", what, path,
			 strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		snprintf(err, err_len, "cannot stat %s '%s': %s", what, path,
			 strerror(-rc));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode) || st.st_size == 0) {
		rc = -EINVAL;
		snprintf(err, err_len, "%s '%s': %s", what, path,
			 S_ISREG(st.st_mode) ? "empty file (0 bytes)" :
					       "not a regular file");
		goto out_close;
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		rc = -errno;
		snprintf(err, err_len, "cannot map %s '%s': %s", what, path,
			 strerror(-rc));
		goto out_close;
	}
	m->data = map;
	m->size = (size_t)st.st_size;
out_close:
	close(fd);
	return rc;
}

void file_map_close(struct file_map *m)
{
	if (m->data)
		munmap(m->data, m->size);
	m->data = NULL;
	m->size = 0;
}
