/*
 * test_shard_channel.c - the untrusted-result check of shard/shard_channel.c
 * against rules stated by hand (docs/DESIGN.md 7.2), on randomized
 * hostile ring entries.
 *
 * A result entry is whatever a worker wrote: every field is drawn at
 * random, biased towards the edges (a sequence number one off, a dispatch
 * id just outside the ids sent, a row count one past the shard, slots
 * just outside it, tokens at -1, vocab and the two markers, logprobs that
 * are NaN, infinite, positive, or with one alternative too many).  For
 * each entry the verdict, and for an OK entry each row's flags and copies,
 * must be what the rules below say; the check must write nothing but its
 * output (not the channel, not the entry).  Then the ring side: an entry
 * not written again reads as NONE, each read consumes one position, a
 * drain skips what a dead worker left.
 *
 * The random tests print their seed; SEED=<n> replays a run.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ipc/shm_segment.h"
#include "shard/shard_channel.h"
#include "tests/unit/test_rng.h"

#define MAX_SLOTS 8u
#define MAX_ROWS (MAX_SLOTS + 4u)	/* room for a row count past the shard */
#define ALL_SLOTS 64u			/* global slot ids the rules cover */
#define N_ENTRIES 20000u

/* ------------------------------------------------------------------------
 * The rules, stated by hand
 * ---------------------------------------------------------------------- */

static uint32_t rule_verdict(const struct shard_channel *c, uint64_t pos,
			     uint64_t seq, uint64_t id, int32_t status,
			     uint32_t n_rows)
{
	if (seq != pos + 1)
		return SHARD_RESULT_BAD_SEQ;	/* only position + 1 is fresh */
	if (!(c->first_id <= id && id <= c->issued_id))
		return SHARD_RESULT_BAD_ID;	/* sent to this worker, or not */
	if (status != 0)
		return SHARD_RESULT_FAILED;
	if (n_rows > c->n_slots)
		return SHARD_RESULT_TOO_MANY_ROWS;
	return SHARD_RESULT_OK;
}

/* A row is ours to look at when its slot is one of the shard's and it
 * carries a token of the vocabulary or one of the two markers. */
static bool rule_row_ok(const struct shard_channel *c, uint32_t vocab,
			const struct shm_result_row *row)
{
	uint64_t slot = row->slot;
	bool in_shard = slot >= c->first_slot &&
			slot < (uint64_t)c->first_slot + c->n_slots;

	if (!in_shard)
		return false;
	if (row->token == SHM_TOKEN_PREFILL || row->token == SHM_TOKEN_REFUSED)
		return true;
	return row->token >= 0 && (int64_t)row->token < (int64_t)vocab;
}

/* A number a logprob may be: finite, and a log of a probability. */
static bool rule_logprob(float x)
{
	return isfinite(x) && x <= 0.0f;
}

/* A token row's logprobs are read only when its slot asked; then the
 * token's logprob and each of at most top_logprobs alternatives must be
 * logprobs, each alternative a token of the vocabulary. */
static bool rule_lp_ok(const struct shard_channel *c, uint32_t vocab,
		       const bool *asked, const uint32_t *top,
		       const struct shm_result_row *row, const struct shm_logprobs *b)
{
	if (!rule_row_ok(c, vocab, row) || row->token < 0 || !asked[row->slot])
		return true;
	if (!rule_logprob(b->logprob) || b->n_top > top[row->slot])
		return false;
	for (uint32_t j = 0; j < b->n_top; j++)
		if (!rule_logprob(b->top[j].logprob) || b->top[j].token < 0 ||
		    b->top[j].token >= (int32_t)vocab)
			return false;
	return true;
}

/* ------------------------------------------------------------------------
 * Hostile entries
 * ---------------------------------------------------------------------- */

static float hostile_logprob(struct rng *r)
{
	switch (rng_below(r, 8)) {
	case 0: return NAN;
	case 1: return INFINITY;
	case 2: return -INFINITY;
	case 3: return 0.5f;
	case 4: return 0.0f;
	case 5: return -0.0f;
	default: return -(float)rng_below(r, 1000) / 100.0f;
	}
}

static int32_t hostile_token(struct rng *r, uint32_t vocab)
{
	switch (rng_below(r, 10)) {
	case 0: return -1;
	case 1: return (int32_t)vocab;
	case 2: return SHM_TOKEN_PREFILL;
	case 3: return SHM_TOKEN_REFUSED;
	case 4: return INT32_MIN;
	case 5: return INT32_MAX;
	case 6: return -4;
	default: return (int32_t)rng_below(r, vocab);
	}
}

static uint32_t hostile_slot(struct rng *r, const struct shard_channel *c)
{
	switch (rng_below(r, 8)) {
	case 0: return c->first_slot - 1;	/* wraps to UINT32_MAX at 0 */
	case 1: return c->first_slot + c->n_slots;
	case 2: return UINT32_MAX;
	case 3: return rng_below(r, ALL_SLOTS);
	default: return c->first_slot + rng_below(r, c->n_slots);
	}
}

/* One random entry at pos into res/blocks; the channel's ids drawn too. */
static void hostile_entry(struct rng *r, struct shard_channel *c, uint32_t vocab,
			  uint64_t pos, struct shm_result *res,
			  struct shm_logprobs *blocks, uint64_t *seq)
{
	static const uint32_t bad_n[] = { UINT32_MAX, MAX_ROWS, 0 };

	c->first_id = 1 + rng_below(r, 100);
	c->issued_id = rng_below(r, 4) ? c->first_id + rng_below(r, 5) : 0;
	switch (rng_below(r, 6)) {
	case 0: *seq = pos; break;
	case 1: *seq = pos + 2; break;
	case 2: *seq = rng_next(r); break;
	default: *seq = pos + 1; break;
	}
	switch (rng_below(r, 6)) {
	case 0: res->dispatch_id = c->first_id - 1; break;
	case 1: res->dispatch_id = c->issued_id + 1; break;
	case 2: res->dispatch_id = rng_next(r); break;
	default: res->dispatch_id = c->first_id + rng_below(r, 6); break;
	}
	res->status = rng_below(r, 8) ? 0 : -(int32_t)(1 + rng_below(r, 100));
	res->model_ns = rng_next(r);
	if (rng_below(r, 8))
		res->n_rows = rng_below(r, c->n_slots + 2);
	else
		res->n_rows = bad_n[rng_below(r, 3)];
	for (uint32_t i = 0; i < MAX_ROWS; i++) {
		struct shm_result_row *row = &res->rows[i];
		struct shm_logprobs *b = &blocks[i];

		row->slot = hostile_slot(r, c);
		row->generation = (uint32_t)rng_next(r);
		row->token = hostile_token(r, vocab);
		row->n_tokens = (uint32_t)rng_next(r);
		row->detail = (uint32_t)rng_next(r);
		b->logprob = hostile_logprob(r);
		b->n_top = rng_below(r, 10) ? rng_below(r, 7) :
			   (rng_below(r, 2) ? UINT32_MAX : SAMPLER_MAX_LOGPROBS);
		for (uint32_t j = 0; j < SAMPLER_MAX_LOGPROBS; j++) {
			b->top[j].token = rng_below(r, 6) ? (int32_t)rng_below(r, vocab) :
					  hostile_token(r, vocab);
			b->top[j].logprob = rng_below(r, 4) ? -(float)rng_below(r, 50) :
					    hostile_logprob(r);
		}
	}
}

/* ------------------------------------------------------------------------
 * Tests
 * ---------------------------------------------------------------------- */

static size_t result_size(void)
{
	return sizeof(struct shm_result) + MAX_ROWS * sizeof(struct shm_result_row);
}

static void test_check_hostile_entries(void **state)
{
	struct rng r = rng_for(1);
	struct shm_result *res = calloc(1, result_size());
	struct shm_result *before = calloc(1, result_size());
	struct shm_logprobs blocks[MAX_ROWS], blocks_before[MAX_ROWS];
	struct shard_checked_row rows[MAX_SLOTS];
	bool asked[ALL_SLOTS];
	uint32_t top[ALL_SLOTS];
	uint32_t n_verdicts[SHARD_RESULT_TOO_MANY_ROWS + 1] = { 0 };
	uint32_t n_lp_bad = 0, n_row_bad = 0;

	(void)state;
	assert_non_null(res);
	assert_non_null(before);
	for (uint32_t k = 0; k < N_ENTRIES; k++) {
		struct shard_channel c, c_before;
		struct shard_row_rules rules;
		struct shard_checked out = { .rows = rows };
		uint64_t pos = rng_below(&r, 4) ? rng_below(&r, 1000) : UINT64_MAX - 1;
		uint32_t vocab = 1 + rng_below(&r, 40), want;
		uint64_t seq;

		assert_int_equal(shard_channel_init(&c, 0, rng_below(&r, ALL_SLOTS - MAX_SLOTS),
						    1 + rng_below(&r, MAX_SLOTS), SHM_RING_DEPTH, 1), 0);
		for (uint32_t s = 0; s < ALL_SLOTS; s++) {
			asked[s] = rng_below(&r, 2);
			top[s] = rng_below(&r, 6);
		}
		rules = (struct shard_row_rules){ vocab, asked, top };
		hostile_entry(&r, &c, vocab, pos, res, blocks, &seq);
		memcpy(before, res, result_size());
		memcpy(blocks_before, blocks, sizeof(blocks));
		c_before = c;
		memset(rows, 0xa5, sizeof(rows));

		shard_channel_check(&c, res, pos, seq, blocks, &rules, &out);

		want = rule_verdict(&c, pos, seq, res->dispatch_id, res->status,
				    res->n_rows);
		if (out.verdict != want)
			fail_msg("entry %u: verdict %u, the rules say %u (SEED=%llu)",
				 k, out.verdict, want, test_seed);
		n_verdicts[want]++;
		/* pure: the channel and the entry are as they were */
		assert_memory_equal(&c, &c_before, sizeof(c));
		assert_memory_equal(res, before, result_size());
		assert_memory_equal(blocks, blocks_before, sizeof(blocks));
		assert_true(out.rows == rows);
		assert_true(out.pos == pos && out.seq == seq);
		if (want != SHARD_RESULT_OK)
			goto next;
		assert_int_equal(out.n_rows, res->n_rows);
		assert_true(out.id == res->dispatch_id);
		for (uint32_t i = 0; i < out.n_rows; i++) {
			const struct shard_checked_row *cr = &rows[i];
			bool ok = rule_row_ok(&c, vocab, &res->rows[i]);
			bool lp_ok = rule_lp_ok(&c, vocab, asked, top, &res->rows[i],
						&blocks[i]);

			assert_memory_equal(&cr->row, &res->rows[i], sizeof(cr->row));
			if (cr->ok != ok || cr->lp_ok != lp_ok)
				fail_msg("entry %u row %u: ok %d lp_ok %d, the rules say "
					 "%d %d (SEED=%llu)", k, i, cr->ok, cr->lp_ok,
					 ok, lp_ok, test_seed);
			n_row_bad += !ok;
			n_lp_bad += !lp_ok;
			/* what is kept of good logprobs is what was there */
			if (ok && lp_ok && res->rows[i].token >= 0 &&
			    asked[res->rows[i].slot]) {
				assert_true(cr->lp.n_top == blocks[i].n_top);
				assert_memory_equal(&cr->lp.logprob, &blocks[i].logprob,
						    sizeof(float));
				assert_memory_equal(cr->lp.top, blocks[i].top,
						    cr->lp.n_top * sizeof(cr->lp.top[0]));
			}
		}
next:
		shard_channel_destroy(&c);
	}
	/* the draw reached every verdict and both kinds of bad row */
	for (uint32_t v = SHARD_RESULT_OK; v <= SHARD_RESULT_TOO_MANY_ROWS; v++)
		assert_true(n_verdicts[v] > 0);
	assert_true(n_row_bad > 0 && n_lp_bad > 0);
	free(res);
	free(before);
}

/* The ring side over a real shard object: NONE until written, one
 * position a read, a drain of what a dead worker left. */
static void test_read_consumes_in_order(void **state)
{
	struct shm_params p = { .n_slots = 4, .n_shards = 1, .max_context = 16,
				.vocab = 32 };
	struct shm_segment seg;
	struct shard_channel c;
	struct shard_checked out;
	struct shm_channel *ch;
	bool asked[4] = { 0 };
	uint32_t top[4] = { 0 };
	struct shard_row_rules rules = { 32, asked, top };
	struct shm_result *r;

	(void)state;
	assert_int_equal(shm_segment_create(&seg, &p), 0);
	ch = shm_channel_at(&seg, 0);
	assert_int_equal(shard_channel_init(&c, 0, 0, 4, seg.hdr->ring_depth, 1), 0);
	shard_channel_new_epoch(&c);
	assert_int_equal(shard_channel_record(&c, 0), 1);
	assert_true(shard_channel_sent_any(&c));

	assert_int_equal(shard_channel_read(&c, seg.hdr, ch, &rules, &out),
			 SHARD_RESULT_NONE);
	assert_true(c.result_pos == 0);
	assert_false(shard_channel_result_ready(&c, seg.hdr, ch));
	for (uint64_t pos = 0; pos < 3; pos++) {
		r = shm_result_at(seg.hdr, ch, pos);
		r->dispatch_id = 1;
		r->n_rows = 1;
		r->status = 0;
		r->rows[0] = (struct shm_result_row){ .slot = 2, .token = 5 };
		shm_entry_publish(&r->seq, pos);
	}
	assert_true(shard_channel_result_ready(&c, seg.hdr, ch));
	assert_int_equal(shard_channel_read(&c, seg.hdr, ch, &rules, &out),
			 SHARD_RESULT_OK);
	assert_int_equal(out.n_rows, 1);
	assert_true(out.rows[0].ok && out.rows[0].row.slot == 2);
	assert_true(c.result_pos == 1);
	/* a dead worker's two entries are skipped, and the seqs forgotten */
	assert_int_equal(shard_channel_drain(&c, seg.hdr, ch), 2);
	assert_true(c.result_pos == 3);
	for (uint32_t i = 0; i < SHM_RING_DEPTH; i++)
		assert_true(c.ring_seq[i] == 0);
	shard_channel_destroy(&c);
	shm_segment_destroy(&seg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_check_hostile_entries),
		cmocka_unit_test(test_read_consumes_in_order),
	};

	test_seed_init("shard_channel");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
