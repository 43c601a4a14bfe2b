/*
 * parser_thread.c - see parser_thread.h.
 */
#include "server/jsonl/parser_thread.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/sleep_handshake.h"
#include "server/request/request_json.h"

struct parser_slot {
	char *line;		/* malloc'd copy, freed by the thread */
	size_t len;
	struct parsed_line out;
};

struct parser_thread {
	struct request_limits lim;
	uint32_t capacity;
	struct parser_slot *slots;
	int notify_fd;
	pthread_t thread;
	sem_t work;			/* posted once per submitted line */
	_Atomic bool stop;
	/* positions, each on its own cache line: one writer each */
	_Alignas(64) _Atomic uint64_t submitted;	/* loop */
	_Alignas(64) _Atomic uint64_t parsed;		/* thread */
	_Alignas(64) uint64_t taken;			/* loop, private */
	_Alignas(64) _Atomic uint32_t loop_waiting;	/* loop */
	_Alignas(64) _Atomic uint32_t parser_waiting;	/* thread */
};

/* What the parser thread waits for: a line past pos, or the stop. */
struct parser_wait_for {
	struct parser_thread *p;
	uint64_t pos;
};

static bool parser_recheck_work(const void *arg)
{
	const struct parser_wait_for *f = arg;

	return f->pos < atomic_load(&f->p->submitted) || atomic_load(&f->p->stop);
}

static void *parser_main(void *arg)
{
	struct parser_thread *p = arg;
	uint64_t pos = 0;

	for (;;) {
		struct parser_slot *s;

		if (atomic_load(&p->stop))
			break;
		/* acquire: pairs with the release in parser_thread_submit() */
		if (pos >= atomic_load_explicit(&p->submitted, memory_order_acquire)) {
			struct parser_wait_for wait_for = { p, pos };

			/* pairs with sleep_handshake_check() in
			 * parser_thread_submit(): either it sees us waiting or
			 * we see its line */
			if (!sleep_handshake_announce(&p->parser_waiting, 1,
						      parser_recheck_work, &wait_for))
				while (sem_wait(&p->work) && errno == EINTR)
					;
			sleep_handshake_done(&p->parser_waiting);
			continue;
		}
		s = &p->slots[pos % p->capacity];
		memset(&s->out.req, 0, sizeof(s->out.req));
		s->out.rc = request_parse(s->line, s->len, s->out.line_no, &p->lim,
					  &s->out.req, s->out.err, sizeof(s->out.err));
		free(s->line);
		s->line = NULL;
		pos++;
		/* release: pairs with the acquire in parser_thread_take() */
		atomic_store_explicit(&p->parsed, pos, memory_order_release);
		/* pairs with the announcement in parser_thread_want_wakeup() */
		if (sleep_handshake_check(&p->loop_waiting)) {
			uint64_t one = 1;

			if (write(p->notify_fd, &one, sizeof(one)) < 0) {
				/* EAGAIN: the counter is already non-zero */
			}
		}
	}
	return NULL;
}

struct parser_thread *parser_thread_create(const struct request_limits *lim,
					   uint32_t capacity, int notify_fd)
{
	struct parser_thread *p;
	int ret;

	p = aligned_alloc(64, (sizeof(*p) + 63) / 64 * 64);
	if (!p)
		return NULL;
	memset(p, 0, sizeof(*p));
	p->lim = *lim;
	p->capacity = capacity ? capacity : 1;
	p->notify_fd = notify_fd;
	p->slots = calloc(p->capacity, sizeof(*p->slots));
	if (!p->slots)
		goto out_free;
	if (sem_init(&p->work, 0, 0))
		goto out_free_slots;
	ret = pthread_create(&p->thread, NULL, parser_main, p);
	if (ret) {
		errno = ret;
		goto out_sem;
	}
	return p;

out_sem:
	sem_destroy(&p->work);
out_free_slots:
	free(p->slots);
out_free:
	free(p);
	return NULL;
}

void parser_thread_destroy(struct parser_thread *p)
{
	uint64_t parsed;

	if (!p)
		return;
	atomic_store(&p->stop, true);
	sem_post(&p->work);
	pthread_join(p->thread, NULL);
	parsed = atomic_load(&p->parsed);
	for (uint64_t pos = p->taken; pos < atomic_load(&p->submitted); pos++) {
		struct parser_slot *s = &p->slots[pos % p->capacity];

		free(s->line);
		if (pos < parsed)
			request_release(&s->out.req);
	}
	sem_destroy(&p->work);
	free(p->slots);
	free(p);
}

uint32_t parser_thread_in_flight(const struct parser_thread *p)
{
	return (uint32_t)(atomic_load_explicit(&p->submitted, memory_order_relaxed) -
			  p->taken);
}

bool parser_thread_full(const struct parser_thread *p)
{
	return parser_thread_in_flight(p) >= p->capacity;
}

int parser_thread_submit(struct parser_thread *p, const char *line,
			 size_t len, uint64_t line_no)
{
	uint64_t pos = atomic_load_explicit(&p->submitted, memory_order_relaxed);
	struct parser_slot *s;

	if (parser_thread_full(p))
		return -EAGAIN;
	s = &p->slots[pos % p->capacity];
	s->line = malloc(len + 1);
	if (!s->line)
		return -ENOMEM;
	memcpy(s->line, line, len);
	s->line[len] = '\0';
	s->len = len;
	s->out.line_no = line_no;
	/* release: pairs with the acquire in parser_main() */
	atomic_store_explicit(&p->submitted, pos + 1, memory_order_release);
	/* pairs with the announcement in parser_main(); post only to a
	 * thread that said it waits (a post is a system call) */
	if (sleep_handshake_check(&p->parser_waiting))
		sem_post(&p->work);
	return 0;
}

bool parser_thread_take(struct parser_thread *p, struct parsed_line *out)
{
	struct parser_slot *s;

	/* acquire: pairs with the release in parser_main() */
	if (p->taken >= atomic_load_explicit(&p->parsed, memory_order_acquire))
		return false;
	s = &p->slots[p->taken % p->capacity];
	out->req = s->out.req;
	out->line_no = s->out.line_no;
	out->rc = s->out.rc;
	memcpy(out->err, s->out.err, sizeof(out->err));
	memset(&s->out.req, 0, sizeof(s->out.req));
	p->taken++;
	return true;
}

static bool parser_recheck_parsed(const void *arg)
{
	const struct parser_thread *p = arg;

	return p->taken < atomic_load(&p->parsed);
}

bool parser_thread_want_wakeup(struct parser_thread *p)
{
	/* pairs with sleep_handshake_check() in parser_main() */
	return sleep_handshake_announce(&p->loop_waiting, 1, parser_recheck_parsed, p);
}

void parser_thread_no_wakeup(struct parser_thread *p)
{
	sleep_handshake_done(&p->loop_waiting);
}
