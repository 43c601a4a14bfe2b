/*
 * bench_tokenizer.c - encoding speed of lib/text/tokenizer.c against the
 * naive llama2.c-style encoder (tools/refdecode/ref_tokenizer.c).
 *
 *   bench_tokenizer [--mb N] [--vocab V] [--seed S]
 *
 * A text of N MB (default 4) is generated deterministically from the seed:
 * words drawn with a skewed frequency, punctuation, newlines, and now and
 * then €, an emoji, CJK or a random byte.  A vocabulary of V tokens
 * (default 2000) is trained on its first 256 KB (lib/text/tokenizer_train.c).
 * Then:
 *  - the fast encoder over the whole text: MB/s (best of 3);
 *  - both encoders over prefixes of 2, 4, 8 and 16 KB (the naive one is
 *    O(n^2): the time per byte of the fast one stays flat while the naive
 *    one's doubles with the length), checked to give the same tokens,
 *    with the ratio of their times.
 *
 * Exit status: 0, 1 when the two encoders disagree, 2 bad arguments.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/parse_num.h"
#include "tools/refdecode/ref_tokenizer.h"
#include "util/strbuf.h"
#include "text/tokenizer.h"
#include "text/tokenizer_train.h"

static uint64_t bench_next(uint64_t *s)
{
	uint64_t x = (*s += 0x9E3779B97F4A7C15ull);

	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

static const char *const words[] = {
	"the", "a", "and", "to", "was", "he", "she", "it", "they", "of",
	"little", "cat", "dog", "ball", "tree", "garden", "happy", "played",
	"ran", "saw", "big", "red", "blue", "day", "time", "friend", "said",
	"mother", "girl", "boy", "sun", "sky", "house", "went", "came",
	"together", "every", "morning", "bread", "milk", "cheese", "price",
	"\xe2\x82\xac",				/* € */
	"\xf0\x9f\x98\x80",			/* 😀 */
	"\xe4\xb8\xad\xe6\x96\x87",		/* 中文 */
	"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",	/* 日本語 */
	"caf\xc3\xa9", "2024", "42",
};

static int gen_text(struct strbuf *sb, size_t bytes, uint64_t seed)
{
	size_t nw = sizeof(words) / sizeof(words[0]);

	while (sb->len < bytes) {
		uint64_t r = bench_next(&seed);
		/* min of two uniforms: low indices (common words) win */
		size_t a = r % nw, b = (r >> 20) % nw;
		const char *w = words[a < b ? a : b];
		int rc = strbuf_append(sb, w, strlen(w));

		switch ((r >> 40) % 16) {
		case 0: rc = rc ?: strbuf_append(sb, ". ", 2); break;
		case 1: rc = rc ?: strbuf_append(sb, ", ", 2); break;
		case 2: rc = rc ?: strbuf_append(sb, ".\n", 2); break;
		case 3: {
			char c = (char)(r >> 48);	/* any byte */

			rc = rc ?: strbuf_append(sb, &c, 1);
			break;
		}
		default: rc = rc ?: strbuf_append(sb, " ", 1); break;
		}
		if (rc)
			return rc;
	}
	sb->len = bytes;
	return 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "mb", required_argument, NULL, 'm' },
		{ "vocab", required_argument, NULL, 'v' },
		{ "seed", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 },
	};
	struct strbuf text = STRBUF_INIT, file = STRBUF_INIT;
	struct tokenizer_train_stats st;
	struct tokenizer *t;
	struct ref_tokenizer *ref;
	uint32_t mb = 4, vocab = 2000;
	uint64_t seed = 1;
	int32_t *fast, *naive;
	size_t n, cap;
	double best = 1e30;
	char err[512];
	int c, rc = 0;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'm':
			if (parse_u32(optarg, 1, 1024, &mb)) {
				fprintf(stderr, "bench_tokenizer: bad --mb '%s' (1 to 1024)\n", optarg);
				return 2;
			}
			break;
		case 'v':
			if (parse_u32(optarg, TOKENIZER_MIN_VOCAB + 1, 1u << 16, &vocab)) {
				fprintf(stderr, "bench_tokenizer: bad --vocab '%s' (260 to 65536)\n", optarg);
				return 2;
			}
			break;
		case 's':
			if (parse_u64(optarg, 0, UINT64_MAX, &seed)) {
				fprintf(stderr, "bench_tokenizer: bad --seed '%s'\n", optarg);
				return 2;
			}
			break;
		default:
			fprintf(stderr, "usage: bench_tokenizer [--mb N] [--vocab V] [--seed S]\n");
			return 2;
		}
	}
	if (gen_text(&text, (size_t)mb << 20, seed) ||
	    tokenizer_train(text.data, 256 << 10, vocab, &file, &st, err,
			    sizeof(err)) ||
	    tokenizer_load_mem(file.data, file.len, vocab, "trained", &t, err,
			       sizeof(err))) {
		fprintf(stderr, "bench_tokenizer: %s\n", err);
		return 1;
	}
	ref = ref_tokenizer_new(t);
	cap = tokenizer_encode_max(text.len);
	fast = malloc(cap * sizeof(*fast));
	naive = malloc(cap * sizeof(*naive));
	if (!ref || !fast || !naive) {
		fprintf(stderr, "bench_tokenizer: out of memory\n");
		return 1;
	}
	printf("vocabulary: %u tokens (%u merges, %u characters, %u padding), trained on 256 KB; seed %llu\n",
	       vocab, st.merges, st.alphabet, st.padding,
	       (unsigned long long)seed);
	for (int rep = 0; rep < 3; rep++) {
		double t0 = now_s(), dt;

		if (tokenizer_encode(t, text.data, text.len, true, false, fast,
				     cap, &n)) {
			fprintf(stderr, "bench_tokenizer: encode failed\n");
			return 1;
		}
		dt = now_s() - t0;
		best = dt < best ? dt : best;
	}
	printf("fast encoder: %u MB in %.3f s: %.2f MB/s, %zu tokens (%.2f bytes/token)\n",
	       mb, best, (double)text.len / 1048576.0 / best, n,
	       (double)text.len / (double)n);
	printf("%8s %12s %12s %10s %12s %12s\n", "bytes", "fast s", "naive s",
	       "naive/fast", "fast ns/B", "naive ns/B");
	for (size_t len = 2048; len <= 16384 && len <= text.len; len *= 2) {
		double t0, t_fast, t_naive;
		long nn;

		t0 = now_s();
		for (int rep = 0; rep < 10; rep++)
			tokenizer_encode(t, text.data, len, true, false, fast,
					 cap, &n);
		t_fast = (now_s() - t0) / 10;
		t0 = now_s();
		nn = ref_tokenizer_encode(ref, text.data, len, true, false, naive);
		t_naive = now_s() - t0;
		if (nn != (long)n || memcmp(fast, naive, n * sizeof(*fast))) {
			fprintf(stderr, "bench_tokenizer: the encoders disagree on the first %zu bytes\n",
				len);
			rc = 1;
		}
		printf("%8zu %12.6f %12.6f %10.1f %12.1f %12.1f\n", len, t_fast,
		       t_naive, t_naive / t_fast, t_fast * 1e9 / (double)len,
		       t_naive * 1e9 / (double)len);
	}
	free(fast);
	free(naive);
	ref_tokenizer_free(ref);
	tokenizer_free(t);
	strbuf_release(&text);
	strbuf_release(&file);
	return rc;
}
