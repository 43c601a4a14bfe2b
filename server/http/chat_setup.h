/*
 * chat_setup.h - how /v1/chat/completions turns messages into a prompt,
 * decided once at start (docs/DESIGN.md 10.3).
 *
 * Two paths, by the tokenizer the engine serves with:
 *   - llama2.c's (no special tokens in text): chat_api.c's built-in
 *     templates, --chat-template llama2|chatml, turns encoded apart with
 *     BOS/EOS tokens between them (chat_api.h);
 *   - a GGUF file's (special tokens parsed): a template family of
 *     text/chat_template.h, named by --chat-template or detected in the
 *     file's tokenizer.chat_template, rendered as text with the file's
 *     BOS and EOS texts, then encoded once (a leading BOS text dropped
 *     when the tokenizer adds BOS itself, as llama.cpp does, so a prompt
 *     never starts with two).
 * Where neither applies (no template in the file, or one not
 * recognised, and no --chat-template), chat requests answer 400 with the
 * reason, and the server still starts.
 */
#ifndef DYNBATCH_CHAT_SETUP_H
#define DYNBATCH_CHAT_SETUP_H

#include <stddef.h>

#include "server/http/chat_api.h"

struct text_tokenizer;

/* Every name --chat-template takes: the built-in ones, then the families. */
#define CHAT_SETUP_NAMES \
	"llama2|chatml|mistral-v1|mixtral|llama3|qwen2|qwen2.5|qwen3|smollm|zephyr"

/*
 * Decide out from --chat-template (name, NULL when not given), the
 * tokenizer (NULL: none) and the file's template (jinja, NULL: none).
 * Returns 0 (out may hold a refusal), or -EINVAL with err saying why the
 * server cannot start: a name that is no template, a family name with
 * llama2.c's tokenizer, a name without any tokenizer.
 */
int chat_config_resolve(const char *name, const struct text_tokenizer *tok,
			const char *jinja, struct chat_config *out, char *err,
			size_t err_len);

#endif /* DYNBATCH_CHAT_SETUP_H */
