/*
 * model_probe.c - see model_probe.h.
 *
 * NOTES ON THE DESIGN
 *
 * Three things are watched at once, with one poll() and one deadline:
 * the answer pipe (read up to the first newline, at most
 * PROBE_ANSWER_MAX bytes), the probe's stderr (a pipe of its own: the
 * tail is kept for the failure message, escaped, and never reaches our
 * stderr raw, which may be the run's output) and its pidfd (it ended).
 * The answer pipe alone would not do: a plugin may close its descriptor
 * and hang, or hand it to a process of its own that outlives the probe.
 * Once the probe has ended, the pipes are drained without waiting, so a
 * descriptor held by anyone else costs nothing.
 *
 * The probe is always SIGKILLed and reaped, even after a good answer:
 * nothing it does after answering (destroy(), exit handlers) is waited
 * for.  Its exit status is reported only when it ended by itself before
 * answering.
 */
#include "engine/model_probe.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log_escape.h"
#include "shard/worker_pool.h"

#define PROBE_ANSWER_MAX 1024	/* bytes of answer read, newline included */
#define PROBE_STDERR_KEEP 200	/* last bytes of the probe's stderr kept */
#define PROBE_READS_PER_WAKE 16	/* reads of a pipe before polling again */
/* The largest vocabulary: the bound model_open() applies (tokens are
 * int32_t, so 0 .. 2^31 - 1). */
#define PROBE_VOCAB_MAX ((uint64_t)INT32_MAX + 1)

struct probe_run {
	pid_t pid;
	int pidfd;
	int answer_rd;		/* read end of the answer pipe, nonblocking */
	int stderr_rd;		/* read end of its stderr pipe, nonblocking */
	char answer[PROBE_ANSWER_MAX + 1];	/* NUL-terminated */
	size_t n_answer;
	char tail[PROBE_STDERR_KEEP + 1];	/* NUL-terminated */
	size_t n_tail;
	bool answer_done;	/* a newline came, or the buffer is full */
	bool answer_eof;	/* every writer closed the answer pipe */
	bool stderr_eof;
	bool exited;		/* the pidfd said it ended by itself */
	bool timed_out;
};

/* Read what the answer pipe holds, without waiting. */
static void probe_read_answer(struct probe_run *r)
{
	for (int i = 0; i < PROBE_READS_PER_WAKE && !r->answer_done; i++) {
		ssize_t n = read(r->answer_rd, r->answer + r->n_answer,
				 PROBE_ANSWER_MAX - r->n_answer);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0 || errno != EAGAIN)
				r->answer_eof = true;
			return;
		}
		r->n_answer += (size_t)n;
		r->answer[r->n_answer] = '\0';
		r->answer_done = memchr(r->answer, '\n', r->n_answer) ||
				 r->n_answer == PROBE_ANSWER_MAX;
	}
}

/* Read what the stderr pipe holds, without waiting, keeping the tail. */
static void probe_read_stderr(struct probe_run *r)
{
	char buf[4096];

	for (int i = 0; i < PROBE_READS_PER_WAKE; i++) {
		ssize_t n = read(r->stderr_rd, buf, sizeof(buf));
		size_t keep, drop;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0 || errno != EAGAIN)
				r->stderr_eof = true;
			return;
		}
		keep = (size_t)n < PROBE_STDERR_KEEP ? (size_t)n : PROBE_STDERR_KEEP;
		drop = r->n_tail + keep > PROBE_STDERR_KEEP ?
		       r->n_tail + keep - PROBE_STDERR_KEEP : 0;
		memmove(r->tail, r->tail + drop, r->n_tail - drop);
		memcpy(r->tail + r->n_tail - drop, buf + (size_t)n - keep, keep);
		r->n_tail += keep - drop;
		r->tail[r->n_tail] = '\0';
	}
}

/*
 * Wait until the probe has answered, ended, or timeout_ms has passed.
 * 0, or a negative errno when poll() fails.
 */
static int probe_wait(struct probe_run *r, uint64_t timeout_ms)
{
	uint64_t deadline = clock_now_ns() + timeout_ms * 1000000ull;

	while (!r->answer_done && !r->exited) {
		struct pollfd pfd[3];
		int i_answer = -1, i_stderr = -1, i_exit, ms;
		nfds_t n = 0;
		uint64_t now = clock_now_ns();

		if (now >= deadline) {
			r->timed_out = true;
			return 0;
		}
		if (!r->answer_eof) {
			i_answer = (int)n;
			pfd[n++] = (struct pollfd){ .fd = r->answer_rd, .events = POLLIN };
		}
		if (!r->stderr_eof) {
			i_stderr = (int)n;
			pfd[n++] = (struct pollfd){ .fd = r->stderr_rd, .events = POLLIN };
		}
		i_exit = (int)n;
		pfd[n++] = (struct pollfd){ .fd = r->pidfd, .events = POLLIN };
		/* rounded up, so that we never wake just short of the deadline */
		ms = (deadline - now + 999999) / 1000000 > INT_MAX ? INT_MAX :
		     (int)((deadline - now + 999999) / 1000000);
		if (poll(pfd, n, ms) < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (i_answer >= 0 && pfd[i_answer].revents)
			probe_read_answer(r);
		if (i_stderr >= 0 && pfd[i_stderr].revents)
			probe_read_stderr(r);
		if (pfd[i_exit].revents)
			r->exited = true;
	}
	/* what it wrote before it ended is in the pipes already */
	if (!r->answer_done && !r->answer_eof)
		probe_read_answer(r);
	if (!r->stderr_eof)
		probe_read_stderr(r);
	return 0;
}

/* SIGKILL and reap the probe; how it ended into how (used only when it
 * ended by itself). */
static void probe_end(struct probe_run *r, char *how, size_t how_len)
{
	int status = 0;

	/* no reuse race: the pid stays ours until waitpid() below */
	kill(r->pid, SIGKILL);
	while (waitpid(r->pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFSIGNALED(status))
		snprintf(how, how_len, "was killed by signal %d (%s)",
			 WTERMSIG(status), strsignal(WTERMSIG(status)));
	else
		snprintf(how, how_len, "exited with status %d", WEXITSTATUS(status));
}

/* A plain decimal in [lo, hi]: no sign, no leading zero.  0 or -1. */
static int probe_parse_num(const char *s, size_t len, uint64_t lo, uint64_t hi,
			   uint32_t *out)
{
	uint64_t v = 0;

	if (len < 1 || len > 10 || (s[0] == '0' && len > 1))
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v < lo || v > hi)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/*
 * "N context M logits L kv K" of "vocab N context M logits L kv K": the
 * vocabulary, 1 .. PROBE_VOCAB_MAX, the model's longest prefix (0: no
 * limit), whether it gives logits (0 or 1) and a paged model's KV bytes
 * per position (0: not paged).  0 or -1.
 */
static int probe_parse_vocab(const char *s, size_t len, struct model_probe *out)
{
	static const char sep_context[] = " context ", sep_logits[] = " logits ",
			  sep_kv[] = " kv ";
	const char *at_context = memmem(s, len, sep_context, sizeof(sep_context) - 1);
	const char *end = s + len, *m, *at_logits, *l, *at_kv;
	uint32_t logits;

	if (!at_context)
		return -1;
	m = at_context + sizeof(sep_context) - 1;
	at_logits = memmem(m, (size_t)(end - m), sep_logits, sizeof(sep_logits) - 1);
	if (!at_logits)
		return -1;
	l = at_logits + sizeof(sep_logits) - 1;
	at_kv = memmem(l, (size_t)(end - l), sep_kv, sizeof(sep_kv) - 1);
	if (!at_kv)
		return -1;
	if (probe_parse_num(s, (size_t)(at_context - s), 1, PROBE_VOCAB_MAX,
			    &out->vocab) ||
	    probe_parse_num(m, (size_t)(at_logits - m), 0, UINT32_MAX,
			    &out->max_context) ||
	    probe_parse_num(l, (size_t)(at_kv - l), 0, 1, &logits) ||
	    probe_parse_num(at_kv + sizeof(sep_kv) - 1,
			    (size_t)(end - at_kv) - (sizeof(sep_kv) - 1), 0,
			    PROBE_KV_BYTES_MAX, &out->kv_bytes_per_token))
		return -1;
	out->logits = logits == 1;
	return 0;
}

/*
 * Judge a probe that has been waited for and reaped.  0 with *out set,
 * or MODEL_PROBE_REFUSED with the reason (escaped) in why.
 */
static int probe_judge(struct probe_run *r, const char *how, uint64_t timeout_ms,
		       struct model_probe *out, char *why, size_t why_len)
{
	char text[PROBE_ANSWER_MAX + 1], esc[2 * LOG_ESCAPE_MAX];
	const char *nl = memchr(r->answer, '\n', r->n_answer);
	size_t len = nl ? (size_t)(nl - r->answer) : 0;

	if (nl && (size_t)(nl - r->answer) + 1 == r->n_answer) {
		if (len > 6 && !memcmp(r->answer, "vocab ", 6) &&
		    !probe_parse_vocab(r->answer + 6, len - 6, out))
			return 0;
		if (len > 6 && !memcmp(r->answer, "error ", 6)) {
			memcpy(text, r->answer + 6, len - 6);
			text[len - 6] = '\0';
			snprintf(why, why_len, "%s", log_escape(text, esc, sizeof(esc)));
			return MODEL_PROBE_REFUSED;
		}
	}
	if (r->timed_out && !r->answer_done)
		snprintf(why, why_len, "the probe gave no answer within %llu ms "
			 "(--start-timeout) and was killed%s%s%s",
			 (unsigned long long)timeout_ms,
			 r->n_answer ? " (it wrote '" : "",
			 r->n_answer ? log_escape(r->answer, esc, sizeof(esc)) : "",
			 r->n_answer ? "' and no newline)" : "");
	else if (r->n_answer)
		snprintf(why, why_len, "the probe answered '%s', not 'vocab N context M logits L kv K' "
			 "(N in 1..%llu, L 0 or 1) or 'error TEXT' and a newline",
			 log_escape(r->answer, esc, sizeof(esc)),
			 (unsigned long long)PROBE_VOCAB_MAX);
	else
		snprintf(why, why_len, "the probe %s without an answer",
			 r->exited ? how : "closed its answer pipe");
	return MODEL_PROBE_REFUSED;
}

int model_probe_vocab(const char *worker_path, const char *spec,
		      uint64_t timeout_ms, struct model_probe *out, char *err,
		      size_t err_len)
{
	struct probe_run r = { .pidfd = -1 };
	int answer[2], errpipe[2], ret;
	char why[PROBE_ANSWER_MAX], how[96];
	char esc[4 * PROBE_STDERR_KEEP + 4];	/* \xNN for every byte, "..." */

	if (pipe2(answer, O_CLOEXEC)) {
		ret = -errno;
		goto out_msg;
	}
	if (pipe2(errpipe, O_CLOEXEC)) {
		ret = -errno;
		goto out_answer;
	}
	/* only our ends wait for nothing; the probe's ends stay blocking */
	fcntl(answer[0], F_SETFL, O_NONBLOCK);
	fcntl(errpipe[0], F_SETFL, O_NONBLOCK);
	ret = worker_spawn_probe(worker_path, spec, answer[1], errpipe[1], &r.pid,
				 &r.pidfd);
	/* closed now, so that the probe's end is the last write end */
	close(answer[1]);
	close(errpipe[1]);
	answer[1] = errpipe[1] = -1;
	if (ret)
		goto out_pipes;
	r.answer_rd = answer[0];
	r.stderr_rd = errpipe[0];
	ret = probe_wait(&r, timeout_ms);
	probe_end(&r, how, sizeof(how));
	close(r.pidfd);
	if (ret)
		goto out_pipes;
	ret = probe_judge(&r, how, timeout_ms, out, why, sizeof(why));
	if (ret && r.n_tail)
		snprintf(err, err_len, "%s; its stderr ended with '%s'", why,
			 log_escape(r.tail, esc, sizeof(esc)));
	else if (ret)
		snprintf(err, err_len, "%s", why);
out_pipes:
	close(errpipe[0]);
out_answer:
	close(answer[0]);
	if (answer[1] >= 0)
		close(answer[1]);
out_msg:
	if (ret < 0)
		snprintf(err, err_len, "cannot run a probe of %s: %s", worker_path,
			 strerror(-ret));
	return ret;
}
