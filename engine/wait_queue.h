/*
 * wait_queue.h - the FIFO waiting queue of request handles, in the
 * coordinator's private memory (a worker can reach nothing the
 * coordinator reads back from it).
 */
#ifndef DYNBATCH_WAIT_QUEUE_H
#define DYNBATCH_WAIT_QUEUE_H

#include <stdbool.h>
#include <stdint.h>

struct wait_queue {
	uint32_t *handles;		/* capacity entries, a ring */
	uint32_t capacity;
	uint64_t head;			/* next position to pop */
	uint64_t tail;			/* next position to push */
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
/* Append; -ENOSPC when full. */
int wait_queue_push(struct wait_queue *q, uint32_t handle);
/* Pop the oldest handle; -ENOENT when empty. */
int wait_queue_pop(struct wait_queue *q, uint32_t *handle);
/* Take handle out wherever it is (a client gave up while waiting); order
 * of the rest is kept.  O(length).  0 or -ENOENT. */
int wait_queue_remove(struct wait_queue *q, uint32_t handle);
/* 0 when the indexes are consistent (no more than capacity queued),
 * else -EINVAL. */
int wait_queue_check(const struct wait_queue *q);

#endif /* DYNBATCH_WAIT_QUEUE_H */
