/*
 * token_bucket.h - a token bucket as pure functions of (state, now_ns):
 * the caller passes the clock, so a test can drive it.
 *
 * The bucket holds at most `burst` tokens and refills at `per_minute`
 * tokens a minute.  The level is kept exactly, in token-nanoseconds per
 * minute (tokens x 60e9), so no refill is lost to rounding however often
 * it is read.  Guarantee: over any window of w ns, tokens taken minus
 * tokens given back <= per_minute x w / 60e9 + burst.
 */
#ifndef DYNBATCH_TOKEN_BUCKET_H
#define DYNBATCH_TOKEN_BUCKET_H

#include <stdint.h>

/* The most a bucket may hold or refill a minute (so that levels in
 * token-ns fit 64 bits: 1e8 x 6e10 < 2^63). */
#define TOKEN_BUCKET_MAX 100000000ull
#define TOKEN_BUCKET_MINUTE_NS 60000000000ull

struct token_bucket {
	uint64_t per_minute;		/* refill rate, tokens a minute, >= 1 */
	uint64_t burst;			/* capacity, tokens, >= 1 */
	uint64_t level;			/* tokens x 60e9, <= burst x 60e9 */
	uint64_t last_ns;		/* the clock when level was last set */
};

/* A full bucket at now_ns; per_minute and burst in [1, TOKEN_BUCKET_MAX]. */
void token_bucket_init(struct token_bucket *b, uint64_t per_minute,
		       uint64_t burst, uint64_t now_ns);
/* Whole tokens available at now_ns (refills first). */
uint64_t token_bucket_available(struct token_bucket *b, uint64_t now_ns);
/* Take n tokens at now_ns: 0, -E2BIG when n > burst (never fits), or
 * -EAGAIN when fewer are there now (nothing taken). */
int token_bucket_take(struct token_bucket *b, uint64_t n, uint64_t now_ns);
/* Give n tokens back at now_ns (a refund); the level stays <= burst. */
void token_bucket_give(struct token_bucket *b, uint64_t n, uint64_t now_ns);
/* Nanoseconds from now_ns until n tokens are there (0: now); n <= burst. */
uint64_t token_bucket_wait_ns(struct token_bucket *b, uint64_t n,
			      uint64_t now_ns);

#endif /* DYNBATCH_TOKEN_BUCKET_H */
