/*
 * test_chat_template.c - lib/text/chat_template.c: detection of the
 * template families from their Jinja sources, names, the exceptions the
 * templates raise (with the message index), and hostile contents.
 *
 * The exact rendering of each family is held to the real templates by
 * make test-chat-templates (a Jinja engine, valid Unicode only); here a
 * naive reference built from the templates' definitions checks Llama 2,
 * Llama 3, ChatML-with-default and Zephyr on random BYTES (invalid UTF-8,
 * NUL, Unicode whitespace at the ends), which no Jinja engine takes.  Its
 * strip() knows no UTF-8 decoder: it removes, while one matches, any of
 * the UTF-8 encodings of Python's whitespace at either end (a whole
 * sequence whose first byte is a lead byte is a character wherever it
 * ends).  The random test prints its seed; SEED=<n> replays a run.
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

#include "text/chat_template.h"
#include "tests/unit/test_rng.h"

/* ------------------------------------------------------------------ */
/* Detection                                                           */
/* ------------------------------------------------------------------ */

struct detect_case {
	const char *src;
	enum chat_family want;
};

static const struct detect_case detect_cases[] = {
	{ "{% for message in messages %}{% set content = '<|start_header_id|>' + "
	  "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
	  "'<|eot_id|>' %}{{ content }}{% endfor %}", CHAT_FAMILY_LLAMA3 },
	{ "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
	  "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}", CHAT_FAMILY_CHATML },
	{ "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
	  "<|im_start|>", CHAT_FAMILY_QWEN2 },
	{ "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are "
	  "a helpful assistant.<|im_end|>\\n' }}{%- if tools %}", CHAT_FAMILY_QWEN25 },
	{ "<|im_start|> {%- if '</think>' in content %} '<think>\\n' tools",
	  CHAT_FAMILY_QWEN3 },
	{ "'<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained "
	  "by Hugging Face<|im_end|>\\n'", CHAT_FAMILY_SMOLLM },
	{ "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }} '<<SYS>>\\n'",
	  CHAT_FAMILY_LLAMA2 },
	{ "{{ bos_token }}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
	  "{{ message['content'] + eos_token + ' ' }}", CHAT_FAMILY_MISTRAL_V1 },
	{ "{{ bos_token }}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
	  "{{ message['content'] + eos_token}}", CHAT_FAMILY_MIXTRAL },
	{ "{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + "
	  "eos_token }}\n{{ '<|assistant|>' }}", CHAT_FAMILY_ZEPHYR },
	/* Variants with features not rendered: unknown. */
	{ "<|start_header_id|>system<|end_header_id|>Cutting Knowledge Date: "
	  "<|eot_id|>", CHAT_FAMILY_UNKNOWN },
	{ "{{ '[SYSTEM_PROMPT]' }}[INST] eos_token + ' '", CHAT_FAMILY_UNKNOWN },
	{ "[INST] <<SYS>> something else", CHAT_FAMILY_UNKNOWN },
	{ "'<|im_start|>system\\nYou are Hermes.<|im_end|>' <|im_start|>",
	  CHAT_FAMILY_UNKNOWN },
	{ "<|im_start|>{% if tools %}", CHAT_FAMILY_UNKNOWN },
	{ "<|user|> <|assistant|> <|end|> eos_token", CHAT_FAMILY_UNKNOWN },
	{ "{{ '<start_of_turn>' + role + '\\n' }}", CHAT_FAMILY_UNKNOWN },
	{ "", CHAT_FAMILY_UNKNOWN },
};

static void test_detect(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(detect_cases) / sizeof(detect_cases[0]); i++) {
		const char *why = "unset";
		const struct detect_case *c = &detect_cases[i];
		enum chat_family f = chat_template_detect(c->src, strlen(c->src), &why);

		if (f != c->want)
			fail_msg("case %zu: detected %s, want %s (%s)", i,
				 chat_family_name(f), chat_family_name(c->want), c->src);
		if (f == CHAT_FAMILY_UNKNOWN)
			assert_true(why && strlen(why) > 10);
		else
			assert_null(why);
	}
	/* NULL why is allowed; a NUL inside the source is just a byte. */
	assert_int_equal(chat_template_detect("<|im_start|>\0tools", 18, NULL),
			 CHAT_FAMILY_UNKNOWN);
	assert_int_equal(chat_template_detect(NULL, 0, NULL), CHAT_FAMILY_UNKNOWN);
}

/* Detection reads only len bytes: a source cut anywhere, in a buffer of
 * exactly that size (ASan finds an over-read), never crashes. */
static void test_detect_prefixes(void **state)
{
	const char *src = detect_cases[3].src;

	(void)state;
	for (size_t n = 0; n <= strlen(src); n++) {
		char *b = malloc(n ? n : 1);

		memcpy(b, src, n);
		(void)chat_template_detect(b, n, NULL);
		free(b);
	}
}

static void test_names(void **state)
{
	(void)state;
	for (int f = 0; f < CHAT_FAMILY_COUNT; f++) {
		const char *name = chat_family_name((enum chat_family)f);

		assert_int_equal(chat_family_from_name(name), f);
		assert_non_null(strstr(CHAT_FAMILY_NAMES, name));
	}
	assert_int_equal(chat_family_from_name("llama-2"), CHAT_FAMILY_UNKNOWN);
	assert_int_equal(chat_family_from_name(""), CHAT_FAMILY_UNKNOWN);
	assert_int_equal(chat_family_from_name(NULL), CHAT_FAMILY_UNKNOWN);
	assert_string_equal(chat_family_name(CHAT_FAMILY_UNKNOWN), "unknown");
	assert_string_equal(chat_family_name(CHAT_FAMILY_COUNT), "unknown");
	assert_string_equal(chat_family_end_text(CHAT_FAMILY_LLAMA3), "<|eot_id|>");
	assert_string_equal(chat_family_end_text(CHAT_FAMILY_QWEN3), "<|im_end|>");
	assert_string_equal(chat_family_end_text(CHAT_FAMILY_SMOLLM), "<|im_end|>");
	assert_null(chat_family_end_text(CHAT_FAMILY_LLAMA2));
	assert_null(chat_family_end_text(CHAT_FAMILY_ZEPHYR));
	assert_null(chat_family_end_text(CHAT_FAMILY_UNKNOWN));
}

/* ------------------------------------------------------------------ */
/* Errors                                                              */
/* ------------------------------------------------------------------ */

#define M(r, s) { .role = CHAT_MSG_##r, .content = s, .len = sizeof(s) - 1 }

static int render(enum chat_family f, const struct chat_msg *m, size_t n,
		  char *err, size_t err_len, struct strbuf *sb)
{
	return chat_template_render(f, m, n, "<s>", "</s>", true, sb, err, err_len);
}

/* The render fails with -EINVAL and err holding want. */
static void expect_error(enum chat_family f, const struct chat_msg *m, size_t n,
			 const char *want)
{
	struct strbuf sb = STRBUF_INIT;
	char err[256] = "";

	assert_int_equal(render(f, m, n, err, sizeof(err), &sb), -EINVAL);
	if (!strstr(err, want))
		fail_msg("%s: error '%s' lacks '%s'", chat_family_name(f), err, want);
	strbuf_release(&sb);
}

static void test_errors(void **state)
{
	const struct chat_msg two_users[] = { M(USER, "a"), M(USER, "b") };
	const struct chat_msg sys_asst[] = { M(SYSTEM, "s"), M(ASSISTANT, "a") };
	const struct chat_msg late[] = { M(USER, "a"), M(ASSISTANT, "b"),
					 M(USER, "c"), M(USER, "d") };
	const struct chat_msg mis_sys[] = { M(SYSTEM, "s"), M(USER, "a") };
	const struct chat_msg mis_odd_sys[] = { M(USER, "a"), M(SYSTEM, "s") };
	struct chat_msg bad_role[] = { M(USER, "a") };
	struct strbuf sb = STRBUF_INIT;
	char err[256];

	(void)state;
	expect_error(CHAT_FAMILY_LLAMA2, two_users, 2, "messages[1]: role 'user'");
	expect_error(CHAT_FAMILY_LLAMA2, sys_asst, 2, "messages[1]: role 'assistant'");
	expect_error(CHAT_FAMILY_LLAMA2, late, 4, "messages[3]");
	expect_error(CHAT_FAMILY_MISTRAL_V1, mis_sys, 2, "messages[0]: role 'system'");
	expect_error(CHAT_FAMILY_MIXTRAL, mis_odd_sys, 2,
		     "messages[1]: role 'system': the template takes only user");
	expect_error(CHAT_FAMILY_MIXTRAL, late, 4, "alternate");
	for (int f = 0; f < CHAT_FAMILY_COUNT; f++)
		expect_error((enum chat_family)f, two_users, 0, "empty");
	expect_error(CHAT_FAMILY_UNKNOWN, two_users, 2, "no family");
	expect_error(CHAT_FAMILY_COUNT, two_users, 2, "no family");
	bad_role[0].role = (enum chat_msg_role)7;
	expect_error(CHAT_FAMILY_CHATML, bad_role, 1, "messages[0]: unknown role");
	/* No error buffer at all is fine. */
	assert_int_equal(render(CHAT_FAMILY_LLAMA2, two_users, 2, NULL, 0, &sb), -EINVAL);
	/* llama2 passes a system message at an odd place and writes nothing. */
	const struct chat_msg odd_sys[] = { M(USER, " a "), M(SYSTEM, "zz") };

	assert_int_equal(render(CHAT_FAMILY_LLAMA2, odd_sys, 2, err, sizeof(err), &sb), 0);
	assert_string_equal(sb.data, "<s>[INST] a [/INST]");
	strbuf_release(&sb);
}

/* Hand-worked texts, one a family, from the templates' definitions. */
static void test_examples(void **state)
{
	const struct chat_msg conv[] = { M(SYSTEM, "S"), M(USER, " hi\n"),
					 M(ASSISTANT, "yo"), M(USER, "q") };
	const struct chat_msg think[] = { M(USER, "q"),
					  M(ASSISTANT, "<think>\nr\n</think>\n\nA") };
	static const struct { enum chat_family f; size_t from; const char *want; } ex[] = {
		{ CHAT_FAMILY_LLAMA2, 0, "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\n hi [/INST] yo </s>"
		  "<s>[INST] q [/INST]" },
		{ CHAT_FAMILY_MISTRAL_V1, 1, "<s>[INST]  hi\n [/INST]yo</s> [INST] q [/INST]" },
		{ CHAT_FAMILY_LLAMA3, 0, "<s><|start_header_id|>system<|end_header_id|>\n\nS"
		  "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
		  "<|start_header_id|>assistant<|end_header_id|>\n\nyo<|eot_id|>"
		  "<|start_header_id|>user<|end_header_id|>\n\nq<|eot_id|>"
		  "<|start_header_id|>assistant<|end_header_id|>\n\n" },
		{ CHAT_FAMILY_QWEN25, 1, "<|im_start|>system\nYou are Qwen, created by Alibaba "
		  "Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\n hi\n"
		  "<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n<|im_start|>user\nq"
		  "<|im_end|>\n<|im_start|>assistant\n" },
		{ CHAT_FAMILY_ZEPHYR, 2, "<|assistant|>\nyo</s>\n<|user|>\nq</s>\n<|assistant|>\n" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(ex) / sizeof(ex[0]); i++) {
		struct strbuf sb = STRBUF_INIT;
		char err[256] = "";

		assert_int_equal(render(ex[i].f, conv + ex[i].from, 4 - ex[i].from,
					err, sizeof(err), &sb), 0);
		if (strcmp(sb.data, ex[i].want))
			fail_msg("%s:\n got  '%s'\n want '%s'", chat_family_name(ex[i].f),
				 sb.data, ex[i].want);
		strbuf_release(&sb);
	}
	/* Qwen 3: the last answer after the query keeps its think block. */
	struct strbuf sb = STRBUF_INIT;

	assert_int_equal(chat_template_render(CHAT_FAMILY_QWEN3, think, 2, NULL, NULL,
					      false, &sb, NULL, 0), 0);
	assert_string_equal(sb.data, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"
			    "<think>\nr\n</think>\n\nA<|im_end|>\n");
	strbuf_release(&sb);
	/* ... and without one gets an empty block, its newlines stripped. */
	const struct chat_msg plain[] = { M(USER, "q"), M(ASSISTANT, "\n\n A") };

	assert_int_equal(chat_template_render(CHAT_FAMILY_QWEN3, plain, 2, NULL, NULL,
					      false, &sb, NULL, 0), 0);
	assert_string_equal(sb.data, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"
			    "<think>\n\n</think>\n\n A<|im_end|>\n");
	strbuf_release(&sb);
}

/* ------------------------------------------------------------------ */
/* Random bytes against the naive reference                            */
/* ------------------------------------------------------------------ */

/* Python's whitespace, UTF-8 encoded. */
static const char *const py_ws[] = {
	"\t", "\n", "\v", "\f", "\r", "\x1c", "\x1d", "\x1e", "\x1f", " ",
	"\xc2\x85", "\xc2\xa0", "\xe1\x9a\x80", "\xe2\x80\x80", "\xe2\x80\x81",
	"\xe2\x80\x82", "\xe2\x80\x83", "\xe2\x80\x84", "\xe2\x80\x85", "\xe2\x80\x86",
	"\xe2\x80\x87", "\xe2\x80\x88", "\xe2\x80\x89", "\xe2\x80\x8a", "\xe2\x80\xa8",
	"\xe2\x80\xa9", "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80",
};
#define N_PY_WS (sizeof(py_ws) / sizeof(py_ws[0]))

/* Pieces the random contents are made of: whitespace, near-misses
 * (U+FEFF, U+200B, lone and truncated sequences), text. */
static const char *const pieces[] = {
	"a", "hi there", "\xe4\xb8\xad", "\xf0\x9f\x8e\x89", "\xef\xbb\xbf",
	"\xe2\x80\x8b", "\x80", "\xe2\x80", "\xc2", "\xe3\x80", "\x85", "\xa0",
	"\xed\xa0\x80", "\xc0\xa0", "<<SYS>>", "[INST]", "\0", "\xff",
};
#define N_PIECES (sizeof(pieces) / sizeof(pieces[0]))

struct bytes {
	char buf[160];
	size_t len;
};

static void add(struct bytes *b, const char *s, size_t n)
{
	if (b->len + n <= sizeof(b->buf)) {
		memcpy(b->buf + b->len, s, n);
		b->len += n;
	}
}

static void random_content(struct rng *r, struct bytes *b)
{
	uint32_t n = rng_below(r, 10);

	b->len = 0;
	for (uint32_t i = 0; i < n; i++) {
		const char *s;
		size_t len;

		if (rng_below(r, 2)) {
			s = py_ws[rng_below(r, N_PY_WS)];
			len = strlen(s);
		} else {
			uint32_t k = rng_below(r, N_PIECES);

			s = pieces[k];
			len = k == 16 ? 1 : strlen(s);	/* "\0" is one byte */
		}
		add(b, s, len);
	}
}

/* The naive strip: whole encodings of whitespace off either end. */
static void ref_strip(const char *p, size_t n, bool left, bool right,
		      const char **op, size_t *on)
{
	bool again = true;

	while (again) {
		again = false;
		for (size_t k = 0; k < N_PY_WS; k++) {
			size_t w = strlen(py_ws[k]);

			if (left && n >= w && !memcmp(p, py_ws[k], w)) {
				p += w, n -= w, again = true;
			} else if (right && n >= w && !memcmp(p + n - w, py_ws[k], w)) {
				n -= w, again = true;
			}
		}
	}
	*op = p, *on = n;
}

static void ref_put(struct strbuf *sb, const char *s)
{
	assert_int_equal(strbuf_append(sb, s, strlen(s)), 0);
}

static void ref_put_stripped(struct strbuf *sb, const struct bytes *b,
			     bool left, bool right)
{
	const char *p;
	size_t n;

	ref_strip(b->buf, b->len, left, right, &p, &n);
	assert_int_equal(strbuf_append(sb, p, n), 0);
}

static const char *const role_names[] = { "system", "user", "assistant" };

/* The reference text of family f (llama2, llama3, smollm, zephyr). */
static void ref_render(enum chat_family f, const enum chat_msg_role *roles,
		       const struct bytes *c, size_t n, struct strbuf *sb)
{
	size_t base = f == CHAT_FAMILY_LLAMA2 && roles[0] == CHAT_MSG_SYSTEM;

	if (f == CHAT_FAMILY_SMOLLM && roles[0] != CHAT_MSG_SYSTEM)
		ref_put(sb, "<|im_start|>system\nYou are a helpful AI assistant named "
			"SmolLM, trained by Hugging Face<|im_end|>\n");
	for (size_t i = base; i < n; i++) {
		const char *role = role_names[roles[i]];

		switch (f) {
		case CHAT_FAMILY_LLAMA2:
			if (roles[i] == CHAT_MSG_USER) {
				struct bytes whole = { .len = 0 };

				ref_put(sb, "<s>[INST] ");
				if (i == base && base) {
					add(&whole, "<<SYS>>\n", 8);
					add(&whole, c[0].buf, c[0].len);
					add(&whole, "\n<</SYS>>\n\n", 11);
				}
				add(&whole, c[i].buf, c[i].len);
				ref_put_stripped(sb, &whole, true, true);
				ref_put(sb, " [/INST]");
			} else if (roles[i] == CHAT_MSG_ASSISTANT) {
				ref_put(sb, " ");
				ref_put_stripped(sb, &c[i], true, true);
				ref_put(sb, " </s>");
			}
			break;
		case CHAT_FAMILY_LLAMA3:
			if (i == 0)
				ref_put(sb, "<s>");
			ref_put(sb, "<|start_header_id|>");
			ref_put(sb, role);
			ref_put(sb, "<|end_header_id|>\n\n");
			ref_put_stripped(sb, &c[i], true, true);
			ref_put(sb, "<|eot_id|>");
			break;
		case CHAT_FAMILY_SMOLLM:
			ref_put(sb, "<|im_start|>");
			ref_put(sb, role);
			ref_put(sb, "\n");
			ref_put_stripped(sb, &c[i], false, false);
			ref_put(sb, "<|im_end|>\n");
			break;
		default:	/* zephyr */
			ref_put(sb, "<|");
			ref_put(sb, role);
			ref_put(sb, "|>\n");
			ref_put_stripped(sb, &c[i], false, false);
			ref_put(sb, "</s>\n");
			break;
		}
	}
	if (f == CHAT_FAMILY_LLAMA3)
		ref_put(sb, "<|start_header_id|>assistant<|end_header_id|>\n\n");
	else if (f == CHAT_FAMILY_SMOLLM)
		ref_put(sb, "<|im_start|>assistant\n");
	else if (f == CHAT_FAMILY_ZEPHYR)
		ref_put(sb, "<|assistant|>\n");
}

static void test_random_bytes(void **state)
{
	static const enum chat_family fams[] = { CHAT_FAMILY_LLAMA2, CHAT_FAMILY_LLAMA3,
						 CHAT_FAMILY_SMOLLM, CHAT_FAMILY_ZEPHYR };
	struct rng r = rng_for(1);

	(void)state;
	for (int iter = 0; iter < 4000; iter++) {
		enum chat_family f = fams[rng_below(&r, 4)];
		enum chat_msg_role roles[8];
		struct bytes c[8];
		struct chat_msg m[8];
		struct strbuf got = STRBUF_INIT, want = STRBUF_INIT;
		size_t n = 1 + rng_below(&r, 8), base = 0;
		char err[256];

		if (rng_below(&r, 2))
			roles[base++] = CHAT_MSG_SYSTEM;
		for (size_t i = base; i < n; i++)
			roles[i] = f == CHAT_FAMILY_LLAMA2 ?
				((i - base) % 2 ? CHAT_MSG_ASSISTANT : CHAT_MSG_USER) :
				(enum chat_msg_role)rng_below(&r, 3);
		if (n <= base)
			n = base + 1, roles[base] = CHAT_MSG_USER;
		for (size_t i = 0; i < n; i++) {
			random_content(&r, &c[i]);
			m[i] = (struct chat_msg){ .role = roles[i], .content = c[i].buf,
						  .len = c[i].len };
		}
		assert_int_equal(chat_template_render(f, m, n, "<s>", "</s>", true, &got,
						      err, sizeof(err)), 0);
		ref_render(f, roles, c, n, &want);
		if (got.len != want.len || memcmp(got.data, want.data, got.len))
			fail_msg("iteration %d, %s, %zu messages: %zu bytes, want %zu",
				 iter, chat_family_name(f), n, got.len, want.len);
		strbuf_release(&got);
		strbuf_release(&want);
	}
}

/* Every family on random bytes and roles: refused or rendered, never a
 * crash (run under make asan), and never shorter than the contents it
 * copies whole (all but llama2/llama3, which strip). */
static void test_hostile(void **state)
{
	struct rng r = rng_for(2);

	(void)state;
	for (int iter = 0; iter < 3000; iter++) {
		enum chat_family f = (enum chat_family)rng_below(&r, CHAT_FAMILY_COUNT);
		struct bytes c[6];
		struct chat_msg m[6];
		struct strbuf sb = STRBUF_INIT;
		size_t n = 1 + rng_below(&r, 6), total = 0;
		char err[64];
		int rc;

		for (size_t i = 0; i < n; i++) {
			random_content(&r, &c[i]);
			if (rng_below(&r, 3) == 0)
				add(&c[i], "</think>", 8);
			m[i] = (struct chat_msg){
				.role = (enum chat_msg_role)rng_below(&r, 3),
				.content = c[i].buf, .len = c[i].len };
			total += c[i].len;
		}
		rc = chat_template_render(f, m, n, rng_below(&r, 2) ? "<s>" : NULL,
					  "</s>", rng_below(&r, 2), &sb, err, sizeof(err));
		assert_true(rc == 0 || rc == -EINVAL);
		if (rc == -EINVAL)
			assert_non_null(strstr(err, "messages["));
		if (rc == 0 && f != CHAT_FAMILY_LLAMA2 && f != CHAT_FAMILY_LLAMA3 &&
		    f != CHAT_FAMILY_QWEN3)
			assert_true(sb.len >= total);
		strbuf_release(&sb);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_detect),
		cmocka_unit_test(test_detect_prefixes),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_examples),
		cmocka_unit_test(test_random_bytes),
		cmocka_unit_test(test_hostile),
	};

	test_seed_init("test_chat_template");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
