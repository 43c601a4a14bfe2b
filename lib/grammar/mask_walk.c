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

/*
 * The walk of both: from state root, tokens accepted go into acc; split
 * as mask_walk(); rng (n_rng ranges, NULL: all) limits it to the tokens
 * of those ranges, skipping subtrees with none.
 */
static int trie_walk(const struct grammar_vocab *v, struct mask_dfa *d,
		     uint32_t root, uint64_t *acc, struct walk_split *split,
		     const uint32_t *rng, uint32_t n_rng)
{
	uint32_t depth = v->max_len + 1, dd = 0, i, n, r = 0;
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
		if (rng) {
			/* nodes come in preorder, so tok_begin only grows:
			 * one cursor r into the ranges serves every test */
			while (r < n_rng && rng[2 * r + 1] <= nd->tok_begin)
				r++;
			if (r == n_rng)
				break;		/* no chosen token is left */
			if (rng[2 * r] >= nd->sub_end)
				continue;	/* none in this subtree */
		}
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
		for (i = nd->tok_begin; i < nd->tok_end; i++) {
			if (rng) {
				while (r < n_rng && rng[2 * r + 1] <= i)
					r++;
				if (r == n_rng || rng[2 * r] > i)
					continue;
			}
			mask_set(acc, v->ids[i]);
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

int mask_walk(const struct grammar_vocab *v, struct mask_dfa *d,
	      uint32_t root, uint64_t *acc, struct walk_split *split)
{
	return trie_walk(v, d, root, acc, split, NULL, 0);
}

int mask_walk_ranges(const struct grammar_vocab *v, struct mask_dfa *d,
		     uint32_t root, const uint32_t *rng, uint32_t n_rng,
		     uint64_t *mask)
{
	uint32_t r, i;

	/* the chosen tokens are decided here alone */
	for (r = 0; r < n_rng; r++)
		for (i = rng[2 * r]; i < rng[2 * r + 1]; i++)
			mask[v->ids[i] / 64] &= ~(1ull << (v->ids[i] % 64));
	if (!n_rng)
		return 0;
	return trie_walk(v, d, root, mask, NULL, rng, n_rng);
}
