/*
 * test_trained_tok.h - a llama2.c tokenizer of vocab pieces trained on
 * the built-in corpus (tokenizer_train.h), for the tests of the HTTP
 * bodies that take text (test_chat_api.c, test_tokenize_api.c).
 * Header-only, for the test programs (one translation unit each).
 */
#ifndef DYNBATCH_TEST_TRAINED_TOK_H
#define DYNBATCH_TEST_TRAINED_TOK_H

#include <stdio.h>
#include <string.h>

#include "text/text_tokenizer.h"
#include "text/tokenizer.h"
#include "text/tokenizer_train.h"
#include "util/strbuf.h"

/* Train and load it into *tok (owned by *ttok, which
 * text_tokenizer_free() releases).  0, or -1 with a message on stderr. */
static inline int test_trained_tok(uint32_t vocab, struct tokenizer **tok,
				   struct text_tokenizer **ttok)
{
	struct strbuf file = STRBUF_INIT;
	char err[256];

	if (tokenizer_train(tokenizer_builtin_corpus, strlen(tokenizer_builtin_corpus),
			    vocab, &file, NULL, err, sizeof(err)) ||
	    tokenizer_load_mem(file.data, file.len, vocab, "mem", tok, err,
			       sizeof(err))) {
		fprintf(stderr, "tokenizer: %s\n", err);
		strbuf_release(&file);
		return -1;
	}
	strbuf_release(&file);
	return text_tokenizer_from_llama2c(*tok, ttok) ? -1 : 0;
}

#endif /* DYNBATCH_TEST_TRAINED_TOK_H */
