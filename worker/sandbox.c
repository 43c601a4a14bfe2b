/*
 * sandbox.c - the worker's seccomp filter; see sandbox.h.
 *
 * NOTES ON THE DESIGN
 *
 * An allow list, not a deny list: sandbox_rules[] below names every
 * system call a worker makes while it serves, each with why it is there.
 * Found with strace -f on runs of the sim model and the example plugin,
 * then checked by running tests/e2e/e2e_engine.sh, e2e_faults.sh and
 * e2e_serve.sh with a filter that trapped (SCMP_ACT_TRAP) and logged
 * every refused call: none was.  An AddressSanitizer build needs
 * sigaltstack for new threads.  Everything else fails with EPERM.  To let
 * a plugin do one more thing, add one row.
 *
 * EPERM, not a kill, for everything refused (ptrace and process_vm_*
 * included): refused, they are harmless either way, while a process
 * killed by seccomp dies mid-step, so a library that merely probes (reads
 * /proc/cpuinfo on first use, say) would crash the worker on every step
 * and the coordinator would restart it, re-run the step and, after a few
 * deaths, fail the requests in it as poison.  With EPERM the plugin sees
 * an ordinary error and fails its step or goes on; nothing can hang,
 * since no call is left waiting.  The one exception is clone3: it fails
 * with ENOSYS, which is what makes glibc's pthread_create() fall back to
 * clone(), whose flags (unlike clone3's, in memory) the filter can check.
 *
 * Arguments are checked where the number alone would allow too much:
 *   mmap/mprotect   never PROT_EXEC (no new machine code after load);
 *   write/writev    only the descriptors the caller names (stderr and
 *                   the coordinator's notification descriptor), so an
 *                   inherited or leaked descriptor cannot be written;
 *   kill/tgkill     only our own pid (abort() raises SIGABRT that way);
 *   clone           only with CLONE_THREAD (a plugin's thread pool may
 *                   start its threads lazily), never a new process.
 * read is allowed on any descriptor: a plugin may keep reading the files
 * it opened in create(); the worker holds no descriptor worth reading.
 *
 * The filter is loaded with SECCOMP_FILTER_FLAG_TSYNC (libseccomp's
 * SCMP_FLTATR_CTL_TSYNC): threads a plugin started in create() get it
 * too, and it is inherited by every later one.  A system call made for
 * another architecture (int 0x80) kills the process, libseccomp's
 * default for a foreign architecture: its numbers would not mean what the
 * table says.  x32 numbers (bit 30 set) match no row and fail with EPERM.
 */
#include "worker/sandbox.h"

#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

/* How a rule checks a call's arguments. */
enum sandbox_check {
	SANDBOX_ANY,		/* any arguments */
	SANDBOX_NO_EXEC,	/* prot (argument 2) without PROT_EXEC */
	SANDBOX_OWN_PID,	/* pid (argument 0) is ours */
	SANDBOX_WRITE_FD,	/* fd (argument 0) is one of write_fds */
	SANDBOX_THREAD,		/* flags (argument 0) include CLONE_THREAD */
	SANDBOX_ENOSYS,		/* refused with ENOSYS instead of EPERM */
};

struct sandbox_rule {
	int nr;			/* SCMP_SYS(name) */
	enum sandbox_check check;
};

/* The allow list.  One row per system call, with why a step needs it. */
static const struct sandbox_rule sandbox_rules[] = {
	/* descriptors: reading what the plugin opened in create(), logging
	 * to stderr and waking the coordinator */
	{ SCMP_SYS(read), SANDBOX_ANY },
	{ SCMP_SYS(pread64), SANDBOX_ANY },	/* weights read at an offset */
	{ SCMP_SYS(lseek), SANDBOX_ANY },	/* ... or after a seek */
	{ SCMP_SYS(write), SANDBOX_WRITE_FD },	/* log lines, notifications */
	{ SCMP_SYS(writev), SANDBOX_WRITE_FD },	/* glibc's fatal-error messages */
	{ SCMP_SYS(close), SANDBOX_ANY },	/* a plugin's own descriptors */
	{ SCMP_SYS(poll), SANDBOX_ANY },	/* waiting on a held descriptor */
	{ SCMP_SYS(ppoll), SANDBOX_ANY },
	/* memory: malloc growth and shrinkage, thread stacks; never new
	 * executable pages */
	{ SCMP_SYS(brk), SANDBOX_ANY },
	{ SCMP_SYS(mmap), SANDBOX_NO_EXEC },
	{ SCMP_SYS(mprotect), SANDBOX_NO_EXEC },	/* arena growth, stack guards */
	{ SCMP_SYS(munmap), SANDBOX_ANY },
	{ SCMP_SYS(mremap), SANDBOX_ANY },	/* realloc of a large block */
	{ SCMP_SYS(madvise), SANDBOX_ANY },	/* free() returning pages */
	/* waiting and time: the wait loop, the sim model's sleep mode, the
	 * vDSO's fallbacks */
	{ SCMP_SYS(futex), SANDBOX_ANY },	/* semaphores, locks, wake-up words */
	{ SCMP_SYS(sched_yield), SANDBOX_ANY },	/* spinning politely */
	{ SCMP_SYS(clock_gettime), SANDBOX_ANY },
	{ SCMP_SYS(clock_getres), SANDBOX_ANY },
	{ SCMP_SYS(gettimeofday), SANDBOX_ANY },
	{ SCMP_SYS(time), SANDBOX_ANY },
	{ SCMP_SYS(clock_nanosleep), SANDBOX_ANY },
	{ SCMP_SYS(nanosleep), SANDBOX_ANY },
	/* who we are: log lines carry our pid, the wait loop checks that the
	 * coordinator is still our parent */
	{ SCMP_SYS(getpid), SANDBOX_ANY },
	{ SCMP_SYS(gettid), SANDBOX_ANY },
	{ SCMP_SYS(getppid), SANDBOX_ANY },
	{ SCMP_SYS(getrandom), SANDBOX_ANY },	/* glibc's malloc and hash seeds */
	/* signals: abort() and raise() signal our own pid, and block and
	 * restore signals around it */
	{ SCMP_SYS(kill), SANDBOX_OWN_PID },
	{ SCMP_SYS(tgkill), SANDBOX_OWN_PID },
	{ SCMP_SYS(rt_sigprocmask), SANDBOX_ANY },
	{ SCMP_SYS(rt_sigaction), SANDBOX_ANY },
	{ SCMP_SYS(rt_sigreturn), SANDBOX_ANY },
	{ SCMP_SYS(restart_syscall), SANDBOX_ANY },	/* a sleep cut by a stop */
	{ SCMP_SYS(pause), SANDBOX_ANY },	/* the sim model's hang_token */
	{ SCMP_SYS(rt_sigsuspend), SANDBOX_ANY },	/* ... or a plugin's */
	/* threads a plugin starts after create(): pthread_create() and
	 * what a new thread registers */
	{ SCMP_SYS(clone), SANDBOX_THREAD },
	{ SCMP_SYS(clone3), SANDBOX_ENOSYS },	/* so glibc falls back to clone */
	{ SCMP_SYS(set_robust_list), SANDBOX_ANY },
	{ SCMP_SYS(rseq), SANDBOX_ANY },
	{ SCMP_SYS(sched_getaffinity), SANDBOX_ANY },	/* sizing a thread pool */
	{ SCMP_SYS(sigaltstack), SANDBOX_ANY },	/* ASan's new threads */
	/* leaving */
	{ SCMP_SYS(exit), SANDBOX_ANY },	/* a thread */
	{ SCMP_SYS(exit_group), SANDBOX_ANY },	/* the process */
};

/*
 * LeakSanitizer checks for leaks at exit by tracing its own threads
 * (ptrace) and reading /proc, which the filter refuses: in an
 * AddressSanitizer build, check now, before the sandbox (what is not
 * freed by now is leaked for good), which also turns the exit check off.
 */
#if defined(__SANITIZE_ADDRESS__)
#define SANDBOX_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANDBOX_LSAN 1
#endif
#endif
#ifdef SANDBOX_LSAN
void __lsan_do_leak_check(void);
#endif

bool worker_sandbox_disabled(void)
{
	const char *v = getenv(WORKER_SANDBOX_OFF_ENV);

	return v && strcmp(v, "1") == 0;
}

/*
 * Add rule to ctx.  Returns 0 or a negative errno (libseccomp's).  The
 * comparisons spell out datum_b (unused by SCMP_CMP_EQ): clang's
 * -Wmissing-field-initializers would refuse the two-argument form.
 */
static int sandbox_add(scmp_filter_ctx ctx, const struct sandbox_rule *rule,
		       pid_t self, const int *write_fds, size_t n_write_fds)
{
	int ret = 0;

	switch (rule->check) {
	case SANDBOX_ANY:
		return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, rule->nr, 0);
	case SANDBOX_NO_EXEC:
		return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, rule->nr, 1,
					SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
	case SANDBOX_OWN_PID:
		return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, rule->nr, 1,
					SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)self, 0));
	case SANDBOX_THREAD:
		return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, rule->nr, 1,
					SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD,
						CLONE_THREAD));
	case SANDBOX_ENOSYS:
		return seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), rule->nr, 0);
	case SANDBOX_WRITE_FD:
		/* several rules for one call: any that matches allows it */
		for (size_t i = 0; i < n_write_fds && !ret; i++)
			ret = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, rule->nr, 1,
					       SCMP_A0(SCMP_CMP_EQ,
						       (scmp_datum_t)write_fds[i], 0));
		return ret;
	}
	return -EINVAL;
}

int worker_sandbox_enter(const int *write_fds, size_t n_write_fds, char *err,
			 size_t err_len)
{
	scmp_filter_ctx ctx;
	pid_t self = getpid();
	int ret;

	for (size_t i = 0; i < n_write_fds; i++) {
		if (write_fds[i] < 0) {
			snprintf(err, err_len, "sandbox: bad write descriptor %d",
				 write_fds[i]);
			return -EINVAL;
		}
	}
	/* No set-uid program could gain anything for us, and seccomp
	 * requires it of an unprivileged process. */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) {
		ret = -errno;
		snprintf(err, err_len, "sandbox: prctl(PR_SET_NO_NEW_PRIVS): %s",
			 strerror(-ret));
		return ret;
	}
	ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
	if (!ctx) {
		snprintf(err, err_len, "sandbox: seccomp_init failed");
		return -ENOMEM;
	}
#if SCMP_VER_MAJOR > 2 || (SCMP_VER_MAJOR == 2 && SCMP_VER_MINOR >= 5)
	/* the kernel's errno when loading fails, not libseccomp's ECANCELED */
	seccomp_attr_set(ctx, SCMP_FLTATR_API_SYSRAWRC, 1);
#endif
	ret = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
	if (ret) {
		snprintf(err, err_len, "sandbox: cannot filter every thread: %s",
			 strerror(-ret));
		goto out_release;
	}
	for (size_t i = 0; i < sizeof(sandbox_rules) / sizeof(sandbox_rules[0]); i++) {
		ret = sandbox_add(ctx, &sandbox_rules[i], self, write_fds,
				  n_write_fds);
		if (ret) {
			char *name = seccomp_syscall_resolve_num_arch(
				SCMP_ARCH_NATIVE, sandbox_rules[i].nr);

			snprintf(err, err_len, "sandbox: rule for %s: %s",
				 name ? name : "?", strerror(-ret));
			free(name);
			goto out_release;
		}
	}
#ifdef SANDBOX_LSAN
	__lsan_do_leak_check();
#endif
	ret = seccomp_load(ctx);
	if (ret > 0)	/* a thread that could not take the filter */
		ret = -EAGAIN;
	if (ret)
		snprintf(err, err_len, "sandbox: loading the seccomp filter: %s "
			 "(set " WORKER_SANDBOX_OFF_ENV "=1 to run without it)",
			 strerror(-ret));
out_release:
	seccomp_release(ctx);
	return ret;
}
