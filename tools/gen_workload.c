/*
 * gen_workload.c - write a random but reproducible request workload as
 * JSON Lines (docs/DESIGN.md 3.1) to standard output.
 *
 *   gen_workload [--n N] [--seed S] [--model SPEC] [--vocab V]
 *                [--model-seed S] [--max-prompt P] [--max-tokens M]
 *                [--stop-frac F] [--max-context C] [--ids PREFIX]
 *                [--sampling] [--text CORPUS --tokenizer FILE]
 *
 * NOTES ON THE DESIGN
 *
 * The mix is meant to exercise an engine the way real traffic does:
 * prompts mostly short with a long tail, max_tokens mostly small with some
 * 0 (which must never occupy a model call) and some up to M, so slots free
 * at very different times.  Every request stays within the context limit.
 *
 * Random stop tokens almost never fire (about max_tokens / vocab), so for
 * most requests with stops the stop is taken from the request's real
 * future output: the generator decodes it with sim_next() (the same model
 * the engine runs, given by --model or --vocab/--model-seed) and picks a
 * token or a 1..4-token run inside the first max_tokens generated tokens.
 * A few stop sequences straddle the prompt/output boundary: they must NOT
 * fire there, since stops are matched against generated tokens only.
 *
 * --sampling adds OpenAI sampling fields to most lines (temperature 0 or
 * 0.3..2, top_p, top_k, min_p, seed, logit_bias with some -100 bans,
 * logprobs in both forms with 0..5 alternatives, n of 1..4), and leaves
 * the seed out of some sampled requests so the engine must pick and report
 * one.  Values are short decimals, so the line says exactly what float the
 * engine reads.  Their draws come after a line's other draws: without the
 * option the output is what it always was.
 *
 * --text CORPUS --tokenizer FILE (issue 16) makes text requests for a
 * sim whose vocabulary is the tokenizer's: string prompts cut from the
 * corpus at character boundaries (some empty), "stop" strings (a string
 * or an array of 1..4) and some ignore_eos.  Stops that fire are cut from
 * the request's real future text: the greedy output decoded token by
 * token, 1..8 bytes, often across a token boundary (and so through byte
 * tokens and multi-byte characters), kept only when valid UTF-8 without
 * NUL; others are near misses (a fired one with its last byte changed,
 * which streaming must hold back and then release) or corpus snippets.
 * Some requests add token-id stops too.  Its draws replace the token
 * prompt's; without it the output is what it always was.
 *
 * Output depends only on the options: one splitmix64 stream, seeded by
 * --seed, drawn in a fixed order.  Nothing but the JSON Lines is printed.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/utf8_strict.h"
#include "engine/request.h"
#include "model/sim_model.h"
#include "util/strbuf.h"
#include "util/parse_num.h"
#include "text/tokenizer.h"

#define GEN_FLUSH_BYTES (1u << 16)
#define GEN_MAX_STOP_LEN 4

struct gen_opts {
	uint64_t n;		/* requests to write */
	uint64_t seed;		/* workload seed */
	uint32_t vocab;		/* the sim model's vocabulary */
	uint64_t model_seed;	/* the sim model's seed */
	uint32_t max_prompt;	/* longest prompt, tokens */
	uint32_t max_tokens;	/* largest max_tokens */
	double stop_frac;	/* fraction of requests with stops */
	uint32_t max_context;	/* prompt + max_tokens never exceeds this */
	const char *ids;	/* id prefix */
	bool sampling;		/* add sampling fields */
	const char *text_path;	/* --text: the corpus, or NULL */
	const char *tok_path;	/* --tokenizer */
	char *corpus;		/* --text: its bytes */
	size_t corpus_len;
	struct tokenizer *tok;
};

/* One request as it is being built. */
struct gen_req {
	int32_t *prompt;	/* n_prompt tokens */
	uint32_t n_prompt;
	uint32_t max_tokens;
	bool omit_max_tokens;	/* leave the field out: default 16 */
	int32_t *future;	/* the first max_tokens generated tokens */
};

/* ------------------------------------------------------------------------
 * Random numbers: splitmix64
 */

static uint64_t rng_state;

static uint64_t rnd(void)
{
	return sim_splitmix64(&rng_state);
}

/* In [0, n); 0 when n is 0. */
static uint32_t rnd_below(uint32_t n)
{
	return n ? (uint32_t)(rnd() % n) : 0;
}

/* true with probability percent / 100. */
static bool rnd_pct(uint32_t percent)
{
	return rnd_below(100) < percent;
}

static double rnd_unit(void)
{
	return (double)(rnd() >> 11) / (double)(1ull << 53);
}

static uint32_t min_u32(uint32_t a, uint32_t b)
{
	return a < b ? a : b;
}

static uint32_t max_u32(uint32_t a, uint32_t b)
{
	return a > b ? a : b;
}

/* ------------------------------------------------------------------------
 * Shapes of a request
 */

/* Mostly short, a long tail; never longer than max_prompt or the context. */
static uint32_t gen_prompt_len(const struct gen_opts *o)
{
	uint32_t p = min_u32(o->max_prompt, o->max_context);
	uint32_t r = rnd_below(100);

	if (p == 0 || r < 3)
		return 0;
	if (r < 70)
		return 1 + rnd_below(max_u32(1, p / 16));
	if (r < 92)
		return 1 + rnd_below(max_u32(1, p / 4));
	return 1 + rnd_below(p);
}

/* Some 0, many small, some up to max_tokens; within the context. */
static uint32_t gen_max_tokens(const struct gen_opts *o, uint32_t n_prompt)
{
	uint32_t m = min_u32(o->max_tokens, o->max_context - n_prompt);
	uint32_t r = rnd_below(100);

	if (m == 0 || r < 5)
		return 0;
	if (r < 60)
		return 1 + rnd_below(min_u32(m, 16));
	if (r < 85)
		return 1 + rnd_below(max_u32(1, m / 4));
	return 1 + rnd_below(m);
}

/* The tokens the model generates after the prompt, no stops applied. */
static int gen_future(const struct gen_opts *o, struct gen_req *rq)
{
	uint64_t n = (uint64_t)rq->n_prompt + rq->max_tokens;
	int32_t *seq;
	uint32_t i;

	seq = malloc((n ? n : 1) * sizeof(*seq));
	if (!seq)
		return -ENOMEM;
	memcpy(seq, rq->prompt, rq->n_prompt * sizeof(*seq));
	for (i = 0; i < rq->max_tokens; i++)
		seq[rq->n_prompt + i] = sim_next(seq, rq->n_prompt + i,
						 o->vocab, o->model_seed);
	rq->future = malloc((rq->max_tokens ? rq->max_tokens : 1) *
			    sizeof(*seq));
	if (!rq->future) {
		free(seq);
		return -ENOMEM;
	}
	memcpy(rq->future, seq + rq->n_prompt, rq->max_tokens * sizeof(*seq));
	free(seq);
	return 0;
}

/* ------------------------------------------------------------------------
 * Stop sequences
 */

/*
 * Fill seq with a stop sequence of len tokens (<= GEN_MAX_STOP_LEN) and
 * return len.  fire: a run of the real output, so the stop is hit
 * (unless an earlier one ends generation first); else random tokens.
 */
static uint32_t gen_stop_seq(const struct gen_opts *o, const struct gen_req *rq,
			     bool fire, uint32_t max_len, int32_t *seq)
{
	uint32_t len = 1 + rnd_below(max_len), pos, i;

	if (fire && rq->max_tokens > 0) {
		len = min_u32(len, rq->max_tokens);
		pos = rnd_below(rq->max_tokens - len + 1);
		memcpy(seq, rq->future + pos, len * sizeof(*seq));
		return len;
	}
	for (i = 0; i < len; i++)
		seq[i] = (int32_t)rnd_below(o->vocab);
	return len;
}

/*
 * A sequence made of the prompt's last tokens and the output's first
 * ones: it reaches back into the prompt, so it must not stop generation
 * at that point.  Returns 0 when the request has no such boundary.
 */
static uint32_t gen_boundary_seq(const struct gen_req *rq, int32_t *seq)
{
	uint32_t n_p, n_g;

	if (rq->n_prompt == 0 || rq->max_tokens == 0)
		return 0;
	n_p = 1 + rnd_below(min_u32(2, rq->n_prompt));
	n_g = 1 + rnd_below(min_u32(2, rq->max_tokens));
	memcpy(seq, rq->prompt + rq->n_prompt - n_p, n_p * sizeof(*seq));
	memcpy(seq + n_p, rq->future, n_g * sizeof(*seq));
	return n_p + n_g;
}

static int put_tokens(struct strbuf *sb, const int32_t *t, uint32_t n)
{
	char num[16];
	uint32_t i;
	int len;

	if (strbuf_append(sb, "[", 1))
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		len = snprintf(num, sizeof(num), i ? ",%d" : "%d", t[i]);
		if (strbuf_append(sb, num, (size_t)len))
			return -ENOMEM;
	}
	return strbuf_append(sb, "]", 1);
}

/*
 * Append the stop fields of one request: one main form (stop_token,
 * stop_token_ids, stop_sequence or stop_sequences), sometimes a second.
 */
static int put_stops(const struct gen_opts *o, const struct gen_req *rq,
		     struct strbuf *sb)
{
	static const char *const names[] = {
		"stop_token", "stop_token_ids", "stop_sequence", "stop_sequences",
	};
	bool used[4] = { false };
	bool fire = rnd_pct(65);
	bool boundary = rnd_pct(5);
	int32_t seq[2 * GEN_MAX_STOP_LEN];
	uint32_t form, n_forms = 1 + rnd_pct(20), f, k, n, i, len;
	int rc = 0;

	for (f = 0; f < n_forms; f++) {
		form = rnd_below(4);
		if (used[form])
			continue;
		used[form] = true;
		rc |= strbuf_printf(sb, ",\"%s\":", names[form]);
		switch (form) {
		case 0:
			gen_stop_seq(o, rq, fire && f == 0, 1, seq);
			rc |= strbuf_printf(sb, "%d", seq[0]);
			break;
		case 1:
			n = 1 + rnd_below(3);
			k = rnd_below(n);
			rc |= strbuf_append(sb, "[", 1);
			for (i = 0; i < n; i++) {
				gen_stop_seq(o, rq, fire && f == 0 && i == k, 1,
					     seq);
				rc |= strbuf_printf(sb, i ? ",%d" : "%d", seq[0]);
			}
			rc |= strbuf_append(sb, "]", 1);
			break;
		case 2:
			len = 0;
			if (boundary && f == 0)
				len = gen_boundary_seq(rq, seq);
			if (!len)
				len = gen_stop_seq(o, rq, fire && f == 0,
						   GEN_MAX_STOP_LEN, seq);
			rc |= put_tokens(sb, seq, len);
			break;
		case 3:
			n = 1 + rnd_below(3);
			k = rnd_below(n);
			rc |= strbuf_append(sb, "[", 1);
			for (i = 0; i < n; i++) {
				len = 0;
				if (boundary && f == 0 && i == (k + 1) % n)
					len = gen_boundary_seq(rq, seq);
				if (!len)
					len = gen_stop_seq(o, rq,
							   fire && f == 0 && i == k,
							   GEN_MAX_STOP_LEN, seq);
				if (i)
					rc |= strbuf_append(sb, ",", 1);
				rc |= put_tokens(sb, seq, len);
			}
			rc |= strbuf_append(sb, "]", 1);
			break;
		}
	}
	if (rnd_pct(30))
		rc |= strbuf_printf(sb, ",\"include_stop\":true");
	else if (rnd_pct(15))
		rc |= strbuf_printf(sb, ",\"include_stop\":false");
	return rc ? -ENOMEM : 0;
}

/* ------------------------------------------------------------------------
 * Sampling fields (--sampling)
 */

/* ,"logit_bias":{...}: 1..4 distinct tokens, some banned (-100). */
static int put_bias(const struct gen_opts *o, struct strbuf *sb)
{
	uint32_t n = 1 + rnd_below(4), tokens[4], i, j;
	int rc = 0;

	n = min_u32(n, o->vocab);
	for (i = 0; i < n; i++) {
		do {	/* distinct: a repeated key is an error */
			tokens[i] = rnd_below(o->vocab);
			for (j = 0; j < i && tokens[j] != tokens[i]; j++)
				;
		} while (j < i);
	}
	rc |= strbuf_printf(sb, ",\"logit_bias\":{");
	for (i = 0; i < n; i++) {
		/* -100 bans; else -20..20 in steps of 0.5 */
		double bias = rnd_pct(30) ? -100.0 :
			      (double)rnd_below(81) * 0.5 - 20.0;

		rc |= strbuf_printf(sb, "%s\"%u\":%.1f", i ? "," : "",
				    tokens[i], bias);
	}
	rc |= strbuf_append(sb, "}", 1);
	return rc;
}

/* The sampling fields of one line, each present or not at random. */
static int put_sampling(const struct gen_opts *o, struct strbuf *sb)
{
	int rc = 0;

	if (rnd_pct(75)) {	/* else greedy by default */
		if (rnd_pct(15))
			rc |= strbuf_printf(sb, ",\"temperature\":0");
		else	/* 0.30 .. 2.00 */
			rc |= strbuf_printf(sb, ",\"temperature\":%.2f",
					    0.3 + (double)rnd_below(171) * 0.01);
	}
	if (rnd_pct(40))	/* 0.05 .. 1.00 */
		rc |= strbuf_printf(sb, ",\"top_p\":%.2f",
				    (double)(5 + rnd_below(96)) * 0.01);
	if (rnd_pct(30))
		rc |= strbuf_printf(sb, ",\"top_k\":%u", rnd_below(51));
	if (rnd_pct(25))	/* 0.01 .. 0.30 */
		rc |= strbuf_printf(sb, ",\"min_p\":%.2f",
				    (double)(1 + rnd_below(30)) * 0.01);
	if (rnd_pct(80))	/* else the engine picks and reports one */
		rc |= strbuf_printf(sb, ",\"seed\":%" PRIu64,
				    rnd_pct(50) ? rnd() >> 1 : rnd_below(1000));
	if (rnd_pct(30))
		rc |= put_bias(o, sb);
	if (rnd_pct(40)) {
		if (rnd_pct(50))	/* the chat form */
			rc |= strbuf_printf(sb, ",\"logprobs\":true,\"top_logprobs\":%u",
					    rnd_below(6));
		else			/* the completions form */
			rc |= strbuf_printf(sb, ",\"logprobs\":%u",
					    rnd_below(6));
	}
	if (rnd_pct(30))
		rc |= strbuf_printf(sb, ",\"n\":%u", 2 + rnd_below(3));
	return rc;
}

/* ------------------------------------------------------------------------
 * Text requests (--text)
 */

#define GEN_MAX_STOP_BYTES 8
#define GEN_MAX_STOP_STRS 4

/* Valid UTF-8 without a NUL (what a JSON string of a request may hold). */
static bool text_ok(const char *s, size_t n)
{
	for (size_t i = 0, k; i < n; i += k) {
		k = utf8_strict_seq((const unsigned char *)s + i, n - i);
		if (!k || !s[i])
			return false;
	}
	return true;
}

static bool is_cont(char c)
{
	return ((unsigned char)c & 0xC0) == 0x80;
}

/* A JSON string of s[0..n) (valid UTF-8 copied, controls escaped). */
static int put_json_str(struct strbuf *sb, const char *s, size_t n)
{
	int rc = strbuf_append(sb, "\"", 1);

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\')
			rc |= strbuf_printf(sb, "\\%c", c);
		else if (c < 0x20)
			rc |= strbuf_printf(sb, "\\u%04x", c);
		else
			rc |= strbuf_append(sb, s + i, 1);
	}
	return rc | strbuf_append(sb, "\"", 1);
}

/* A cut of the corpus at character boundaries, at most max bytes. */
static void corpus_cut(const struct gen_opts *o, size_t max, size_t *at,
		       size_t *len)
{
	size_t start = rnd_below((uint32_t)o->corpus_len), end;

	while (start > 0 && is_cont(o->corpus[start]))
		start--;
	end = start + rnd_below((uint32_t)max + 1);
	if (end > o->corpus_len)
		end = o->corpus_len;
	while (end < o->corpus_len && is_cont(o->corpus[end]))
		end--;
	*at = start;
	*len = end - start;
}

/* The future text: the bytes of rq->future's first n tokens, and where
 * each token's bytes end. */
static int future_text(const struct gen_opts *o, const struct gen_req *rq,
		       uint32_t n, struct strbuf *text, size_t *ends)
{
	int32_t prev = rq->n_prompt ? rq->prompt[rq->n_prompt - 1] : -1;

	for (uint32_t i = 0; i < n; prev = rq->future[i++]) {
		size_t len;
		const char *p = tokenizer_piece(o->tok, prev, rq->future[i], &len);

		if (p && len && strbuf_append(text, p, len))
			return -ENOMEM;
		ends[i] = text->len;
	}
	return 0;
}

/*
 * One stop string into buf (at most GEN_MAX_STOP_BYTES): cut from the
 * future text (fire), the same with its last byte changed (a near miss),
 * the prompt's last bytes and the output's first (it must NOT fire: stops
 * match the generated text only), or cut from the corpus.  Returns its
 * length.
 */
static size_t gen_stop_str(const struct gen_opts *o, const struct strbuf *text,
			   const size_t *ends, uint32_t n_ends,
			   const char *prompt, size_t n_prompt, char *buf)
{
	uint32_t kind = rnd_below(100);

	if (kind >= 94 && n_prompt && text->len) {	/* across the boundary */
		size_t a = 1 + rnd_below(min_u32((uint32_t)n_prompt, 3));
		size_t b = 1 + rnd_below(min_u32((uint32_t)text->len, 3));

		memcpy(buf, prompt + n_prompt - a, a);
		memcpy(buf + a, text->data, b);
		if (text_ok(buf, a + b))
			return a + b;
	}

	for (int tries = 0; kind < 80 && text->len && tries < 30; tries++) {
		size_t start, len = 1 + rnd_below(GEN_MAX_STOP_BYTES);

		if (n_ends > 1 && rnd_pct(60)) {	/* across a boundary */
			size_t b = ends[rnd_below(n_ends - 1)];

			start = b - min_u32((uint32_t)b, 1 + rnd_below(4));
		} else {
			start = rnd_below((uint32_t)text->len);
		}
		if (start + len > text->len)
			len = text->len - start;
		if (!len || !text_ok(text->data + start, len))
			continue;
		memcpy(buf, text->data + start, len);
		if (kind >= 60) {	/* near miss: the last byte changed */
			unsigned char *c = (unsigned char *)buf + len - 1;

			*c = *c < 0x80 ? (unsigned char)('a' + rnd_below(26)) :
			     (unsigned char)(0x80 + rnd_below(64));
			if (!text_ok(buf, len))
				continue;
		}
		return len;
	}
	for (;;) {
		size_t at, len;

		corpus_cut(o, GEN_MAX_STOP_BYTES, &at, &len);
		if (len && text_ok(o->corpus + at, len)) {
			memcpy(buf, o->corpus + at, len);
			return len;
		}
	}
}

/* A text request: string prompt, stop strings, maybe token stops. */
static int gen_one_text(const struct gen_opts *o, uint64_t idx,
			struct strbuf *sb)
{
	struct gen_req rq = { 0 };
	struct strbuf text = STRBUF_INIT;
	size_t at = 0, len = 0, max = o->max_prompt, *ends = NULL;
	uint32_t r = rnd_below(100), n_ends;
	bool ignore_eos = rnd_pct(15), token_stops = rnd_pct(20);
	char stop[GEN_MAX_STOP_BYTES];
	int rc = 0;

	if (r >= 3)	/* else the empty prompt: BOS alone */
		corpus_cut(o, r < 70 ? max / 8 : max, &at, &len);
	rq.prompt = malloc(tokenizer_encode_max(len) * sizeof(*rq.prompt));
	if (!rq.prompt)
		return -ENOMEM;
	for (;;) {	/* shorter until it fits the context */
		size_t n;

		rc = tokenizer_encode(o->tok, o->corpus + at, len, true, false,
				      rq.prompt, tokenizer_encode_max(len), &n);
		if (rc)
			goto out;
		if (n < o->max_context) {
			rq.n_prompt = (uint32_t)n;
			break;
		}
		len /= 2;
		while (len && is_cont(o->corpus[at + len]))
			len--;
	}
	rq.max_tokens = gen_max_tokens(o, rq.n_prompt);
	rc = gen_future(o, &rq);
	ends = malloc((rq.max_tokens ? rq.max_tokens : 1) * sizeof(*ends));
	if (rc || !ends) {
		rc = -ENOMEM;
		goto out;
	}
	/* the text a stop can match: up to the first end token */
	for (n_ends = 0; n_ends < rq.max_tokens; n_ends++)
		if (!ignore_eos && (rq.future[n_ends] == TOKENIZER_BOS ||
				    rq.future[n_ends] == TOKENIZER_EOS))
			break;
	rc = future_text(o, &rq, n_ends, &text, ends);
	rc |= strbuf_printf(sb, "{\"id\":\"%s%" PRIu64 "\",\"prompt\":",
			    o->ids, idx);
	rc |= put_json_str(sb, o->corpus + at, len);
	rc |= strbuf_printf(sb, ",\"max_tokens\":%u", rq.max_tokens);
	if (rnd_unit() < o->stop_frac) {
		uint32_t n = 1 + rnd_below(GEN_MAX_STOP_STRS);
		bool array = n > 1 || rnd_pct(50);

		rc |= strbuf_printf(sb, array ? ",\"stop\":[" : ",\"stop\":");
		for (uint32_t i = 0; i < n; i++) {
			size_t sl = gen_stop_str(o, &text, ends, n_ends,
						 o->corpus + at, len, stop);

			if (i)
				rc |= strbuf_append(sb, ",", 1);
			rc |= put_json_str(sb, stop, sl);
		}
		if (array)
			rc |= strbuf_append(sb, "]", 1);
	}
	if (token_stops)	/* with their own include_stop draws */
		rc |= put_stops(o, &rq, sb);
	else if (rnd_pct(30))
		rc |= strbuf_printf(sb, ",\"include_stop\":true");
	if (ignore_eos)
		rc |= strbuf_printf(sb, ",\"ignore_eos\":true");
	else if (rnd_pct(5))
		rc |= strbuf_printf(sb, ",\"ignore_eos\":false");
	if (o->sampling)
		rc |= put_sampling(o, sb);
	rc |= strbuf_append(sb, "}\n", 2);
	rc = rc ? -ENOMEM : 0;
out:
	strbuf_release(&text);
	free(ends);
	free(rq.future);
	free(rq.prompt);
	return rc;
}

/* ------------------------------------------------------------------------
 * One request line
 */

static int gen_one(const struct gen_opts *o, uint64_t idx, struct strbuf *sb)
{
	struct gen_req rq = { 0 };
	uint32_t i;
	int rc = 0;

	if (o->tok)
		return gen_one_text(o, idx, sb);
	rq.n_prompt = gen_prompt_len(o);
	rq.prompt = malloc((rq.n_prompt ? rq.n_prompt : 1) * sizeof(*rq.prompt));
	if (!rq.prompt)
		return -ENOMEM;
	for (i = 0; i < rq.n_prompt; i++)
		rq.prompt[i] = (int32_t)rnd_below(o->vocab);
	rq.max_tokens = gen_max_tokens(o, rq.n_prompt);
	if (o->max_tokens >= REQUEST_DEFAULT_MAX_TOKENS &&
	    rq.n_prompt + REQUEST_DEFAULT_MAX_TOKENS <= o->max_context &&
	    rnd_pct(5)) {
		rq.omit_max_tokens = true;
		rq.max_tokens = REQUEST_DEFAULT_MAX_TOKENS;
	}

	rc |= strbuf_printf(sb, "{\"id\":\"%s%" PRIu64 "\",\"prompt\":",
			    o->ids, idx);
	rc |= put_tokens(sb, rq.prompt, rq.n_prompt);
	if (!rq.omit_max_tokens)
		rc |= strbuf_printf(sb, ",\"max_tokens\":%u", rq.max_tokens);
	if (rnd_unit() < o->stop_frac) {
		rc |= gen_future(o, &rq);
		if (!rc)
			rc |= put_stops(o, &rq, sb);
	}
	if (o->sampling)
		rc |= put_sampling(o, sb);
	rc |= strbuf_append(sb, "}\n", 2);
	free(rq.future);
	free(rq.prompt);
	return rc ? -ENOMEM : 0;
}

/* ------------------------------------------------------------------------
 * Command line
 */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gen_workload [options] > workload.jsonl\n"
		"  --n N            requests (default 3000)\n"
		"  --seed S         workload seed (default 1)\n"
		"  --model SPEC     sim model the stops are drawn from: sim or\n"
		"                   sim:vocab=V,seed=S (cost and fault keys ignored)\n"
		"  --vocab V        model vocabulary (default 32000)\n"
		"  --model-seed S   model seed (default 0)\n"
		"  --max-prompt P   longest prompt in tokens (default 256)\n"
		"  --max-tokens M   largest max_tokens (default 128)\n"
		"  --stop-frac F    fraction of requests with stops (default 0.5)\n"
		"  --max-context C  prompt + max_tokens never exceeds C (default 4096)\n"
		"  --ids PREFIX     request ids are PREFIX0, PREFIX1, ... (default r)\n"
		"  --sampling       add random sampling fields (temperature, top_p,\n"
		"                   top_k, min_p, seed, logit_bias, logprobs, n)\n"
		"  --text CORPUS    text requests: string prompts cut from CORPUS\n"
		"                   (UTF-8; --max-prompt counts its bytes), \"stop\"\n"
		"                   strings from the real output, ignore_eos; needs\n"
		"  --tokenizer FILE the model's tokenizer.bin (its vocabulary: --vocab)\n"
		"  --help           this text\n");
}

/* true when every byte of s may stand in a JSON string unescaped. */
static bool id_prefix_ok(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == '"' || *s == '\\')
			return false;
	return true;
}

/* --text and --tokenizer: the corpus (non-empty UTF-8 without NUL,
 * under 4 GiB) and the tokenizer of the model's vocabulary. */
static int load_text(struct gen_opts *o)
{
	char err[512];
	FILE *f = fopen(o->text_path, "rb");
	struct strbuf sb = STRBUF_INIT;
	char buf[65536];
	size_t n;

	if (!f) {
		fprintf(stderr, "gen_workload: %s: %s\n", o->text_path,
			strerror(errno));
		return -EINVAL;
	}
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		if (strbuf_append(&sb, buf, n)) {
			fclose(f);
			strbuf_release(&sb);
			fprintf(stderr, "gen_workload: out of memory\n");
			return -ENOMEM;
		}
	fclose(f);
	if (!sb.len || sb.len > UINT32_MAX || !text_ok(sb.data, sb.len)) {
		fprintf(stderr, "gen_workload: --text %s: want a non-empty UTF-8 text without NUL bytes, under 4 GiB\n",
			o->text_path);
		strbuf_release(&sb);
		return -EINVAL;
	}
	o->corpus = sb.data;
	o->corpus_len = sb.len;
	if (tokenizer_load(o->tok_path, o->vocab, &o->tok, err, sizeof(err))) {
		fprintf(stderr, "gen_workload: --tokenizer: %s\n", err);
		return -EINVAL;
	}
	return 0;
}

static int parse_opts(int argc, char **argv, struct gen_opts *o)
{
	static const struct option longopts[] = {
		{ "n", required_argument, NULL, 'n' },
		{ "seed", required_argument, NULL, 's' },
		{ "model", required_argument, NULL, 'm' },
		{ "vocab", required_argument, NULL, 'v' },
		{ "model-seed", required_argument, NULL, 'S' },
		{ "max-prompt", required_argument, NULL, 'p' },
		{ "max-tokens", required_argument, NULL, 't' },
		{ "stop-frac", required_argument, NULL, 'f' },
		{ "max-context", required_argument, NULL, 'c' },
		{ "ids", required_argument, NULL, 'i' },
		{ "sampling", no_argument, NULL, 'P' },
		{ "text", required_argument, NULL, 'x' },
		{ "tokenizer", required_argument, NULL, 'k' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool has_vocab = false, has_model_seed = false;
	uint64_t vocab = 0, model_seed = 0, v;
	struct sim_config cfg;
	char err[256], *end;
	int c, li = 0;

	sim_config_default(&cfg);
	while ((c = getopt_long(argc, argv, "", longopts, &li)) != -1) {
		switch (c) {
		case 'n':
			if (parse_u64(optarg, 0, UINT64_MAX, &o->n))
				goto bad_value;
			break;
		case 's':
			if (parse_u64(optarg, 0, UINT64_MAX, &o->seed))
				goto bad_value;
			break;
		case 'm':
			if (strcmp(optarg, "sim") == 0) {
				sim_config_default(&cfg);
			} else if (strncmp(optarg, "sim:", 4) == 0) {
				if (sim_config_parse(optarg + 4, &cfg, err,
						     sizeof(err))) {
					fprintf(stderr, "gen_workload: --model: %s\n",
						err);
					return -EINVAL;
				}
			} else {
				fprintf(stderr,
					"gen_workload: --model must be a sim spec (sim or sim:key=value,...)\n");
				return -EINVAL;
			}
			break;
		case 'v':
			if (parse_u64(optarg, 0, INT32_MAX, &vocab) || vocab == 0)
				goto bad_value;
			has_vocab = true;
			break;
		case 'S':
			if (parse_u64(optarg, 0, UINT64_MAX, &model_seed))
				goto bad_value;
			has_model_seed = true;
			break;
		case 'p':
			if (parse_u64(optarg, 0, UINT32_MAX, &v))
				goto bad_value;
			o->max_prompt = (uint32_t)v;
			break;
		case 't':
			if (parse_u64(optarg, 0, UINT32_MAX, &v))
				goto bad_value;
			o->max_tokens = (uint32_t)v;
			break;
		case 'f':
			errno = 0;
			o->stop_frac = strtod(optarg, &end);
			if (errno || *end || end == optarg ||
			    !(o->stop_frac >= 0.0 && o->stop_frac <= 1.0))
				goto bad_value;
			break;
		case 'c':
			if (parse_u64(optarg, 0, UINT32_MAX, &v))
				goto bad_value;
			o->max_context = (uint32_t)v;
			break;
		case 'i':
			if (!id_prefix_ok(optarg))
				goto bad_value;
			o->ids = optarg;
			break;
		case 'P':
			o->sampling = true;
			break;
		case 'x':
			o->text_path = optarg;
			break;
		case 'k':
			o->tok_path = optarg;
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
		fprintf(stderr, "gen_workload: unexpected argument '%s'\n",
			argv[optind]);
		return -EINVAL;
	}
	o->vocab = has_vocab ? (uint32_t)vocab : cfg.vocab;
	o->model_seed = has_model_seed ? model_seed : cfg.seed;
	if (!o->text_path != !o->tok_path) {
		fprintf(stderr, "gen_workload: --text and --tokenizer go together\n");
		return -EINVAL;
	}
	return o->text_path ? load_text(o) : 0;

bad_value:
	fprintf(stderr, "gen_workload: bad value '%s' for --%s\n", optarg,
		longopts[li].name);
	return -EINVAL;
}

int main(int argc, char **argv)
{
	struct gen_opts o = {
		.n = 3000, .seed = 1, .vocab = 32000, .model_seed = 0,
		.max_prompt = 256, .max_tokens = 128, .stop_frac = 0.5,
		.max_context = 4096, .ids = "r",
	};
	struct strbuf sb = STRBUF_INIT;
	uint64_t i;
	int rc = 0;

	if (parse_opts(argc, argv, &o))
		return 2;
	rng_state = o.seed;
	for (i = 0; i < o.n && !rc; i++) {
		rc = gen_one(&o, i, &sb);
		if (!rc && sb.len >= GEN_FLUSH_BYTES) {
			if (fwrite(sb.data, 1, sb.len, stdout) != sb.len)
				rc = -EIO;
			strbuf_consume(&sb, sb.len);
		}
	}
	if (!rc && sb.len && fwrite(sb.data, 1, sb.len, stdout) != sb.len)
		rc = -EIO;
	if (fflush(stdout))
		rc = -EIO;
	strbuf_release(&sb);
	free(o.corpus);
	tokenizer_free(o.tok);
	if (rc) {
		fprintf(stderr, "gen_workload: %s\n", strerror(-rc));
		return 1;
	}
	return 0;
}
