/*
 * wait_queue.h - the FIFO waiting queue of request handles, kept in the
 * shared segment (struct shm_queue) so its depth is visible to anyone who
 * maps it.  Only the coordinator writes it; it still bounds every index it
 * reads back by the capacity it keeps privately.
 */
#ifndef DYNBATCH_WAIT_QUEUE_H
#define DYNBATCH_WAIT_QUEUE_H

#include <stdbool.h>
#include <stdint.h>

struct shm_queue;

struct wait_queue {
	struct shm_queue *shm;		/* lives in the segment */
	uint32_t capacity;		/* private copy: the trusted bound */
	uint64_t head;			/* private copies of the indexes */
	uint64_t tail;
};

void wait_queue_init(struct wait_queue *q, struct shm_queue *shm, uint32_t capacity);
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
/* 0 when the private and shared views agree, else -EINVAL. */
int wait_queue_check(const struct wait_queue *q);

#endif /* DYNBATCH_WAIT_QUEUE_H */
