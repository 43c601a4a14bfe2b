/*
 * test_options.c - the option table (server/options.h): every default
 * parses as an argument would, the defaults the engine and the chat
 * templates also know agree with theirs, the parser keeps the ranges and
 * the commands' options apart, and the options section of docs/usage.md
 * (between <!-- options:begin --> and <!-- options:end -->) is exactly
 * what `dynbatch --help-markdown` prints, so the docs cannot drift from
 * the code.  Run from the repository's root (make unit does).
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

#include "engine/engine.h"
#include "server/http/chat_api.h"
#include "server/http/chat_setup.h"
#include "text/chat_template.h"
#include "server/options.h"

#define USAGE_MD "docs/usage.md"
#define BEGIN_MARK "<!-- options:begin -->\n"
#define END_MARK "<!-- options:end -->\n"

/* options_parse() of "cmd" and the given arguments (NULL-terminated). */
static int parse(struct server_options *o, ...)
{
	char *argv[16] = { "run" };
	int argc = 1;
	va_list ap;
	FILE *saved = stderr;
	int rc;

	va_start(ap, o);
	while ((argv[argc] = va_arg(ap, char *)))
		argc++;
	va_end(ap);
	options_init(o);
	/* the messages are e2e_engine.sh's to check: keep the log quiet */
	stderr = fopen("/dev/null", "w");
	rc = options_parse(argc, argv, o);
	fclose(stderr);
	stderr = saved;
	return rc;
}

/* Every default parses as the user's argument would. */
static void test_defaults_parse(void **state)
{
	for (size_t i = 0; i < options_count; i++) {
		const struct option_spec *s = &options_table[i];
		struct server_options o;
		char arg[128];

		if (!s->def)
			continue;
		snprintf(arg, sizeof(arg), "--%s=%s", s->name, s->def);
		assert_int_equal(parse(&o, arg, NULL), 0);
	}
}

/* The defaults the engine also holds: written once, checked here. */
static void test_engine_defaults(void **state)
{
	const struct option_spec *mc = options_find("max-context");
	struct server_options o;
	char num[32];

	options_init(&o);
	assert_int_equal(o.step_tokens, ENGINE_DEFAULT_STEP_TOKENS);
	assert_int_equal(o.max_context, 0);	/* 0: engine_set_max_context() */
	assert_non_null(mc);
	snprintf(num, sizeof(num), "else %u", ENGINE_DEFAULT_MAX_CONTEXT);
	assert_non_null(strstr(mc->def_doc, num));
	assert_string_equal(o.policy, "dynamic");
	assert_int_equal(o.progress, -1);
	assert_true(o.workers >= 1);
	assert_null(o.chat_template);
}

/* The table's chat templates are CHAT_SETUP_NAMES: each a built-in
 * template (chat_api.h) or a family (text/chat_template.h), and every
 * family among them. */
static void test_chat_templates(void **state)
{
	const struct option_spec *s = options_find("chat-template");
	char joined[256] = "";
	enum chat_template t;

	assert_non_null(s);
	for (size_t i = 0; s->choices[i]; i++) {
		if (chat_template_from_name(s->choices[i], &t) == 0)
			assert_string_equal(chat_template_name(t), s->choices[i]);
		else
			assert_int_not_equal(chat_family_from_name(s->choices[i]),
					     CHAT_FAMILY_UNKNOWN);
		if (i)
			strcat(joined, "|");
		strcat(joined, s->choices[i]);
	}
	assert_string_equal(joined, CHAT_SETUP_NAMES);
	for (int f = 0; f < CHAT_FAMILY_COUNT; f++) {
		bool found = false;

		for (size_t i = 0; s->choices[i]; i++)
			found |= !strcmp(s->choices[i], chat_family_name(f));
		assert_true(found);
	}
}

/* Ranges, kinds and the commands' options. */
static void test_parse(void **state)
{
	struct server_options o;

	assert_int_equal(parse(&o, "--workers", "0", "--batch", "7", NULL), 0);
	assert_int_equal(o.workers, 0);
	assert_int_equal(o.batch, 7);
	assert_int_equal(o.modes_given, 0);
	assert_int_equal(parse(&o, "--workers", "1025", NULL), -EINVAL);
	assert_int_equal(parse(&o, "--batch", "0", NULL), -EINVAL);
	assert_int_equal(parse(&o, "--garbage-every", "1", NULL), -EINVAL);
	assert_int_equal(parse(&o, "--garbage-every", "2", NULL), 0);
	assert_int_equal(o.garbage_every, 2);
	assert_int_equal(parse(&o, "--default-temperature", "nan", NULL), -EINVAL);
	assert_int_equal(parse(&o, "--default-temperature", "0.5", NULL), 0);
	assert_true(o.default_temperature == 0.5f);
	assert_int_equal(parse(&o, "--policy", "static", NULL), 0);
	assert_string_equal(o.policy, "static");
	assert_int_equal(parse(&o, "--policy", "fair", NULL), -EINVAL);
	assert_int_equal(parse(&o, "--no-progress", NULL), 0);
	assert_int_equal(o.progress, 0);
	assert_int_equal(parse(&o, "--progress", NULL), 0);
	assert_int_equal(o.progress, 1);
	assert_int_equal(parse(&o, "--stream", "--input", "x", NULL), 0);
	assert_true(o.stream);
	assert_string_equal(o.input, "x");
	assert_int_equal(o.modes_given, OPTION_RUN);
	assert_int_equal(parse(&o, "--listen", "h:1", NULL), 0);
	assert_int_equal(o.modes_given, OPTION_SERVE);
	assert_int_equal(parse(&o, "--api-key", "", NULL), -EINVAL);
	assert_int_equal(parse(&o, "--model-name", "a\tb", NULL), -EINVAL);
	assert_int_equal(parse(&o, "--chat-template", "chatml", NULL), 0);
	assert_string_equal(o.chat_template, "chatml");
	assert_int_equal(parse(&o, "--bogus", NULL), -EINVAL);
	assert_int_equal(parse(&o, "--workers", NULL), -EINVAL);
	assert_int_equal(parse(&o, "stray", NULL), -EINVAL);
	assert_int_equal(parse(&o, "--max-answer-bytes", "9223372036854775807", NULL), 0);
	assert_int_equal(o.max_answer_bytes, UINT64_MAX / 2);
}

/* docs/usage.md's options section is what --help-markdown prints. */
/* OPTION_LIST: repeatable, each a comma list of non-empty names. */
static void test_list(void **state)
{
	static const char *const bad[] = { "", ",a", "a,", "a,,b", "a\tb", "," };
	struct server_options o;
	const char *argv[2 * OPTION_LIST_MAX + 4] = { NULL };
	int n = 0;

	assert_int_equal(parse(&o, NULL), 0);
	assert_int_equal(o.served_model_names.n, 0);
	assert_int_equal(parse(&o, "--served-model-name", "a,b", "--served-model-name",
			       "c", NULL), 0);
	assert_int_equal(o.served_model_names.n, 2);
	assert_string_equal(o.served_model_names.v[0], "a,b");
	assert_string_equal(o.served_model_names.v[1], "c");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (parse(&o, "--served-model-name", bad[i], NULL) != -EINVAL)
			fail_msg("--served-model-name '%s' taken", bad[i]);
	/* at most OPTION_LIST_MAX of them */
	for (int i = 0; i <= (int)OPTION_LIST_MAX; i++) {
		argv[n++] = "--served-model-name";
		argv[n++] = "x";
	}
	options_init(&o);
	{
		char *args[2 * OPTION_LIST_MAX + 4];

		args[0] = "serve";
		for (int i = 0; i < n; i++)
			args[i + 1] = (char *)argv[i];
		args[n + 1] = NULL;
		assert_int_equal(options_parse(n + 1, args, &o), -EINVAL);
		options_init(&o);
		assert_int_equal(options_parse(n - 1, args, &o), 0);
		assert_int_equal(o.served_model_names.n, OPTION_LIST_MAX);
	}
}

static void test_usage_md(void **state)
{
	char *doc = NULL, *gen = NULL, *begin, *end;
	size_t doc_len = 0, gen_len = 0;
	FILE *f = fopen(USAGE_MD, "r");
	FILE *m;

	if (!f)
		fail_msg("%s: cannot open (run from the repository's root)", USAGE_MD);
	m = open_memstream(&doc, &doc_len);
	assert_non_null(m);
	for (int c; (c = fgetc(f)) != EOF;)
		fputc(c, m);
	fclose(f);
	fclose(m);
	begin = strstr(doc, BEGIN_MARK);
	if (!begin)
		fail_msg("%s: no line %s", USAGE_MD, BEGIN_MARK);
	begin += strlen(BEGIN_MARK);
	end = strstr(begin, END_MARK);
	if (!end || (end != begin && end[-1] != '\n'))
		fail_msg("%s: no line %s after the begin mark", USAGE_MD, END_MARK);
	*end = '\0';
	m = open_memstream(&gen, &gen_len);
	assert_non_null(m);
	options_print_markdown(m);
	fclose(m);
	if (strcmp(begin, gen))
		fail_msg("%s's options section differs from `dynbatch --help-markdown`: "
			 "regenerate it (bin/dynbatch --help-markdown)", USAGE_MD);
	free(doc);
	free(gen);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults_parse),
		cmocka_unit_test(test_engine_defaults),
		cmocka_unit_test(test_chat_templates),
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_list),
		cmocka_unit_test(test_usage_md),
	};

	return cmocka_run_group_tests_name("options", tests, NULL, NULL);
}
