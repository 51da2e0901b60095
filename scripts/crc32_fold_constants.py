"""Derive the carry-less folding constants of ``tubespark/tubemq/wire/_crc32.h`` and check them.

CRC-32 (IEEE 802.3, zlib's ``crc32``, TubeMQ's checksum) is the remainder of the message polynomial times x^32
modulo P = 0x104C11DB7, computed bit-reflected: a byte's bit 0 is its highest-degree coefficient, and the
reflected polynomial is 0xEDB88320. Folding (Intel, "Fast CRC Computation for Generic Polynomials Using
PCLMULQDQ", 2009) keeps a 128-bit accumulator X whose value modulo P equals the CRC state; to move X forward
over D bits of data it multiplies X's two 64-bit halves by x^(D+32) mod P and x^(D-32) mod P (the low half,
which holds the earlier, higher-degree bits, by the first), each a 33-bit value stored bit-reflected and
shifted left by one (the product of two reflected 64-bit values comes out one bit low). Widening the fold to
256- or 512-bit registers changes only D: the distance from a lane to the data it lands on.

So every constant is ``fold_constant(D)`` below, computed here from P alone, and this script checks them the
only way that matters: it runs the header's exact algorithm (the same loads, folds, lane reduction,
partial-block shuffle and Barrett reduction) on Python integers and compares with ``zlib.crc32``.

    python3 scripts/crc32_fold_constants.py        # prints the C constants, then checks them

``tests/unit/tubemq/test_crc32_paths.py`` asserts that the header holds exactly the constants printed here.
"""

from __future__ import annotations

import os
import zlib

P = 0x104C11DB7  # x^32 + x^26 + ... + 1, normal (unreflected) form, degree 32
MASK64 = (1 << 64) - 1


def xpow_mod(n: int) -> int:
    """x^n mod P, normal form (bit k is the coefficient of x^k)."""
    r = 1
    for _ in range(n):
        r <<= 1
        if r >> 32:
            r ^= P
    return r


def reflect(value: int, bits: int) -> int:
    return int(f"{value:0{bits}b}"[::-1], 2)


def fold_constant(exponent: int) -> int:
    """x^exponent mod P as the 33-bit reflected, shifted-left-by-one value PCLMULQDQ multiplies by."""
    return reflect(xpow_mod(exponent), 32) << 1


def fold_pair(distance_bits: int) -> tuple[int, int]:
    """(low-half constant, high-half constant) of a fold over ``distance_bits``."""
    return fold_constant(distance_bits + 32), fold_constant(distance_bits - 32)


def barrett() -> tuple[int, int]:
    """(mu, P) for the final 64 -> 32 bit reduction: floor(x^64 / P) and P, both 33-bit reflected."""
    q, r = 0, 1 << 64  # polynomial long division of x^64 by P
    while r.bit_length() >= 33:
        shift = r.bit_length() - 33
        q |= 1 << shift
        r ^= P << shift
    return reflect(q, 33), reflect(P, 33)


# The fold distances the header uses, in bits: its name -> distance.
DISTANCES = {
    "K_FOLD_16B": 128,    # one 128-bit lane onto the next 16 bytes (also the 128 -> 64 bit step's x^96)
    "K_FOLD_32B": 256,    # one 256-bit register onto the next 32 bytes; lane 0 of a 512-bit onto lane 2
    "K_FOLD_48B": 384,    # lane 0 of a 512-bit register onto lane 3
    "K_FOLD_64B": 512,    # a 512-bit register onto the next 64 bytes (the 4 x 128 fold of the old path too)
    "K_FOLD_128B": 1024,  # each of four 256-bit registers onto the data 128 bytes on
    "K_FOLD_256B": 2048,  # each of four 512-bit registers onto the data 256 bytes on
}


def constants() -> dict[str, tuple[int, int]]:
    out = {name: fold_pair(d) for name, d in DISTANCES.items()}
    out["K_X64"] = (fold_constant(64), 0)  # 64 -> 32 bit step: x^64
    out["K_BARRETT"] = barrett()
    return out


# ------------------------------------------------------------------ the header's algorithm, on integers


def clmul(a: int, b: int) -> int:
    r = 0
    while b:
        if b & 1:
            r ^= a
        a <<= 1
        b >>= 1
    return r


def fold16(x: int, k: tuple[int, int]) -> int:
    """A 128-bit lane times its fold pair: lo * k[0] xor hi * k[1] (PCLMULQDQ selectors 0x00 and 0x11)."""
    return clmul(x & MASK64, k[0]) ^ clmul(x >> 64, k[1])


def load(data: bytes, at: int) -> int:
    return int.from_bytes(data[at:at + 16], "little")


def crc32_fold(data: bytes, crc: int, lanes: int, k: dict[str, tuple[int, int]]) -> int:
    """The register after ``data`` (len >= 16) from register ``crc``, folding ``lanes`` x 128 bits at a time
    (1: the 16-byte steps only; 2: 256-bit registers; 4: 512-bit registers), as _crc32.h does."""
    n = len(data)
    if lanes == 4 and n < 256:  # the 512-bit path leaves payloads under 256 bytes to the 256-bit one
        lanes = 2
    width = 16 * lanes
    if n >= width:
        big = k[{1: "K_FOLD_16B", 2: "K_FOLD_32B", 4: "K_FOLD_64B"}[lanes]]  # one register's width on
        four = k[{1: "K_FOLD_64B", 2: "K_FOLD_128B", 4: "K_FOLD_256B"}[lanes]]  # four registers' width on
        regs: list[list[int]]
        if lanes > 1 and n >= 4 * width:
            regs = [[load(data, r * width + 16 * j) for j in range(lanes)] for r in range(4)]
            regs[0][0] ^= crc
            at = 4 * width
            while n - at >= 4 * width:
                regs = [[fold16(regs[r][j], four) ^ load(data, at + r * width + 16 * j)
                         for j in range(lanes)] for r in range(4)]
                at += 4 * width
            reg = regs[0]
            for r in range(1, 4):
                reg = [fold16(reg[j], big) ^ regs[r][j] for j in range(lanes)]
        else:
            reg = [load(data, 16 * j) for j in range(lanes)]
            reg[0] ^= crc
            at = width
        while lanes > 1 and n - at >= width:
            reg = [fold16(reg[j], big) ^ load(data, at + 16 * j) for j in range(lanes)]
            at += width
        lane_k = {2: [k["K_FOLD_16B"]], 4: [k["K_FOLD_48B"], k["K_FOLD_32B"], k["K_FOLD_16B"]]}.get(lanes, [])
        x = reg[-1]
        for j, kj in enumerate(lane_k):
            x ^= fold16(reg[j], kj)
    else:
        x, at = load(data, 0) ^ crc, 16
    while n - at >= 16:
        x = fold16(x, k["K_FOLD_16B"]) ^ load(data, at)
        at += 16
    r = n - at
    if r:  # the last r bytes: X's first r bytes fold 16 bytes on, onto X's other bytes followed by the tail
        xb = x.to_bytes(16, "little")
        ahead = int.from_bytes(bytes(16 - r) + xb[:r], "little")
        x = fold16(ahead, k["K_FOLD_16B"]) ^ int.from_bytes(xb[r:] + data[n - r:], "little")
    # 128 -> 64 (x^96 times the low half onto the high half), 64 -> 32 (x^64), then Barrett
    x = (x >> 64) ^ clmul(x & MASK64, k["K_FOLD_16B"][1])
    x = (x >> 32) ^ clmul(x & 0xFFFFFFFF, k["K_X64"][0])
    mu, poly = k["K_BARRETT"]
    t = clmul(x & 0xFFFFFFFF, mu) & 0xFFFFFFFF
    x ^= clmul(t, poly)
    return (x >> 32) & 0xFFFFFFFF


def check(k: dict[str, tuple[int, int]]) -> int:
    rng = os.urandom
    cases = 0
    for lanes in (1, 2, 4):
        for n in [*range(16, 300), 511, 512, 513, 1024 + 7, 4096 + 15]:
            data = rng(n)
            got = crc32_fold(data, 0xFFFFFFFF, lanes, k) ^ 0xFFFFFFFF
            assert got == zlib.crc32(data), (lanes, n, hex(got), hex(zlib.crc32(data)))
            cases += 1
    return cases


def main() -> None:
    k = constants()
    # The old 128-bit path's constants, as Intel's paper lists them, come out of the same formula.
    assert k["K_FOLD_64B"] == (0x154442BD4, 0x1C6E41596) and k["K_FOLD_16B"] == (0x1751997D0, 0x0CCAA009E)
    assert k["K_X64"][0] == 0x163CD6124 and k["K_BARRETT"] == (0x1F7011641, 0x1DB710641)
    for name, (lo, hi) in k.items():
        print(f"#define {name} 0x{hi:09x}ULL, 0x{lo:09x}ULL /* high qword, low qword */")
    print(f"checked against zlib.crc32: {check(k)} lengths", flush=True)


if __name__ == "__main__":
    main()
