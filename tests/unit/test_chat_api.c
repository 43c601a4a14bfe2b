/*
 * test_chat_api.c - cmocka tests of the chat bodies and answers
 * (server/http/chat_api.c).
 *
 * Rendering: each template against hand-written prompts (llama2's system
 * folding, its stripping, its turns; chatml), and a randomized test that
 * renders random conversations and compares them with a second renderer
 * written here from Meta's description (one snprintf-style string per
 * turn, no shared code); it prints its seed and honours SEED=
 * (test_rng.h).  Encoding: the prompt's tokens must be each turn's own
 * encoding, BOS first, EOS between turns, with a tokenizer trained here.
 * Parsing: a chat body becomes the completion request it stands for
 * (prompt, max_completion_tokens, chatml's stop) and each bad body names
 * the message or field at fault.  Answers: every object and chunk is
 * parsed back with jansson and must have OpenAI's chat keys.
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
#include <jansson.h>

#include "server/http/chat_api.h"
#include "server/http/chat_setup.h"
#include "server/http/completion_api.h"
#include "engine/request.h"
#include "util/strbuf.h"
#include "tests/unit/test_rng.h"
#include "tests/unit/test_logprob_ref.h"
#include "text/text_tokenizer.h"
#include "text/tokenizer.h"
#include "text/tokenizer_train.h"
#include "tests/unit/test_trained_tok.h"
#include "server/request/request_json.h"

#define VOCAB 512

static struct tokenizer *tok;		/* owned by ttok */
static struct text_tokenizer *ttok;	/* what the chat API takes */

static int setup_tokenizer(void **state)
{
	return test_trained_tok(VOCAB, &tok, &ttok);
}

static int teardown_tokenizer(void **state)
{
	text_tokenizer_free(ttok);
	return 0;
}

static struct chat_message msg(enum chat_role role, const char *content)
{
	return (struct chat_message){ .role = role, .content = content,
				      .len = strlen(content) };
}

#define SYS(s) msg(CHAT_ROLE_SYSTEM, (s))
#define USER(s) msg(CHAT_ROLE_USER, (s))
#define ASST(s) msg(CHAT_ROLE_ASSISTANT, (s))

/* Render and compare the readable text and the turn count. */
static void expect_render(enum chat_template t, const struct chat_message *m,
			  size_t n, const char *want, uint32_t want_turns)
{
	struct chat_prompt p;
	struct strbuf text = STRBUF_INIT;
	char err[256];
	int rc = chat_render(t, m, n, &p, err, sizeof(err));

	if (rc)
		fail_msg("render: %d %s", rc, err);
	assert_int_equal(chat_prompt_text(&p, &text), 0);
	assert_string_equal(text.data ? text.data : "", want);
	assert_int_equal(p.n_turns, want_turns);
	strbuf_release(&text);
	chat_prompt_release(&p);
}

static void expect_render_error(enum chat_template t, const struct chat_message *m,
				size_t n, const char *want_in_err)
{
	struct chat_prompt p;
	char err[256] = "";
	int rc = chat_render(t, m, n, &p, err, sizeof(err));

	assert_int_equal(rc, -EINVAL);
	if (!strstr(err, want_in_err))
		fail_msg("error '%s' does not say '%s'", err, want_in_err);
	chat_prompt_release(&p);
}

/* ------------------------------------------------------------------------
 * Rendering
 */

static void test_llama2_hand_written(void **state)
{
	const struct chat_message user_only[] = { USER("Hello") };
	const struct chat_message with_sys[] = { SYS("Be brief."), USER("Hi") };
	const struct chat_message dialog[] = {
		SYS("You are a helpful assistant"), USER("Hello"),
		ASST("Hi there"), USER("Who are you"),
		ASST("   I am an assistant   "), USER("Another question"),
	};
	const struct chat_message no_sys[] = {
		USER(" one\n"), ASST("two"), USER("three "),
	};
	/* Meta strips the folded system + user as a whole: the system
	 * text's own spaces stay, the user's trailing ones go */
	const struct chat_message sys_spaces[] = { SYS("  S  "), USER("  U  ") };

	expect_render(CHAT_TEMPLATE_LLAMA2, user_only, 1, "[INST] Hello [/INST]", 1);
	expect_render(CHAT_TEMPLATE_LLAMA2, with_sys, 2,
		      "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]", 1);
	expect_render(CHAT_TEMPLATE_LLAMA2, dialog, 6,
		      "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\n"
		      "Hello [/INST] Hi there </s><s>"
		      "[INST] Who are you [/INST] I am an assistant </s><s>"
		      "[INST] Another question [/INST]", 3);
	expect_render(CHAT_TEMPLATE_LLAMA2, no_sys, 3,
		      "[INST] one [/INST] two </s><s>[INST] three [/INST]", 2);
	expect_render(CHAT_TEMPLATE_LLAMA2, sys_spaces, 2,
		      "[INST] <<SYS>>\n  S  \n<</SYS>>\n\n  U [/INST]", 1);
}

static void test_chatml_hand_written(void **state)
{
	const struct chat_message dialog[] = {
		SYS("You are a helpful assistant"), USER("Hello"),
		ASST("Hi there"), USER(" Who are you \n"),
	};
	const struct chat_message any_order[] = { ASST("a"), ASST("b") };

	expect_render(CHAT_TEMPLATE_CHATML, dialog, 4,
		      "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
		      "<|im_start|>user\nHello<|im_end|>\n"
		      "<|im_start|>assistant\nHi there<|im_end|>\n"
		      "<|im_start|>user\n Who are you \n<|im_end|>\n"
		      "<|im_start|>assistant\n", 1);
	expect_render(CHAT_TEMPLATE_CHATML, any_order, 2,
		      "<|im_start|>assistant\na<|im_end|>\n"
		      "<|im_start|>assistant\nb<|im_end|>\n"
		      "<|im_start|>assistant\n", 1);
}

static void test_llama2_order_errors(void **state)
{
	const struct chat_message asst_first[] = { ASST("a"), USER("u") };
	const struct chat_message two_users[] = { USER("u"), USER("v") };
	const struct chat_message ends_asst[] = { USER("u"), ASST("a") };
	const struct chat_message sys_later[] = { USER("u"), SYS("s"), USER("v") };
	const struct chat_message sys_only[] = { SYS("s") };
	const struct chat_message two_sys[] = { SYS("s"), SYS("t"), USER("u") };

	expect_render_error(CHAT_TEMPLATE_LLAMA2, asst_first, 2,
			    "messages[0].role is 'assistant' where the llama2 "
			    "template needs 'user'");
	expect_render_error(CHAT_TEMPLATE_LLAMA2, two_users, 2,
			    "messages[1].role is 'user' where the llama2 "
			    "template needs 'assistant'");
	expect_render_error(CHAT_TEMPLATE_LLAMA2, ends_asst, 2,
			    "messages[1].role is 'assistant': the llama2 template "
			    "needs the last message to be the user's");
	expect_render_error(CHAT_TEMPLATE_LLAMA2, sys_later, 3,
			    "messages[1].role is 'system'");
	expect_render_error(CHAT_TEMPLATE_LLAMA2, sys_only, 1,
			    "needs a user message after the system message");
	expect_render_error(CHAT_TEMPLATE_LLAMA2, two_sys, 3,
			    "messages[1].role is 'system'");
	expect_render_error(CHAT_TEMPLATE_CHATML, NULL, 0, "must not be empty");
	expect_render_error(CHAT_TEMPLATE_NONE, sys_only, 1, "no chat template");
}

/*
 * The second renderer: Meta's chat_completion() written out again, one
 * turn string at a time, for the randomized comparison.
 */
static size_t ref_strip(const char *s, size_t n, const char **out)
{
	while (n && strchr(" \t\n\v\f\r", *s) && *s)
		s++, n--;
	while (n && strchr(" \t\n\v\f\r", s[n - 1]) && s[n - 1])
		n--;
	*out = s;
	return n;
}

static void ref_llama2(const struct chat_message *m, size_t n, struct strbuf *out)
{
	size_t i = 0;

	for (; i < n; i += 2) {
		char first[4096];
		const char *u, *a;
		size_t ul, al;

		if (i == 0 && m[0].role == CHAT_ROLE_SYSTEM) {
			snprintf(first, sizeof(first), "<<SYS>>\n%s\n<</SYS>>\n\n%s",
				 m[0].content, m[1].content);
			i = 1;
			ul = ref_strip(first, strlen(first), &u);
		} else {
			ul = ref_strip(m[i].content, m[i].len, &u);
		}
		if (i > 1)
			assert_int_equal(strbuf_printf(out, "</s><s>"), 0);
		if (i + 1 < n) {
			al = ref_strip(m[i + 1].content, m[i + 1].len, &a);
			assert_int_equal(strbuf_printf(out, "[INST] %.*s [/INST] %.*s ",
						       (int)ul, u, (int)al, a), 0);
		} else {
			assert_int_equal(strbuf_printf(out, "[INST] %.*s [/INST]",
						       (int)ul, u), 0);
		}
	}
}

static void ref_chatml(const struct chat_message *m, size_t n, struct strbuf *out)
{
	static const char *const names[] = { "system", "user", "assistant" };

	for (size_t i = 0; i < n; i++)
		assert_int_equal(strbuf_printf(out, "<|im_start|>%s\n%s<|im_end|>\n",
					       names[m[i].role], m[i].content), 0);
	assert_int_equal(strbuf_printf(out, "<|im_start|>assistant\n"), 0);
}

/* Random text: words, spaces and newlines at either end, UTF-8. */
static void random_text(struct rng *r, char *buf, size_t cap)
{
	static const char *const bits[] = {
		" ", "\n", "\t", "hello", "world", "[INST]", "<<SYS>>", "é",
		"€", "🙂", "x", "  ", "</s>", "<|im_end|>",
	};
	size_t len = 0, n = rng_below(r, 8);

	buf[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		const char *b = bits[rng_below(r, sizeof(bits) / sizeof(bits[0]))];

		if (len + strlen(b) + 1 >= cap)
			break;
		strcpy(buf + len, b);
		len += strlen(b);
	}
}

static void test_random_against_reference(void **state)
{
	struct rng r = rng_for(1);

	for (int iter = 0; iter < 2000; iter++) {
		char texts[9][256];
		struct chat_message m[9];
		bool llama2 = rng_below(&r, 2);
		bool sys = rng_below(&r, 2);
		size_t n = 0, pairs = rng_below(&r, 4);
		struct strbuf want = STRBUF_INIT, got = STRBUF_INIT;
		struct chat_prompt p;
		char err[256];

		if (sys)
			m[n++].role = CHAT_ROLE_SYSTEM;
		for (size_t i = 0; i < pairs; i++) {
			m[n++].role = CHAT_ROLE_USER;
			m[n++].role = CHAT_ROLE_ASSISTANT;
		}
		m[n++].role = CHAT_ROLE_USER;
		if (!llama2)	/* chatml takes any order */
			for (size_t i = 0; i < n; i++)
				m[i].role = (enum chat_role)rng_below(&r, 3);
		for (size_t i = 0; i < n; i++) {
			random_text(&r, texts[i], sizeof(texts[i]));
			m[i].content = texts[i];
			m[i].len = strlen(texts[i]);
		}
		if (llama2)
			ref_llama2(m, n, &want);
		else
			ref_chatml(m, n, &want);
		if (chat_render(llama2 ? CHAT_TEMPLATE_LLAMA2 : CHAT_TEMPLATE_CHATML,
				m, n, &p, err, sizeof(err)))
			fail_msg("iteration %d: %s", iter, err);
		assert_int_equal(chat_prompt_text(&p, &got), 0);
		if (strcmp(got.data, want.data))
			fail_msg("iteration %d (seed %llu): got\n%s\nwant\n%s", iter,
				 test_seed, got.data, want.data);
		assert_int_equal(p.n_turns, llama2 ? pairs + 1 : 1);
		strbuf_release(&want);
		strbuf_release(&got);
		chat_prompt_release(&p);
	}
}

/* ------------------------------------------------------------------------
 * Encoding
 */

/* Append tok's encoding of s with BOS to ids. */
static size_t encode_turn(const char *s, int32_t *ids, size_t at)
{
	size_t n;

	assert_int_equal(tokenizer_encode(tok, s, strlen(s), true, false,
					  ids + at, 4096 - at, &n), 0);
	return at + n;
}

static void test_encode_turns(void **state)
{
	const struct chat_message dialog[] = {
		SYS("Be kind."), USER("Hello"), ASST("Hi there"), USER("Who are you"),
	};
	static int32_t want[4096];
	struct chat_prompt p;
	int32_t *ids;
	size_t n, at = 0;
	char err[256];

	at = encode_turn("[INST] <<SYS>>\nBe kind.\n<</SYS>>\n\nHello [/INST] "
			 "Hi there ", want, at);
	want[at++] = TOKENIZER_EOS;
	at = encode_turn("[INST] Who are you [/INST]", want, at);

	assert_int_equal(chat_render(CHAT_TEMPLATE_LLAMA2, dialog, 4, &p, err,
				     sizeof(err)), 0);
	assert_int_equal(chat_prompt_encode(&p, ttok, &ids, &n), 0);
	assert_int_equal(n, at);
	assert_memory_equal(ids, want, n * sizeof(*ids));
	assert_int_equal(ids[0], TOKENIZER_BOS);
	free(ids);
	chat_prompt_release(&p);

	/* chatml: one text, BOS first, as a string prompt encodes */
	at = encode_turn("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
			 want, 0);
	assert_int_equal(chat_render(CHAT_TEMPLATE_CHATML, dialog + 1, 1, &p, err,
				     sizeof(err)), 0);
	assert_int_equal(chat_prompt_encode(&p, ttok, &ids, &n), 0);
	assert_int_equal(n, at);
	assert_memory_equal(ids, want, n * sizeof(*ids));
	free(ids);
	chat_prompt_release(&p);
}

/* ------------------------------------------------------------------------
 * Parsing
 */

static struct request_limits limits(void)
{
	return (struct request_limits){ .vocab = VOCAB, .max_context = 2048,
		.id_optional = true, .has_logits = true, .tok = ttok };
}

static int parse(enum chat_template t, const char *body,
		 struct completion_request *c, char *err, const char **param)
{
	struct request_limits lim = limits();
	struct chat_config cc = { .builtin = t, .family = -1 };

	return chat_parse(body, strlen(body), &cc, &lim, c, err, 512, param);
}

static void test_parse_becomes_completion(void **state)
{
	static const char body[] =
		"{\"model\":\"sim\",\"messages\":[{\"role\":\"system\",\"content\":"
		"\"Be kind.\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\","
		"\"text\":\"Hel\"},{\"type\":\"text\",\"text\":\"lo\"}],\"name\":\"x\"}],"
		"\"max_completion_tokens\":7,\"stream\":true,\"n\":2,"
		"\"temperature\":0.5,\"seed\":9,\"logprobs\":true,\"top_logprobs\":2}";
	struct completion_request c;
	int32_t want[4096];
	const char *param;
	char err[512];
	size_t n;

	n = encode_turn("[INST] <<SYS>>\nBe kind.\n<</SYS>>\n\nHello [/INST]", want, 0);
	assert_int_equal(parse(CHAT_TEMPLATE_LLAMA2, body, &c, err, &param), 0);
	assert_int_equal(c.req.n_prompt, n);
	assert_memory_equal(c.req.prompt, want, n * sizeof(*want));
	assert_int_equal(c.req.max_tokens, 7);
	assert_true(c.stream);
	assert_int_equal(c.req.n_choices, 2);
	assert_int_equal(c.req.sampling.seed, 9);
	assert_true(c.req.sampling.logprobs);
	assert_int_equal(c.req.sampling.top_logprobs, 2);
	assert_int_equal(c.req.n_stop_strs, 0);	/* llama2 ends at EOS */
	completion_request_release(&c);
}

/* max_tokens left out is the context's rest; max_completion_tokens may
 * repeat it. */
static void test_parse_max_tokens(void **state)
{
#define HI "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
	static const struct {
		const char *body;
		int64_t max_tokens;	/* -1: the context's rest */
		bool defaulted;
	} cases[] = {
		{ HI "}", -1, true },
		{ HI ",\"max_tokens\":null}", -1, true },
		{ HI ",\"max_tokens\":5}", 5, false },
		{ HI ",\"max_completion_tokens\":6}", 6, false },
		{ HI ",\"max_tokens\":7,\"max_completion_tokens\":7}", 7, false },
		{ HI ",\"max_completion_tokens\":null,\"max_tokens\":8}", 8, false },
	};
#undef HI
	struct completion_request c;
	const char *param;
	char err[512];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (parse(CHAT_TEMPLATE_LLAMA2, cases[i].body, &c, err, &param))
			fail_msg("'%s': %s", cases[i].body, err);
		if (cases[i].max_tokens < 0)
			assert_int_equal(c.req.max_tokens, 2048 - c.req.n_prompt);
		else
			assert_int_equal(c.req.max_tokens, cases[i].max_tokens);
		assert_int_equal(c.max_tokens_defaulted, cases[i].defaulted);
		completion_request_release(&c);
	}
}

static void test_parse_chatml_stop(void **state)
{
#define HI "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
	static const char *const bodies[] = {
		HI "}",
		HI ",\"stop\":\"END\"}",
		HI ",\"stop\":[\"END\"]}",
		HI ",\"stop\":[\"<|im_end|>\",\"END\"]}",
		HI ",\"stop\":null}",
	};
#undef HI
	static const uint32_t want_n[] = { 1, 2, 2, 2, 1 };

	for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		struct completion_request c;
		const char *param;
		char err[512];
		bool has_end = false;

		if (parse(CHAT_TEMPLATE_CHATML, bodies[i], &c, err, &param))
			fail_msg("body %zu: %s", i, err);
		assert_int_equal(c.req.n_stop_strs, want_n[i]);
		for (uint32_t j = 0; j < c.req.n_stop_strs; j++)
			has_end |= !strcmp(c.req.stop_strs[j], CHAT_CHATML_END);
		assert_true(has_end);
		completion_request_release(&c);
	}
}

static void test_parse_errors(void **state)
{
	static const struct {
		enum chat_template t;
		const char *body, *param, *in_err;
	} cases[] = {
		{ CHAT_TEMPLATE_NONE, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
		  NULL, "no chat template" },
		{ CHAT_TEMPLATE_LLAMA2, "{}", "messages", "missing required field 'messages'" },
		{ CHAT_TEMPLATE_LLAMA2, "{\"messages\":{}}", "messages", "must be an array" },
		{ CHAT_TEMPLATE_LLAMA2, "{\"messages\":[]}", "messages", "must not be empty" },
		{ CHAT_TEMPLATE_LLAMA2, "{\"messages\":[3]}", "messages", "messages[0] must be an object" },
		{ CHAT_TEMPLATE_LLAMA2, "{\"messages\":[{\"content\":\"x\"}]}", "messages",
		  "messages[0].role must be one of" },
		{ CHAT_TEMPLATE_CHATML, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
		  "{\"role\":\"tool\",\"content\":\"x\"}]}", "messages",
		  "the chatml chat template renders no tools" },
		{ CHAT_TEMPLATE_CHATML, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
		  "{\"role\":\"developer\",\"content\":\"x\"}]}", "messages",
		  "messages[1].role is 'developer'" },
		{ CHAT_TEMPLATE_CHATML, "{\"messages\":[{\"role\":\"user\"}]}", "messages",
		  "messages[0].content is missing" },
		{ CHAT_TEMPLATE_CHATML, "{\"messages\":[{\"role\":\"user\",\"content\":null}]}",
		  "messages", "messages[0].content must be a string" },
		{ CHAT_TEMPLATE_CHATML, "{\"messages\":[{\"role\":\"user\",\"content\":"
		  "[{\"type\":\"image_url\",\"image_url\":{}}]}]}", "messages",
		  "messages[0].content[0].type must be \"text\"" },
		{ CHAT_TEMPLATE_CHATML, "{\"messages\":[{\"role\":\"user\",\"content\":"
		  "[{\"type\":\"text\",\"text\":1}]}]}", "messages",
		  "messages[0].content[0].text must be a string" },
		{ CHAT_TEMPLATE_LLAMA2, "{\"messages\":[{\"role\":\"assistant\",\"content\":\"x\"}]}",
		  "messages", "messages[0].role is 'assistant'" },
		{ CHAT_TEMPLATE_LLAMA2, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
		  "\"prompt\":\"y\"}", "prompt", "sends 'messages'" },
		{ CHAT_TEMPLATE_LLAMA2, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
		  "\"max_tokens\":3,\"max_completion_tokens\":4}",
		  "max_completion_tokens", "they differ" },
		{ CHAT_TEMPLATE_LLAMA2, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
		  "\"max_completion_tokens\":-1}", "max_completion_tokens", "max_tokens" },
		{ CHAT_TEMPLATE_LLAMA2, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
		  "\"temperature\":\"hot\"}", "temperature", "temperature" },
		{ CHAT_TEMPLATE_LLAMA2, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
		  "\"max_tokens\":2047}", "messages", "as the chat template renders them" },
		{ CHAT_TEMPLATE_CHATML, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
		  "\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\","
		  "\"11\",\"12\",\"13\",\"14\",\"15\",\"16\"]}", "stop", "adds" },
		{ CHAT_TEMPLATE_LLAMA2, "{\"messages\":", NULL, "" },
		{ CHAT_TEMPLATE_LLAMA2, "[1]", NULL, "" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct completion_request c;
		const char *param;
		char err[512] = "";

		assert_int_equal(parse(cases[i].t, cases[i].body, &c, err, &param), -EINVAL);
		if (!strstr(err, cases[i].in_err))
			fail_msg("case %zu: error '%s' does not say '%s'", i, err,
				 cases[i].in_err);
		if (cases[i].param ? !param || strcmp(param, cases[i].param) : !!param)
			fail_msg("case %zu: param %s, want %s", i, param ? param : "NULL",
				 cases[i].param ? cases[i].param : "NULL");
		completion_request_release(&c);
	}
}

static void test_parse_without_tokenizer(void **state)
{
	struct request_limits lim = limits();
	struct completion_request c;
	static const char body[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
	const char *param;
	char err[512];

	struct chat_config cc;

	lim.tok = NULL;
	assert_int_equal(chat_config_resolve(NULL, NULL, NULL, &cc, err,
					     sizeof(err)), 0);
	assert_int_equal(chat_parse(body, strlen(body), &cc, &lim,
				    &c, err, sizeof(err), &param), -EINVAL);
	assert_non_null(strstr(err, "no tokenizer"));
	completion_request_release(&c);
}

/* ------------------------------------------------------------------------
 * Answers
 */

static json_t *load(const struct strbuf *sb, size_t skip)
{
	json_error_t jerr;
	json_t *v = json_loadb(sb->data + skip, sb->len - skip, 0, &jerr);

	if (!v)
		fail_msg("not JSON (%s): %s", jerr.text, sb->data);
	return v;
}

/* Exactly these keys, in any order. */
static void expect_keys(const json_t *obj, const char *const *keys, size_t n)
{
	assert_true(json_is_object(obj));
	assert_int_equal(json_object_size(obj), n);
	for (size_t i = 0; i < n; i++)
		if (!json_object_get(obj, keys[i]))
			fail_msg("no key '%s'", keys[i]);
}

static void test_format_answer(void **state)
{
	static const char *const top[] = { "id", "object", "created", "model",
					   "choices", "usage", "seed" };
	static const char *const choice_keys[] = { "index", "message", "logprobs",
						   "finish_reason" };
	static const int32_t tokens[] = { 5, 6 };
	const struct sampler_logprob lp[] = {
		{ 5, -0.5f }, { 5, -0.5f }, { 9, -1.25f },
		{ 6, -0.25f }, { 6, -0.25f }, { -1, 0.0f },
	};
	struct completion_meta m = { "cmpl-1f-3", 1700000000, "sim", false };
	struct completion_choice ch[2] = {
		{ .index = 0, .text = "Hi \"you\"\n", .text_len = 9, .tokens = tokens,
		  .n_tokens = 2, .finish_reason = "stop", .logprobs = lp,
		  .logprob_stride = 3 },
		{ .index = 1, .text = NULL, .finish_reason = "length" },
	};
	struct completion_usage u = { 4, 2 };
	struct strbuf sb = STRBUF_INIT;
	json_t *v, *c0, *content;

	assert_int_equal(chat_format(&sb, &m, ch, 2, &u, true, 77), 0);
	v = load(&sb, 0);
	expect_keys(v, top, 7);
	assert_string_equal(json_string_value(json_object_get(v, "id")), "chatcmpl-1f-3");
	assert_string_equal(json_string_value(json_object_get(v, "object")),
			    "chat.completion");
	assert_int_equal(json_integer_value(json_object_get(v, "seed")), 77);
	assert_int_equal(json_array_size(json_object_get(v, "choices")), 2);
	c0 = json_array_get(json_object_get(v, "choices"), 0);
	expect_keys(c0, choice_keys, 4);
	assert_string_equal(json_string_value(json_object_get(
		json_object_get(c0, "message"), "role")), "assistant");
	assert_string_equal(json_string_value(json_object_get(
		json_object_get(c0, "message"), "content")), "Hi \"you\"\n");
	content = json_object_get(json_object_get(c0, "logprobs"), "content");
	assert_int_equal(json_array_size(content), 2);
	{
		static const char *const lp_keys[] = { "token", "logprob", "bytes",
						       "top_logprobs" };
		json_t *e0 = json_array_get(content, 0);
		json_t *tops = json_object_get(e0, "top_logprobs");

		expect_keys(e0, lp_keys, 4);
		assert_string_equal(json_string_value(json_object_get(e0, "token")),
				    "token_id:5");
		assert_true(json_real_value(json_object_get(e0, "logprob")) == -0.5);
		assert_int_equal(json_array_size(tops), 2);
		assert_string_equal(json_string_value(json_object_get(
			json_array_get(tops, 1), "token")), "token_id:9");
		/* the second token has one alternative: the -1 ends the list */
		assert_int_equal(json_array_size(json_object_get(
			json_array_get(content, 1), "top_logprobs")), 1);
	}
	assert_true(json_is_null(json_object_get(json_array_get(
		json_object_get(v, "choices"), 1), "logprobs")));
	assert_string_equal(json_string_value(json_object_get(json_object_get(
		json_array_get(json_object_get(v, "choices"), 1), "message"),
		"content")), "");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(v, "usage"),
							    "total_tokens")), 6);
	json_decref(v);

	/* a client's id is its own; no seed when not sampled */
	m.id = "mine";
	sb.len = 0;
	assert_int_equal(chat_format(&sb, &m, ch + 1, 1, &u, false, 0), 0);
	v = load(&sb, 0);
	assert_string_equal(json_string_value(json_object_get(v, "id")), "mine");
	assert_null(json_object_get(v, "seed"));
	json_decref(v);
	strbuf_release(&sb);
}

static void test_format_chunks(void **state)
{
	static const char *const chunk_keys[] = { "id", "object", "created",
						  "model", "choices" };
	static const char *const choice_keys[] = { "index", "delta", "logprobs",
						   "finish_reason" };
	struct completion_meta m = { "cmpl-2", 1, "sim", false };
	struct completion_choice one = { .index = 3, .text = "ab", .text_len = 2,
					 .finish_reason = "stop" };
	struct completion_usage u = { 1, 2 };
	static const enum chat_chunk kinds[] = { CHAT_CHUNK_ROLE, CHAT_CHUNK_CONTENT,
						 CHAT_CHUNK_FINISH };

	for (size_t k = 0; k < 3; k++) {
		struct strbuf sb = STRBUF_INIT;
		json_t *v, *c, *delta;
		bool last = kinds[k] == CHAT_CHUNK_FINISH;

		assert_int_equal(chat_format_chunk(&sb, &m, kinds[k], &one,
						   last ? &u : NULL), 0);
		assert_memory_equal(sb.data, "data: ", 6);
		assert_memory_equal(sb.data + sb.len - 2, "\n\n", 2);
		v = load(&sb, 6);
		if (last) {
			assert_non_null(json_object_get(v, "usage"));
			json_object_del(v, "usage");
		}
		expect_keys(v, chunk_keys, 5);
		assert_string_equal(json_string_value(json_object_get(v, "object")),
				    "chat.completion.chunk");
		assert_string_equal(json_string_value(json_object_get(v, "id")),
				    "chatcmpl-2");
		c = json_array_get(json_object_get(v, "choices"), 0);
		expect_keys(c, choice_keys, 4);
		assert_int_equal(json_integer_value(json_object_get(c, "index")), 3);
		delta = json_object_get(c, "delta");
		switch (kinds[k]) {
		case CHAT_CHUNK_ROLE:
			assert_string_equal(json_string_value(json_object_get(delta, "role")),
					    "assistant");
			assert_string_equal(json_string_value(json_object_get(delta,
									      "content")), "");
			assert_true(json_is_null(json_object_get(c, "finish_reason")));
			break;
		case CHAT_CHUNK_CONTENT:
			assert_int_equal(json_object_size(delta), 1);
			assert_string_equal(json_string_value(json_object_get(delta,
									      "content")), "ab");
			assert_true(json_is_null(json_object_get(c, "finish_reason")));
			break;
		case CHAT_CHUNK_FINISH:
			assert_int_equal(json_object_size(delta), 0);
			assert_string_equal(json_string_value(json_object_get(c,
									      "finish_reason")), "stop");
			break;
		case CHAT_CHUNK_TOOL_CALLS:	/* test_chat_tools.c */
			fail();
		}
		json_decref(v);
		strbuf_release(&sb);
	}
}

static void test_template_names(void **state)
{
	enum chat_template t;

	assert_int_equal(chat_template_from_name("llama2", &t), 0);
	assert_int_equal(t, CHAT_TEMPLATE_LLAMA2);
	assert_string_equal(chat_template_name(t), "llama2");
	assert_int_equal(chat_template_from_name("chatml", &t), 0);
	assert_int_equal(t, CHAT_TEMPLATE_CHATML);
	assert_string_equal(chat_template_name(t), "chatml");
	assert_int_equal(chat_template_from_name("llama-2", &t), -EINVAL);
	assert_int_equal(chat_template_from_name("", &t), -EINVAL);
}

/*
 * logprobs.content[] named by text with its bytes (logprob_text.h),
 * against test_logprob_ref.h's naive reference: random tokens and
 * alternatives of the trained vocabulary, a random token before them.
 */
#define LP_ROUNDS 200
#define LP_MAX_TOKENS 24
#define LP_MAX_TOP 4

/* One entry of content[] or of its top_logprobs against r. */
static void expect_entry(const json_t *e, const struct ref_token *r,
			 float logprob, int round, uint32_t i)
{
	if (!ref_name_is(json_object_get(e, "token"), r) ||
	    !ref_bytes_are(json_object_get(e, "bytes"), r))
		fail_msg("round %d token %u: token '%s' (want '%.*s') or its bytes "
			 "differ (SEED=%llu)", round, i,
			 json_string_value(json_object_get(e, "token")),
			 (int)r->name_len, r->name, test_seed);
	assert_true(json_number_value(json_object_get(e, "logprob")) == logprob);
}

static void test_logprobs_text(void **state)
{
	struct sampler_logprob lp[LP_MAX_TOKENS * (1 + LP_MAX_TOP)];
	struct completion_meta m = { .id = "cmpl-1", .model = "m", .created = 1 };
	struct strbuf out = STRBUF_INIT;
	struct rng rng = rng_for(2);
	int32_t tokens[LP_MAX_TOKENS];

	for (int round = 0; round < LP_ROUNDS; round++) {
		uint32_t n = rng_below(&rng, LP_MAX_TOKENS + 1);
		uint32_t stride = 1 + rng_below(&rng, LP_MAX_TOP + 1);
		struct completion_choice c = { .tokens = tokens, .n_tokens = n,
			.finish_reason = "stop", .logprobs = lp,
			.logprob_stride = stride,
			.lp = { .tok = ttok,
				.prev_token = (int32_t)rng_below(&rng, VOCAB + 1) - 1,
				.ignore_eos = rng_below(&rng, 2) } };
		struct ref_walk w = { ttok, c.lp.ignore_eos, c.lp.prev_token, 0 };
		json_t *o, *content;
		json_error_t jerr;

		ref_random_logprobs(&rng, VOCAB, tokens, n, lp, stride, false);
		out.len = 0;
		assert_int_equal(chat_format(&out, &m, &c, 1, NULL, false, 0), 0);
		o = json_loadb(out.data, out.len, JSON_REJECT_DUPLICATES, &jerr);
		if (!o)
			fail_msg("round %d: not JSON (%s) (SEED=%llu)", round, jerr.text,
				 test_seed);
		content = json_object_get(json_object_get(json_array_get(
			json_object_get(o, "choices"), 0), "logprobs"), "content");
		assert_int_equal(json_array_size(content), n);
		for (uint32_t i = 0; i < n; i++) {
			const json_t *e = json_array_get(content, i);
			const json_t *tops = json_object_get(e, "top_logprobs");
			struct ref_walk at = w;
			struct ref_token r;

			ref_token_at(&w, tokens[i], true, &r);
			expect_entry(e, &r, lp[i * stride].logprob, round, i);
			assert_int_equal(json_array_size(tops), stride - 1);
			for (uint32_t j = 1; j < stride; j++) {
				ref_token_at(&at, lp[i * stride + j].token, false, &r);
				expect_entry(json_array_get(tops, j - 1), &r,
					     lp[i * stride + j].logprob, round, i);
			}
		}
		json_decref(o);
	}
	strbuf_release(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_llama2_hand_written),
		cmocka_unit_test(test_chatml_hand_written),
		cmocka_unit_test(test_llama2_order_errors),
		cmocka_unit_test(test_random_against_reference),
		cmocka_unit_test(test_encode_turns),
		cmocka_unit_test(test_parse_becomes_completion),
		cmocka_unit_test(test_parse_max_tokens),
		cmocka_unit_test(test_parse_chatml_stop),
		cmocka_unit_test(test_parse_errors),
		cmocka_unit_test(test_parse_without_tokenizer),
		cmocka_unit_test(test_format_answer),
		cmocka_unit_test(test_format_chunks),
		cmocka_unit_test(test_template_names),
		cmocka_unit_test(test_logprobs_text),
	};

	test_seed_init("chat_api");
	return cmocka_run_group_tests_name("chat_api", tests, setup_tokenizer,
					   teardown_tokenizer);
}
