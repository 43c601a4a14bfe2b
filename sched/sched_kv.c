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
#include "sched/shard_sched.h"
#include "util/log.h"

/* Blocks a table covers past the committed prefix: one, so that a fork
 * or a short request holds at most one block it may not need. */
#define SCHED_KV_LOOKAHEAD_BLOCKS 1u

bool sched_kv_on(const struct sched *sc)
{
	return sc->kv.block_tokens > 0;
}

bool sched_kv_starved(const struct sched *sc, const struct shard *s)
{
	return sched_kv_on(sc) && sc->kv.starved[s->index];
}

int sched_kv_init(struct sched *sc, const struct sched_kv_config *cfg)
{
	struct sched_kv *kv = &sc->kv;
	uint32_t n_slots = sc->slots->n_slots, max_context = sc->slots->max_context;

	memset(kv, 0, sizeof(*kv));
	if (!cfg->block_tokens)
		return 0;
	kv->block_tokens = cfg->block_tokens;
	kv->blocks = cfg->blocks;
	kv->max_blocks = (max_context + cfg->block_tokens - 1) / cfg->block_tokens;
	kv->lookahead = SCHED_KV_LOOKAHEAD_BLOCKS * cfg->block_tokens;
	kv->prefix_cache = cfg->prefix_cache;
	kv->inproc_pool = cfg->inproc_pool;
	kv->mgr = calloc(sc->n_shards, sizeof(*kv->mgr));
	kv->starved = calloc(sc->n_shards, sizeof(*kv->starved));
	kv->seq = calloc(n_slots, sizeof(*kv->seq));
	kv->n_seq = calloc(n_slots, sizeof(*kv->n_seq));
	kv->cached = calloc(n_slots, sizeof(*kv->cached));
	kv->copy = calloc(n_slots, sizeof(*kv->copy));
	kv->admitted = calloc(n_slots, sizeof(*kv->admitted));
	kv->written = calloc(n_slots, sizeof(*kv->written));
	if (!kv->mgr || !kv->starved || !kv->seq || !kv->n_seq || !kv->cached ||
	    !kv->copy || !kv->admitted || !kv->written)
		return -ENOMEM;
	for (uint32_t i = 0; i < sc->n_shards; i++) {
		kv->mgr[i] = kv_manager_create(cfg->blocks, cfg->block_tokens,
					       sc->shards[i].n_slots, kv->max_blocks,
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

void sched_kv_destroy(struct sched *sc)
{
	struct sched_kv *kv = &sc->kv;

	for (uint32_t i = 0; kv->mgr && i < sc->n_shards; i++)
		kv_manager_destroy(kv->mgr[i]);
	for (uint32_t i = 0; kv->seq && i < sc->slots->n_slots; i++)
		free(kv->seq[i]);
	free(kv->mgr);
	free(kv->starved);
	free(kv->seq);
	free(kv->n_seq);
	free(kv->cached);
	free(kv->copy);
	free(kv->admitted);
	free(kv->written);
	memset(kv, 0, sizeof(*kv));
}

static struct kv_manager *kv_of(const struct sched *sc, const struct shard *s)
{
	return sc->kv.mgr[s->index];
}

/* Write the entries of slot's table that its shard's worker has not got
 * yet into the shard's object (before the dispatch that lets it use
 * them is published). */
static void kv_publish_table(struct sched *sc, const struct shard *s, uint32_t slot)
{
	uint32_t n;
	const uint32_t *b = kv_table_blocks(kv_of(sc, s), slot - s->first_slot, &n);
	uint32_t *dst = shm_kv_table_at(sc->seg, slot);

	for (uint32_t i = sc->kv.written[slot]; b && i < n; i++)
		dst[i] = b[i];
	sc->kv.written[slot] = n;
}

/* The state every new table starts with, hit positions cached. */
static void kv_start(struct sched *sc, struct shard *s, uint32_t slot,
		     uint32_t n, uint32_t n_prompt, uint32_t hit)
{
	struct sched_kv *kv = &sc->kv;

	kv->n_seq[slot] = n;
	kv->cached[slot] = hit;
	kv->copy[slot] = (struct kv_copy){ KV_NO_BLOCK, KV_NO_BLOCK };
	kv->admitted[slot] = ++kv->clock;
	kv->written[slot] = 0;
	kv->prompt_tokens += n_prompt;
}

/* Positions a new table of a sequence of n tokens ending at limit
 * covers: [0, n) to compute the next token, then the lookahead. */
static uint32_t kv_reserve(const struct sched_kv *kv, uint32_t n, uint32_t limit)
{
	uint32_t reserve = (n ? n - 1 : 0) + kv->lookahead;

	if (reserve > limit - 1)
		reserve = limit - 1;
	return reserve < n ? n : reserve;
}

int sched_kv_place(struct sched *sc, struct shard *s, uint32_t slot,
		   const int32_t *prompt, uint32_t n_prompt,
		   const int32_t *generated, uint32_t n_generated, uint32_t limit)
{
	struct sched_kv *kv = &sc->kv;
	uint32_t n = n_prompt + n_generated, hit = 0, reserve;
	int ret;

	if (!sched_kv_on(sc))
		return 0;
	if (n)
		memcpy(kv->seq[slot], prompt, (size_t)n_prompt * sizeof(int32_t));
	if (n_generated)
		memcpy(kv->seq[slot] + n_prompt, generated,
		       (size_t)n_generated * sizeof(int32_t));
	reserve = kv_reserve(kv, n, limit);
	ret = kv_table_open(kv_of(sc, s), slot - s->first_slot, kv->seq[slot], n,
			    kv->prefix_cache && n ? n - 1 : 0, reserve, &hit);
	if (ret)
		return ret;
	kv_start(sc, s, slot, n, n_prompt, hit);
	kv_publish_table(sc, s, slot);
	return 0;
}

int sched_kv_fork(struct sched *sc, struct shard *s, uint32_t slot, uint32_t src,
		  const int32_t *prompt, uint32_t n_prompt, uint32_t limit)
{
	struct sched_kv *kv = &sc->kv;
	struct kv_manager *m = kv_of(sc, s);
	uint32_t t = slot - s->first_slot, reserve = kv_reserve(kv, n_prompt, limit);
	struct kv_copy copies[4];
	uint32_t n_copies = 0;
	int ret;

	if (!sched_kv_on(sc) || n_prompt < 2)
		return sched_kv_place(sc, s, slot, prompt, n_prompt, NULL, 0, limit);
	memcpy(kv->seq[slot], prompt, (size_t)n_prompt * sizeof(int32_t));
	ret = kv_table_fork(m, t, src - s->first_slot, n_prompt);
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
	kv_start(sc, s, slot, n_prompt, n_prompt, n_prompt - 1);
	kv->fork_tokens += n_prompt - 1;
	if (n_copies) {
		kv->copy[slot] = copies[0];
		/* in-process the copy is ours to do, now: nothing has
		 * written the new block yet */
		if (kv->inproc_pool)
			(void)kv_pool_copy(kv->inproc_pool, copies[0].src, copies[0].dst);
	}
	kv_publish_table(sc, s, slot);
	return 0;
}

void sched_kv_commit(struct sched *sc, struct shard *s, uint32_t slot,
		     int32_t token)
{
	struct sched_kv *kv = &sc->kv;

	if (!sched_kv_on(sc) || kv->n_seq[slot] >= sc->slots->max_context)
		return;
	kv->seq[slot][kv->n_seq[slot]++] = token;
	kv_table_commit(kv_of(sc, s), slot - s->first_slot, kv->seq[slot],
			kv->n_seq[slot] - 1);
}

/* Grow slot's table if its committed prefix is within half a lookahead
 * of its end.  0 (grown or no need: *grew says), or -ENOSPC. */
static int kv_grow_slot(struct sched *sc, struct shard *s, uint32_t slot,
			bool *grew)
{
	struct sched_kv *kv = &sc->kv;
	struct kv_manager *m = kv_of(sc, s);
	uint32_t t = slot - s->first_slot, n_blocks, last = sc->slot_limit[slot] - 1;
	uint32_t computed = kv->n_seq[slot] - 1, want, need;
	uint64_t cap;

	if (!kv->n_seq[slot])	/* an empty prompt: the model refuses it */
		return 0;
	kv_table_blocks(m, t, &n_blocks);
	cap = (uint64_t)n_blocks * kv->block_tokens;
	want = computed + kv->lookahead < last ? computed + kv->lookahead : last;
	need = computed + kv->lookahead / 2 < last ? computed + kv->lookahead / 2 : last;
	if (cap >= need)
		return 0;
	/* the whole lookahead if there is room, else the next position */
	if (kv_table_grow(m, t, want) && kv_table_grow(m, t, computed + 1))
		return cap > computed ? 0 : -ENOSPC;
	kv_publish_table(sc, s, slot);
	*grew = true;
	return 0;
}

bool sched_kv_grow(struct sched *sc, struct shard *s)
{
	bool grew = false, starved = false;

	if (!sched_kv_on(sc))
		return false;
	for (uint32_t i = 0; i < s->n_slots; i++) {
		uint32_t slot = s->first_slot + i;

		if (sc->slots->slots[slot].state == SHM_SLOT_ACTIVE &&
		    kv_table_is_open(kv_of(sc, s), i) &&
		    kv_grow_slot(sc, s, slot, &grew))
			starved = true;
	}
	sc->kv.starved[s->index] = starved;
	return grew;
}

void sched_kv_row(const struct sched *sc, uint32_t slot, struct shm_dispatch_row *row)
{
	const struct sched_kv *kv = &sc->kv;
	const struct shard *s;
	uint64_t cap;
	uint32_t n;

	if (!sched_kv_on(sc))
		return;
	s = &sc->shards[shm_slot_shard(sc->seg->hdr, slot)];
	kv_table_blocks(kv_of(sc, s), slot - s->first_slot, &n);
	cap = (uint64_t)n * kv->block_tokens;
	row->kv_blocks = n;
	if (row->limit > cap + 1)
		row->limit = (uint32_t)cap + 1;
	row->kv_cached = kv->cached[slot];
	row->copy_src = kv->copy[slot].src;
	row->copy_dst = kv->copy[slot].dst;
}

bool sched_kv_is_open(const struct sched *sc, uint32_t slot)
{
	const struct shard *s;

	if (!sched_kv_on(sc))
		return false;
	s = &sc->shards[shm_slot_shard(sc->seg->hdr, slot)];
	return kv_table_is_open(kv_of(sc, s), slot - s->first_slot);
}

void sched_kv_close(struct sched *sc, uint32_t slot)
{
	struct sched_kv *kv = &sc->kv;
	const struct shard *s;

	if (!sched_kv_is_open(sc, slot))
		return;
	s = &sc->shards[shm_slot_shard(sc->seg->hdr, slot)];
	kv_table_close(kv_of(sc, s), slot - s->first_slot);
	kv->n_seq[slot] = 0;
	kv->cached[slot] = 0;
	kv->copy[slot] = (struct kv_copy){ KV_NO_BLOCK, KV_NO_BLOCK };
	kv->written[slot] = 0;
}

bool sched_kv_victim(struct sched *sc, struct shard *s, uint32_t *slot)
{
	uint64_t newest = 0;

	if (!sched_kv_on(sc) || !sc->kv.starved[s->index])
		return false;
	for (uint32_t i = 0; i < s->n_slots; i++) {
		uint32_t k = s->first_slot + i;

		if (sc->slots->slots[k].state != SHM_SLOT_ACTIVE) {
			if (kv_table_is_open(kv_of(sc, s), i))
				return false;	/* blocks on their way back */
			continue;
		}
		if (sc->kv.admitted[k] > newest) {
			newest = sc->kv.admitted[k];
			*slot = k;
		}
	}
	if (!newest)
		return false;
	sc->kv.preemptions++;
	sc->kv.starved[s->index] = false;	/* until the next grow says */
	return true;
}

void sched_kv_new_epoch(struct sched *sc, struct shard *s)
{
	struct sched_kv *kv = &sc->kv;

	if (!sched_kv_on(sc))
		return;
	/* the old worker's pool is gone with it */
	kv_forget_cache(kv_of(sc, s));
	for (uint32_t i = 0; i < s->n_slots; i++) {
		uint32_t slot = s->first_slot + i;

		if (!kv_table_is_open(kv_of(sc, s), i))
			continue;
		if (sc->slots->slots[slot].state != SHM_SLOT_ACTIVE) {
			sched_kv_close(sc, slot);	/* nobody runs it now */
			continue;
		}
		kv->cached[slot] = 0;
		kv->copy[slot] = (struct kv_copy){ KV_NO_BLOCK, KV_NO_BLOCK };
		kv->written[slot] = 0;		/* a new shard object */
		kv_publish_table(sc, s, slot);
	}
}

uint32_t sched_kv_lookup(const struct sched *sc, const struct shard *s,
			 const int32_t *tokens, uint32_t n)
{
	if (!sched_kv_on(sc) || !sc->kv.prefix_cache || !n)
		return 0;
	return kv_lookup(kv_of(sc, s), tokens, n, n - 1);
}

uint32_t sched_kv_blocks_for(const struct sched *sc, uint32_t n_tokens)
{
	uint32_t bt = sc->kv.block_tokens;

	/* the last token is never consumed: n - 1 positions */
	return bt && n_tokens ? (n_tokens - 1 + bt - 1) / bt : 0;
}

void sched_kv_counts(const struct sched *sc, struct sched_kv_counts *out)
{
	const struct sched_kv *kv = &sc->kv;

	memset(out, 0, sizeof(*out));
	if (!sched_kv_on(sc))
		return;
	out->block_tokens = kv->block_tokens;
	out->blocks = kv->blocks;
	out->prompt_tokens = kv->prompt_tokens;
	out->fork_tokens = kv->fork_tokens;
	out->preemptions = kv->preemptions;
	for (uint32_t i = 0; i < sc->n_shards; i++) {
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
