/*
 * ngram.c - prompt-lookup proposals and the pacing of a row's guesses;
 * see spec.h.
 *
 * The lookup scans backwards from the end for the latest earlier
 * occurrence of the row's suffix: recent text is the likeliest to
 * repeat (a model rewriting a given passage, or one caught in a loop),
 * and the scan stops at the first hit, so a row that repeats itself
 * pays a few comparisons.  A row with no repetition pays the whole
 * scan, n * ngram_max comparisons at worst, which at 2,048 tokens is
 * some microseconds: far below one model step.
 */
#include "spec/spec.h"

#include <string.h>

/* Latest i < n - g with tokens[i .. i + g) == tokens[n - g .. n), or -1. */
static int64_t ngram_latest(const int32_t *tokens, uint32_t n, uint32_t g)
{
	const int32_t *suf = tokens + n - g;

	for (int64_t i = (int64_t)n - g - 1; i >= 0; i--) {
		if (tokens[i] == suf[0] &&
		    !memcmp(tokens + i, suf, (size_t)g * sizeof(*tokens)))
			return i;
	}
	return -1;
}

uint32_t spec_ngram_propose(const int32_t *tokens, uint32_t n,
			    uint32_t ngram_min, uint32_t ngram_max,
			    uint32_t max_out, int32_t *out)
{
	if (ngram_min == 0)
		ngram_min = 1;
	for (uint32_t g = ngram_max; g >= ngram_min && g > 0; g--) {
		int64_t at;
		uint32_t from, k;

		if (g >= n)	/* the suffix needs an earlier place */
			continue;
		at = ngram_latest(tokens, n, g);
		if (at < 0)
			continue;
		from = (uint32_t)at + g;	/* < n: the match ends before */
		/* what followed it, and past the end as if the text went on
		 * repeating with the match's period (an overlapping copy, as
		 * LZ77's): a run of one token guesses more of the run */
		k = max_out;
		for (uint32_t j = 0; j < k; j++)
			out[j] = from + j < n ? tokens[from + j] : out[from + j - n];
		return k;
	}
	return 0;
}

/* Steps a row rests after its guesses fell to nothing: 2, then twice as
 * long each time nothing was taken in between, up to 64, so text with no
 * repetition soon costs almost nothing while a row that repeats itself
 * (a run that just ended) is back at once. */
static uint32_t pace_rest_steps(uint32_t misses)
{
	uint32_t s = 2u << (misses < 5 ? misses : 5);

	return s > 64 ? 64 : s;
}

uint32_t spec_pace_allow(struct spec_pace *p, uint32_t max_draft)
{
	if (!p->primed) {
		*p = (struct spec_pace){ .k = (uint8_t)max_draft, .primed = 1 };
		return max_draft;
	}
	if (p->rest) {
		p->rest--;
		if (!p->rest)
			p->k = 1;	/* try again, carefully */
		return 0;
	}
	return p->k;
}

void spec_pace_update(struct spec_pace *p, uint32_t max_draft,
		      uint32_t drafted, uint32_t accepted)
{
	if (!drafted)
		return;
	if (accepted >= drafted) {
		uint32_t k = p->k ? 2u * p->k : 1u;

		p->k = (uint8_t)(k > max_draft ? max_draft : k);
		p->misses = 0;
		return;
	}
	p->k = (uint8_t)accepted;
	if (accepted) {
		p->misses = 0;	/* some were right: the text repeats */
		return;
	}
	p->rest = (uint8_t)pace_rest_steps(p->misses);
	if (p->misses < 255)
		p->misses++;
}
