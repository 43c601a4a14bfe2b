/*
 * wait_queue.c - see wait_queue.h.
 */
#include "engine/wait_queue.h"

#include <errno.h>
#include <stdlib.h>

int wait_queue_init(struct wait_queue *q, uint32_t capacity)
{
	q->capacity = capacity;
	q->head = q->tail = 0;
	q->handles = calloc(capacity ? capacity : 1, sizeof(uint32_t));
	return q->handles ? 0 : -ENOMEM;
}

void wait_queue_release(struct wait_queue *q)
{
	free(q->handles);
	q->handles = NULL;
}

int wait_queue_push(struct wait_queue *q, uint32_t handle)
{
	if (wait_queue_full(q))
		return -ENOSPC;
	q->handles[q->tail % q->capacity] = handle;
	q->tail++;
	return 0;
}

int wait_queue_pop(struct wait_queue *q, uint32_t *handle)
{
	if (q->head == q->tail)
		return -ENOENT;
	*handle = q->handles[q->head % q->capacity];
	q->head++;
	return 0;
}

int wait_queue_remove(struct wait_queue *q, uint32_t handle)
{
	uint64_t i;

	for (i = q->head; i < q->tail; i++)
		if (q->handles[i % q->capacity] == handle)
			break;
	if (i == q->tail)
		return -ENOENT;
	/* Close the gap: later entries move one place towards the head. */
	for (; i + 1 < q->tail; i++)
		q->handles[i % q->capacity] = q->handles[(i + 1) % q->capacity];
	q->tail--;
	return 0;
}

int wait_queue_check(const struct wait_queue *q)
{
	if (!q->handles || q->tail < q->head || q->tail - q->head > q->capacity)
		return -EINVAL;
	return 0;
}
