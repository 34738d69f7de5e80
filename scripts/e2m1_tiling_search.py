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
