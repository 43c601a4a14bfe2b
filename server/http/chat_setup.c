/*
 * chat_setup.c - see chat_setup.h.
 */
#include "server/http/chat_setup.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat_template.h"
#include "text/text_tokenizer.h"
#include "util/strbuf.h"

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
			 "tokenizer (--tokenizer): chat messages cannot be encoded");
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

/* The text of special token id, NUL-terminated, or "" for none. */
static const char *special_text(const struct text_tokenizer *tok, int32_t id,
				size_t *len)
{
	const char *s = text_tokenizer_token_text(tok, id, len);

	return s ? s : "";
}

int chat_family_encode(int family, const struct chat_message *msgs, size_t n,
		       const struct text_tokenizer *tok, uint32_t max_context,
		       int32_t **ids, size_t *n_ids, char *err, size_t err_len)
{
	struct strbuf text = STRBUF_INIT;
	struct chat_msg *m = calloc(n ? n : 1, sizeof(*m));
	size_t bos_len, eos_len, skip = 0, cap;
	const char *bos = special_text(tok, text_tokenizer_bos(tok), &bos_len);
	const char *eos = special_text(tok, text_tokenizer_eos(tok), &eos_len);
	int rc;

	*ids = NULL;
	*n_ids = 0;
	if (!m)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		m[i] = (struct chat_msg){
			.role = msgs[i].role == CHAT_ROLE_SYSTEM ? CHAT_MSG_SYSTEM :
				msgs[i].role == CHAT_ROLE_USER ? CHAT_MSG_USER :
				CHAT_MSG_ASSISTANT,
			.content = msgs[i].content, .len = msgs[i].len };
	rc = chat_template_render((enum chat_family)family, m, n, bos, eos, true,
				  &text, err, err_len);
	free(m);
	if (rc)
		goto out;
	/* the tokenizer puts BOS first itself: not twice (llama.cpp too) */
	if (text_tokenizer_adds_bos(tok) && bos_len && text.len >= bos_len &&
	    !memcmp(text.data, bos, bos_len))
		skip = bos_len;
	/* no token stands for more text than the longest piece (+1: a
	 * dummy-prefix space): a longer text cannot fit the context */
	if ((text.len - skip) / (text_tokenizer_longest_piece(tok) + 1) > max_context) {
		rc = -EINVAL;
		snprintf(err, err_len, "messages: the prompt the chat template "
			 "renders (%zu bytes) exceeds the context limit %u",
			 text.len - skip, max_context);
		goto out;
	}
	cap = text_tokenizer_encode_max(text.len - skip);
	*ids = malloc(cap * sizeof(**ids));
	if (!*ids) {
		rc = -ENOMEM;
		goto out;
	}
	rc = text_tokenizer_encode(tok, text.data + skip, text.len - skip, true,
				   *ids, cap, n_ids);
	if (rc && rc != -ENOMEM) {
		snprintf(err, err_len, "messages: cannot encode: %s", strerror(-rc));
		rc = -EINVAL;
	}
	if (rc) {
		free(*ids);
		*ids = NULL;
	}
out:
	strbuf_release(&text);
	(void)eos_len;
	return rc;
}
