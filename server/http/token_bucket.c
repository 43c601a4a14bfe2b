/*
 * token_bucket.c - see token_bucket.h.
 */
#include "server/http/token_bucket.h"

#include <errno.h>

static uint64_t cap_of(const struct token_bucket *b)
{
	return b->burst * TOKEN_BUCKET_MINUTE_NS;
}

void token_bucket_init(struct token_bucket *b, uint64_t per_minute,
		       uint64_t burst, uint64_t now_ns)
{
	b->per_minute = per_minute ? per_minute : 1;
	b->burst = burst ? burst : 1;
	b->level = cap_of(b);
	b->last_ns = now_ns;
}

/* Add what flowed in since last_ns, up to the capacity.  A clock that
 * went back adds nothing (and moves last_ns back, so nothing is added
 * twice when it comes forward again). */
static void refill(struct token_bucket *b, uint64_t now_ns)
{
	uint64_t dt = now_ns > b->last_ns ? now_ns - b->last_ns : 0;
	uint64_t room = cap_of(b) - b->level;

	b->last_ns = now_ns;
	/* dt x per_minute may overflow: compare by division first */
	if (dt >= room / b->per_minute + 1)
		b->level = cap_of(b);
	else
		b->level += dt * b->per_minute < room ? dt * b->per_minute : room;
}

uint64_t token_bucket_available(struct token_bucket *b, uint64_t now_ns)
{
	refill(b, now_ns);
	return b->level / TOKEN_BUCKET_MINUTE_NS;
}

int token_bucket_take(struct token_bucket *b, uint64_t n, uint64_t now_ns)
{
	if (n > b->burst)
		return -E2BIG;
	refill(b, now_ns);
	if (b->level < n * TOKEN_BUCKET_MINUTE_NS)
		return -EAGAIN;
	b->level -= n * TOKEN_BUCKET_MINUTE_NS;
	return 0;
}

void token_bucket_give(struct token_bucket *b, uint64_t n, uint64_t now_ns)
{
	uint64_t room;

	refill(b, now_ns);
	room = cap_of(b) - b->level;
	/* n beyond burst would overflow the product; it fills it anyway */
	if (n >= b->burst || n * TOKEN_BUCKET_MINUTE_NS >= room)
		b->level = cap_of(b);
	else
		b->level += n * TOKEN_BUCKET_MINUTE_NS;
}

uint64_t token_bucket_wait_ns(struct token_bucket *b, uint64_t n,
			      uint64_t now_ns)
{
	uint64_t need;

	if (n > b->burst)
		n = b->burst;
	refill(b, now_ns);
	need = n * TOKEN_BUCKET_MINUTE_NS;
	if (b->level >= need)
		return 0;
	/* rounded up: after this long the tokens are surely there */
	return (need - b->level + b->per_minute - 1) / b->per_minute;
}
