/*
 * fault_inject.c - run a dynbatch command and hurt its workers while it
 * runs (docs/DESIGN.md 9).
 *
 *   fault_inject [--seed S] [--duration-ms D] [--first-kill-ms M] [--kill-rate R]
 *                [--first-stop-ms M] [--stop-rate R] [--stop-max-ms M] [--verbose]
 *                -- COMMAND [ARGS...]
 *
 * COMMAND (normally "bin/dynbatch run ...") is started as our own child:
 * the coordinator.  Until it exits, kills and stops arrive as two
 * independent Poisson processes (exponential gaps, R per second each).  A
 * kill SIGKILLs a random live worker of the coordinator; a stop SIGSTOPs
 * a random running one and SIGCONTs it 1..M ms later.  After D ms (when
 * given) nothing more is injected, pending SIGCONTs still go out, and the
 * command runs to its end.  Then one summary line goes to stderr:
 *
 *   fault_inject: seed=S kills=K stops=T (longest stop X ms) command exit=E
 *
 * and we exit with the command's status (1 when a signal ended it; 127
 * when it could not be started; 2 for a usage error of our own).
 *
 * NOTES ON THE DESIGN
 *
 * Whom we may signal.  Only a process that is, when we look, a child of
 * the coordinator (/proc/C/task/C/children) whose /proc/PID/cmdline starts
 * with "dynbatch-worker": a forked worker that has not exec'd yet still
 * carries the coordinator's command line and is left alone.  Pids are
 * reused, so we first open a pidfd on the pid, then check, then signal
 * through the pidfd: if the checked process died after the open, the pid
 * may name someone else by now, but the pidfd still names the dead one
 * and the signal fails with ESRCH instead of hitting a stranger.  A
 * stopped worker keeps its pidfd until it is continued, so the SIGCONT
 * reaches exactly the process we stopped, even if it has died since.
 *
 * Nobody stays stopped.  Every stopped worker is continued on time, and
 * at once when injection ends, when the command exits, and when we are
 * asked to stop (SIGINT, SIGTERM, SIGHUP).  Such a signal is passed on
 * to the command unless it came from the terminal (si_code SI_KERNEL),
 * which signals the whole foreground group, the command included.
 *
 * Replay.  One splitmix64 stream seeded by --seed (printed first) draws
 * every gap, choice and stop length.  The order of events replays; their
 * effect depends on timing, so a failing run is replayed by its seed and
 * command, not bit for bit.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "model/sim_model.h"
#include "util/parse_num.h"

#define FI_WORKER_NAME "dynbatch-worker"
#define FI_MAX_CANDIDATES 4096	/* workers looked at per pick */
#define FI_MAX_STOPPED 1024	/* workers stopped at the same time */
#define FI_CHILDREN_BYTES 65536
#define NS_PER_MS UINT64_C(1000000)
#define NS_PER_SEC UINT64_C(1000000000)
#define NEVER UINT64_MAX

struct fi_opts {
	uint64_t seed;
	bool has_duration;
	uint64_t duration_ms;	/* inject for this long after the start */
	double kill_rate;	/* kills per second */
	uint64_t first_kill_ms;	/* > 0: the first kill this long after the
				 * start, retried every 10 ms until one lands
				 * (a test that must see a kill: a short run
				 * may otherwise draw none) */
	double stop_rate;	/* stops per second */
	uint32_t stop_max_ms;	/* a stop lasts 1..stop_max_ms ms */
	uint64_t first_stop_ms;	/* > 0: the first stop this long after the
				 * start, lasting stop_max_ms, retried every
				 * 10 ms until one lands (a test that must see
				 * a stop outlast its step timeout) */
	bool verbose;		/* one line per injected fault */
	char **command;		/* NULL-terminated argv */
};

/* A worker we stopped and have not continued yet. */
struct fi_stopped {
	pid_t pid;
	int pidfd;		/* names exactly the process we stopped */
	uint64_t stopped_ns;
	uint64_t cont_at_ns;
};

struct fi_state {
	const struct fi_opts *opt;
	pid_t coord;		/* the command, our child */
	uint64_t start_ns;
	uint64_t n_kills;
	uint64_t n_stops;
	uint64_t n_misses;	/* faults due when no worker could be hit */
	uint64_t longest_stop_ns;
	struct fi_stopped stopped[FI_MAX_STOPPED];
	uint32_t n_stopped;
};

/* ------------------------------------------------------------------------
 * Random numbers: splitmix64
 */

static uint64_t rng_state;

static uint64_t rnd(void)
{
	return sim_splitmix64(&rng_state);
}

/* In [0, n); 0 when n is 0. */
static uint32_t rnd_below(uint32_t n)
{
	return n ? (uint32_t)(rnd() % n) : 0;
}

/* The gap to the next event of a Poisson process of rate per second, ns;
 * NEVER for a rate of 0. */
static uint64_t rnd_gap_ns(double rate)
{
	double u, s;

	if (rate <= 0)
		return NEVER;
	u = (double)((rnd() >> 11) + 1) / (double)(1ull << 53);	/* (0, 1] */
	s = -log(u) / rate;
	return s >= 1e9 ? NEVER : (uint64_t)(s * (double)NS_PER_SEC);
}

static uint64_t add_ns(uint64_t t, uint64_t d)
{
	return d == NEVER || t > NEVER - d ? NEVER : t + d;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* ------------------------------------------------------------------------
 * Finding the coordinator's workers in /proc
 */

/* Read up to cap - 1 bytes of a /proc file, NUL-terminated.  Bytes read,
 * or -1. */
static ssize_t read_small(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f)
		return -1;
	n = fread(buf, 1, cap - 1, f);
	fclose(f);
	buf[n] = '\0';
	return (ssize_t)n;
}

/* The coordinator's children, at most max of them.  Returns how many. */
static uint32_t coord_children(pid_t coord, pid_t *pids, uint32_t max)
{
	static char buf[FI_CHILDREN_BYTES];
	char path[64], *p, *end;
	uint32_t n = 0;
	long v;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)coord,
		 (int)coord);
	if (read_small(path, buf, sizeof(buf)) < 0)
		return 0;
	for (p = buf; n < max; p = end) {
		v = strtol(p, &end, 10);
		if (end == p)
			break;
		if (v > 0 && v <= INT32_MAX)
			pids[n++] = (pid_t)v;
	}
	return n;
}

static bool cmdline_is_worker(pid_t pid)
{
	char path[64], buf[64];
	size_t len = strlen(FI_WORKER_NAME);

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	return read_small(path, buf, sizeof(buf)) >= (ssize_t)len &&
	       memcmp(buf, FI_WORKER_NAME, len) == 0;
}

/* pid is, right now, a child of coord running dynbatch-worker. */
static bool is_worker_of(pid_t coord, pid_t pid)
{
	pid_t kids[FI_MAX_CANDIDATES];
	uint32_t n = coord_children(coord, kids, FI_MAX_CANDIDATES);

	for (uint32_t i = 0; i < n; i++)
		if (kids[i] == pid)
			return cmdline_is_worker(pid);
	return false;
}

/* Index of pid in the stopped list, or -1. */
static int stopped_index(const struct fi_state *st, pid_t pid)
{
	for (uint32_t i = 0; i < st->n_stopped; i++)
		if (st->stopped[i].pid == pid)
			return (int)i;
	return -1;
}

/*
 * Open a pidfd on pid, then check that it is a worker of coord: see the
 * notes on pid reuse.  The pidfd, or -1 when pid is not (or no longer)
 * such a worker.
 */
static int open_worker(pid_t coord, pid_t pid)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);

	if (fd < 0)
		return -1;
	if (!is_worker_of(coord, pid)) {
		close(fd);
		return -1;
	}
	return fd;
}

static int pidfd_signal(int pidfd, int signo)
{
	return syscall(SYS_pidfd_send_signal, pidfd, signo, NULL, 0) ? -errno : 0;
}

/*
 * Pick a random worker of the coordinator (not one we hold stopped when
 * skip_stopped) and open a pidfd on it.  Returns the pidfd and sets *pid,
 * or -1 when there is none.
 */
static int pick_worker(const struct fi_state *st, bool skip_stopped, pid_t *pid)
{
	pid_t cand[FI_MAX_CANDIDATES];
	uint32_t n = coord_children(st->coord, cand, FI_MAX_CANDIDATES);
	uint32_t i, k = 0;
	int fd;

	for (i = 0; i < n; i++)
		if (cmdline_is_worker(cand[i]) &&
		    !(skip_stopped && stopped_index(st, cand[i]) >= 0))
			cand[k++] = cand[i];
	while (k > 0) {
		i = rnd_below(k);
		fd = open_worker(st->coord, cand[i]);
		if (fd >= 0) {
			*pid = cand[i];
			return fd;
		}
		cand[i] = cand[--k];
	}
	return -1;
}

/* ------------------------------------------------------------------------
 * Injecting
 */

static void note(const struct fi_state *st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void note(const struct fi_state *st, const char *fmt, ...)
{
	char line[256];
	va_list ap;
	int n;

	if (!st->opt->verbose)
		return;
	n = snprintf(line, sizeof(line), "fault_inject: +%" PRIu64 " ms ",
		     (clock_now_ns() - st->start_ns) / NS_PER_MS);
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	strcat(line, "\n");
	/* one write, not interleaved with the command's own stderr lines */
	fputs(line, stderr);
}

/* Drop stopped[i] from the list (the last one moves to i); how long it
 * was held, ns. */
static uint64_t forget_stopped(struct fi_state *st, uint32_t i)
{
	uint64_t held = clock_now_ns() - st->stopped[i].stopped_ns;

	if (held > st->longest_stop_ns)
		st->longest_stop_ns = held;
	close(st->stopped[i].pidfd);
	st->stopped[i] = st->stopped[--st->n_stopped];
	return held;
}

/* Continue stopped[i] and drop it from the list. */
static void cont_one(struct fi_state *st, uint32_t i)
{
	pid_t pid = st->stopped[i].pid;
	int ret = pidfd_signal(st->stopped[i].pidfd, SIGCONT);
	uint64_t held = forget_stopped(st, i);

	note(st, "cont worker %d after %" PRIu64 " ms%s", (int)pid,
	     held / NS_PER_MS, ret ? " (it is gone)" : "");
}

/* Continue the stopped workers due by now (all of them: now NEVER). */
static void cont_due(struct fi_state *st, uint64_t now)
{
	uint32_t i = 0;

	while (i < st->n_stopped) {
		if (st->stopped[i].cont_at_ns <= now)
			cont_one(st, i);	/* moves the last one to i */
		else
			i++;
	}
}

static uint64_t next_cont_ns(const struct fi_state *st)
{
	uint64_t t = NEVER;

	for (uint32_t i = 0; i < st->n_stopped; i++)
		t = min_u64(t, st->stopped[i].cont_at_ns);
	return t;
}

static void inject_kill(struct fi_state *st)
{
	pid_t pid;
	int fd = pick_worker(st, false, &pid);

	if (fd < 0) {
		st->n_misses++;
		note(st, "kill due, but no worker to kill");
		return;
	}
	if (pidfd_signal(fd, SIGKILL) == 0) {
		int i = stopped_index(st, pid);

		st->n_kills++;
		if (i < 0) {
			note(st, "kill worker %d", (int)pid);
		} else {
			/* it is dead: nothing left to continue */
			note(st, "kill worker %d, stopped for %" PRIu64 " ms",
			     (int)pid, forget_stopped(st, (uint32_t)i) / NS_PER_MS);
		}
	} else {
		st->n_misses++;
	}
	close(fd);
}

static void inject_stop(struct fi_state *st, uint64_t now, bool full)
{
	uint32_t ms = full ? st->opt->stop_max_ms : 1 + rnd_below(st->opt->stop_max_ms);
	struct fi_stopped *w;
	pid_t pid;
	int fd;

	if (st->n_stopped == FI_MAX_STOPPED ||
	    (fd = pick_worker(st, true, &pid)) < 0) {
		st->n_misses++;
		note(st, "stop due, but no worker to stop");
		return;
	}
	if (pidfd_signal(fd, SIGSTOP)) {
		st->n_misses++;
		close(fd);
		return;
	}
	w = &st->stopped[st->n_stopped++];
	w->pid = pid;
	w->pidfd = fd;
	w->stopped_ns = now;
	w->cont_at_ns = now + ms * NS_PER_MS;
	st->n_stops++;
	note(st, "stop worker %d for %u ms", (int)pid, ms);
}

/* ------------------------------------------------------------------------
 * Running the command
 */

/* Fork and exec the command with the signal mask we found.  Its pid or -1. */
static pid_t start_command(char **command, const sigset_t *old_mask)
{
	pid_t pid = fork();

	if (pid != 0)
		return pid;
	sigprocmask(SIG_SETMASK, old_mask, NULL);
	execvp(command[0], command);
	fprintf(stderr, "fault_inject: cannot run '%s': %s\n", command[0],
		strerror(errno));
	_exit(127);
}

/* One of our stop signals arrived: see the notes. */
static void on_signal(struct fi_state *st, int sig_fd, bool *injecting)
{
	struct signalfd_siginfo si;

	if (read(sig_fd, &si, sizeof(si)) != (ssize_t)sizeof(si))
		return;
	note(st, "got %s: no more faults", strsignal((int)si.ssi_signo));
	*injecting = false;
	cont_due(st, NEVER);
	if (si.ssi_code != SI_KERNEL)
		kill(st->coord, (int)si.ssi_signo);
}

/* Inject until the command exits (we kill it when we cannot watch it). */
static void inject_loop(struct fi_state *st, int sig_fd)
{
	const struct fi_opts *o = st->opt;
	uint64_t now = clock_now_ns();
	uint64_t end_ns = o->has_duration ? add_ns(now, o->duration_ms * NS_PER_MS)
					  : NEVER;
	uint64_t next_kill = add_ns(now, o->first_kill_ms ?
					 o->first_kill_ms * NS_PER_MS :
					 rnd_gap_ns(o->kill_rate));
	uint64_t next_stop = add_ns(now, o->first_stop_ms ?
					 o->first_stop_ms * NS_PER_MS :
					 rnd_gap_ns(o->stop_rate));
	bool injecting = true;
	struct pollfd pfd[2];
	int coord_fd = (int)syscall(SYS_pidfd_open, st->coord, 0);

	if (coord_fd < 0) {
		fprintf(stderr, "fault_inject: pidfd_open: %s\n", strerror(errno));
		kill(st->coord, SIGKILL);
		return;
	}
	pfd[0] = (struct pollfd){ .fd = coord_fd, .events = POLLIN };
	pfd[1] = (struct pollfd){ .fd = sig_fd, .events = POLLIN };
	for (;;) {
		uint64_t wake;
		struct timespec ts;

		now = clock_now_ns();
		cont_due(st, now);
		if (injecting && now >= end_ns) {
			note(st, "duration reached: no more faults");
			injecting = false;
		}
		if (injecting && now >= next_kill) {
			uint64_t kills = st->n_kills;

			inject_kill(st);
			next_kill = o->first_kill_ms && !kills && st->n_kills == 0 ?
				    add_ns(now, 10 * NS_PER_MS) :
				    add_ns(now, rnd_gap_ns(o->kill_rate));
		}
		if (injecting && now >= next_stop) {
			bool first = o->first_stop_ms && st->n_stops == 0;

			inject_stop(st, now, first);
			next_stop = first && st->n_stops == 0 ?
				    add_ns(now, 10 * NS_PER_MS) :
				    add_ns(now, rnd_gap_ns(o->stop_rate));
		}
		wake = next_cont_ns(st);
		if (injecting)
			wake = min_u64(wake, min_u64(end_ns, min_u64(next_kill, next_stop)));
		now = clock_now_ns();
		if (wake != NEVER)
			wake = wake > now ? wake - now : 0;
		ts.tv_sec = (time_t)(wake / NS_PER_SEC);
		ts.tv_nsec = (long)(wake % NS_PER_SEC);
		if (ppoll(pfd, 2, wake == NEVER ? NULL : &ts, NULL) < 0 &&
		    errno != EINTR) {
			fprintf(stderr, "fault_inject: ppoll: %s\n", strerror(errno));
			kill(st->coord, SIGKILL);
			break;
		}
		if (pfd[0].revents)
			break;
		if (pfd[1].revents)
			on_signal(st, sig_fd, &injecting);
	}
	cont_due(st, NEVER);
	close(coord_fd);
}

/* ------------------------------------------------------------------------
 * Command line
 */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: fault_inject [options] -- COMMAND [ARGS...]\n"
		"Run COMMAND (a dynbatch coordinator) and kill or stop its workers\n"
		"at random moments until it exits; exit with its status.\n"
		"  --seed S         random seed (default: from the clock; printed)\n"
		"  --duration-ms D  inject only during the first D ms (default: all)\n"
		"  --first-kill-ms M  the first kill M ms after the start (retried\n"
		"                   every 10 ms until a worker is there), then at the rate\n"
		"  --kill-rate R    SIGKILLs per second (default 2)\n"
		"  --first-stop-ms M  the first stop M ms after the start, for the\n"
		"                   whole --stop-max-ms (retried every 10 ms until a\n"
		"                   worker is there), then at the rate\n"
		"  --stop-rate R    SIGSTOP/SIGCONT pairs per second (default 1)\n"
		"  --stop-max-ms M  a stop lasts 1..M ms (default 100)\n"
		"  --verbose        one line per fault on stderr\n"
		"  --help           this text\n"
		"Exit: the command's status (1 if a signal ended it, 127 if it could\n"
		"not be run), 2 for a usage error.\n");
}

static int parse_rate(const char *s, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= 0) || v > 1e6)
		return -EINVAL;
	*out = v;
	return 0;
}

/* 0, 1 for --help, or -EINVAL (message printed). */
static int parse_opts(int argc, char **argv, struct fi_opts *o)
{
	enum { OPT_SEED = 256, OPT_DURATION, OPT_KILL, OPT_STOP, OPT_STOP_MAX,
	       OPT_VERBOSE, OPT_HELP, OPT_FIRST_KILL, OPT_FIRST_STOP };
	static const struct option longopts[] = {
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "duration-ms", required_argument, NULL, OPT_DURATION },
		{ "first-kill-ms", required_argument, NULL, OPT_FIRST_KILL },
		{ "first-stop-ms", required_argument, NULL, OPT_FIRST_STOP },
		{ "kill-rate", required_argument, NULL, OPT_KILL },
		{ "stop-rate", required_argument, NULL, OPT_STOP },
		{ "stop-max-ms", required_argument, NULL, OPT_STOP_MAX },
		{ "verbose", no_argument, NULL, OPT_VERBOSE },
		{ "help", no_argument, NULL, OPT_HELP },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t v;
	int c, bad, idx = 0;

	opterr = 0;
	/* "+": the first non-option is the command, never reordered */
	while ((c = getopt_long(argc, argv, "+", longopts, &idx)) != -1) {
		bad = 0;
		switch (c) {
		case OPT_SEED:
			bad = parse_u64(optarg, 0, UINT64_MAX, &o->seed);
			break;
		case OPT_DURATION:
			bad = parse_u64(optarg, 0, UINT64_MAX / NS_PER_MS, &o->duration_ms);
			o->has_duration = true;
			break;
		case OPT_FIRST_KILL:
			bad = parse_u64(optarg, 1, UINT64_MAX / NS_PER_MS / 2,
					&o->first_kill_ms);
			break;
		case OPT_FIRST_STOP:
			bad = parse_u64(optarg, 1, UINT64_MAX / NS_PER_MS / 2,
					&o->first_stop_ms);
			break;
		case OPT_KILL:
			bad = parse_rate(optarg, &o->kill_rate);
			break;
		case OPT_STOP:
			bad = parse_rate(optarg, &o->stop_rate);
			break;
		case OPT_STOP_MAX:
			bad = parse_u64(optarg, 0, 24 * 3600 * 1000ull, &v) || v == 0;
			o->stop_max_ms = (uint32_t)v;
			break;
		case OPT_VERBOSE:
			o->verbose = true;
			break;
		case OPT_HELP:
			usage(stdout);
			return 1;
		default:
			fprintf(stderr, "fault_inject: bad option or missing value: '%s' "
				"(see --help)\n", argv[optind - 1]);
			return -EINVAL;
		}
		if (bad) {
			fprintf(stderr, "fault_inject: bad value '%s' for --%s (see --help)\n",
				optarg, longopts[idx].name);
			return -EINVAL;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "fault_inject: no command given (see --help)\n");
		return -EINVAL;
	}
	o->command = argv + optind;
	return 0;
}

int main(int argc, char **argv)
{
	struct fi_opts o = {
		.seed = clock_now_ns() ^ ((uint64_t)getpid() << 32),
		.kill_rate = 2,
		.stop_rate = 1,
		.stop_max_ms = 100,
	};
	static struct fi_state st;
	sigset_t sigs, old_mask;
	int ret, status, sig_fd, code;

	ret = parse_opts(argc, argv, &o);
	if (ret)
		return ret > 0 ? 0 : 2;
	rng_state = o.seed;
	fprintf(stderr, "fault_inject: seed=%" PRIu64 "\n", o.seed);

	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	sigprocmask(SIG_BLOCK, &sigs, &old_mask);
	sig_fd = signalfd(-1, &sigs, SFD_CLOEXEC);
	if (sig_fd < 0) {
		fprintf(stderr, "fault_inject: signalfd: %s\n", strerror(errno));
		return 1;
	}
	st.opt = &o;
	st.start_ns = clock_now_ns();
	st.coord = start_command(o.command, &old_mask);
	if (st.coord < 0) {
		fprintf(stderr, "fault_inject: fork: %s\n", strerror(errno));
		return 1;
	}
	note(&st, "started '%s' as pid %d", o.command[0], (int)st.coord);
	inject_loop(&st, sig_fd);
	while (waitpid(st.coord, &status, 0) < 0)
		if (errno != EINTR) {
			fprintf(stderr, "fault_inject: waitpid: %s\n", strerror(errno));
			return 1;
		}
	code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
	if (st.n_misses)
		note(&st, "%" PRIu64 " faults found no worker to hit", st.n_misses);
	fprintf(stderr, "fault_inject: seed=%" PRIu64 " kills=%" PRIu64 " stops=%"
		PRIu64 " (longest stop %" PRIu64 " ms) command exit=%d", o.seed,
		st.n_kills, st.n_stops, st.longest_stop_ns / NS_PER_MS, code);
	if (WIFSIGNALED(status))
		fprintf(stderr, " (killed by signal %d)", WTERMSIG(status));
	fputc('\n', stderr);
	close(sig_fd);
	return code;
}
