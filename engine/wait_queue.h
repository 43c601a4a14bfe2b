/*
 * wait_queue.h - the waiting queue of request handles, in the
 * coordinator's private memory (a worker can reach nothing the
 * coordinator reads back from it).
 *
 * FIFO until a request of a class other than 0 (a tenant, --tenants) is
 * pushed; from then on it is start-time fair queueing between classes:
 * each push gets a start tag, max(the queue's virtual time, where its
 * class's previous request's tag plus cost ended), and pop serves the
 * smallest start (the oldest among equals) and moves the virtual time
 * to it.  So classes share the slots in proportion to the cost (tokens
 * reserved) they are served, a class's own requests stay FIFO, and a
 * class that had nothing queued starts at the present, never behind a
 * flood of another's.  Without classes nothing of this is allocated
 * and pop is O(1); with them pop is O(length).
 */
#ifndef DYNBATCH_WAIT_QUEUE_H
#define DYNBATCH_WAIT_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Classes 1 .. WAIT_QUEUE_CLASSES - 1 are queued fairly; 0 (and any
 * larger) is the implicit class of requests without a tenant. */
#define WAIT_QUEUE_CLASSES 4097u

struct wait_queue {
	uint32_t *handles;		/* capacity entries, a ring */
	uint32_t capacity;
	uint64_t head;			/* next position to pop */
	uint64_t tail;			/* next position to push */
	/* fair queueing, from the first push of a class > 0 (NULL before) */
	uint64_t *starts;		/* start tag of each entry, beside handles */
	uint64_t *class_end;		/* WAIT_QUEUE_CLASSES: tag + cost of
					 * each class's latest push */
	uint64_t vtime;			/* start tag of the latest pop */
};

/* 0 or -ENOMEM. */
int wait_queue_init(struct wait_queue *q, uint32_t capacity);
/* Free the ring.  Accepts a zeroed queue. */
void wait_queue_release(struct wait_queue *q);
static inline uint32_t wait_queue_len(const struct wait_queue *q)
{
	return (uint32_t)(q->tail - q->head);
}
static inline bool wait_queue_full(const struct wait_queue *q)
{
	return wait_queue_len(q) >= q->capacity;
}
/* Has a class other than 0 been pushed (fair queueing on)? */
static inline bool wait_queue_classed(const struct wait_queue *q)
{
	return q->starts != NULL;
}
/* Append to class 0; -ENOSPC when full. */
int wait_queue_push(struct wait_queue *q, uint32_t handle);
/* Append to a class, costing cost (tokens reserved; 0 counts as 1).
 * -ENOSPC when full; out of memory for the tags, the queue stays FIFO
 * (the request is queued all the same). */
int wait_queue_push_class(struct wait_queue *q, uint32_t handle,
			  uint32_t class_id, uint64_t cost);
/* Pop the next handle (the oldest, or the smallest start tag);
 * -ENOENT when empty. */
int wait_queue_pop(struct wait_queue *q, uint32_t *handle);
/* The handle pop would return now, left queued; -ENOENT when empty.
 * O(length) with classes. */
int wait_queue_peek(const struct wait_queue *q, uint32_t *handle);
/* Take handle out wherever it is (a client gave up while waiting); order
 * of the rest is kept.  O(length).  0 or -ENOENT. */
int wait_queue_remove(struct wait_queue *q, uint32_t handle);
/* 0 when the indexes are consistent (no more than capacity queued),
 * else -EINVAL. */
int wait_queue_check(const struct wait_queue *q);

#endif /* DYNBATCH_WAIT_QUEUE_H */
