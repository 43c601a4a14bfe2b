/*
 * stop_matcher.c - Aho-Corasick automaton over int32 tokens; see
 * stop_matcher.h.
 *
 * NOTES ON THE DESIGN
 *
 * States are the nodes of the trie of all stop sequences; state 0 is the
 * root (the empty string).  Each state s stands for the token string on
 * the trie path to it, of length depth(s), and stores:
 *
 *   fail(s)       the state of the longest proper suffix of s's string
 *                 that is also a trie state (the root for depth <= 1);
 *   match_len(s)  the length of the longest stop sequence that is a
 *                 suffix of s's string: depth(s) when a sequence ends at
 *                 s, else match_len(fail(s)).  So a feed reads the answer
 *                 off the state and never walks the failure chain for
 *                 output.
 *
 * Goto edges are not stored per state: the vocabulary may be 2^31 wide,
 * so a dense table per state is out, and per-state child lists would cost
 * a search per step.  Every edge lives in one open-addressing table keyed
 * by (from, token), linear probing, a power-of-two capacity at least twice
 * the number of edges (load <= 1/2, so a probe always reaches an empty
 * slot and a miss is short).  Target 0 marks an empty slot: the root is
 * never the target of an edge.
 *
 * stop_matcher_feed() follows the goto edge, and on a miss follows
 * failure links until one has the edge or the root is reached (the root
 * loops to itself on a miss).  Each feed raises the depth by at most one
 * and each failure step lowers it by at least one, so over a stream of n
 * tokens there are at most n failure steps: O(1) amortised per token,
 * whatever the number and length of the sequences.  A single token can
 * still cost up to max_len steps.
 *
 * Failure links are computed breadth-first: states are bucketed by depth
 * (a counting sort; the hash table cannot list a state's children), and
 * fail(s) for s = goto(p, t) is goto(q, t) for the first q on p's failure
 * chain that has a t edge.  Along one sequence's path the depth of the
 * failure state rises by at most one per step, so building costs
 * O(total length) expected time.
 *
 * Per state the hot fields a feed reads (fail, match_len) sit apart from
 * the cold ones kept for the build and stop_matcher_check() (parent,
 * token, depth, own_len), so a feed touches 8 bytes of state.
 *
 * stop_matcher_create() also returns NULL (errno EINVAL) for a NULL
 * sequence pointer or a total length over SM_MAX_TOTAL_LEN, and ENOMEM on
 * allocation failure.  A -DDYNBATCH_DEBUG build runs stop_matcher_check()
 * on every automaton it builds (it costs about as much as the build).  A cursor out of range is a caller bug
 * (assert); without assertions it restarts from the root rather than read
 * out of bounds.
 *
 * The hash is a fixed splitmix64-style mixer: a set of stop sequences
 * crafted to collide would slow its own request's build and feeds, but
 * not make them wrong, and the sequences are bounded by the input line.
 */
#include "text/stop_matcher.h"

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

/* Total sequence length accepted; keeps every count and the table
 * capacity well inside uint32_t. */
#define SM_MAX_TOTAL_LEN (1u << 28)

/* What a feed reads. */
struct sm_node {
	uint32_t fail;		/* failure state, shallower (root: 0) */
	uint32_t match_len;	/* longest stop sequence that is a suffix */
};

/* What only the build and the checker read. */
struct sm_info {
	uint32_t parent;	/* trie parent (root: 0) */
	int32_t token;		/* token on the edge from parent (root: 0) */
	uint32_t depth;		/* string length, tokens */
	uint32_t own_len;	/* depth when a sequence ends here, else 0 */
};

/* One goto edge; to == 0 marks an empty slot. */
struct sm_edge {
	uint32_t from;
	int32_t token;
	uint32_t to;
};

struct stop_matcher {
	struct sm_node *nodes;	/* n_states hot records */
	struct sm_info *info;	/* n_states cold records */
	uint32_t n_states;	/* including the root */
	uint32_t max_len;	/* longest sequence, tokens */
	struct sm_edge *edges;	/* edge_mask + 1 slots */
	uint32_t edge_mask;	/* capacity - 1, capacity a power of two */
	uint32_t n_edges;	/* occupied slots == n_states - 1 */
};

/* ------------------------------------------------------------------ */
/* Edge table                                                          */
/* ------------------------------------------------------------------ */

static inline uint32_t sm_hash(uint32_t from, int32_t token)
{
	uint64_t x = ((uint64_t)from << 32) | (uint32_t)token;

	x ^= x >> 30;
	x *= 0xBF58476D1CE4E5B9ull;
	x ^= x >> 27;
	x *= 0x94D049BB133111EBull;
	x ^= x >> 31;
	return (uint32_t)x;
}

/* Target of the edge (from, token), or 0 when there is none. */
static inline uint32_t sm_goto(const struct stop_matcher *sm, uint32_t from,
			       int32_t token)
{
	uint32_t i = sm_hash(from, token) & sm->edge_mask;

	for (;;) {
		const struct sm_edge *e = &sm->edges[i];

		if (e->to == 0)
			return 0;
		if (e->from == from && e->token == token)
			return e->to;
		i = (i + 1) & sm->edge_mask;
	}
}

/* Insert an edge known to be absent; the table has room by construction. */
static void sm_add_edge(struct stop_matcher *sm, uint32_t from, int32_t token,
			uint32_t to)
{
	uint32_t i = sm_hash(from, token) & sm->edge_mask;

	while (sm->edges[i].to != 0)
		i = (i + 1) & sm->edge_mask;
	sm->edges[i].from = from;
	sm->edges[i].token = token;
	sm->edges[i].to = to;
	sm->n_edges++;
}

/* ------------------------------------------------------------------ */
/* Build                                                               */
/* ------------------------------------------------------------------ */

/* Add one sequence to the trie; states has room for every token. */
static void sm_insert(struct stop_matcher *sm, const int32_t *seq,
		      uint32_t len)
{
	uint32_t s = STOP_MATCHER_ROOT;

	for (uint32_t i = 0; i < len; i++) {
		uint32_t next = sm_goto(sm, s, seq[i]);

		if (!next) {
			next = sm->n_states++;
			sm->nodes[next].fail = STOP_MATCHER_ROOT;
			sm->nodes[next].match_len = 0;
			sm->info[next].parent = s;
			sm->info[next].token = seq[i];
			sm->info[next].depth = i + 1;
			sm->info[next].own_len = 0;
			sm_add_edge(sm, s, seq[i], next);
		}
		s = next;
	}
	sm->info[s].own_len = len;
	if (len > sm->max_len)
		sm->max_len = len;
}

/*
 * fail(s) for s = goto(p, t), depth(s) >= 2: the t edge out of the first
 * state on p's failure chain that has one, else the root.
 */
static uint32_t sm_fail_of(const struct stop_matcher *sm, uint32_t s)
{
	uint32_t q = sm->nodes[sm->info[s].parent].fail;
	int32_t t = sm->info[s].token;

	for (;;) {
		uint32_t next = sm_goto(sm, q, t);

		if (next)
			return next;
		if (q == STOP_MATCHER_ROOT)
			return STOP_MATCHER_ROOT;
		q = sm->nodes[q].fail;
	}
}

/*
 * Set fail and match_len of every state, shallower states first.  Returns
 * 0 or -ENOMEM.
 */
static int sm_link(struct stop_matcher *sm)
{
	uint32_t n_depths = sm->max_len + 1;
	uint32_t *start, *order;
	int ret = -ENOMEM;

	start = calloc((size_t)n_depths + 1, sizeof(*start));
	if (!start)
		return ret;
	order = malloc((size_t)sm->n_states * sizeof(*order));
	if (!order)
		goto out_free_start;

	/* Counting sort of the states by depth. */
	for (uint32_t s = 0; s < sm->n_states; s++)
		start[sm->info[s].depth + 1]++;
	for (uint32_t d = 0; d < n_depths; d++)
		start[d + 1] += start[d];
	for (uint32_t s = 0; s < sm->n_states; s++)
		order[start[sm->info[s].depth]++] = s;

	/* order[0] is the root, whose record is already right. */
	for (uint32_t i = 1; i < sm->n_states; i++) {
		uint32_t s = order[i];
		struct sm_node *node = &sm->nodes[s];

		node->fail = sm->info[s].depth == 1 ? STOP_MATCHER_ROOT :
						      sm_fail_of(sm, s);
		node->match_len = sm->info[s].own_len ?
				  sm->info[s].own_len :
				  sm->nodes[node->fail].match_len;
	}
	ret = 0;

	free(order);
out_free_start:
	free(start);
	return ret;
}

struct stop_matcher *stop_matcher_create(const int32_t *const *seqs,
					 const uint32_t *lens, uint32_t n_seqs)
{
	struct stop_matcher *sm;
	uint64_t total = 0;
	uint32_t cap = 8;

	if (n_seqs && (!seqs || !lens))
		goto out_einval;
	for (uint32_t i = 0; i < n_seqs; i++) {
		if (!lens[i] || !seqs[i])
			goto out_einval;
		total += lens[i];
		if (total > SM_MAX_TOTAL_LEN)
			goto out_einval;
	}
	while (cap < 2 * total)
		cap *= 2;

	sm = calloc(1, sizeof(*sm));
	if (!sm)
		return NULL;
	sm->nodes = calloc(total + 1, sizeof(*sm->nodes));
	if (!sm->nodes)
		goto out_free_sm;
	sm->info = calloc(total + 1, sizeof(*sm->info));
	if (!sm->info)
		goto out_free_nodes;
	sm->edges = calloc(cap, sizeof(*sm->edges));
	if (!sm->edges)
		goto out_free_info;
	sm->edge_mask = cap - 1;
	sm->n_states = 1;	/* the root, zeroed by calloc */

	for (uint32_t i = 0; i < n_seqs; i++)
		sm_insert(sm, seqs[i], lens[i]);
	if (sm_link(sm))
		goto out_free_edges;
#ifdef DYNBATCH_DEBUG
	/* O(size) re-verification: tests call stop_matcher_check() directly;
	 * a debug build also checks every automaton the engine builds. */
	assert(stop_matcher_check(sm) == 0);
#endif
	return sm;

out_free_edges:
	free(sm->edges);
out_free_info:
	free(sm->info);
out_free_nodes:
	free(sm->nodes);
out_free_sm:
	free(sm);
	errno = ENOMEM;
	return NULL;
out_einval:
	errno = EINVAL;
	return NULL;
}

void stop_matcher_destroy(struct stop_matcher *sm)
{
	if (!sm)
		return;
	free(sm->edges);
	free(sm->info);
	free(sm->nodes);
	free(sm);
}

/* ------------------------------------------------------------------ */
/* Matching                                                            */
/* ------------------------------------------------------------------ */

uint32_t stop_matcher_feed(const struct stop_matcher *sm, uint32_t state,
			   int32_t token, uint32_t *match_len)
{
	if (!sm) {
		*match_len = 0;
		return STOP_MATCHER_ROOT;
	}
	/* The cursor is ours, but a stray one must not index out of bounds. */
	assert(state < sm->n_states);
	if (state >= sm->n_states)
		state = STOP_MATCHER_ROOT;

	for (;;) {
		uint32_t next = sm_goto(sm, state, token);

		if (next) {
			state = next;
			break;
		}
		if (state == STOP_MATCHER_ROOT)
			break;
		state = sm->nodes[state].fail;
	}
	*match_len = sm->nodes[state].match_len;
	return state;
}

uint32_t stop_matcher_max_len(const struct stop_matcher *sm)
{
	return sm ? sm->max_len : 0;
}

uint32_t stop_matcher_pending(const struct stop_matcher *sm, uint32_t state)
{
	if (!sm || state >= sm->n_states)
		return 0;
	return sm->info[state].depth;
}

/* ------------------------------------------------------------------ */
/* Invariants                                                          */
/* ------------------------------------------------------------------ */

/* Every slot well formed and findable; the count and load as recorded. */
static int sm_check_edges(const struct stop_matcher *sm)
{
	uint64_t cap = (uint64_t)sm->edge_mask + 1;
	uint32_t used = 0;

	if (!sm->edges || (cap & (cap - 1)) || cap < 8)
		return -EINVAL;
	if (sm->n_edges != sm->n_states - 1 || 2 * (uint64_t)sm->n_edges > cap)
		return -EINVAL;
	for (uint64_t i = 0; i < cap; i++) {
		const struct sm_edge *e = &sm->edges[i];

		if (e->to == 0)
			continue;
		used++;
		if (e->to >= sm->n_states || e->from >= sm->n_states)
			return -EINVAL;
		if (sm->info[e->to].parent != e->from ||
		    sm->info[e->to].token != e->token)
			return -EINVAL;
	}
	/* Only now is an empty slot guaranteed, so a lookup terminates. */
	if (used != sm->n_edges)
		return -EINVAL;
	for (uint64_t i = 0; i < cap; i++) {
		const struct sm_edge *e = &sm->edges[i];

		if (e->to && sm_goto(sm, e->from, e->token) != e->to)
			return -EINVAL;
	}
	return 0;
}

/* Shape of one non-root state: parent, depth, edge, failure depth. */
static int sm_check_shape(const struct stop_matcher *sm, uint32_t s)
{
	const struct sm_info *in = &sm->info[s];
	const struct sm_node *node = &sm->nodes[s];

	/* sm_insert numbers states in creation order: parents come first. */
	if (in->parent >= s || node->fail >= sm->n_states)
		return -EINVAL;
	if (in->depth != sm->info[in->parent].depth + 1)
		return -EINVAL;
	if (sm_goto(sm, in->parent, in->token) != s)
		return -EINVAL;
	if (sm->info[node->fail].depth >= in->depth)
		return -EINVAL;
	if (in->own_len != 0 && in->own_len != in->depth)
		return -EINVAL;
	if (node->match_len > in->depth)
		return -EINVAL;
	return 0;
}

/*
 * Links of one non-root state, recomputed: fail(s) is the longest proper
 * suffix of s's string in the trie, given its parent's failure chain, and
 * match_len(s) is its own length or its failure state's.  Over all states
 * this is induction on depth from the root, whose record is fixed.  Needs
 * every state's shape checked first, so failure chains end at the root.
 */
static int sm_check_links(const struct stop_matcher *sm, uint32_t s)
{
	const struct sm_info *in = &sm->info[s];
	const struct sm_node *node = &sm->nodes[s];
	uint32_t expect;

	expect = in->depth == 1 ? STOP_MATCHER_ROOT : sm_fail_of(sm, s);
	if (node->fail != expect)
		return -EINVAL;
	expect = in->own_len ? in->own_len : sm->nodes[node->fail].match_len;
	if (node->match_len != expect)
		return -EINVAL;
	return 0;
}

int stop_matcher_check(const struct stop_matcher *sm)
{
	uint32_t longest = 0;

	if (!sm || !sm->nodes || !sm->info || sm->n_states == 0)
		return -EINVAL;
	if (sm->nodes[0].fail != STOP_MATCHER_ROOT ||
	    sm->nodes[0].match_len != 0 || sm->info[0].depth != 0 ||
	    sm->info[0].own_len != 0)
		return -EINVAL;
	if (sm_check_edges(sm))
		return -EINVAL;
	for (uint32_t s = 1; s < sm->n_states; s++) {
		if (sm_check_shape(sm, s))
			return -EINVAL;
		if (sm->info[s].own_len > longest)
			longest = sm->info[s].own_len;
	}
	if (longest != sm->max_len)
		return -EINVAL;
	for (uint32_t s = 1; s < sm->n_states; s++)
		if (sm_check_links(sm, s))
			return -EINVAL;
	return 0;
}
