/*
 * stats.h - what the coordinator counts, and the summary it prints at the
 * end (stderr), writes as JSON (--stats FILE) and refreshes as a one-line
 * progress display while it runs on a terminal.
 */
#ifndef DYNBATCH_STATS_H
#define DYNBATCH_STATS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum finish_reason {
	FINISH_STOP = 0,
	FINISH_LENGTH,
	FINISH_ERROR,
	FINISH_CANCELLED,
	FINISH_N
};

extern const char *const finish_reason_names[FINISH_N];

/* Latency buckets: 2^LATENCY_SUB_BITS (64) per power of two, ns scale, up
 * to 2^40 ns (18 minutes); longer latencies count in the last bucket. */
#define LATENCY_SUB_BITS 6
#define LATENCY_BUCKETS ((40u - LATENCY_SUB_BITS + 1) << LATENCY_SUB_BITS)

/* The paged KV cache's counts (docs/usage.md, "kv" in --stats). */
struct stats_kv {
	uint32_t block_tokens;		/* 0: the model is not paged */
	uint32_t blocks;		/* per shard pool */
	uint32_t peak_used_blocks;	/* the most one shard used at once */
	uint64_t prompt_tokens;		/* of placed requests (resumes too) */
	uint64_t prefix_hit_tokens;	/* of which taken from the cache */
	uint64_t fork_tokens;		/* of which shared by forks (n > 1) */
	uint64_t cow_copies;		/* blocks copied on write (forks) */
	uint64_t preemptions;
	uint64_t evictions;		/* cached blocks reused for others */
};

/* Speculative decoding (docs/DESIGN.md 2.7); on = 0: --speculate off. */
struct stats_spec {
	bool on;
	uint64_t drafted;		/* tokens guessed */
	uint64_t accepted;		/* of which the model confirmed */
	uint64_t emitted;		/* tokens given to rows that guessed */
	uint64_t verify_rows;		/* row-steps that checked guesses */
	uint64_t target_steps;		/* model steps in which a row guessed */
	uint64_t draft_ns, verify_ns;	/* guessing; those steps' model time */
};

struct engine_stats {
	uint64_t n_finished[FINISH_N];	/* result lines by finish reason */
	uint64_t n_tokens;		/* tokens committed (generated) */
	uint64_t n_steps;		/* model steps completed */
	uint64_t n_step_rows;		/* rows over all completed steps */
	uint64_t n_step_capacity;	/* shard slots over all completed steps */
	uint64_t model_ns;		/* time inside model_next(), all steps */
	uint64_t step_ns;		/* dispatch -> result seen, all steps */
	uint64_t n_stale;		/* result rows or records rejected as
					 * invalid (garbled, out of range) */
	uint64_t n_discarded;		/* result rows or records run ahead
					 * and made obsolete (the request
					 * ended, a reset, a newer dispatch,
					 * the worker died): not a fault */
	uint64_t n_fruitless_kills;	/* workers killed for posting results
					 * that committed nothing, many in a
					 * row (no request blamed) */
	uint64_t n_worker_deaths;
	uint64_t grammar_refused;	/* tokens a worker gave that the
					 * request's grammar refused (each
					 * ended its request: DESIGN 2.8) */
	uint64_t n_hang_kills;		/* workers killed past the step timeout */
	uint64_t n_worker_starts;
	uint64_t n_poisoned;		/* requests failed as poison */
	uint64_t n_dozes;		/* sleeps on the step timer (long steps) */
	uint64_t start_ns, end_ns;
	uint64_t cpu_user_us, cpu_sys_us; /* coordinator CPU at the end */
	uint64_t max_rss_kb;		/* coordinator peak resident set */
	uint64_t refill_ns_sum;		/* slot freed -> slot refilled */
	uint64_t n_refills;
	uint64_t latency_hist[LATENCY_BUCKETS]; /* admission -> last token */
	uint64_t n_latency;
	struct stats_kv kv;
	struct stats_spec spec;
};

void stats_record_latency(struct engine_stats *s, uint64_t ns);
/* Latency at quantile q in [0,1], ns (bucket upper bound). */
uint64_t stats_latency_quantile(const struct engine_stats *s, double q);

void stats_print_summary(const struct engine_stats *s, FILE *f);
/* 0 or a negative errno. */
int stats_write_json(const struct engine_stats *s, const char *path);
/* One "\r..." progress line on f. */
void stats_print_progress(const struct engine_stats *s, uint64_t now_ns,
			  uint32_t n_waiting, uint32_t n_busy, FILE *f);

#endif /* DYNBATCH_STATS_H */
