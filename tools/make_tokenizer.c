/*
 * make_tokenizer.c - train a small BPE vocabulary and write it as
 * llama2.c's tokenizer.bin, so tests and demos need no download.
 *
 *   make_tokenizer --vocab N --out FILE [--input TEXT]
 *
 * Without --input the built-in corpus (English, €, emoji, CJK; see
 * lib/text/tokenizer_train.c) is used.  What the vocabulary holds and how
 * it is trained: lib/text/tokenizer_train.h.  The output is a function of
 * the text and N only.  The written file is read back with the same
 * loader the engine uses before the tool says it wrote it.
 *
 * Exit status: 0 written, 1 I/O error (the partial file is removed),
 * 2 bad arguments or an unreadable --input.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/parse_num.h"
#include "util/strbuf.h"
#include "text/tokenizer.h"
#include "text/tokenizer_train.h"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: make_tokenizer --vocab N --out FILE [--input TEXT]\n"
		"  --vocab N     tokens in the vocabulary (%u to %u): 259 reserved\n"
		"                (<unk>, <s>, </s>, <0x00>..<0xFF>), then merges and characters\n"
		"  --out FILE    the tokenizer.bin to write (llama2.c's format)\n"
		"  --input TEXT  train on this UTF-8 text file (default: a built-in corpus)\n",
		TOKENIZER_MIN_VOCAB + 1, TOKENIZER_MAX_VOCAB);
}

/* Read a whole regular file into sb.  0, or -errno after a message. */
static int read_text(const char *path, struct strbuf *sb)
{
	char buf[1 << 16];
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	int rc = 0;

	if (fd < 0 || fstat(fd, &st) < 0) {
		rc = -errno;
		fprintf(stderr, "make_tokenizer: cannot read --input '%s': %s\n",
			path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		fprintf(stderr, "make_tokenizer: --input '%s' is not a regular file\n",
			path);
		close(fd);
		return -EINVAL;
	}
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			fprintf(stderr, "make_tokenizer: cannot read --input '%s': %s\n",
				path, strerror(errno));
			break;
		}
		if (n == 0)
			break;
		if (strbuf_append(sb, buf, (size_t)n)) {
			rc = -ENOMEM;
			fprintf(stderr, "make_tokenizer: --input '%s': out of memory\n",
				path);
			break;
		}
	}
	close(fd);
	return rc;
}

static int write_file(const char *path, const struct strbuf *data)
{
	FILE *f = fopen(path, "wb");

	if (!f) {
		fprintf(stderr, "make_tokenizer: cannot create '%s': %s\n", path,
			strerror(errno));
		return -1;
	}
	if (fwrite(data->data, 1, data->len, f) != data->len) {
		fprintf(stderr, "make_tokenizer: writing '%s' failed: %s\n", path,
			strerror(errno));
		fclose(f);
		unlink(path);
		return -1;
	}
	if (fclose(f) != 0) {
		fprintf(stderr, "make_tokenizer: closing '%s' failed: %s\n", path,
			strerror(errno));
		unlink(path);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "vocab", required_argument, NULL, 'v' },
		{ "out", required_argument, NULL, 'o' },
		{ "input", required_argument, NULL, 'i' },
		{ "help", no_argument, NULL, 'H' },
		{ NULL, 0, NULL, 0 },
	};
	struct strbuf text = STRBUF_INIT, file = STRBUF_INIT;
	struct tokenizer_train_stats st;
	const char *out = NULL, *input = NULL;
	struct tokenizer *check;
	uint32_t vocab = 0;
	char err[512];
	int c, rc = 2;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'v':
			if (parse_u32(optarg, TOKENIZER_MIN_VOCAB + 1,
				      TOKENIZER_MAX_VOCAB, &vocab)) {
				fprintf(stderr, "make_tokenizer: bad --vocab '%s' (%u to %u)\n",
					optarg, TOKENIZER_MIN_VOCAB + 1,
					TOKENIZER_MAX_VOCAB);
				return 2;
			}
			break;
		case 'o': out = optarg; break;
		case 'i': input = optarg; break;
		case 'H': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc || !out || !vocab) {
		fprintf(stderr, "make_tokenizer: %s\n",
			optind < argc ? "unexpected argument" :
			!vocab ? "--vocab N is required" : "--out FILE is required");
		usage(stderr);
		return 2;
	}
	if (input && read_text(input, &text))
		goto out;
	if (!input && strbuf_append(&text, tokenizer_builtin_corpus,
				    strlen(tokenizer_builtin_corpus))) {
		fprintf(stderr, "make_tokenizer: out of memory\n");
		goto out;
	}
	if (tokenizer_train(text.data ? text.data : "", text.len, vocab, &file,
			    &st, err, sizeof(err))) {
		fprintf(stderr, "make_tokenizer: %s\n", err);
		goto out;
	}
	rc = 1;
	if (write_file(out, &file))
		goto out;
	/* what we wrote must be what the engine can load */
	if (tokenizer_load(out, vocab, &check, err, sizeof(err))) {
		fprintf(stderr, "make_tokenizer: the written file does not load: %s\n",
			err);
		unlink(out);
		goto out;
	}
	tokenizer_free(check);
	printf("make_tokenizer: wrote %s (vocab %u: 259 reserved, %u merges, %u characters, %u padding; max_token_length %d) from %s (%zu bytes)\n",
	       out, vocab, st.merges, st.alphabet, st.padding,
	       st.max_token_length, input ? input : "the built-in corpus",
	       text.len);
	rc = 0;
out:
	strbuf_release(&text);
	strbuf_release(&file);
	return rc;
}
