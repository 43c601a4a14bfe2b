/*
 * merge_heap.h - the binary min-heap of merge candidates that both BPE
 * flavours use (bpe_merge.c, spm_merge.c).
 *
 * A candidate's key orders it: the merge's priority in the high 32 bits
 * (a rank, or a score turned into an ascending code) and the left
 * symbol's index in the low 32, so the top is the best merge and, on
 * ties, the leftmost.  Stale candidates stay in the heap and are
 * recognised when popped by the caller's check fields.
 *
 * merge_heap_run() is the merge loop both share, over the symbols'
 * doubly linked list (prev/next, -1 at the ends) and one value a symbol
 * that only changes when it merges (a token id, or a byte size), which
 * is what a candidate's check fields record.
 */
#ifndef DYNBATCH_MERGE_HEAP_H
#define DYNBATCH_MERGE_HEAP_H

#include <errno.h>
#include <stdbool.h>
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

/*
 * Pop candidates until the heap is empty.  A candidate is current iff
 * both symbols still hold the values it recorded and the right one is
 * the left one's next; then the right symbol leaves the list and the
 * left one's value becomes the candidate's result (sizes: the sum), the
 * right one's -1 (sizes: 0), and the merged symbol's new pairs with its
 * neighbours go to push(ctx, left, right).  Returns 0 or push()'s error.
 */
static inline int merge_heap_run(struct merge_heap *h, int32_t *val,
				 int32_t *prev, int32_t *next, bool sizes,
				 int (*push)(void *ctx, int32_t a, int32_t b),
				 void *ctx)
{
	struct merge_cand c;

	while (h->n) {
		int32_t l, r;

		merge_heap_pop(h, &c);
		l = (int32_t)(uint32_t)c.key;
		r = c.right;
		if (val[l] != c.check_left || next[l] != r ||
		    val[r] != c.check_right)
			continue;
		val[l] = sizes ? val[l] + val[r] : c.result;
		val[r] = sizes ? 0 : -1;
		next[l] = next[r];
		if (next[r] >= 0)
			prev[next[r]] = l;
		if ((prev[l] >= 0 && push(ctx, prev[l], l)) ||
		    (next[l] >= 0 && push(ctx, l, next[l])))
			return -ENOMEM;
	}
	return 0;
}

#endif /* DYNBATCH_MERGE_HEAP_H */
