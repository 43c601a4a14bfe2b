/*
 * ref_check.c - refdecode --check: a run's result lines against the
 * reference decode of the same input (refdecode_internal.h), naming
 * every mismatch.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "tools/refdecode/ref_llama.h"
#include "tools/refdecode/ref_llama_check.h"
#include "tools/refdecode/ref_sampler.h"
#include "tools/refdecode/ref_sim_logits.h"
#include "tools/refdecode/ref_text.h"
#include "engine/request.h"
#include "model/sim_model.h"
#include "util/strbuf.h"
#include "util/parse_num.h"
#include "server/request/request_json.h"
#include "server/jsonl/jsonl_result.h"
#include "tools/refdecode/refdecode_internal.h"

/* ------------------------------------------------------------------------
 * The reference set: every input line, indexed by id
 */

static uint64_t hash_str(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;	/* FNV-1a */

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h ^ (h >> 29);
}

/* Slot of id in the table: its chain head or the empty slot for it. */
static uint64_t *ref_slot(const struct ref_set *rs, const char *id)
{
	uint64_t i = hash_str(id) & rs->table_mask;

	while (rs->table[i] && strcmp(rs->refs[rs->table[i] - 1].id, id))
		i = (i + 1) & rs->table_mask;
	return &rs->table[i];
}

/* First ref index + 1 with this id, 0 when none. */
static uint64_t ref_find(const struct ref_set *rs, const char *id)
{
	return *ref_slot(rs, id);
}

/*
 * Index every ref by id.  Valid requests must have unique ids: returns
 * -EEXIST after printing the first duplicate.  0, -EEXIST or -ENOMEM.
 */
static int ref_index(struct ref_set *rs)
{
	uint64_t cap = 16, i, *slot, j;

	while (cap < 2 * rs->n_refs)
		cap *= 2;
	rs->table = calloc(cap, sizeof(*rs->table));
	if (!rs->table)
		return -ENOMEM;
	rs->table_mask = cap - 1;
	/* Insert in reverse so each chain lists its refs in input order. */
	for (i = rs->n_refs; i-- > 0;) {
		struct ref *rf = &rs->refs[i];

		if (!rf->id)
			continue;
		slot = ref_slot(rs, rf->id);
		rf->next_same = *slot;
		*slot = i + 1;
		for (j = rf->next_same; !rf->is_error && j;
		     j = rs->refs[j - 1].next_same) {
			if (rs->refs[j - 1].is_error)
				continue;
			fprintf(stderr,
				"refdecode: --check needs unique ids: id '%s' on lines %" PRIu64 " and %" PRIu64 "\n",
				rf->id, rf->line_no, rs->refs[j - 1].line_no);
			return -EEXIST;
		}
	}
	return 0;
}

static int ref_load(const struct ref_opts *o, FILE *in, struct ref_set *rs)
{
	char *line = NULL, err[512];
	size_t line_cap = 0;
	ssize_t n;
	int rc = 0;

	while ((n = getline(&line, &line_cap, in)) >= 0) {
		if (rs->n_refs == rs->cap) {
			uint64_t cap = rs->cap ? 2 * rs->cap : 1024;
			struct ref *r = realloc(rs->refs, cap * sizeof(*r));

			if (!r) {
				rc = -ENOMEM;
				break;
			}
			rs->refs = r;
			rs->cap = cap;
		}
		rc = ref_line(o, line, chomp(line, n), rs->n_refs + 1,
			      &rs->refs[rs->n_refs], err, sizeof(err));
		if (rc)
			break;
		rs->n_refs++;
	}
	if (!rc && ferror(in))
		rc = -EIO;
	free(line);
	return rc;
}

static void ref_set_free(struct ref_set *rs)
{
	uint64_t i;

	for (i = 0; i < rs->n_refs; i++)
		ref_free(&rs->refs[i]);
	free(rs->refs);
	free(rs->table);
	memset(rs, 0, sizeof(*rs));
}

/* ------------------------------------------------------------------------
 * With --check: compare an engine's results
 */

static void mismatch(struct check_stats *st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void mismatch(struct check_stats *st, const char *fmt, ...)
{
	va_list ap;

	if (st->mismatches++ >= REF_MAX_PRINTED)
		return;
	fprintf(stderr, "refdecode: mismatch: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/*
 * The ref a result answers: by id, or by line for a null id; NULL after
 * reporting when none fits.
 */
static struct ref *match_ref(struct ref_set *rs, struct check_stats *st,
			     uint64_t res_line, const char *id, bool has_line,
			     uint64_t line, bool is_error)
{
	struct ref *rf, *fallback = NULL;
	uint64_t j;

	if (!id) {
		if (has_line && line >= 1 && line <= rs->n_refs &&
		    !rs->refs[line - 1].id)
			return &rs->refs[line - 1];
		mismatch(st, "results line %" PRIu64 ": null id and no input line %s without an id",
			 res_line, has_line ? "of that number" : "number");
		return NULL;
	}
	j = ref_find(rs, id);
	if (!j) {
		mismatch(st, "results line %" PRIu64 ": unknown id '%s'",
			 res_line, id);
		return NULL;
	}
	if (!rs->refs[j - 1].next_same)
		return &rs->refs[j - 1];
	/* Several input lines share the id (error lines among them). */
	for (; j; j = rf->next_same) {
		rf = &rs->refs[j - 1];
		if (has_line && rf->line_no == line)
			return rf;
		if (!fallback && rf->seen < rf->n_choices &&
		    rf->is_error == is_error)
			fallback = rf;
	}
	return fallback ? fallback : &rs->refs[ref_find(rs, id) - 1];
}

/* Read tokens of a result into a malloc'd array; -EINVAL when mistyped. */
static int get_tokens(json_t *v, int32_t **out, size_t *n_out)
{
	size_t i, n;
	json_t *t;

	*out = NULL;
	*n_out = 0;
	if (!json_is_array(v))
		return -EINVAL;
	n = json_array_size(v);
	*out = malloc((n ? n : 1) * sizeof(**out));
	if (!*out)
		return -ENOMEM;
	json_array_foreach(v, i, t) {
		if (!json_is_integer(t) || json_integer_value(t) < INT32_MIN ||
		    json_integer_value(t) > INT32_MAX) {
			free(*out);
			*out = NULL;
			return -EINVAL;
		}
		(*out)[i] = (int32_t)json_integer_value(t);
	}
	*n_out = n;
	return 0;
}

static const char *show_id(const struct ref *rf)
{
	return rf->id ? rf->id : "(none)";
}

static int compare_text(struct check_stats *st, const char *who,
			const struct res_extra *x, const char *want,
			size_t n_want);

/*
 * llama with a tokenizer: the text must follow from the result's tokens
 * (which ref_llama_check() holds to the naive forward): the text rules
 * replayed over them must not end the request before its last token,
 * and give its text.  0 or -ENOMEM.
 */
static int compare_llama_text(const struct ref_opts *o, struct check_stats *st,
			      const char *who, const struct request *req,
			      const struct ref_engine_result *res,
			      const struct res_extra *x)
{
	struct strbuf text = STRBUF_INIT;
	uint32_t n = (uint32_t)res->n_tokens, k, n_out = 0;
	bool ended = false;
	int rc = 0;

	for (k = 1; k <= n && !ended && !rc; k++)
		rc = ref_after_token(o->text, req, res->tokens, k, &ended,
				     &n_out, &text);
	if (rc == -ENOMEM)
		goto out;
	if (rc)		/* a token out of range: the token check says so */
		rc = 0;
	else if (ended && k - 1 < n)
		mismatch(st, "%s: a stop ends the text at token %u, but the result goes on to %u tokens",
			 who, k - 1, n);
	else
		rc = compare_text(st, who, x, text.data ? text.data : "",
				  text.len);
out:
	strbuf_release(&text);
	return rc;
}

/* Check a valid request's result against the llama reference.  0 or -ENOMEM. */
static int compare_llama(const struct ref_opts *o, struct check_stats *st,
			 struct ref *rf, const struct ref_engine_result *res)
{
	char why[768];
	int rc;

	rc = ref_llama_check(o->llama, rf->req, res, o->near_tie,
			     o->allow_cancelled, &st->llama, why, sizeof(why));
	if (rc == 0)
		mismatch(st, "id '%s' (line %" PRIu64 "): %s", show_id(rf),
			 rf->line_no, why);
	return rc < 0 ? rc : 0;
}

/* "id 'a' (line 3)", or "id 'a' index 1 (line 3)" for a choice of n > 1. */
static const char *label(const struct ref *rf, uint32_t index, char *buf,
			 size_t len)
{
	if (rf->n_choices > 1)
		snprintf(buf, len, "id '%.200s' index %u (line %" PRIu64 ")",
			 show_id(rf), index, rf->line_no);
	else
		snprintf(buf, len, "id '%.200s' (line %" PRIu64 ")",
			 show_id(rf), rf->line_no);
	return buf;
}

/*
 * A logprob as the results file shows it: the float printed with %.9g (as
 * result_format() does) and read back as a double, as jansson read the
 * engine's.  Two floats print alike exactly when they are equal, and two
 * different 9-digit texts never read as the same double, so comparing
 * these doubles is comparing the floats exactly.
 */
static double shown_logprob(float lp)
{
	char text[64];

	snprintf(text, sizeof(text), "%.9g", (double)lp);
	return strtod(text, NULL);
}

/* Compare the first n logprob entries of a result with the reference's. */
static void compare_logprobs(struct check_stats *st, const char *who,
			     const struct ref_engine_result *res,
			     const struct ref_out *want, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct ref_logprob *got = res->logprobs +
						i * REF_LOGPROB_STRIDE;
		const struct sampler_logprob *w = want->lp +
						  i * want->stride;

		for (uint32_t j = 0; j < REF_LOGPROB_STRIDE; j++) {
			struct sampler_logprob e = j < want->stride ? w[j] :
				(struct sampler_logprob){ -1, 0.0f };

			if (got[j].token == e.token &&
			    (e.token < 0 || got[j].logprob == shown_logprob(e.logprob)))
				continue;
			if (!j)
				mismatch(st, "%s: logprobs differ at index %zu: got token %" PRId64 " logprob %.9g, want token %d logprob %.9g",
					 who, i, got[0].token, got[0].logprob,
					 e.token, (double)e.logprob);
			else
				mismatch(st, "%s: top_logprobs differ at index %zu, alternative %u: got token %" PRId64 " logprob %.9g, want token %d logprob %.9g (-1: none)",
					 who, i, j - 1, got[j].token, got[j].logprob,
					 e.token, (double)e.logprob);
			return;
		}
	}
}

/* Append up to 24 bytes of s from at, as hex, for a message. */
static void show_bytes(char *buf, size_t len, const char *s, size_t n,
		       size_t at)
{
	size_t used = 0;

	buf[0] = '\0';
	for (size_t i = at; i < n && i < at + 24 && used + 4 < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%02x ",
					 (unsigned char)s[i]);
}

/*
 * Compare a result's text with want[0..n_want), the bytes it must show
 * (before the U+FFFD rule).  0 or -ENOMEM.
 */
static int compare_text(struct check_stats *st, const char *who,
			const struct res_extra *x, const char *want,
			size_t n_want)
{
	struct strbuf shown = STRBUF_INIT;
	char got_hex[128], want_hex[128];
	size_t i = 0;

	if (!x->has_text) {
		mismatch(st, "%s: no string 'text' in the result (--tokenizer)",
			 who);
		return 0;
	}
	if (ref_text_shown(want, n_want, &shown))
		return -ENOMEM;
	while (i < x->text_len && i < shown.len && x->text[i] == shown.data[i])
		i++;
	if (i < x->text_len || i < shown.len) {
		size_t from = i > 8 ? i - 8 : 0;

		show_bytes(got_hex, sizeof(got_hex), x->text, x->text_len, from);
		show_bytes(want_hex, sizeof(want_hex), shown.data, shown.len, from);
		mismatch(st, "%s: text differs at byte %zu (got %zu bytes, want %zu; decoded JSON): got [%s] want [%s] from byte %zu",
			 who, i, x->text_len, shown.len, got_hex, want_hex, from);
	}
	strbuf_release(&shown);
	return 0;
}

/* A cancelled result's text: all its tokens' text.  0 or -ENOMEM. */
static int compare_cancelled_text(const struct ref_opts *o,
				  struct check_stats *st, const char *who,
				  const struct res_extra *x, int32_t prev,
				  const int32_t *tok, size_t n_tok)
{
	struct strbuf text = STRBUF_INIT;
	int rc = ref_text_decode(o->text, prev, tok, (uint32_t)n_tok, &text);

	if (!rc)
		rc = compare_text(st, who, x, text.data ? text.data : "",
				  text.len);
	strbuf_release(&text);
	return rc == -ENOMEM ? rc : 0;
}

/* Compare a valid request's result with what it must report.  0 or
 * -ENOMEM. */
static int compare_out(const struct ref_opts *o, struct check_stats *st,
		       const char *who, const struct ref_engine_result *res,
		       const struct res_extra *x, int32_t prev,
		       const struct ref_out *want)
{
	const char *finish = res->finish;
	const int32_t *tok = res->tokens;
	size_t n_tok = res->n_tokens, i;

	if (res->has_seed != want->has_seed)
		mismatch(st, "%s: %s", who, want->has_seed ?
			 "no 'seed' in the result of a sampled request" :
			 "a 'seed' in the result of a request that did not sample");
	if (!res->has_logprobs != !want->lp) {
		mismatch(st, "%s: %s", who, want->lp ?
			 "no 'logprobs' in the result, but the request asked for them" :
			 "'logprobs' in the result, but the request did not ask");
		return 0;
	}
	if (res->has_logprobs && res->n_logprobs != n_tok) {
		mismatch(st, "%s: %zu logprob entries for %zu tokens", who,
			 res->n_logprobs, n_tok);
		return 0;
	}
	if (o->allow_cancelled && strcmp(finish, "cancelled") == 0) {
		for (i = 0; i < n_tok && i < want->n_raw; i++)
			if (tok[i] != want->raw[i])
				break;
		if (n_tok > want->n_raw || i < n_tok) {
			mismatch(st, "%s: cancelled result is not a prefix of the reference: differs at index %zu (got %zu tokens, reference %u)",
				 who, i, n_tok, want->n_raw);
		} else {
			st->cancelled++;
			if (want->lp)
				compare_logprobs(st, who, res, want, n_tok);
			if (want->has_text)	/* its tokens' text, all of it */
				return compare_cancelled_text(o, st, who, x, prev,
							      tok, n_tok);
		}
		return 0;
	}
	if (strcmp(finish, want->finish))
		mismatch(st, "%s: finish_reason '%s', want '%s'", who, finish,
			 want->finish);
	else if (want->error && (!res->error || strcmp(res->error, want->error)))
		mismatch(st, "%s: error '%s', want '%s'", who,
			 res->error ? res->error : "(none)", want->error);
	for (i = 0; i < n_tok && i < want->n_out; i++)
		if (tok[i] != want->raw[i])
			break;
	if (i < n_tok || i < want->n_out) {
		if (i < n_tok && i < want->n_out)
			mismatch(st, "%s: tokens differ at index %zu: got %d, want %d (got %zu tokens, want %u)",
				 who, i, tok[i], want->raw[i], n_tok, want->n_out);
		else
			mismatch(st, "%s: tokens differ at index %zu: got %zu tokens, want %u",
				 who, i, n_tok, want->n_out);
		return 0;
	}
	if (want->lp)
		compare_logprobs(st, who, res, want, n_tok);
	if (!want->has_text)
		return 0;
	return compare_text(st, who, x, want->text.data ? want->text.data : "",
			    want->text.len);
}

/*
 * A sim request decoded per choice: with the request's seed, which the
 * engine must report, or (no seed given) with the seed the engine
 * reports, the same for all its choices: the replay check.  0, -ENOMEM
 * or -EPROTO.
 */
static int compare_choice(const struct ref_opts *o, struct check_stats *st,
			  struct ref *rf, const struct ref_engine_result *res,
			  const struct res_extra *x, const char *who)
{
	const struct request *req = rf->req;
	uint64_t seed = req->sampling.seed;
	struct ref_out want;
	int rc;

	if (req->sampling.temperature > 0.0f && res->has_seed) {
		if (req->seed_given && res->seed != req->sampling.seed) {
			mismatch(st, "%s: seed %" PRIu64 ", but the request gave %" PRIu64,
				 who, res->seed, req->sampling.seed);
			return 0;
		}
		if (rf->has_seed && res->seed != rf->seed) {
			mismatch(st, "%s: seed %" PRIu64 ", but another choice of the request reported %" PRIu64,
				 who, res->seed, rf->seed);
			return 0;
		}
		rf->has_seed = true;
		rf->seed = seed = res->seed;
	}
	rc = ref_decode_choice(req, &o->model, o->text, seed, res->index,
			       &want);
	if (rc)
		return rc;
	if (request_needs_logits(req))
		st->sampled++;
	rc = compare_out(o, st, who, res, x,
			 req->n_prompt ? req->prompt[req->n_prompt - 1] : -1,
			 &want);
	ref_out_free(&want);
	return rc;
}

/* Compare one result with its ref.  0, -ENOMEM or -EPROTO. */
static int compare(const struct ref_opts *o, struct check_stats *st,
		   struct ref *rf, const struct ref_engine_result *res,
		   const struct res_extra *x)
{
	const char *finish = res->finish;
	char who[320];
	struct ref_out view;

	label(rf, res->index, who, sizeof(who));
	if (res->index >= rf->n_choices) {
		mismatch(st, "%s: index %u, but the request has %u choice%s",
			 who, res->index, rf->n_choices,
			 rf->n_choices > 1 ? "s" : "");
		return 0;
	}
	if (rf->seen_choices & (1ull << res->index)) {
		mismatch(st, "%s: duplicate result", who);
		return 0;
	}
	rf->seen_choices |= 1ull << res->index;
	rf->seen++;
	if (rf->is_error) {
		if (strcmp(finish, "error"))
			mismatch(st, "%s: finish_reason '%s', want 'error' (bad input line)",
				 who, finish);
		return 0;
	}
	if (res->has_index != (rf->n_choices > 1))
		mismatch(st, "%s: %s", who, res->has_index ?
			 "an 'index' in the result of a request with n = 1" :
			 "no 'index' in the result of a request with n > 1");
	/* (llama: the error an empty prompt must get is a match, not this) */
	if (o->allow_errors && strcmp(finish, "error") == 0 &&
	    !(o->llama && rf->n_prompt == 0 && res->error &&
	      strstr(res->error, "empty"))) {
		st->errors++;
		return 0;
	}
	/* text: the prompt as the naive encoder cuts it */
	if (o->text && strcmp(finish, "error") &&
	    (!x->has_prompt || x->n_prompt != rf->n_prompt))
		mismatch(st, "%s: usage.prompt_tokens %s%" PRIu64 ", want %u (the naive encoder's)",
			 who, x->has_prompt ? "" : "missing, ",
			 x->has_prompt ? x->n_prompt : 0, rf->n_prompt);
	if (o->llama) {
		int rc = compare_llama(o, st, rf, res);

		if (rc || !o->text || strcmp(finish, "error") == 0)
			return rc;
		return compare_llama_text(o, st, who, rf->req, res, x);
	}
	if (rf->req)
		return compare_choice(o, st, rf, res, x, who);
	view = (struct ref_out){ .raw = rf->raw, .n_raw = rf->n_raw,
				 .n_out = rf->n_out, .finish = rf->finish,
				 .has_text = rf->has_text, .text = rf->text };
	return compare_out(o, st, who, res, x, rf->prev, &view);
}

/*
 * Read a result's "logprobs" into a malloc'd array of REF_LOGPROB_STRIDE
 * entries per token (-1 tokens past the alternatives given).  -EINVAL
 * when it is not an array of {"token","logprob","top_logprobs":[...]}
 * with at most 20 alternatives, or -ENOMEM.
 */
static int get_logprobs(json_t *v, struct ref_logprob **out, size_t *n_out)
{
	size_t i, j, n;
	json_t *e, *t;

	*out = NULL;
	*n_out = 0;
	if (!json_is_array(v))
		return -EINVAL;
	n = json_array_size(v);
	*out = malloc((n ? n : 1) * REF_LOGPROB_STRIDE * sizeof(**out));
	if (!*out)
		return -ENOMEM;
	json_array_foreach(v, i, e) {
		struct ref_logprob *row = *out + i * REF_LOGPROB_STRIDE;
		json_t *top = json_object_get(e, "top_logprobs");

		for (j = 0; j < REF_LOGPROB_STRIDE; j++)
			row[j] = (struct ref_logprob){ -1, 0.0 };
		if (!json_is_integer(json_object_get(e, "token")) ||
		    !json_is_number(json_object_get(e, "logprob")) ||
		    !json_is_array(top) ||
		    json_array_size(top) > SAMPLER_MAX_LOGPROBS)
			goto bad;
		row[0].token = json_integer_value(json_object_get(e, "token"));
		row[0].logprob = json_number_value(json_object_get(e, "logprob"));
		json_array_foreach(top, j, t) {
			if (!json_is_integer(json_object_get(t, "token")) ||
			    !json_is_number(json_object_get(t, "logprob")))
				goto bad;
			row[1 + j].token = json_integer_value(json_object_get(t, "token"));
			row[1 + j].logprob = json_number_value(json_object_get(t, "logprob"));
		}
	}
	*n_out = n;
	return 0;
bad:
	free(*out);
	*out = NULL;
	return -EINVAL;
}

/* Check one line of the results file.  0 or -ENOMEM. */
static int check_line(const struct ref_opts *o, struct ref_set *rs,
		      struct check_stats *st, const char *line, size_t len,
		      uint64_t res_line)
{
	struct ref_engine_result res = { 0 };
	struct res_extra x = { 0 };
	json_t *obj, *v;
	json_error_t jerr;
	const char *id = NULL, *finish;
	bool has_line = false;
	uint64_t line_no = 0;
	int32_t *tok = NULL;
	size_t n_tok = 0;
	struct ref_logprob *lp = NULL;
	struct ref *rf;
	int rc = 0;

	/* (a text may hold NUL bytes: \u0000) */
	obj = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL,
			 &jerr);
	if (!obj || !json_is_object(obj)) {
		mismatch(st, "results line %" PRIu64 ": not a JSON object: %s",
			 res_line, obj ? "" : jerr.text);
		goto out;
	}
	v = json_object_get(obj, "id");
	if (json_is_string(v)) {
		id = json_string_value(v);
	} else if (!json_is_null(v)) {
		mismatch(st, "results line %" PRIu64 ": 'id' is neither a string nor null",
			 res_line);
		goto out;
	}
	finish = json_string_value(json_object_get(obj, "finish_reason"));
	if (!finish) {
		mismatch(st, "results line %" PRIu64 ": no string 'finish_reason'",
			 res_line);
		goto out;
	}
	v = json_object_get(obj, "line");
	if (json_is_integer(v) && json_integer_value(v) > 0) {
		has_line = true;
		line_no = (uint64_t)json_integer_value(v);
	}
	rc = get_tokens(json_object_get(obj, "tokens"), &tok, &n_tok);
	if (rc == -EINVAL) {
		rc = 0;
		mismatch(st, "results line %" PRIu64 ": 'tokens' is not an array of int32",
			 res_line);
		goto out;
	}
	if (rc)
		goto out;
	v = json_object_get(obj, "index");
	if (v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) >= REQUEST_MAX_CHOICES) {
			mismatch(st, "results line %" PRIu64 ": 'index' is not an integer in [0, %u)",
				 res_line, REQUEST_MAX_CHOICES);
			goto out;
		}
		res.has_index = true;
		res.index = (uint32_t)json_integer_value(v);
	}
	v = json_object_get(obj, "seed");
	if (v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0) {
			mismatch(st, "results line %" PRIu64 ": 'seed' is not an integer >= 0",
				 res_line);
			goto out;
		}
		res.has_seed = true;
		res.seed = (uint64_t)json_integer_value(v);
	}
	v = json_object_get(obj, "logprobs");
	if (v) {
		rc = get_logprobs(v, &lp, &res.n_logprobs);
		if (rc == -EINVAL) {
			rc = 0;
			mismatch(st, "results line %" PRIu64 ": 'logprobs' is not an array of {\"token\",\"logprob\",\"top_logprobs\":[at most 20]}",
				 res_line);
			goto out;
		}
		if (rc)
			goto out;
		res.has_logprobs = true;
		res.logprobs = lp;
	}
	rf = match_ref(rs, st, res_line, id, has_line, line_no,
		       strcmp(finish, "error") == 0);
	res.finish = finish;
	res.error = json_string_value(json_object_get(obj, "error"));
	res.tokens = tok;
	res.n_tokens = n_tok;
	v = json_object_get(json_object_get(obj, "usage"), "completion_tokens");
	if (json_is_integer(v) && json_integer_value(v) >= 0) {
		res.has_generated = true;
		res.n_generated = (uint64_t)json_integer_value(v);
	}
	v = json_object_get(json_object_get(obj, "usage"), "prompt_tokens");
	if (json_is_integer(v) && json_integer_value(v) >= 0) {
		x.has_prompt = true;
		x.n_prompt = (uint64_t)json_integer_value(v);
	}
	v = json_object_get(obj, "text");
	if (json_is_string(v)) {
		x.has_text = true;
		x.text = json_string_value(v);
		x.text_len = json_string_length(v);
	}
	if (rf)
		rc = compare(o, st, rf, &res, &x);
out:
	free(tok);
	free(lp);
	json_decref(obj);
	return rc;
}

int run_check(const struct ref_opts *o, FILE *in, FILE *res,
	      int *exit_code)
{
	struct ref_set rs = { 0 };
	struct check_stats st = { 0 };
	char *line = NULL;
	size_t line_cap = 0;
	uint64_t res_line = 0, i;
	ssize_t n;
	int rc;

	rc = ref_load(o, in, &rs);
	if (!rc)
		rc = ref_index(&rs);
	if (rc == -EEXIST) {
		*exit_code = 2;
		rc = 0;
		goto out;
	}
	while (!rc && (n = getline(&line, &line_cap, res)) >= 0)
		rc = check_line(o, &rs, &st, line, chomp(line, n), ++res_line);
	if (!rc && ferror(res))
		rc = -EIO;
	if (rc)
		goto out;
	for (i = 0; i < rs.n_refs; i++) {
		struct ref *rf = &rs.refs[i];

		if (rf->seen >= rf->n_choices)
			continue;
		if (o->allow_missing)
			st.missing += rf->n_choices - rf->seen;
		else if (rf->n_choices == 1)
			mismatch(&st, "id '%s' (line %" PRIu64 "): missing result",
				 show_id(rf), rf->line_no);
		else
			mismatch(&st, "id '%s' (line %" PRIu64 "): missing results: %u of its %u choices came",
				 show_id(rf), rf->line_no, rf->seen,
				 rf->n_choices);
	}
	if (st.mismatches > REF_MAX_PRINTED)
		fprintf(stderr, "refdecode: ... %" PRIu64 " more mismatches not shown\n",
			st.mismatches - REF_MAX_PRINTED);
	fprintf(stderr, "refdecode: checked %" PRIu64 " requests: %" PRIu64 " mismatches",
		rs.n_refs, st.mismatches);
	if (o->allow_cancelled)
		fprintf(stderr, ", %" PRIu64 " cancelled",
			st.cancelled + st.llama.cancelled);
	if (o->allow_errors)
		fprintf(stderr, ", %" PRIu64 " errors", st.errors);
	if (o->allow_missing)
		fprintf(stderr, ", %" PRIu64 " missing", st.missing);
	if (st.sampled)
		fprintf(stderr, ", %" PRIu64 " results drawn by the naive sampler",
			st.sampled);
	if (o->llama)
		fprintf(stderr, "; llama: %" PRIu64 " generated tokens checked, %" PRIu64 " near-ties (reference margin < %g) accepted",
			st.llama.tokens, st.llama.near_ties, o->near_tie);
	if (o->llama && st.llama.sampled)
		fprintf(stderr, ", %" PRIu64 " tokens drawn by sampling, %" PRIu64 " near-boundary draws (within %g of the kept mass) accepted",
			st.llama.sampled, st.llama.near_boundary,
			REF_LLAMA_NEAR_BOUNDARY);
	fputc('\n', stderr);
	*exit_code = st.mismatches ? 1 : 0;
out:
	free(line);
	ref_set_free(&rs);
	return rc;
}

