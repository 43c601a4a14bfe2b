/*
 * refdecode.c - the independent single-process reference decoder.
 *
 *   refdecode [--model SPEC] [--max-context N] [--tokenizer FILE]
 *             --input FILE [--check RESULTS] [--allow-cancelled]
 *             [--allow-errors] [--allow-missing] [--near-tie EPS]
 *   refdecode --model llama:PATH --print-logits T1,T2,...
 *
 * Without --check it writes the result line of every input line to
 * standard output, in input order.  With --check it compares an engine's
 * result file (JSON Lines, any order) against its own decode, request by
 * request, and exits 0 only when they agree.
 *
 * NOTES ON THE DESIGN
 *
 * This program is the oracle the end-to-end tests trust, so it shares as
 * little as possible with the engine: one request at a time, the sim model
 * called straight through sim_next() (cost and fault keys of the spec are
 * ignored: it never sleeps, spins, crashes or hangs), and stop sequences
 * found by a naive suffix compare of every sequence after every token, not
 * by the stop_matcher automaton the engine uses.  Only request_parse() and
 * result_format() are shared: they define the input and output formats.
 *
 * Sampling (lib/sampling/sampler.h SEMANTICS): a sim request that needs logits
 * (temperature > 0, logit_bias, logprobs) gets every step's logits from
 * ref_sim_logits.c, refdecode's own transcription of the sim's definition
 * (its top token is held against sim_next()), and its token from the
 * naive sampler ref_sample() (tools/refdecode/ref_sampler.c: a full stable sort, not
 * the engine's histogram); what they share with the engine is the
 * definition itself: Philox and the weight function.  Each of n choices
 * is decoded on its own (choice i draws with key (seed, k, i)) and has a
 * result line of its own, with "index" when n > 1, "seed" when it
 * sampled, "logprobs" when asked.  A request without a seed draws with
 * seed 0 in print mode; in --check mode it draws with the seed the
 * engine's result reports (a replay: any sampled answer must follow from
 * its reported seed), and all its choices must report the same one.
 * Logprobs are compared exactly: the float printed with %.9g.
 *
 * Text (--tokenizer FILE, issue 16): a string prompt is encoded by the
 * naive encoder (tools/refdecode/ref_tokenizer.c, not lib/text/tokenizer.c's), BOS
 * first, and each request's text follows from ref_text.c's naive rules
 * (all generated tokens decoded again and every stop string searched for
 * over the whole text after each token; the end tokens; include_stop):
 * results carry "text", and --check compares it with the engine's as
 * decoded JSON strings, byte for byte (an invalid UTF-8 byte must show as
 * U+FFFD), and usage.prompt_tokens with the naive encoding's length.  A
 * cancelled result's text must be its tokens' text.  The llama --check
 * holds the tokens to the naive forward (ref_llama_check.c, which knows
 * no end tokens: give such requests ignore_eos) and the text to the text
 * rules replayed over those tokens.
 *
 * With --model llama:PATH the model is a naive llama forward pass
 * (ref_llama.c: full recompute, no cache, double accumulation), and --check
 * walks each engine generation with teacher forcing, accepting an engine
 * token that is not the reference argmax only when the reference's own
 * margin is under --near-tie EPS (default 1e-3): ref_llama_check.c.  It
 * prints how many tokens it checked and how many near-ties it accepted.
 * --print-logits prints the reference logits of every position of a token
 * list, one line each, so other implementations can be compared with it.
 *
 * Matching results to input lines: by (id, index) for every input line
 * that has a string id (ids of valid requests must be unique, or the check cannot be
 * made: exit 2); an error result with a null id is matched by its "line"
 * field.  When an error line and a valid request share an id, the "line"
 * field decides.
 *
 * Exit status: 0 all agree, 1 a mismatch or a runtime failure, 2 a usage
 * or input problem (bad option, unreadable file, duplicate ids in --check).
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

#define REF_MAX_PRINTED 20
#define REF_FLUSH_BYTES (1u << 16)

struct ref_opts {
	const char *input;
	const char *check;		/* results file, or NULL */
	struct sim_config model;
	struct ref_llama *llama;	/* --model llama:PATH, else NULL */
	const char *llama_path;
	double near_tie;		/* --near-tie */
	const char *print_logits;	/* --print-logits tokens, or NULL */
	bool max_context_set;
	struct request_limits lim;
	bool allow_cancelled;
	bool allow_errors;
	bool allow_missing;
	const char *tokenizer_path;	/* --tokenizer, or NULL */
	struct ref_text *text;		/* loaded from it: results carry text */
};

/* The reference outcome of one input line. */
struct ref {
	char *id;		/* NULL when the line had no string id */
	uint64_t line_no;
	bool is_error;		/* the line itself is bad */
	int32_t *raw;		/* generated tokens, before stop removal */
	uint32_t n_raw;
	uint32_t n_out;		/* tokens reported: raw[0..n_out) */
	uint32_t n_prompt;
	const char *finish;	/* "stop", "length" or "error" */
	const char *error;	/* llama print mode: why it could not decode */
	/* The request, kept when it is decoded per result or per choice
	 * (llama check mode; sim: it needs logits or has n > 1). */
	struct request *req;
	uint64_t next_same;	/* next ref index + 1 with the same id, 0: none */
	uint32_t seen;		/* results matched to it */
	uint32_t n_choices;	/* results it must get (1 for an error line) */
	uint64_t seen_choices;	/* bit i: the result of choice i came */
	bool has_seed;		/* a result reported the seed ... */
	uint64_t seed;		/* ... this one (all choices must agree) */
	bool has_text;		/* --tokenizer: decoded here, the text is */
	struct strbuf text;
	int32_t prev;		/* the prompt's last token (-1: none) */
};

/* One choice decoded with logits (or with n > 1): what it must report. */
struct ref_out {
	int32_t *raw;		/* generated tokens, before stop removal */
	uint32_t n_raw;
	uint32_t n_out;		/* tokens reported: raw[0..n_out) */
	const char *finish;	/* "stop", "length" or "error" */
	const char *error;	/* with "error": the engine's message */
	bool has_seed;		/* temperature > 0: the seed is reported */
	uint64_t seed;
	/* logprobs asked and max_tokens > 0: n_raw entries of stride */
	struct sampler_logprob *lp;
	uint32_t stride;
	bool has_text;		/* --tokenizer: the answer's text */
	struct strbuf text;
};

/* What a result says beside its tokens: its "text" as jansson decoded it
 * and usage.prompt_tokens. */
struct res_extra {
	bool has_text;
	const char *text;
	size_t text_len;
	bool has_prompt;
	uint64_t n_prompt;
};

struct ref_set {
	struct ref *refs;	/* one per input line, refs[i].line_no == i + 1 */
	uint64_t n_refs;
	uint64_t cap;
	uint64_t *table;	/* id hash: ref index + 1 of the first; 0 empty */
	uint64_t table_mask;
};

struct check_stats {
	uint64_t mismatches;
	uint64_t cancelled;
	uint64_t errors;	/* error results accepted for valid requests */
	uint64_t missing;	/* missing results accepted */
	uint64_t sampled;	/* sim: results checked by the naive sampler */
	struct ref_llama_tally llama;
};

/* ------------------------------------------------------------------------
 * Decoding one request alone
 */

/* Length of the longest stop sequence that is a suffix of gen[0..n). */
uint32_t ref_naive_stop(const struct request *req, const int32_t *gen,
			uint32_t n)
{
	const int32_t *s = req->stop_tokens;
	uint32_t i, len, best = 0;

	for (i = 0; i < req->n_stop_seqs; s += len, i++) {
		len = req->stop_lens[i];
		if (len > best && len <= n &&
		    memcmp(gen + n - len, s, len * sizeof(*s)) == 0)
			best = len;
	}
	return best;
}

/*
 * The stop rules after gen[n - 1], the newest of n generated tokens: with
 * a tokenizer (rt) the text's first (ref_text.h), then the token stop
 * sequences.  *ended when the request ends, with *n_out the tokens it
 * reports and (rt) *text its text; otherwise (rt) *text is all the text
 * so far.  0, -ENOMEM or -EINVAL.
 */
static int ref_after_token(const struct ref_text *rt, const struct request *req,
			   const int32_t *gen, uint32_t n, bool *ended,
			   uint32_t *n_out, struct strbuf *text)
{
	enum ref_text_event ev = REF_TEXT_MORE;
	uint32_t stop;
	int rc;

	*ended = false;
	if (rt) {
		rc = ref_text_step(rt, req, gen, n, &ev, text);
		if (rc)
			return rc;
	}
	if (ev == REF_TEXT_END) {	/* the end token is left out */
		*ended = true;
		*n_out = req->include_stop ? n : n - 1;
		return 0;
	}
	if (ev == REF_TEXT_STOP) {	/* tokens up to the completing one */
		*ended = true;
		*n_out = n;
		return 0;
	}
	stop = ref_naive_stop(req, gen, n);
	if (!stop)
		return 0;
	*ended = true;
	*n_out = req->include_stop ? n : n - stop;
	if (!rt || *n_out == n)
		return 0;
	text->len = 0;		/* the stop's tokens take their text along */
	return ref_text_decode(rt, req->n_prompt ? req->prompt[req->n_prompt - 1] : -1,
			       gen, *n_out, text);
}

/*
 * Decode req with the sim model.  Fills the ref's raw tokens, n_out and
 * finish.  0 or -ENOMEM.
 */
static int ref_decode(const struct request *req, const struct sim_config *m,
		      const struct ref_text *rt, struct ref *rf)
{
	uint64_t cap = (uint64_t)req->n_prompt + req->max_tokens;
	uint32_t n_gen = 0, n_out = 0;
	bool ended = false;
	int32_t *seq;
	int rc;

	seq = malloc((cap ? cap : 1) * sizeof(*seq));
	if (!seq)
		return -ENOMEM;
	if (req->n_prompt)
		memcpy(seq, req->prompt, req->n_prompt * sizeof(*seq));
	while (n_gen < req->max_tokens) {
		uint64_t n = (uint64_t)req->n_prompt + n_gen;

		seq[n] = sim_next(seq, n, m->vocab, m->seed);
		n_gen++;
		rc = ref_after_token(rt, req, seq + req->n_prompt, n_gen,
				     &ended, &n_out, &rf->text);
		if (rc) {
			free(seq);
			return rc;
		}
		if (ended)
			break;
	}
	rf->has_text = rt != NULL;
	rf->prev = req->n_prompt ? req->prompt[req->n_prompt - 1] : -1;
	rf->n_raw = n_gen;
	rf->n_prompt = req->n_prompt;
	rf->finish = ended ? "stop" : "length";
	rf->n_out = ended ? n_out : n_gen;
	rf->raw = malloc((n_gen ? n_gen : 1) * sizeof(*seq));
	if (!rf->raw) {
		free(seq);
		return -ENOMEM;
	}
	memcpy(rf->raw, seq + req->n_prompt, n_gen * sizeof(*seq));
	free(seq);
	return 0;
}

/* The error a request gets when its bias bans the whole vocabulary (the
 * engine's words: engine/engine.c engine_refuse()). */
#define REF_ALL_BANNED \
	"no token can be sampled: logit_bias (or the model) bans every token"

static void ref_out_free(struct ref_out *out)
{
	free(out->raw);
	free(out->lp);
	strbuf_release(&out->text);
	memset(out, 0, sizeof(*out));
}

/* Keep the logprobs of the k-th token, as the result lists them. */
static void ref_keep_logprobs(struct ref_out *out, uint32_t k,
			      const struct sampler_result *sr)
{
	struct sampler_logprob *e = out->lp + (size_t)k * out->stride;

	e[0] = (struct sampler_logprob){ sr->token, sr->logprob };
	for (uint32_t j = 1; j < out->stride; j++)
		e[j] = j - 1 < sr->n_top ? sr->top[j - 1] :
		       (struct sampler_logprob){ -1, 0.0f };
}

/*
 * Decode choice `choice` of req with the sim model, drawing with seed:
 * every step's logits from ref_sim_logits() (checked against sim_next(),
 * whose argmax they must be) and the token from the naive sampler
 * ref_sample().  A request that needs no logits (greedy, n > 1) takes
 * sim_next() as ref_decode() does.  0, -ENOMEM, or -EPROTO after saying
 * why on stderr (the two sims disagree, or the sampler failed).
 */
static int ref_decode_choice(const struct request *req,
			     const struct sim_config *m,
			     const struct ref_text *rt, uint64_t seed,
			     uint32_t choice, struct ref_out *out)
{
	uint64_t cap = (uint64_t)req->n_prompt + req->max_tokens;
	bool logits = request_needs_logits(req);
	struct sampling_params sp = req->sampling;
	uint32_t n_gen = 0, n_out = 0;
	bool ended = false;
	float *row = NULL;
	int32_t *seq;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	out->has_text = rt != NULL;
	sp.seed = seed;
	out->has_seed = sp.temperature > 0.0f;
	out->seed = seed;
	out->stride = 1 + sp.top_logprobs;
	seq = malloc((cap ? cap : 1) * sizeof(*seq));
	out->raw = malloc((req->max_tokens ? req->max_tokens : 1) *
			  sizeof(*out->raw));
	if (logits)
		row = malloc((size_t)m->vocab * sizeof(*row));
	if (sp.logprobs && req->max_tokens)
		out->lp = calloc((size_t)req->max_tokens * out->stride,
				 sizeof(*out->lp));
	if (!seq || !out->raw || (logits && !row) ||
	    (sp.logprobs && req->max_tokens && !out->lp)) {
		rc = -ENOMEM;
		goto out;
	}
	if (req->n_prompt)
		memcpy(seq, req->prompt, req->n_prompt * sizeof(*seq));
	out->finish = "length";
	while (n_gen < req->max_tokens) {
		uint64_t n = (uint64_t)req->n_prompt + n_gen;
		int32_t next = sim_next(seq, n, m->vocab, m->seed);
		struct sampler_result sr;

		if (logits) {
			if (ref_sim_logits(seq, n, m->vocab, m->seed, row) != next) {
				fprintf(stderr, "refdecode: the reference sim logits' top token is not sim_next()'s %d (prefix of %" PRIu64 " tokens)\n",
					next, n);
				rc = -EPROTO;
				goto out;
			}
			struct sampling_history h = { seq, (uint32_t)n, req->n_prompt };

			rc = ref_sample_hist(row, m->vocab, &sp, &h, n_gen, choice, &sr);
			if (rc == -ENOENT) {	/* the bias bans every token */
				rc = 0;
				out->finish = "error";
				out->error = REF_ALL_BANNED;
				break;
			}
			if (rc) {
				if (rc != -ENOMEM)
					fprintf(stderr, "refdecode: ref_sample: %s\n",
						strerror(-rc));
				rc = rc == -ENOMEM ? rc : -EPROTO;
				goto out;
			}
			next = sr.token;
			if (out->lp)
				ref_keep_logprobs(out, n_gen, &sr);
		}
		seq[n] = next;
		out->raw[n_gen++] = next;
		rc = ref_after_token(rt, req, out->raw, n_gen, &ended, &n_out,
				     &out->text);
		if (rc)
			goto out;
		if (ended) {
			out->finish = "stop";
			break;
		}
	}
	out->n_raw = n_gen;
	out->n_out = ended ? n_out : n_gen;
out:
	free(seq);
	free(row);
	if (rc)
		ref_out_free(out);
	return rc;
}

/*
 * With a tokenizer: a string prompt encoded again by the naive encoder,
 * in place of request_parse()'s (lib/text/tokenizer.c).  0 or -ENOMEM.
 */
static int ref_text_prompt(const struct ref_opts *o, const char *line,
			   size_t len, struct request *req)
{
	json_t *obj, *v;
	int32_t *prompt;
	uint32_t n;
	int rc = 0;

	if (!o->text)
		return 0;
	obj = json_loadb(line, len, JSON_ALLOW_NUL, NULL);
	v = json_object_get(obj, "prompt");
	if (json_is_string(v)) {
		rc = ref_text_encode(o->text, json_string_value(v),
				     json_string_length(v), &prompt, &n);
		if (!rc) {
			free(req->prompt);
			req->prompt = prompt;
			req->n_prompt = n;
		}
	}
	json_decref(obj);
	return rc;
}

/*
 * Parse and decode one input line into rf; err gets the message of an
 * error line.  0 or -ENOMEM.
 */
static int ref_line(const struct ref_opts *o, const char *line, size_t len,
		    uint64_t line_no, struct ref *rf, char *err, size_t err_len)
{
	struct request req;
	int rc;

	memset(rf, 0, sizeof(*rf));
	rf->line_no = line_no;
	rf->n_choices = 1;
	rc = request_parse(line, len, line_no, &o->lim, &req, err, err_len);
	if (rc == -ENOMEM) {
		request_release(&req);
		return rc;
	}
	rf->id = req.id;	/* taken over */
	req.id = NULL;
	if (rc) {
		rf->is_error = true;
		rf->finish = "error";
		request_release(&req);
		return 0;
	}
	rf->n_choices = req.n_choices ? req.n_choices : 1;
	rc = ref_text_prompt(o, line, len, &req);
	if (rc) {
		request_release(&req);
		return rc;
	}
	if (o->llama && !o->check && request_needs_logits(&req)) {
		rf->finish = "error";
		rf->error = "refdecode: the llama reference decodes greedily "
			    "only (no sampling, logit_bias or logprobs)";
		rf->n_prompt = req.n_prompt;
		request_release(&req);
		return 0;
	}
	if ((o->llama && o->check) ||
	    (!o->llama && (request_needs_logits(&req) || rf->n_choices > 1))) {
		/* Decoded later, choice by choice (check mode: with the
		 * seed the engine reports), or checked against the
		 * engine's own generation (llama). */
		rf->req = malloc(sizeof(*rf->req));
		if (!rf->req) {
			request_release(&req);
			return -ENOMEM;
		}
		*rf->req = req;
		rf->n_prompt = req.n_prompt;
		return 0;
	}
	if (o->llama) {
		rc = ref_llama_decode(o->llama, &req, &rf->raw, &rf->n_raw,
				      &rf->n_out, &rf->finish, &rf->error);
		rf->n_prompt = req.n_prompt;
	} else {
		rc = ref_decode(&req, &o->model, o->text, rf);
	}
	request_release(&req);
	return rc;
}

static void ref_free(struct ref *rf)
{
	free(rf->id);
	free(rf->raw);
	strbuf_release(&rf->text);
	if (rf->req) {
		request_release(rf->req);
		free(rf->req);
	}
}

/* ------------------------------------------------------------------------
 * Reading lines
 */

static FILE *open_input(const char *path)
{
	if (strcmp(path, "-") == 0)
		return stdin;
	return fopen(path, "r");
}

/* Drop the line's '\n'; returns its length. */
static size_t chomp(char *line, ssize_t n)
{
	if (n > 0 && line[n - 1] == '\n')
		line[--n] = '\0';
	return (size_t)n;
}

/* ------------------------------------------------------------------------
 * Without --check: print the reference results
 */

static int write_out(struct strbuf *sb)
{
	if (sb->len && fwrite(sb->data, 1, sb->len, stdout) != sb->len)
		return -EIO;
	strbuf_consume(sb, sb->len);
	return 0;
}

/*
 * Print every choice of a kept sim request.  A request without a seed
 * draws with seed 0 here (the engine picks one and reports it; --check
 * replays that one).
 */
static int print_choices(const struct ref_opts *o, const struct ref *rf,
			 struct strbuf *sb)
{
	const struct request *req = rf->req;
	int rc = 0;

	for (uint32_t c = 0; !rc && c < rf->n_choices; c++) {
		struct result r = { 0 };
		struct ref_out out;

		rc = ref_decode_choice(req, &o->model, o->text,
				       req->sampling.seed, c, &out);
		if (rc)
			break;
		r.id = rf->id;
		r.line_no = rf->line_no;
		r.tokens = out.raw;
		r.n_tokens = out.n_out;
		r.finish_reason = out.finish;
		r.error = out.error;
		r.n_prompt = req->n_prompt;
		r.n_generated = out.n_raw;
		r.n_choices = rf->n_choices;
		r.index = c;
		r.has_seed = out.has_seed;
		r.seed = out.seed;
		r.logprobs = out.lp;
		r.logprob_stride = out.stride;
		r.has_text = out.has_text;
		r.text = out.text.data ? out.text.data : "";
		r.text_len = out.text.len;
		rc = result_format(&r, sb);
		ref_out_free(&out);
	}
	return rc;
}

static int run_print(const struct ref_opts *o, FILE *in)
{
	struct strbuf sb = STRBUF_INIT;
	char *line = NULL, err[512];
	size_t line_cap = 0;
	uint64_t line_no = 0;
	struct ref rf;
	ssize_t n;
	int rc = 0;

	while (!rc && (n = getline(&line, &line_cap, in)) >= 0) {
		struct result r = { 0 };

		rc = ref_line(o, line, chomp(line, n), ++line_no, &rf, err,
			      sizeof(err));
		if (rc)
			break;
		if (rf.req) {
			rc = print_choices(o, &rf, &sb);
			ref_free(&rf);
			if (!rc && sb.len >= REF_FLUSH_BYTES)
				rc = write_out(&sb);
			continue;
		}
		r.id = rf.id;
		r.line_no = rf.line_no;
		r.tokens = rf.raw;
		r.n_tokens = rf.n_out;
		r.finish_reason = rf.finish;
		r.error = rf.is_error ? err : rf.error;
		r.n_prompt = rf.n_prompt;
		r.n_generated = rf.n_raw;
		r.has_text = rf.has_text;
		r.text = rf.text.data ? rf.text.data : "";
		r.text_len = rf.text.len;
		rc = result_format(&r, &sb);
		ref_free(&rf);
		if (!rc && sb.len >= REF_FLUSH_BYTES)
			rc = write_out(&sb);
	}
	if (!rc && ferror(in))
		rc = -EIO;
	if (!rc)
		rc = write_out(&sb);
	if (fflush(stdout) && !rc)
		rc = -EIO;
	free(line);
	strbuf_release(&sb);
	return rc;
}

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

static int run_check(const struct ref_opts *o, FILE *in, FILE *res,
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

/* ------------------------------------------------------------------------
 * Command line
 */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: refdecode [--model SPEC] [--max-context N] [--tokenizer FILE]\n"
		"                 --input FILE [--check RESULTS] [--allow-cancelled]\n"
		"                 [--allow-errors] [--allow-missing] [--near-tie EPS]\n"
		"       refdecode --model llama:PATH --print-logits T1,T2,...\n"
		"  --model SPEC       sim or sim:key=value,... (default sim); cost and\n"
		"                     fault keys are ignored; or llama:PATH[,opts]: a\n"
		"                     llama2.c checkpoint run by a naive forward pass\n"
		"                     (options after the comma are ignored)\n"
		"  --max-context N    most tokens in a sequence (default 4096; llama:\n"
		"                     the checkpoint's seq_len, and no more)\n"
		"  --tokenizer FILE   a llama2.c tokenizer.bin of the model's vocabulary:\n"
		"                     string prompts (naive encoder), stop strings, the\n"
		"                     end tokens, and \"text\" in results (compared exactly)\n"
		"  --input FILE       requests, JSON Lines ('-': standard input)\n"
		"  --check RESULTS    compare an engine's results instead of printing\n"
		"  --allow-cancelled  accept 'cancelled' results whose tokens are a\n"
		"                     prefix of the reference output\n"
		"  --allow-errors     accept 'error' results for valid requests\n"
		"  --allow-missing    accept requests that have no result\n"
		"  --near-tie EPS     llama --check: an engine token that is not the\n"
		"                     reference argmax passes as a near-tie when the\n"
		"                     reference logit margin is below EPS (default 1e-3);\n"
		"                     the check goes on with the engine's token\n"
		"  --print-logits T1,T2,...  llama: print the reference logits after each\n"
		"                     position of the tokens, one line per position\n"
		"Exit: 0 ok, 1 mismatch or failure, 2 usage or input problem.\n");
}

/*
 * Load the llama:PATH[,opts] checkpoint and take the vocabulary and the
 * context limit from it.
 */
static int load_llama(struct ref_opts *o)
{
	char *path = strdup(o->llama_path), *comma, err[512];
	const struct ref_llama_shape *sh;

	if (!path)
		return -ENOMEM;
	comma = strchr(path, ',');
	if (comma)
		*comma = '\0';	/* options: the engine's business */
	if (!*path) {
		fprintf(stderr, "refdecode: --model llama: needs a checkpoint path\n");
		free(path);
		return -EINVAL;
	}
	o->llama = ref_llama_load(path, err, sizeof(err));
	free(path);
	if (!o->llama) {
		fprintf(stderr, "refdecode: --model: %s\n", err);
		return -EINVAL;
	}
	sh = ref_llama_shape(o->llama);
	o->lim.vocab = sh->vocab;
	if (!o->max_context_set) {
		o->lim.max_context = sh->seq_len;
	} else if (o->lim.max_context > sh->seq_len) {
		fprintf(stderr, "refdecode: --max-context %u is more than the checkpoint's seq_len %u\n",
			o->lim.max_context, sh->seq_len);
		return -EINVAL;
	}
	return 0;
}

/* --tokenizer: the model's vocabulary is the tokenizer's. */
static int load_tokenizer(struct ref_opts *o)
{
	char err[512];

	o->text = ref_text_load(o->tokenizer_path, o->lim.vocab, err,
				sizeof(err));
	if (!o->text) {
		fprintf(stderr, "refdecode: --tokenizer: %s\n", err);
		return -EINVAL;
	}
	o->lim.tok = ref_text_tokenizer(o->text);
	return 0;
}

static int parse_opts(int argc, char **argv, struct ref_opts *o)
{
	static const struct option longopts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "max-context", required_argument, NULL, 'c' },
		{ "input", required_argument, NULL, 'i' },
		{ "check", required_argument, NULL, 'k' },
		{ "allow-cancelled", no_argument, NULL, 'C' },
		{ "allow-errors", no_argument, NULL, 'E' },
		{ "allow-missing", no_argument, NULL, 'M' },
		{ "near-tie", required_argument, NULL, 'n' },
		{ "print-logits", required_argument, NULL, 'L' },
		{ "tokenizer", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char err[256];
	int c;

	sim_config_default(&o->model);
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'm':
			o->llama_path = NULL;
			if (strncmp(optarg, "llama:", 6) == 0) {
				o->llama_path = optarg + 6;
			} else if (strcmp(optarg, "sim") == 0) {
				sim_config_default(&o->model);
			} else if (strncmp(optarg, "sim:", 4) != 0) {
				fprintf(stderr, "refdecode: --model must be sim, sim:key=value,... or llama:PATH\n");
				return -EINVAL;
			} else if (sim_config_parse(optarg + 4, &o->model, err,
						    sizeof(err))) {
				fprintf(stderr, "refdecode: --model: %s\n", err);
				return -EINVAL;
			}
			break;
		case 'c':
			if (parse_u32(optarg, 0, UINT32_MAX, &o->lim.max_context)) {
				fprintf(stderr, "refdecode: bad value '%s' for --max-context\n",
					optarg);
				return -EINVAL;
			}
			o->max_context_set = true;
			break;
		case 'n': {
			char *end;

			errno = 0;
			o->near_tie = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(o->near_tie >= 0)) {
				fprintf(stderr, "refdecode: bad value '%s' for --near-tie (want a number >= 0)\n",
					optarg);
				return -EINVAL;
			}
			break;
		}
		case 'L':
			o->print_logits = optarg;
			break;
		case 'T':
			o->tokenizer_path = optarg;
			break;
		case 'i':
			o->input = optarg;
			break;
		case 'k':
			o->check = optarg;
			break;
		case 'C':
			o->allow_cancelled = true;
			break;
		case 'E':
			o->allow_errors = true;
			break;
		case 'M':
			o->allow_missing = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "refdecode: unexpected argument '%s'\n",
			argv[optind]);
		return -EINVAL;
	}
	if (o->print_logits && !o->llama_path) {
		fprintf(stderr, "refdecode: --print-logits needs --model llama:PATH\n");
		return -EINVAL;
	}
	if (!o->input && !o->print_logits) {
		fprintf(stderr, "refdecode: --input FILE is required\n");
		return -EINVAL;
	}
	o->lim.vocab = o->model.vocab;
	if (o->llama_path && load_llama(o))
		return -EINVAL;
	return o->tokenizer_path ? load_tokenizer(o) : 0;
}

int main(int argc, char **argv)
{
	/* Both reference models give logits: sampling requests parse. */
	struct ref_opts o = { .lim = { .vocab = 32000, .max_context = 4096,
				       .has_logits = true },
			      .near_tie = REF_LLAMA_NEAR_TIE_DEFAULT };
	FILE *in = NULL, *res = NULL;
	int rc = 0, exit_code = 0;

	if (parse_opts(argc, argv, &o)) {
		exit_code = 2;
		goto out;
	}
	if (o.print_logits) {
		exit_code = ref_llama_print_logits(o.llama, o.print_logits,
						   stdout);
		goto out;
	}
	in = open_input(o.input);
	if (!in) {
		fprintf(stderr, "refdecode: %s: %s\n", o.input, strerror(errno));
		exit_code = 2;
		goto out;
	}
	if (o.check) {
		res = fopen(o.check, "r");
		if (!res) {
			fprintf(stderr, "refdecode: %s: %s\n", o.check,
				strerror(errno));
			exit_code = 2;
			goto out;
		}
		rc = run_check(&o, in, res, &exit_code);
		fclose(res);
	} else {
		rc = run_print(&o, in);
	}
	if (rc) {
		fprintf(stderr, "refdecode: %s\n", strerror(-rc));
		exit_code = 1;
	}
out:
	if (in && in != stdin)
		fclose(in);
	ref_llama_free(o.llama);
	ref_text_free(o.text);
	return exit_code;
}
