/*
 * request.c - a request's lifetime: release and the deep copy that makes
 * one choice of n (request.h, docs/DESIGN.md 3).
 */
#include "engine/request.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "text/stop_matcher.h"
#include "text/text_stop.h"

struct request_grammar *request_grammar_new(char *source, uint32_t len,
					    struct grammar *compiled)
{
	struct request_grammar *g = malloc(sizeof(*g));

	if (!g) {
		free(source);
		grammar_destroy(compiled);
		return NULL;
	}
	*g = (struct request_grammar){ 1, source, len, compiled };
	return g;
}

void request_grammar_put(struct request_grammar *g)
{
	if (!g || --g->refs)
		return;
	free(g->source);
	grammar_destroy(g->compiled);
	free(g);
}

void request_release(struct request *req)
{
	request_grammar_put(req->grammar);
	free(req->id);
	free(req->prompt);
	stop_matcher_destroy(req->stops);
	free(req->stop_tokens);
	free(req->stop_lens);
	free((void *)req->sampling.bias);
	text_stop_set_destroy(req->text_stops);
	for (uint32_t i = 0; i < req->n_stop_strs; i++)
		free(req->stop_strs[i]);
	free(req->stop_strs);
	free(req->stop_str_lens);
	memset(req, 0, sizeof(*req));
}

/* A malloc'd copy of n elements of size each (NULL for none). */
static int dup_array(void **dst, const void *src, size_t n, size_t size)
{
	*dst = NULL;
	if (!n)
		return 0;
	*dst = malloc(n * size);
	if (!*dst)
		return -ENOMEM;
	memcpy(*dst, src, n * size);
	return 0;
}

int request_clone(struct request *dst, const struct request *src)
{
	uint32_t n_stop = 0;

	*dst = *src;
	if (dst->grammar)	/* shared: immutable */
		dst->grammar->refs++;
	dst->id = NULL;
	dst->prompt = NULL;
	dst->stops = NULL;
	dst->stop_tokens = NULL;
	dst->stop_lens = NULL;
	dst->sampling.bias = NULL;
	dst->text_stops = NULL;
	dst->stop_strs = NULL;
	dst->stop_str_lens = NULL;
	dst->n_stop_strs = 0;
	for (uint32_t i = 0; i < src->n_stop_seqs; i++)
		n_stop += src->stop_lens[i];
	if ((src->id && !(dst->id = strdup(src->id))) ||
	    dup_array((void **)&dst->prompt, src->prompt, src->n_prompt,
		      sizeof(int32_t)) ||
	    dup_array((void **)&dst->stop_tokens, src->stop_tokens, n_stop,
		      sizeof(int32_t)) ||
	    dup_array((void **)&dst->stop_lens, src->stop_lens, src->n_stop_seqs,
		      sizeof(uint32_t)) ||
	    dup_array((void **)&dst->sampling.bias, src->sampling.bias,
		      src->sampling.n_bias, sizeof(struct sampling_bias)))
		goto fail;
	if (src->n_stop_strs) {
		char why[160];

		dst->stop_strs = calloc(src->n_stop_strs, sizeof(char *));
		if (!dst->stop_strs ||
		    dup_array((void **)&dst->stop_str_lens, src->stop_str_lens,
			      src->n_stop_strs, sizeof(size_t)))
			goto fail;
		for (uint32_t i = 0; i < src->n_stop_strs; i++) {
			if (dup_array((void **)&dst->stop_strs[i], src->stop_strs[i],
				      src->stop_str_lens[i] + 1, 1))
				goto fail;
			dst->n_stop_strs = i + 1;
		}
		dst->text_stops = text_stop_set_create(
			(const char *const *)dst->stop_strs, dst->stop_str_lens,
			dst->n_stop_strs, why, sizeof(why));
		if (!dst->text_stops)
			goto fail;
	}
	if (src->stops) {
		const int32_t **seqs = malloc(src->n_stop_seqs * sizeof(*seqs));
		uint32_t at = 0;

		if (!seqs)
			goto fail;
		for (uint32_t i = 0; i < src->n_stop_seqs; i++) {
			seqs[i] = dst->stop_tokens + at;
			at += src->stop_lens[i];
		}
		dst->stops = stop_matcher_create(seqs, dst->stop_lens,
						 dst->n_stop_seqs);
		free(seqs);
		if (!dst->stops)
			goto fail;
	}
	return 0;
fail:
	request_release(dst);
	return -ENOMEM;
}
