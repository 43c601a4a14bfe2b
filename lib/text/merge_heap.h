/*
 * merge_heap.h - the binary min-heap of merge candidates that both BPE
 * flavours use (bpe_merge.c, spm_merge.c).
 *
 * A candidate's key orders it: the merge's priority in the high 32 bits
 * (a rank, or a score turned into an ascending code) and the left
 * symbol's index in the low 32, so the top is the best merge and, on
 * ties, the leftmost.  Stale candidates stay in the heap and are
 * recognised when popped by the caller's check fields.
 */
#ifndef DYNBATCH_MERGE_HEAP_H
#define DYNBATCH_MERGE_HEAP_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

struct merge_cand {
	uint64_t key;		/* priority << 32 | left index */
	int32_t right;		/* right symbol's index */
	int32_t check_left;	/* what the caller recorded of the two */
	int32_t check_right;
	int32_t result;		/* the merged token */
};

struct merge_heap {
	struct merge_cand *a;
	size_t n;
	size_t cap;
};

static inline int merge_heap_push(struct merge_heap *h, struct merge_cand c)
{
	size_t i;

	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 64;
		struct merge_cand *a = realloc(h->a, cap * sizeof(*a));

		if (!a)
			return -ENOMEM;
		h->a = a;
		h->cap = cap;
	}
	i = h->n++;
	while (i > 0 && h->a[(i - 1) / 2].key > c.key) {
		h->a[i] = h->a[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h->a[i] = c;
	return 0;
}

/* Remove the top into *c; the heap must not be empty. */
static inline void merge_heap_pop(struct merge_heap *h, struct merge_cand *c)
{
	struct merge_cand last = h->a[--h->n];
	size_t i = 0;

	*c = h->a[0];
	for (;;) {
		size_t k = 2 * i + 1;

		if (k >= h->n)
			break;
		if (k + 1 < h->n && h->a[k + 1].key < h->a[k].key)
			k++;
		if (h->a[k].key >= last.key)
			break;
		h->a[i] = h->a[k];
		i = k;
	}
	if (h->n)
		h->a[i] = last;
}

#endif /* DYNBATCH_MERGE_HEAP_H */
