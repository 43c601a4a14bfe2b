/*
 * engine_kv.c - the engine's side of the paged KV cache (docs/DESIGN.md
 * 11.2): where the request at the head of the line goes (a fork of its
 * choice 0, the shard that caches most of it, or wait), preempting for a
 * starved shard, putting a request back at the head of the line, and the
 * KV setup, stats and metrics.  The books are the scheduler's
 * (sched/sched_kv.c); this file only applies what it returns.
 */
#include "engine/engine_internal.h"

#include <stdlib.h>
#include <string.h>

#include "engine/metrics.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/parse_num.h"
#include "util/strbuf.h"

/* Put unplaced request handle at the head of the line (the resume line,
 * ahead of the waiting queue): one the KV pool had no room for, or one
 * preempted. */
void engine_requeue_front(struct engine *e, uint32_t handle,
				 struct live_request *lr)
{
	/* room: the line holds one entry per live request at most */
	memmove(e->resume + 1, e->resume, e->n_resume * sizeof(uint32_t));
	e->resume[0] = handle;
	e->n_resume++;
	e->n_paused++;
	lr->place = LIVE_RESUMING;
}

/*
 * A running request of the shard needs KV blocks its pool does not have:
 * preempt the one placed last (sched_kv_victim()).  It goes back to the
 * head of the line with the tokens it has and resumes by recompute (its
 * full blocks stay in the prefix cache), with the same output: the model
 * is a function of the prefix, and seeded draws of (seed, position,
 * choice).  True when one was preempted: the shard admits nobody in this
 * round (docs/DESIGN.md 11).
 */
bool engine_preempt(struct engine *e, struct shard *s)
{
	struct live_request *lr;
	uint32_t slot, handle;

	if (!shard_kv_starved(&e->sched, s) || !sched_kv_victim(&e->sched.kv, s->index, &slot))
		return false;
	handle = e->slots.slots[slot].request_handle;
	lr = request_pool_get(&e->pool, handle);
	if (!lr) {
		engine_fail(e, "slot %u holds a bad handle %u", slot, handle);
		return false;
	}
	/* in-process its tokens are only in the slot it gives up */
	if (!lr->generated && engine_copy_generated(e, lr))
		return false;	/* no memory: it keeps its slot for now */
	engine_unplace(e, handle, lr, clock_now_ns());
	engine_requeue_front(e, handle, lr);
	LOG(LOG_DEBUG, "shard %u: preempted the request in slot %u", s->index, slot);
	return true;
}


/* Choice 0 of lr's prompt, if it is still live (NULL otherwise): a
 * batch's ring holds other prompts' choices 0 too, whose blocks are not
 * this prompt's. */
static const struct live_request *engine_first_choice(struct engine *e,
						       uint32_t handle,
						       const struct live_request *lr)
{
	for (uint32_t h = lr->next_choice; h != handle;) {
		const struct live_request *c = request_pool_get(&e->pool, h);

		if (!c)
			return NULL;
		if (c->req.choice == 0 &&
		    c->req.prompt_index == lr->req.prompt_index)
			return c;
		h = c->next_choice;
	}
	return NULL;
}

/*
 * Where the head request lr goes (docs/DESIGN.md 11.2), with a paged
 * model:
 * - choice k > 0 of a request whose choice 0 is computing the prompt
 *   is held for it, then forks choice 0's blocks (*fork_slot) when it is
 *   placed in choice 0's shard;
 * - otherwise, cache-aware (SGLang's policy), among the shards that are
 *   up and not busier than this one by more than ROUTE_IMBALANCE slots
 *   (balance first): to the one that will hold the longest prefix of
 *   it, in its cache or being computed there now by another request.
 *   This shard unless another holds a block more.  If the best prefix
 *   is still being computed, or the best shard is full, the request is
 *   held (passed over, first in line again: engine_refill()) until that
 *   request commits (its blocks are registered then) or a slot frees,
 *   rather than computing the same prefix twice: the first turns of
 *   many chats with one system prompt arrive at once.  One whose shard
 *   has room is placed by that shard in the same pass of the loop or the
 *   next.
 */
#define ROUTE_IMBALANCE(s) ((s)->n_slots / 4 + 1)
enum engine_route engine_route(struct engine *e, struct shard *s,
			       uint32_t handle, const struct live_request *lr,
			       uint32_t *fork_slot)
{
	const struct sched_kv *kv = &e->sched.kv;
	const struct live_request *first;
	const struct shard *best = s;
	uint32_t here, best_len, best_cached, n = lr->req.n_prompt;

	*fork_slot = UINT32_MAX;
	if (!sched_kv_on(kv))
		return ROUTE_HERE;
	first = lr->req.choice && !lr->n_generated ?
		engine_first_choice(e, handle, lr) : NULL;
	if (first && first->place == LIVE_ACTIVE) {
		if (!first->n_generated)
			return ROUTE_HOLD;
		if (first->slot >= s->first_slot &&
		    first->slot < s->first_slot + s->n_slots) {
			*fork_slot = first->slot;
			return ROUTE_HERE;
		}
	}
	if (!e->cfg->prefix_cache)
		return ROUTE_HERE;
	here = best_cached = sched_kv_lookup(kv, s->index, lr->req.prompt, n);
	best_len = here;	/* lengths are whole blocks: ">" is a block more */
	for (uint32_t i = 0; i < e->n_shards; i++) {
		const struct shard *t = &e->sched.shards[i];
		uint32_t c, f;

		if (t != s && (!shard_is_up(&e->sched, t) ||
			       t->n_active > s->n_active + ROUTE_IMBALANCE(s)))
			continue;
		c = t == s ? here : sched_kv_lookup(kv, t->index, lr->req.prompt, n);
		f = sched_kv_lookup_inflight(kv, t->index, lr->req.prompt, n);
		if ((c > f ? c : f) > best_len) {
			best = t;
			best_len = c > f ? c : f;
			best_cached = c;
		}
	}
	if (best_len > best_cached)	/* still being computed */
		return ROUTE_HOLD;
	if (best == s)
		return ROUTE_HERE;
	return shard_has_room(&e->sched, best) ? ROUTE_ELSEWHERE : ROUTE_HOLD;
}

/* Positions per KV block, or 0 when the model is not paged. */
uint32_t engine_block_tokens(const struct engine *e)
{
	if (!e->kv_bytes_per_token)
		return 0;
	return e->cfg->block_tokens ? e->cfg->block_tokens : ENGINE_DEFAULT_BLOCK_TOKENS;
}

/*
 * The scheduler's block tables (sched_kv.h).  The model's identity goes
 * into every block hash: the spec workers get, pinned to its file.
 * DYNBATCH_KV_HASH_BITS=N (tests) keeps N bits of each hash, so that
 * chains collide and the token check behind every hit is exercised.
 */
int engine_setup_kv(struct engine *e)
{
	const char *bits = getenv("DYNBATCH_KV_HASH_BITS");
	struct sched_kv_config kc = {
		.seg = &e->seg, .slots = &e->slots,
		.block_tokens = engine_block_tokens(e), .blocks = e->kv_blocks,
		.prefix_cache = e->cfg->prefix_cache, .hash_mask = UINT64_MAX,
		.inproc_pool = e->in_process ? &e->kv_pool : NULL,
		.model_id = 1469598103934665603ull };
	uint32_t n;

	for (const char *c = e->worker_spec; c && *c; c++)
		kc.model_id = (kc.model_id ^ (uint8_t)*c) * 1099511628211ull;
	if (bits && !parse_u32(bits, 1, 63, &n))
		kc.hash_mask = (1ull << n) - 1;
	return sched_kv_init(&e->sched.kv, &kc);
}

/* The paged cache's counts (sched_kv.h), into the stats. */
void engine_sync_kv_stats(struct engine *e)
{
	struct sched_kv_counts c;

	sched_kv_counts(&e->sched.kv, &c);
	e->stats.kv = (struct stats_kv){
		.block_tokens = c.block_tokens, .blocks = c.blocks,
		.peak_used_blocks = c.peak_used_blocks,
		.prompt_tokens = c.prompt_tokens,
		.prefix_hit_tokens = c.prefix_hit_tokens,
		.fork_tokens = c.fork_tokens, .cow_copies = c.cow_copies, .preemptions = c.preemptions,
		.evictions = c.evictions };
}

/* The paged cache's counters and gauges (nothing when not paged). */
int engine_kv_metrics(const struct engine *e, struct strbuf *out)
{
	struct sched_kv_counts c;
	int ret = 0;

	sched_kv_counts(&e->sched.kv, &c);
	if (!c.block_tokens)
		return 0;
	ret = ret ? ret : metrics_gauge(out, "dynbatch_kv_block_tokens",
			"Positions per KV block (--block-tokens).", c.block_tokens);
	ret = ret ? ret : metrics_gauge(out, "dynbatch_kv_blocks",
			"KV blocks in each shard's pool.", c.blocks);
	ret = ret ? ret : metrics_gauge(out, "dynbatch_kv_used_blocks",
			"KV blocks held by requests now, all shards.", c.used_blocks);
	ret = ret ? ret : metrics_gauge(out, "dynbatch_kv_peak_used_blocks",
			"The most KV blocks one shard held at once.", c.peak_used_blocks);
	ret = ret ? ret : metrics_counter(out, "dynbatch_kv_prompt_tokens_total",
			"Prompt tokens of placed requests.", NULL, c.prompt_tokens);
	ret = ret ? ret : metrics_counter(out, "dynbatch_kv_prefix_hit_tokens_total",
			"Positions taken from the prefix cache.", NULL,
			c.prefix_hit_tokens);
	ret = ret ? ret : metrics_counter(out, "dynbatch_kv_fork_tokens_total",
			"Prompt positions n > 1 choices shared by forking.", NULL,
			c.fork_tokens);
	ret = ret ? ret : metrics_counter(out, "dynbatch_kv_cow_copies_total",
			"KV blocks copied on write.", NULL, c.cow_copies);
	ret = ret ? ret : metrics_counter(out, "dynbatch_kv_preemptions_total",
			"Requests preempted for KV blocks.", NULL, c.preemptions);
	ret = ret ? ret : metrics_counter(out, "dynbatch_kv_evictions_total",
			"Cached KV blocks reused for other requests.", NULL,
			c.evictions);
	return ret;
}

uint32_t engine_kv_need(const struct engine *e, uint32_t n_tokens,
			struct engine_kv_pool *pool)
{
	if (pool)
		*pool = (struct engine_kv_pool){ e->kv_blocks, engine_block_tokens(e) };
	return sched_kv_blocks_for(&e->sched.kv, n_tokens);
}

