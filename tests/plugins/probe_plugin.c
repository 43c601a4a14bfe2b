/*
 * probe_plugin.c - a test plugin for tests/e2e/e2e_probe.sh: it records which
 * process runs its code, and can misbehave the ways a plugin may while
 * the coordinator learns its vocabulary.  `make` builds it into
 * build/probe_plugin.so:
 *
 *     dynbatch run --workers 2 --model build/probe_plugin.so:mode=MODE ...
 *
 * With DYNBATCH_TEST_MARKER=PATH in the environment, its constructor and
 * create() each append a line "ctor|create PID PPID" to PATH, so a test
 * can tell whether the coordinator (whose pid it knows) ever ran plugin
 * code.
 *
 * Modes of create() (args "mode=MODE"; default ok):
 *   ok        a working model: vocab 1000, the next token of a prefix
 *             is (7 * last + 3 * length + 1) mod 1000
 *   hang      never returns
 *   crash     dies of SIGSEGV
 *   fail      returns NULL with a reason holding a newline and an ESC
 *   vocab0    a model whose vocab() is 0
 *   vocabmax  a model whose vocab() is 4294967295
 *   garbage   writes "vocab 12x" and an ESC to fd 3 (a probe's answer
 *             pipe), then works as ok
 *   silent    _exit(0) from create(): no answer at all
 *   closehang closes fd 3, then never returns
 *   flood     writes "flood" lines to stderr, never returns
 *   nextfail  works as ok, but next() fails (-EIO) on a prefix ending in 7
 * and "say=TEXT" writes TEXT and a newline to fd 3, "sayraw=TEXT" TEXT
 * alone, and then never returns (the answers a hostile plugin may forge).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dynbatch/model.h"

#define PROBE_PLUGIN_VOCAB 1000u

struct probe_model {
	uint32_t vocab;
	bool fail_on_7;		/* mode nextfail */
};

/* Append "what pid ppid" to $DYNBATCH_TEST_MARKER, if set. */
static void probe_mark(const char *what)
{
	const char *path = getenv("DYNBATCH_TEST_MARKER");
	char line[64];
	int fd, n;

	if (!path || !*path)
		return;
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	n = snprintf(line, sizeof(line), "%s %d %d\n", what, (int)getpid(),
		     (int)getppid());
	if (write(fd, line, (size_t)n) != n)
		perror("probe_plugin: marker");
	close(fd);
}

__attribute__((constructor)) static void probe_plugin_loaded(void)
{
	probe_mark("ctor");
}

static void *probe_create(const char *args, char *err, size_t err_len)
{
	const char *mode = strncmp(args, "mode=", 5) == 0 ? args + 5 : "ok";
	struct probe_model *m;

	probe_mark("create");
	if (!strncmp(args, "say=", 4) || !strncmp(args, "sayraw=", 7)) {
		const char *text = strchr(args, '=') + 1;
		bool newline = args[3] == '=';

		if (write(3, text, strlen(text)) < 0 ||
		    (newline && write(3, "\n", 1) < 0))
			perror("probe_plugin: fd 3");
		for (;;)
			pause();
	}
	if (!strcmp(mode, "flood")) {
		static const char line[] = "flood\n";

		while (write(2, line, sizeof(line) - 1) > 0)
			;
		for (;;)
			pause();
	}
	if (!strcmp(mode, "hang") || !strcmp(mode, "closehang")) {
		if (!strcmp(mode, "closehang"))
			close(3);
		for (;;)
			pause();
	}
	if (!strcmp(mode, "crash"))
		raise(SIGSEGV);
	if (!strcmp(mode, "silent"))
		_exit(0);
	if (!strcmp(mode, "fail")) {
		snprintf(err, err_len, "no weights here\nforged line \033[31m");
		return NULL;
	}
	if (!strcmp(mode, "garbage")) {
		static const char junk[] = "vocab 12x\033[2J\n";

		if (write(3, junk, sizeof(junk) - 1) < 0)
			perror("probe_plugin: fd 3");
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, err_len, "out of memory");
		return NULL;
	}
	m->fail_on_7 = !strcmp(mode, "nextfail");
	m->vocab = !strcmp(mode, "vocab0") ? 0 :
		   !strcmp(mode, "vocabmax") ? UINT32_MAX : PROBE_PLUGIN_VOCAB;
	return m;
}

static uint32_t probe_vocab(void *model)
{
	return ((struct probe_model *)model)->vocab;
}

static int probe_next(void *model, uint32_t n_rows, const int32_t *const *prefixes,
		      const uint32_t *lengths, int32_t *next_tokens)
{
	for (uint32_t i = 0; i < n_rows; i++) {
		uint64_t last = lengths[i] ? (uint64_t)prefixes[i][lengths[i] - 1] : 0;

		if (((struct probe_model *)model)->fail_on_7 && last == 7)
			return -EIO;

		next_tokens[i] = (int32_t)((7 * last + 3 * (uint64_t)lengths[i] + 1) %
					   PROBE_PLUGIN_VOCAB);
	}
	return 0;
}

static void probe_destroy(void *model)
{
	free(model);
}

static const struct dynbatch_model_api probe_api = {
	.abi_version = DYNBATCH_MODEL_ABI_VERSION,
	.name = "probe-test",
	.create = probe_create,
	.vocab = probe_vocab,
	.next = probe_next,
	.destroy = probe_destroy,
};

const struct dynbatch_model_api *dynbatch_model_plugin(void);

const struct dynbatch_model_api *dynbatch_model_plugin(void)
{
	return &probe_api;
}
