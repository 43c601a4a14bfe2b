/*
 * mask_walk.c - walks of the vocabulary trie over the state automaton
 * (mask_dfa.c): the plain and split walks of a state, and the check of a
 * chosen set of tokens against a state.
 *
 * Both keep one automaton state per depth, so a node costs one lookup of
 * (parent's state, byte); a refused byte cuts the node's subtree.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/mask_internal.h"

/* Tokens ids[begin..end) are undecided; adjacent runs merge. */
static int add_unc(struct walk_split *w, uint32_t begin, uint32_t end)
{
	if (begin == end)
		return 0;
	if (w->n_unc && w->unc[2 * w->n_unc - 1] == begin) {
		w->unc[2 * w->n_unc - 1] = end;
		return 0;
	}
	if (w->n_unc == w->cap_unc) {
		uint32_t nc = w->cap_unc ? 2 * w->cap_unc : 64;
		uint32_t *p = realloc(w->unc, (size_t)nc * 2 * sizeof(uint32_t));

		if (!p)
			return -ENOMEM;
		w->unc = p;
		w->cap_unc = nc;
	}
	w->unc[2 * w->n_unc] = begin;
	w->unc[2 * w->n_unc + 1] = end;
	w->n_unc++;
	return 0;
}

/* Fold in the dearest step out of s (all its steps the walk took). */
static void note_max(struct walk_split *w, const struct mask_dfa *d,
		     uint32_t s)
{
	if (d->out_max[s].n_raw > w->max.n_raw)
		w->max.n_raw = d->out_max[s].n_raw;
	if (d->out_max[s].max_len > w->max.max_len)
		w->max.max_len = d->out_max[s].max_len;
}

int mask_walk(const struct grammar_vocab *v, struct mask_dfa *d,
	      uint32_t root, uint64_t *acc, struct walk_split *split)
{
	uint32_t depth = v->max_len + 1, dd = 0, i, n;
	uint32_t *st = malloc((size_t)depth * 2 * sizeof(uint32_t));
	uint32_t *it = st + depth;
	int rc = 0;

	if (!st)
		return -ENOMEM;
	st[0] = root;
	it[0] = v->nodes[0].first_child;
	if (split && d->n_stacks[root] > split->max_stacks)
		split->max_stacks = d->n_stacks[root];
	for (;;) {
		uint32_t c = it[dd];
		const struct tnode *nd;

		if (c == MASK_NONE) {
			if (split)
				note_max(split, d, st[dd]);
			if (!dd)
				break;
			dd--;
			continue;
		}
		nd = &v->nodes[c];
		it[dd] = nd->next_sibling;
		rc = mask_dfa_next(d, st[dd], nd->byte, &n);
		if (rc)
			break;
		if (n == DFA_NOENT)
			continue;
		if (split) {
			/* past a cap here, so past it in any context: not
			 * decided by these positions, nor is a subtree
			 * that reached their bottom (the base takes over) */
			if (n == DFA_TOOBIG ||
			    (!split->whole && d->accepting[n])) {
				rc = add_unc(split, nd->tok_begin, nd->sub_end);
				if (rc)
					break;
				continue;
			}
			if (d->n_stacks[n] > split->max_stacks)
				split->max_stacks = d->n_stacks[n];
		} else if (n == DFA_TOOBIG) {
			continue;
		}
		for (i = nd->tok_begin; i < nd->tok_end; i++)
			mask_set(acc, v->ids[i]);
		if (nd->first_child != MASK_NONE) {
			dd++;
			st[dd] = n;
			it[dd] = nd->first_child;
		}
	}
	free(st);
	return rc;
}

int mask_walk_ranges(const struct grammar_vocab *v, struct mask_dfa *d,
		     uint32_t root, const uint32_t *rng, uint32_t n_rng,
		     uint64_t *mask)
{
	uint32_t depth = v->max_len + 1, dd = 0, i, n, r = 0;
	uint32_t *st, *it;
	int rc = 0;

	/* the chosen tokens are decided here alone */
	for (r = 0; r < n_rng; r++)
		for (i = rng[2 * r]; i < rng[2 * r + 1]; i++)
			mask[v->ids[i] / 64] &= ~(1ull << (v->ids[i] % 64));
	if (!n_rng)
		return 0;
	st = malloc((size_t)depth * 2 * sizeof(uint32_t));
	if (!st)
		return -ENOMEM;
	it = st + depth;
	st[0] = root;
	it[0] = v->nodes[0].first_child;
	r = 0;
	/* nodes come in preorder, so tok_begin only grows: one cursor r
	 * into the ranges (sorted, disjoint) serves every test */
	for (;;) {
		uint32_t c = it[dd];
		const struct tnode *nd;

		if (c == MASK_NONE) {
			if (!dd)
				break;
			dd--;
			continue;
		}
		nd = &v->nodes[c];
		it[dd] = nd->next_sibling;
		while (r < n_rng && rng[2 * r + 1] <= nd->tok_begin)
			r++;
		if (r == n_rng)
			break;		/* no chosen token is left */
		if (rng[2 * r] >= nd->sub_end)
			continue;	/* none in this subtree */
		rc = mask_dfa_next(d, st[dd], nd->byte, &n);
		if (rc)
			break;
		if (n == DFA_NOENT || n == DFA_TOOBIG)
			continue;
		for (i = nd->tok_begin; i < nd->tok_end; i++) {
			while (r < n_rng && rng[2 * r + 1] <= i)
				r++;
			if (r < n_rng && rng[2 * r] <= i)
				mask_set(mask, v->ids[i]);
		}
		if (nd->first_child != MASK_NONE) {
			dd++;
			st[dd] = n;
			it[dd] = nd->first_child;
		}
	}
	free(st);
	return rc;
}
