/*
 * sched_kv.c - the scheduler's use of each shard's paged KV cache; see
 * sched_kv.h and docs/DESIGN.md 11.
 *
 * NOTES ON THE DESIGN
 *
 * Positions.  A request whose committed prefix is n tokens long has KV
 * for positions [0, n - 1) at most: the step that made token n - 1 did
 * not consume it.  So the blocks a commit registers are the full ones
 * among [0, n - 1), and a prefix-cache hit stops short of the last token,
 * whose logits the request needs.  A worker extending a row to prefix
 * length L writes positions up to L - 2, so a table of capacity C
 * positions lets the row go to limit C + 1 (sched_kv_row()).
 *
 * Run-ahead.  The worker extends its rows without waiting for us, so a
 * table covers `lookahead` positions past the committed prefix, and
 * grows again when less than half of that is left.  A row that reaches
 * its table's end waits (its dispatch limit) until the table grows: the
 * worker never writes a block we did not give it.
 *
 * Closing.  A slot's blocks go back only once its worker can no longer
 * touch them (the scheduler calls sched_kv_close() when the slot's
 * drain is over, or at once when nothing ran it), so no late step of a
 * cancelled, finished or preempted request ever writes a block that
 * another request has been given.
 */
#include "sched/sched_kv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/shm_segment.h"
#include "model/kv_pool.h"
#include "sched/slot_table.h"
#include "util/log.h"

/* Blocks a table covers past the committed prefix: one, so that a fork
 * or a short request holds at most one block it may not need. */
#define SCHED_KV_LOOKAHEAD_BLOCKS 1u

bool sched_kv_on(const struct sched_kv *kv)
{
	return kv->block_tokens > 0;
}

bool sched_kv_starved(const struct sched_kv *kv, uint32_t shard)
{
	return sched_kv_on(kv) && kv->starved[shard];
}

int sched_kv_init(struct sched_kv *kv, const struct sched_kv_config *cfg)
{
	const struct shm_header *hdr = cfg->seg->hdr;
	uint32_t n_slots = cfg->slots->n_slots, max_context = cfg->slots->max_context;

	memset(kv, 0, sizeof(*kv));
	if (!cfg->block_tokens)
		return 0;
	kv->seg = cfg->seg;
	kv->slots = cfg->slots;
	kv->n_shards = hdr->n_shards;
	kv->block_tokens = cfg->block_tokens;
	kv->blocks = cfg->blocks;
	kv->max_blocks = (max_context + cfg->block_tokens - 1) / cfg->block_tokens;
	kv->lookahead = SCHED_KV_LOOKAHEAD_BLOCKS * cfg->block_tokens;
	kv->prefix_cache = cfg->prefix_cache;
	kv->inproc_pool = cfg->inproc_pool;
	kv->mgr = calloc(kv->n_shards, sizeof(*kv->mgr));
	kv->starved = calloc(kv->n_shards, sizeof(*kv->starved));
	kv->first_slot = calloc(kv->n_shards, sizeof(*kv->first_slot));
	kv->n_slots = calloc(kv->n_shards, sizeof(*kv->n_slots));
	kv->seq = calloc(n_slots, sizeof(*kv->seq));
	kv->n_seq = calloc(n_slots, sizeof(*kv->n_seq));
	kv->limit = calloc(n_slots, sizeof(*kv->limit));
	kv->cached = calloc(n_slots, sizeof(*kv->cached));
	kv->computed = calloc(n_slots, sizeof(*kv->computed));
	kv->copy = calloc(n_slots, sizeof(*kv->copy));
	kv->admitted = calloc(n_slots, sizeof(*kv->admitted));
	kv->written = calloc(n_slots, sizeof(*kv->written));
	kv->hold = calloc(n_slots, sizeof(*kv->hold));
	if (!kv->mgr || !kv->starved || !kv->first_slot || !kv->n_slots ||
	    !kv->seq || !kv->n_seq || !kv->limit || !kv->cached || !kv->computed || !kv->copy ||
	    !kv->admitted || !kv->written || !kv->hold)
		return -ENOMEM;
	for (uint32_t i = 0; i < kv->n_shards; i++) {
		/* the shards' split of the slots (shm_segment.h) */
		kv->first_slot[i] = shm_shard_first_slot(hdr, i);
		kv->n_slots[i] = (i + 1 < kv->n_shards ? shm_shard_first_slot(hdr, i + 1) :
				  n_slots) - kv->first_slot[i];
		kv->mgr[i] = kv_manager_create(cfg->blocks, cfg->block_tokens,
					       kv->n_slots[i], kv->max_blocks,
					       cfg->model_id, cfg->hash_mask);
		if (!kv->mgr[i])
			return -ENOMEM;
	}
	for (uint32_t i = 0; i < n_slots; i++) {
		kv->seq[i] = malloc((size_t)max_context * sizeof(int32_t));
		if (!kv->seq[i])
			return -ENOMEM;
		kv->copy[i] = (struct kv_copy){ KV_NO_BLOCK, KV_NO_BLOCK };
	}
	return 0;
}

void sched_kv_destroy(struct sched_kv *kv)
{
	for (uint32_t i = 0; kv->mgr && i < kv->n_shards; i++)
		kv_manager_destroy(kv->mgr[i]);
	for (uint32_t i = 0; kv->seq && i < kv->slots->n_slots; i++)
		free(kv->seq[i]);
	free(kv->first_slot);
	free(kv->n_slots);
	free(kv->limit);
	free(kv->computed);
	free(kv->mgr);
	free(kv->starved);
	free(kv->seq);
	free(kv->n_seq);
	free(kv->cached);
	free(kv->copy);
	free(kv->admitted);
	free(kv->written);
	free(kv->hold);
	memset(kv, 0, sizeof(*kv));
}

/* Write the entries of slot's table that its shard's worker has not got
 * yet into the shard's object (before the dispatch that lets it use
 * them is published). */
static void kv_publish_table(struct sched_kv *kv, uint32_t shard, uint32_t slot)
{
	uint32_t n;
	const uint32_t *b = kv_table_blocks(kv->mgr[shard], slot - kv->first_slot[shard], &n);
	uint32_t *dst = shm_kv_table_at(kv->seg, slot);

	for (uint32_t i = kv->written[slot]; b && i < n; i++)
		dst[i] = b[i];
	kv->written[slot] = n;
}

/* The state every new table starts with, hit positions cached. */
static void kv_start(struct sched_kv *kv, uint32_t slot, uint32_t n,
		     uint32_t n_prompt, uint32_t hit, uint32_t limit)
{
	kv->limit[slot] = limit;
	kv->n_seq[slot] = n;
	kv->cached[slot] = hit;
	kv->computed[slot] = hit;
	kv->copy[slot] = (struct kv_copy){ KV_NO_BLOCK, KV_NO_BLOCK };
	kv->admitted[slot] = ++kv->clock;
	kv->written[slot] = 0;
	kv->hold[slot] = false;
	kv->prompt_tokens += n_prompt;
}

/* Positions a new table of a sequence of n tokens ending at limit
 * covers: [0, n) to compute the next token, then the lookahead. */
static uint32_t kv_reserve(const struct sched_kv *kv, uint32_t n, uint32_t limit)
{
	uint32_t reserve = n + kv->lookahead;

	if (reserve > limit - 1)
		reserve = limit - 1;
	return reserve < n ? n : reserve;
}

int sched_kv_place(struct sched_kv *kv, uint32_t shard, uint32_t slot,
		   const int32_t *prompt, uint32_t n_prompt,
		   const int32_t *generated, uint32_t n_generated, uint32_t limit)
{
	uint32_t n = n_prompt + n_generated, hit = 0, reserve;
	int ret;

	if (!sched_kv_on(kv))
		return 0;
	if (n)
		memcpy(kv->seq[slot], prompt, (size_t)n_prompt * sizeof(int32_t));
	if (n_generated)
		memcpy(kv->seq[slot] + n_prompt, generated,
		       (size_t)n_generated * sizeof(int32_t));
	reserve = kv_reserve(kv, n, limit);
	ret = kv_table_open(kv->mgr[shard], slot - kv->first_slot[shard], kv->seq[slot], n,
			    kv->prefix_cache && n ? n - 1 : 0, reserve, &hit);
	if (ret)
		return ret;
	kv_start(kv, slot, n, n_prompt, hit, limit);
	kv_publish_table(kv, shard, slot);
	return 0;
}

int sched_kv_fork(struct sched_kv *kv, uint32_t shard, uint32_t slot, uint32_t src,
		  const int32_t *prompt, uint32_t n_prompt, uint32_t limit)
{
	struct kv_manager *m = kv->mgr[shard];
	uint32_t t = slot - kv->first_slot[shard], reserve = kv_reserve(kv, n_prompt, limit);
	struct kv_copy copies[4];
	uint32_t n_copies = 0;
	int ret;

	/* src's blocks must hold the prompt now, not only once did */
	if (!sched_kv_on(kv) || n_prompt < 2 || kv->computed[src] < n_prompt - 1)
		return sched_kv_place(kv, shard, slot, prompt, n_prompt, NULL, 0, limit);
	memcpy(kv->seq[slot], prompt, (size_t)n_prompt * sizeof(int32_t));
	ret = kv_table_fork(m, t, src - kv->first_slot[shard], n_prompt);
	if (!ret)
		ret = kv_table_grow(m, t, reserve);
	/* the one block it writes first that src still shares: position
	 * n_prompt - 1, the last prompt token, recomputed for its logits */
	if (!ret)
		ret = kv_table_make_writable(m, t, n_prompt - 1, n_prompt, copies,
					     &n_copies);
	if (ret) {
		if (kv_table_is_open(m, t))
			kv_table_close(m, t);
		return ret;
	}
	kv_start(kv, slot, n_prompt, n_prompt, n_prompt - 1, limit);
	kv->fork_tokens += n_prompt - 1;
	if (n_copies) {
		kv->copy[slot] = copies[0];
		/* in-process the copy is ours to do, now: nothing has
		 * written the new block yet */
		if (kv->inproc_pool)
			(void)kv_pool_copy(kv->inproc_pool, copies[0].src, copies[0].dst);
	}
	kv_publish_table(kv, shard, slot);
	return 0;
}

void sched_kv_hold_first(struct sched_kv *kv, uint32_t slot)
{
	if (sched_kv_on(kv))
		kv->hold[slot] = true;
}

bool sched_kv_commit(struct sched_kv *kv, uint32_t shard, uint32_t slot,
		     int32_t token)
{
	bool held;

	if (!sched_kv_on(kv) || kv->n_seq[slot] >= kv->slots->max_context)
		return false;
	held = kv->hold[slot];
	kv->hold[slot] = false;
	kv->seq[slot][kv->n_seq[slot]++] = token;
	/* the step that made this token consumed every position before it */
	kv->computed[slot] = kv->n_seq[slot] - 1;
	if (kv->prefix_cache)	/* else nothing registered: nothing to hit */
		kv_table_commit(kv->mgr[shard], slot - kv->first_slot[shard],
				kv->seq[slot], kv->n_seq[slot] - 1);
	return held;
}

/* Grow slot's table if its committed prefix is within half a lookahead
 * of its end.  0 (grown or no need: *grew says), or -ENOSPC. */
static int kv_grow_slot(struct sched_kv *kv, uint32_t shard, uint32_t slot,
			bool *grew)
{
	struct kv_manager *m = kv->mgr[shard];
	uint32_t t = slot - kv->first_slot[shard], n_blocks, last = kv->limit[slot] - 1;
	uint32_t computed = kv->n_seq[slot] - 1, want, need;
	uint64_t cap;

	if (!kv->n_seq[slot])	/* an empty prompt: the model refuses it */
		return 0;
	kv_table_blocks(m, t, &n_blocks);
	cap = (uint64_t)n_blocks * kv->block_tokens;
	/* the next step writes position `computed`: the table covers it
	 * and half a lookahead more, else it grows by a whole lookahead */
	want = computed + 1 + kv->lookahead;
	need = computed + 1 + kv->lookahead / 2;
	want = want < last ? want : last;
	need = need < last ? need : last;
	if (cap >= need)
		return 0;
	/* the whole lookahead if there is room, else the next position */
	if (kv_table_grow(m, t, want) && kv_table_grow(m, t, computed + 1))
		return cap > computed ? 0 : -ENOSPC;
	kv_publish_table(kv, shard, slot);
	*grew = true;
	return 0;
}

bool sched_kv_grow(struct sched_kv *kv, uint32_t shard)
{
	bool grew = false, starved = false;

	if (!sched_kv_on(kv))
		return false;
	for (uint32_t i = 0; i < kv->n_slots[shard]; i++) {
		uint32_t slot = kv->first_slot[shard] + i;

		if (kv->slots->slots[slot].state == SHM_SLOT_ACTIVE &&
		    kv_table_is_open(kv->mgr[shard], i) &&
		    kv_grow_slot(kv, shard, slot, &grew))
			starved = true;
	}
	kv->starved[shard] = starved;
	return grew;
}

void sched_kv_row(const struct sched_kv *kv, uint32_t slot, struct shm_dispatch_row *row)
{
	uint32_t shard;
	uint64_t cap;
	uint32_t n;

	if (!sched_kv_on(kv))
		return;
	shard = shm_slot_shard(kv->seg->hdr, slot);
	kv_table_blocks(kv->mgr[shard], slot - kv->first_slot[shard], &n);
	cap = (uint64_t)n * kv->block_tokens;
	row->kv_blocks = n;
	if (row->limit > cap + 1)
		row->limit = (uint32_t)cap + 1;
	if (kv->hold[slot] && row->limit > kv->n_seq[slot] + 1)
		row->limit = kv->n_seq[slot] + 1;	/* its first token only */
	row->kv_cached = kv->cached[slot];
	row->copy_src = kv->copy[slot].src;
	row->copy_dst = kv->copy[slot].dst;
}

bool sched_kv_is_open(const struct sched_kv *kv, uint32_t slot)
{
	uint32_t shard;

	if (!sched_kv_on(kv))
		return false;
	shard = shm_slot_shard(kv->seg->hdr, slot);
	return kv_table_is_open(kv->mgr[shard], slot - kv->first_slot[shard]);
}

void sched_kv_close(struct sched_kv *kv, uint32_t slot)
{
	uint32_t shard;

	if (!sched_kv_is_open(kv, slot))
		return;
	shard = shm_slot_shard(kv->seg->hdr, slot);
	kv_table_close(kv->mgr[shard], slot - kv->first_slot[shard]);
	kv->n_seq[slot] = 0;
	kv->cached[slot] = 0;
	kv->computed[slot] = 0;
	kv->copy[slot] = (struct kv_copy){ KV_NO_BLOCK, KV_NO_BLOCK };
	kv->written[slot] = 0;
	kv->hold[slot] = false;
}

bool sched_kv_victim(struct sched_kv *kv, uint32_t shard, uint32_t *slot)
{
	uint64_t newest = 0;

	if (!sched_kv_on(kv) || !kv->starved[shard])
		return false;
	for (uint32_t i = 0; i < kv->n_slots[shard]; i++) {
		uint32_t k = kv->first_slot[shard] + i;

		if (kv->slots->slots[k].state != SHM_SLOT_ACTIVE) {
			if (kv_table_is_open(kv->mgr[shard], i))
				return false;	/* blocks on their way back */
			continue;
		}
		if (kv->admitted[k] > newest) {
			newest = kv->admitted[k];
			*slot = k;
		}
	}
	if (!newest)
		return false;
	kv->preemptions++;
	kv->starved[shard] = false;	/* until the next grow says */
	return true;
}

void sched_kv_new_epoch(struct sched_kv *kv, uint32_t shard)
{

	if (!sched_kv_on(kv))
		return;
	/* the old worker's pool is gone with it */
	kv_forget_cache(kv->mgr[shard]);
	for (uint32_t i = 0; i < kv->n_slots[shard]; i++) {
		uint32_t slot = kv->first_slot[shard] + i;

		if (!kv_table_is_open(kv->mgr[shard], i))
			continue;
		if (kv->slots->slots[slot].state != SHM_SLOT_ACTIVE) {
			sched_kv_close(kv, slot);	/* nobody runs it now */
			continue;
		}
		kv->cached[slot] = 0;
		kv->computed[slot] = 0;		/* the new worker recomputes */
		kv->copy[slot] = (struct kv_copy){ KV_NO_BLOCK, KV_NO_BLOCK };
		kv->written[slot] = 0;		/* a new shard object */
		kv_publish_table(kv, shard, slot);
	}
}

uint32_t sched_kv_lookup(const struct sched_kv *kv, uint32_t shard,
			 const int32_t *tokens, uint32_t n)
{
	if (!sched_kv_on(kv) || !kv->prefix_cache || !n)
		return 0;
	return kv_lookup(kv->mgr[shard], tokens, n, n - 1);
}

uint32_t sched_kv_lookup_inflight(const struct sched_kv *kv, uint32_t shard,
				  const int32_t *tokens, uint32_t n)
{
	uint32_t best = 0;

	if (!sched_kv_on(kv) || !kv->prefix_cache || n < 2)
		return 0;
	for (uint32_t i = 0; i < kv->n_slots[shard]; i++) {
		uint32_t k = kv->first_slot[shard] + i, cap, common = 0;

		/* a live request still computing what it was placed with */
		if (kv->slots->slots[k].state != SHM_SLOT_ACTIVE ||
		    !kv->n_seq[k] || kv->computed[k] >= kv->n_seq[k] - 1)
			continue;
		cap = kv->n_seq[k] - 1 < n - 1 ? kv->n_seq[k] - 1 : n - 1;
		while (common < cap && kv->seq[k][common] == tokens[common])
			common++;
		/* only whole blocks get registered; those it already had
		 * (computed) are hittable now, not in flight */
		common -= common % kv->block_tokens;
		if (common > kv->computed[k] && common > best)
			best = common;
	}
	return best;
}

uint32_t sched_kv_blocks_for(const struct sched_kv *kv, uint32_t n_tokens)
{
	uint32_t bt = kv->block_tokens;

	/* the last token is never consumed: n - 1 positions */
	return bt && n_tokens ? (n_tokens - 1 + bt - 1) / bt : 0;
}

void sched_kv_counts(const struct sched_kv *kv, struct sched_kv_counts *out)
{

	memset(out, 0, sizeof(*out));
	if (!sched_kv_on(kv))
		return;
	out->block_tokens = kv->block_tokens;
	out->blocks = kv->blocks;
	out->prompt_tokens = kv->prompt_tokens;
	out->fork_tokens = kv->fork_tokens;
	out->preemptions = kv->preemptions;
	for (uint32_t i = 0; i < kv->n_shards; i++) {
		struct kv_counts c;

		kv_counts(kv->mgr[i], &c);
		out->used_blocks += c.used;
		if (c.peak_used > out->peak_used_blocks)
			out->peak_used_blocks = c.peak_used;
		out->prefix_hit_tokens += c.hit_tokens;
		out->cow_copies += c.cow_copies;
		out->evictions += c.evictions;
	}
}
