/*
 * bytelevel.h - GPT-2's byte-to-unicode map, the alphabet of byte-level
 * BPE vocabularies: each of the 256 bytes is one printable code point.
 *
 * Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves (as
 * code points U+0021.., U+00A1.., U+00AE..); the other 68 bytes, in
 * increasing order, take U+0100, U+0101, ... (so a space, 0x20, is
 * U+0120 'Ġ' and a newline U+010A 'Ċ').
 */
#ifndef DYNBATCH_BYTELEVEL_H
#define DYNBATCH_BYTELEVEL_H

#include <stdint.h>

/* The code point that stands for byte b. */
uint32_t bytelevel_cp(unsigned char b);

/* The byte code point cp stands for, or -1 when it stands for none. */
int bytelevel_byte(uint32_t cp);

#endif /* DYNBATCH_BYTELEVEL_H */
