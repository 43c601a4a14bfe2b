/*
 * simkv_model.c - "simkv": the sim model as a stateful model, for tests of
 * the engine's stateful path (model.h ABI version 2) at the sim's speed.
 *
 * It gives exactly the sim's tokens (docs/DESIGN.md 2.1), but computes
 * them from its own per-slot copy of the tokens it consumed, the way a
 * transformer computes from its KV cache, never from the prefix beyond
 * what a step tells it to consume.  So if the engine ever vouched for
 * state the model does not hold, or for state of another request (after
 * a new request in the slot, a reset, a replacement worker), the tokens
 * would differ from the reference decoder's: it checks what it holds
 * against the prefix at every token it gives, and gives a wrong one when
 * they differ.  An n_cached above what it consumed fails the step.
 *
 * Keys: every sim key (sim_model.h), plus context=N, the longest prefix
 * it holds (its max_context(); default 0, no limit of its own).  The
 * crash and hang tokens act when a row's last consumed token is one.
 * Logits: the sim's (sim_logits(), whose argmax is the sim's token).  Like llama, it refuses an
 * empty prompt (nothing to start from) and a token outside its vocabulary.
 */
#include "model/simkv_model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/parse_num.h"
#include "model/sim_model.h"

struct simkv {
	struct sim_config cfg;
	uint32_t context;	/* context=N; 0: none */
	uint32_t n_slots;	/* bind() */
	uint32_t max_context;
	int32_t *history;	/* n_slots x max_context: what each consumed */
	uint32_t *consumed;	/* per slot */
	size_t history_bytes;
	const int32_t **act_rows;	/* a step's output rows, for sim_act() */
	uint32_t *act_lengths;
};

static void *simkv_create(const char *args, char *err, size_t err_len)
{
	struct simkv *m = calloc(1, sizeof(*m));
	char *rest = strdup(args ? args : ""), *out = rest;
	const char *p = args ? args : "";

	if (!m || !rest) {
		snprintf(err, err_len, "simkv: out of memory");
		goto fail;
	}
	/* take context=N out, hand the rest to the sim's parser */
	while (*p) {
		size_t len = strcspn(p, ",");

		if (len > 8 && !strncmp(p, "context=", 8)) {
			char num[16];
			uint32_t v;

			snprintf(num, sizeof(num), "%.*s", (int)(len - 8), p + 8);
			if (len - 8 >= sizeof(num) || parse_u32(num, 1, 1u << 24, &v)) {
				snprintf(err, err_len, "simkv: bad context '%.*s' "
					 "(expected 1..16777216)", (int)(len - 8), p + 8);
				goto fail;
			}
			m->context = v;
		} else {
			if (out != rest)
				*out++ = ',';
			memmove(out, p, len);
			out += len;
		}
		p += len + (p[len] == ',');
	}
	*out = '\0';
	if (sim_config_parse(rest, &m->cfg, err, err_len))
		goto fail;
	free(rest);
	return m;
fail:
	free(rest);
	free(m);
	return NULL;
}

static uint32_t simkv_vocab(void *model)
{
	return ((struct simkv *)model)->cfg.vocab;
}

static uint32_t simkv_max_context(void *model)
{
	return ((struct simkv *)model)->context;
}

static int simkv_bind(void *model, uint32_t n_slots, uint32_t max_context,
		      char *err, size_t err_len)
{
	struct simkv *m = model;
	void *p;

	m->n_slots = n_slots;
	m->max_context = max_context;
	m->history_bytes = (size_t)n_slots * max_context * sizeof(int32_t);
	/* address space only: a slot's pages are touched as it consumes */
	p = mmap(NULL, m->history_bytes, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	m->consumed = calloc(n_slots, sizeof(*m->consumed));
	m->act_rows = calloc(n_slots, sizeof(*m->act_rows));
	m->act_lengths = calloc(n_slots, sizeof(*m->act_lengths));
	if (p == MAP_FAILED || !m->consumed || !m->act_rows || !m->act_lengths) {
		snprintf(err, err_len, "simkv: cannot reserve state for %u slots "
			 "of %u tokens", n_slots, max_context);
		if (p != MAP_FAILED)
			munmap(p, m->history_bytes);
		return -ENOMEM;
	}
	m->history = p;
	return 0;
}

static void simkv_release(void *model, uint32_t slot)
{
	struct simkv *m = model;
	long page = sysconf(_SC_PAGESIZE);
	uintptr_t begin, end;

	if (slot >= m->n_slots)
		return;
	m->consumed[slot] = 0;
	/* whole pages inside the slot's region go back to the kernel */
	begin = (uintptr_t)(m->history + (size_t)slot * m->max_context);
	end = begin + (size_t)m->max_context * sizeof(int32_t);
	begin = (begin + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
	end &= ~((uintptr_t)page - 1);
	if (end > begin)
		madvise((void *)begin, end - begin, MADV_DONTNEED);
}

static uint32_t simkv_check_row(const struct simkv *m,
				const struct dynbatch_model_row *r)
{
	if (r->n_tokens == 0)
		return DYNBATCH_REFUSE_EMPTY_PROMPT;
	if ((m->context && r->n_tokens > m->context) || r->n_tokens > m->max_context)
		return DYNBATCH_REFUSE_CONTEXT;
	for (uint32_t i = r->n_cached; i < r->n_cached + r->n_consume; i++)
		if (r->tokens[i] < 0 || (uint32_t)r->tokens[i] >= m->cfg.vocab)
			return DYNBATCH_REFUSE_TOKEN;
	return DYNBATCH_REFUSE_NONE;
}

/*
 * The logits after what the model holds, h[0..n): the sim's.  But if
 * what it holds is not the row's prefix (the engine vouched for state of
 * another request, or of tokens since rewritten), logits whose argmax is
 * a token the sim would not give (the next one after it): a test
 * instrument must make the engine's mistake visible in the output, where
 * refdecode sees it (failing the step would not: the request would be
 * re-run alone on a fresh worker, and pass).
 */
static void simkv_logits(const struct simkv *m, const struct dynbatch_model_row *r,
			 const int32_t *h, uint32_t n, float *out)
{
	uint32_t t;

	sim_logits(h, n, m->cfg.vocab, m->cfg.seed, out);
	if (!memcmp(h, r->tokens, (size_t)n * sizeof(int32_t)))
		return;
	t = (uint32_t)sim_next(h, n, m->cfg.vocab, m->cfg.seed);
	/* below every sim logit (-32 at the least), then the wrong top */
	out[t] = -64.0f;
	out[(t + 1) % m->cfg.vocab] = 1.0f;
}

static int simkv_step(void *model, uint32_t n_rows,
		      const struct dynbatch_model_row *rows, float *logits,
		      uint32_t *refusals)
{
	struct simkv *m = model;
	uint32_t n_out = 0, n_act = 0;

	for (uint32_t i = 0; i < n_rows; i++) {
		const struct dynbatch_model_row *r = &rows[i];
		int32_t *h;

		if (r->slot >= m->n_slots || r->n_cached > m->consumed[r->slot] ||
		    r->n_cached + r->n_consume > r->n_tokens ||
		    r->want_output != (r->n_cached + r->n_consume == r->n_tokens))
			return -EINVAL;	/* the engine broke the ABI */
		refusals[i] = simkv_check_row(m, r);
		if (refusals[i])
			continue;
		h = m->history + (size_t)r->slot * m->max_context;
		memcpy(h + r->n_cached, r->tokens + r->n_cached,
		       r->n_consume * sizeof(int32_t));
		m->consumed[r->slot] = r->n_cached + r->n_consume;
		if (r->want_output) {
			m->act_rows[n_act] = h;
			m->act_lengths[n_act++] = m->consumed[r->slot];
		}
	}
	/* the sim's cost and fault keys, on what the model holds */
	sim_act(&m->cfg, n_act, m->act_rows, m->act_lengths);
	n_act = 0;
	for (uint32_t i = 0; i < n_rows; i++) {
		float *out;

		if (!rows[i].want_output)
			continue;
		out = logits + (size_t)n_out++ * m->cfg.vocab;
		if (refusals[i])
			continue;
		simkv_logits(m, &rows[i], m->act_rows[n_act],
			     m->act_lengths[n_act], out);
		n_act++;
	}
	return 0;
}

static void simkv_destroy(void *model)
{
	struct simkv *m = model;

	if (!m)
		return;
	if (m->history)
		munmap(m->history, m->history_bytes);
	free(m->consumed);
	free(m->act_rows);
	free(m->act_lengths);
	free(m);
}

static const struct dynbatch_model_api simkv_api = {
	.abi_version = DYNBATCH_MODEL_ABI_VERSION,
	.name = "simkv",
	.create = simkv_create,
	.vocab = simkv_vocab,
	.destroy = simkv_destroy,
	.max_context = simkv_max_context,
	.bind = simkv_bind,
	.step = simkv_step,
	.release = simkv_release,
};

const struct dynbatch_model_api *simkv_model_api(void)
{
	return &simkv_api;
}
