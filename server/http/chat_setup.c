/*
 * chat_setup.c - see chat_setup.h.
 */
#include "server/http/chat_setup.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "text/chat_template.h"
#include "text/text_tokenizer.h"

int chat_config_resolve(const char *name, const struct text_tokenizer *tok,
			const char *jinja, struct chat_config *out, char *err,
			size_t err_len)
{
	const char *why = NULL;
	enum chat_family f;

	memset(out, 0, sizeof(*out));
	out->builtin = CHAT_TEMPLATE_NONE;
	out->family = CHAT_FAMILY_UNKNOWN;
	if (name && !tok) {
		snprintf(err, err_len, "--chat-template %s needs a tokenizer to "
			 "encode messages (--tokenizer PATH, a tokenizer.bin beside "
			 "a llama checkpoint, or a GGUF file's own)", name);
		return -EINVAL;
	}
	if (!tok) {
		snprintf(out->refusal, sizeof(out->refusal), "this server has no "
			 "chat template (--chat-template " CHAT_SETUP_NAMES ") and "
			 "no tokenizer to encode messages (--tokenizer)");
		return 0;
	}
	if (!text_tokenizer_parses_special(tok)) {	/* llama2.c's */
		if (!name) {
			snprintf(out->refusal, sizeof(out->refusal), "this server "
				 "has no chat template: it was started without "
				 "--chat-template " CHAT_TEMPLATE_NAMES);
			return 0;
		}
		if (chat_template_from_name(name, &out->builtin)) {
			snprintf(err, err_len, "--chat-template %s: with a "
				 "tokenizer.bin only " CHAT_TEMPLATE_NAMES " (the "
				 "others need a GGUF file's tokenizer, which parses "
				 "their special tokens)", name);
			return -EINVAL;
		}
		return 0;
	}
	if (name) {
		f = chat_family_from_name(name);
		if (f == CHAT_FAMILY_UNKNOWN) {
			snprintf(err, err_len, "--chat-template %s: not a template "
				 "(" CHAT_FAMILY_NAMES ")", name);
			return -EINVAL;
		}
		out->family = f;
		return 0;
	}
	if (!jinja) {
		snprintf(out->refusal, sizeof(out->refusal), "the model file has "
			 "no chat template (tokenizer.chat_template): start the "
			 "server with --chat-template " CHAT_FAMILY_NAMES);
		return 0;
	}
	f = chat_template_detect(jinja, strlen(jinja), &why);
	if (f == CHAT_FAMILY_UNKNOWN) {
		snprintf(out->refusal, sizeof(out->refusal), "the model's chat "
			 "template is not one dynbatch renders (%s): start the "
			 "server with --chat-template " CHAT_FAMILY_NAMES,
			 why ? why : "not recognised");
		return 0;
	}
	out->family = f;
	return 0;
}
