/*
 * bytelevel.c - GPT-2's byte-to-unicode map (bytelevel.h), computed
 * from its definition on each call: 256 entries, cheap enough for the
 * vocabulary build, which is the only caller that loops over it.
 */
#include "text/bytelevel.h"

static int stands_for_itself(unsigned b)
{
	return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
	       (b >= 0xAE && b <= 0xFF);
}

uint32_t bytelevel_cp(unsigned char b)
{
	unsigned n = 0;

	if (stands_for_itself(b))
		return b;
	for (unsigned i = 0; i < b; i++)
		if (!stands_for_itself(i))
			n++;
	return 0x100 + n;
}

int bytelevel_byte(uint32_t cp)
{
	unsigned n = 0;

	if (cp < 0x100)
		return stands_for_itself(cp) ? (int)cp : -1;
	for (unsigned b = 0; b < 256; b++)
		if (!stands_for_itself(b) && 0x100 + n++ == cp)
			return (int)b;
	return -1;
}
