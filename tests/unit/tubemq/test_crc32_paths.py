"""Every CRC-32 path of the compiled twin gives zlib's checksum, and each catches a wrong one in a fetch.

``_native.c`` checks each fetched message's checksum with the fastest path this CPU runs, chosen at import
(``_crc32.h``): 512- or 256-bit VPCLMULQDQ folding, the 128-bit PCLMULQDQ fold, or the slicing-by-8 table.
Only one of them runs in production, so each is forced here in turn (the private ``_crc_path``) and held
against ``zlib.crc32`` over every alignment 0..63 and lengths 0..70,000 (the fold's edges: 16-, 64- and
256-byte blocks and 1..15-byte tails), then through the public decode: the compiled decoder takes valid
messages itself (a wrong CRC there would otherwise only send every fetch quietly to the pure-Python
fallback) and a corrupted body is still a ``ChecksumMismatchError``. A path this CPU lacks is skipped
(the machine this was written on has them all). No compiled module (the twin run): nothing to test here.
"""

from __future__ import annotations

import importlib.util
import os
import random
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tubespark.errors import ChecksumMismatchError
from tubespark.tubemq.wire import fetch, twin
from tubespark.tubemq.wire.pb import broker_service_pb2 as bpb
from tubespark.tubemq.wire.send import SendRequest

NATIVE = twin.loaded()
PATHS = ("table", "clmul", "vpclmul256", "vpclmul512")
ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(NATIVE is None, reason=f"no compiled twin: {twin.HOT_PATH}")


@pytest.fixture(params=PATHS)
def path(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each CRC path in turn (the one chosen at import is restored after)."""
    assert NATIVE is not None
    if request.param not in NATIVE._crc_paths():
        pytest.skip(f"this CPU does not run {request.param}")
    chosen = NATIVE._crc_path(request.param)
    try:
        yield request.param
    finally:
        NATIVE._crc_path(chosen)


# Around every block size of the folds (16, 32, 64, 128, 256 bytes), each tail length, and long payloads.
EDGES = sorted({*range(530), *(k + d for k in (1024, 4096, 65536) for d in range(-17, 18)), 69_999, 70_000})


def test_every_length_and_alignment_is_zlibs_checksum(path: str) -> None:
    assert NATIVE is not None
    rng = random.Random(f"crc32 {path}")
    data = memoryview(bytearray(rng.randbytes(70_000 + 64)))
    # every alignment of the payload's start (a bytearray starts 16-byte aligned at least) with every short
    # length, then the edges and random lengths at random alignments
    cases = [(a, n) for a in range(64) for n in range(300)]
    cases += [(rng.randrange(64), n) for n in EDGES] + [(rng.randrange(64), rng.randrange(70_001)) for _ in range(300)]
    wrong = [(a, n) for a, n in cases if NATIVE._crc32(data[a:a + n]) != zlib.crc32(data[a:a + n])]
    assert wrong == [], f"{path}: {len(wrong)} of {len(cases)} (alignment, length) cases differ, e.g. {wrong[:5]}"


def test_the_checksum_of_a_send_is_zlibs_masked(path: str) -> None:
    """The producer side too: ``build_requests`` computes each SendRequest's checksum with the same function."""
    assert NATIVE is not None
    payloads = [os.urandom(n) for n in (0, 1, 15, 16, 63, 64, 100, 255, 256, 1024, 4097, 70_000)]
    built = NATIVE.build_requests(SendRequest, "client", "topic", 1, payloads, [0] * len(payloads), None, None, None)
    assert [r.checksum for r in built] == [zlib.crc32(p) & 0x7FFFFFFF for p in payloads]


def _answer(payloads: list[bytes], checksums: list[int]) -> bytes:
    messages = [bpb.TransferedMessage(messageId=k, checkSum=crc, flag=0, payLoadData=p)
                for k, (p, crc) in enumerate(zip(payloads, checksums, strict=True))]
    return bpb.GetMessageResponseB2C(success=True, errCode=200, errMsg="OK", currOffset=0, maxOffset=28 * len(messages),
                                     messages=messages).SerializeToString()


SIZES = (1, 15, 16, 17, 64, 100, 255, 1024, 4099, 70_000)


def _columns(data: bytes) -> fetch.Columns:
    """The read's public decode of one answer, CRC checked (compiled, else the pure-Python fallback)."""
    return fetch.parse_fetch_reply(data).columns(0, step=28, verify=True)


def test_the_compiled_decoder_takes_valid_checksums_itself(path: str) -> None:
    """Packed columns are the compiled decoder's own answer: a path that rejected a valid checksum would send
    the answer to the pure-Python fallback, which gives the same rows, only slower."""
    payloads = [os.urandom(n) for n in SIZES]
    columns = _columns(_answer(payloads, [zlib.crc32(p) & 0x7FFFFFFF for p in payloads]))
    assert isinstance(columns, fetch.PackedColumns), f"{path} sent valid checksums to the fallback"
    assert [m.data for m in columns.messages()] == payloads


@pytest.mark.parametrize("size", SIZES)
def test_a_corrupted_body_is_a_checksum_mismatch(path: str, size: int) -> None:
    """One bit flipped at the start, the middle or the end of a body (the fold's first block, its wide
    registers, its tail): the compiled decoder refuses the answer (it never raises: the pure-Python fallback
    does), and the reader gets the typed error."""
    for at in {0, size // 2, size - 1}:
        good = os.urandom(size)
        bad = bytearray(good)
        bad[at] ^= 0x10
        data = _answer([b"ok", bytes(bad)], [zlib.crc32(b"ok") & 0x7FFFFFFF, zlib.crc32(good) & 0x7FFFFFFF])
        with pytest.raises(ChecksumMismatchError):
            _columns(data)


def test_the_fastest_path_is_chosen_and_a_bad_name_is_refused() -> None:
    assert NATIVE is not None
    runs = NATIVE._crc_paths()
    assert runs[0] == "table" and set(runs) <= set(PATHS) and list(runs) == [p for p in PATHS if p in runs]
    assert NATIVE._crc_path() == runs[-1]
    with pytest.raises(ValueError, match="not a CRC path this CPU runs"):
        NATIVE._crc_path("crc64")
    assert NATIVE._crc_path() == runs[-1]


def test_the_header_holds_the_derived_constants() -> None:
    """The fold constants of _crc32.h are what scripts/crc32_fold_constants.py derives from the polynomial."""
    spec = importlib.util.spec_from_file_location("crc32_fold_constants", ROOT / "scripts" / "crc32_fold_constants.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    header = (ROOT / "tubespark" / "tubemq" / "wire" / "_crc32.h").read_text()
    found = {name: (int(lo, 16), int(hi, 16))
             for name, hi, lo in re.findall(r"#define (K_\w+) 0x([0-9a-f]+)ULL, 0x([0-9a-f]+)ULL", header)}
    assert found == script.constants()
