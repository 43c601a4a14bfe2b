/*
 * log_limit.h - keep a warning that another process can trigger at will
 * (a worker's rejected result, say) from flooding the log.
 *
 * The first LOG_LIMIT_BURST messages of a kind pass; after that at most
 * one a second, which reports how many were held back since the last one
 * that passed.  One struct log_limit per kind of message (per shard, per
 * call site): a quiet kind never shares a budget with a noisy one.
 */
#ifndef DYNBATCH_LOG_LIMIT_H
#define DYNBATCH_LOG_LIMIT_H

#include <stdbool.h>
#include <stdint.h>

#define LOG_LIMIT_BURST 5u			/* messages that always pass */
#define LOG_LIMIT_PERIOD_NS 1000000000ull	/* then one per period */

struct log_limit {
	uint32_t n_passed;		/* messages let through, up to the burst */
	uint64_t last_pass_ns;		/* when the last one passed */
	uint64_t n_held;		/* held back since the last one passed */
};

/*
 * May a message of this kind be logged at now_ns?  When true, *n_held gets
 * how many were held back before it (to be said in the message) and the
 * count starts again; when false the message is counted as held back.
 */
bool log_limit_pass(struct log_limit *l, uint64_t now_ns, uint64_t *n_held);

#endif /* DYNBATCH_LOG_LIMIT_H */
