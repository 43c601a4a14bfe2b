/*
 * parser_thread.h - request parsing off the coordinator's event loop.
 *
 * A request with many long stop sequences takes about a millisecond to
 * parse and compile; done on the event loop, every such request would
 * hold up the results of every shard.  The coordinator therefore reads
 * input and splits lines on its loop as before, hands each line to one
 * parser thread, and takes the parsed requests back in input order.  The
 * thread is a pure function of the line (request_parse); every decision
 * that needs engine state (duplicate ids, admission) stays on the loop.
 *
 * At most `capacity` lines are in the thread's hands at once, so memory
 * stays bounded.  The two sides share a ring of slots indexed by three
 * positions, each written by one side only:
 *
 *   submitted (loop) >= parsed (thread) >= taken (loop)
 *
 * A slot is published with a release store of the position and read after
 * an acquire load of it.  The thread sleeps on a semaphore when it has
 * nothing to parse, and the loop posts it only when it has said so; it
 * writes the loop's eventfd only when the loop has said it is about to
 * sleep (parser_thread_want_wakeup()).
 */
#ifndef DYNBATCH_PARSER_THREAD_H
#define DYNBATCH_PARSER_THREAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/request.h"
#include "server/request/request_json.h"

struct parser_thread;

/* One parsed line, handed back in input order. */
struct parsed_line {
	struct request req;	/* owned by the taker: request_release() it */
	uint64_t line_no;
	int rc;			/* 0, -EINVAL (bad line: see err), -ENOMEM */
	char err[512];		/* "line N: what is wrong" when rc != 0 */
};

/*
 * Start the thread.  notify_fd is an eventfd the thread writes when the
 * loop waits for it.  Returns NULL (errno set) on failure.
 */
struct parser_thread *parser_thread_create(const struct request_limits *lim,
					   uint32_t capacity, int notify_fd);

/* Stop the thread and free every line still in flight.  Accepts NULL. */
void parser_thread_destroy(struct parser_thread *p);

/* Hand over a copy of line.  0, -EAGAIN when capacity lines are in
 * flight, -ENOMEM. */
int parser_thread_submit(struct parser_thread *p, const char *line,
			 size_t len, uint64_t line_no);

/* Take the next parsed line, if the thread has finished it.  On true the
 * caller owns out->req. */
bool parser_thread_take(struct parser_thread *p, struct parsed_line *out);

/* Lines submitted and not yet taken. */
uint32_t parser_thread_in_flight(const struct parser_thread *p);

/* True when capacity lines are in flight (submit would fail). */
bool parser_thread_full(const struct parser_thread *p);

/*
 * The loop is about to sleep: ask for an eventfd write when a line is
 * parsed.  Returns true if one is ready already (then do not sleep).
 * parser_thread_no_wakeup() withdraws the request after waking.
 */
bool parser_thread_want_wakeup(struct parser_thread *p);
void parser_thread_no_wakeup(struct parser_thread *p);

#endif /* DYNBATCH_PARSER_THREAD_H */
