/*
 * gguf_vocab_read.c - see gguf_vocab_read.h.
 *
 * Nothing is copied here: the spec's strings point into the mapping and
 * gguf_tokenizer_create() copies what it keeps, so the arrays of
 * pointers below live only for the call.
 */
#include "text/gguf_vocab_read.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "text/gguf_tokenizer.h"
#include "util/file_map.h"

#define KEY(s) "tokenizer.ggml." s

struct vocab_read {
	const struct gguf_file *f;
	const char *name;
	char *err;
	size_t err_len;
};

__attribute__((format(printf, 2, 3)))
static int vr_fail(const struct vocab_read *r, const char *fmt, ...)
{
	char msg[384];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(r->err, r->err_len, "gguf '%s': %s", r->name, msg);
	return -EINVAL;
}

/* A getter's result: absent is fine (1: keep the default), a bad value
 * names the key. */
static int vr_got(const struct vocab_read *r, int rc, const char *why)
{
	if (rc == -ENOENT)
		return 1;
	return rc ? vr_fail(r, "%s", why) : 0;
}

/* An id key: -1 when absent. */
static int vr_id(const struct vocab_read *r, const char *key, int32_t *out)
{
	char why[256];
	uint32_t v;
	int rc = vr_got(r, gguf_get_u32(r->f, key, &v, why, sizeof(why)), why);

	*out = -1;
	if (rc)
		return rc < 0 ? rc : 0;
	if (v > INT32_MAX)
		return vr_fail(r, "key '%s' is %u (past any token id)", key, v);
	*out = (int32_t)v;
	return 0;
}

static int vr_bool(const struct vocab_read *r, const char *key, bool *out)
{
	char why[256];
	int rc = vr_got(r, gguf_get_bool(r->f, key, out, why, sizeof(why)), why);

	return rc < 0 ? rc : 0;
}

/* An array of n elements of type, or absent (a->n = 0) when optional. */
static int vr_array(const struct vocab_read *r, const char *key,
		    enum gguf_vtype type, uint64_t n, bool optional,
		    struct gguf_array *a)
{
	char why[256];
	int rc = gguf_get_array(r->f, key, a, why, sizeof(why));

	if (rc == -ENOENT && optional) {
		a->n = 0;
		return 0;
	}
	if (rc == -ENOENT)
		return vr_fail(r, "key '%s' is missing (the tokenizer needs it)", key);
	if (rc)
		return vr_fail(r, "%s", why);
	if (a->type != type)
		return vr_fail(r, "key '%s' is an array of %s (expected %s)", key,
			       gguf_vtype_name(a->type), gguf_vtype_name(type));
	if (n != UINT64_MAX && a->n != n)
		return vr_fail(r, "key '%s' has %llu elements (expected one a "
			       "token: %llu)", key, (unsigned long long)a->n,
			       (unsigned long long)n);
	return 0;
}

/* An array of strings as pointer and length arrays (into the mapping). */
static int vr_strings(const struct vocab_read *r, const char *key,
		      const struct gguf_array *a, const char ***ptrs,
		      uint32_t **lens)
{
	*ptrs = calloc(a->n ? a->n : 1, sizeof(**ptrs));
	*lens = calloc(a->n ? a->n : 1, sizeof(**lens));
	if (!*ptrs || !*lens)
		return -ENOMEM;
	for (uint64_t i = 0; i < a->n; i++) {
		struct gguf_str s = gguf_array_str(a, i);

		if (s.len > GGUF_TOKENIZER_MAX_TOKEN_LEN)
			return vr_fail(r, "key '%s': element %llu is %llu bytes "
				       "(at most %u)", key,
				       (unsigned long long)i,
				       (unsigned long long)s.len,
				       GGUF_TOKENIZER_MAX_TOKEN_LEN);
		(*ptrs)[i] = s.ptr;
		(*lens)[i] = (uint32_t)s.len;
	}
	return 0;
}

int gguf_vocab_read(const struct gguf_file *f, const char *name,
		    struct gguf_tokenizer **out, char *err, size_t err_len)
{
	struct vocab_read r = { f, name, err, err_len };
	struct tokenizer_vocab_spec s = { 0 };
	struct gguf_array tokens, scores, types, merges;
	struct gguf_str model, pre = { "", 0 };
	const char **tok_ptrs = NULL, **merge_ptrs = NULL;
	uint32_t *tok_lens = NULL, *merge_lens = NULL;
	float *score_v = NULL;
	int32_t *type_v = NULL;
	char model_z[32], pre_z[64], why[256];
	int rc;

	*out = NULL;
	rc = gguf_get_str(f, KEY("model"), &model, why, sizeof(why));
	if (rc == -ENOENT)
		return -ENOENT;
	if (rc)
		return vr_fail(&r, "%s", why);
	rc = vr_got(&r, gguf_get_str(f, KEY("pre"), &pre, why, sizeof(why)), why);
	if (rc < 0)
		return rc;
	if (model.len >= sizeof(model_z) || memchr(model.ptr, 0, model.len) ||
	    pre.len >= sizeof(pre_z) || memchr(pre.ptr, 0, pre.len))
		return vr_fail(&r, "key '%s' is not a tokenizer name",
			       model.len >= sizeof(model_z) ? KEY("model") : KEY("pre"));
	memcpy(model_z, model.ptr, model.len);
	model_z[model.len] = 0;
	memcpy(pre_z, pre.ptr, pre.len);
	pre_z[pre.len] = 0;

	rc = vr_array(&r, KEY("tokens"), GGUF_VT_STRING, UINT64_MAX, false, &tokens);
	if (!rc && (tokens.n == 0 || tokens.n > GGUF_TOKENIZER_MAX_VOCAB))
		rc = vr_fail(&r, "key '%s' has %llu tokens (expected 1 .. %u)",
			     KEY("tokens"), (unsigned long long)tokens.n,
			     GGUF_TOKENIZER_MAX_VOCAB);
	rc = rc ? rc : vr_array(&r, KEY("scores"), GGUF_VT_F32, tokens.n, true, &scores);
	rc = rc ? rc : vr_array(&r, KEY("token_type"), GGUF_VT_I32, tokens.n, true,
				&types);
	rc = rc ? rc : vr_array(&r, KEY("merges"), GGUF_VT_STRING, UINT64_MAX, true,
				&merges);
	if (!rc && merges.n > GGUF_TOKENIZER_MAX_MERGES)
		rc = vr_fail(&r, "key '%s' has %llu merges (at most %u)",
			     KEY("merges"), (unsigned long long)merges.n,
			     GGUF_TOKENIZER_MAX_MERGES);
	rc = rc ? rc : vr_strings(&r, KEY("tokens"), &tokens, &tok_ptrs, &tok_lens);
	rc = rc ? rc : vr_strings(&r, KEY("merges"), &merges, &merge_ptrs, &merge_lens);
	if (!rc && scores.n && !(score_v = malloc(scores.n * sizeof(*score_v))))
		rc = -ENOMEM;
	if (!rc && types.n && !(type_v = malloc(types.n * sizeof(*type_v))))
		rc = -ENOMEM;
	for (uint64_t i = 0; !rc && i < scores.n; i++)
		score_v[i] = gguf_array_f32(&scores, i);
	for (uint64_t i = 0; !rc && i < types.n; i++)
		type_v[i] = gguf_array_i32(&types, i);

	s.model = model_z;
	s.pre = pre.len ? pre_z : NULL;
	s.n_tokens = (uint32_t)tokens.n;
	s.tokens = tok_ptrs;
	s.token_lens = tok_lens;
	s.scores = score_v;
	s.token_types = type_v;
	s.n_merges = (uint32_t)merges.n;
	s.merges = merge_ptrs;
	s.merge_lens = merge_lens;
	s.add_bos = !strcmp(model_z, "llama") || !strcmp(pre_z, "llama-bpe");
	s.add_eos = false;
	s.add_space_prefix = !strcmp(model_z, "llama");
	rc = rc ? rc : vr_id(&r, KEY("bos_token_id"), &s.bos_id);
	rc = rc ? rc : vr_id(&r, KEY("eos_token_id"), &s.eos_id);
	rc = rc ? rc : vr_id(&r, KEY("eot_token_id"), &s.eot_id);
	rc = rc ? rc : vr_id(&r, KEY("unknown_token_id"), &s.unk_id);
	rc = rc ? rc : vr_id(&r, KEY("padding_token_id"), &s.pad_id);
	rc = rc ? rc : vr_bool(&r, KEY("add_bos_token"), &s.add_bos);
	rc = rc ? rc : vr_bool(&r, KEY("add_eos_token"), &s.add_eos);
	rc = rc ? rc : vr_bool(&r, KEY("add_space_prefix"), &s.add_space_prefix);
	if (!rc) {
		rc = gguf_tokenizer_create(&s, out, why, sizeof(why));
		if (rc == -EINVAL)
			rc = vr_fail(&r, "tokenizer: %s", why);
	}
	free(tok_ptrs);
	free(tok_lens);
	free(merge_ptrs);
	free(merge_lens);
	free(score_v);
	free(type_v);
	return rc;
}

int gguf_chat_template_read(const struct gguf_file *f, const char *name,
			    char **out, char *err, size_t err_len)
{
	struct vocab_read r = { f, name, err, err_len };
	struct gguf_str s;
	char why[256];
	int rc = gguf_get_str(f, "tokenizer.chat_template", &s, why, sizeof(why));

	*out = NULL;
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return vr_fail(&r, "%s", why);
	if (memchr(s.ptr, 0, s.len))
		return vr_fail(&r, "key 'tokenizer.chat_template' holds a NUL byte");
	*out = strndup(s.ptr, s.len);
	return *out ? 0 : -ENOMEM;
}

int gguf_vocab_read_file(const char *path, struct gguf_tokenizer **tok,
			 char **chat_template, char *err, size_t err_len)
{
	struct gguf_file f;
	struct file_map m;
	int rc;

	*tok = NULL;
	*chat_template = NULL;
	rc = file_map_open(&m, path, "GGUF file", err, err_len);
	if (rc)
		return rc;
	rc = gguf_parse(&f, m.data, m.size, path, err, err_len);
	if (!rc) {
		rc = gguf_vocab_read(&f, path, tok, err, err_len);
		if (rc == -ENOENT)
			rc = 0;
		rc = rc ? rc : gguf_chat_template_read(&f, path, chat_template,
						       err, err_len);
		if (rc) {
			gguf_tokenizer_free(*tok);
			*tok = NULL;
		}
		gguf_free(&f);
	}
	file_map_close(&m);
	return rc;
}
