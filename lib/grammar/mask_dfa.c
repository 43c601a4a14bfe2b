/*
 * mask_dfa.c - matcher states as a lazily built automaton over bytes.
 *
 * A matcher's state is its canonical key, and a byte step depends on the
 * key alone, so the states a mask walk meets can be interned once and
 * their steps remembered: a trie walk then costs one table read per
 * node instead of one matcher step (copy, expansion, sort).  Inside a
 * JSON string almost every node leads to one of a handful of states.
 *
 * Memory is capped: a state that does not fit is refused with -ENOSPC
 * (the caller resets or falls back to the plain walk), so a hostile
 * grammar with endless distinct states cannot grow it without bound.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/mask_internal.h"

/* Bytes one state costs besides its key words (tab: 2 slots a state). */
#define STATE_BYTES (256 * sizeof(uint32_t) + 3 * sizeof(uint32_t) + \
		     sizeof(uint64_t) + 1 + sizeof(struct grammar_step_stats) + \
		     2 * sizeof(uint32_t))

struct mask_dfa *mask_dfa_create(size_t max_bytes)
{
	struct mask_dfa *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	d->max_bytes = max_bytes;
	return d;
}

void mask_dfa_destroy(struct mask_dfa *d)
{
	if (!d)
		return;
	grammar_matcher_destroy(d->scratch);
	free(d->next);
	free(d->key_off);
	free(d->key_len);
	free(d->hash);
	free(d->accepting);
	free(d->n_stacks);
	free(d->out_max);
	free(d->words);
	free(d->tab);
	free(d);
}

void mask_dfa_reset(struct mask_dfa *d)
{
	d->n_states = 0;
	d->n_words = 0;
	if (d->tab)
		memset(d->tab, 0, ((size_t)d->tab_mask + 1) * sizeof(uint32_t));
}

int mask_dfa_bind(struct mask_dfa *d, const struct grammar_matcher *m)
{
	const struct grammar *g = grammar_matcher_grammar(m);

	if (d->g == g && d->scratch)
		return 0;
	mask_dfa_reset(d);
	grammar_matcher_destroy(d->scratch);
	d->g = NULL;
	/* a clone, not a fresh matcher: m exists, a fresh one might not */
	d->scratch = grammar_matcher_clone(m);
	if (!d->scratch)
		return -ENOMEM;
	d->g = g;
	return 0;
}

static size_t bytes_for(size_t cap_states, size_t cap_words)
{
	return cap_states * STATE_BYTES + cap_words * sizeof(uint32_t);
}

/* realloc that leaves *p alone on failure */
static int grow(void *pp, size_t bytes)
{
	void **p = pp, *n = realloc(*p, bytes ? bytes : 1);

	if (!n)
		return -ENOMEM;
	*p = n;
	return 0;
}

static void tab_insert(struct mask_dfa *d, uint32_t s)
{
	uint32_t i = (uint32_t)d->hash[s] & d->tab_mask;

	while (d->tab[i])
		i = (i + 1) & d->tab_mask;
	d->tab[i] = s + 1;
}

/* Room for one more state of n key words: 0, -ENOSPC or -ENOMEM. */
static int reserve(struct mask_dfa *d, uint32_t n)
{
	size_t cs = d->cap_states, cw = d->cap_words, i;

	if (d->n_states >= DFA_MAX_STATES)
		return -ENOSPC;
	if (d->n_states == cs)
		cs = cs ? cs * 2 : 64;
	while (d->n_words + n > cw)
		cw = cw ? cw * 2 : 1024;
	if (cs == d->cap_states && cw == d->cap_words)
		return 0;
	/* the last doubling may be cut down to what the cap leaves */
	if (bytes_for(cs, cw) > d->max_bytes) {
		if (bytes_for(d->n_states + 1, d->n_words + n) > d->max_bytes) {
			d->n_full++;
			return -ENOSPC;
		}
		if (cs != d->cap_states)
			cs = d->n_states + 1;
		if (cw != d->cap_words)
			cw = d->n_words + n;
	}
	if (cw != d->cap_words) {
		if (grow(&d->words, cw * sizeof(uint32_t)))
			return -ENOMEM;
		d->cap_words = cw;
	}
	if (cs == d->cap_states)
		return 0;
	if (grow(&d->next, cs * 256 * sizeof(uint32_t)) ||
	    grow(&d->key_off, cs * sizeof(uint32_t)) ||
	    grow(&d->key_len, cs * sizeof(uint32_t)) ||
	    grow(&d->hash, cs * sizeof(uint64_t)) ||
	    grow(&d->accepting, cs) ||
	    grow(&d->n_stacks, cs * sizeof(uint32_t)) ||
	    grow(&d->out_max, cs * sizeof(struct grammar_step_stats)))
		return -ENOMEM;
	d->cap_states = (uint32_t)cs;
	if (2 * cs > (size_t)d->tab_mask + 1 || !d->tab) {
		size_t ts = 64;

		while (ts < 2 * cs)
			ts *= 2;
		free(d->tab);
		d->tab = calloc(ts, sizeof(uint32_t));
		if (!d->tab) {
			d->tab_mask = 0;
			d->n_states = 0;	/* the index is gone: start over */
			d->n_words = 0;
			return -ENOMEM;
		}
		d->tab_mask = (uint32_t)(ts - 1);
		for (i = 0; i < d->n_states; i++)
			tab_insert(d, (uint32_t)i);
	}
	d->used = bytes_for(d->cap_states, d->cap_words);
	return 0;
}

int mask_dfa_intern(struct mask_dfa *d, const uint32_t *key,
		    uint32_t n_words, uint32_t *id)
{
	uint64_t h = grammar_key_hash(key, n_words);
	uint32_t i, s;
	int rc;

	if (d->tab) {
		for (i = (uint32_t)h & d->tab_mask; d->tab[i];
		     i = (i + 1) & d->tab_mask) {
			s = d->tab[i] - 1;
			if (d->hash[s] == h && d->key_len[s] == n_words &&
			    !memcmp(d->words + d->key_off[s], key,
				    (size_t)n_words * sizeof(uint32_t))) {
				*id = s;
				return 0;
			}
		}
	}
	rc = reserve(d, n_words);
	if (rc)
		return rc;
	s = d->n_states++;
	memcpy(d->words + d->n_words, key, (size_t)n_words * sizeof(uint32_t));
	d->key_off[s] = (uint32_t)d->n_words;
	d->key_len[s] = n_words;
	d->n_words += n_words;
	d->hash[s] = h;
	/* the key is sorted by length: the empty stack, if any, is first */
	d->accepting[s] = key[1] == 0 && key[2] && key[GR_KEY_HDR] == 0;
	d->n_stacks[s] = key[2];
	d->out_max[s] = (struct grammar_step_stats){ 0, 0 };
	memset(d->next + (size_t)s * 256, 0xff, 256 * sizeof(uint32_t));
	tab_insert(d, s);
	*id = s;
	return 0;
}

int mask_dfa_compute(struct mask_dfa *d, uint32_t s, uint8_t b,
		     uint32_t *out)
{
	struct grammar_step_stats st;
	const uint32_t *key;
	uint32_t n, kn;
	int rc;

	rc = grammar_matcher_load(d->scratch, mask_dfa_key(d, s),
				  d->key_len[s]);
	if (rc)
		return rc;
	rc = grammar_matcher_accept_byte(d->scratch, b);
	grammar_matcher_step_stats(d->scratch, &st);
	if (st.n_raw > d->out_max[s].n_raw)
		d->out_max[s].n_raw = st.n_raw;
	if (st.max_len > d->out_max[s].max_len)
		d->out_max[s].max_len = st.max_len;
	if (rc == -ENOENT) {
		n = DFA_NOENT;
	} else if (rc == -E2BIG) {
		n = DFA_TOOBIG;
	} else if (rc) {
		return rc;
	} else {
		key = grammar_matcher_key(d->scratch, &kn);
		rc = mask_dfa_intern(d, key, kn, &n);
		if (rc)
			return rc;
	}
	d->next[(size_t)s * 256 + b] = n;
	*out = n;
	return 0;
}
