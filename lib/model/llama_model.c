/*
 * llama_model.c - the llama2.c forward pass behind the stateful model ABI
 * (model.h): a KV cache per slot (version 2) or the engine's paged pool
 * (version 4), steps over many rows at once; see llama_model.h for the
 * create args.  The forward pass is in llama_forward.c, the paged mode's
 * own parts in llama_paged.c, the run state they share in llama_run.h.
 *
 * NOTES ON THE DESIGN
 *
 * The split follows llama2.c: config and weights (llama_checkpoint.h:
 * typed tensors in the read-only mapping, filled by the reader of the
 * file's layout), run state (the KV cache and the scratch buffers, made
 * in bind()), and the forward pass, which multiplies by a tensor through
 * its type's kernels (tensor.h, looked up once per matmul call) and
 * never asks which layout the file had.
 *
 * A step flattens its rows into a list of (slot, position, token) and
 * runs it in chunks of at most LLAMA_CHUNK tokens, whatever rows they come
 * from.  Per chunk and layer every matmul takes all the chunk's tokens at
 * once, so each weight is read once per chunk; K and V of all the chunk's
 * tokens are written into the cache before any of them attends, so a
 * token sees the earlier tokens of its own row in the same chunk.  The
 * chunking is invisible in the results because everything a token
 * computes depends only on itself and its slot's cache: the kernels are
 * batch invariant (llama_kernels.h), and norms, RoPE (cos and sin made per chunk from
 * bind()), attention and the FFN's gate run per token through the same
 * code.
 *
 * Attention runs head by head over the chunk: for each token, its scores
 * against all its cached keys in one kernel call (attn_scores), softmax
 * (a kernel too: expf's calls were a tenth of a long prefill), then its
 * values in one call (attn_mix), with all the tokens' scores
 * before any values, so that over a long prefix one head's keys, then its
 * values, stay in cache across the chunk.  Per position a call each to
 * dot() and axpy() made a 1000-token prefill of the stories110M shape
 * spend a third of its 10 s in tens of millions of tiny calls; now about
 * 6.5 s (2-core Zen 1 EPYC).
 *
 * The KV cache is one anonymous MAP_NORESERVE mapping made in bind(): per
 * slot a page-aligned region of [layer][K or V][position][kv_dim] floats.
 * Pages are touched only as positions are written, and release() gives a
 * slot's pages back with madvise(MADV_DONTNEED).  step() allocates
 * nothing: it runs in the worker's sandbox.
 *
 * The model tracks how many tokens of each slot it consumed, so that a
 * caller claiming more cached tokens than there are fails the step
 * (-EINVAL) instead of reading a stale cache.
 *
 * Paged mode (bind_paged(), step_paged(); llama_paged.c).  K and V live
 * in the engine's pool, in blocks of block_tokens positions laid out
 * [layer][K or V][offset][kv_dim]: one layer's keys of a block are
 * consecutive at stride kv_dim, as a slot's are in the contiguous cache,
 * so the same kernels run over a block's span of positions.  A token at
 * position pos attends over [0, pos] by walking its row's table span by
 * span: the spans' scores fill the one score array (each score is its own
 * dot product), softmax runs over all of it, and the values are summed
 * span after span by attn_mix_acc(), whose per-element chains go on
 * across a span's end exactly as attn_mix()'s do across a slot.  So a
 * row's logits are the contiguous mode's bit for bit, for any block size
 * and table (test_llama_paged.c), and the contiguous path itself did not
 * change (make run's results are the same bytes).  The chunk rule is the
 * same: every K/V of a chunk is written before any of its tokens attends.
 * The model keeps nothing per row: it trusts n_cached (the engine vouches
 * for those positions) and checks only what could take it outside the
 * pool, every row's every block id and a table long enough for what the
 * step writes, for all rows before it writes anything.
 *
 * attention=split (opt-in; llama_split.c) replaces the one softmax by
 * chunks of LLAMA_SPLIT_POS keys merged by log-sum-exp, in either mode,
 * with cascade over blocks that rows share; the default stays exact.
 */
#include "model/llama_model.h"
#include "model/llama_run.h"
#include "kernels/q4g.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ------------------------------------------------------------ create */

/* The create args' options after the path; the attention ones into m. */
static int llama_parse_options(const char *opts, enum llama_kernel_kind *kind,
			       bool *kind_auto, struct llama_model *m,
			       char *err, size_t err_len)
{
	bool cascade_set = false;

	*kind_auto = true;
	m->split = false;
	m->cascade = true;	/* what attention=split does unless told */
	m->quant_q4 = false;
	while (opts && *opts) {
		const char *end = strchr(opts, ',');
		size_t len = end ? (size_t)(end - opts) : strlen(opts);

		if (len == 11 && memcmp(opts, "kernel=auto", 11) == 0) {
			*kind_auto = true;
		} else if (len == 15 && memcmp(opts, "kernel=portable", 15) == 0) {
			*kind_auto = false;
			*kind = LLAMA_KERNEL_PORTABLE;
		} else if (len == 11 && memcmp(opts, "kernel=avx2", 11) == 0) {
			*kind_auto = false;
			*kind = LLAMA_KERNEL_AVX2;
		} else if (len == 15 && memcmp(opts, "attention=exact", 15) == 0) {
			m->split = false;
		} else if (len == 15 && memcmp(opts, "attention=split", 15) == 0) {
			m->split = true;
		} else if (len == 10 && memcmp(opts, "cascade=on", 10) == 0) {
			m->cascade = true;
			cascade_set = true;
		} else if (len == 11 && memcmp(opts, "cascade=off", 11) == 0) {
			m->cascade = false;
			cascade_set = true;
		} else if (len == 8 && memcmp(opts, "quant=q4", 8) == 0) {
			m->quant_q4 = true;
		} else if (len == 10 && memcmp(opts, "quant=none", 10) == 0) {
			m->quant_q4 = false;
		} else if (len >= 6 && memcmp(opts, "quant=", 6) == 0) {
			snprintf(err, err_len,
				 "llama: unknown quant=%.*s (expected quant=q4 or quant=none)",
				 (int)(len - 6), opts + 6);
			return -EINVAL;
		} else {
			snprintf(err, err_len,
				 "llama: unknown option '%.*s' (expected kernel=auto|portable|avx2, attention=exact|split, cascade=on|off or quant=q4|none)",
				 (int)len, opts);
			return -EINVAL;
		}
		opts = end ? end + 1 : NULL;
	}
	/* an option that would change nothing is a mistake worth naming */
	if (cascade_set && !m->split) {
		snprintf(err, err_len,
			 "llama: cascade=on|off applies to attention=split only");
		return -EINVAL;
	}
	return 0;
}

static void *llama_create(const char *args, char *err, size_t err_len)
{
	enum llama_kernel_kind kind = LLAMA_KERNEL_PORTABLE;
	const char *comma = args ? strchr(args, ',') : NULL;
	size_t path_len = comma ? (size_t)(comma - args) :
				  (args ? strlen(args) : 0);
	struct llama_model *m;
	bool kind_auto;
	char *path;

	if (path_len == 0) {
		snprintf(err, err_len,
			 "llama: no checkpoint (expected llama:PATH[,kernel=auto|portable|avx2][,attention=exact|split][,cascade=on|off][,quant=q4|none])");
		return NULL;
	}
	m = calloc(1, sizeof(*m));
	path = strndup(args, path_len);
	if (!m || !path) {
		snprintf(err, err_len, "llama: out of memory");
		goto out_free;
	}
	if (llama_parse_options(comma ? comma + 1 : NULL, &kind, &kind_auto,
				m, err, err_len))
		goto out_free;
	if (kind_auto)
		kind = llama_kernels_have_avx2() ? LLAMA_KERNEL_AVX2 :
						   LLAMA_KERNEL_PORTABLE;
	m->k = llama_kernels_get(kind);
	for (int t = 0; t < DTYPE_COUNT; t++)
		m->ops[t] = tensor_ops_get((enum dtype)t, kind);
	if (!m->k) {
		snprintf(err, err_len,
			 "llama: kernel=avx2 but this CPU lacks AVX2+FMA (use kernel=portable or auto)");
		goto out_free;
	}
	if (llama_checkpoint_open(&m->ck, path, err, err_len))
		goto out_free;
	m->q_dim = m->ck.cfg.dim;
	if (m->quant_q4 &&
	    llama_quantize_q4(&m->ck, Q4G_GROUP, &m->quant, err, err_len))
		goto out_close;
	free(path);
	return m;

out_close:
	llama_checkpoint_close(&m->ck);

out_free:
	free(path);
	free(m);
	return NULL;
}

void llama_unbind(struct llama_model *m)
{
	if (m->kv)
		munmap(m->kv, m->kv_bytes);
	m->kv = NULL;
	free(m->consumed);
	free(m->seen);
	free(m->rope);
	free(m->rope_freq);
	free(m->ct);
	free(m->x);
	free(m->xb);
	free(m->xb2);
	free(m->q);
	free(m->kb);
	free(m->vb);
	free(m->hb);
	free(m->hb2);
	free(m->split_att);
	free(m->split_acc);
	free(m->split_max);
	free(m->split_sum);
	m->split_att = m->split_acc = m->split_max = m->split_sum = NULL;
	if (m->att)
		munmap(m->att, m->att_bytes);
	m->consumed = NULL;
	m->seen = NULL;
	m->rope = NULL;
	m->rope_freq = NULL;
	m->ct = NULL;
	m->x = m->xb = m->xb2 = m->q = m->kb = m->vb = NULL;
	m->hb = m->hb2 = m->att = NULL;
	/* the pool is the engine's: forget it, never unmap it */
	m->pool = NULL;
	m->paged = false;
	m->bound = false;
}

static void llama_destroy(void *model)
{
	struct llama_model *m = model;

	if (!m)
		return;
	llama_unbind(m);
	llama_checkpoint_close(&m->ck);
	llama_quant_free(&m->quant);
	free(m->tp_mem);
	free(m);
}

static uint32_t llama_vocab(void *model)
{
	return ((struct llama_model *)model)->ck.cfg.vocab;
}

static uint32_t llama_max_context(void *model)
{
	return ((struct llama_model *)model)->ck.cfg.seq_len;
}

/* -------------------------------------------------------------- bind */

float *llama_alloc_floats(size_t n)
{
	void *p = NULL;

	if (posix_memalign(&p, LLAMA_ALIGN, (n ? n : 1) * sizeof(float)))
		return NULL;
	memset(p, 0, (n ? n : 1) * sizeof(float));
	return p;
}

/* The frequency of each rotated pair within a head, as llama2.c
 * computes it (base 10000, rope_dim the head size) and llama.cpp's
 * freq_base and dimension_count generalise it. */
static void llama_rope_freqs(struct llama_model *m)
{
	const struct llama_config *c = &m->ck.cfg;

	for (uint32_t j = 0; j < c->rope_dim / 2; j++)
		m->rope_freq[j] = 1.0f / powf(c->rope_theta,
					      (float)(2 * j) / (float)c->rope_dim);
}


int llama_bind_scratch(struct llama_model *m)
{
	const struct llama_config *c = &m->ck.cfg;
	size_t ch = LLAMA_CHUNK;

	m->rope = llama_alloc_floats(ch * c->head_size);
	m->rope_freq = llama_alloc_floats(c->head_size / 2 + 1);
	m->ct = calloc(ch, sizeof(*m->ct));
	m->x = llama_alloc_floats(ch * c->dim);
	m->xb = llama_alloc_floats(ch * c->dim);
	m->xb2 = llama_alloc_floats(ch * c->dim);
	m->q = llama_alloc_floats(ch * c->dim);
	m->kb = llama_alloc_floats(ch * c->kv_dim);
	m->vb = llama_alloc_floats(ch * c->kv_dim);
	m->hb = llama_alloc_floats(ch * c->hidden_dim);
	m->hb2 = llama_alloc_floats(ch * c->hidden_dim);
	m->split_att = llama_alloc_floats(LLAMA_SPLIT_POS);
	m->split_acc = llama_alloc_floats(c->head_size);
	m->split_max = llama_alloc_floats(ch * c->n_heads);
	m->split_sum = llama_alloc_floats(ch * c->n_heads);
	/* chunk x max_context scores: address space, touched only as far
	 * as positions go (llama_alloc_floats() would write all of it:
	 * gigabytes at a seq_len of 2^24, which the header may claim) */
	m->att_bytes = ch * m->max_context * sizeof(float);
	m->att = mmap(NULL, m->att_bytes, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m->att == MAP_FAILED)
		m->att = NULL;
	if (!m->rope || !m->rope_freq || !m->ct || !m->x ||
	    !m->xb || !m->xb2 || !m->q || !m->kb || !m->vb || !m->hb ||
	    !m->hb2 || !m->att || !m->split_att || !m->split_acc ||
	    !m->split_max || !m->split_sum)
		return -ENOMEM;
	llama_rope_freqs(m);
	return 0;
}

static int llama_bind(void *model, uint32_t n_slots, uint32_t max_context,
		      char *err, size_t err_len)
{
	struct llama_model *m = model;
	const struct llama_config *c = &m->ck.cfg;
	size_t page = (size_t)sysconf(_SC_PAGESIZE), slot_bytes, total;
	void *kv;

	llama_unbind(m);
	if (n_slots == 0 || max_context == 0 || max_context > c->seq_len) {
		snprintf(err, err_len,
			 "llama: bind(n_slots %u, max_context %u): need n_slots >= 1 and 1 <= max_context <= the checkpoint's seq_len %u",
			 n_slots, max_context, c->seq_len);
		return -EINVAL;
	}
	if (__builtin_mul_overflow((size_t)max_context * c->n_layers,
				   (size_t)c->kv_dim * 2 * sizeof(float),
				   &slot_bytes) ||
	    slot_bytes > SIZE_MAX - page ||
	    __builtin_mul_overflow((slot_bytes + page - 1) / page * page,
				   (size_t)n_slots, &total)) {
		snprintf(err, err_len,
			 "llama: KV cache of %u slots x %u positions overflows the address space",
			 n_slots, max_context);
		return -EOVERFLOW;
	}
	slot_bytes = (slot_bytes + page - 1) / page * page;
	kv = mmap(NULL, total, PROT_READ | PROT_WRITE,
		  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (kv == MAP_FAILED) {
		snprintf(err, err_len,
			 "llama: cannot reserve a KV cache of %zu bytes (%u slots x %u positions): %s",
			 total, n_slots, max_context, strerror(errno));
		return -ENOMEM;
	}
	m->kv = kv;
	m->kv_bytes = total;
	m->slot_floats = slot_bytes / sizeof(float);
	m->n_slots = n_slots;
	m->max_context = max_context;
	/* per slot: only the contiguous mode tracks what each holds */
	m->consumed = calloc(n_slots, sizeof(*m->consumed));
	m->seen = calloc(n_slots, sizeof(*m->seen));
	if (!m->consumed || !m->seen || llama_bind_scratch(m)) {
		llama_unbind(m);
		snprintf(err, err_len, "llama: out of memory for scratch buffers");
		return -ENOMEM;
	}
	m->bound = true;
	return 0;
}

static void llama_release(void *model, uint32_t slot)
{
	struct llama_model *m = model;

	if (!m->bound || m->paged || slot >= m->n_slots)
		return;
	m->consumed[slot] = 0;
	madvise(m->kv + (size_t)slot * m->slot_floats,
		m->slot_floats * sizeof(float), MADV_DONTNEED);
}


/* ------------------------------------------------------------- step */

/*
 * Check row r against the protocol of model.h and set its refusal.
 * Returns 0, or -EINVAL when the caller broke the protocol.
 */
/* want_output: 0, or up to LLAMA_MAX_OUTPUTS of the last positions
 * consumed, the last of them the prefix's end (model.h). */
bool llama_outputs_ok(const struct dynbatch_model_row *r)
{
	return r->want_output == 0 ||
	       (r->n_cached + r->n_consume == r->n_tokens &&
		r->want_output <= r->n_consume &&
		r->want_output <= LLAMA_MAX_OUTPUTS);
}

static int llama_row_check(struct llama_model *m,
			   const struct dynbatch_model_row *r,
			   uint32_t *refusal)
{
	uint64_t end = (uint64_t)r->n_cached + r->n_consume;

	*refusal = DYNBATCH_REFUSE_NONE;
	if (r->slot >= m->n_slots || m->seen[r->slot] == m->step_id)
		return -EINVAL;		/* unknown slot, or twice in a step */
	m->seen[r->slot] = m->step_id;
	if (r->n_tokens == 0) {
		*refusal = DYNBATCH_REFUSE_EMPTY_PROMPT;
		return 0;
	}
	if (r->n_tokens > m->max_context) {
		*refusal = DYNBATCH_REFUSE_CONTEXT;
		return 0;
	}
	if (!r->tokens || r->n_consume == 0 || end > r->n_tokens ||
	    r->n_cached > m->consumed[r->slot] || !llama_outputs_ok(r))
		return -EINVAL;
	for (uint32_t i = r->n_cached; i < end; i++) {
		if (r->tokens[i] < 0 ||
		    (uint32_t)r->tokens[i] >= m->ck.cfg.vocab) {
			*refusal = DYNBATCH_REFUSE_TOKEN;
			return 0;
		}
	}
	return 0;
}

void llama_queue_row(struct llama_model *m, const struct dynbatch_model_row *r,
		     const uint32_t *blocks, uint32_t refusal, int32_t *out_row)
{
	size_t vocab = m->ck.cfg.vocab;
	uint32_t end = r->n_cached + r->n_consume;

	if (refusal != DYNBATCH_REFUSE_NONE) {
		memset(m->logits + (size_t)*out_row * vocab, 0,
		       (size_t)r->want_output * vocab * sizeof(float));
		*out_row += (int32_t)r->want_output;
		return;
	}
	for (uint32_t p = r->n_cached; p < end; p++) {
		struct llama_chunk_token *ct = &m->ct[m->n_ct++];

		ct->slot = r->slot;
		ct->blocks = blocks;
		ct->pos = p;
		ct->token = r->tokens[p];
		/* the last want_output positions give output rows, in order */
		ct->out_row = p >= end - r->want_output ?
			      *out_row + (int32_t)(p - (end - r->want_output)) : -1;
		if (m->n_ct == LLAMA_CHUNK)
			llama_chunk_run(m);
	}
	*out_row += (int32_t)r->want_output;
}

static int llama_step(void *model, uint32_t n_rows,
		      const struct dynbatch_model_row *rows, float *logits,
		      uint32_t *refusals)
{
	struct llama_model *m = model;
	int32_t out_row = 0;

	/* bound paged: the engine never mixes the two ways (model.h) */
	if (!m->bound || m->paged || (n_rows && (!rows || !refusals)))
		return -EINVAL;
	m->step_id++;
	for (uint32_t i = 0; i < n_rows; i++)
		if (llama_row_check(m, &rows[i], &refusals[i]))
			return -EINVAL;
	m->logits = logits;
	m->n_ct = 0;
	m->tp_failed = 0;
	for (uint32_t i = 0; i < n_rows; i++) {
		const struct dynbatch_model_row *r = &rows[i];

		m->consumed[r->slot] = refusals[i] != DYNBATCH_REFUSE_NONE ? 0 :
				       r->n_cached + r->n_consume;
		llama_queue_row(m, r, NULL, refusals[i], &out_row);
	}
	if (m->n_ct)
		llama_chunk_run(m);
	m->logits = NULL;
	/* the group's sum failed: a member died or hung (llama_tp.h) */
	return m->tp_failed;
}

/* ------------------------------------------------------------- table */

static uint32_t llama_max_outputs(void *model)
{
	(void)model;
	return LLAMA_MAX_OUTPUTS;
}

static const struct dynbatch_model_api llama_api = {
	.abi_version = DYNBATCH_MODEL_ABI_VERSION,
	.name = "llama",
	.create = llama_create,
	.vocab = llama_vocab,
	.next = NULL,
	.destroy = llama_destroy,
	.max_context = llama_max_context,
	.bind = llama_bind,
	.step = llama_step,
	.release = llama_release,
	/* version 4: the same model over the engine's paged pool */
	.kv_bytes_per_token = llama_kv_bytes_per_token,
	.bind_paged = llama_bind_paged,
	.step_paged = llama_step_paged,
	/* version 5: logits of several positions of a row (speculation) */
	.max_outputs = llama_max_outputs,
};

const struct dynbatch_model_api *llama_model_api(void)
{
	return &llama_api;
}
