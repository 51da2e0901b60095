"""``python -m bench.crc_micro``: the compiled CRC-32's speed by path and payload length, in this process.

Each path this CPU runs (``_crc_paths()`` of ``_native``: the slicing-by-8 table, the 128-bit PCLMULQDQ fold,
the 256- and 512-bit VPCLMULQDQ folds of ``_crc32.h``) checksums one payload of each length, paths alternating
round by round, in a loop in C (``_crc32(data, repeat)``: what the decoder pays per message, no Python call);
the figure is the median over ``--rounds`` of the best of three timeit runs, with the process's CPU clock (a
shared machine distorts it less). ``copy`` is ``bytes(bytearray)`` of the same length less the same call on an
empty one (a Python call each): the memory speed the CRC is held against (docs/performance/breakdown.md).

``--decode``: the compiled decode of one fetch answer (``bench.wire_micro``'s answers, 100 B and 1 KiB bodies)
with each path's CRC check and with none, alternating in this process: what each path costs per row where it
runs, between the rest of a message's decoding.

    PYTHONPATH=. python -m bench.crc_micro [--sizes 64,100,256,1024,4096,65536] [--rounds 5] [--decode]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import timeit
from collections.abc import Callable
from typing import Any

from tubespark.tubemq.wire import twin


def _ns(fn: Callable[[], object], number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=3, timer=time.process_time)) / number * 1e9


def measure(sizes: list[int], rounds: int) -> dict[str, dict[int, float]]:
    """Nanoseconds per checksum of each path (and per copy, its empty call subtracted) at each size."""
    native = twin.loaded()
    if native is None:
        raise SystemExit(f"no compiled module: {twin.HOT_PATH}")
    paths = list(native._crc_paths())
    chosen = native._crc_path()
    data = {n: memoryview(bytearray(os.urandom(n))) for n in sizes}
    held = {n: bytearray(data[n]) for n in sizes}
    runs: dict[str, dict[int, list[float]]] = {p: {n: [] for n in sizes} for p in [*paths, "copy"]}
    empty = bytearray()
    try:
        for r in range(rounds):
            for path in paths if r % 2 == 0 else paths[::-1]:
                native._crc_path(path)
                for n in sizes:
                    repeat = max(1, 2_000_000 // (n + 64))
                    ns = _ns(lambda n=n, repeat=repeat: native._crc32(data[n], repeat), 20) / repeat
                    runs[path][n].append(ns)
            base = _ns(lambda: bytes(empty), 200_000)
            for n in sizes:
                number = max(1000, 20_000_000 // (n + 200))
                runs["copy"][n].append(_ns(lambda n=n: bytes(held[n]), number) - base)
    finally:
        native._crc_path(chosen)
    return {p: {n: statistics.median(v) for n, v in by.items()} for p, by in runs.items()}


def _decode(native: Any, data: bytes, verify: bool) -> None:
    """The compiled walk of one answer into columns: ``read_fetch`` (one walk), or in a build from before it
    ``scan_fetch`` + ``decode_fetch`` (two)."""
    if hasattr(native, "read_fetch"):
        native.read_fetch(data, 28, verify, 0)
    else:
        native.decode_fetch(data, 0, 28, verify, native.scan_fetch(data)[-1])


def measure_decode(rounds: int) -> dict[str, dict[int, float]]:
    """Microseconds per row of the compiled decode by CRC path (``none``: verify off), medians over rounds."""
    from bench.wire_micro import FETCHES, _fetch_frame
    from tubespark.core.framed_io import BytesReader
    from tubespark.tubemq.wire.envelope import decode_response
    from tubespark.tubemq.wire.frame import read_frame

    native = twin.loaded()
    assert native is not None
    paths, chosen = [*native._crc_paths(), "none"], native._crc_path()
    runs: dict[str, dict[int, list[float]]] = {p: {n: [] for n in FETCHES} for p in paths}
    answers = {size: decode_response(read_frame(BytesReader(_fetch_frame(size, count)))[1])[1]
               for size, count in FETCHES.items()}
    try:
        for r in range(rounds):
            for path in paths if r % 2 == 0 else paths[::-1]:
                native._crc_path(chosen if path == "none" else path)
                for size, data in answers.items():
                    def decode(data: bytes = data, verify: bool = path != "none") -> None:
                        _decode(native, data, verify)

                    runs[path][size].append(_ns(decode, 50) / FETCHES[size] / 1000)
    finally:
        native._crc_path(chosen)
    return {p: {n: statistics.median(v) for n, v in by.items()} for p, by in runs.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.crc_micro", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="64,100,256,1024,4096,65536", help="payload lengths in bytes")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, the paths alternating")
    parser.add_argument("--decode", action="store_true", help="also decode_fetch per row with each path's check")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    result = measure(sizes, args.rounds)
    native = twin.loaded()
    chosen = native._crc_path() if native is not None else "-"
    print(f"CPU ns per checksum (GB/s), a loop in C; copy: a Python call less an empty one; chosen: {chosen}")
    print(f"{'path':>11} " + " ".join(f"{n:>16}" for n in sizes))
    for path, by in result.items():
        cells = [f"{ns:7.1f} ({n / ns if ns > 0 else float('inf'):5.1f})" for n, ns in by.items()]
        print(f"{path:>11} " + " ".join(f"{c:>16}" for c in cells))
    if args.decode:
        print("CPU us per row of the compiled decode, CRC checked by each path (none: not checked)")
        for path, by in measure_decode(args.rounds).items():
            print(f"{path:>11} " + " ".join(f"{size:5} B {us:.4f}" for size, us in by.items()))


if __name__ == "__main__":
    main()
