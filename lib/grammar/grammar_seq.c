/*
 * grammar_seq.c - see grammar_seq.h.
 */
#include "grammar/grammar_seq.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct grammar_seq {
	const struct grammar *g;
	const struct grammar_vocab *v;
	struct grammar_matcher *m;	/* after fed[0 .. n_fed) */
	struct grammar_mask_cache *cache;	/* NULL: none */
	bool own_cache;			/* else borrowed (grammar_pool.h) */
	int32_t *fed;			/* the tokens fed, to spot rewrites */
	uint32_t n_fed, cap_fed;
};

struct grammar_seq *grammar_seq_create(const struct grammar *g,
				       const struct grammar_vocab *v,
				       size_t cache_bytes)
{
	struct grammar_seq *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->g = g;
	s->v = v;
	s->m = grammar_matcher_create(g);
	if (cache_bytes) {
		s->cache = grammar_mask_cache_create(grammar_vocab_size(v),
						     cache_bytes);
		s->own_cache = true;
	}
	if (!s->m || (cache_bytes && !s->cache)) {
		grammar_seq_destroy(s);
		return NULL;
	}
	return s;
}

struct grammar_seq *grammar_seq_create_shared(const struct grammar *g,
					      const struct grammar_vocab *v,
					      struct grammar_mask_cache *cache)
{
	struct grammar_seq *s = grammar_seq_create(g, v, 0);

	if (s)
		s->cache = cache;
	return s;
}

void grammar_seq_destroy(struct grammar_seq *s)
{
	if (!s)
		return;
	grammar_matcher_destroy(s->m);
	if (s->own_cache)
		grammar_mask_cache_destroy(s->cache);
	free(s->fed);
	free(s);
}

uint32_t grammar_seq_length(const struct grammar_seq *s)
{
	return s->n_fed;
}

/* Back to the root, nothing fed. */
static int grammar_seq_restart(struct grammar_seq *s)
{
	struct grammar_matcher *m = grammar_matcher_create(s->g);

	if (!m)
		return -ENOMEM;
	grammar_matcher_destroy(s->m);
	s->m = m;
	s->n_fed = 0;
	return 0;
}

int grammar_seq_sync(struct grammar_seq *s, const int32_t *gen, uint32_t n)
{
	uint32_t i;
	int ret;

	/* the common case: the row grew by a token; anything else (sent
	 * back, rewritten) replays from the root */
	if (n < s->n_fed || (s->n_fed && memcmp(gen, s->fed, (size_t)s->n_fed *
						sizeof(*gen)))) {
		ret = grammar_seq_restart(s);
		if (ret)
			return ret;
	}
	if (n > s->cap_fed) {
		uint32_t cap = n > 2 * s->cap_fed ? n : 2 * s->cap_fed;
		int32_t *p = realloc(s->fed, (size_t)cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		s->fed = p;
		s->cap_fed = cap;
	}
	for (i = s->n_fed; i < n; i++) {
		if (gen[i] < 0)
			return -ENOENT;
		ret = grammar_matcher_accept_token(s->m, s->v, (uint32_t)gen[i]);
		if (ret)
			return ret;
		s->fed[s->n_fed++] = gen[i];
	}
	return 0;
}

int grammar_seq_mask(struct grammar_seq *s, uint64_t *mask)
{
	return grammar_mask_compute(s->v, s->m, s->cache, mask);
}
