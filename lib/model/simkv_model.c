/*
 * simkv_model.c - "simkv": the sim model as a stateful model, for tests of
 * the engine's stateful path (model.h ABI version 2) and its paged path
 * (version 4) at the sim's speed.
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
 * Paged (bind_paged(), step_paged()): its "KV" is, at every position of
 * the engine's blocks, the token and a check word mixed from (position,
 * token), 8 bytes (struct simkv_cell).  A step first writes positions
 * [n_cached, n_cached + n_consume) of every row, then each row that gives
 * a token reads positions [0, n) back through its block table and
 * computes from what it read, never from the prefix: a table pointing at
 * another row's blocks, a block copied wrong or a position never written
 * (the pool is zero at first: a zero check word never matches) shows as a
 * wrong token, as in the contiguous mode; the check word also catches a
 * right token at the wrong position.  Nothing is kept per row (the
 * engine vouches for n_cached); a block id outside the pool or a table
 * too short for what the step writes fails the step (-EINVAL) before
 * anything is written.
 *
 * Keys: every sim key (sim_model.h), plus context=N, the longest prefix
 * it holds (its max_context(); default 0, no limit of its own).  The
 * crash and hang tokens act when a row's last consumed token is one (in
 * paged mode: the last one read back from its blocks).
 * Logits: the sim's (sim_logits(), whose argmax is the sim's token).  Like llama, it refuses an
 * empty prompt (nothing to start from) and a token outside its vocabulary.
 */
#include "model/simkv_model.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/parse_num.h"
#include "model/sim_model.h"

/* One position of a paged simkv's blocks. */
struct simkv_cell {
	int32_t token;
	uint32_t check;		/* simkv_check(position, token) */
};

struct simkv {
	struct sim_config cfg;
	uint32_t context;	/* context=N; 0: none */
	uint32_t n_slots;	/* bind() */
	uint32_t max_context;
	int32_t *history;	/* n_slots x max_context: what each consumed;
				 * paged: max_rows x max_context, what each
				 * output row read back from its blocks */
	uint32_t *consumed;	/* per slot */
	size_t history_bytes;
	const int32_t **act_rows;	/* a step's output rows, for sim_act() */
	uint32_t *act_lengths;
	/* ---- paged mode (bind_paged()) */
	bool paged;
	struct simkv_cell *pool;	/* the engine's: never unmapped here */
	uint32_t n_blocks;
	uint32_t block_tokens;
	uint32_t max_rows;
	bool *intact;		/* (max_rows) every check word read matched */
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

	if (m->paged) {	/* the engine never mixes the two ways */
		snprintf(err, err_len, "simkv: bind() after bind_paged()");
		return -EINVAL;
	}
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

	if (m->paged || slot >= m->n_slots)
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
			 const int32_t *h, uint32_t n, bool intact, float *out)
{
	uint32_t t;

	sim_logits(h, n, m->cfg.vocab, m->cfg.seed, out);
	if (intact && !memcmp(h, r->tokens, (size_t)n * sizeof(int32_t)))
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

	if (m->paged)	/* the engine never mixes the two ways */
		return -EINVAL;
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
			     m->act_lengths[n_act], true, out);
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
	free(m->intact);
	free(m);
}

/* ---------------------------------------------------------------- paged */

/* The check word of position pos holding token: never 0, the pool's
 * bytes before anything is written. */
static uint32_t simkv_check(uint32_t pos, int32_t token)
{
	uint64_t s = ((uint64_t)pos << 32) ^ (uint32_t)token ^ 0x73696d6b76ull;

	return (uint32_t)sim_splitmix64(&s) | 1u;
}

static uint64_t simkv_kv_bytes_per_token(void *model)
{
	return sizeof(struct simkv_cell);
}

static int simkv_bind_paged(void *model, void *pool, uint32_t n_blocks,
			    uint32_t block_tokens, uint32_t max_context,
			    uint32_t max_rows, char *err, size_t err_len)
{
	struct simkv *m = model;
	size_t bytes;
	void *p;

	if (m->history || m->consumed) {
		snprintf(err, err_len, "simkv: bind_paged() after a bind");
		return -EINVAL;
	}
	if (!pool || (uintptr_t)pool % _Alignof(struct simkv_cell) ||
	    n_blocks == 0 || block_tokens == 0 || max_context == 0 ||
	    max_rows == 0) {
		snprintf(err, err_len, "simkv: bind_paged(%u blocks of %u positions, max_context %u, max_rows %u): need an aligned pool and every count >= 1",
			 n_blocks, block_tokens, max_context, max_rows);
		return -EINVAL;
	}
	if (__builtin_mul_overflow((size_t)max_rows * sizeof(int32_t),
				   (size_t)max_context, &bytes) ||
	    (uint64_t)n_blocks * block_tokens > SIZE_MAX / sizeof(struct simkv_cell)) {
		snprintf(err, err_len, "simkv: bind_paged(): sizes overflow");
		return -EOVERFLOW;
	}
	/* what the output rows read back: address space, touched as used */
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	m->act_rows = calloc(max_rows, sizeof(*m->act_rows));
	m->act_lengths = calloc(max_rows, sizeof(*m->act_lengths));
	m->intact = calloc(max_rows, sizeof(*m->intact));
	if (p == MAP_FAILED || !m->act_rows || !m->act_lengths || !m->intact) {
		snprintf(err, err_len, "simkv: cannot reserve scratch for %u rows "
			 "of %u tokens", max_rows, max_context);
		if (p != MAP_FAILED)
			munmap(p, bytes);
		free(m->act_rows);
		free(m->act_lengths);
		free(m->intact);
		m->act_rows = NULL;
		m->act_lengths = NULL;
		m->intact = NULL;
		return -ENOMEM;
	}
	m->history = p;
	m->history_bytes = bytes;
	m->pool = pool;
	m->n_blocks = n_blocks;
	m->block_tokens = block_tokens;
	m->max_context = max_context;
	m->max_rows = max_rows;
	m->paged = true;
	return 0;
}

/* The cell of position pos of the row whose table is blocks (checked). */
static struct simkv_cell *simkv_cell(const struct simkv *m,
				     const uint32_t *blocks, uint32_t pos)
{
	return m->pool + (size_t)blocks[pos / m->block_tokens] * m->block_tokens +
	       pos % m->block_tokens;
}

/*
 * Check paged row pr against model.h and set its refusal: -EINVAL for a
 * block id outside the pool (any row, any entry), a broken row, or a
 * table too short for the positions a served row writes.
 */
static int simkv_check_paged(const struct simkv *m,
			     const struct dynbatch_paged_row *pr, uint32_t *refusal)
{
	const struct dynbatch_model_row *r = &pr->row;
	uint64_t end = (uint64_t)r->n_cached + r->n_consume;

	if (pr->n_blocks && !pr->blocks)
		return -EINVAL;
	for (uint32_t b = 0; b < pr->n_blocks; b++)
		if (pr->blocks[b] >= m->n_blocks)
			return -EINVAL;
	if (end > r->n_tokens || r->want_output != (end == r->n_tokens) ||
	    (r->n_tokens && !r->tokens))
		return -EINVAL;
	*refusal = simkv_check_row(m, r);
	if (*refusal == DYNBATCH_REFUSE_NONE &&
	    (uint64_t)pr->n_blocks * m->block_tokens < end)
		return -EINVAL;
	return 0;
}

static int simkv_step_paged(void *model, uint32_t n_rows,
			    const struct dynbatch_paged_row *rows, float *logits,
			    uint32_t *refusals)
{
	struct simkv *m = model;
	uint32_t n_out = 0, n_act = 0;

	if (!m->paged || n_rows > m->max_rows || (n_rows && (!rows || !refusals)))
		return -EINVAL;
	for (uint32_t i = 0; i < n_rows; i++)
		if (simkv_check_paged(m, &rows[i], &refusals[i]))
			return -EINVAL;
	/* every row's new positions go in before any row reads */
	for (uint32_t i = 0; i < n_rows; i++) {
		const struct dynbatch_model_row *r = &rows[i].row;

		if (refusals[i])
			continue;
		for (uint32_t p = r->n_cached; p < r->n_cached + r->n_consume; p++) {
			struct simkv_cell *c = simkv_cell(m, rows[i].blocks, p);

			c->token = r->tokens[p];
			c->check = simkv_check(p, r->tokens[p]);
		}
	}
	/* each output row computes from what its blocks hold */
	for (uint32_t i = 0; i < n_rows; i++) {
		const struct dynbatch_model_row *r = &rows[i].row;
		int32_t *h = m->history + (size_t)n_act * m->max_context;
		bool intact = true;

		if (refusals[i] || !r->want_output)
			continue;
		for (uint32_t p = 0; p < r->n_tokens; p++) {
			const struct simkv_cell *c = simkv_cell(m, rows[i].blocks, p);

			h[p] = c->token;
			intact &= c->check == simkv_check(p, c->token);
		}
		m->intact[n_act] = intact;
		m->act_rows[n_act] = h;
		m->act_lengths[n_act++] = r->n_tokens;
	}
	/* the sim's cost and fault keys, on what the model read */
	sim_act(&m->cfg, n_act, m->act_rows, m->act_lengths);
	n_act = 0;
	for (uint32_t i = 0; i < n_rows; i++) {
		float *out;

		if (!rows[i].row.want_output)
			continue;
		out = logits + (size_t)n_out++ * m->cfg.vocab;
		if (refusals[i])
			continue;
		simkv_logits(m, &rows[i].row, m->act_rows[n_act],
			     m->act_lengths[n_act], m->intact[n_act], out);
		n_act++;
	}
	return 0;
}

/* The entry points of version 2, which both tables below share. */
#define SIMKV_V2_FIELDS							\
	.create = simkv_create, .vocab = simkv_vocab,			\
	.destroy = simkv_destroy, .max_context = simkv_max_context,	\
	.bind = simkv_bind, .step = simkv_step, .release = simkv_release

static const struct dynbatch_model_api simkv_api = {
	.abi_version = DYNBATCH_MODEL_ABI_VERSION,
	.name = "simkv",
	SIMKV_V2_FIELDS,
	.kv_bytes_per_token = simkv_kv_bytes_per_token,
	.bind_paged = simkv_bind_paged,
	.step_paged = simkv_step_paged,
};

/* The same model as a plugin built against ABI version 2 sees it: no
 * paged entry points, so the engine runs it on its own per-slot state
 * (the path older stateful plugins keep). */
static const struct dynbatch_model_api simkv_v2_api = {
	.abi_version = 2,
	.name = "simkv2",
	SIMKV_V2_FIELDS,
};

const struct dynbatch_model_api *simkv_model_api(void)
{
	return &simkv_api;
}

const struct dynbatch_model_api *simkv_v2_model_api(void)
{
	return &simkv_v2_api;
}
