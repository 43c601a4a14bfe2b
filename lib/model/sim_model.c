/*
 * sim_model.c - the built-in simulated model (docs/DESIGN.md 2.1); see
 * sim_model.h for the keys it takes.
 *
 * NOTES ON THE DESIGN
 *
 * sim_mix(), sim_next() and sim_logits() are normative: the tests, the
 * reference decoder and the acceptance checks recompute them bit for bit,
 * so they are the definition of docs/DESIGN.md 2.1, bit for bit, and must
 * never change.
 *
 * next() is on the engine's hot path, once per shard per step, so it does
 * not allocate, lock or log.  It runs in three phases, in this order:
 *   1. faults: a row whose prefix ends in crash_token abort()s the process,
 *      one that ends in hang_token never returns (the poison requests of
 *      docs/DESIGN.md 9.3);
 *   2. cost: call_us + row_us * n_rows + token_ns * sum(lengths), spent by
 *      spinning on CLOCK_MONOTONIC (a CPU-bound model) or by one absolute
 *      clock_nanosleep (a model waiting on an accelerator); the sum
 *      saturates instead of wrapping, so an absurd setting means "forever",
 *      never "free";
 *   3. tokens: sim_next() of every row.
 * logits() is next() with sim_logits() in phase 3.
 *
 * sim_config_parse() does not copy or modify its input: it walks the
 * string with pointer + length pairs, so error messages quote the exact
 * bytes the user typed.
 */
#include "model/sim_model.h"
#include "util/parse_num.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SIM_DEFAULT_VOCAB 32000u
#define SIM_MAX_VOCAB 2147483647ull	/* tokens are int32_t */
#define SIM_MAX_TOKEN 2147483647ull
#define NS_PER_SEC 1000000000ull

/* ---------------------------------------------------------------- hash */

uint64_t sim_mix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* The 64-bit hash of the prefix that sim_next() reduces modulo vocab. */
static uint64_t sim_hash(const int32_t *p, size_t n, uint64_t seed)
{
	uint64_t h = sim_mix(seed ^ (uint64_t)n);

	for (size_t i = n > 4 ? n - 4 : 0; i < n; i++)
		h = sim_mix(h ^ (uint64_t)(uint32_t)p[i]);
	return h;
}

int32_t sim_next(const int32_t *p, size_t n, uint32_t vocab, uint64_t seed)
{
	return (int32_t)(sim_hash(p, n, seed) % vocab);
}

/* Leading zero bits of x; 64 for 0 (where __builtin_clzll is undefined). */
static unsigned sim_clz64(uint64_t x)
{
	return x ? (unsigned)__builtin_clzll(x) : 64u;
}

void sim_logits(const int32_t *p, size_t n, uint32_t vocab, uint64_t seed,
		float *out)
{
	uint64_t h = sim_hash(p, n, seed);
	uint32_t t = (uint32_t)(h % vocab);
	uint64_t h0 = sim_mix(h ^ SIM_LOGITS_SALT);
	/* the bit length of vocab: how deep the levels go (see the header) */
	int depth = 64 - (int)sim_clz64(vocab);

	for (uint32_t v = 0; v < vocab; v++) {
		uint64_t r = sim_mix(h0 + v);
		int level = (int)sim_clz64(r);

		if (level > depth)
			level = depth;
		/* an integer of at most 9 bits over 8: exact in a float */
		out[v] = (float)(8 * (level - depth) + (int)(r & 7)) * 0.125f;
	}
	out[t] = 1.0f;
}

/* -------------------------------------------------------------- config */

void sim_config_default(struct sim_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->vocab = SIM_DEFAULT_VOCAB;
}

static bool sim_key_is(const char *key, size_t key_len, const char *name)
{
	return strlen(name) == key_len && memcmp(key, name, key_len) == 0;
}

/* Apply one key=value to cfg.  0, or -EINVAL after writing err. */
static int sim_config_apply(struct sim_config *cfg, const char *key,
			    size_t key_len, const char *val, size_t val_len,
			    char *err, size_t err_len)
{
	uint64_t v;

	if (sim_key_is(key, key_len, "mode")) {
		if (val_len == 4 && memcmp(val, "spin", 4) == 0)
			cfg->mode_sleep = false;
		else if (val_len == 5 && memcmp(val, "sleep", 5) == 0)
			cfg->mode_sleep = true;
		else
			goto out_bad_value;
		return 0;
	}
	if (sim_key_is(key, key_len, "vocab")) {
		if (parse_u64_n(val, val_len, 1, SIM_MAX_VOCAB, &v))
			goto out_bad_value;
		cfg->vocab = (uint32_t)v;
	} else if (sim_key_is(key, key_len, "seed")) {
		if (parse_u64_n(val, val_len, 0, UINT64_MAX, &cfg->seed))
			goto out_bad_value;
	} else if (sim_key_is(key, key_len, "call_us")) {
		if (parse_u64_n(val, val_len, 0, UINT64_MAX, &cfg->call_us))
			goto out_bad_value;
	} else if (sim_key_is(key, key_len, "row_us")) {
		if (parse_u64_n(val, val_len, 0, UINT64_MAX, &cfg->row_us))
			goto out_bad_value;
	} else if (sim_key_is(key, key_len, "token_ns")) {
		if (parse_u64_n(val, val_len, 0, UINT64_MAX, &cfg->token_ns))
			goto out_bad_value;
	} else if (sim_key_is(key, key_len, "crash_token")) {
		if (parse_u64_n(val, val_len, 0, SIM_MAX_TOKEN, &v))
			goto out_bad_value;
		cfg->has_crash_token = true;
		cfg->crash_token = (int32_t)v;
	} else if (sim_key_is(key, key_len, "hang_token")) {
		if (parse_u64_n(val, val_len, 0, SIM_MAX_TOKEN, &v))
			goto out_bad_value;
		cfg->has_hang_token = true;
		cfg->hang_token = (int32_t)v;
	} else {
		if (err && err_len)
			snprintf(err, err_len,
				 "sim: unknown key '%.*s' (expected vocab, seed, call_us, row_us, token_ns, mode, crash_token or hang_token)",
				 (int)key_len, key);
		return -EINVAL;
	}
	return 0;

out_bad_value:
	if (err && err_len)
		snprintf(err, err_len, "sim: bad value '%.*s' for key '%.*s'",
			 (int)val_len, val, (int)key_len, key);
	return -EINVAL;
}

int sim_config_parse(const char *args, struct sim_config *cfg, char *err,
		     size_t err_len)
{
	const char *p = args ? args : "";

	sim_config_default(cfg);
	if (err && err_len)
		err[0] = '\0';
	if (!*p)
		return 0;
	for (;;) {
		size_t item_len = strcspn(p, ",");
		const char *eq = memchr(p, '=', item_len);
		int ret;

		/* a stray ',' is more likely a typo than an intended no-op */
		if (item_len == 0) {
			if (err && err_len)
				snprintf(err, err_len,
					 "sim: empty entry in '%s' (expected key=value,...)",
					 args);
			return -EINVAL;
		}
		if (!eq) {
			if (err && err_len)
				snprintf(err, err_len,
					 "sim: missing '=' in '%.*s' (expected key=value)",
					 (int)item_len, p);
			return -EINVAL;
		}
		ret = sim_config_apply(cfg, p, (size_t)(eq - p), eq + 1,
				       item_len - (size_t)(eq - p) - 1,
				       err, err_len);
		if (ret)
			return ret;
		p += item_len;
		if (!*p)
			return 0;
		p++;		/* the ',' */
	}
}

/* --------------------------------------------------------------- model */

struct sim_model {
	struct sim_config cfg;
};

static void *sim_create(const char *args, char *err, size_t err_len)
{
	struct sim_model *sm;

	sm = malloc(sizeof(*sm));
	if (!sm) {
		if (err && err_len)
			snprintf(err, err_len, "sim: out of memory");
		return NULL;
	}
	if (sim_config_parse(args, &sm->cfg, err, err_len)) {
		free(sm);
		return NULL;
	}
	return sm;
}

static uint32_t sim_vocab(void *model)
{
	const struct sim_model *sm = model;

	return sm->cfg.vocab;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	uint64_t r;

	return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
	uint64_t r;

	return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* The cost of one call in nanoseconds, saturating at UINT64_MAX. */
static uint64_t sim_cost_ns(const struct sim_config *cfg, uint32_t n_rows,
			    const uint32_t *lengths)
{
	uint64_t n_tokens = 0;
	uint64_t ns;

	for (uint32_t i = 0; i < n_rows; i++)
		n_tokens += lengths[i];
	ns = sat_mul(cfg->call_us, 1000);
	ns = sat_add(ns, sat_mul(sat_mul(cfg->row_us, 1000), n_rows));
	return sat_add(ns, sat_mul(cfg->token_ns, n_tokens));
}

/*
 * A sleeping thread wakes late on a small VM (a 2 ms sleep by 136-152 us
 * on average on the development VM), so a plain sleep would make the sim
 * model slower than its configured cost.  Sleep mode
 * therefore sleeps until SIM_WAKE_EARLY_NS before the deadline and spins
 * the rest: the call then takes its configured time, as a model whose
 * accelerator driver polls for completion does.
 */
#define SIM_WAKE_EARLY_NS 150000ull

static uint64_t ts_to_ns(const struct timespec *ts)
{
	return (uint64_t)ts->tv_sec * NS_PER_SEC + (uint64_t)ts->tv_nsec;
}

static struct timespec ns_to_ts(uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / NS_PER_SEC),
			       .tv_nsec = (long)(ns % NS_PER_SEC) };

	return ts;
}

/* Spin or sleep until cost_ns have passed since the call began. */
static void sim_spend(const struct sim_config *cfg, uint64_t cost_ns)
{
	struct timespec now;
	uint64_t start, deadline;

	if (!cost_ns)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	start = ts_to_ns(&now);
	deadline = sat_add(start, cost_ns);
	if (cfg->mode_sleep && cost_ns > SIM_WAKE_EARLY_NS) {
		struct timespec wake = ns_to_ts(deadline - SIM_WAKE_EARLY_NS);

		/* returns the error number itself, not -1 and errno */
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &wake,
				       NULL) == EINTR)
			;
	}
	do {
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (ts_to_ns(&now) < deadline);
}

/* Crash or hang if a row's prefix ends in the configured poison token. */
static void sim_faults(const struct sim_config *cfg, uint32_t n_rows,
		       const int32_t *const *prefixes, const uint32_t *lengths)
{
	if (!cfg->has_crash_token && !cfg->has_hang_token)
		return;
	for (uint32_t i = 0; i < n_rows; i++) {
		int32_t last;

		if (lengths[i] == 0)
			continue;
		last = prefixes[i][lengths[i] - 1];
		if (cfg->has_crash_token && last == cfg->crash_token)
			abort();
		if (cfg->has_hang_token && last == cfg->hang_token) {
			/* "stops answering": signals are handled, never escaped */
			for (;;)
				pause();
		}
	}
}

void sim_act(const struct sim_config *cfg, uint32_t n_rows,
	     const int32_t *const *prefixes, const uint32_t *lengths)
{
	uint64_t cost_ns;

	sim_faults(cfg, n_rows, prefixes, lengths);
	cost_ns = sim_cost_ns(cfg, n_rows, lengths);
	if (cost_ns)
		sim_spend(cfg, cost_ns);
}

/* The rows a caller hands next() or logits(), checked; 0 or -EINVAL. */
static int sim_check_rows(const struct sim_model *sm, uint32_t n_rows,
			  const int32_t *const *prefixes,
			  const uint32_t *lengths, const void *out)
{
	if (!sm || (n_rows && (!prefixes || !lengths || !out)))
		return -EINVAL;
	for (uint32_t i = 0; i < n_rows; i++)
		if (lengths[i] && !prefixes[i])
			return -EINVAL;
	return 0;
}

static int sim_model_next(void *model, uint32_t n_rows,
			  const int32_t *const *prefixes,
			  const uint32_t *lengths, int32_t *next_tokens)
{
	const struct sim_model *sm = model;

	if (sim_check_rows(sm, n_rows, prefixes, lengths, next_tokens))
		return -EINVAL;
	sim_act(&sm->cfg, n_rows, prefixes, lengths);
	for (uint32_t i = 0; i < n_rows; i++)
		next_tokens[i] = sim_next(prefixes[i], lengths[i],
					  sm->cfg.vocab, sm->cfg.seed);
	return 0;
}

/* next(), but the logits of each row (sim_logits()); the same faults
 * and cost, so crash_token and hang_token fire on sampled rows too. */
static int sim_model_logits(void *model, uint32_t n_rows,
			    const int32_t *const *prefixes,
			    const uint32_t *lengths, float *logits)
{
	const struct sim_model *sm = model;

	if (sim_check_rows(sm, n_rows, prefixes, lengths, logits))
		return -EINVAL;
	sim_act(&sm->cfg, n_rows, prefixes, lengths);
	for (uint32_t i = 0; i < n_rows; i++)
		sim_logits(prefixes[i], lengths[i], sm->cfg.vocab, sm->cfg.seed,
			   logits + (size_t)i * sm->cfg.vocab);
	return 0;
}

static void sim_destroy(void *model)
{
	free(model);
}

static const struct dynbatch_model_api sim_api = {
	.abi_version = DYNBATCH_MODEL_ABI_VERSION,
	.name = "sim",
	.create = sim_create,
	.vocab = sim_vocab,
	.next = sim_model_next,
	.destroy = sim_destroy,
	.logits = sim_model_logits,
};

const struct dynbatch_model_api *sim_model_api(void)
{
	return &sim_api;
}
