/*
 * chat_api.h - the OpenAI-style chat API's bodies: parsing a
 * POST /v1/chat/completions body (its "messages" rendered into a prompt by
 * a chat template) into a request, and writing the chat answers (a
 * "chat.completion" object, one "chat.completion.chunk" Server-Sent Event
 * per streamed step).  No I/O and no HTTP framing here; errors use
 * completion_api.h's api_format_error().
 *
 * A chat body is a completions body (completion_api.h) whose "prompt" is
 * replaced by "messages" (chat_messages.h: system, user, assistant and
 * tool messages, an assistant's tool_calls), with chat's own "tools",
 * "tool_choice" and "parallel_tool_calls" (chat_tools.h).  max_completion_tokens is accepted for
 * max_tokens (both given: the same value); with neither, max_tokens is
 * the rest of the context; every other field means what it means to
 * /v1/completions (max_tokens, temperature, top_p, n, stop, seed,
 * logprobs as true/false with top_logprobs, stream, ...), judged by the
 * same code: chat_parse() renders the messages, puts the prompt in their
 * place and hands the body to completion_parse().
 *
 * TEMPLATES
 *
 * llama2 - Meta's llama-2-chat format, as Meta's reference code
 * (llama/generation.py, chat_completion) builds it:
 *   - an optional first system message is folded into the first user
 *     message as "<<SYS>>\n" SYSTEM "\n<</SYS>>\n\n" USER;
 *   - then the messages must be user, assistant, user, ..., user (in turn,
 *     ending with user; a system message anywhere else is refused);
 *   - each user message and the assistant answer after it is one turn,
 *     "[INST] " strip(USER) " [/INST] " strip(ASSISTANT) " ", and the last
 *     user message the open turn "[INST] " strip(USER) " [/INST]", where
 *     strip() removes ASCII whitespace (space, \t \n \v \f \r) at both ends
 *     (Python's str.strip() also removes other Unicode spaces; we do not).
 *   So with a system message and one exchange the prompt reads
 *     <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] {user} [/INST]
 *   BOS AND EOS: the <s> and </s> there are the tokens BOS and EOS, never
 *   text.  Each turn is encoded on its own, BOS first (as every encoded
 *   text is: request_json.c's string prompts), and every turn but the open
 *   one is followed by the EOS token; the request's prompt is that token
 *   sequence.  Why not the text "</s><s>" between turns: our tokenizer
 *   (tokenizer.h) has no special-token parsing, so the text "</s>" would
 *   become the characters '<' '/' 's' '>', a prompt the model never saw
 *   in training; and encoding each turn on its own also gives each turn
 *   its own dummy-prefix space, exactly as Meta's per-turn encode() does.
 *   (llama.cpp renders the text "</s><s>" and then parses special tokens
 *   in it, which ends in the same tokens, but writes "[/INST]" ANSWER
 *   "</s>" with no spaces and does not strip; we follow Meta.)
 *
 * chatml - "<|im_start|>" ROLE "\n" CONTENT "<|im_end|>\n" for each message
 *   in any order (content as given), then "<|im_start|>assistant\n".  One
 *   text, encoded BOS first like a string prompt ("<|im_start|>" and
 *   "<|im_end|>" are text to our tokenizer).  The request also stops at
 *   the text "<|im_end|>" (added to its "stop" strings unless there), so
 *   the answer ends where the assistant's message does.
 *
 * The engine ends every request at EOS/BOS with a tokenizer (unless
 * ignore_eos), so llama2 needs no stop of its own.
 */
#ifndef DYNBATCH_CHAT_API_H
#define DYNBATCH_CHAT_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/http/completion_api.h"
#include "engine/request.h"
#include "util/strbuf.h"
#include "server/request/request_json.h"
#include "text/chat_template.h"
#include "server/http/chat_messages.h"

struct text_tokenizer;

enum chat_template {
	CHAT_TEMPLATE_NONE = 0,		/* serve has no --chat-template */
	CHAT_TEMPLATE_LLAMA2,
	CHAT_TEMPLATE_CHATML,
};

/* How chat requests are rendered, decided at start (chat_setup.h). */
struct chat_config {
	enum chat_template builtin;	/* llama2.c tokenizers; NONE else */
	int family;			/* GGUF tokenizers: enum chat_family
					 * (text/chat_template.h), or
					 * CHAT_FAMILY_UNKNOWN (-1) */
	char refusal[384];		/* "": chat works; else why it does not */
};

/* "llama2" or "chatml" into *out: 0, or -EINVAL for any other name. */
int chat_template_from_name(const char *name, enum chat_template *out);
/* Its name ("none" for CHAT_TEMPLATE_NONE). */
const char *chat_template_name(enum chat_template t);

/* The names as --help and errors list them. */
#define CHAT_TEMPLATE_NAMES "llama2|chatml"

/* The text chatml stops at. */
#define CHAT_CHATML_END "<|im_end|>"

/*
 * A rendered prompt: n_turns turns of text, turn i being
 * text.data[turn_end[i - 1] .. turn_end[i]) (from 0 for i = 0).  Each
 * turn is encoded on its own with BOS first; every turn but the last is
 * followed by EOS (see BOS AND EOS above).  chatml has one turn.
 */
struct chat_prompt {
	struct strbuf text;
	size_t *turn_end;	/* malloc'd, n_turns entries */
	uint32_t n_turns;
};

/*
 * Render n messages with template t into *out (zeroed first).  Returns 0,
 * -EINVAL with err naming the message ("messages[2].role ...") when the
 * template cannot take them (n == 0; llama2's order), or -ENOMEM.  Call
 * chat_prompt_release() in every case.
 */
int chat_render(enum chat_template t, const struct chat_message *msgs,
		size_t n, struct chat_prompt *out, char *err, size_t err_len);
void chat_prompt_release(struct chat_prompt *p);

/* The prompt as one readable text, turns joined by "</s><s>" (logs and
 * tests; BOS before the first turn is not written).  0 or -ENOMEM. */
int chat_prompt_text(const struct chat_prompt *p, struct strbuf *out);

/* The prompt's tokens (see BOS AND EOS) into *tokens (malloc'd, *n of
 * them).  0, -ENOMEM, or text_tokenizer_encode()'s error. */
int chat_prompt_encode(const struct chat_prompt *p,
		       const struct text_tokenizer *tok,
		       int32_t **tokens, size_t *n);

/*
 * Parse a chat body as cc says (its refusal, if any, is the 400's
 * reason) with lim->tok (the messages must be encoded).  Returns what
 * completion_parse() returns, with *param naming the field at fault
 * ("messages" for anything in the messages; "max_completion_tokens" when
 * that was the field given); errors about the rendered prompt (its
 * length) say so.  Call completion_request_release() in every case.
 */
int chat_parse(const char *body, size_t len, const struct chat_config *cc,
	       const struct request_limits *lim, struct completion_request *out,
	       char *err, size_t err_len, const char **param);

/*
 * The whole non-streaming answer, a "chat.completion" object:
 *   {"id":..,"object":"chat.completion","created":..,"model":..,
 *    "choices":[{"index":0,"message":{"role":"assistant","content":TEXT},
 *                "logprobs":null,"finish_reason":"stop"}],
 *    "usage":{..}[,"seed":S]}
 * An id the server made (COMPLETION_ID_PREFIX "cmpl-...") is written as
 * "chat" + id, OpenAI's "chatcmpl-..." (a client's id as it is).  With
 * logprobs, each choice's "logprobs" is OpenAI's chat shape:
 *   {"content":[{"token":"token_id:7","logprob":-0.5,"bytes":null,
 *                "top_logprobs":[{"token":"token_id:9","logprob":-1.2,
 *                                 "bytes":null},..]},..]}
 * choices' tokens and logprobs are as completion_api.h's.  A choice with
 * calls (chat_tools.h) answers "content" with the text before them (null
 * when there is none) and "tool_calls":[{"id":..,"type":"function",
 * "function":{"name":..,"arguments":JSON_TEXT}},..]; its finish_reason
 * is the caller's ("tool_calls").
 */
int chat_format(struct strbuf *out, const struct completion_meta *m,
		const struct completion_choice *choices, uint32_t n_choices,
		const struct completion_usage *usage, bool has_seed,
		uint64_t seed);

/* What one streamed chunk of a choice carries. */
enum chat_chunk {
	CHAT_CHUNK_ROLE,	/* first: delta {"role":"assistant","content":""} */
	CHAT_CHUNK_CONTENT,	/* delta {"content":TEXT}, with its logprobs */
	CHAT_CHUNK_TOOL_CALLS,	/* delta {"tool_calls":[..]} of choice->calls */
	CHAT_CHUNK_FINISH,	/* last: delta {}, the finish_reason */
};

/*
 * One Server-Sent Event "data: {...}\n\n", a "chat.completion.chunk" of
 * one choice (choice->finish_reason is written only by CHAT_CHUNK_FINISH,
 * tokens and text only by CHAT_CHUNK_CONTENT).  usage NULL: none (the
 * server sends it in a chunk of its own, chat_format_usage_chunk()).
 * 0 or -ENOMEM.
 */
int chat_format_chunk(struct strbuf *out, const struct completion_meta *m,
		      enum chat_chunk kind, const struct completion_choice *choice,
		      const struct completion_usage *usage);

/* The last chunk of a stream that asked for usage
 * (stream_options.include_usage): "choices": [] and "usage". */
int chat_format_usage_chunk(struct strbuf *out, const struct completion_meta *m,
			    const struct completion_usage *usage);

#endif /* DYNBATCH_CHAT_API_H */
