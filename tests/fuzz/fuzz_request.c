/*
 * fuzz_request.c - libFuzzer target for the input path: line_reader
 * cutting a byte stream into lines, request_parse() on every line, and
 * result_format() on what came of it (docs/DESIGN.md 3).
 *
 * The fuzz input is the raw JSON Lines stream exactly as dynbatch reads
 * it, so seed files are plain .jsonl.  A hash of the input picks how it is
 * cut into chunks (one chunk, single bytes, small or large random pieces),
 * whether lines are taken after each feed or only after several, and
 * max_line (now and then tiny, to reach overlong lines).  No input bytes
 * are spent on this, and every mutation also tries another chunking.
 *
 * What is checked (any violation abort()s, which libFuzzer reports along
 * with the input; leaks are LeakSanitizer's):
 *  - line_reader hands out exactly the lines of a naive split of the whole
 *    text (the rules of test_line_reader.c), whatever the chunking;
 *  - request_parse(), with small limits (vocab 1000, context 512) and with
 *    a large vocab, returns 0 or -EINVAL.  On 0 the request matches an
 *    independent jansson read of the line field by field (stops merged in
 *    docs/DESIGN.md 3.1 order) and obeys the limits; its matcher passes its
 *    own check and, run over the prompt and the stop sequences, agrees
 *    with a naive suffix search at every token.  On -EINVAL the error reads
 *    "line N: ..." for this N, every member but id is released, and id is
 *    the line's string "id" if it had one.  Passing small limits implies
 *    passing large ones.  A short or NULL err buffer gets a prefix of the
 *    same message and nothing is written past err_len;
 *  - result_format() of each request (ok or error), and of a result whose
 *    id and error are the raw line bytes (invalid UTF-8, control bytes),
 *    appends one line, with no other newline, that jansson reads back as
 *    an object with the same id, tokens, usage, line and error, invalid
 *    UTF-8 bytes turned into U+FFFD.
 *
 * Each line is parsed from its own exact-size copy, so a read past len is
 * an ASan report rather than a silent read of the next line.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "server/jsonl/line_reader.h"
#include "engine/request.h"
#include "text/stop_matcher.h"
#include "util/strbuf.h"
#include "tests/fuzz/fuzz_rng.h"
#include "server/request/request_json.h"
#include "server/jsonl/jsonl_result.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* jansson flags request_json.c parses with; the reference read uses the same. */
#define REF_JSON_FLAGS (JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL)

static const struct request_limits lim_small = { .vocab = 1000,
						 .max_context = 512,
						 .has_logits = true,
						 .grammar_max = 1u << 16 };
/* The largest vocab every token of which still fits an int32_t. */
static const struct request_limits lim_large = { .vocab = 1u << 31,
						 .max_context = UINT32_MAX,
						 .has_logits = true,
						 .grammar_max = 1u << 16 };

/* The line under test, printed when a check fails. */
static const char *cur_line;
static size_t cur_len;
static uint64_t cur_line_no;

static void check_failed(const char *what, int src_line)
	__attribute__((noreturn));

static void check_failed(const char *what, int src_line)
{
	fprintf(stderr, "fuzz_request.c:%d: check failed: %s\n", src_line, what);
	if (cur_line) {
		fprintf(stderr, "input line %llu (%zu bytes): ",
			(unsigned long long)cur_line_no, cur_len);
		fwrite(cur_line, 1, cur_len < 300 ? cur_len : 300, stderr);
		fputc('\n', stderr);
	}
	abort();
}

/* assert() that NDEBUG cannot turn off. */
#define CHECK(cond)                                          \
	do {                                                 \
		if (!(cond))                                 \
			check_failed(#cond, __LINE__);       \
	} while (0)


/* ------------------------------------------------------------------------
 * References: UTF-8 repair and a JSON read of the line
 */

/*
 * Length of the well-formed UTF-8 sequence at s[0..n) (RFC 3629), 0 when
 * none.  Written from code point ranges, not json_writer.c's lead-byte table,
 * so that the two can disagree.
 */
static size_t ref_utf8_len(const unsigned char *s, size_t n)
{
	static const uint32_t min_cp[5] = { 0, 0, 0x80, 0x800, 0x10000 };
	uint32_t cp;
	size_t len, i;

	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xE0) == 0xC0) {
		len = 2;
		cp = s[0] & 0x1F;
	} else if ((s[0] & 0xF0) == 0xE0) {
		len = 3;
		cp = s[0] & 0x0F;
	} else if ((s[0] & 0xF8) == 0xF0) {
		len = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3F);
	}
	if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return len;
}

/* s with each byte not in a well-formed sequence replaced by U+FFFD;
 * malloc'd, NULL for NULL. */
static char *ref_utf8_fix(const char *str)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t n, k;
	char *out, *p;

	if (!str)
		return NULL;
	n = strlen(str);
	out = malloc(3 * n + 1);
	CHECK(out);
	p = out;
	while (n) {
		k = ref_utf8_len(s, n);
		if (k) {
			memcpy(p, s, k);
			p += k;
		} else {
			k = 1;
			memcpy(p, "\xEF\xBF\xBD", 3);
			p += 3;
		}
		s += k;
		n -= k;
	}
	*p = '\0';
	return out;
}

/* Optional field as request_json.h defines it: NULL when absent or null. */
static json_t *ref_opt(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);

	return json_is_null(v) ? NULL : v;
}

/* ------------------------------------------------------------------------
 * A parsed request against the reference read
 */

static void check_token(json_int_t want, int32_t got,
			const struct request_limits *lim)
{
	CHECK(got >= 0 && (uint32_t)got < lim->vocab);
	CHECK(want == (json_int_t)got);
}

/* Walks req's stop arrays in step with the JSON fields. */
struct stop_cursor {
	const struct request *req;
	const struct request_limits *lim;
	uint64_t n_tokens;	/* sum of req->stop_lens */
	uint64_t i_token;	/* next token of req->stop_tokens */
	uint32_t i_seq;		/* next sequence */
};

/* The next sequence of req must be v: one token, or an array of them. */
static void expect_seq(struct stop_cursor *c, const json_t *v, bool is_array)
{
	size_t n = is_array ? json_array_size(v) : 1;
	const json_t *t;
	size_t j;

	CHECK(is_array ? json_is_array(v) && n > 0 : json_is_integer(v));
	CHECK(c->i_seq < c->req->n_stop_seqs);
	CHECK(c->req->stop_lens[c->i_seq] == n);
	CHECK(c->i_token + n <= c->n_tokens);
	for (j = 0; j < n; j++) {
		t = is_array ? json_array_get(v, j) : v;
		CHECK(json_is_integer(t));
		check_token(json_integer_value(t),
			    c->req->stop_tokens[c->i_token + j], c->lim);
	}
	c->i_token += n;
	c->i_seq++;
}

/* Longest stop sequence of req that is a suffix of text[0..n), naively. */
static uint32_t ref_match_len(const struct request *req, const int32_t *text,
			      size_t n)
{
	uint32_t i, len, best = 0;
	uint64_t off = 0;

	for (i = 0; i < req->n_stop_seqs; off += req->stop_lens[i], i++) {
		len = req->stop_lens[i];
		if (len <= n && len > best &&
		    memcmp(text + n - len, req->stop_tokens + off,
			   len * sizeof(*text)) == 0)
			best = len;
	}
	return best;
}

/*
 * Run the matcher over the prompt followed by every stop sequence (the
 * first MATCH_TEXT_MAX tokens of that), so that each sequence occurs and
 * is reached through fuzzed context, and compare each step with the naive
 * search.
 */
#define MATCH_TEXT_MAX 256

static void check_matcher(const struct request *req)
{
	int32_t text[MATCH_TEXT_MAX];
	uint32_t i, state = STOP_MATCHER_ROOT, match_len, max_len = 0;
	uint64_t n_stop_tokens = 0;
	size_t n = 0, k;

	CHECK(stop_matcher_check(req->stops) == 0);
	for (i = 0; i < req->n_stop_seqs; i++) {
		n_stop_tokens += req->stop_lens[i];
		if (req->stop_lens[i] > max_len)
			max_len = req->stop_lens[i];
	}
	CHECK(stop_matcher_max_len(req->stops) == max_len);

	for (k = 0; k < req->n_prompt && n < MATCH_TEXT_MAX; k++)
		text[n++] = req->prompt[k];
	for (k = 0; k < n_stop_tokens && n < MATCH_TEXT_MAX; k++)
		text[n++] = req->stop_tokens[k];
	for (k = 0; k < n; k++) {
		state = stop_matcher_feed(req->stops, state, text[k],
					  &match_len);
		CHECK(match_len == ref_match_len(req, text, k + 1));
	}
}

static void check_stops(const struct request *req, json_t *obj,
			const struct request_limits *lim)
{
	struct stop_cursor c = { .req = req, .lim = lim };
	json_t *v;
	size_t i;

	CHECK((req->n_stop_seqs == 0) == (req->stops == NULL));
	CHECK((req->n_stop_seqs == 0) == (req->stop_lens == NULL));
	CHECK((req->n_stop_seqs == 0) == (req->stop_tokens == NULL));
	for (i = 0; i < req->n_stop_seqs; i++)
		c.n_tokens += req->stop_lens[i];

	v = ref_opt(obj, "stop_token");
	if (v)
		expect_seq(&c, v, false);
	v = ref_opt(obj, "stop_token_ids");
	CHECK(!v || json_is_array(v));
	for (i = 0; i < json_array_size(v); i++)
		expect_seq(&c, json_array_get(v, i), false);
	v = ref_opt(obj, "stop_sequence");
	if (v)
		expect_seq(&c, v, true);
	v = ref_opt(obj, "stop_sequences");
	CHECK(!v || json_is_array(v));
	for (i = 0; i < json_array_size(v); i++)
		expect_seq(&c, json_array_get(v, i), true);

	CHECK(c.i_seq == req->n_stop_seqs);
	CHECK(c.i_token == c.n_tokens);
	if (req->stops)
		check_matcher(req);
}

/* request_parse() accepted the line: ref (the reference read) must agree. */
static void check_ok(const struct request *req, uint64_t line_no,
		     const struct request_limits *lim, json_t *ref)
{
	json_int_t max_tokens = REQUEST_DEFAULT_MAX_TOKENS;
	json_t *v;
	size_t i;

	CHECK(json_is_object(ref));
	CHECK(req->line_no == line_no);

	v = json_object_get(ref, "id");
	CHECK(json_is_string(v) && req->id);
	CHECK(strlen(req->id) == json_string_length(v));
	CHECK(strcmp(req->id, json_string_value(v)) == 0);

	v = json_object_get(ref, "prompt");
	CHECK(json_is_array(v));
	CHECK(json_array_size(v) == req->n_prompt);
	CHECK((req->n_prompt == 0) == (req->prompt == NULL));
	for (i = 0; i < req->n_prompt; i++) {
		CHECK(json_is_integer(json_array_get(v, i)));
		check_token(json_integer_value(json_array_get(v, i)),
			    req->prompt[i], lim);
	}

	v = ref_opt(ref, "max_tokens");
	if (v) {
		CHECK(json_is_integer(v));
		max_tokens = json_integer_value(v);
	}
	CHECK(max_tokens >= 0 && (json_int_t)req->max_tokens == max_tokens);
	CHECK((uint64_t)req->n_prompt + req->max_tokens <= lim->max_context);

	v = ref_opt(ref, "include_stop");
	CHECK(!v || json_is_boolean(v));
	CHECK(req->include_stop == (v && json_is_true(v)));

	check_stops(req, ref, lim);
}

/* err must read "line <line_no>: <something>". */
static void check_err_text(const char *err, uint64_t line_no)
{
	char prefix[32];
	int n = snprintf(prefix, sizeof(prefix), "line %llu: ",
			 (unsigned long long)line_no);

	CHECK(n > 0 && (size_t)n < sizeof(prefix));
	CHECK(strncmp(err, prefix, (size_t)n) == 0);
	CHECK(err[n] != '\0');
}

/* request_parse() rejected the line. */
static void check_error(const struct request *req, int rc, const char *err,
			uint64_t line_no, json_t *ref)
{
	json_t *id = json_is_object(ref) ? json_object_get(ref, "id") : NULL;

	CHECK(rc == -EINVAL);
	check_err_text(err, line_no);
	CHECK(req->line_no == line_no);
	CHECK(!req->prompt && !req->n_prompt && !req->max_tokens);
	CHECK(!req->include_stop && !req->stops && !req->stop_tokens);
	CHECK(!req->stop_lens && !req->n_stop_seqs);
	/* an id with a NUL in it is refused and not kept: no C string
	 * holds it */
	if (json_is_string(id) &&
	    strlen(json_string_value(id)) == json_string_length(id))
		CHECK(req->id && strcmp(req->id, json_string_value(id)) == 0);
	else
		CHECK(!req->id);
}

/* ------------------------------------------------------------------------
 * Result lines
 */

static void check_json_str(json_t *v, const char *want_raw)
{
	char *want = ref_utf8_fix(want_raw);

	CHECK(json_is_string(v));
	CHECK(json_string_length(v) == strlen(want));
	CHECK(memcmp(json_string_value(v), want, strlen(want)) == 0);
	free(want);
}

static void check_json_uint(json_t *v, uint64_t want)
{
	CHECK(json_is_integer(v));
	CHECK(json_integer_value(v) >= 0);
	CHECK((uint64_t)json_integer_value(v) == want);
}

/* Append r to out and read the new line back. */
static void check_result(const struct result *r, struct strbuf *out)
{
	size_t old = out->len, i;
	json_error_t jerr;
	json_t *o, *v;

	CHECK(result_format(r, out) == 0);
	CHECK(out->len > old && out->data[out->len] == '\0');
	CHECK(memchr(out->data + old, '\n', out->len - old) ==
	      out->data + out->len - 1);
	o = json_loadb(out->data + old, out->len - old, JSON_REJECT_DUPLICATES,
		       &jerr);
	if (!o)
		fprintf(stderr, "result line not JSON: %s at column %d: %.*s",
			jerr.text, jerr.column, (int)(out->len - old),
			out->data + old);
	CHECK(json_is_object(o));
	CHECK(json_object_size(o) == (r->error ? 6u : 5u));

	v = json_object_get(o, "id");
	if (r->id)
		check_json_str(v, r->id);
	else
		CHECK(json_is_null(v));
	v = json_object_get(o, "tokens");
	CHECK(json_is_array(v) && json_array_size(v) == r->n_tokens);
	for (i = 0; i < r->n_tokens; i++) {
		CHECK(json_is_integer(json_array_get(v, i)));
		CHECK(json_integer_value(json_array_get(v, i)) == r->tokens[i]);
	}
	check_json_str(json_object_get(o, "finish_reason"), r->finish_reason);
	v = json_object_get(o, "usage");
	CHECK(json_is_object(v) && json_object_size(v) == 2);
	check_json_uint(json_object_get(v, "prompt_tokens"), r->n_prompt);
	check_json_uint(json_object_get(v, "completion_tokens"),
			r->n_generated);
	check_json_uint(json_object_get(o, "line"), r->line_no);
	if (r->error)
		check_json_str(json_object_get(o, "error"), r->error);
	json_decref(o);

	/* Written lines go out; keep the buffer small but appended to. */
	if (out->len > 16384)
		strbuf_consume(out, out->len);
}

/* A result whose id and error are the raw line: any bytes at all. */
static void check_raw_result(const char *line, size_t len, uint64_t line_no,
			     struct strbuf *out)
{
	char *raw = strndup(line, len);	/* up to the first NUL */
	int32_t tokens[16];
	size_t n_tokens = len / sizeof(int32_t);
	struct result r;

	CHECK(raw);
	if (n_tokens > 16)
		n_tokens = 16;
	memcpy(tokens, line, n_tokens * sizeof(int32_t));
	memset(&r, 0, sizeof(r));
	r.id = raw;
	r.line_no = line_no;
	r.tokens = tokens;
	r.n_tokens = (uint32_t)n_tokens;
	r.finish_reason = (line_no & 1) ? "stop" : "cancelled";
	r.error = (line_no & 2) ? raw : NULL;
	r.n_prompt = (uint32_t)len;
	r.n_generated = UINT32_MAX;
	check_result(&r, out);
	free(raw);
}

/* ------------------------------------------------------------------------
 * One line
 */

struct fuzz {
	struct rng rng;
	struct strbuf out;	/* result lines, appended to */
};

/*
 * Parse line under lim, check the request and its result line; returns
 * request_parse()'s code and leaves its message in err (512 bytes).
 */
static int parse_and_check(struct fuzz *f, const char *line, size_t len,
			   uint64_t line_no, const struct request_limits *lim,
			   json_t *ref, char *err)
{
	struct request req;
	struct result r;
	int rc;

	rc = request_parse(line, len, line_no, lim, &req, err, 512);
	memset(&r, 0, sizeof(r));
	r.id = req.id;
	r.line_no = line_no;
	r.n_prompt = req.n_prompt;
	if (rc == 0) {
		check_ok(&req, line_no, lim, ref);
		r.tokens = req.prompt;
		r.n_tokens = req.n_prompt;
		r.finish_reason = "length";
		r.n_generated = req.max_tokens;
	} else {
		check_error(&req, rc, err, line_no, ref);
		r.finish_reason = "error";
		r.error = err;
	}
	check_result(&r, &f->out);
	request_release(&req);
	CHECK(!req.id && !req.prompt && !req.stops);
	return rc;
}

/* A short (or NULL) err buffer: same verdict, a prefix of the message. */
static void check_short_err(struct fuzz *f, const char *line, size_t len,
			    uint64_t line_no, int want_rc, const char *want_err)
{
	char buf[64];
	size_t err_len = rng_below(&f->rng, 48), i;
	bool null_err = rng_below(&f->rng, 8) == 0;
	struct request req;
	int rc;

	memset(buf, 0x55, sizeof(buf));
	rc = request_parse(line, len, line_no, &lim_small, &req,
			   null_err ? NULL : buf, err_len);
	request_release(&req);
	CHECK(rc == want_rc);
	for (i = null_err ? 0 : err_len; i < sizeof(buf); i++)
		CHECK(buf[i] == 0x55);
	if (null_err || err_len == 0 || rc == 0)
		return;
	CHECK(memchr(buf, '\0', err_len));
	CHECK(strncmp(buf, want_err, strlen(buf)) == 0);
}

static void check_line(struct fuzz *f, const char *line, size_t len,
		       uint64_t line_no)
{
	char *copy = malloc(len ? len : 1);
	char err_small[512], err_large[512];
	json_error_t jerr;
	json_t *ref;
	int rc_small, rc_large;

	CHECK(copy);
	memcpy(copy, line, len);
	cur_line = copy;
	cur_len = len;
	cur_line_no = line_no;

	ref = json_loadb(copy, len, REF_JSON_FLAGS, &jerr);
	rc_small = parse_and_check(f, copy, len, line_no, &lim_small, ref,
				   err_small);
	rc_large = parse_and_check(f, copy, len, line_no, &lim_large, ref,
				   err_large);
	CHECK(rc_small != 0 || rc_large == 0);
	check_short_err(f, copy, len, line_no, rc_small, err_small);
	check_raw_result(copy, len, line_no, &f->out);

	json_decref(ref);
	cur_line = NULL;
	free(copy);
}

/* ------------------------------------------------------------------------
 * Lines: line_reader against a naive split
 */

struct ref_line {
	size_t off, len;	/* bytes handed out (no '\n', no last '\r') */
	bool overlong;
};

/* Split the whole text; returns the number of lines (at most size). */
static size_t ref_split(const uint8_t *data, size_t size, size_t max_line,
			struct ref_line *out)
{
	const uint8_t *nl;
	size_t i = 0, k = 0, raw;

	while (i < size) {
		nl = memchr(data + i, '\n', size - i);
		raw = nl ? (size_t)(nl - (data + i)) : size - i;
		out[k].off = i;
		out[k].len = raw;
		out[k].overlong = raw > max_line;
		if (!out[k].overlong && raw && data[i + raw - 1] == '\r')
			out[k].len--;
		k++;
		i += raw + (nl ? 1 : 0);
	}
	return k;
}

struct split_run {
	struct line_reader lr;
	const uint8_t *data;
	const struct ref_line *ref;
	size_t n_ref;
	size_t n_got;
};

/* Take every line the reader has now. */
static void drain(struct fuzz *f, struct split_run *s)
{
	const struct ref_line *want;
	enum line_status st;
	const char *line;
	size_t len;

	for (;;) {
		line = NULL;
		len = 0;
		st = line_reader_next(&s->lr, &line, &len);
		if (st == LINE_NONE)
			return;
		CHECK(s->n_got < s->n_ref);
		want = &s->ref[s->n_got++];
		CHECK(s->lr.line_no == s->n_got);
		if (st == LINE_OVERLONG) {
			CHECK(want->overlong);
			continue;
		}
		CHECK(st == LINE_OK && !want->overlong);
		CHECK(len == want->len);
		CHECK(len == 0 || memcmp(line, s->data + want->off, len) == 0);
		check_line(f, line, len, s->n_got);
	}
}

/* How many bytes the next feed brings: chosen per input by mode. */
static size_t next_chunk(struct rng *rng, unsigned mode, size_t left)
{
	size_t n;

	switch (mode) {
	case 0:
		n = left;
		break;
	case 1:
		n = 1;
		break;
	case 2:
		n = 1 + rng_below(rng, 16);
		break;
	default:
		n = 1 + rng_below(rng, left);
		break;
	}
	return n < left ? n : left;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz f = { .rng = rng_for(data, size), .out = STRBUF_INIT };
	struct split_run s = { .data = data };
	struct ref_line *ref = malloc((size + 1) * sizeof(*ref));
	size_t max_line, fed = 0, n;
	unsigned mode;

	CHECK(ref);
	max_line = rng_below(&f.rng, 4) == 0 ? 1 + rng_below(&f.rng, 64)
					      : (size_t)1 << 20;
	mode = (unsigned)rng_below(&f.rng, 4);
	s.ref = ref;
	s.n_ref = ref_split(data, size, max_line, ref);
	line_reader_init(&s.lr, max_line);

	while (fed < size) {
		n = next_chunk(&f.rng, mode, size - fed);
		CHECK(line_reader_feed(&s.lr, data + fed, n) == 0);
		fed += n;
		if (fed < size && rng_below(&f.rng, 4) == 0)
			continue;	/* take lines only after more feeds */
		s.lr.eof = fed == size;
		drain(&f, &s);
	}
	s.lr.eof = true;
	drain(&f, &s);
	CHECK(s.n_got == s.n_ref);
	CHECK(line_reader_buffered(&s.lr) == 0);

	line_reader_release(&s.lr);
	strbuf_release(&f.out);
	free(ref);
	return 0;
}
