/*
 * ref_tokenizer.c - the naive reference encoder (ref_tokenizer.h).
 *
 * Written from llama2.c's encode() and nothing else: the text is cut into
 * groups of one byte and up to 3 continuation bytes, each group is a
 * piece or its bytes + 3, then each round scans every adjacent pair, takes
 * the first with the highest score above -1e10 (strict >, as llama2.c),
 * replaces it and shifts the rest down.  Lookups find the lowest id of a
 * piece by binary search over (bytes, id) sorted ids: no hashing shared
 * with the code under test.  ref_tokenizer_new() sorts through a static
 * context pointer (qsort has none): one thread at a time.
 */
#include "tools/refdecode/ref_tokenizer.h"

#include <stdlib.h>
#include <string.h>

struct ref_tokenizer {
	uint32_t n;
	const char **piece;
	size_t *len;
	float *score;
	int32_t *sorted;	/* ids sorted by (piece bytes, id) */
};

static const struct ref_tokenizer *sort_ctx;

static int ref_cmp_bytes(const char *a, size_t la, const char *b, size_t lb)
{
	int c = memcmp(a, b, la < lb ? la : lb);

	if (c)
		return c;
	return la < lb ? -1 : la > lb;
}

static int ref_cmp_ids(const void *pa, const void *pb)
{
	int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
	int c = ref_cmp_bytes(sort_ctx->piece[a], sort_ctx->len[a],
			      sort_ctx->piece[b], sort_ctx->len[b]);

	return c ? c : (a > b) - (a < b);
}

struct ref_tokenizer *ref_tokenizer_new(const struct tokenizer *t)
{
	struct ref_tokenizer *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->n = tokenizer_vocab_size(t);
	r->piece = malloc(r->n * sizeof(*r->piece));
	r->len = malloc(r->n * sizeof(*r->len));
	r->score = malloc(r->n * sizeof(*r->score));
	r->sorted = malloc(r->n * sizeof(*r->sorted));
	if (!r->piece || !r->len || !r->score || !r->sorted) {
		ref_tokenizer_free(r);
		return NULL;
	}
	for (uint32_t i = 0; i < r->n; i++) {
		r->piece[i] = tokenizer_raw_piece(t, (int32_t)i, &r->len[i],
						  &r->score[i]);
		r->sorted[i] = (int32_t)i;
	}
	sort_ctx = r;
	qsort(r->sorted, r->n, sizeof(*r->sorted), ref_cmp_ids);
	sort_ctx = NULL;
	return r;
}

void ref_tokenizer_free(struct ref_tokenizer *r)
{
	if (!r)
		return;
	free(r->piece);
	free(r->len);
	free(r->score);
	free(r->sorted);
	free(r);
}

/* The lowest id whose piece is s[0..len), or -1. */
static int32_t ref_lookup(const struct ref_tokenizer *r, const char *s,
			  size_t len)
{
	size_t lo = 0, hi = r->n;

	/* the first sorted position not below s */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int32_t id = r->sorted[mid];

		if (ref_cmp_bytes(r->piece[id], r->len[id], s, len) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < r->n) {
		int32_t id = r->sorted[lo];

		if (ref_cmp_bytes(r->piece[id], r->len[id], s, len) == 0)
			return id;
	}
	return -1;
}

long ref_tokenizer_encode(const struct ref_tokenizer *r, const char *text,
			  size_t len, bool bos, bool eos, int32_t *out)
{
	size_t n = 0, i = 0;
	char *buf = NULL;
	size_t buf_cap = 0;

	if (bos)
		out[n++] = 1;
	if (len > 0) {
		int32_t space = ref_lookup(r, " ", 1);

		out[n++] = space >= 0 ? space : ' ' + 3;
	}
	while (i < len) {
		size_t start = i;
		int32_t id;

		i++;
		while (i < len && i - start < 4 &&
		       ((unsigned char)text[i] & 0xC0) == 0x80)
			i++;
		id = ref_lookup(r, text + start, i - start);
		if (id >= 0) {
			out[n++] = id;
		} else {
			for (size_t k = start; k < i; k++)
				out[n++] = (unsigned char)text[k] + 3;
		}
	}
	for (;;) {
		float best_score = -1e10f;
		long best_idx = -1;
		int32_t best_id = -1;

		for (size_t k = 0; k + 1 < n; k++) {
			size_t la = r->len[out[k]], lb = r->len[out[k + 1]];
			int32_t id;

			if (la + lb > buf_cap) {
				char *nb = realloc(buf, la + lb);

				if (!nb) {
					free(buf);
					return -1;
				}
				buf = nb;
				buf_cap = la + lb;
			}
			memcpy(buf, r->piece[out[k]], la);
			memcpy(buf + la, r->piece[out[k + 1]], lb);
			id = ref_lookup(r, buf, la + lb);
			if (id >= 0 && r->score[id] > best_score) {
				best_score = r->score[id];
				best_id = id;
				best_idx = (long)k;
			}
		}
		if (best_idx < 0)
			break;
		out[best_idx] = best_id;
		memmove(out + best_idx + 1, out + best_idx + 2,
			(n - (size_t)best_idx - 2) * sizeof(*out));
		n--;
	}
	free(buf);
	if (eos)
		out[n++] = 2;
	return (long)n;
}
