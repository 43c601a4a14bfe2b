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

#include "tools/refdecode/refdecode_internal.h"
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
int ref_after_token(const struct ref_text *rt, const struct request *req,
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

void ref_out_free(struct ref_out *out)
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
int ref_decode_choice(const struct request *req,
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
int ref_line(const struct ref_opts *o, const char *line, size_t len,
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

void ref_free(struct ref *rf)
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
size_t chomp(char *line, ssize_t n)
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
