/*
 * tokenize_api.h - the bodies of POST /tokenize and POST /detokenize, in
 * llama.cpp's server shapes: {"content": TEXT, "add_special": BOOL} ->
 * {"tokens": [ids]}, and {"tokens": [ids]} -> {"content": TEXT}.  No I/O
 * here (http_routes.c answers); the answer is written whole into out.
 *
 * As everywhere (request_fields.h), nothing is ignored: a field not in
 * the shape is a 400 naming it, and "with_pieces" (llama.cpp's token
 * texts beside the ids) is taken only as false.  add_special puts in
 * what the vocabulary adds to a whole prompt (BOS for llama2.c),
 * exactly as a string "prompt" of /v1/completions is encoded; the
 * default is false, as llama.cpp's.  /detokenize writes each token's
 * piece after its predecessor: a llama2.c BOS comes back as "<s>" (as
 * llama.cpp's does), a GGUF control token as nothing (text_tokenizer.h).
 */
#ifndef DYNBATCH_TOKENIZE_API_H
#define DYNBATCH_TOKENIZE_API_H

#include <stddef.h>

#include "server/request/request_fields.h"
#include "util/strbuf.h"

/*
 * The answer to a /tokenize body (len bytes) into out.  0; -EINVAL with
 * err and param (REQUEST_FIELD_NAME_MAX bytes: the field at fault, ""
 * for the body as a whole); -ENOMEM.  lim->tok NULL: -EINVAL (no tokenizer).
 */
int tokenize_answer(const char *body, size_t len, const struct request_limits *lim,
		    struct strbuf *out, char *err, size_t err_len,
		    char *param);

/* The answer to a /detokenize body, as tokenize_answer(); a token out
 * of [0, lim->vocab) is -EINVAL naming its index. */
int detokenize_answer(const char *body, size_t len,
		      const struct request_limits *lim, struct strbuf *out,
		      char *err, size_t err_len, char *param);

#endif /* DYNBATCH_TOKENIZE_API_H */
