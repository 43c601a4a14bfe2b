/*
 * test_request_build.c - the stop-field builder both request parsers
 * share, against a trivial reference.
 *
 * Random lines of stop fields: sequences added to the four fields in a
 * random interleaving (a line gives its keys in any order), tokens
 * pushed one by one.  The reference keeps one plain list per field and
 * joins them in request_json.h's order (stop_token, stop_token_ids,
 * stop_sequence, stop_sequences); stop_builder_finish() must give
 * exactly that, with the automaton compiled (and nothing at all when no
 * field gave a sequence).  The random test prints its seed; SEED=<n>
 * replays a run.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/request.h"
#include "server/request/request_build.h"
#include "text/stop_matcher.h"
#include "tests/unit/test_rng.h"

#define MAX_PER_FIELD 64	/* sequences per field */
#define MAX_SEQ 9		/* tokens per sequence */

struct ref_field {
	int32_t tokens[MAX_PER_FIELD * MAX_SEQ];
	uint32_t lens[MAX_PER_FIELD];
	uint32_t n_tokens, n_seqs;
};

static void test_empty(void **state)
{
	struct stop_builder b;
	struct request req;

	(void)state;
	memset(&req, 0, sizeof(req));
	stop_builder_init(&b);
	assert_int_equal(stop_builder_finish(&b, &req), 0);
	assert_null(req.stops);
	assert_null(req.stop_tokens);
	assert_null(req.stop_lens);
	assert_int_equal(req.n_stop_seqs, 0);
	stop_builder_release(&b);	/* idempotent after finish */
}

/* Later fields given first still come after earlier ones. */
static void test_order(void **state)
{
	static const int32_t want_tokens[] = { 1, 2, 3, 4, 5, 6, 7 };
	static const uint32_t want_lens[] = { 1, 1, 1, 2, 2 };
	struct stop_builder b;
	struct request req;

	(void)state;
	memset(&req, 0, sizeof(req));
	stop_builder_init(&b);
	/* stop_sequences [[6,7]], stop_sequence [4,5], stop_token_ids
	 * [2,3], stop_token 1: in that (reverse) order */
	assert_int_equal(stop_builder_push(&b, STOP_FIELD_SEQUENCES, 6), 0);
	assert_int_equal(stop_builder_push(&b, STOP_FIELD_SEQUENCES, 7), 0);
	assert_int_equal(stop_builder_end_seq(&b, STOP_FIELD_SEQUENCES), 0);
	assert_int_equal(stop_builder_push(&b, STOP_FIELD_SEQUENCE, 4), 0);
	assert_int_equal(stop_builder_push(&b, STOP_FIELD_SEQUENCE, 5), 0);
	assert_int_equal(stop_builder_end_seq(&b, STOP_FIELD_SEQUENCE), 0);
	for (int32_t t = 2; t <= 3; t++) {
		assert_int_equal(stop_builder_push(&b, STOP_FIELD_TOKEN_IDS, t), 0);
		assert_int_equal(stop_builder_end_seq(&b, STOP_FIELD_TOKEN_IDS), 0);
	}
	assert_int_equal(stop_builder_push(&b, STOP_FIELD_TOKEN, 1), 0);
	assert_int_equal(stop_builder_end_seq(&b, STOP_FIELD_TOKEN), 0);
	assert_int_equal(stop_builder_finish(&b, &req), 0);
	assert_int_equal(req.n_stop_seqs, 5);
	assert_memory_equal(req.stop_tokens, want_tokens, sizeof(want_tokens));
	assert_memory_equal(req.stop_lens, want_lens, sizeof(want_lens));
	assert_non_null(req.stops);
	request_release(&req);
}

/* REQUEST_MAX_STOP_TOKENS in all is taken; one more token is -E2BIG, and
 * the request keeps no stop member. */
static void test_stop_token_limit(void **state)
{
	(void)state;
	for (uint32_t extra = 0; extra <= 1; extra++) {
		uint32_t n = REQUEST_MAX_STOP_TOKENS + extra;
		struct stop_builder b;
		struct request req;

		memset(&req, 0, sizeof(req));
		stop_builder_init(&b);
		for (uint32_t i = 0; i < n; i++) {
			/* sequences of 8 in one field, the rest alone */
			enum stop_field f = i < n - n % 8 ? STOP_FIELD_SEQUENCES :
							    STOP_FIELD_TOKEN_IDS;

			assert_int_equal(stop_builder_push(&b, f, (int32_t)(i % 1000)), 0);
			if (f == STOP_FIELD_TOKEN_IDS || i % 8 == 7)
				assert_int_equal(stop_builder_end_seq(&b, f), 0);
		}
		assert_int_equal(stop_builder_finish(&b, &req), extra ? -E2BIG : 0);
		if (extra) {
			assert_null(req.stop_tokens);
			assert_null(req.stops);
		} else {
			assert_non_null(req.stops);
		}
		request_release(&req);
	}
}

static void test_random_vs_reference(void **state)
{
	struct rng r = rng_for(1);
	static struct ref_field ref[STOP_FIELD_N];

	(void)state;
	for (int round = 0; round < 3000; round++) {
		struct stop_builder b;
		struct request req;
		uint32_t n_ops = rng_below(&r, 40), n_tokens = 0, n_seqs = 0;

		memset(ref, 0, sizeof(ref));
		memset(&req, 0, sizeof(req));
		stop_builder_init(&b);
		for (uint32_t op = 0; op < n_ops; op++) {
			enum stop_field f = (enum stop_field)rng_below(&r, STOP_FIELD_N);
			struct ref_field *rf = &ref[f];
			/* stop_token and stop_token_ids: sequences of one */
			uint32_t len = f <= STOP_FIELD_TOKEN_IDS ? 1 :
				       1 + rng_below(&r, MAX_SEQ);

			if (rf->n_seqs == MAX_PER_FIELD)
				continue;
			for (uint32_t i = 0; i < len; i++) {
				int32_t t = (int32_t)rng_below(&r, 50);

				assert_int_equal(stop_builder_push(&b, f, t), 0);
				rf->tokens[rf->n_tokens++] = t;
			}
			assert_int_equal(stop_builder_end_seq(&b, f), 0);
			rf->lens[rf->n_seqs++] = len;
		}
		assert_int_equal(stop_builder_finish(&b, &req), 0);
		for (int f = 0; f < STOP_FIELD_N; f++) {
			const struct ref_field *rf = &ref[f];

			if (!rf->n_seqs)
				continue;
			if (n_seqs + rf->n_seqs > req.n_stop_seqs ||
			    memcmp(req.stop_tokens + n_tokens, rf->tokens,
				   rf->n_tokens * sizeof(int32_t)) ||
			    memcmp(req.stop_lens + n_seqs, rf->lens,
				   rf->n_seqs * sizeof(uint32_t))) {
				print_error("round %d: field %d merged wrong (SEED=%llu)\n",
					    round, f, test_seed);
				fail();
			}
			n_tokens += rf->n_tokens;
			n_seqs += rf->n_seqs;
		}
		assert_int_equal(req.n_stop_seqs, n_seqs);
		assert_true((req.stops != NULL) == (n_seqs != 0));
		request_release(&req);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_order),
		cmocka_unit_test(test_stop_token_limit),
		cmocka_unit_test(test_random_vs_reference),
	};

	test_seed_init("request_build");
	return cmocka_run_group_tests_name("request_build", tests, NULL, NULL);
}
