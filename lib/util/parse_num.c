/*
 * parse_num.c - see parse_num.h.
 */
#include "util/parse_num.h"

#include <errno.h>
#include <string.h>

int parse_u64_n(const char *s, size_t len, uint64_t min, uint64_t max,
		uint64_t *out)
{
	uint64_t v = 0;

	if (!s || len == 0)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		unsigned d = (unsigned)(s[i] - '0');

		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		if (v > (UINT64_MAX - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
	}
	if (v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	return s ? parse_u64_n(s, strlen(s), min, max, out) : -EINVAL;
}

int parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
	uint64_t v;
	int ret = parse_u64(s, min, max, &v);

	if (!ret)
		*out = (uint32_t)v;
	return ret;
}

int parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	static const char units[] = "KMGT";
	size_t len = s ? strlen(s) : 0;
	unsigned shift = 0;
	uint64_t v;
	const char *u;

	if (len > 1 && (u = strchr(units, s[len - 1] & ~0x20)) && *u) {
		shift = 10 * (unsigned)(u - units + 1);
		len--;
	}
	if (!s || parse_u64_n(s, len, 0, UINT64_MAX >> shift, &v))
		return -EINVAL;
	v <<= shift;
	if (v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}
