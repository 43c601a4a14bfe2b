/*
 * sandbox.h - what a worker gives up once its model is loaded: new
 * privileges (PR_SET_NO_NEW_PRIVS) and every system call a decoding step
 * does not need (a seccomp filter), so a buggy or hostile model plugin
 * cannot open files, reach the network, start programs, or signal or
 * trace the coordinator.
 */
#ifndef DYNBATCH_WORKER_SANDBOX_H
#define DYNBATCH_WORKER_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>

/* Set to "1" in the environment of `dynbatch run|serve` (workers inherit
 * it) to run the workers unsandboxed, e.g. for a GPU plugin that needs
 * ioctl() or a debugger. */
#define WORKER_SANDBOX_OFF_ENV "DYNBATCH_NO_SANDBOX"

/* Is the sandbox turned off by WORKER_SANDBOX_OFF_ENV? */
bool worker_sandbox_disabled(void);

/*
 * Enter the sandbox, for every thread of the process (a plugin may have
 * started its own in create()), for the rest of its life.  From then on
 * write() works only on the write_fds[0..n_write_fds) descriptors, any
 * other system call outside the step's allow list (sandbox.c) fails with
 * EPERM.  Returns 0, or a negative errno after writing a one-line reason
 * into err (err_len bytes); the caller must then not serve (failing
 * closed: the filter may be half-built, nothing is loaded).
 */
int worker_sandbox_enter(const int *write_fds, size_t n_write_fds, char *err,
			 size_t err_len);

#endif /* DYNBATCH_WORKER_SANDBOX_H */
