/*
 * make_checkpoint.c - write a llama2.c checkpoint of any shape with seeded
 * random weights, for tests and benchmarks of the llama model.
 *
 *   make_checkpoint --out FILE [--shape stories15M|stories110M]
 *                   [--dim D --hidden H --layers L --heads NH
 *                    --kv-heads NKV --vocab V --seq-len S]
 *                   [--separate-classifier]
 *                   [--format legacy|ak42|ak42v2 [--group-size N]]
 *                   [--seed N] [--plain-scales]
 *
 * ak42 is export.py's version 1 (fp32), ak42v2 its version 2 (Q8_0 in
 * groups of --group-size values, default 64; see llama_checkpoint.h).
 *
 * Exit status: 0 written, 1 I/O error (the partial file is removed),
 * 2 bad arguments.
 *
 * NOTES ON THE DESIGN
 *
 * Each tensor is drawn from its own splitmix64 stream, seeded by the seed
 * and the tensor's name, so the same seed gives the same model in both
 * formats whatever their tensor order, and a reader's tests can compare
 * the two.  Tensors are generated and written in blocks, so a 110M-shape
 * file (about 440 MB) never sits in memory.
 *
 * Scales: matrices are uniform with standard deviation 1/sqrt(fan_in), so
 * each layer's output has about unit RMS; norm weights are 1 +- 0.1.  The
 * token embedding and the classifier have standard deviation
 * LOGIT_STD/sqrt(dim): the logits (classifier . unit-RMS vector) then
 * spread with deviation LOGIT_STD, peaked but not one-hot, and the
 * embedding is small beside what the layers add to the residual stream,
 * so a tied classifier does not simply echo the last token.
 *
 * With plain 1/sqrt(fan_in) scales, attention scores spread by about 1,
 * so attention is a near-uniform average of the whole history, which
 * barely moves from one position to the next: greedy decoding then
 * repeats one token for dozens of steps.  wq and wk are QK_GAIN times
 * larger (scores spread by about QK_GAIN^2, so attention picks positions)
 * and w2 FFN_GAIN times larger (the per-token FFN outweighs the history):
 * on the stories15M shape 250 greedy tokens then hold ~250 distinct ids,
 * on a 300-token vocabulary about 50.  --plain-scales leaves both gains
 * at 1: the repeating text, for benchmarks where repetition is the point
 * (speculative decoding's prompt lookup, bench/bench_spec.sh).  RMSNorm
 * before every matmul keeps activations finite at any position.
 *
 * ak42v2 draws the same fp32 weights and quantizes them as export.py's
 * quantize_q80 does: per group of --group-size values, scale = max |w| /
 * 127 and q = w / scale rounded half to even (torch.round), all in fp32.
 * A group of zeros gets scale 0 and q 0.  Like export.py, the default
 * group size is halved until it divides dim; here also hidden_dim, as the
 * reader (and runq.c) need.  An explicit --group-size must divide both.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/llama_checkpoint.h"
#include "util/parse_num.h"
#include "model/sim_model.h"
#include "tools/llama_shape.h"

#define LOGIT_STD 2.5
#define QK_GAIN 3.0	/* sharper attention: see the file comment */
#define FFN_GAIN 2.5	/* a louder per-token FFN: see the file comment */
#define BLOCK_FLOATS 65536
#define DEFAULT_GROUP 64

enum tensor_id {
	T_EMBED = 1, T_RMS_ATT, T_WQ, T_WK, T_WV, T_WO, T_RMS_FFN,
	T_W1, T_W2, T_W3, T_RMS_FINAL, T_WCLS,
};

enum format { F_LEGACY, F_AK42, F_AK42V2 };

struct writer {
	FILE *f;
	const char *path;
	uint64_t seed;
	uint32_t group;		/* ak42v2's group size */
	double qk_gain, ffn_gain;	/* QK_GAIN and FFN_GAIN, or 1 and 1
					 * (--plain-scales) */
	float buf[BLOCK_FLOATS];
	int8_t qbuf[BLOCK_FLOATS];
	bool failed;
};

/* The uniform stream of one tensor: see write_tensor(). */
struct stream {
	uint64_t state;
	double mean, half;
};

static void usage(FILE *out)
{
	fprintf(out,
		"usage: make_checkpoint --out FILE [--shape stories15M|stories110M]\n"
		"       [--dim D --hidden H --layers L --heads NH --kv-heads NKV\n"
		"        --vocab V --seq-len S] [--separate-classifier]\n"
		"       [--format legacy|ak42|ak42v2 [--group-size N]] [--seed N]\n"
		"       [--plain-scales]\n");
}

/* Write n items of size bytes; remember the first failure. */
static void write_items(struct writer *w, const void *p, size_t size, size_t n)
{
	if (!w->failed && fwrite(p, size, n, w->f) != n) {
		fprintf(stderr, "make_checkpoint: write to '%s' failed: %s\n",
			w->path, strerror(errno));
		w->failed = true;
	}
}

static void write_floats(struct writer *w, const float *p, size_t n)
{
	write_items(w, p, sizeof(float), n);
}

static void stream_init(struct stream *st, const struct writer *w,
			enum tensor_id id, double mean, double std)
{
	st->state = sim_mix(w->seed ^ ((uint64_t)id * 0xA24BAED4963EE407ull));
	st->mean = mean;
	st->half = std * sqrt(3.0);
}

static float stream_next(struct stream *st)
{
	double u = (double)(sim_splitmix64(&st->state) >> 11) *
		   (1.0 / 9007199254740992.0);

	return (float)(st->mean + (2.0 * u - 1.0) * st->half);
}

/* n floats of tensor id: uniform with mean `mean` and deviation `std`. */
static void write_tensor(struct writer *w, enum tensor_id id, uint64_t n,
			 double mean, double std)
{
	struct stream st;

	stream_init(&st, w, id, mean, std);
	while (n && !w->failed) {
		size_t k = n < BLOCK_FLOATS ? (size_t)n : BLOCK_FLOATS;

		for (size_t i = 0; i < k; i++)
			w->buf[i] = stream_next(&st);
		write_floats(w, w->buf, k);
		n -= k;
	}
}

/*
 * Tensor id as ak42v2 stores it: per layer, the [rows][cols] matrix's
 * int8 values, then its scales.  The same fp32 values as write_tensor()
 * draws for layers * rows * cols floats, quantized per group.
 */
static void write_q8_tensor(struct writer *w, enum tensor_id id,
			    uint64_t layers, uint64_t rows, uint64_t cols,
			    double mean, double std)
{
	uint64_t n_groups = rows * cols / w->group;
	float *scales = malloc(n_groups * sizeof(float));
	struct stream st;

	if (!scales) {
		fprintf(stderr, "make_checkpoint: out of memory for %llu scales\n",
			(unsigned long long)n_groups);
		w->failed = true;
		return;
	}
	stream_init(&st, w, id, mean, std);
	for (uint64_t l = 0; l < layers && !w->failed; l++) {
		for (uint64_t g = 0; g < n_groups && !w->failed; g++) {
			float max = 0, scale;

			for (uint32_t i = 0; i < w->group; i++) {
				w->buf[i] = stream_next(&st);
				max = fmaxf(max, fabsf(w->buf[i]));
			}
			scale = max / 127.0f;
			for (uint32_t i = 0; i < w->group; i++)
				w->qbuf[i] = scale == 0 ? 0 :
					(int8_t)nearbyintf(w->buf[i] / scale);
			write_items(w, w->qbuf, 1, w->group);
			scales[g] = scale;
		}
		write_floats(w, scales, n_groups);
	}
	free(scales);
}

/* The legacy RoPE tables llama2.c's export wrote (real, then imag). */
static void write_rope(struct writer *w, const struct shape *s)
{
	uint32_t hs = s->dim / s->heads;

	for (int part = 0; part < 2; part++) {
		for (uint32_t pos = 0; pos < s->seq_len && !w->failed; pos++) {
			for (uint32_t j = 0; j < hs / 2; j++) {
				double freq = 1.0 / pow(10000.0, (2.0 * j) / hs);

				w->buf[j] = (float)(part ? sin(pos * freq) :
							   cos(pos * freq));
			}
			write_floats(w, w->buf, hs / 2);
		}
	}
}

static void write_i32(struct writer *w, int32_t v)
{
	write_items(w, &v, sizeof(v), 1);	/* little-endian hosts only */
}

static void write_layers(struct writer *w, const struct shape *s, bool ak42)
{
	uint64_t L = s->layers, d = s->dim, h = s->hidden;
	uint64_t kvd = (uint64_t)s->kv_heads * (s->dim / s->heads);

	if (ak42) {
		write_tensor(w, T_RMS_ATT, L * d, 1.0, 0.1 / sqrt(3.0));
		write_tensor(w, T_RMS_FFN, L * d, 1.0, 0.1 / sqrt(3.0));
		write_tensor(w, T_RMS_FINAL, d, 1.0, 0.1 / sqrt(3.0));
		write_tensor(w, T_EMBED, s->vocab * d, 0, LOGIT_STD / sqrt(d));
	} else {
		write_tensor(w, T_EMBED, s->vocab * d, 0, LOGIT_STD / sqrt(d));
		write_tensor(w, T_RMS_ATT, L * d, 1.0, 0.1 / sqrt(3.0));
	}
	write_tensor(w, T_WQ, L * d * d, 0, w->qk_gain / sqrt(d));
	write_tensor(w, T_WK, L * kvd * d, 0, w->qk_gain / sqrt(d));
	write_tensor(w, T_WV, L * kvd * d, 0, 1 / sqrt(d));
	write_tensor(w, T_WO, L * d * d, 0, 1 / sqrt(d));
	if (!ak42)
		write_tensor(w, T_RMS_FFN, L * d, 1.0, 0.1 / sqrt(3.0));
	write_tensor(w, T_W1, L * h * d, 0, 1 / sqrt(d));
	write_tensor(w, T_W2, L * d * h, 0, w->ffn_gain / sqrt(h));
	write_tensor(w, T_W3, L * h * d, 0, 1 / sqrt(d));
	if (!ak42) {
		write_tensor(w, T_RMS_FINAL, d, 1.0, 0.1 / sqrt(3.0));
		write_rope(w, s);
	}
}

/* ak42v2 after the header: fp32 norms, then the Q8_0 tensors. */
static void write_layers_q8(struct writer *w, const struct shape *s,
			    bool separate)
{
	uint64_t L = s->layers, d = s->dim, h = s->hidden;
	uint64_t kvd = (uint64_t)s->kv_heads * (s->dim / s->heads);

	write_tensor(w, T_RMS_ATT, L * d, 1.0, 0.1 / sqrt(3.0));
	write_tensor(w, T_RMS_FFN, L * d, 1.0, 0.1 / sqrt(3.0));
	write_tensor(w, T_RMS_FINAL, d, 1.0, 0.1 / sqrt(3.0));
	write_q8_tensor(w, T_EMBED, 1, s->vocab, d, 0, LOGIT_STD / sqrt(d));
	write_q8_tensor(w, T_WQ, L, d, d, 0, w->qk_gain / sqrt(d));
	write_q8_tensor(w, T_WK, L, kvd, d, 0, w->qk_gain / sqrt(d));
	write_q8_tensor(w, T_WV, L, kvd, d, 0, 1 / sqrt(d));
	write_q8_tensor(w, T_WO, L, d, d, 0, 1 / sqrt(d));
	write_q8_tensor(w, T_W1, L, h, d, 0, 1 / sqrt(d));
	write_q8_tensor(w, T_W2, L, d, h, 0, w->ffn_gain / sqrt(h));
	write_q8_tensor(w, T_W3, L, h, d, 0, 1 / sqrt(d));
	if (separate)
		write_q8_tensor(w, T_WCLS, 1, s->vocab, d, 0,
				LOGIT_STD / sqrt(d));
}

static void write_checkpoint(struct writer *w, const struct shape *s,
			     bool separate, enum format fmt)
{
	int32_t vocab = (int32_t)s->vocab;
	bool ak42 = fmt != F_LEGACY;

	if (ak42) {
		/* 9 int32 (10 with the group size) and the shared byte */
		unsigned char pad[LLAMA_AK42_HEADER_BYTES - 9 * 4] = { 0 };
		size_t n_pad = sizeof(pad);

		write_i32(w, (int32_t)LLAMA_AK42_MAGIC);
		write_i32(w, fmt == F_AK42V2 ? 2 : 1);
		write_i32(w, (int32_t)s->dim);
		write_i32(w, (int32_t)s->hidden);
		write_i32(w, (int32_t)s->layers);
		write_i32(w, (int32_t)s->heads);
		write_i32(w, (int32_t)s->kv_heads);
		write_i32(w, vocab);
		write_i32(w, (int32_t)s->seq_len);
		pad[0] = separate ? 0 : 1;	/* shared_classifier */
		if (fmt == F_AK42V2) {
			write_items(w, pad, 1, 1);
			write_i32(w, (int32_t)w->group);
			n_pad -= 4;
			pad[0] = 0;
			write_items(w, pad, 1, n_pad - 1);
		} else {
			write_items(w, pad, 1, n_pad);
		}
	} else {
		write_i32(w, (int32_t)s->dim);
		write_i32(w, (int32_t)s->hidden);
		write_i32(w, (int32_t)s->layers);
		write_i32(w, (int32_t)s->heads);
		write_i32(w, (int32_t)s->kv_heads);
		write_i32(w, separate ? -vocab : vocab);
		write_i32(w, (int32_t)s->seq_len);
	}
	if (fmt == F_AK42V2) {
		write_layers_q8(w, s, separate);
		return;
	}
	write_layers(w, s, ak42);
	if (separate)
		write_tensor(w, T_WCLS, (uint64_t)s->vocab * s->dim, 0,
			     LOGIT_STD / sqrt(s->dim));
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "out", required_argument, NULL, 'o' },
		SHAPE_OPTIONS,
		{ "separate-classifier", no_argument, NULL, 'c' },
		{ "format", required_argument, NULL, 'f' },
		{ "seed", required_argument, NULL, 'r' },
		{ "group-size", required_argument, NULL, 'g' },
		{ "plain-scales", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'H' },
		{ NULL, 0, NULL, 0 },
	};
	struct shape s = { 0 };
	static struct writer w;
	bool separate = false, group_given = false;
	enum format fmt = F_LEGACY;
	const char *out = NULL;
	int c;

	w.seed = 1;
	w.qk_gain = QK_GAIN;
	w.ffn_gain = FFN_GAIN;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'o': out = optarg; break;
		case 'c': separate = true; break;
		case 'p': w.qk_gain = w.ffn_gain = 1; break;
		case 'f':
			if (strcmp(optarg, "ak42") == 0) {
				fmt = F_AK42;
			} else if (strcmp(optarg, "ak42v2") == 0) {
				fmt = F_AK42V2;
			} else if (strcmp(optarg, "legacy") == 0) {
				fmt = F_LEGACY;
			} else {
				fprintf(stderr, "make_checkpoint: unknown --format '%s' (legacy, ak42 or ak42v2)\n",
					optarg);
				return 2;
			}
			break;
		case 'r':
			if (parse_u64(optarg, 0, UINT64_MAX, &w.seed)) {
				fprintf(stderr, "make_checkpoint: bad --seed '%s'\n", optarg);
				return 2;
			}
			break;
		case 'g':
			if (parse_u32(optarg, 1, BLOCK_FLOATS, &w.group)) {
				fprintf(stderr, "make_checkpoint: bad --group-size '%s' (1 to %d)\n",
					optarg, BLOCK_FLOATS);
				return 2;
			}
			group_given = true;
			break;
		case 'H': usage(stdout); return 0;
		default:
			switch (shape_option(&s, c, optarg, "make_checkpoint")) {
			case 1: break;
			case 0: usage(stderr); return 2;
			default: return 2;
			}
		}
	}
	if (optind < argc || !out) {
		fprintf(stderr, "make_checkpoint: %s\n",
			!out ? "--out FILE is required" : "unexpected argument");
		usage(stderr);
		return 2;
	}
	if (shape_check(&s, "make_checkpoint"))
		return 2;
	if (group_given && fmt != F_AK42V2) {
		fprintf(stderr, "make_checkpoint: --group-size is for --format ak42v2 only\n");
		return 2;
	}
	if (!group_given) {	/* export.py's back-off: see the file comment */
		w.group = DEFAULT_GROUP;
		while (s.dim % w.group || s.hidden % w.group)
			w.group /= 2;
	} else if (s.dim % w.group || s.hidden % w.group) {
		fprintf(stderr, "make_checkpoint: --group-size %u must divide --dim %u and --hidden %u\n",
			w.group, s.dim, s.hidden);
		return 2;
	}
	w.path = out;
	w.f = fopen(out, "wb");
	if (!w.f) {
		fprintf(stderr, "make_checkpoint: cannot create '%s': %s\n", out,
			strerror(errno));
		return 1;
	}
	write_checkpoint(&w, &s, separate, fmt);
	if (fclose(w.f) != 0 && !w.failed) {
		fprintf(stderr, "make_checkpoint: closing '%s' failed: %s\n", out,
			strerror(errno));
		w.failed = true;
	}
	if (w.failed) {
		unlink(out);
		return 1;
	}
	printf("make_checkpoint: wrote %s (%s, dim %u hidden %u layers %u heads %u kv_heads %u vocab %u seq_len %u, %s classifier) seed=%llu\n",
	       out, fmt == F_AK42V2 ? "ak42 v2, Q8_0" : fmt == F_AK42 ? "ak42 v1" : "legacy", s.dim, s.hidden, s.layers,
	       s.heads, s.kv_heads, s.vocab, s.seq_len,
	       separate ? "separate" : "shared", (unsigned long long)w.seed);
	return 0;
}
