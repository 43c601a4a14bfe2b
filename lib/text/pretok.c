/*
 * pretok.c - the hand-written pre-tokenizer scanners of pretok.h.
 *
 * Each alternative of a pattern is a function that returns the end of
 * its match at pos, or pos when it does not match; pretok_next() tries
 * them in the pattern's order, as a regex engine does.  Every code point
 * falls under one of the last alternatives (letters, numbers, the
 * "other" run, white space), so some alternative always matches.
 */
#include "text/pretok.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "text/unicode.h"

/* The unit at text[pos]: its class, code point and byte length. */
struct unit {
	enum unicode_class cls;
	uint32_t cp;
	size_t n;
};

static struct unit unit_at(const char *text, size_t len, size_t pos)
{
	struct unit u;

	u.cp = unicode_decode(text + pos, len - pos, &u.n);
	u.cls = unicode_class_of(u.cp);
	return u;
}

static bool is_crlf(uint32_t cp)
{
	return cp == '\r' || cp == '\n';
}

/* The end of the run of units of class cls from pos, at most max units. */
static size_t run_of(const char *text, size_t len, size_t pos,
		     enum unicode_class cls, size_t max)
{
	size_t k = 0;

	while (pos < len && k < max) {
		struct unit u = unit_at(text, len, pos);

		if (u.cls != cls)
			break;
		pos += u.n;
		k++;
	}
	return pos;
}

/* 's 't 're 've 'm 'll 'd at pos; fold: ASCII case-insensitive. */
static size_t contraction(const char *text, size_t len, size_t pos, bool fold)
{
	static const char *const tails[] = { "s", "t", "re", "ve", "m", "ll", "d" };
	size_t i, k;

	if (text[pos] != '\'')
		return pos;
	for (i = 0; i < sizeof(tails) / sizeof(tails[0]); i++) {
		size_t tl = strlen(tails[i]);

		if (len - pos - 1 < tl)
			continue;
		for (k = 0; k < tl; k++) {
			char c = text[pos + 1 + k];

			if (fold && c >= 'A' && c <= 'Z')
				c = (char)(c - 'A' + 'a');
			if (c != tails[i][k])
				break;
		}
		if (k == tl)
			return pos + 1 + tl;
	}
	return pos;
}

/* [^\r\n\p{L}\p{N}]?\p{L}+ */
static size_t llama3_letters(const char *text, size_t len, size_t pos)
{
	struct unit u = unit_at(text, len, pos);
	size_t q = pos;

	if (u.cls != UNICODE_LETTER) {
		if (u.cls == UNICODE_NUMBER || is_crlf(u.cp) || pos + u.n >= len)
			return pos;
		q = pos + u.n;
		if (unit_at(text, len, q).cls != UNICODE_LETTER)
			return pos;
	}
	return run_of(text, len, q, UNICODE_LETTER, (size_t)-1);
}

/* ' '?[^\s\p{L}\p{N}]+, then [\r\n]* when crlf_tail (Llama 3, Qwen 2). */
static size_t other_run(const char *text, size_t len, size_t pos,
			bool crlf_tail)
{
	size_t q = pos, end;

	if (text[q] == ' ')
		q++;
	if (q >= len)
		return pos;
	end = run_of(text, len, q, UNICODE_OTHER, (size_t)-1);
	if (end == q)
		return pos;
	if (crlf_tail)
		while (end < len && is_crlf((unsigned char)text[end]))
			end++;
	return end;
}

/*
 * The white-space alternatives at pos (a space unit): with crlf,
 * \s*[\r\n]+ first (up to the run's last CR or LF), then \s+(?!\S)
 * (the run less its last unit when text follows it) and \s+; with
 * digit_cut a number after the run counts as the end of the text.
 */
static size_t space_run(const char *text, size_t len, size_t pos, bool crlf,
			bool digit_cut)
{
	size_t end = pos, last_unit = pos, after_crlf = pos;

	while (end < len) {
		struct unit u = unit_at(text, len, end);

		if (u.cls != UNICODE_SPACE)
			break;
		last_unit = end;
		end += u.n;
		if (is_crlf(u.cp))
			after_crlf = end;
	}
	if (crlf && after_crlf > pos)
		return after_crlf;
	if (end == len || last_unit == pos ||
	    (digit_cut && unit_at(text, len, end).cls == UNICODE_NUMBER))
		return end;
	return last_unit;
}

static size_t llama3_next(const char *text, size_t len, size_t pos,
			  size_t max_digits)
{
	struct unit u = unit_at(text, len, pos);
	size_t end;

	if ((end = contraction(text, len, pos, true)) > pos)
		return end;
	if ((end = llama3_letters(text, len, pos)) > pos)
		return end;
	if (u.cls == UNICODE_NUMBER)
		return run_of(text, len, pos, UNICODE_NUMBER, max_digits);
	if ((end = other_run(text, len, pos, true)) > pos)
		return end;
	return space_run(text, len, pos, true, false);
}

/*
 * GPT-2's pattern; with digit_cut (SmolLM, StarCoder) every digit is cut
 * out first as a piece of its own and the pattern runs on what lies
 * between, so a number ends the text for the space rules.
 */
static size_t gpt2_next(const char *text, size_t len, size_t pos,
			bool digit_cut)
{
	size_t end, q = pos;
	struct unit u = unit_at(text, len, pos);

	if (digit_cut && u.cls == UNICODE_NUMBER)
		return pos + u.n;
	if ((end = contraction(text, len, pos, false)) > pos)
		return end;
	if (text[pos] == ' ' && pos + 1 < len)
		q = pos + 1;
	u = unit_at(text, len, q);
	if (u.cls == UNICODE_LETTER || (u.cls == UNICODE_NUMBER && !digit_cut))
		return run_of(text, len, q, u.cls, (size_t)-1);
	if ((end = other_run(text, len, pos, false)) > pos)
		return end;
	return space_run(text, len, pos, false, digit_cut);
}

size_t pretok_next(enum pretok_kind kind, const char *text, size_t len,
		   size_t pos)
{
	switch (kind) {
	case PRETOK_LLAMA3:
		return llama3_next(text, len, pos, 3);
	case PRETOK_QWEN2:
		return llama3_next(text, len, pos, 1);
	case PRETOK_GPT2:
		return gpt2_next(text, len, pos, false);
	case PRETOK_SMOLLM:
		return gpt2_next(text, len, pos, true);
	}
	return len;
}

int pretok_from_name(const char *name, enum pretok_kind *out)
{
	static const struct {
		const char *name;
		enum pretok_kind kind;
	} names[] = {
		{ "llama-bpe", PRETOK_LLAMA3 },
		{ "llama3", PRETOK_LLAMA3 },
		{ "qwen2", PRETOK_QWEN2 },
		{ "gpt2", PRETOK_GPT2 },
		{ "smollm", PRETOK_SMOLLM },
		{ "starcoder", PRETOK_SMOLLM },
	};
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(name, names[i].name) == 0) {
			*out = names[i].kind;
			return 0;
		}
	return -EINVAL;
}
