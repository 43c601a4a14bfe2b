/*
 * lg_workload.c - the requests loadgen sends (generated, or read from --input),
 * and the checks of their answers and streamed events (loadgen_internal.h).
 */
#include "bench/loadgen/loadgen_internal.h"

/* ------------------------------------------------------------------------
 * Small helpers: random numbers, token vectors, samples
 */

uint64_t rnd(struct lg *lg)
{
	return sim_splitmix64(&lg->rng);
}

/* In [0, n); 0 when n is 0. */
uint32_t rnd_below(struct lg *lg, uint32_t n)
{
	return n ? (uint32_t)(rnd(lg) % n) : 0;
}

static double rnd_unit(struct lg *lg)
{
	return (double)(rnd(lg) >> 11) / (double)(1ull << 53);
}

static int tokvec_push(struct tokvec *t, int32_t x)
{
	size_t cap = t->cap ? 2 * t->cap : 64;
	int32_t *v;

	if (t->n == t->cap) {
		v = realloc(t->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		t->v = v;
		t->cap = cap;
	}
	t->v[t->n++] = x;
	return 0;
}

/* A sample lost to ENOMEM only blurs a percentile, so it is dropped. */
void samples_add(struct samples *s, double x)
{
	size_t cap = s->cap ? 2 * s->cap : 1024;
	double *v;

	if (s->n == s->cap) {
		v = realloc(s->v, cap * sizeof(*v));
		if (!v)
			return;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = x;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile p in (0, 100] (sorts s); NAN when empty. */
double samples_pct(struct samples *s, double p)
{
	size_t k;

	if (!s->n)
		return NAN;
	qsort(s->v, s->n, sizeof(*s->v), cmp_double);
	k = (size_t)ceil(p / 100.0 * (double)s->n);
	return s->v[k ? k - 1 : 0];
}

/* ------------------------------------------------------------------------
 * Request generation
 */

/* The tokens sim:vocab=V,seed=0 generates after the prompt, no stops. */
static int32_t *gen_future(struct lg *lg, const int32_t *prompt,
			   uint32_t n_prompt, uint32_t n_gen)
{
	int32_t *seq = malloc(((size_t)n_prompt + n_gen + 1) * sizeof(*seq));
	uint32_t i;

	if (!seq)
		return NULL;
	memcpy(seq, prompt, n_prompt * sizeof(*seq));
	for (i = 0; i < n_gen; i++)
		seq[n_prompt + i] = sim_next(seq, n_prompt + i, lg->o.vocab, 0);
	memmove(seq, seq + n_prompt, n_gen * sizeof(*seq));
	return seq;
}

/*
 * A stop of len tokens: two times in three a run of the real output (so
 * it fires, unless an earlier stop does), else random tokens.
 */
static json_t *gen_stop(struct lg *lg, const int32_t *future,
			uint32_t n_future, uint32_t len)
{
	json_t *a = json_array();
	uint32_t pos = 0, i;
	bool fire = future && rnd_below(lg, 3) < 2;

	if (fire) {
		len = len < n_future ? len : n_future;
		pos = rnd_below(lg, n_future - len + 1);
	}
	for (i = 0; i < len; i++)
		json_array_append_new(a, json_integer(fire ? future[pos + i] :
				      (int32_t)rnd_below(lg, lg->o.vocab)));
	return a;
}

/* stop_token_ids and/or stop_sequences, and sometimes include_stop. */
static void gen_stops(struct lg *lg, json_t *r, const int32_t *prompt,
		      uint32_t n_prompt, uint32_t max_tokens)
{
	int32_t *future = gen_future(lg, prompt, n_prompt, max_tokens);
	uint32_t form = rnd_below(lg, 3), n, i;
	json_t *a;

	if (form != 1) {
		a = json_array();
		n = 1 + rnd_below(lg, 3);
		for (i = 0; i < n; i++) {
			json_t *one = gen_stop(lg, future, max_tokens, 1);

			json_array_append(a, json_array_get(one, 0));
			json_decref(one);
		}
		json_object_set_new(r, "stop_token_ids", a);
	}
	if (form != 0) {
		a = json_array();
		n = 1 + rnd_below(lg, 3);
		for (i = 0; i < n; i++)
			json_array_append_new(a, gen_stop(lg, future, max_tokens,
						1 + rnd_below(lg, 4)));
		json_object_set_new(r, "stop_sequences", a);
	}
	if (rnd_below(lg, 3))
		json_object_set_new(r, "include_stop",
				    json_boolean(rnd_below(lg, 2)));
	free(future);
}

/* Choose whether and how the client walks away from rq. */
static void gen_disc(struct lg *lg, struct lg_req *rq)
{
	rq->disc = DISC_NONE;
	if (rnd_unit(lg) >= lg->o.disconnect_frac)
		return;
	rq->disc = DISC_PARTIAL + rnd_below(lg, rq->stream ? 3 : 2);
	rq->disc_pick = rnd(lg);
	/* Early events mostly, so most plan (c) streams really are cut. */
	rq->disc_at = 1 + rnd_below(lg, rq->max_tokens / 2 + 1);
	rq->disc_rst = rnd_below(lg, 2);
}

/* Request n from --input: line n as written, under the id "L<n>". */
static int gen_from_input(struct lg *lg, struct lg_req *rq, uint64_t n)
{
	json_t *r = json_deep_copy(lg->o.lines[n]);
	json_t *mt;

	if (!r)
		return -ENOMEM;
	rq->n_prompt = (uint32_t)json_array_size(json_object_get(r, "prompt"));
	mt = json_object_get(r, "max_tokens");
	rq->max_tokens = json_is_integer(mt) ? (uint32_t)json_integer_value(mt) : 16;
	json_object_set_new(r, "id", json_string(rq->id));
	rq->stream = rnd_unit(lg) < lg->o.stream_frac;
	gen_disc(lg, rq);
	rq->json = r;
	return 0;
}

/* --input FILE: every line a request object with a token-array prompt. */
int load_input(struct lg_opts *o)
{
	FILE *f = fopen(o->input, "r");
	char *line = NULL;
	size_t cap = 0, n_alloc = 0;
	json_t **v;
	json_t *r;
	json_error_t err;

	if (!f) {
		fprintf(stderr, "loadgen: --input %s: %s\n", o->input, strerror(errno));
		return -EINVAL;
	}
	while (getline(&line, &cap, f) > 0) {
		if (line[0] == '\n')
			continue;
		r = json_loads(line, 0, &err);
		if (!r || !json_is_array(json_object_get(r, "prompt")) ||
		    json_integer_value(json_object_get(r, "n")) > 1) {
			fprintf(stderr, "loadgen: --input %s line %" PRIu64 ": not a request with a token prompt and n <= 1\n",
				o->input, o->n_lines + 1);
			json_decref(r);
			free(line);
			fclose(f);
			return -EINVAL;
		}
		if (o->n_lines == n_alloc) {
			n_alloc = n_alloc ? 2 * n_alloc : 256;
			v = realloc(o->lines, n_alloc * sizeof(*v));
			if (!v) {
				json_decref(r);
				free(line);
				fclose(f);
				return -ENOMEM;
			}
			o->lines = v;
		}
		o->lines[o->n_lines++] = r;
	}
	free(line);
	fclose(f);
	if (o->n_requests > o->n_lines)
		o->n_requests = o->n_lines;
	return 0;
}

/* Fill rq with the next request ("L<n>"), or a stall client's ("S<n>"). */
int gen_request(struct lg *lg, struct lg_req *rq, bool stall,
		uint64_t n)
{
	int32_t *prompt;
	json_t *r, *p;
	uint32_t i;

	memset(rq, 0, sizeof(*rq));
	/* Request n is a function of (seed, n) alone, whatever the timing. */
	lg->rng = sim_mix(lg->o.seed ^ sim_mix(n ^ (stall ? 1ull << 63 : 0)));
	snprintf(rq->id, sizeof(rq->id), "%c%" PRIu64, stall ? 'S' : 'L', n);
	if (lg->o.lines && !stall)
		return gen_from_input(lg, rq, n);
	/* at least one token: OpenAI's API refuses an empty prompt */
	rq->n_prompt = 1 + rnd_below(lg, lg->o.max_prompt ? lg->o.max_prompt : 1);
	prompt = malloc(((size_t)rq->n_prompt + 1) * sizeof(*prompt));
	r = json_object();
	p = json_array();
	if (!prompt || !r || !p)
		goto out_nomem;
	for (i = 0; i < rq->n_prompt; i++) {
		prompt[i] = (int32_t)rnd_below(lg, lg->o.vocab);
		json_array_append_new(p, json_integer(prompt[i]));
	}
	rq->max_tokens = stall ? lg->o.max_tokens :
			 1 + rnd_below(lg, lg->o.max_tokens);
	json_object_set_new(r, "id", json_string(rq->id));
	json_object_set_new(r, "prompt", p);
	json_object_set_new(r, "max_tokens", json_integer(rq->max_tokens));
	if (!stall && rnd_unit(lg) < lg->o.stop_frac)
		gen_stops(lg, r, prompt, rq->n_prompt, rq->max_tokens);
	rq->stream = stall || rnd_unit(lg) < lg->o.stream_frac;
	if (!stall)
		gen_disc(lg, rq);
	free(prompt);
	rq->json = r;
	return 0;

out_nomem:
	json_decref(p);
	json_decref(r);
	free(prompt);
	return -ENOMEM;
}

/* "message" of a JSON error body, or NULL when the body is not one. */
const char *error_message(json_t *obj)
{
	json_t *e = json_object_get(obj, "error");
	const char *m = json_string_value(json_object_get(e, "message"));

	return json_is_object(e) ? (m ? m : "(no message)") : NULL;
}

/* ------------------------------------------------------------------------
 * Checking a completion object (a whole answer, or one stream event)
 */

static int check_usage(struct http_resp *r, const struct lg_req *rq,
		       json_t *u)
{
	json_t *p = json_object_get(u, "prompt_tokens");
	json_t *c = json_object_get(u, "completion_tokens");
	json_t *t = json_object_get(u, "total_tokens");

	if (!json_is_integer(p) || !json_is_integer(c) || !json_is_integer(t))
		return resp_fail(r, "usage missing or mistyped");
	/* Removed stop tokens count as generated, so >=, not ==. */
	if (json_integer_value(c) < (json_int_t)rq->toks.n ||
	    json_integer_value(c) > rq->max_tokens)
		return resp_fail(r, "usage.completion_tokens %" JSON_INTEGER_FORMAT " with %zu tokens, max_tokens %u",
				 json_integer_value(c), rq->toks.n, rq->max_tokens);
	if (json_integer_value(p) != rq->n_prompt ||
	    json_integer_value(t) != json_integer_value(p) + json_integer_value(c))
		return resp_fail(r, "usage prompt_tokens %" JSON_INTEGER_FORMAT " (prompt has %u), total_tokens %" JSON_INTEGER_FORMAT,
				 json_integer_value(p), rq->n_prompt,
				 json_integer_value(t));
	return 0;
}

/*
 * Check obj as a text_completion for rq, append its token_ids and note a
 * finish_reason (required unless stream).  Returns the number of tokens
 * it carried, or -1 (r->err set).
 */
int check_completion(struct lg *lg, struct http_resp *r,
		     struct lg_req *rq, json_t *obj, bool stream)
{
	const char *id = json_string_value(json_object_get(obj, "id"));
	const char *ob = json_string_value(json_object_get(obj, "object"));
	json_t *ch = json_array_get(json_object_get(obj, "choices"), 0);
	json_t *ids = json_object_get(ch, "token_ids"), *t, *fr;
	size_t i;

	if (!id || strcmp(id, rq->id))
		return resp_fail(r, "answer id '%s'", id ? id : "(none)");
	if (!ob || strcmp(ob, "text_completion") || !json_is_array(ids) ||
	    json_integer_value(json_object_get(ch, "index")) != 0)
		return resp_fail(r, "not a text_completion with choices[0].token_ids");
	json_array_foreach(ids, i, t) {
		if (!json_is_integer(t) || json_integer_value(t) < 0 ||
		    json_integer_value(t) >= lg->o.vocab)
			return resp_fail(r, "token_ids[%zu] not a token of vocab %u",
					 i, lg->o.vocab);
		if (tokvec_push(&rq->toks, (int32_t)json_integer_value(t)))
			return resp_fail(r, "out of memory");
	}
	fr = json_object_get(ch, "finish_reason");
	if (json_is_null(fr) && stream)
		return (int)i;
	if (!json_is_string(fr) || (strcmp(json_string_value(fr), "stop") &&
				    strcmp(json_string_value(fr), "length")))
		return resp_fail(r, "finish_reason is not \"stop\" or \"length\"");
	snprintf(rq->finish, sizeof(rq->finish), "%s", json_string_value(fr));
	rq->final_seen = true;
	/* a stream's usage comes in an event of its own (include_usage) */
	if (!stream && check_usage(r, rq, json_object_get(obj, "usage")))
		return -1;
	return (int)i;
}

/* ------------------------------------------------------------------------
 * Server-Sent Events: one "\n\n"-terminated event of a stream
 */

/* The event's data lines joined by "\n" into out (cleared first). */
static int sse_data(const char *s, size_t n, struct strbuf *out)
{
	const char *end = s + n, *eol;
	size_t k;

	strbuf_consume(out, out->len);
	for (; s < end; s = eol + 1) {
		eol = memchr(s, '\n', (size_t)(end - s));
		if (!eol)
			eol = end;
		k = (size_t)(eol - s);
		if (k < 5 || memcmp(s, "data:", 5))
			continue;	/* comments, event:, id:, retry: */
		s += 5, k -= 5;
		if (k && *s == ' ')
			s++, k--;
		if ((out->len && strbuf_append(out, "\n", 1)) ||
		    strbuf_append(out, s, k))
			return -ENOMEM;
	}
	return 0;
}

/* Check and account one event.  0, or -1 (r->err set). */
int sse_event(struct lg *lg, struct lg_conn *c, const char *s,
	      size_t n, struct strbuf *data)
{
	struct lg_req *rq = &c->req;
	struct http_resp *r = &c->resp;
	uint64_t now = clock_now_ns();
	const char *msg;
	json_error_t jerr;
	json_t *obj;
	int got;

	if (sse_data(s, n, data))
		return resp_fail(r, "out of memory");
	if (!data->len)
		return 0;
	if (rq->done_seen)
		return resp_fail(r, "event after [DONE]");
	if (strcmp(data->data, "[DONE]") == 0) {
		if (!rq->final_seen && !rq->errored)
			return resp_fail(r, "[DONE] before an event with finish_reason");
		if (!rq->usage_seen && !rq->errored)
			return resp_fail(r, "[DONE] before the usage event");
		rq->done_seen = true;
		return 0;
	}
	obj = json_loadb(data->data, data->len, 0, &jerr);
	if (!obj)
		return resp_fail(r, "event is not JSON: %s", jerr.text);
	msg = error_message(obj);
	if (msg) {
		rq->errored = true;
		snprintf(rq->err_msg, sizeof(rq->err_msg), "%s", msg);
		json_decref(obj);
		return 0;
	}
	/* stream_options.include_usage: after the finish, "choices": [] */
	if (rq->final_seen && !rq->usage_seen && !rq->errored &&
	    json_is_array(json_object_get(obj, "choices")) &&
	    !json_array_size(json_object_get(obj, "choices"))) {
		rq->usage_seen = true;
		got = check_usage(r, rq, json_object_get(obj, "usage"));
		json_decref(obj);
		return got;
	}
	if (rq->final_seen || rq->errored) {
		json_decref(obj);
		return resp_fail(r, "event after the final or error event");
	}
	got = check_completion(lg, r, rq, obj, true);
	json_decref(obj);
	if (got < 0)
		return -1;
	rq->n_events++;
	if (got && !rq->t_first_tok_ns)
		rq->t_first_tok_ns = now;
	if (got)
		rq->t_last_tok_ns = now;
	if ((got || rq->final_seen) && !rq->t_first_ns)
		rq->t_first_ns = now;
	return 0;
}

