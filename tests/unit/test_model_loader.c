/*
 * test_model_loader.c - unit tests of model_open() and friends
 * (lib/model/model_loader.c): the sim specs, every kind of bad spec, and the
 * example plugin loaded for real with dlopen().
 *
 * The plugin is found at $DYNBATCH_PLUGIN if set; else next to this test's
 * build tree (BUILD/tests/test_model_loader -> BUILD/example_plugin.so, so
 * `make asan` loads the plugin of its own tree); else build/example_plugin.so
 * relative to the current directory (the tests run from the repo root).
 * Its tokens are checked against the bigram formula recomputed here, not
 * taken from the plugin's source.  Tables of each ABI version, built here
 * from the sim's and simkv's, go through model_open_table() to show what
 * the loader reads of each (the logits() hook of version 3 above all).
 */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "dynbatch/model.h"
#include "model/model_loader.h"
#include "model/sim_model.h"
#include "model/simkv_model.h"
#include "tests/unit/test_rng.h"

static char plugin_path[PATH_MAX];

/* Where the example plugin is; see the file comment. */
static void find_plugin(void)
{
	const char *env = getenv("DYNBATCH_PLUGIN");
	char exe[PATH_MAX];
	ssize_t n;
	char *slash;

	if (env && *env) {
		snprintf(plugin_path, sizeof(plugin_path), "%s", env);
		return;
	}
	snprintf(plugin_path, sizeof(plugin_path), "build/example_plugin.so");
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return;
	exe[n] = '\0';
	for (int up = 0; up < 2; up++) {	/* strip tests/test_model_loader */
		slash = strrchr(exe, '/');
		if (!slash)
			return;
		*slash = '\0';
	}
	if (strlen(exe) + sizeof("/example_plugin.so") > sizeof(exe))
		return;
	strcat(exe, "/example_plugin.so");
	if (access(exe, R_OK) == 0)
		snprintf(plugin_path, sizeof(plugin_path), "%s", exe);
}

/* The example plugin's model, recomputed independently. */
static int32_t bigram(const int32_t *p, uint32_t n, uint32_t vocab, uint32_t a,
		      uint32_t b)
{
	if (n == 0)
		return (int32_t)(b % vocab);
	return (int32_t)(((uint64_t)a * (uint64_t)p[n - 1] + b + n) % vocab);
}

static struct model *must_open(const char *spec)
{
	char err[512] = "";
	struct model *m = model_open(spec, err, sizeof(err));

	if (!m)
		fail_msg("model_open('%s'): %s", spec, err);
	assert_string_equal(err, "");
	return m;
}

/* One row through model_next(). */
static int32_t next_one(struct model *m, const int32_t *p, uint32_t n)
{
	const int32_t *const prefixes[1] = { p };
	int32_t out = -1;

	assert_int_equal(model_next(m, 1, prefixes, &n, &out), 0);
	return out;
}

/* ----------------------------------------------------------------- sim */

static void test_sim_default(void **state)
{
	static const int32_t p[] = { 1, 2, 3 };
	struct model *m = must_open("sim");

	assert_int_equal(model_vocab(m), 32000);
	assert_int_equal(next_one(m, NULL, 0), 15535);
	assert_int_equal(next_one(m, p, 3), 26355);
	model_close(m);

	/* "sim:" is "sim" with no keys */
	m = must_open("sim:");
	assert_int_equal(model_vocab(m), 32000);
	assert_int_equal(next_one(m, p, 3), 26355);
	model_close(m);
}

static void test_sim_args(void **state)
{
	static const int32_t p[] = { 7 };
	struct model *m = must_open("sim:vocab=50,seed=42");

	assert_int_equal(model_vocab(m), 50);
	assert_int_equal(next_one(m, p, 1), 5);
	model_close(m);
}

/* A batch through model_next() equals sim_next() row by row. */
static void test_sim_batch(void **state)
{
	static const int32_t a[] = { 1, 2, 3, 4, 5, 6 };
	const int32_t *const prefixes[4] = { a, a, NULL, a + 2 };
	const uint32_t lengths[4] = { 6, 3, 0, 1 };
	int32_t out[4];
	struct model *m = must_open("sim:seed=9,vocab=1000");

	assert_int_equal(model_next(m, 4, prefixes, lengths, out), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(out[i],
				 sim_next(prefixes[i], lengths[i], 1000, 9));
	assert_int_equal(model_next(m, 0, NULL, NULL, NULL), 0);
	model_close(m);
}

/* -------------------------------------------------------------- errors */

struct bad_spec {
	const char *spec;
	const char *must_say;	/* a substring the error must contain */
};

static void test_bad_specs(void **state)
{
	static const struct bad_spec cases[] = {
		{ "", "empty model spec" },
		{ "gpt4", "unknown model 'gpt4'" },
		{ "gpt4:vocab=5", "unknown model 'gpt4'" },
		{ "simx", "unknown model 'simx'" },
		{ "SIM", "unknown model 'SIM'" },
		{ ":sim", "unknown model ''" },
		{ "sim:colour=red", "'colour'" },
		{ "sim:vocab=0", "'vocab'" },
		{ "sim:vocab", "missing '='" },
		{ "sim:mode=fast", "'fast'" },
		{ "/nonexistent/dir/model.so", "/nonexistent/dir/model.so" },
		{ "/nonexistent/dir/model.so:vocab=5", "/nonexistent/dir/model.so" },
		{ "nonexistent_dynbatch_model.so", "nonexistent_dynbatch_model.so" },
		{ "./nonexistent", "./nonexistent" },
		{ "/dev/null", "/dev/null" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char err[512] = "";
		struct model *m = model_open(cases[i].spec, err, sizeof(err));

		if (m)
			fail_msg("model_open('%s') succeeded", cases[i].spec);
		if (!err[0] || strchr(err, '\n'))
			fail_msg("'%s': error is not one line: '%s'",
				 cases[i].spec, err);
		if (!strstr(err, cases[i].must_say))
			fail_msg("'%s': error '%s' does not say '%s'",
				 cases[i].spec, err, cases[i].must_say);
	}

	/* the unknown-model error tells what would have been right */
	{
		char err[512] = "";

		assert_null(model_open("gpt2", err, sizeof(err)));
		assert_non_null(strstr(err, "expected sim"));
		assert_non_null(strstr(err, "llama:CHECKPOINT"));
		assert_non_null(strstr(err, "plugin.so"));
		/* llama is built in now, and wants its checkpoint */
		err[0] = '\0';
		assert_null(model_open("llama", err, sizeof(err)));
		assert_non_null(strstr(err, "llama"));
	}
	/* no err buffer, no crash */
	assert_null(model_open("gpt4", NULL, 0));
	assert_null(model_open(NULL, NULL, 0));
}

/*
 * A real shared object without the plugin symbol: libcmocka, which this
 * test is linked against, found with dladdr() so no path is hard-coded.
 */
static void test_not_a_plugin(void **state)
{
	Dl_info info;
	char err[1024] = "";

	if (!dladdr((void *)_cmocka_run_group_tests, &info) ||
	    !info.dli_fname || !strchr(info.dli_fname, '/')) {
		skip();
		return;
	}
	assert_null(model_open(info.dli_fname, err, sizeof(err)));
	assert_non_null(strstr(err, DYNBATCH_MODEL_PLUGIN_SYMBOL));
	assert_non_null(strstr(err, info.dli_fname));
}

static void test_close_null(void **state)
{
	model_close(NULL);
}

/* -------------------------------------------------------------- plugin */

static void test_plugin(void **state)
{
	static const uint32_t lens[] = { 0, 1, 2, 5 };
	char spec[PATH_MAX + 64];
	int32_t seq[64];
	struct model *m;

	snprintf(spec, sizeof(spec), "%s:vocab=1000,a=3,b=5", plugin_path);
	m = must_open(spec);
	assert_int_equal(model_vocab(m), 1000);

	/* decode a sequence from an empty prompt, checking every step */
	for (uint32_t n = 0; n < 40; n++) {
		seq[n] = next_one(m, seq, n);
		assert_int_equal(seq[n], bigram(seq, n, 1000, 3, 5));
	}
	assert_int_equal(seq[0], 5);		/* b % vocab */
	assert_int_equal(seq[1], 3 * 5 + 5 + 1);	/* 21 */

	/* a batch of prefixes of mixed lengths */
	{
		static const int32_t p[] = { 999, 4, 0, 123, 998 };
		const int32_t *prefixes[4];
		int32_t out[4];

		for (int i = 0; i < 4; i++)
			prefixes[i] = p;
		assert_int_equal(model_next(m, 4, prefixes, lens, out), 0);
		for (int i = 0; i < 4; i++)
			assert_int_equal(out[i], bigram(p, lens[i], 1000, 3, 5));
	}
	model_close(m);

	/* big numbers: a * last must not wrap in 32 bits */
	snprintf(spec, sizeof(spec),
		 "%s:vocab=2147483647,a=4294967295,b=4294967295", plugin_path);
	m = must_open(spec);
	{
		static const int32_t p[] = { 2147483646 };

		assert_int_equal(next_one(m, p, 1),
				 bigram(p, 1, 2147483647u, 4294967295u,
					4294967295u));
		assert_int_equal(next_one(m, NULL, 0),
				 (int32_t)(4294967295u % 2147483647u));
	}
	model_close(m);
}

static void test_plugin_defaults(void **state)
{
	struct model *m;
	int32_t p[] = { 100 };

	m = must_open(plugin_path);
	assert_true(model_vocab(m) > 0);
	assert_int_equal(model_vocab(m), 32000);
	assert_true(next_one(m, p, 1) < 32000);
	model_close(m);
}

static void test_plugin_twice(void **state)
{
	char spec[PATH_MAX + 64];
	struct model *m1, *m2;
	int32_t p[] = { 6 };

	/* two instances of one plugin are independent */
	snprintf(spec, sizeof(spec), "%s:vocab=10,a=1,b=0", plugin_path);
	m1 = must_open(spec);
	snprintf(spec, sizeof(spec), "%s:vocab=100,a=2,b=1", plugin_path);
	m2 = must_open(spec);
	assert_int_equal(next_one(m1, p, 1), bigram(p, 1, 10, 1, 0));
	assert_int_equal(next_one(m2, p, 1), bigram(p, 1, 100, 2, 1));
	model_close(m1);
	assert_int_equal(next_one(m2, p, 1), bigram(p, 1, 100, 2, 1));
	model_close(m2);
}

static void test_plugin_bad_args(void **state)
{
	static const char *const bad[] = {
		"vocab=0", "vocab=x", "colour=1", "a", "b=-1",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char spec[PATH_MAX + 64];
		char err[1024] = "";

		snprintf(spec, sizeof(spec), "%s:%s", plugin_path, bad[i]);
		if (model_open(spec, err, sizeof(err)))
			fail_msg("'%s' was accepted", spec);
		/* the error names the plugin and carries its reason */
		if (!strstr(err, plugin_path) || !strstr(err, "example: "))
			fail_msg("'%s': error '%s'", spec, err);
	}
}

/* ------------------------------------------------- logits, ABI versions */

static uint32_t seven(void *model)
{
	return 7;
}

/* A logits() hook that fails with what the test puts in hook_ret. */
static int hook_ret;

static int failing_logits(void *model, uint32_t n_rows,
			  const int32_t *const *prefixes, const uint32_t *lengths,
			  float *logits)
{
	return hook_ret;
}

/* Random rows through model_logits() equal sim_logits() row by row. */
static void check_sim_logits(struct model *m, uint32_t vocab, uint64_t seed,
			     struct rng *r)
{
	enum { ROWS = 5, LEN = 9 };
	static int32_t tokens[ROWS][LEN];
	static float got[ROWS * 32000], want[32000];
	const int32_t *prefixes[ROWS];
	uint32_t lengths[ROWS];

	assert_true(vocab <= 32000);
	for (uint32_t i = 0; i < ROWS; i++) {
		lengths[i] = rng_below(r, LEN + 1);
		for (uint32_t j = 0; j < lengths[i]; j++)
			tokens[i][j] = (int32_t)rng_below(r, vocab);
		prefixes[i] = tokens[i];
	}
	assert_int_equal(model_logits(m, ROWS, prefixes, lengths, got), 0);
	for (uint32_t i = 0; i < ROWS; i++) {
		sim_logits(prefixes[i], lengths[i], vocab, seed, want);
		if (memcmp(got + (size_t)i * vocab, want, vocab * sizeof(float)))
			fail_msg("seed=%llu row %u: model_logits() is not sim_logits()",
				 test_seed, i);
	}
}

/* Which built-in and plugin models give logits. */
static void test_has_logits(void **state)
{
	struct rng r = rng_for(1);
	struct model *m;

	m = must_open("sim:vocab=16,seed=3");
	assert_true(model_has_logits(m));
	assert_false(model_is_stateful(m));
	check_sim_logits(m, 16, 3, &r);
	model_close(m);
	m = must_open("sim");
	check_sim_logits(m, 32000, 0, &r);
	model_close(m);
	m = must_open("simkv");
	assert_true(model_has_logits(m));	/* stateful: step() writes them */
	model_close(m);
	/* the example plugin is a version 3 token model without the hook */
	m = must_open(plugin_path);
	assert_false(model_has_logits(m));
	model_close(m);
}

/* A table in hand, through model_open_table(); NULL after err is set. */
static struct model *open_table(const struct dynbatch_model_api *api,
				const char *args, char *err, size_t err_len)
{
	err[0] = '\0';
	return model_open_table(api, args, err, err_len);
}

/*
 * The loader reads as much of a table as its version defines: fields of
 * a later version, set in an older table, are never used (an older
 * plugin's table ends before them, and what follows is not its).
 */
/* A max_outputs() far past what the engine asks: clamped, or never
 * called in a table older than version 5. */
static uint32_t garbage_max_outputs(void *model)
{
	(void)model;
	return 0xfffffff0u;
}

static void test_table_versions(void **state)
{
	struct dynbatch_model_api t = *sim_model_api();
	struct rng r = rng_for(2);
	char err[512];
	struct model *m;

	/* version 1: ends at destroy */
	t.abi_version = 1;
	t.max_context = seven;
	t.step = simkv_model_api()->step;
	t.logits = failing_logits;
	m = open_table(&t, "vocab=16", err, sizeof(err));
	if (!m)
		fail_msg("version 1: %s", err);
	assert_false(model_is_stateful(m));
	assert_false(model_has_logits(m));
	assert_int_equal(model_max_context(m), 0);
	assert_int_equal(next_one(m, NULL, 0), sim_next(NULL, 0, 16, 0));
	model_close(m);

	/* version 2: ends at release; a token model without logits */
	t.abi_version = 2;
	t.step = NULL;
	m = open_table(&t, "vocab=16", err, sizeof(err));
	if (!m)
		fail_msg("version 2: %s", err);
	assert_false(model_is_stateful(m));
	assert_false(model_has_logits(m));
	assert_int_equal(model_max_context(m), 7);
	model_close(m);

	/* version 3: the hook is read */
	t.abi_version = 3;
	t.logits = sim_model_api()->logits;
	m = open_table(&t, "vocab=1000,seed=11", err, sizeof(err));
	if (!m)
		fail_msg("version 3: %s", err);
	assert_true(model_has_logits(m));
	check_sim_logits(m, 1000, 11, &r);
	model_close(m);

	/* a stateful version 2 table with garbage where logits would be */
	t = *simkv_model_api();
	t.abi_version = 2;
	t.logits = failing_logits;
	m = open_table(&t, "", err, sizeof(err));
	if (!m)
		fail_msg("stateful version 2: %s", err);
	assert_true(model_is_stateful(m));
	assert_true(model_has_logits(m));
	model_close(m);

	/* version 5's max_outputs(): read only from version 5, clamped */
	t = *simkv_model_api();
	t.abi_version = 4;
	t.max_outputs = garbage_max_outputs;
	m = open_table(&t, "", err, sizeof(err));
	if (!m)
		fail_msg("stateful version 4: %s", err);
	assert_int_equal(model_max_outputs(m), 1);
	model_close(m);
	t.abi_version = 5;
	m = open_table(&t, "", err, sizeof(err));
	if (!m)
		fail_msg("stateful version 5: %s", err);
	assert_int_equal(model_max_outputs(m), MODEL_MAX_OUTPUTS);
	model_close(m);
	t = *simkv_model_api();
	t.logits = failing_logits;

	/* ... but in a version 3 table, both is a mistake the loader names */
	t.abi_version = 3;
	assert_null(open_table(&t, "", err, sizeof(err)));
	assert_non_null(strstr(err, "model 'simkv' sets both step() and logits()"));
	assert_null(strchr(err, '\n'));

	/* versions it does not read */
	t = *sim_model_api();
	t.abi_version = 0;
	assert_null(open_table(&t, "", err, sizeof(err)));
	assert_non_null(strstr(err, "has ABI version 0, this dynbatch reads versions 1 to 5"));
	t.abi_version = DYNBATCH_MODEL_ABI_VERSION + 1;
	assert_null(open_table(&t, "", err, sizeof(err)));
	assert_non_null(strstr(err, "has ABI version 6"));
	assert_null(open_table(NULL, "", err, sizeof(err)));
	assert_true(err[0] != '\0');
	/* what create() says reaches err */
	t.abi_version = 3;
	assert_null(open_table(&t, "vocab=0", err, sizeof(err)));
	assert_non_null(strstr(err, "'vocab'"));
}

/* ------------------------------------------------ version 4: paged */

/* Paged hooks of the test's own: they record what reaches them. */
static uint64_t fake_kv_bytes;
static int fake_ret;
static struct {
	void *pool;
	uint32_t n_blocks, block_tokens, max_context, max_rows, n_rows;
	const struct dynbatch_paged_row *rows;
	int binds, steps;
} seen;

static uint64_t fake_kv_bytes_per_token(void *model)
{
	return fake_kv_bytes;
}

static int fake_bind_paged(void *model, void *pool, uint32_t n_blocks,
			   uint32_t block_tokens, uint32_t max_context,
			   uint32_t max_rows, char *err, size_t err_len)
{
	seen.pool = pool;
	seen.n_blocks = n_blocks;
	seen.block_tokens = block_tokens;
	seen.max_context = max_context;
	seen.max_rows = max_rows;
	seen.binds++;
	if (fake_ret)
		snprintf(err, err_len, "fake: no pool today");
	return fake_ret;
}

static int fake_step_paged(void *model, uint32_t n_rows,
			   const struct dynbatch_paged_row *rows, float *logits,
			   uint32_t *refusals)
{
	seen.n_rows = n_rows;
	seen.rows = rows;
	seen.steps++;
	return fake_ret;
}

/* simkv's table as version 4, with the fake paged hooks. */
static struct dynbatch_model_api paged_table(void)
{
	struct dynbatch_model_api t = *simkv_model_api();

	t.abi_version = 4;
	t.kv_bytes_per_token = fake_kv_bytes_per_token;
	t.bind_paged = fake_bind_paged;
	t.step_paged = fake_step_paged;
	return t;
}

/*
 * Version 4 tables: a paged one is accepted (paged and stateful, with or
 * without step()), its calls reach the hooks with the loader's errno
 * rules; one without bind_paged() or kv_bytes_per_token(), or whose
 * kv_bytes_per_token() gives 0, or with logits(), is refused with a
 * reason naming the model; and a version 3 table is never read past
 * logits, whatever lies there.
 */
static void test_table_paged(void **state)
{
	struct dynbatch_model_api t = paged_table();
	struct dynbatch_paged_row row = { .n_blocks = 0 };
	uint32_t refusal, pool[4];
	char err[512];
	struct model *m;

	fake_kv_bytes = 24;
	fake_ret = 0;
	memset(&seen, 0, sizeof(seen));
	m = open_table(&t, "", err, sizeof(err));
	if (!m)
		fail_msg("version 4: %s", err);
	assert_true(model_is_paged(m));
	assert_true(model_is_stateful(m));
	assert_true(model_has_logits(m));
	assert_int_equal(model_kv_bytes_per_token(m), 24);
	assert_int_equal(model_bind_paged(m, pool, 7, 16, 300, 5, err, sizeof(err)), 0);
	assert_int_equal(seen.binds, 1);
	assert_ptr_equal(seen.pool, pool);
	assert_int_equal(seen.n_blocks, 7);
	assert_int_equal(seen.block_tokens, 16);
	assert_int_equal(seen.max_context, 300);
	assert_int_equal(seen.max_rows, 5);
	assert_int_equal(model_step_paged(m, 1, &row, NULL, &refusal), 0);
	assert_int_equal(seen.steps, 1);
	assert_int_equal(seen.n_rows, 1);
	assert_ptr_equal(seen.rows, &row);
	fake_ret = -EINVAL;
	assert_int_equal(model_step_paged(m, 1, &row, NULL, &refusal), -EINVAL);
	assert_int_equal(model_bind_paged(m, pool, 7, 16, 300, 5, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "fake: no pool today"));
	fake_ret = 2;	/* not an errno: -EIO, as for step() */
	assert_int_equal(model_step_paged(m, 1, &row, NULL, &refusal), -EIO);
	assert_int_equal(model_bind_paged(m, pool, 7, 16, 300, 5, err, sizeof(err)), -EIO);
	fake_ret = 0;
	model_close(m);

	/* paged only: no step(), bind(), release() or next() */
	t.step = NULL;
	t.bind = NULL;
	t.release = NULL;
	t.next = NULL;
	m = open_table(&t, "", err, sizeof(err));
	if (!m)
		fail_msg("paged only: %s", err);
	assert_true(model_is_paged(m));
	assert_true(model_is_stateful(m));
	assert_true(model_has_logits(m));
	/* the contiguous calls say so instead of calling NULL */
	assert_int_equal(model_bind(m, 4, 100, err, sizeof(err)), -ENOTSUP);
	assert_non_null(strstr(err, "runs only paged"));
	assert_int_equal(model_step(m, 0, NULL, NULL, NULL), -ENOTSUP);
	model_release(m, 0);
	model_close(m);

	/* what a paged table cannot leave out */
	t = paged_table();
	t.bind_paged = NULL;
	assert_null(open_table(&t, "", err, sizeof(err)));
	assert_non_null(strstr(err, "model 'simkv' leaves bind_paged() NULL"));
	assert_non_null(strstr(err, "step_paged()"));
	t = paged_table();
	t.kv_bytes_per_token = NULL;
	assert_null(open_table(&t, "", err, sizeof(err)));
	assert_non_null(strstr(err, "model 'simkv' leaves kv_bytes_per_token() NULL"));
	t = paged_table();
	fake_kv_bytes = 0;
	assert_null(open_table(&t, "", err, sizeof(err)));
	assert_non_null(strstr(err, "model 'simkv' sets step_paged() but its kv_bytes_per_token() gives 0"));
	assert_null(strchr(err, '\n'));
	fake_kv_bytes = 24;
	t.step = NULL;
	t.logits = sim_model_api()->logits;
	assert_null(open_table(&t, "", err, sizeof(err)));
	assert_non_null(strstr(err, "model 'simkv' sets both step_paged() and logits()"));
	/* a stateful table still needs bind() beside step_paged() */
	t = paged_table();
	t.bind = NULL;
	assert_null(open_table(&t, "", err, sizeof(err)));
	assert_non_null(strstr(err, "leaves bind() NULL"));

	/* kv_bytes_per_token() without step_paged(): not paged */
	t = paged_table();
	t.step_paged = NULL;
	m = open_table(&t, "", err, sizeof(err));
	if (!m)
		fail_msg("version 4, not paged: %s", err);
	assert_false(model_is_paged(m));
	assert_true(model_is_stateful(m));
	assert_int_equal(model_kv_bytes_per_token(m), 0);
	seen.binds = 0;
	assert_int_equal(model_bind_paged(m, pool, 7, 16, 300, 5, err, sizeof(err)), -ENOTSUP);
	assert_int_equal(model_step_paged(m, 1, &row, NULL, &refusal), -ENOTSUP);
	assert_int_equal(seen.binds, 0);
	model_close(m);

	/* version 3 ends at logits: the paged fields are never read, not
	 * even a kv_bytes_per_token() that would refuse the table */
	t = paged_table();
	t.abi_version = 3;
	fake_kv_bytes = 0;
	m = open_table(&t, "", err, sizeof(err));
	if (!m)
		fail_msg("version 3 with paged fields: %s", err);
	assert_false(model_is_paged(m));
	assert_int_equal(model_kv_bytes_per_token(m), 0);
	assert_int_equal(model_step_paged(m, 1, &row, NULL, &refusal), -ENOTSUP);
	model_close(m);
	t.step = NULL;		/* ... so without step() it is a token model */
	t.next = sim_model_api()->next;
	m = open_table(&t, "", err, sizeof(err));
	if (!m)
		fail_msg("version 3 token model with paged fields: %s", err);
	assert_false(model_is_stateful(m));
	model_close(m);
	fake_kv_bytes = 24;
}

/* What model_logits() makes of a failing hook: its errno, or -EIO. */
static void test_logits_errors(void **state)
{
	struct dynbatch_model_api t = *sim_model_api();
	static const int32_t p[] = { 1 };
	const int32_t *const one[1] = { p };
	const uint32_t len1[1] = { 1 };
	float out[16];
	char err[512];
	struct model *m;

	t.logits = failing_logits;
	m = open_table(&t, "vocab=16", err, sizeof(err));
	if (!m)
		fail_msg("%s", err);
	hook_ret = -ENOSPC;
	assert_int_equal(model_logits(m, 1, one, len1, out), -ENOSPC);
	hook_ret = 3;
	assert_int_equal(model_logits(m, 1, one, len1, out), -EIO);
	hook_ret = 0;
	assert_int_equal(model_logits(m, 1, one, len1, out), 0);
	model_close(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sim_default),
		cmocka_unit_test(test_sim_args),
		cmocka_unit_test(test_sim_batch),
		cmocka_unit_test(test_bad_specs),
		cmocka_unit_test(test_not_a_plugin),
		cmocka_unit_test(test_close_null),
		cmocka_unit_test(test_plugin),
		cmocka_unit_test(test_plugin_defaults),
		cmocka_unit_test(test_plugin_twice),
		cmocka_unit_test(test_plugin_bad_args),
		cmocka_unit_test(test_has_logits),
		cmocka_unit_test(test_table_versions),
		cmocka_unit_test(test_logits_errors),
		cmocka_unit_test(test_table_paged),
	};

	test_seed_init("test_model_loader");
	find_plugin();
	printf("test_model_loader: plugin %s\n", plugin_path);
	return cmocka_run_group_tests_name("model_loader", tests, NULL, NULL);
}
