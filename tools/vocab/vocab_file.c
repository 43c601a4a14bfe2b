/*
 * vocab_file.c - see vocab_file.h.
 */
#include "tools/vocab/vocab_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

char *vocab_unhex(const char *h, uint32_t *len)
{
	size_t n = strlen(h);
	char *out;

	if (strcmp(h, "-") == 0)
		n = 0;
	if (n % 2)
		return NULL;
	out = malloc(n / 2 + 1);
	if (!out)
		return NULL;
	for (size_t i = 0; i < n / 2; i++) {
		int a = hexval(h[2 * i]), b = hexval(h[2 * i + 1]);

		if (a < 0 || b < 0) {
			free(out);
			return NULL;
		}
		out[i] = (char)(a * 16 + b);
	}
	out[n / 2] = '\0';
	*len = (uint32_t)(n / 2);
	return out;
}

char *vocab_read_line(FILE *f, char **buf, size_t *cap)
{
	ssize_t n = getline(buf, cap, f);

	if (n < 0)
		return NULL;
	while (n > 0 && ((*buf)[n - 1] == '\n' || (*buf)[n - 1] == '\r'))
		(*buf)[--n] = '\0';
	return *buf;
}

int vocab_file_load(const char *path, struct vocab_file *v)
{
	FILE *f = fopen(path, "r");
	char *line = NULL, key[32], val[32];
	size_t cap = 0;
	int rc = -EINVAL;

	memset(v, 0, sizeof(*v));
	v->spec.bos_id = v->spec.eos_id = v->spec.eot_id = -1;
	v->spec.unk_id = v->spec.pad_id = -1;
	if (!f)
		return -errno;
	while (vocab_read_line(f, &line, &cap)) {
		long n;

		if (sscanf(line, "%31s %31s", key, val) != 2)
			goto out;
		n = strtol(val, NULL, 10);
		if (strcmp(key, "model") == 0) {
			snprintf(v->model, sizeof(v->model), "%s", val);
		} else if (strcmp(key, "pre") == 0) {
			snprintf(v->pre, sizeof(v->pre), "%s", val);
		} else if (strcmp(key, "bos") == 0) {
			v->spec.bos_id = (int32_t)n;
		} else if (strcmp(key, "eos") == 0) {
			v->spec.eos_id = (int32_t)n;
		} else if (strcmp(key, "eot") == 0) {
			v->spec.eot_id = (int32_t)n;
		} else if (strcmp(key, "unk") == 0) {
			v->spec.unk_id = (int32_t)n;
		} else if (strcmp(key, "pad") == 0) {
			v->spec.pad_id = (int32_t)n;
		} else if (strcmp(key, "add_bos") == 0) {
			v->spec.add_bos = n != 0;
		} else if (strcmp(key, "add_eos") == 0) {
			v->spec.add_eos = n != 0;
		} else if (strcmp(key, "add_space_prefix") == 0) {
			v->spec.add_space_prefix = n != 0;
		} else if (strcmp(key, "tokens") == 0) {
			v->spec.n_tokens = (uint32_t)n;
			v->texts = calloc((size_t)n, sizeof(*v->texts));
			v->lens = calloc((size_t)n, sizeof(*v->lens));
			v->scores = calloc((size_t)n, sizeof(*v->scores));
			v->types = calloc((size_t)n, sizeof(*v->types));
			if (!v->texts || !v->lens || !v->scores || !v->types)
				goto out;
			for (long i = 0; i < n; i++) {
				char hex[1 << 17];
				int type;
				float score;

				if (!vocab_read_line(f, &line, &cap) ||
				    sscanf(line, "%d %f %131071s", &type, &score, hex) != 3 ||
				    !(v->texts[i] = vocab_unhex(hex, &v->lens[i])))
					goto out;
				v->types[i] = type;
				v->scores[i] = score;
			}
		} else if (strcmp(key, "merges") == 0) {
			v->spec.n_merges = (uint32_t)n;
			v->merges = calloc((size_t)n + 1, sizeof(*v->merges));
			v->merge_lens = calloc((size_t)n + 1, sizeof(*v->merge_lens));
			if (!v->merges || !v->merge_lens)
				goto out;
			for (long i = 0; i < n; i++)
				if (!vocab_read_line(f, &line, &cap) ||
				    !(v->merges[i] = vocab_unhex(line, &v->merge_lens[i])))
					goto out;
		}
	}
	v->spec.model = v->model;
	v->spec.pre = v->pre[0] ? v->pre : NULL;
	v->spec.tokens = (const char *const *)v->texts;
	v->spec.token_lens = v->lens;
	v->spec.scores = v->scores;
	v->spec.token_types = v->types;
	v->spec.merges = (const char *const *)v->merges;
	v->spec.merge_lens = v->merge_lens;
	rc = 0;
out:
	free(line);
	fclose(f);
	return rc;
}


void vocab_file_free(struct vocab_file *v)
{
	for (uint32_t i = 0; v->texts && i < v->spec.n_tokens; i++)
		free(v->texts[i]);
	for (uint32_t i = 0; v->merges && i < v->spec.n_merges; i++)
		free(v->merges[i]);
	free(v->texts);
	free(v->lens);
	free(v->scores);
	free(v->types);
	free(v->merges);
	free(v->merge_lens);
	memset(v, 0, sizeof(*v));
}
