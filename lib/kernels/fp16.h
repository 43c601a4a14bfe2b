/*
 * fp16.h - the 16-bit float formats of weights, in portable C: IEEE
 * binary16 ("half", ggml's scales and F16 tensors) and bfloat16 to fp32,
 * exactly, and fp32 to either rounded to nearest, ties to even (the
 * quantizers' scales, a GGUF writer's F16/BF16 tensors).
 *
 * Every half is an fp32 exactly (11 significant bits, exponents within
 * fp32's), so fp16_to_fp32() is a re-encoding of bits, not arithmetic:
 * subnormal halves become normal fp32s, infinities stay infinite, and a
 * nan keeps its sign and payload with the quiet bit set (as x86's
 * F16C vcvtph2ps and ggml's portable conversion give).
 * Header-only: the kernels call it per block in their inner loops.
 */
#ifndef DYNBATCH_FP16_H
#define DYNBATCH_FP16_H

#include <stdint.h>
#include <string.h>

static inline float fp16_bits_as_float(uint32_t bits)
{
	float f;

	memcpy(&f, &bits, sizeof(f));
	return f;
}

/* The half h (its bits) as an fp32, exactly. */
static inline float fp16_to_fp32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	uint32_t e32 = 113;	/* fp32's biased exponent of 2^-14 */

	if (exp == 0x1f)	/* inf, or nan made quiet */
		return fp16_bits_as_float(sign | 0x7f800000 | (man << 13) |
					  (man ? 0x400000 : 0));
	if (exp)		/* rebias 15 -> 127 */
		return fp16_bits_as_float(sign | ((exp + 112) << 23) |
					  (man << 13));
	if (!man)
		return fp16_bits_as_float(sign);
	/* subnormal man * 2^-24: shift the top bit up to the implicit one */
	while (!(man & 0x400)) {
		man <<= 1;
		e32--;
	}
	return fp16_bits_as_float(sign | (e32 << 23) | ((man & 0x3ff) << 13));
}

/* The bfloat16 b as an fp32: its 16 bits are the fp32's top half. */
static inline float bf16_to_fp32(uint16_t b)
{
	return fp16_bits_as_float((uint32_t)b << 16);
}

/*
 * f rounded to the nearest half, ties to even: overflow gives an
 * infinity of f's sign, a nan a quiet nan with its sign and the top of
 * its payload, and values under half the smallest subnormal zero.
 */
static inline uint16_t fp32_to_fp16(float f)
{
	uint32_t x, abs, sign;

	memcpy(&x, &f, sizeof(x));
	sign = (x >> 16) & 0x8000;
	abs = x & 0x7fffffff;
	if (abs > 0x7f800000)
		return (uint16_t)(sign | 0x7e00 | ((abs >> 13) & 0x3ff));
	if (abs >= 0x477ff000)	/* 65520 and up round to inf */
		return (uint16_t)(sign | 0x7c00);
	if (abs >= 0x38800000) {	/* a normal half: 2^-14 and up */
		/* add just under half an ulp, plus one for an odd lsb: RNE */
		abs += 0xfff + ((abs >> 13) & 1);
		return (uint16_t)(sign | ((abs - 0x38000000) >> 13));
	}
	if (abs < 0x33000000)	/* at most 2^-25: zero (2^-25 ties to it) */
		return (uint16_t)sign;
	{
		/* subnormal: round(mant * 2^(e - 150) * 2^24), e <= 112 */
		uint32_t e = abs >> 23, mant = (abs & 0x7fffff) | 0x800000;
		uint32_t shift = 126 - e, q = mant >> shift;
		uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);

		if (rem > half || (rem == half && (q & 1)))
			q++;	/* may carry into the smallest normal: right */
		return (uint16_t)(sign | q);
	}
}

/* f rounded to the nearest bfloat16, ties to even; a nan stays a quiet
 * nan of its sign (an infinity stays one; overflow rounds to one). */
static inline uint16_t fp32_to_bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, sizeof(x));
	if ((x & 0x7fffffff) > 0x7f800000)
		return (uint16_t)(x >> 16 | 0x40);
	return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

/* The little-endian half at p (any alignment), as an fp32. */
static inline float fp16_load(const uint8_t *p)
{
	return fp16_to_fp32((uint16_t)(p[0] | p[1] << 8));
}

/* f as a little-endian half at p (any alignment). */
static inline void fp16_store(uint8_t *p, float f)
{
	uint16_t h = fp32_to_fp16(f);

	p[0] = (uint8_t)h;
	p[1] = (uint8_t)(h >> 8);
}

#endif /* DYNBATCH_FP16_H */
