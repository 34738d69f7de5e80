#!/usr/bin/env python3
# Is there a cheaper shift-and-mask decode of E2M1 nibbles into mma's f16 fragments (matmul_mxt.cuh)?
# A decoded half needs the nibble's sign at bit 15 and its 3 magnitude bits at 11..9 (value x 2^-14), so an
# f16x2 register takes its 8 bits from the bit set S below. If some arrangement of the nibbles in a word let
# each output register be one shift (or rotate / funnel shift) of the word and one AND, the translates of S
# by those shifts would tile the word. This searches every set of translates of S for a tiling of a 32-bit
# word (4 registers) and of a 64-bit pair (8 registers, funnel shifts): there is none, so the decode keeps
# its 5 logic ops + 4 byte permutes per word (a re-ordered layout saves one op a word at most).
import itertools

S = [9, 10, 11, 15, 25, 26, 27, 31]


def tiles(n, k):
    def rec(used, ds):
        if len(ds) == k:
            return ds
        first = min(b for b in range(n) if b not in used)
        for s in S:  # the translate that covers the lowest free bit with bit s of S
            d = (s - first) % n
            pos = {(b - d) % n for b in S}
            if not pos & used:
                r = rec(used | pos, ds + [d])
                if r:
                    return r
        return None
    return rec(frozenset(), [])


print("32-bit word, 4 registers:", tiles(32, 4))
print("64-bit pair, 8 registers:", tiles(64, 8))


# The same question for the bytes before the byte permutes (matmul_dec.cuh Mx::decode): lo / hi need, in every
# byte, one nibble's sign at bit 7 and magnitude at bits 3..1. Today's bytes (nibble A low, B high) cost 7 logic
# ops a word: lo = ((q << 1) & 0x0E0E0E0E) | ((q << 4) & 0x80808080), hi = ((q >> 3) & 0x0E0E0E0E) | (q & 0x80808080).
# A byte re-ordered as [A.s B.s B.e1 B.e0 A.e1 A.e0 A.m B.m] (bits 7..0; the mxfp4 tiles are ferry's own layout)
# costs 5: lo = q & 0x8E8E8E8E, hi = ((q << 1) & 0x82828282) | ((q >> 2) & 0x0C0C0C0C). Checked here for every
# byte value in every byte of a word.
def reorder(byte):
    a, b = byte & 0xF, byte >> 4  # nibble s|e1 e0|m: s bit 3, e1 bit 2, e0 bit 1, m bit 0
    bit = lambda n, i: (n >> i) & 1
    return (bit(a, 3) << 7 | bit(b, 3) << 6 | bit(b, 2) << 5 | bit(b, 1) << 4 |
            bit(a, 2) << 3 | bit(a, 1) << 2 | bit(a, 0) << 1 | bit(b, 0))


def old_lo_hi(q):
    m = 0xFFFFFFFF
    return (((q << 1) & 0x0E0E0E0E) | ((q << 4) & 0x80808080)) & m, ((q >> 3) & 0x0E0E0E0E) | (q & 0x80808080)


def new_lo_hi(q):
    m = 0xFFFFFFFF
    return q & 0x8E8E8E8E, (((q << 1) & 0x82828282) | ((q >> 2) & 0x0C0C0C0C)) & m


ok = True
for pos in range(4):
    for fill in (0x00, 0xFF, 0x5A):
        for v in range(256):
            q = int.from_bytes(bytes(v if i == pos else fill for i in range(4)), "little")
            r = int.from_bytes(bytes(reorder(b) for b in q.to_bytes(4, "little")), "little")
            ok &= old_lo_hi(q) == new_lo_hi(r)
print("re-ordered bytes give today's lo / hi with 5 ops instead of 7:", ok)
