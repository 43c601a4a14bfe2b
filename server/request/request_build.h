/*
 * request_build.h - the stop-field merge, written once for both request
 * parsers (request_json.c's full jansson parser and request_fast.c's scanner).
 * Private to the files of server/request/: nothing else includes it.
 *
 * A request lists its stop sequences in up to four fields, which a line
 * may give in any order; the sequences are merged into one list in a
 * fixed order of fields: stop_token, stop_token_ids, stop_sequence,
 * stop_sequences (request_json.h), each field's sequences in input order.  A
 * parser hands every token to the builder as it reads it, tagged with the
 * field it came from; stop_builder_finish() joins the fields in that
 * order into the request and compiles the stop automaton.  So the order,
 * the sizes and the compile are decided here, and the two parsers cannot
 * disagree on what a line means.
 */
#ifndef DYNBATCH_REQUEST_BUILD_H
#define DYNBATCH_REQUEST_BUILD_H

#include <stdint.h>

#include "engine/request.h"

/* The stop fields, in the order their sequences are merged. */
enum stop_field {
	STOP_FIELD_TOKEN,		/* "stop_token": one sequence of one */
	STOP_FIELD_TOKEN_IDS,		/* "stop_token_ids": each one alone */
	STOP_FIELD_SEQUENCE,		/* "stop_sequence": one sequence */
	STOP_FIELD_SEQUENCES,		/* "stop_sequences": many */
	STOP_FIELD_N,
};

/* The sequences one field gave so far. */
struct stop_field_seqs {
	int32_t *tokens;	/* malloc'd: every sequence, concatenated */
	uint32_t n_tokens, cap_tokens;
	uint32_t *lens;		/* malloc'd: one length per ended sequence */
	uint32_t n_seqs, cap_seqs;
	uint32_t open_len;	/* tokens of the sequence not yet ended */
};

struct stop_builder {
	struct stop_field_seqs field[STOP_FIELD_N];
};

void stop_builder_init(struct stop_builder *b);

/* Free everything the builder holds; it is empty again.  Idempotent. */
void stop_builder_release(struct stop_builder *b);

/* Token t ends, for now, the open sequence of field f.  0, -ENOMEM, or
 * -E2BIG past UINT32_MAX tokens. */
int stop_builder_push(struct stop_builder *b, enum stop_field f, int32_t t);

/* End field f's open sequence, which must have a token (an empty
 * sequence is the parser's error to report).  0, -ENOMEM, -E2BIG. */
int stop_builder_end_seq(struct stop_builder *b, enum stop_field f);

/*
 * Most stop tokens of one request, all its sequences together.  The stop
 * automaton costs about 64 bytes a token and lives as long as the
 * request, so without a bound one body of a megabyte held 7 MB, and a
 * full waiting queue of them gigabytes; 4096 leaves room for 100
 * sequences of 32 tokens (what the benchmark uses) and more.
 */
#define REQUEST_MAX_STOP_TOKENS 4096u

/*
 * Set req->stop_tokens, stop_lens and n_stop_seqs to the merged
 * sequences (nothing when there are none) and compile req->stops.
 * Returns 0, -E2BIG (more than REQUEST_MAX_STOP_TOKENS tokens in all) or
 * -ENOMEM; on an error req's stop members stay empty.  The builder is
 * released in every case.
 */
int stop_builder_finish(struct stop_builder *b, struct request *req);

#endif /* DYNBATCH_REQUEST_BUILD_H */
