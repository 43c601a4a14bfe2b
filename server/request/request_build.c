/*
 * request_build.c - see request_build.h.  Each field's arrays grow by
 * doubling as tokens come; the merged arrays are allocated once, at their
 * final size, in stop_builder_finish().  Counts are checked against
 * UINT32_MAX before they are incremented, so no input can wrap them.
 */
#include "server/request/request_build.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "text/stop_matcher.h"

void stop_builder_init(struct stop_builder *b)
{
	memset(b, 0, sizeof(*b));
}

void stop_builder_release(struct stop_builder *b)
{
	for (int f = 0; f < STOP_FIELD_N; f++) {
		free(b->field[f].tokens);
		free(b->field[f].lens);
	}
	memset(b, 0, sizeof(*b));
}

/* Room for one more element in *v (n used of *cap, elem bytes each). */
static int grow(void **v, uint32_t n, uint32_t *cap, size_t elem)
{
	uint32_t new_cap;
	void *grown;

	if (n < *cap)
		return 0;
	if (n == UINT32_MAX)
		return -E2BIG;
	new_cap = *cap ? (*cap > UINT32_MAX / 2 ? UINT32_MAX : *cap * 2) : 16;
	grown = realloc(*v, (size_t)new_cap * elem);
	if (!grown)
		return -ENOMEM;
	*v = grown;
	*cap = new_cap;
	return 0;
}

int stop_builder_push(struct stop_builder *b, enum stop_field f, int32_t t)
{
	struct stop_field_seqs *fs = &b->field[f];
	int rc = grow((void **)&fs->tokens, fs->n_tokens, &fs->cap_tokens,
		      sizeof(*fs->tokens));

	if (rc)
		return rc;
	fs->tokens[fs->n_tokens++] = t;
	fs->open_len++;
	return 0;
}

int stop_builder_end_seq(struct stop_builder *b, enum stop_field f)
{
	struct stop_field_seqs *fs = &b->field[f];
	int rc = grow((void **)&fs->lens, fs->n_seqs, &fs->cap_seqs,
		      sizeof(*fs->lens));

	if (rc)
		return rc;
	fs->lens[fs->n_seqs++] = fs->open_len;
	fs->open_len = 0;
	return 0;
}

/* Build req->stops from req's merged sequences.  0 or -ENOMEM. */
static int compile_stops(struct request *req)
{
	const int32_t **seqs = malloc(req->n_stop_seqs * sizeof(*seqs));
	uint64_t off = 0;

	if (!seqs)
		return -ENOMEM;
	for (uint32_t i = 0; i < req->n_stop_seqs; i++) {
		seqs[i] = req->stop_tokens + off;
		off += req->stop_lens[i];
	}
	req->stops = stop_matcher_create(seqs, req->stop_lens, req->n_stop_seqs);
	free(seqs);
	return req->stops ? 0 : -ENOMEM;
}

int stop_builder_finish(struct stop_builder *b, struct request *req)
{
	uint64_t n_tokens = 0, n_seqs = 0;
	int rc = 0;

	/* the tokens of a sequence never ended (a parser that gave up
	 * midway calls no finish, but still) are left out */
	for (int f = 0; f < STOP_FIELD_N; f++) {
		n_tokens += b->field[f].n_tokens - b->field[f].open_len;
		n_seqs += b->field[f].n_seqs;
	}
	if (!n_seqs)
		goto out;
	if (n_tokens > REQUEST_MAX_STOP_TOKENS) {	/* n_seqs <= n_tokens */
		rc = -E2BIG;
		goto out;
	}
	req->stop_tokens = malloc(n_tokens * sizeof(*req->stop_tokens));
	req->stop_lens = malloc(n_seqs * sizeof(*req->stop_lens));
	if (!req->stop_tokens || !req->stop_lens) {
		rc = -ENOMEM;
		goto out_free;
	}
	n_tokens = n_seqs = 0;
	for (int f = 0; f < STOP_FIELD_N; f++) {
		const struct stop_field_seqs *fs = &b->field[f];
		uint32_t n = fs->n_tokens - fs->open_len;

		if (!fs->n_seqs)
			continue;	/* absent or [] (and no NULL + 0) */
		memcpy(req->stop_tokens + n_tokens, fs->tokens, n * sizeof(*fs->tokens));
		memcpy(req->stop_lens + n_seqs, fs->lens, fs->n_seqs * sizeof(*fs->lens));
		n_tokens += n;
		n_seqs += fs->n_seqs;
	}
	req->n_stop_seqs = (uint32_t)n_seqs;
	rc = compile_stops(req);
	if (!rc)
		goto out;
out_free:
	free(req->stop_tokens);
	free(req->stop_lens);
	req->stop_tokens = NULL;
	req->stop_lens = NULL;
	req->n_stop_seqs = 0;
out:
	stop_builder_release(b);
	return rc;
}
