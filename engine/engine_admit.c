/*
 * engine_admit.c - the front ends' side of the engine's requests
 * (engine.h, frontend.h): admission (engine_submit(): a seed for a
 * request that samples without one, the n choices admitted all or none
 * and linked in a ring; engine_submit_batch(): the same for the n
 * choices of each prompt of a batch, all in one ring), and cancel,
 * pause and resume, which reach every live choice of a request.
 */
#include "engine/engine.h"
#include "engine/engine_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "engine/request_text.h"
#include "model/sim_model.h"
#include "engine/wait_queue.h"

/* ------------------------------------------------------------------------
 * The front ends' side (engine.h, frontend.h)
 * ---------------------------------------------------------------------- */

/* A seed for a request that samples without one: from the run's random
 * start (engine_setup), cut to 53 bits (REQUEST_PICKED_SEED_MASK), so two
 * requests of a run share one as rarely as two 53-bit draws meet. */
static uint64_t engine_new_seed(struct engine *e)
{
	return sim_splitmix64(&e->seed_state) & REQUEST_PICKED_SEED_MASK;
}

/* Admit one choice (req moved into the pool); its handle. */
static uint32_t engine_admit(struct engine *e, struct request *req,
			     uint64_t cookie, uint64_t now)
{
	uint32_t h = request_pool_alloc(&e->pool);
	struct live_request *lr = request_pool_get(&e->pool, h);

	lr->req = *req;
	memset(req, 0, sizeof(*req));
	lr->cookie = cookie;
	lr->admitted_ns = now;
	lr->next_choice = h;
	if (e->tok)	/* the whole text kept: every result carries it */
		request_text_init(lr, true);
	if (lr->req.max_tokens) {
		/* cost: what the choice may take of the slots, its tokens */
		wait_queue_push_class(&e->queue, h, lr->req.queue_class,
				      (uint64_t)lr->req.n_prompt + lr->req.max_tokens);
	} else {
		/* Nothing to generate: answered on the loop's next round,
		 * not from inside this call (frontend.h). */
		lr->place = LIVE_AT_ONCE;
		e->at_once[e->n_at_once++] = h;	/* room: one per live request */
	}
	return h;
}

/* The first logprob rows of a request that asked for them (NULL
 * otherwise): room for a few tokens, grown as they come
 * (engine_keep_logprobs()), so a waiting request costs little whatever
 * its max_tokens.  -ENOMEM. */
#define ENGINE_LOGPROBS_FIRST 16u
static int engine_alloc_logprobs(const struct request *req,
				 struct sampler_logprob **out)
{
	uint32_t first = req->max_tokens < ENGINE_LOGPROBS_FIRST ?
			 req->max_tokens : ENGINE_LOGPROBS_FIRST;

	*out = NULL;
	if (!req->sampling.logprobs || !req->max_tokens)
		return 0;
	*out = calloc((size_t)first * (1 + req->sampling.top_logprobs),
		      sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

/* Why the batch reqs (n_reqs prompts of per choices each) cannot be
 * taken now, before anything is touched: engine_submit_batch()'s
 * errors, 0 when it can. */
static int engine_submit_check(struct engine *e, struct request **reqs,
			       uint32_t n_reqs, uint32_t per)
{
	uint32_t n = n_reqs * per;

	if (e->n_signals || e->failed)
		return -ESHUTDOWN;
	if (e->workers_lost && reqs[0]->max_tokens)	/* 0 needs no worker */
		return -EIO;
	if (request_pool_find_id(&e->pool, reqs[0]->id) != REQUEST_NONE)
		return -EEXIST;
	/* one prompt's choices are its n; the ring and the flat index
	 * (request_flat_choice()) need the same n for all */
	for (uint32_t p = 0; p < n_reqs; p++)
		if ((reqs[p]->n_choices ? reqs[p]->n_choices : 1) != per)
			return -EINVAL;
	if (n > REQUEST_MAX_CHOICES || n > e->pool.capacity - e->cfg->n_slots)
		return -E2BIG;		/* would never fit the queue */
	if (wait_queue_len(&e->queue) + n > e->queue.capacity ||
	    e->pool.n_free < n)
		return -EAGAIN;
	for (uint32_t p = 0; p < n_reqs; p++) {
		/* one that can never fit its shard's KV pool fails now, not
		 * by preempting everything else first (engine_kv_need()) */
		if (engine_kv_need(e, reqs[p]->n_prompt + reqs[p]->max_tokens,
				   NULL) > e->kv_blocks)
			return -ENOSPC;
	}
	return 0;
}

int engine_submit(struct engine *e, struct request *req, uint64_t cookie,
		  uint32_t *handles)
{
	return engine_submit_batch(e, &req, 1, cookie, handles);
}

int engine_submit_batch(struct engine *e, struct request **reqs,
			uint32_t n_reqs, uint64_t cookie, uint32_t *handles)
{
	uint32_t per = n_reqs && reqs[0]->n_choices ? reqs[0]->n_choices : 1;
	uint32_t n = n_reqs * per;
	/* on the stack: a request of one choice allocates nothing here */
	struct request copies[REQUEST_MAX_CHOICES];
	struct sampler_logprob *lps[REQUEST_MAX_CHOICES];
	uint64_t now = clock_now_ns();
	int ret;

	if (!n_reqs)
		return -EINVAL;
	ret = engine_submit_check(e, reqs, n_reqs, per);
	if (ret)
		return ret;
	ret = -ENOMEM;
	if (reqs[0]->sampling.temperature > 0.0f && !reqs[0]->seed_given) {
		reqs[0]->sampling.seed = engine_new_seed(e);
		reqs[0]->seed_given = true;	/* the choices share it */
	}
	for (uint32_t p = 0; p < n_reqs; p++) {
		/* a batch's prompts share one seed, as its choices do */
		reqs[p]->sampling.seed = reqs[0]->sampling.seed;
		reqs[p]->seed_given = reqs[0]->seed_given;
		reqs[p]->n_choices = per;
		reqs[p]->prompt_index = p;
		reqs[p]->choice = 0;
	}
	/* every allocation first: the choices are admitted all or none */
	memset(lps, 0, n * sizeof(lps[0]));
	memset(copies, 0, n * sizeof(copies[0]));
	for (uint32_t i = 0; i < n; i++) {
		if (i % per && request_clone(&copies[i], reqs[i / per]))
			goto out;
		copies[i].choice = i % per;
		if (engine_alloc_logprobs(reqs[i / per], &lps[i]))
			goto out;
	}
	for (uint32_t p = 0; p < n_reqs; p++) {
		copies[p * per] = *reqs[p];
		memset(reqs[p], 0, sizeof(*reqs[p]));
	}
	for (uint32_t i = 0; i < n; i++) {
		struct live_request *lr;

		handles[i] = engine_admit(e, &copies[i], cookie, now);
		lr = request_pool_get(&e->pool, handles[i]);
		lr->logprobs = lps[i];
		lr->logprobs_cap = lps[i] ? (lr->req.max_tokens < ENGINE_LOGPROBS_FIRST ?
				   lr->req.max_tokens : ENGINE_LOGPROBS_FIRST) : 0;
		lps[i] = NULL;
		e->n_prompt_tokens += lr->req.n_prompt;
		if (i) {	/* into the ring after choice i - 1 */
			struct live_request *prev =
				request_pool_get(&e->pool, handles[i - 1]);

			lr->next_choice = prev->next_choice;
			prev->next_choice = handles[i];
		}
	}
	request_pool_get(&e->pool, handles[0])->id_held = true;
	request_pool_add_id(&e->pool, handles[0]);
	ret = 0;
out:
	if (ret) {
		for (uint32_t i = 0; i < n; i++)
			if (i % per)
				request_release(&copies[i]);
	}
	for (uint32_t i = 0; i < n; i++)
		free(lps[i]);
	return ret;
}

/* Apply fn to every live choice of the request handle names. */
static void engine_each_choice(struct engine *e, uint32_t handle,
			       void (*fn)(struct engine *, uint32_t))
{
	uint32_t ring[REQUEST_MAX_CHOICES], n = 0;
	struct live_request *lr = request_pool_get(&e->pool, handle);

	if (!lr)
		return;
	/* the ring first: fn may end a choice and so change it */
	for (uint32_t h = handle; n < REQUEST_MAX_CHOICES; ) {
		ring[n++] = h;
		h = request_pool_get(&e->pool, h)->next_choice;
		if (h == handle)
			break;
	}
	for (uint32_t i = 0; i < n; i++)
		fn(e, ring[i]);
}

static void engine_cancel_one(struct engine *e, uint32_t handle)
{
	if (request_pool_get(&e->pool, handle))
		engine_finish(e, handle, FINISH_CANCELLED, "the client went away");
}

void engine_cancel(struct engine *e, uint32_t handle)
{
	engine_each_choice(e, handle, engine_cancel_one);
}

int engine_copy_generated(struct engine *e, struct live_request *lr)
{
	lr->generated = malloc((size_t)lr->req.max_tokens * sizeof(int32_t));
	if (!lr->generated)
		return -ENOMEM;
	memcpy(lr->generated, slot_table_tokens(&e->slots, lr->slot) + lr->req.n_prompt,
	       lr->n_generated * sizeof(int32_t));
	return 0;
}

static void engine_pause_one(struct engine *e, uint32_t handle)
{
	struct live_request *lr = request_pool_get(&e->pool, handle);

	if (!lr)
		return;
	if (lr->place == LIVE_ACTIVE) {
		/* in-process its tokens are only in the slot it gives up */
		if (!lr->generated && engine_copy_generated(e, lr))
			return;		/* no memory: it keeps its slot */
		engine_unplace(e, handle, lr, clock_now_ns());
		e->n_paused++;
	} else if (lr->place == LIVE_RESUMING) {
		engine_unresume(e, handle);
	} else {
		return;		/* waiting: it has produced nothing to hold up */
	}
	lr->place = LIVE_PAUSED;
}

static void engine_resume_one(struct engine *e, uint32_t handle)
{
	struct live_request *lr = request_pool_get(&e->pool, handle);

	if (!lr || lr->place != LIVE_PAUSED)
		return;
	lr->place = LIVE_RESUMING;
	e->resume[e->n_resume++] = handle;	/* room: one per live request */
}

void engine_pause(struct engine *e, uint32_t handle)
{
	engine_each_choice(e, handle, engine_pause_one);
}

void engine_resume(struct engine *e, uint32_t handle)
{
	engine_each_choice(e, handle, engine_resume_one);
}
