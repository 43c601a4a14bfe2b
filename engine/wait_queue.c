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
	q->starts = q->class_end = NULL;
	q->vtime = 0;
	q->handles = calloc(capacity ? capacity : 1, sizeof(uint32_t));
	return q->handles ? 0 : -ENOMEM;
}

void wait_queue_release(struct wait_queue *q)
{
	free(q->handles);
	free(q->starts);
	free(q->class_end);
	q->handles = NULL;
	q->starts = q->class_end = NULL;
}

/* The tags, on the first push of a class: entries already queued start
 * at 0, before anything pushed later.  False when out of memory. */
static bool start_fair(struct wait_queue *q)
{
	if (q->starts)
		return true;
	q->starts = calloc(q->capacity ? q->capacity : 1, sizeof(uint64_t));
	q->class_end = calloc(WAIT_QUEUE_CLASSES, sizeof(uint64_t));
	if (!q->starts || !q->class_end) {
		free(q->starts);
		free(q->class_end);
		q->starts = q->class_end = NULL;
		return false;
	}
	return true;
}

int wait_queue_push_class(struct wait_queue *q, uint32_t handle,
			  uint32_t class_id, uint64_t cost)
{
	uint32_t pos = (uint32_t)(q->tail % (q->capacity ? q->capacity : 1));
	uint64_t start;

	if (wait_queue_full(q))
		return -ENOSPC;
	if (class_id >= WAIT_QUEUE_CLASSES)
		class_id = 0;
	q->handles[pos] = handle;
	q->tail++;
	if (!q->starts && (!class_id || !start_fair(q)))
		return 0;	/* FIFO: nothing to tag */
	start = q->vtime > q->class_end[class_id] ? q->vtime : q->class_end[class_id];
	q->starts[pos] = start;
	q->class_end[class_id] = start + (cost ? cost : 1);
	return 0;
}

int wait_queue_push(struct wait_queue *q, uint32_t handle)
{
	return wait_queue_push_class(q, handle, 0, 1);
}

/* Take out the entry at position i; later ones move towards the head. */
static void remove_at(struct wait_queue *q, uint64_t i)
{
	for (; i + 1 < q->tail; i++) {
		q->handles[i % q->capacity] = q->handles[(i + 1) % q->capacity];
		if (q->starts)
			q->starts[i % q->capacity] = q->starts[(i + 1) % q->capacity];
	}
	q->tail--;
}

/* The position pop serves next: the head, or the first smallest tag
 * (FIFO among equals).  The queue is not empty. */
static uint64_t next_pos(const struct wait_queue *q)
{
	uint64_t best = q->head;

	if (q->starts)
		for (uint64_t i = q->head + 1; i < q->tail; i++)
			if (q->starts[i % q->capacity] < q->starts[best % q->capacity])
				best = i;
	return best;
}

int wait_queue_peek(const struct wait_queue *q, uint32_t *handle)
{
	if (q->head == q->tail)
		return -ENOENT;
	*handle = q->handles[next_pos(q) % q->capacity];
	return 0;
}

int wait_queue_pop(struct wait_queue *q, uint32_t *handle)
{
	uint64_t best;

	if (q->head == q->tail)
		return -ENOENT;
	best = next_pos(q);
	if (q->starts && q->starts[best % q->capacity] > q->vtime)
		q->vtime = q->starts[best % q->capacity];
	*handle = q->handles[best % q->capacity];
	if (best == q->head)
		q->head++;
	else
		remove_at(q, best);
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
	remove_at(q, i);
	return 0;
}

int wait_queue_check(const struct wait_queue *q)
{
	if (!q->handles || q->tail < q->head || q->tail - q->head > q->capacity)
		return -EINVAL;
	return 0;
}
