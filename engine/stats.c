/*
 * stats.c - see stats.h.  The latency histogram has 64 buckets per power
 * of two (under 1.6% apart), enough for p50/p99 without storing every
 * sample: memory stays fixed however many requests pass.
 */
#include "engine/stats.h"

#include <errno.h>
#include <math.h>
#include <string.h>

const char *const finish_reason_names[FINISH_N] = {
	"stop", "length", "error", "cancelled"
};

#define LATENCY_SUB (1u << LATENCY_SUB_BITS)	/* buckets per power of two */

/* ns below LATENCY_SUB have a bucket each; above, [2^lg, 2^(lg+1)) is cut
 * into LATENCY_SUB equal buckets. */
static unsigned latency_bucket(uint64_t ns)
{
	unsigned lg, sub, b;

	if (ns < LATENCY_SUB)
		return (unsigned)ns;
	lg = 63u - (unsigned)__builtin_clzll(ns);	/* >= LATENCY_SUB_BITS */
	sub = (unsigned)(ns >> (lg - LATENCY_SUB_BITS)) & (LATENCY_SUB - 1);
	b = (lg - LATENCY_SUB_BITS + 1) * LATENCY_SUB + sub;
	return b < LATENCY_BUCKETS ? b : LATENCY_BUCKETS - 1;
}

/* The largest ns that falls in bucket b. */
static uint64_t latency_bucket_top(unsigned b)
{
	unsigned lg, sub;

	if (b < LATENCY_SUB)
		return b;
	lg = b / LATENCY_SUB + LATENCY_SUB_BITS - 1;
	sub = b % LATENCY_SUB;
	return ((uint64_t)(LATENCY_SUB + sub + 1) << (lg - LATENCY_SUB_BITS)) - 1;
}

void stats_record_latency(struct engine_stats *s, uint64_t ns)
{
	s->latency_hist[latency_bucket(ns)]++;
	s->n_latency++;
}

uint64_t stats_latency_quantile(const struct engine_stats *s, double q)
{
	uint64_t want, seen = 0;

	if (!s->n_latency)
		return 0;
	want = (uint64_t)ceil(q * (double)s->n_latency);
	if (want < 1)
		want = 1;
	for (unsigned b = 0; b < LATENCY_BUCKETS; b++) {
		seen += s->latency_hist[b];
		if (seen >= want)
			return latency_bucket_top(b);
	}
	return latency_bucket_top(LATENCY_BUCKETS - 1);
}

static double stats_wall_s(const struct engine_stats *s)
{
	return (double)(s->end_ns - s->start_ns) / 1e9;
}

static double stats_occupancy(const struct engine_stats *s)
{
	return s->n_step_capacity ? (double)s->n_step_rows / (double)s->n_step_capacity : 0;
}

/* The rate is over the wall time from start to end, idle included (a
 * server that waited for clients reads low): said so in the line. */
void stats_print_summary(const struct engine_stats *s, FILE *f)
{
	double wall = stats_wall_s(s);
	uint64_t n = 0;

	for (int i = 0; i < FINISH_N; i++)
		n += s->n_finished[i];
	fprintf(f, "dynbatch: %llu requests (stop %llu, length %llu, error %llu, "
		"cancelled %llu), %llu tokens in %.3f s of uptime = %.0f "
		"tokens/s over uptime (idle time included)\n",
		(unsigned long long)n, (unsigned long long)s->n_finished[FINISH_STOP],
		(unsigned long long)s->n_finished[FINISH_LENGTH],
		(unsigned long long)s->n_finished[FINISH_ERROR],
		(unsigned long long)s->n_finished[FINISH_CANCELLED],
		(unsigned long long)s->n_tokens, wall,
		wall > 0 ? (double)s->n_tokens / wall : 0);
	fprintf(f, "dynbatch: %llu steps, mean batch occupancy %.3f, %llu stale "
		"results rejected, %llu run-ahead rows discarded, %llu worker "
		"deaths (%llu hang kills), "
		"%llu poisoned requests, latency p50 %.3f ms p99 %.3f ms\n",
		(unsigned long long)s->n_steps, stats_occupancy(s),
		(unsigned long long)s->n_stale,
		(unsigned long long)s->n_discarded,
		(unsigned long long)s->n_worker_deaths,
		(unsigned long long)s->n_hang_kills,
		(unsigned long long)s->n_poisoned,
		(double)stats_latency_quantile(s, 0.5) / 1e6,
		(double)stats_latency_quantile(s, 0.99) / 1e6);
	if (s->spec.on)
		fprintf(f, "dynbatch: speculation: %llu tokens guessed, %llu "
			"accepted (%.1f%%), %llu rows checked them\n",
			(unsigned long long)s->spec.drafted,
			(unsigned long long)s->spec.accepted,
			s->spec.drafted ? 100.0 * (double)s->spec.accepted /
					  (double)s->spec.drafted : 0.0,
			(unsigned long long)s->spec.verify_rows);
	if (s->kv.block_tokens)
		fprintf(f, "dynbatch: kv: %u blocks of %u tokens per shard, peak %u "
			"used; %llu of %llu prompt tokens from the prefix cache, "
			"%llu shared by forks, %llu copies on write, %llu preemptions, %llu evictions\n",
			s->kv.blocks, s->kv.block_tokens, s->kv.peak_used_blocks,
			(unsigned long long)s->kv.prefix_hit_tokens,
			(unsigned long long)s->kv.prompt_tokens,
			(unsigned long long)s->kv.fork_tokens,
			(unsigned long long)s->kv.cow_copies,
			(unsigned long long)s->kv.preemptions,
			(unsigned long long)s->kv.evictions);
	/* a bare count of errors sends the user hunting: say where the
	 * reasons are */
	if (s->n_finished[FINISH_ERROR])
		fprintf(f, "dynbatch: %llu requests ended in error: each one's "
			"result says why in its \"error\" field\n",
			(unsigned long long)s->n_finished[FINISH_ERROR]);
}

/* The "kv" object of --stats (nothing when the model is not paged). */
static void stats_write_kv_json(const struct stats_kv *kv, FILE *f)
{
	if (!kv->block_tokens)
		return;
	fprintf(f, ",\"kv\":{\"block_tokens\":%u,\"blocks\":%u,"
		"\"peak_used_blocks\":%u,\"prompt_tokens\":%llu,"
		"\"prefix_hit_tokens\":%llu,\"fork_tokens\":%llu,\"cow_copies\":%llu,"
		"\"preemptions\":%llu,\"evictions\":%llu}",
		kv->block_tokens, kv->blocks, kv->peak_used_blocks,
		(unsigned long long)kv->prompt_tokens,
		(unsigned long long)kv->prefix_hit_tokens,
		(unsigned long long)kv->fork_tokens,
		(unsigned long long)kv->cow_copies,
		(unsigned long long)kv->preemptions,
		(unsigned long long)kv->evictions);
}

/* The "spec" object of --stats (nothing with --speculate off). */
static void stats_write_spec_json(const struct stats_spec *sp, FILE *f)
{
	if (!sp->on)
		return;
	fprintf(f, ",\"spec\":{\"drafted\":%llu,\"accepted\":%llu,"
		"\"emitted\":%llu,\"verify_rows\":%llu,\"target_steps\":%llu,"
		"\"draft_ms\":%.3f,\"verify_ms\":%.3f}",
		(unsigned long long)sp->drafted, (unsigned long long)sp->accepted,
		(unsigned long long)sp->emitted, (unsigned long long)sp->verify_rows,
		(unsigned long long)sp->target_steps, (double)sp->draft_ns / 1e6,
		(double)sp->verify_ns / 1e6);
}

int stats_write_json(const struct engine_stats *s, const char *path)
{
	FILE *f = fopen(path, "w");
	double wall = stats_wall_s(s);
	int ret = 0;

	if (!f)
		return -errno;
	fprintf(f, "{\"requests\":{");
	for (int i = 0; i < FINISH_N; i++)
		fprintf(f, "%s\"%s\":%llu", i ? "," : "", finish_reason_names[i],
			(unsigned long long)s->n_finished[i]);
	fprintf(f, "},\"tokens\":%llu,\"wall_s\":%.6f,\"tokens_per_s\":%.1f,"
		"\"steps\":%llu,\"mean_batch_occupancy\":%.4f,"
		"\"stale_results_rejected\":%llu,\"worker_deaths\":%llu,"
		"\"hang_kills\":%llu,\"worker_starts\":%llu,\"poisoned\":%llu,"
		"\"coordinator_cpu_user_us\":%llu,\"coordinator_cpu_sys_us\":%llu,"
		"\"coordinator_max_rss_kb\":%llu,"
		"\"latency_p50_ms\":%.3f,\"latency_p99_ms\":%.3f,"
		"\"mean_refill_us\":%.3f,\"model_s\":%.6f,\"step_s\":%.6f,"
		"\"coordinator_dozes\":%llu,\"runahead_rows_discarded\":%llu,"
		"\"fruitless_kills\":%llu,\"grammar_refused\":%llu",
		(unsigned long long)s->n_tokens, wall,
		wall > 0 ? (double)s->n_tokens / wall : 0,
		(unsigned long long)s->n_steps, stats_occupancy(s),
		(unsigned long long)s->n_stale,
		(unsigned long long)s->n_worker_deaths,
		(unsigned long long)s->n_hang_kills,
		(unsigned long long)s->n_worker_starts,
		(unsigned long long)s->n_poisoned,
		(unsigned long long)s->cpu_user_us, (unsigned long long)s->cpu_sys_us,
		(unsigned long long)s->max_rss_kb,
		(double)stats_latency_quantile(s, 0.5) / 1e6,
		(double)stats_latency_quantile(s, 0.99) / 1e6,
		s->n_refills ? (double)s->refill_ns_sum / (double)s->n_refills / 1e3 : 0,
		(double)s->model_ns / 1e9, (double)s->step_ns / 1e9,
		(unsigned long long)s->n_dozes,
		(unsigned long long)s->n_discarded,
		(unsigned long long)s->n_fruitless_kills,
		(unsigned long long)s->grammar_refused);
	stats_write_kv_json(&s->kv, f);
	stats_write_spec_json(&s->spec, f);
	fprintf(f, "}\n");
	if (ferror(f))
		ret = -EIO;
	if (fclose(f) && !ret)
		ret = -errno;
	return ret;
}

void stats_print_progress(const struct engine_stats *s, uint64_t now_ns,
			  uint32_t n_waiting, uint32_t n_busy, FILE *f)
{
	double wall = (double)(now_ns - s->start_ns) / 1e9;
	uint64_t n = 0;

	for (int i = 0; i < FINISH_N; i++)
		n += s->n_finished[i];
	fprintf(f, "\r\033[Kdynbatch: %llu done, %u waiting, %u busy slots, "
		"%.0f tokens/s", (unsigned long long)n, n_waiting, n_busy,
		wall > 0 ? (double)s->n_tokens / wall : 0);
	fflush(f);
}
