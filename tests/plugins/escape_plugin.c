/*
 * escape_plugin.c - a hostile model plugin, for tests/e2e/e2e_sandbox.sh: on
 * its first step in a process it tries what the worker sandbox
 * (worker/sandbox.h) must refuse, and what it must still allow, and
 * answers every row of every step with one token, a bit mask of what
 * worked.  `make` builds it into build/escape_plugin.so:
 *
 *     dynbatch run --model build/escape_plugin.so:file=PATH --input ...
 *
 * create() (before the sandbox) opens PATH (default /etc/hostname), as a
 * plugin opening its weights would; next() then tries to read it.
 *
 * THE TOKEN
 *
 * Bits 0-8 are escapes: each is set when the call reached the kernel,
 * that is, returned anything but EPERM, the sandbox's answer.  Each
 * attempt is harmless when it does reach the kernel, so the same plugin
 * runs unsandboxed (DYNBATCH_NO_SANDBOX=1, or --workers 0 where the
 * coordinator calls the model itself) and shows them set there:
 *   0  open() of a file                          (succeeds)
 *   1  socket(AF_INET)                            (succeeds)
 *   2  kill(parent, 0): may we signal the coordinator  (succeeds)
 *   3  ptrace(PTRACE_PEEKDATA, parent)            (ESRCH: not traced)
 *   4  process_vm_readv() of our own memory: the filter refuses the
 *      call whatever the pid, and our own is the one that Yama allows
 *      everywhere                                 (succeeds)
 *   5  execve() of a path that does not exist     (ENOENT)
 *   6  fork(), the child exits at once            (succeeds)
 *   7  an executable anonymous mapping            (succeeds)
 *   8  a zero-byte write to stdout, a descriptor the worker may not
 *      write                                      (succeeds)
 * Bits 10-13 are what a model still needs inside the sandbox, set when
 * they work:
 *   10 read() of the file create() opened
 *   11 a thread started and joined (pthread_create goes through clone)
 *   12 64 MiB from malloc (mmap), grown by realloc (mremap), freed
 *   13 nanosleep()
 * So a sandboxed worker answers 15360 (bits 10-13), an unsandboxed one
 * 15871 (bits 0-8 and 10-13).  The vocabulary is 16384.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dynbatch/model.h"

#define ESCAPE_VOCAB 16384u	/* every mask of bits 0-13 is a token */

struct escape_model {
	char *path;		/* the file= argument */
	int fd;			/* that file, opened by create() */
	bool tried;		/* the first step ran the attempts */
	uint32_t token;		/* what they gave, answered for every row */
};

/* Did a call that returned ret (-1 and errno on failure) reach the kernel? */
static bool escape_reached(long ret)
{
	return ret >= 0 || errno != EPERM;
}

static void *escape_thread_main(void *arg)
{
	return arg;
}

/* Bits 0-8; see the file comment. */
static uint32_t escape_try_escapes(const char *path)
{
	static const char local_byte = 1;
	char copy = 0;
	struct iovec local = { &copy, 1 };
	struct iovec remote = { (void *)&local_byte, 1 };
	char *const argv[] = { "dynbatch-escape", NULL };
	uint32_t mask = 0;
	long ret;
	int fd;
	void *p;
	pid_t child;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	mask |= (uint32_t)escape_reached(fd) << 0;
	if (fd >= 0)
		close(fd);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	mask |= (uint32_t)escape_reached(fd) << 1;
	if (fd >= 0)
		close(fd);
	mask |= (uint32_t)escape_reached(kill(getppid(), 0)) << 2;
	errno = 0;
	ret = ptrace(PTRACE_PEEKDATA, getppid(), NULL, NULL);
	mask |= (uint32_t)(errno != EPERM) << 3;
	(void)ret;
	mask |= (uint32_t)escape_reached(process_vm_readv(getpid(), &local, 1,
							   &remote, 1, 0)) << 4;
	mask |= (uint32_t)escape_reached(execve("/nonexistent/dynbatch-escape",
						argv, NULL)) << 5;
	child = fork();
	if (child == 0)
		_exit(0);
	if (child > 0)
		waitpid(child, NULL, 0);
	mask |= (uint32_t)escape_reached(child) << 6;
	p = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	mask |= (uint32_t)escape_reached(p == MAP_FAILED ? -1 : 0) << 7;
	if (p != MAP_FAILED)
		munmap(p, 4096);
	mask |= (uint32_t)escape_reached(write(STDOUT_FILENO, "", 0)) << 8;
	return mask;
}

/* Bits 10-13; see the file comment. */
static uint32_t escape_try_needs(int fd)
{
	struct timespec one_us = { 0, 1000 };
	uint32_t mask = 0;
	pthread_t thread;
	char byte;
	char *big, *bigger;

	if (read(fd, &byte, 1) >= 0)
		mask |= 1u << 10;
	if (pthread_create(&thread, NULL, escape_thread_main, NULL) == 0 &&
	    pthread_join(thread, NULL) == 0)
		mask |= 1u << 11;
	big = malloc(64u << 20);
	if (big) {
		memset(big, 1, 64u << 20);
		bigger = realloc(big, 96u << 20);
		if (bigger) {
			big = bigger;
			mask |= 1u << 12;
		}
		free(big);
	}
	if (nanosleep(&one_us, NULL) == 0)
		mask |= 1u << 13;
	return mask;
}

static void *escape_create(const char *args, char *err, size_t err_len)
{
	const char *path = "/etc/hostname";
	struct escape_model *m;

	if (args && strncmp(args, "file=", 5) == 0)
		path = args + 5;
	else if (args && *args) {
		snprintf(err, err_len, "escape: expected file=PATH, got '%s'", args);
		return NULL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, err_len, "escape: out of memory");
		return NULL;
	}
	m->path = strdup(path);
	/* outside the sandbox still: this must work */
	m->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (!m->path || m->fd < 0) {
		snprintf(err, err_len, "escape: open(%s): %s", path, strerror(errno));
		if (m->fd >= 0)
			close(m->fd);
		free(m->path);
		free(m);
		return NULL;
	}
	return m;
}

static uint32_t escape_vocab(void *model)
{
	return ESCAPE_VOCAB;
}

static int escape_next(void *model, uint32_t n_rows,
		       const int32_t *const *prefixes, const uint32_t *lengths,
		       int32_t *next_tokens)
{
	struct escape_model *m = model;

	if (!m->tried) {
		m->token = escape_try_escapes(m->path) | escape_try_needs(m->fd);
		m->tried = true;
	}
	for (uint32_t i = 0; i < n_rows; i++)
		next_tokens[i] = (int32_t)m->token;
	return 0;
}

static void escape_destroy(void *model)
{
	struct escape_model *m = model;

	if (!m)
		return;
	close(m->fd);
	free(m->path);
	free(m);
}

static const struct dynbatch_model_api escape_api = {
	.abi_version = DYNBATCH_MODEL_ABI_VERSION,
	.name = "escape",
	.create = escape_create,
	.vocab = escape_vocab,
	.next = escape_next,
	.destroy = escape_destroy,
};

const struct dynbatch_model_api *dynbatch_model_plugin(void);

const struct dynbatch_model_api *dynbatch_model_plugin(void)
{
	return &escape_api;
}
