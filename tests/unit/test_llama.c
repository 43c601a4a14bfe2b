/*
 * test_llama.c - unit tests of the built-in llama model
 * (lib/model/llama_model.c, llama_checkpoint.c and its readers
 * llama_read_*.c, lib/kernels/llama_kernels.c and the weight types'
 * kernels through tensor.h's table).
 *
 * The checkpoints are written here, from weights drawn here, by a writer
 * of our own (not tools/make_checkpoint), and the logits are checked
 * against a naive forward pass written here too: plain loops, double
 * accumulation, a full recompute of the prefix for every position, no
 * cache.  The other tests drive the model through its ABI table the way
 * the engine does and check what model.h promises: bit-identical logits
 * whatever the batch, the neighbours, the row's place, the prefill
 * chunking and a rebuild of the state; refusals; memory given back; and
 * a clear error, never a crash, for a bad checkpoint; and steps inside the
 * worker's seccomp sandbox.  quant=q4 (llama_quant.c): the quantized
 * tensors are the Q4G kernels' quantization of the file's matrices, in
 * memory of their own, the embedding left in the file; its logits as
 * batch invariant; refused for a Q8_0 file.  (test_q4.c checks the Q4G
 * kernels themselves.)
 *
 * Seeds: SEED= replays a run (test_rng.h).
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "model/llama_checkpoint.h"
#include "kernels/llama_kernels.h"
#include "model/llama_model.h"
#include "model/llama_quant.h"
#include "kernels/q4g.h"
#include "kernels/tensor.h"
#include "worker/sandbox.h"
#include "tests/unit/test_rng.h"

static char tmp_dir[] = "/tmp/test_llama.XXXXXX";

/* ------------------------------------------------ weights and writer */

struct tmodel {
	int dim, hidden, layers, heads, kv_heads, vocab, seq_len;
	bool separate;
	float *emb, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3,
		*rms_final, *wcls;
};

static float *rand_floats(struct rng *r, size_t n, double mean, double std)
{
	float *p = malloc(n * sizeof(float));

	assert_non_null(p);
	for (size_t i = 0; i < n; i++) {
		double u = (double)(rng_next(r) >> 11) / 9007199254740992.0;

		p[i] = (float)(mean + (2 * u - 1) * std * sqrt(3.0));
	}
	return p;
}

static void tmodel_init(struct tmodel *t, int dim, int hidden, int layers,
			int heads, int kv_heads, int vocab, int seq_len,
			bool separate, struct rng *r)
{
	size_t L = layers, d = dim, h = hidden;
	size_t kvd = (size_t)kv_heads * (dim / heads);

	*t = (struct tmodel){ .dim = dim, .hidden = hidden, .layers = layers,
			      .heads = heads, .kv_heads = kv_heads,
			      .vocab = vocab, .seq_len = seq_len,
			      .separate = separate };
	t->emb = rand_floats(r, vocab * d, 0, 2.5 / sqrt(d));
	t->rms_att = rand_floats(r, L * d, 1, 0.05);
	t->wq = rand_floats(r, L * d * d, 0, 3 / sqrt(d));
	t->wk = rand_floats(r, L * kvd * d, 0, 3 / sqrt(d));
	t->wv = rand_floats(r, L * kvd * d, 0, 1 / sqrt(d));
	t->wo = rand_floats(r, L * d * d, 0, 1 / sqrt(d));
	t->rms_ffn = rand_floats(r, L * d, 1, 0.05);
	t->w1 = rand_floats(r, L * h * d, 0, 1 / sqrt(d));
	t->w2 = rand_floats(r, L * d * h, 0, 2.5 / sqrt(h));
	t->w3 = rand_floats(r, L * h * d, 0, 1 / sqrt(d));
	t->rms_final = rand_floats(r, d, 1, 0.05);
	t->wcls = separate ? rand_floats(r, vocab * d, 0, 2.5 / sqrt(d)) :
			     t->emb;
}

static void tmodel_free(struct tmodel *t)
{
	if (t->wcls != t->emb)
		free(t->wcls);
	free(t->emb); free(t->rms_att); free(t->wq); free(t->wk);
	free(t->wv); free(t->wo); free(t->rms_ffn); free(t->w1);
	free(t->w2); free(t->w3); free(t->rms_final);
}

static void put(FILE *f, const void *p, size_t n)
{
	assert_int_equal(fwrite(p, 1, n, f), n);
}

/* Write t to path: format 0 legacy (with_rope: the freq_cis tables), 1 ak42. */
static void tmodel_write(const struct tmodel *t, const char *path, int format,
			 bool with_rope)
{
	size_t L = t->layers, d = t->dim, h = t->hidden;
	size_t kvd = (size_t)t->kv_heads * (t->dim / t->heads), F = sizeof(float);
	int32_t hdr[7] = { t->dim, t->hidden, t->layers, t->heads,
			   t->kv_heads, t->vocab, t->seq_len };
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	if (format == 1) {
		uint32_t magic = LLAMA_AK42_MAGIC;
		int32_t version = 1;
		unsigned char pad[256 - 36] = { t->separate ? 0 : 1 };

		put(f, &magic, 4);
		put(f, &version, 4);
		put(f, hdr, sizeof(hdr));
		put(f, pad, sizeof(pad));
		put(f, t->rms_att, L * d * F);
		put(f, t->rms_ffn, L * d * F);
		put(f, t->rms_final, d * F);
		put(f, t->emb, t->vocab * d * F);
	} else {
		if (t->separate)
			hdr[5] = -hdr[5];
		put(f, hdr, sizeof(hdr));
		put(f, t->emb, t->vocab * d * F);
		put(f, t->rms_att, L * d * F);
	}
	put(f, t->wq, L * d * d * F);
	put(f, t->wk, L * kvd * d * F);
	put(f, t->wv, L * kvd * d * F);
	put(f, t->wo, L * d * d * F);
	if (format == 0)
		put(f, t->rms_ffn, L * d * F);
	put(f, t->w1, L * h * d * F);
	put(f, t->w2, L * d * h * F);
	put(f, t->w3, L * h * d * F);
	if (format == 0) {
		put(f, t->rms_final, d * F);
		for (size_t i = 0; with_rope && i < (size_t)t->seq_len * (d / t->heads); i++) {
			float z = 0.5f;

			put(f, &z, F);
		}
	}
	if (t->separate)
		put(f, t->wcls, t->vocab * d * F);
	assert_int_equal(fclose(f), 0);
}

/* -------------------------------------------- the naive reference */

static void ref_rmsnorm(double *o, const double *x, const float *w, int n)
{
	double ss = 0;

	for (int i = 0; i < n; i++)
		ss += x[i] * x[i];
	ss = 1.0 / sqrt(ss / n + 1e-5);
	for (int i = 0; i < n; i++)
		o[i] = w[i] * x[i] * ss;
}

/* out[r] = sum_i W[r][i] x[i] for r < rows */
static void ref_matvec(double *out, const float *W, const double *x, int rows,
		       int cols)
{
	for (int r = 0; r < rows; r++) {
		double s = 0;

		for (int i = 0; i < cols; i++)
			s += (double)W[(size_t)r * cols + i] * x[i];
		out[r] = s;
	}
}

static void ref_rope(double *v, int n, int hs, int pos)
{
	for (int i = 0; i < n; i += 2) {
		double freq = pow(10000.0, -(double)(i % hs) / hs);
		double a = pos * freq, v0 = v[i], v1 = v[i + 1];

		v[i] = v0 * cos(a) - v1 * sin(a);
		v[i + 1] = v0 * sin(a) + v1 * cos(a);
	}
}

/* Logits after tokens[0..n), recomputing everything. */
static void ref_logits(const struct tmodel *t, const int32_t *tokens, int n,
		       double *logits)
{
	int d = t->dim, hs = d / t->heads, kvd = t->kv_heads * hs, H = t->hidden;
	double *x = calloc((size_t)n * d, sizeof(double));
	double *K = calloc((size_t)n * kvd, sizeof(double));
	double *V = calloc((size_t)n * kvd, sizeof(double));
	double *q = calloc((size_t)n * d, sizeof(double));
	double *xb = calloc(d, sizeof(double));
	double *att = calloc(n, sizeof(double));
	double *o = calloc(d, sizeof(double)), *o2 = calloc(d, sizeof(double));
	double *h1 = calloc(H, sizeof(double)), *h3 = calloc(H, sizeof(double));

	for (int p = 0; p < n; p++)
		for (int i = 0; i < d; i++)
			x[(size_t)p * d + i] = t->emb[(size_t)tokens[p] * d + i];
	for (int l = 0; l < t->layers; l++) {
		for (int p = 0; p < n; p++) {
			ref_rmsnorm(xb, x + (size_t)p * d, t->rms_att + l * d, d);
			ref_matvec(q + (size_t)p * d, t->wq + (size_t)l * d * d, xb, d, d);
			ref_matvec(K + (size_t)p * kvd, t->wk + (size_t)l * kvd * d, xb, kvd, d);
			ref_matvec(V + (size_t)p * kvd, t->wv + (size_t)l * kvd * d, xb, kvd, d);
			ref_rope(q + (size_t)p * d, d, hs, p);
			ref_rope(K + (size_t)p * kvd, kvd, hs, p);
		}
		for (int p = 0; p < n; p++) {
			for (int hd = 0; hd < t->heads; hd++) {
				int kh = hd / (t->heads / t->kv_heads);
				double mx = -INFINITY, sum = 0;

				for (int s = 0; s <= p; s++) {
					double dot = 0;

					for (int i = 0; i < hs; i++)
						dot += q[(size_t)p * d + hd * hs + i] *
						       K[(size_t)s * kvd + kh * hs + i];
					att[s] = dot / sqrt(hs);
					mx = fmax(mx, att[s]);
				}
				for (int s = 0; s <= p; s++)
					sum += att[s] = exp(att[s] - mx);
				for (int i = 0; i < hs; i++) {
					double acc = 0;

					for (int s = 0; s <= p; s++)
						acc += att[s] / sum * V[(size_t)s * kvd + kh * hs + i];
					o[hd * hs + i] = acc;
				}
			}
			ref_matvec(o2, t->wo + (size_t)l * d * d, o, d, d);
			for (int i = 0; i < d; i++)
				x[(size_t)p * d + i] += o2[i];
			ref_rmsnorm(xb, x + (size_t)p * d, t->rms_ffn + l * d, d);
			ref_matvec(h1, t->w1 + (size_t)l * H * d, xb, H, d);
			ref_matvec(h3, t->w3 + (size_t)l * H * d, xb, H, d);
			for (int i = 0; i < H; i++)
				h1[i] = h1[i] / (1 + exp(-h1[i])) * h3[i];
			ref_matvec(o2, t->w2 + (size_t)l * d * H, h1, d, H);
			for (int i = 0; i < d; i++)
				x[(size_t)p * d + i] += o2[i];
		}
	}
	ref_rmsnorm(xb, x + (size_t)(n - 1) * d, t->rms_final, d);
	ref_matvec(logits, t->wcls, xb, t->vocab, d);
	free(x); free(K); free(V); free(q); free(xb); free(att); free(o);
	free(o2); free(h1); free(h3);
}

/* ------------------------------------------------ driving the model */

static const struct dynbatch_model_api *api;

static void *must_create(const char *args)
{
	char err[512] = "";
	void *m = api->create(args, err, sizeof(err));

	if (!m)
		fail_msg("create('%s'): %s", args, err);
	return m;
}

static void must_bind(void *m, uint32_t n_slots, uint32_t max_context)
{
	char err[512] = "";

	if (api->bind(m, n_slots, max_context, err, sizeof(err)))
		fail_msg("bind(%u, %u): %s", n_slots, max_context, err);
}

/* One request as the engine drives it. */
struct req {
	uint32_t slot;
	int32_t tokens[1100];
	uint32_t n_tokens, n_cached, chunk;
};

static struct dynbatch_model_row req_row(const struct req *q)
{
	uint32_t left = q->n_tokens - q->n_cached;
	uint32_t n = left < q->chunk ? left : q->chunk;

	return (struct dynbatch_model_row){
		.slot = q->slot, .tokens = q->tokens, .n_tokens = q->n_tokens,
		.n_cached = q->n_cached, .n_consume = n,
		.want_output = q->n_cached + n == q->n_tokens,
	};
}

static int32_t argmax(const float *l, uint32_t n)
{
	uint32_t best = 0;

	for (uint32_t i = 1; i < n; i++)
		if (l[i] > l[best])
			best = i;
	return (int32_t)best;
}

/*
 * Decode q alone: prefill in chunks of q->chunk, then n_out outputs;
 * logits[k * vocab ..] gets the k-th output's logits.
 */
static void run_alone(void *m, struct req *q, uint32_t n_out, float *logits)
{
	uint32_t vocab = api->vocab(m), k = 0, refusal;

	while (k < n_out) {
		struct dynbatch_model_row row = req_row(q);

		assert_int_equal(api->step(m, 1, &row, logits + (size_t)k * vocab,
					   &refusal), 0);
		assert_int_equal(refusal, DYNBATCH_REFUSE_NONE);
		q->n_cached += row.n_consume;
		if (row.want_output)
			q->tokens[q->n_tokens++] = argmax(logits + (size_t)k++ * vocab, vocab);
	}
}

struct fixture {
	struct tmodel t;
	char path[128];		/* legacy, shared or separate */
	char path_ak42[128];
	char path_norope[128];	/* legacy without the freq_cis tables */
};

static void fixture_make(struct fixture *f, struct rng *r, bool separate,
			 int seq_len)
{
	tmodel_init(&f->t, 64, 96, 2, 4, 2, 97, seq_len, separate, r);
	snprintf(f->path, sizeof(f->path), "%s/m%d.bin", tmp_dir, (int)separate);
	snprintf(f->path_ak42, sizeof(f->path_ak42), "%s/m%d.ak42", tmp_dir,
		 (int)separate);
	snprintf(f->path_norope, sizeof(f->path_norope), "%s/m%d.norope",
		 tmp_dir, (int)separate);
	tmodel_write(&f->t, f->path, 0, true);
	tmodel_write(&f->t, f->path_ak42, 1, false);
	tmodel_write(&f->t, f->path_norope, 0, false);
}

/* ------------------------------------------------------------ tests */

#define N_OUT 24	/* outputs compared per request */

/*
 * (1) + (2) one request alone, then beside 0..63 random neighbours at a
 * random slot and row place, with random prefill chunks and re-prefills:
 * every output's logits memcmp-identical.
 */
static void q8_write_fixture(struct fixture *f, char *path, size_t len,
			     uint32_t group);

/*
 * The invariance harness on test test_id's fixture, as a legacy file or
 * (q8_group > 0) as ak42 version 2 with that group size; opts follow the
 * path in the create args ("" or ",quant=q4").
 */
static void run_batch_invariance(uint64_t test_id, uint32_t q8_group,
				 const char *opts)
{
	struct rng r = rng_for(test_id);
	struct fixture f;
	uint32_t vocab;
	float *want, *got;
	char path[160];
	void *m;

	fixture_make(&f, &r, rng_below(&r, 2), 128);
	snprintf(path, sizeof(path), "%s", f.path);
	if (q8_group)
		q8_write_fixture(&f, path, sizeof(path), q8_group);
	want = malloc((size_t)N_OUT * 97 * sizeof(float));
	got = malloc((size_t)64 * 97 * sizeof(float));
	for (int trial = 0; trial < 24; trial++) {
		static struct req q, nb[64];
		uint32_t n_rows = 1 + rng_below(&r, 64), n_prompt = 1 + rng_below(&r, 40);
		uint32_t order[64], k = 0;
		char args[300];

		/* the AVX2 kernel (where there is one) and, every third, the portable */
		snprintf(args, sizeof(args), "%s%s%s", path, opts,
			 trial % 3 == 2 ? ",kernel=portable" : "");
		m = must_create(args);
		vocab = api->vocab(m);
		must_bind(m, 64, 128);
		memset(&q, 0, sizeof(q));
		for (uint32_t i = 0; i < n_prompt; i++)
			q.tokens[i] = (int32_t)rng_below(&r, vocab);
		q.n_tokens = n_prompt;
		q.chunk = 1000;
		q.slot = 0;
		api->release(m, 0);
		run_alone(m, &q, N_OUT, want);
		/* the same request in a crowd */
		for (uint32_t s = 0; s < 64; s++)
			api->release(m, s);
		for (uint32_t i = 0; i < n_rows; i++)
			order[i] = i;
		for (uint32_t i = 0; i < 64; i++)
			nb[i].slot = i;
		for (uint32_t i = 63; i > 0; i--) {	/* random distinct slots */
			uint32_t j = rng_below(&r, i + 1), tmp = nb[i].slot;

			nb[i].slot = nb[j].slot;
			nb[j].slot = tmp;
		}
		for (uint32_t i = 0; i < n_rows; i++) {
			nb[i].n_tokens = 1 + rng_below(&r, 60);
			for (uint32_t t = 0; t < nb[i].n_tokens; t++)
				nb[i].tokens[t] = (int32_t)rng_below(&r, vocab);
			nb[i].n_cached = 0;
			nb[i].chunk = 1 + rng_below(&r, 70);
		}
		/* row 0 is ours */
		nb[0].n_tokens = n_prompt;
		memcpy(nb[0].tokens, q.tokens, n_prompt * sizeof(int32_t));
		nb[0].chunk = 1 + rng_below(&r, n_prompt + 1);
		while (k < N_OUT) {
			struct dynbatch_model_row rows[64];
			uint32_t ref[64], out = 0;

			for (uint32_t i = n_rows - 1; i > 0; i--) {
				uint32_t j = rng_below(&r, i + 1), tmp = order[i];

				order[i] = order[j];
				order[j] = tmp;
			}
			if (rng_below(&r, 12) == 0) {	/* re-prefill ours */
				api->release(m, nb[0].slot);
				nb[0].n_cached = 0;
				nb[0].chunk = 1 + rng_below(&r, nb[0].n_tokens + 1);
			}
			for (uint32_t i = 0; i < n_rows; i++)
				rows[i] = req_row(&nb[order[i]]);
			assert_int_equal(api->step(m, n_rows, rows, got, ref), 0);
			for (uint32_t i = 0; i < n_rows; i++) {
				struct req *n = &nb[order[i]];

				assert_int_equal(ref[i], DYNBATCH_REFUSE_NONE);
				n->n_cached += rows[i].n_consume;
				if (!rows[i].want_output)
					continue;
				if (order[i] == 0) {
					if (memcmp(got + (size_t)out * vocab,
						   want + (size_t)k * vocab,
						   vocab * sizeof(float)))
						fail_msg("%s: trial %d: output %u differs in a batch of %u (row %u, slot %u, chunk %u)",
							 args, trial, k, n_rows, i, n->slot, n->chunk);
					n->tokens[n->n_tokens++] = q.tokens[n_prompt + k++];
				} else if (n->n_tokens < 128) {
					n->tokens[n->n_tokens++] = argmax(got + (size_t)out * vocab, vocab);
				} else {	/* full: start over */
					n->n_cached = 0;
					n->n_tokens = 1 + rng_below(&r, 60);
				}
				out++;
			}
		}
		api->destroy(m);
	}
	free(want);
	free(got);
	tmodel_free(&f.t);
}

static void test_batch_invariance(void **state)
{
	run_batch_invariance(1, 0, "");
}

/* (2) prefill in chunks 1..n and whole, and after a release: identical. */
static void test_chunking_invariance(void **state)
{
	struct rng r = rng_for(2);
	struct fixture f;
	static struct req q;
	uint32_t vocab, n_prompt;
	float *want, *got;
	void *m;

	fixture_make(&f, &r, rng_below(&r, 2), 128);
	m = must_create(f.path);
	vocab = api->vocab(m);
	must_bind(m, 2, 128);
	want = malloc((size_t)8 * vocab * sizeof(float));
	got = malloc((size_t)8 * vocab * sizeof(float));
	n_prompt = 20 + rng_below(&r, 60);
	memset(&q, 0, sizeof(q));
	for (uint32_t i = 0; i < n_prompt; i++)
		q.tokens[i] = (int32_t)rng_below(&r, vocab);
	q.n_tokens = n_prompt;
	q.chunk = n_prompt;
	run_alone(m, &q, 8, want);
	for (uint32_t chunk = 1; chunk <= n_prompt + 1; chunk++) {
		q.n_tokens = n_prompt;
		q.n_cached = 0;
		q.chunk = chunk;
		q.slot = chunk % 2;
		if (chunk % 3 == 0)
			api->release(m, q.slot);
		run_alone(m, &q, 8, got);
		if (memcmp(got, want, (size_t)8 * vocab * sizeof(float)))
			fail_msg("prefill in chunks of %u differs", chunk);
	}
	free(want);
	free(got);
	api->destroy(m);
	tmodel_free(&f.t);
}

/* max |a - b| / (1 + max |b|) over n */
static double rel_err(const float *a, const double *b, uint32_t n)
{
	double worst = 0, scale = 1;

	for (uint32_t i = 0; i < n; i++)
		scale = fmax(scale, fabs(b[i]));
	for (uint32_t i = 0; i < n; i++)
		worst = fmax(worst, fabs(a[i] - b[i]));
	return worst / scale;
}

/*
 * (3) + (4) the model (portable, avx2; legacy and ak42 files) against
 * the naive double forward at several prefix lengths; the two files give
 * identical logits (and so does a legacy file without the RoPE tables),
 * the two kernels nearly identical ones.
 */
static void test_against_reference(void **state)
{
	struct rng r = rng_for(4);
	const char *kernels[2] = { ",kernel=portable", ",kernel=avx2" };
	uint32_t lens[] = { 1, 2, 5, 17, 64, 100, 128 };

	for (int sep = 0; sep < 2; sep++) {
		struct fixture f;
		static struct req q;
		double *ref;
		float *got, *first;
		void *m;

		fixture_make(&f, &r, sep, 128);
		ref = malloc(97 * sizeof(double));
		got = malloc(97 * sizeof(float));
		first = malloc(97 * sizeof(float) * 7);
		for (uint32_t i = 0; i < 128; i++)
			q.tokens[i] = (int32_t)rng_below(&r, 97);
		for (int file = 0; file < 3; file++) {
			for (int kern = 0; kern < 2; kern++) {
				const char *paths[3] = { f.path, f.path_ak42, f.path_norope };
				char args[300];

				if (kern == 1 && !llama_kernels_have_avx2())
					continue;
				snprintf(args, sizeof(args), "%s%s", paths[file],
					 kernels[kern]);
				m = must_create(args);
				must_bind(m, 1, 128);
				for (uint32_t li = 0; li < 7; li++) {
					q.n_tokens = lens[li];
					q.n_cached = 0;
					q.chunk = 1 + rng_below(&r, 40);
					run_alone(m, &q, 1, got);
					ref_logits(&f.t, q.tokens, (int)lens[li], ref);
					if (rel_err(got, ref, 97) > 2e-4)
						fail_msg("%s: %u tokens: error %g against the reference",
							 args, lens[li], rel_err(got, ref, 97));
					if (kern == 0 && file == 0)
						memcpy(first + li * 97, got, 97 * sizeof(float));
					else if (kern == 0 && memcmp(first + li * 97, got, 97 * sizeof(float)))
						fail_msg("%s: files of one model differ", args);
				}
				api->destroy(m);
			}
		}
		free(ref);
		free(got);
		free(first);
		tmodel_free(&f.t);
	}
}

/* Write bytes[0..n) to a file in tmp_dir and return its path. */
static const char *write_bytes(const void *bytes, size_t n)
{
	static char path[160];
	FILE *f;

	snprintf(path, sizeof(path), "%s/bad.bin", tmp_dir);
	f = fopen(path, "wb");
	assert_non_null(f);
	if (n)
		put(f, bytes, n);
	assert_int_equal(fclose(f), 0);
	return path;
}

static unsigned char *read_all(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	unsigned char *p;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	p = malloc(*n + 64);
	assert_non_null(p);
	assert_int_equal(fread(p, 1, *n, f), *n);
	fclose(f);
	return p;
}

/* create(args) must fail with an error containing want. */
static void expect_refused(const char *args, const char *want)
{
	char err[512] = "";
	void *m = api->create(args, err, sizeof(err));

	if (m) {
		api->destroy(m);
		fail_msg("create('%s') accepted; wanted an error with '%s'", args, want);
	}
	if (!strstr(err, want))
		fail_msg("create('%s'): error '%s' does not say '%s'", args, err, want);
}

static void set_i32(unsigned char *p, size_t off, int32_t v)
{
	memcpy(p + off, &v, 4);
}

/* (5) bad checkpoints and options: NULL with an error naming the problem. */
static void test_bad_checkpoints(void **state)
{
	struct rng r = rng_for(5);
	struct fixture f;
	unsigned char *leg, *ak, *b;
	size_t n_leg, n_ak;
	char args[300];

	fixture_make(&f, &r, true, 128);
	leg = read_all(f.path, &n_leg);
	ak = read_all(f.path_ak42, &n_ak);
	b = malloc(n_leg + 64);
	expect_refused(write_bytes(leg, n_leg - 1), "truncated");
	expect_refused(write_bytes(leg, 10), "shorter than the 28-byte");
	expect_refused(write_bytes(leg, 0), "empty");
	memcpy(b, leg, n_leg);
	memset(b + n_leg, 0, 4);
	expect_refused(write_bytes(b, n_leg + 4), "trailing bytes");
	expect_refused(write_bytes(ak, n_ak - 4), "truncated");
	expect_refused(write_bytes(ak, 100), "shorter than the 256-byte ak42");
	expect_refused("/nonexistent/llama.bin", "cannot open");
	expect_refused("", "no checkpoint");
	snprintf(args, sizeof(args), "%s,kernel=fast", f.path);
	expect_refused(args, "unknown option 'kernel=fast'");
	snprintf(args, sizeof(args), "%s,bogus", f.path);
	expect_refused(args, "unknown option 'bogus'");
	if (!llama_kernels_have_avx2()) {
		snprintf(args, sizeof(args), "%s,kernel=avx2", f.path);
		expect_refused(args, "lacks AVX2");
	}
	struct { size_t off; int32_t v; const char *want; } cases[] = {
		{ 0, 0, "dim is 0" },
		{ 0, -64, "dim is -64" },
		{ 4, 0, "hidden_dim is 0" },
		{ 8, -2, "n_layers is -2" },
		{ 12, 5, "n_heads 5 does not divide dim 64" },
		{ 12, 64, "head size 1" },
		{ 16, 3, "n_kv_heads 3 does not divide n_heads 4" },
		{ 16, 0, "n_kv_heads is 0" },
		{ 20, 0, "vocab_size is 0" },
		{ 20, INT32_MIN, "vocab_size is -2147483648" },
		{ 24, -1, "seq_len is -1" },
		{ 4, 97, "implies" },			/* hidden off by one */
		{ 20, 97, "implies" },			/* shared, but wcls there */
		{ 8, 0x7fffffff, "implies" },
		{ 0, 0x7ffffff0, "overflow" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memcpy(b, leg, n_leg);
		set_i32(b, cases[i].off, cases[i].v);
		expect_refused(write_bytes(b, n_leg), cases[i].want);
		memcpy(b, ak, n_ak);	/* the same field of an ak42 header */
		set_i32(b, cases[i].off + 8, cases[i].v < 0 && cases[i].off == 20 ? 0 : cases[i].v);
		if (cases[i].off != 20)
			expect_refused(write_bytes(b, n_ak), cases[i].want);
	}
	memcpy(b, ak, n_ak);
	set_i32(b, 4, 2);
	expect_refused(write_bytes(b, n_ak), "group_size is 0");	/* read as version 2 */
	set_i32(b, 4, 7);
	expect_refused(write_bytes(b, n_ak), "unknown ak42 version 7");
	set_i32(b, 4, 1);
	b[36] = 5;
	expect_refused(write_bytes(b, n_ak), "shared_classifier byte is 5");
	free(b);
	free(leg);
	free(ak);
	tmodel_free(&f.t);
}

/* Is [p, p + n floats) inside data[0..size)? */
static bool inside(const void *p, size_t n, const unsigned char *data,
		   size_t size)
{
	const unsigned char *c = p;

	return c >= data && c <= data + size &&
	       n <= (size_t)(data + size - c) / sizeof(float);
}

/* (5) header fuzz: random fields and lengths never crash or overrun. */
static void test_header_fuzz(void **state)
{
	struct rng r = rng_for(6);
	static const int32_t interesting[] = { 0, 1, 2, 3, 4, 8, 16, 64, 97, -1,
		-97, 128, 255, 256, 4096, 65536, 0x7fffffff, INT32_MIN, 0x40000000 };
	struct fixture f;
	unsigned char *src[2];
	size_t n_src[2];
	int accepted = 0;

	fixture_make(&f, &r, rng_below(&r, 2), 128);
	src[0] = read_all(f.path, &n_src[0]);
	src[1] = read_all(f.path_ak42, &n_src[1]);
	for (int iter = 0; iter < 3000; iter++) {
		int which = (int)rng_below(&r, 2);
		size_t base = which ? 8 : 0, size = n_src[which];
		struct llama_checkpoint ck;
		unsigned char *buf;
		char err[512];

		if (rng_below(&r, 3) == 0)	/* a random length */
			size = rng_below(&r, 2) ? rng_below(&r, 300) :
						  rng_below(&r, (uint32_t)size + 16);
		buf = malloc(size ? size : 1);	/* exact: ASan sees overruns */
		memcpy(buf, src[which], size < n_src[which] ? size : n_src[which]);
		if (size > n_src[which])
			memset(buf + n_src[which], 0, size - n_src[which]);
		for (int k = (int)rng_below(&r, 4); k > 0; k--) {
			size_t off = base + 4 * rng_below(&r, which ? 8 : 7);
			int32_t v = rng_below(&r, 2) ? interesting[rng_below(&r, 19)] :
						       (int32_t)rng_next(&r);

			if (off + 4 <= size)
				set_i32(buf, off, v);
		}
		if (llama_checkpoint_parse(&ck, buf, size, "fuzz", err, sizeof(err)) == 0) {
			const struct llama_config *c = &ck.cfg;
			size_t L = c->n_layers, d = c->dim, h = c->hidden_dim;

			accepted++;
			assert_true(inside(ck.w.token_embedding.data, (size_t)c->vocab * d, buf, size));
			assert_true(inside(ck.w.wcls.data, (size_t)c->vocab * d, buf, size));
			assert_true(inside(ck.w.wq.data, L * d * d, buf, size));
			assert_true(inside(ck.w.wk.data, L * c->kv_dim * d, buf, size));
			assert_true(inside(ck.w.w2.data, L * d * h, buf, size));
			assert_true(inside(ck.w.w3.data, L * d * h, buf, size));
			assert_true(inside(ck.w.rms_final.data, d, buf, size));
			assert_int_equal(c->dim % c->n_heads, 0);
			assert_int_equal(c->n_heads % c->n_kv_heads, 0);
		} else {
			assert_true(strlen(err) > 0 && strstr(err, "fuzz"));
		}
		free(buf);
	}
	printf("header fuzz: 3000 inputs, %d accepted\n", accepted);
	free(src[0]);
	free(src[1]);
	tmodel_free(&f.t);
}

/*
 * (6) refusals beside a served row (whose logits stay those it has alone),
 * and protocol errors that fail the whole step.
 */
static void test_refusals(void **state)
{
	struct rng r = rng_for(7);
	struct fixture f;
	static struct req q;
	int32_t bad[3] = { 1, 97, 2 }, neg[2] = { 3, -1 }, big[129] = { 0 };
	float *want, *got;
	uint32_t ref[5];
	void *m;

	fixture_make(&f, &r, rng_below(&r, 2), 128);
	m = must_create(f.path);
	must_bind(m, 8, 100);
	want = malloc(97 * sizeof(float));
	got = malloc(5 * 97 * sizeof(float));
	for (int i = 0; i < 9; i++)
		q.tokens[i] = (int32_t)rng_below(&r, 97);
	q.n_tokens = 9;
	q.chunk = 9;
	q.slot = 0;
	run_alone(m, &q, 1, want);
	api->release(m, 0);
	{
		struct dynbatch_model_row rows[5] = {
			{ .slot = 1, .tokens = bad, .n_tokens = 0, .n_consume = 0, .want_output = 1 },
			{ .slot = 2, .tokens = bad, .n_tokens = 3, .n_consume = 3, .want_output = 1 },
			{ .slot = 0, .tokens = q.tokens, .n_tokens = 9, .n_consume = 9, .want_output = 1 },
			{ .slot = 3, .tokens = neg, .n_tokens = 2, .n_consume = 2, .want_output = 1 },
			{ .slot = 4, .tokens = big, .n_tokens = 101, .n_consume = 101, .want_output = 1 },
		};

		assert_int_equal(api->step(m, 5, rows, got, ref), 0);
		assert_int_equal(ref[0], DYNBATCH_REFUSE_EMPTY_PROMPT);
		assert_int_equal(ref[1], DYNBATCH_REFUSE_TOKEN);
		assert_int_equal(ref[2], DYNBATCH_REFUSE_NONE);
		assert_int_equal(ref[3], DYNBATCH_REFUSE_TOKEN);
		assert_int_equal(ref[4], DYNBATCH_REFUSE_CONTEXT);
		assert_memory_equal(got + 2 * 97, want, 97 * sizeof(float));
		for (int i = 0; i < 5 * 97; i++)
			assert_false(isnan(got[i]));
	}
	{
		/* claims more cached than consumed; slot out of range; twice */
		struct dynbatch_model_row over = { .slot = 5, .tokens = q.tokens,
			.n_tokens = 9, .n_cached = 4, .n_consume = 5, .want_output = 1 };
		struct dynbatch_model_row far = { .slot = 8, .tokens = q.tokens,
			.n_tokens = 9, .n_consume = 9, .want_output = 1 };
		struct dynbatch_model_row twice[2] = {
			{ .slot = 6, .tokens = q.tokens, .n_tokens = 9, .n_consume = 9, .want_output = 1 },
			{ .slot = 6, .tokens = q.tokens, .n_tokens = 9, .n_consume = 9, .want_output = 1 },
		};
		struct dynbatch_model_row early = { .slot = 7, .tokens = q.tokens,
			.n_tokens = 9, .n_consume = 5, .want_output = 1 };

		assert_int_equal(api->step(m, 1, &over, got, ref), -EINVAL);
		assert_int_equal(api->step(m, 1, &far, got, ref), -EINVAL);
		assert_int_equal(api->step(m, 2, twice, got, ref), -EINVAL);
		assert_int_equal(api->step(m, 1, &early, got, ref), -EINVAL);
		/* cached 9 in slot 0 above: 9 + 0 more is not a consume */
	}
	{
		char err[512] = "";

		assert_int_not_equal(api->bind(m, 4, 129, err, sizeof(err)), 0);
		assert_non_null(strstr(err, "max_context 129"));
	}
	assert_int_equal(api->max_context(m), 128);
	assert_int_equal(api->vocab(m), 97);
	free(want);
	free(got);
	api->destroy(m);
	tmodel_free(&f.t);
}

static long rss_pages(void)
{
	long size = 0, rss = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	assert_non_null(f);
	assert_int_equal(fscanf(f, "%ld %ld", &size, &rss), 2);
	fclose(f);
	return rss;
}

/* (7) a filled slot's KV cache is resident; release() gives it back. */
static void test_release_memory(void **state)
{
	struct rng r = rng_for(8);
	struct tmodel t;
	static struct req q;
	char path[160];
	long page = sysconf(_SC_PAGESIZE), before, filled, after;
	long kv_pages = 1024L * 8 * 64 * 2 * 4 / page;	/* 4 MiB */
	float *logits = malloc(97 * sizeof(float));
	void *m;

	tmodel_init(&t, 64, 64, 8, 4, 4, 97, 1024, false, &r);
	snprintf(path, sizeof(path), "%s/long.bin", tmp_dir);
	tmodel_write(&t, path, 0, true);
	m = must_create(path);
	must_bind(m, 4, 1024);
	before = rss_pages();
	for (uint32_t i = 0; i < 1024; i++)
		q.tokens[i] = (int32_t)rng_below(&r, 97);
	q.n_tokens = 1024;
	q.chunk = 1024;
	q.slot = 2;
	run_alone(m, &q, 1, logits);
	filled = rss_pages();
	api->release(m, 2);
	after = rss_pages();
	printf("release: rss %ld -> %ld -> %ld pages (KV of a slot %ld)\n",
	       before, filled, after, kv_pages);
	assert_true(filled - before >= kv_pages * 9 / 10);
	assert_true(filled - after >= kv_pages * 9 / 10);
	free(logits);
	api->destroy(m);
	tmodel_free(&t);
}

/*
 * step() and release() inside the worker's seccomp sandbox: a child
 * creates and binds the model, enters the sandbox, decodes (prefill in
 * chunks, release, re-prefill) and sends its logits through a pipe; they
 * must be the parent's, unsandboxed, bit for bit.
 */
static void test_steps_in_sandbox(void **state)
{
	struct rng r = rng_for(9);
	struct fixture f;
	static struct req q, q2;
	size_t bytes = (size_t)6 * 97 * sizeof(float);
	float *want = malloc(bytes), *got = malloc(bytes);
	int fds[2], status;
	size_t have = 0;
	pid_t pid;
	void *m;

	fixture_make(&f, &r, rng_below(&r, 2), 128);
	for (int i = 0; i < 30; i++)
		q.tokens[i] = (int32_t)rng_below(&r, 97);
	q.n_tokens = 30;
	q.chunk = 7;
	q2 = q;
	m = must_create(f.path);
	must_bind(m, 4, 128);
	run_alone(m, &q, 6, want);
	api->destroy(m);
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char err[512];
		void *cm = api->create(f.path, err, sizeof(err));

		close(fds[0]);
		if (!cm || api->bind(cm, 4, 128, err, sizeof(err)) ||
		    worker_sandbox_enter(&fds[1], 1, err, sizeof(err)))
			_exit(3);
		q2.slot = 3;
		run_alone(cm, &q2, 3, got);
		api->release(cm, 3);	/* madvise in the sandbox */
		q2.n_cached = 0;
		q2.chunk = 64;
		run_alone(cm, &q2, 3, got + 3 * 97);
		for (size_t off = 0; off < bytes;) {
			ssize_t n = write(fds[1], (char *)got + off, bytes - off);

			if (n <= 0)
				_exit(4);
			off += (size_t)n;
		}
		_exit(0);
	}
	close(fds[1]);
	while (have < bytes) {
		ssize_t n = read(fds[0], (char *)got + have, bytes - have);

		if (n <= 0)
			break;
		have += (size_t)n;
	}
	close(fds[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("sandboxed child: status 0x%x", status);
	assert_int_equal(have, bytes);
	assert_memory_equal(got, want, bytes);
	free(want);
	free(got);
	tmodel_free(&f.t);
}

/*
 * (9) the attention kernels keep their promise of llama_kernels.h, for
 * every kernel kind: attn_scores() gives each position exactly dot()'s
 * score divided by the scale, and attn_mix() exactly what axpy() into a
 * zeroed vector gives, position by position, whatever the head size (the
 * vector tails), the number of positions (the tiles' edges) and the
 * stride; and both, and softmax(), are within rounding of a double-
 * precision reference.
 */
static void test_attention_kernels(void **state)
{
	struct rng r = rng_for(10);
	enum llama_kernel_kind kinds[] = { LLAMA_KERNEL_PORTABLE,
					   LLAMA_KERNEL_AVX2 };

	(void)state;
	for (size_t ki = 0; ki < 2; ki++) {
		const struct llama_kernels *k = llama_kernels_get(kinds[ki]);

		if (!k)
			continue;
		for (int iter = 0; iter < 300; iter++) {
			size_t hs = 1 + rng_below(&r, 140);
			size_t n_pos = 1 + rng_below(&r, 40);
			size_t stride = hs + rng_below(&r, 20);
			float scale = sqrtf((float)hs);
			float *q = rand_floats(&r, hs, 0, 1);
			float *keys = rand_floats(&r, n_pos * stride, 0, 1);
			float *att = rand_floats(&r, n_pos, 0.5, 0.25);
			float *got = malloc((n_pos + hs) * sizeof(float));
			float *want = calloc(n_pos + hs, sizeof(float));

			assert_non_null(got);
			assert_non_null(want);
			k->attn_scores(got, q, keys, stride, n_pos, hs, scale);
			for (size_t p = 0; p < n_pos; p++) {
				double ref = 0;

				want[p] = k->dot(q, keys + p * stride, hs) / scale;
				for (size_t i = 0; i < hs; i++)
					ref += (double)q[i] * keys[p * stride + i];
				assert_true(fabs(got[p] - ref / scale) <=
					    1e-5 * (1 + hs / scale));
			}
			assert_memory_equal(got, want, n_pos * sizeof(float));

			k->attn_mix(got, att, keys, stride, n_pos, hs);
			memset(want, 0, hs * sizeof(float));
			for (size_t p = 0; p < n_pos; p++)
				k->axpy(want, att[p], keys + p * stride, hs);
			for (size_t i = 0; i < hs; i++) {
				double ref = 0;

				for (size_t p = 0; p < n_pos; p++)
					ref += (double)att[p] * keys[p * stride + i];
				assert_true(fabs(got[i] - ref) <= 1e-5 * (1 + n_pos));
			}
			assert_memory_equal(got, want, hs * sizeof(float));

			/* softmax: within rounding of a double one, with
			 * scores wide enough for exps that underflow */
			memcpy(want, keys, n_pos * sizeof(float));
			for (size_t p = 0; p < n_pos; p++)
				got[p] = want[p] *= 40;
			k->softmax(got, n_pos);
			{
				double max = want[0], sum = 0;

				for (size_t p = 1; p < n_pos; p++)
					max = want[p] > max ? want[p] : max;
				for (size_t p = 0; p < n_pos; p++)
					sum += exp(want[p] - max);
				for (size_t p = 0; p < n_pos; p++) {
					double ref = exp(want[p] - max) / sum;

					/* x - max rounded to float moves
					 * exp by up to |x - max| ulps */
					double tol = 1e-6 + 1.2e-7 *
						     fabs(want[p] - max);

					assert_true(fabs(got[p] - ref) <=
						    tol * ref + 1e-30);
				}
			}
			free(q);
			free(keys);
			free(att);
			free(got);
			free(want);
		}
	}
}

/* ======================================== ak42 version 2 (Q8_0) tests */

/*
 * Quantize w[0 .. n) in groups as export.py's quantize_q80 does (scale =
 * max |w| / 127, q = w / scale rounded half to even), written here from
 * the format's description, then replace w by what the file holds (q * s
 * in float), so that the reference runs the model the file stands for.
 */
static void q8_quantize(float *w, size_t n, uint32_t group, int8_t *q,
			float *s)
{
	for (size_t g = 0; g < n / group; g++) {
		float max = 0;

		for (size_t i = g * group; i < (g + 1) * group; i++)
			max = fmaxf(max, fabsf(w[i]));
		s[g] = max / 127.0f;
		for (size_t i = g * group; i < (g + 1) * group; i++) {
			q[i] = s[g] == 0 ? 0 : (int8_t)nearbyintf(w[i] / s[g]);
			w[i] = (float)q[i] * s[g];
		}
	}
}

/* A Q8_0 tensor of `layers` [rows][cols] matrices: per layer q, then s. */
static void q8_put(FILE *f, float *w, size_t layers, size_t rows, size_t cols,
		   uint32_t group)
{
	size_t n = rows * cols;
	int8_t *q = malloc(n);
	float *s = malloc(n / group * sizeof(float));

	assert_true(q && s);
	for (size_t l = 0; l < layers; l++) {
		q8_quantize(w + l * n, n, group, q, s);
		put(f, q, n);
		put(f, s, n / group * sizeof(float));
	}
	free(q);
	free(s);
}

/* Write t as ak42 version 2; t's matrices become the dequantized ones. */
static void tmodel_write_q8(struct tmodel *t, const char *path, uint32_t group)
{
	size_t L = t->layers, d = t->dim, h = t->hidden, F = sizeof(float);
	size_t kvd = (size_t)t->kv_heads * (t->dim / t->heads);
	int32_t hdr[7] = { t->dim, t->hidden, t->layers, t->heads,
			   t->kv_heads, t->vocab, t->seq_len };
	uint32_t magic = LLAMA_AK42_MAGIC;
	int32_t version = 2, gs = (int32_t)group;
	unsigned char shared = t->separate ? 0 : 1, pad[256 - 41] = { 0 };
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	put(f, &magic, 4);
	put(f, &version, 4);
	put(f, hdr, sizeof(hdr));
	put(f, &shared, 1);
	put(f, &gs, 4);
	put(f, pad, sizeof(pad));
	put(f, t->rms_att, L * d * F);
	put(f, t->rms_ffn, L * d * F);
	put(f, t->rms_final, d * F);
	q8_put(f, t->emb, 1, t->vocab, d, group);
	q8_put(f, t->wq, L, d, d, group);
	q8_put(f, t->wk, L, kvd, d, group);
	q8_put(f, t->wv, L, kvd, d, group);
	q8_put(f, t->wo, L, d, d, group);
	q8_put(f, t->w1, L, h, d, group);
	q8_put(f, t->w2, L, d, h, group);
	q8_put(f, t->w3, L, h, d, group);
	if (t->separate)
		q8_put(f, t->wcls, 1, t->vocab, d, group);
	assert_int_equal(fclose(f), 0);
}

static void q8_write_fixture(struct fixture *f, char *path, size_t len,
			     uint32_t group)
{
	snprintf(path, len, "%s/m%d.q8", tmp_dir, (int)f->t.separate);
	tmodel_write_q8(&f->t, path, group);
}

/*
 * (q8 1) the Q8_0 kernels alone, on random shapes, groups (multiples of
 * 8 and not: the AVX2 table's portable fallback) and unaligned scales:
 * every row's outputs memcmp-identical whatever the batch and the row's
 * place in it, and near a double reference.
 */
static void test_q8_kernels(void **state)
{
	struct rng r = rng_for(101);
	static const uint32_t groups[] = { 8, 16, 32, 64, 2, 6, 12 };
	enum llama_kernel_kind kinds[2] = { LLAMA_KERNEL_PORTABLE,
					    LLAMA_KERNEL_AVX2 };

	for (int trial = 0; trial < 60; trial++) {
		uint32_t group = groups[rng_below(&r, 7)];
		/* every tenth wider than the AVX2 kernel stages as float */
		uint32_t cols = group * (trial % 10 == 9 ?
					 4096 / group + 1 + rng_below(&r, 4) :
					 1 + rng_below(&r, 400 / group + 1));
		uint32_t rows = 1 + rng_below(&r, 60), n_rows = 1 + rng_below(&r, 70);
		size_t n = (size_t)rows * cols, n_groups = n / group;
		/* values then scales, as in a file, the scales unaligned */
		unsigned char *buf = malloc(3 + n + n_groups * 4);
		size_t off = (5 - n % 4) % 4;	/* (off + n) % 4 == 1 */
		int8_t *q = (int8_t *)(buf + off);
		unsigned char *scales = buf + off + n;
		float *x = malloc((size_t)n_rows * cols * sizeof(float));
		float *all = malloc((size_t)n_rows * rows * sizeof(float));
		float *one = malloc((size_t)rows * sizeof(float));
		float *row = malloc((size_t)cols * sizeof(float));
		struct tensor m = { .type = DTYPE_Q8_0, .data = q, .n_layers = 1,
				    .rows = rows, .cols = cols, .group = group,
				    .layer_bytes = n + n_groups * 4 };

		assert_true(buf && x && all && one && row);
		assert_int_equal(dtype_matrix_bytes(DTYPE_Q8_0, rows, cols, group),
				 m.layer_bytes);
		for (size_t i = 0; i < n; i++)
			q[i] = (int8_t)(rng_below(&r, 255) - 127);
		for (size_t g = 0; g < n_groups; g++) {
			float v = (float)(rng_below(&r, 1000) + 1) * 1e-5f;

			memcpy(scales + 4 * g, &v, 4);
		}
		for (size_t i = 0; i < (size_t)n_rows * cols; i++)
			x[i] = (float)((double)rng_below(&r, 2000) / 1000 - 1);
		/* the dequantized row: exactly q * s */
		for (uint32_t o = 0; o < rows; o += 1 + rows / 4) {
			tensor_ops_get(DTYPE_Q8_0, LLAMA_KERNEL_PORTABLE)->get_row(row, &m, o);
			for (uint32_t i = 0; i < cols; i++) {
				float v;

				memcpy(&v, scales + 4 * (((size_t)o * cols + i) / group), 4);
				assert_true(row[i] == (float)q[(size_t)o * cols + i] * v);
			}
		}
		for (int k = 0; k < 2; k++) {
			const struct tensor_ops *ops = tensor_ops_get(DTYPE_Q8_0, kinds[k]);
			uint32_t first = rng_below(&r, n_rows);

			if (!ops)
				continue;
			ops->matmul(all, x, n_rows, &m);
			for (uint32_t b = 0; b < n_rows; b++) {
				ops->matmul(one, x + (size_t)b * cols, 1, &m);
				if (memcmp(one, all + (size_t)b * rows, rows * sizeof(float)))
					fail_msg("q8 %s: group %u, %u x %u: row %u of %u differs from it alone",
						 k ? "avx2" : "portable", group, rows, cols, b, n_rows);
				for (uint32_t o = 0; o < rows; o++) {
					double want = 0, mag = 0;

					for (uint32_t i = 0; i < cols; i++) {
						float v;
						double t;

						memcpy(&v, scales + 4 * (((size_t)o * cols + i) / group), 4);
						t = (double)q[(size_t)o * cols + i] * v * x[(size_t)b * cols + i];
						want += t;
						mag += fabs(t);
					}
					if (fabs(one[o] - want) > 1e-5 * (mag + 1e-3))
						fail_msg("q8 %s: group %u, %u x %u: output %u is %g, want %g",
							 k ? "avx2" : "portable", group, rows, cols, o, one[o], want);
				}
			}
			/* a sub-batch starting at another row */
			ops->matmul(all, x + (size_t)first * cols, n_rows - first, &m);
			ops->matmul(one, x + (size_t)first * cols, 1, &m);
			if (memcmp(one, all, rows * sizeof(float)))
				fail_msg("q8 %s: group %u: first row of a %u-row sub-batch differs",
					 k ? "avx2" : "portable", group, n_rows - first);
		}
		free(buf); free(x); free(all); free(one); free(row);
	}
}

/*
 * (q8 2) the model on version 2 files (shared and separate classifier,
 * groups a multiple of 8 and not) against the naive double forward of the
 * dequantized weights.
 */
static void test_q8_against_reference(void **state)
{
	struct rng r = rng_for(102);
	const char *kernels[2] = { ",kernel=portable", ",kernel=avx2" };
	static const uint32_t groups[] = { 32, 16, 8, 4 };
	uint32_t lens[] = { 1, 2, 5, 17, 64, 128 };

	for (int sep = 0; sep < 2; sep++) {
		uint32_t group = groups[rng_below(&r, 4)];
		struct fixture f;
		static struct req q;
		char path[160], args[300];
		double *ref = malloc(97 * sizeof(double));
		float *got = malloc(97 * sizeof(float));

		fixture_make(&f, &r, sep, 128);
		q8_write_fixture(&f, path, sizeof(path), group);
		for (uint32_t i = 0; i < 128; i++)
			q.tokens[i] = (int32_t)rng_below(&r, 97);
		for (int kern = 0; kern < 2; kern++) {
			void *m;

			if (kern == 1 && !llama_kernels_have_avx2())
				continue;
			snprintf(args, sizeof(args), "%s%s", path, kernels[kern]);
			m = must_create(args);
			must_bind(m, 1, 128);
			for (uint32_t li = 0; li < 6; li++) {
				q.n_tokens = lens[li];
				q.n_cached = 0;
				q.chunk = 1 + rng_below(&r, 40);
				run_alone(m, &q, 1, got);
				ref_logits(&f.t, q.tokens, (int)lens[li], ref);
				if (rel_err(got, ref, 97) > 2e-4)
					fail_msg("%s (group %u): %u tokens: error %g against the reference",
						 args, group, lens[li], rel_err(got, ref, 97));
			}
			api->destroy(m);
		}
		free(ref);
		free(got);
		tmodel_free(&f.t);
	}
}

/* (q8 3) the batch invariance harness on a version 2 file. */
static void test_q8_batch_invariance(void **state)
{
	run_batch_invariance(103, 16, "");
}

/* ------------------------------------------------------------ quant=q4 */

/* (q4 1) the invariance harness with quant=q4 (a shared or separate
 * classifier, as the fixture draws). */
static void test_q4_batch_invariance(void **state)
{
	run_batch_invariance(201, 0, ",quant=q4");
}

/*
 * (q4 2) what llama_quantize_q4() leaves: every matrix Q4G of group 32,
 * its bytes the kernels' quantization of the file's floats, in memory
 * outside the file's mapping; the embedding F32 in the mapping; a shared
 * classifier quantized from the embedding.  And refusals naming quant=.
 */
static void test_q4_quantize(void **state)
{
	struct rng r = rng_for(202);
	char err[512] = "", path[160];
	struct fixture f;

	for (int separate = 0; separate < 2; separate++) {
		struct llama_checkpoint ck, orig;
		struct llama_quant q;
		struct tensor *t[] = { &ck.w.wq, &ck.w.wk, &ck.w.wv, &ck.w.wo,
				       &ck.w.w1, &ck.w.w2, &ck.w.w3, &ck.w.wcls };
		struct tensor *o[] = { &orig.w.wq, &orig.w.wk, &orig.w.wv,
				       &orig.w.wo, &orig.w.w1, &orig.w.w2,
				       &orig.w.w3, &orig.w.wcls };
		const unsigned char *lo, *hi;

		fixture_make(&f, &r, separate, 64);
		assert_int_equal(llama_checkpoint_open(&ck, f.path, err, sizeof(err)), 0);
		orig = ck;
		lo = ck.map;
		hi = lo + ck.map_len;
		assert_int_equal(llama_quantize_q4(&ck, Q4G_GROUP, &q, err, sizeof(err)), 0);
		assert_int_equal(ck.w.token_embedding.type, DTYPE_F32);
		assert_true(inside(ck.w.token_embedding.data, 4, lo, (size_t)(hi - lo)));
		for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
			size_t one = (size_t)dtype_matrix_bytes(DTYPE_Q4G, o[i]->rows,
								 o[i]->cols, 32);
			unsigned char *want = malloc(one);

			assert_non_null(want);
			assert_int_equal(t[i]->type, DTYPE_Q4G);
			assert_int_equal(t[i]->group, 32);
			assert_int_equal(t[i]->layer_bytes, one);
			assert_false(inside(t[i]->data, 1, lo, (size_t)(hi - lo)));
			for (uint32_t l = 0; l < t[i]->n_layers; l++) {
				/* the floats read back from the file (the
				 * mapping's pages were let go, not its data) */
				q4g_quantize_matrix(want, (const float *)o[i]->data +
						    (size_t)l * o[i]->rows * o[i]->cols,
						    o[i]->rows, o[i]->cols, 32);
				assert_memory_equal((const unsigned char *)t[i]->data +
						    l * one, want, one);
			}
			free(want);
		}
		if (!separate)
			assert_true(orig.w.wcls.data == orig.w.token_embedding.data);
		llama_quant_free(&q);
		llama_checkpoint_close(&ck);
		/* Q8_0 already: refused, naming the option */
		q8_write_fixture(&f, path, sizeof(path), 16);
		strncat(path, ",quant=q4", sizeof(path) - strlen(path) - 1);
		expect_refused(path, "quant=q4 applies to");
		snprintf(path, sizeof(path), "%s,quant=q5", f.path);
		expect_refused(path, "unknown quant=q5");
		tmodel_free(&f.t);
	}
}

/* (q8 4) bad version 2 checkpoints: refused with the reason. */
static void test_q8_bad_checkpoints(void **state)
{
	struct rng r = rng_for(104);
	struct fixture f;
	char path[160];
	unsigned char *v2, *b;
	size_t n;

	fixture_make(&f, &r, true, 128);
	q8_write_fixture(&f, path, sizeof(path), 16);
	v2 = read_all(path, &n);
	b = malloc(n + 64);
	expect_refused(write_bytes(v2, n - 1), "truncated");
	expect_refused(write_bytes(v2, 200), "shorter than the 256-byte ak42");
	memcpy(b, v2, n);
	memset(b + n, 0, 8);
	expect_refused(write_bytes(b, n + 8), "trailing bytes");
	struct { size_t off; int32_t v; const char *want; } cases[] = {
		{ 37, 0, "group_size is 0" },
		{ 37, -16, "group_size is -16" },
		{ 37, 3, "group_size is 3, must be positive and divide dim 64 and hidden_dim 96" },
		{ 37, 64, "group_size is 64" },		/* divides dim, not hidden */
		{ 37, 128, "group_size is 128" },
		{ 37, 32, "implies" },			/* legal, other scale count */
		{ 37, INT32_MIN, "group_size is -2147483648" },
		{ 8, 32, "implies" },
		{ 12, 48, "implies" },			/* hidden 48: a legal shape */
		{ 16, 0x7fffffff, "implies" },
		{ 8, 0x7ffffff0, "overflow" },
		{ 28, 0x40000000, "implies" },
		{ 24, 3, "n_kv_heads 3 does not divide n_heads 4" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memcpy(b, v2, n);
		set_i32(b, cases[i].off, cases[i].v);
		expect_refused(write_bytes(b, n), cases[i].want);
	}
	memcpy(b, v2, n);
	b[36] = 1;	/* shared, but wcls is there */
	expect_refused(write_bytes(b, n), "implies");
	b[36] = 2;
	expect_refused(write_bytes(b, n), "shared_classifier byte is 2");
	free(b);
	free(v2);
	tmodel_free(&f.t);
}

/* Do t's layers lie inside data[0..size), each the size its type says? */
static bool tensor_inside(const struct tensor *t, enum dtype type,
			  uint32_t n_layers, const unsigned char *data,
			  size_t size)
{
	const unsigned char *base = t->data;

	return t->type == type && t->n_layers == n_layers &&
	       base >= data && base <= data + size &&
	       t->layer_bytes == dtype_matrix_bytes(t->type, t->rows, t->cols,
						    t->group) &&
	       (uint64_t)n_layers * t->layer_bytes <= (size_t)(data + size - base);
}

/* (q8 5) version 2 header fuzz: never a crash or a pointer outside. */
static void test_q8_header_fuzz(void **state)
{
	struct rng r = rng_for(105);
	static const int32_t interesting[] = { 0, 1, 2, 3, 4, 8, 16, 32, 64, 96,
		97, -1, -16, 128, 256, 4096, 0x7fffffff, INT32_MIN, 0x40000000 };
	struct fixture f;
	char path[160];
	unsigned char *src;
	size_t n_src;
	int accepted = 0;

	fixture_make(&f, &r, rng_below(&r, 2), 128);
	q8_write_fixture(&f, path, sizeof(path), 8 << rng_below(&r, 2));
	src = read_all(path, &n_src);
	for (int iter = 0; iter < 3000; iter++) {
		size_t size = n_src;
		struct llama_checkpoint ck;
		unsigned char *buf;
		char err[512];

		if (rng_below(&r, 3) == 0)	/* a random length */
			size = rng_below(&r, 2) ? rng_below(&r, 300) :
						  rng_below(&r, (uint32_t)size + 16);
		buf = malloc(size ? size : 1);	/* exact: ASan sees overruns */
		memcpy(buf, src, size < n_src ? size : n_src);
		if (size > n_src)
			memset(buf + n_src, 0, size - n_src);
		for (int k = (int)rng_below(&r, 4); k > 0; k--) {
			/* the 7 shape fields, the shared byte or the group size */
			uint32_t field = rng_below(&r, 9);
			size_t off = field < 7 ? 8 + 4 * field : field == 7 ? 36 : 37;
			int32_t v = rng_below(&r, 2) ? interesting[rng_below(&r, 19)] :
						       (int32_t)rng_next(&r);

			if (field == 7 && off < size)
				buf[off] = (unsigned char)rng_below(&r, 3);
			else if (off + 4 <= size)
				set_i32(buf, off, v);
		}
		if (llama_checkpoint_parse(&ck, buf, size, "fuzz", err, sizeof(err)) == 0) {
			const struct llama_config *c = &ck.cfg;
			const struct llama_weights *w = &ck.w;
			uint32_t L = c->n_layers, group = w->wq.group;

			accepted++;
			assert_int_equal(ck.format_version, 2);
			assert_int_equal(c->dim % group, 0);
			assert_int_equal(c->hidden_dim % group, 0);
			assert_true(tensor_inside(&w->token_embedding, DTYPE_Q8_0, 1, buf, size));
			assert_true(tensor_inside(&w->wcls, DTYPE_Q8_0, 1, buf, size));
			assert_true(tensor_inside(&w->wq, DTYPE_Q8_0, L, buf, size));
			assert_true(tensor_inside(&w->wk, DTYPE_Q8_0, L, buf, size));
			assert_true(tensor_inside(&w->w2, DTYPE_Q8_0, L, buf, size));
			assert_true(tensor_inside(&w->w3, DTYPE_Q8_0, L, buf, size));
			assert_true(tensor_inside(&w->rms_att, DTYPE_F32, L, buf, size));
			assert_true(tensor_inside(&w->rms_final, DTYPE_F32, 1, buf, size));
			assert_true((const float *)w->rms_final.data + c->dim <=
				    (const float *)w->token_embedding.data);
		} else {
			assert_true(strlen(err) > 0 && strstr(err, "fuzz"));
		}
		free(buf);
	}
	printf("q8 header fuzz: 3000 inputs, %d accepted\n", accepted);
	free(src);
	tmodel_free(&f.t);
}

static int remove_tmp(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_dir);
	return system(cmd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_batch_invariance),
		cmocka_unit_test(test_chunking_invariance),
		cmocka_unit_test(test_against_reference),
		cmocka_unit_test(test_bad_checkpoints),
		cmocka_unit_test(test_header_fuzz),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_release_memory),
		cmocka_unit_test(test_steps_in_sandbox),
		cmocka_unit_test(test_attention_kernels),
		cmocka_unit_test(test_q8_kernels),
		cmocka_unit_test(test_q8_against_reference),
		cmocka_unit_test(test_q8_batch_invariance),
		cmocka_unit_test(test_q8_bad_checkpoints),
		cmocka_unit_test(test_q8_header_fuzz),
		cmocka_unit_test(test_q4_batch_invariance),
		cmocka_unit_test(test_q4_quantize),
	};
	int rc;

	test_seed_init("test_llama");
	api = llama_model_api();
	printf("test_llama: kernels %s\n",
	       llama_kernels_have_avx2() ? "avx2 and portable" : "portable only");
	if (!mkdtemp(tmp_dir)) {
		perror("mkdtemp");
		return 1;
	}
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	if (remove_tmp() != 0)
		fprintf(stderr, "test_llama: could not remove %s\n", tmp_dir);
	return rc;
}
