/*
 * wait_queue.c - see wait_queue.h.
 */
#include "wait_queue.h"

#include <errno.h>

#include "shm_segment.h"

void wait_queue_init(struct wait_queue *q, struct shm_queue *shm, uint32_t capacity)
{
	q->shm = shm;
	q->capacity = capacity;
	q->head = q->tail = 0;
	shm->head = shm->tail = 0;
}

int wait_queue_push(struct wait_queue *q, uint32_t handle)
{
	if (wait_queue_full(q))
		return -ENOSPC;
	q->shm->handles[q->tail % q->capacity] = handle;
	q->tail++;
	q->shm->tail = q->tail;
	return 0;
}

int wait_queue_pop(struct wait_queue *q, uint32_t *handle)
{
	if (q->head == q->tail)
		return -ENOENT;
	*handle = q->shm->handles[q->head % q->capacity];
	q->head++;
	q->shm->head = q->head;
	return 0;
}

int wait_queue_remove(struct wait_queue *q, uint32_t handle)
{
	uint64_t i;

	for (i = q->head; i < q->tail; i++)
		if (q->shm->handles[i % q->capacity] == handle)
			break;
	if (i == q->tail)
		return -ENOENT;
	/* Close the gap: later entries move one place towards the head. */
	for (; i + 1 < q->tail; i++)
		q->shm->handles[i % q->capacity] = q->shm->handles[(i + 1) % q->capacity];
	q->tail--;
	q->shm->tail = q->tail;
	return 0;
}

int wait_queue_check(const struct wait_queue *q)
{
	if (q->tail - q->head > q->capacity || q->shm->head != q->head ||
	    q->shm->tail != q->tail)
		return -EINVAL;
	return 0;
}
