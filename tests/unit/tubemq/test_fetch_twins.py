"""The two twins of the fetch decoder (tubespark/tubemq/wire/fetch.py) give the same rows and the same errors.

Every input goes through both: the compiled one (``_native.c``, falling back to Python where it is not
sure) and the pure-Python one (what ``TUBESPARK_NO_EXTENSIONS=1``, by-value shipping and ``--py-files``
run). Compared: the answer's header fields, every row (id, value, attributes, msgType, msgTime, offset),
the Arrow batch the executor hands to Spark, or the error's type and text. Inputs: fetches captured from a
real TubeMQ 2.4.0 broker (``captured/``, made by ``scripts/capture_fetches.py``), fetches built here
for every shape and every error case, and the fuzz corpus of ``tests/unit/core/test_fuzz_decoders.py``
(the same seeds and mutations) for whole answers and for message lists.

The compiled twin must also take the fast lane where it should: valid input may not quietly fall back.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import struct
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.core.test_fuzz_decoders import FUZZ, INNER_MESSAGE_SEEDS, PAYLOAD_SEEDS, byte_inputs, survives
from tubespark.core.native import COMPILED, PURE_PYTHON, extensions_disabled
from tubespark.errors import ChecksumMismatchError, MessageFormatError, TubeSparkError
from tubespark.tubemq.errors import ProtobufDecodeError
from tubespark.tubemq.spark.schema import arrow_schema, fetches_record_batch, to_record_batch
from tubespark.tubemq.wire import fetch, twin
from tubespark.tubemq.wire.message import OutgoingMessage, checksum
from tubespark.tubemq.wire.pb import broker_service_pb2 as bpb

CAPTURED = Path(__file__).parent / "captured"
NATIVE = twin.loaded()

# ------------------------------------------------------------------------------------------- the twins


def _pure(data: bytes, start: int | None, step: int, verify: bool) -> tuple:
    with twin.pure_python():
        return _compiled(data, start, step, verify)


def _compiled(data: bytes, start: int | None, step: int, verify: bool) -> tuple:
    """As the read does it: the answer parsed when it arrives, its columns asked for later (``start`` None: from
    the answer's currOffset, with the ``step`` and ``verify`` it was parsed with, which the compiled twin
    decodes in the walk that checks the answer; any other start walks it again)."""
    reply = fetch.parse_fetch_reply(data, verify=verify, step=step)
    return _header(reply), reply.columns(reply.currOffset if start is None else start, verify=verify, step=step)


def _header(reply: fetch.FetchReply) -> tuple:
    return reply.success, reply.errCode, reply.errMsg, reply.currOffset, reply.maxOffset


def _rows(columns: fetch.Columns) -> list[tuple]:
    unpacked = columns.unpacked if isinstance(columns, fetch.PackedColumns) else columns
    return [(m.message_id, m.data, m.attributes, m.msg_type, m.msg_time, m.offset) for m in unpacked.messages()]


def _outcome(decode: Callable[[bytes, int | None, int, bool], tuple], data: bytes, start: int | None, step: int,
             verify: bool) -> tuple:
    """What a reader sees: header and rows and both Arrow batches (with and without attributes), or the error."""
    try:
        header, columns = decode(data, start, step, verify)
    except TubeSparkError as exc:
        return "error", type(exc), str(exc)
    batches = [to_record_batch(columns, topic="t", partition_key="1:t:0", broker_id=1, partition_id=0,
                               schema=arrow_schema(attributes)) for attributes in (False, True)]
    return "rows", header, _rows(columns), len(columns), [b.to_pylist() for b in batches]


def assert_same(data: bytes, start: int | None = None, step: int = 28, verify: bool = True) -> tuple:
    pure = _outcome(_pure, data, start, step, verify)
    compiled = _outcome(_compiled, data, start, step, verify)
    assert compiled == pure
    return pure


# --------------------------------------------------------------------------------------------- inputs


def answer(*messages: bpb.TransferedMessage, **fields: object) -> bytes:
    fields = {"success": True, "errCode": 200, "errMsg": "OK", "currOffset": 280, "maxOffset": 2800, **fields}
    return bpb.GetMessageResponseB2C(messages=list(messages), **fields).SerializeToString()


def message(mid: int, body: bytes = b"body", *, msg_type: str | None = None, msg_time: str | None = None,
            **attrs: str) -> bpb.TransferedMessage:
    payload, flag = OutgoingMessage(body, msg_type=msg_type, msg_time=msg_time, attributes=attrs).encode()
    return raw(mid, payload, flag)


def raw(mid: int, payload: bytes, flag: int, crc: int | None = None) -> bpb.TransferedMessage:
    return bpb.TransferedMessage(messageId=mid, checkSum=checksum(payload) if crc is None else crc, flag=flag,
                                 payLoadData=payload)


def _prefixed(attr_len: int, rest: bytes) -> bytes:
    return struct.pack(">i", attr_len) + rest


SHAPES = {
    "empty": answer(),
    "plain": answer(*(raw(k, b"v%d" % k, 0) for k in range(5))),
    "one producer": answer(*(message(k, os.urandom(100), msg_type="s", msg_time="202401021530") for k in range(50))),
    "several texts": answer(*(message(k, b"x" * k, msg_type=f"s{k % 3}", msg_time=f"2024010215{k % 5:02d}", k="v")
                              for k in range(40))),
    "user attributes": answer(message(1, b"a", k="v", z="\u00e9\U0001f600"), message(2, b"b", k="v2")),
    "mixed prefix": answer(message(1, b"with", msg_type="s"), raw(2, b"without", 0), message(3, b"", k="v")),
    "empty bodies": answer(raw(1, b"", 0), message(2, b"", msg_type="s")),
    "1 KiB": answer(*(message(k, os.urandom(1024), msg_type="s") for k in range(20))),
    "64 KiB": answer(message(1, os.urandom(65536), msg_type="s")),
    "every length to 300": answer(*(raw(n, os.urandom(n), 0) for n in range(301))),  # the CRC's folding edges
    "bad msgTime": answer(raw(1, _prefixed(22, b"$msgTime$=202413011530a"), 1),
                          raw(2, _prefixed(17, b"$msgTime$=2024010"), 1)),
    "items without =": answer(raw(1, _prefixed(9, b"a,=b,,c=,") + b"body", 1)),
    "empty text": answer(raw(1, _prefixed(0, b"body"), 1)),
    "flag bits besides 1": answer(raw(1, b"plain", 2), raw(2, _prefixed(3, b"a=bbody"), 3), raw(3, b"x", -2)),
    "negative and huge ids": answer(raw(-1, b"a", 0), raw(2**63 - 1, b"b", 0), raw(-(2**63), b"c", 0)),
    "unknown fields": answer(raw(1, b"a", 0)) + b"\xa0\x06\x05\xaa\x06\x02hi\xad\x06abcd\xa9\x06" + b"8" * 8,
    "fields repeated": answer(raw(1, b"a", 0)) + bpb.GetMessageResponseB2C(
        success=False, errCode=200, currOffset=5).SerializeToString(),
    "header only after messages": answer(raw(1, b"a", 0), success=True, errCode=200, errMsg="",
                                          currOffset=0, maxOffset=0),
    "business error": answer(success=False, errCode=404, errMsg="no data"),
    "negative offsets": answer(raw(1, b"a", 0), currOffset=-1, maxOffset=-(2**63)),
}

ERRORS = {  # every way a fetch fails, with the error the reader must get from either twin
    "checksum": (answer(raw(1, b"a", 0), raw(2, b"b", 0, crc=5)), ChecksumMismatchError),
    "checksum, negative": (answer(raw(1, b"a", 0, crc=-5)), ChecksumMismatchError),
    "checksum after a bad prefix": (answer(raw(1, b"ab", 1), raw(2, b"b", 0, crc=5)), MessageFormatError),
    "bad prefix after a checksum": (answer(raw(1, b"b", 0, crc=5), raw(2, b"ab", 1)), ChecksumMismatchError),
    "prefix shorter than 4": (answer(raw(1, b"abc", 1)), MessageFormatError),
    "negative attribute length": (answer(raw(1, _prefixed(-1, b"abc"), 1)), MessageFormatError),
    "attribute length past the payload": (answer(raw(1, _prefixed(4, b"abc"), 1)), MessageFormatError),
    "attribute length 2 GiB": (answer(raw(1, _prefixed(2**31 - 1, b"abc"), 1)), MessageFormatError),
    "attributes not UTF-8": (answer(message(1, b"a", k="v"), raw(2, _prefixed(2, b"\xff\xfe"), 1)), MessageFormatError),
    "message without checkSum": (answer() + b"\x22\x06\x08\x01\x1a\x00\x20\x00", ProtobufDecodeError),
    "answer without errCode": (bpb.GetMessageResponseB2C(success=True).SerializePartialToString(), ProtobufDecodeError),
    "errMsg not UTF-8": (answer() + b"\x1a\x02\xff\xfe", ProtobufDecodeError),
    "truncated": (bpb.GetMessageResponseB2C(success=True, errCode=200, messages=[message(1, b"abcdef", msg_type="s")])
                  .SerializeToString()[:-3], ProtobufDecodeError),
    "a group": (answer(raw(1, b"a", 0)) + b"\xa3\x06\xa4\x06", None),  # protobuf may skip a group: same either way
    "field number 0": (answer() + b"\x00\x01", ProtobufDecodeError),
    "garbage": (b"\xff" * 16, ProtobufDecodeError),
}


def captured() -> Iterator[bytes]:
    for path in sorted(CAPTURED.glob("*.bin")):
        yield path.read_bytes()


# ---------------------------------------------------------------------------------------------- tests


def test_this_process_runs_the_path_it_was_asked_for() -> None:
    """aiokafka's check: with the switch off, the compiled twin is not even loaded; CI (tests/conftest.py)
    also refuses a compiled run without the module."""
    if extensions_disabled():
        assert NATIVE is None and twin.HOT_PATH.startswith(PURE_PYTHON)
        assert isinstance(_compiled(SHAPES["one producer"], 0, 28, True)[1], fetch.MessageColumns)
    else:
        assert twin.HOT_PATH.startswith(COMPILED if NATIVE is not None else PURE_PYTHON)


def test_captured_fetches_exist() -> None:
    assert len(list(captured())) >= 3, f"no captured fetches in {CAPTURED}"


@pytest.mark.parametrize("verify", [True, False])
@pytest.mark.parametrize("start", [None, 1_000_000 * 28])
def test_captured_fetches_decode_alike(verify: bool, start: int | None) -> None:
    rows = 0
    for data in captured():
        outcome = assert_same(data, start=start, verify=verify)
        assert outcome[0] == "rows"
        rows += outcome[3]
    assert rows > 100


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize(("start", "step"), [(None, 28), (None, 0), (0, 28), (28 * 10**12, 28), (5, 0)])
def test_every_shape_decodes_alike(name: str, start: int | None, step: int) -> None:
    assert assert_same(SHAPES[name], start, step)[0] == "rows"


@pytest.mark.parametrize("name", sorted(ERRORS))
@pytest.mark.parametrize("start", [None, 0])
def test_every_error_is_the_same_typed_error(name: str, start: int | None) -> None:
    data, expected = ERRORS[name]
    outcome = assert_same(data, start)
    if expected is not None:
        assert outcome[0] == "error" and outcome[1] is expected, outcome


def test_without_verification_a_bad_checksum_is_rows() -> None:
    data, _ = ERRORS["checksum"]
    assert assert_same(data, verify=False)[0] == "rows"


def test_the_compiled_twin_takes_the_fast_lane_on_valid_input() -> None:
    """No silent fallback: every captured fetch and every shape is decoded by the compiled code itself
    (only run where the module is loaded: the pure-Python run has nothing to check here)."""
    if NATIVE is None:
        assert twin.HOT_PATH.startswith(PURE_PYTHON)
        return
    for data in [*captured(), *SHAPES.values()]:
        reply = fetch.parse_fetch_reply(data)
        with twin.pure_python():  # the columns come from the walk made when the answer arrived: no second one
            assert isinstance(reply.columns(reply.currOffset, step=28), fetch.PackedColumns)
        assert isinstance(fetch.FetchReply(True, 200, "", 0, 0, data=data).columns(0, step=28), fetch.PackedColumns)


def test_packed_columns_behave_like_message_columns() -> None:
    """head / without_ids / where / messages, what the range reader and dedupe use, agree between the twins."""
    data = SHAPES["several texts"]
    compiled, pure = _compiled(data, 0, 28, True)[1], _pure(data, 0, 28, True)[1]
    assert _rows(compiled.head(7)) == _rows(pure.head(7)) and len(compiled.head(7)) == 7
    assert _rows(compiled.head(0)) == [] and len(compiled.head(100)) == len(pure)
    assert _rows(compiled.without_ids({1, 5, 39})) == _rows(pure.without_ids({1, 5, 39}))
    keep = [k % 3 == 0 for k in range(len(pure))]
    assert _rows(compiled.where(keep)) == _rows(pure.where(keep))
    assert compiled.message_ids == pure.message_ids and compiled.attributes == pure.attributes


# ---------------------------------------------------------------------------------------- fuzz corpus

TWINS_FUZZ = settings(FUZZ, deadline=timedelta(milliseconds=500))
"""FUZZ's inputs and example count; each example runs both twins (and four Arrow batches, and the memory
tracing of ``survives``), so its deadline is five times the 100 ms one decoder gets."""



@TWINS_FUZZ
@given(byte_inputs([*INNER_MESSAGE_SEEDS[:1], SHAPES["several texts"], SHAPES["mixed prefix"],
                    SHAPES["unknown fields"], *(d for d, _ in ERRORS.values())]),
       st.booleans())
def test_fuzz_answers_decode_alike(data: bytes, verify: bool) -> None:
    survives(lambda: _compiled(data, None, 28, verify), len(data))
    assert_same(data, verify=verify)
    assert_same(data, 0, verify=verify)


@TWINS_FUZZ
@given(st.lists(st.tuples(byte_inputs(PAYLOAD_SEEDS), st.sampled_from((0, 1, 3, -1)), st.booleans()), max_size=5))
def test_fuzz_message_lists_decode_alike(messages: list[tuple[bytes, int, bool]]) -> None:
    assert_same(answer(*(raw(k, p, flag, None if good else 7) for k, (p, flag, good) in enumerate(messages))))


def test_a_walk_without_the_check_still_checks_when_asked() -> None:
    """The answer is walked once, with the checksum check the read will ask for; columns asked with another check
    get it all the same (a second walk), in both twins."""
    data, _ = ERRORS["checksum"]
    for twins in (contextlib.nullcontext, twin.pure_python):
        with twins():
            unchecked = fetch.parse_fetch_reply(data, verify=False)
            assert [m[1] for m in _rows(unchecked.columns(280, step=28, verify=False))] == [b"a", b"b"]
            with pytest.raises(ChecksumMismatchError, match="message 2: checksum 5"):
                unchecked.columns(280, step=28, verify=True)
            checked = fetch.parse_fetch_reply(data, verify=True)
            assert [m[1] for m in _rows(checked.columns(280, step=28, verify=False))] == [b"a", b"b"]


MANY = 5000  # messages of a few bytes: more than the compiled walk's first guess of the rows an answer holds


@pytest.mark.parametrize("late", ["no checkSum", "truncated", "bad checksum", "bad prefix"])
def test_a_broken_message_late_in_an_answer_fails_where_it_always_did(late: str) -> None:
    """Garbage fails the parse, when the answer arrives (before anything of it, or of the batch before it, reaches
    Spark); a bad checksum or attribute prefix fails the columns, in both twins, however many good messages the
    one walk decoded before it (buffers grown and then thrown away)."""
    good = [raw(k, b"v%d" % k, 0) for k in range(MANY)]
    broken = {"no checkSum": answer(*good) + b"\x22\x06\x08\x01\x1a\x00\x20\x00",
              "truncated": bpb.GetMessageResponseB2C(success=True, errCode=200, messages=[
                  *good, message(MANY, b"abcdef", msg_type="s")]).SerializeToString()[:-3],
              "bad checksum": answer(*good, raw(MANY, b"b", 0, crc=5)),
              "bad prefix": answer(*good, raw(MANY, b"abc", 1))}[late]
    for twins in (contextlib.nullcontext, twin.pure_python):
        with twins():
            if late in ("no checkSum", "truncated"):
                with pytest.raises(ProtobufDecodeError):
                    fetch.parse_fetch_reply(broken)
                continue
            reply = fetch.parse_fetch_reply(broken)
            assert reply.errCode == 200
            with pytest.raises(ChecksumMismatchError if late == "bad checksum" else MessageFormatError,
                               match=f"message {MANY}:"):
                reply.columns(reply.currOffset, step=28)
    assert assert_same(broken)[0] == "error"


def test_more_rows_than_the_first_guess_decode_alike() -> None:
    """The compiled walk does not count the messages first: its row buffers grow as it goes."""
    data = answer(*(raw(k, b"", 0) for k in range(MANY)), *(message(MANY + k, b"x", k="v") for k in range(MANY)))
    outcome = assert_same(data)
    assert outcome[0] == "rows" and outcome[3] == 2 * MANY


# ------------------------------------------------------------------- arguments of the wrong kind (issue 24)


def _either(call: Callable[[], object]) -> tuple[object, object]:
    """``call()``'s rows or its error (any exception), with the compiled twin and with the pure one."""
    def outcome() -> object:
        try:
            result = call()
        except Exception as exc:  # noqa: BLE001 - what is compared is which one, and its text
            return "error", type(exc), str(exc)
        return "ok", _rows(result) if isinstance(result, fetch.MessageColumns | fetch.PackedColumns) else result

    compiled = outcome()
    with twin.pure_python():
        pure = outcome()
    return compiled, pure


@pytest.mark.parametrize("value", [None, "x", 1.5, True, 2**70], ids=["None", "str", "float", "True", "2**70"])
def test_a_start_or_step_of_any_kind_gives_one_answer(value: object) -> None:
    """The compiled decoder took a bool or None as an int through ``PyArg_ParseTuple``; it now decodes only a
    plain int's offsets and leaves the rest to the pure twin."""
    data = SHAPES["several texts"]
    for start, step in ((value, 28), (0, value)):
        def columns(start: object = start, step: object = step) -> fetch.Columns:
            return fetch.parse_fetch_reply(data).columns(start, step=step)  # type: ignore[arg-type]

        compiled, pure = _either(columns)
        assert compiled == pure


@pytest.mark.parametrize("value", [None, "x", 5, bytearray(SHAPES["one producer"]), memoryview(SHAPES["one producer"])],
                         ids=["None", "str", "int", "bytearray", "memoryview"])
def test_a_fetch_answer_of_any_kind_gives_one_answer(value: object) -> None:
    def header() -> tuple:
        return _header(fetch.parse_fetch_reply(value))  # type: ignore[arg-type]

    compiled, pure = _either(header)
    assert compiled == pure


def test_one_value_columns_kept_across_fetches_fit_every_fetch() -> None:
    """The Arrow batch's one-value columns are slices of arrays kept from fetch to fetch (issue 24): fetches
    of growing and shrinking size, of other topics and other msgTimes, each get exactly their own values."""
    sizes = [3, 5000, 2, 9000, 4096, 1]
    for k, n in enumerate(sizes):
        data = answer(*(message(i, b"v%d" % i, msg_type=f"s{k % 2}", msg_time=f"2024010215{k:02d}") for i in range(n)))
        expected = _outcome(_pure, data, 28 * k, 28, True)
        got = _outcome(_compiled, data, 28 * k, 28, True)
        assert got == expected
        rows = got[4][0]
        assert {(r["topic"], r["streamId"]) for r in rows} == {("t", f"s{k % 2}")} and len(rows) == n


# ------------------------------------------------------------------ one values buffer for several answers


def _read(data: bytes, arena: fetch.ValueArena | None, verify: bool = True) -> tuple[tuple, fetch.Columns | None]:
    """What a read task's reader sees of one answer: header and rows, or the error; and the columns."""
    try:
        reply = fetch.parse_fetch_reply(data, verify=verify, arena=arena)
        columns = reply.columns(reply.currOffset, verify=verify, step=28)
    except TubeSparkError as exc:
        return ("error", type(exc), str(exc)), None
    return ("rows", _header(reply), _rows(columns)), columns


def _pure_read(data: bytes, verify: bool = True) -> tuple:
    with twin.pure_python():
        return _read(data, None, verify)[0]


def _batch(parts: list[fetch.Columns]) -> list[dict]:
    return fetches_record_batch(parts, topic="t", partition_key="1:t:0", broker_id=1, partition_id=0,
                                schema=arrow_schema(True)).to_pylist()


GOOD = [SHAPES[name] for name in ("one producer", "several texts", "mixed prefix", "empty bodies", "1 KiB", "plain",
                                  "empty", "user attributes", "every length to 300")]


def test_answers_walked_into_one_arena_read_alike_and_make_one_batch() -> None:
    """A read task's answers put their values one after the other in its arena: each reads as the pure-Python
    twin reads it, and together they make the batch the answers make one by one, whose values buffer is the
    arena's (no copy)."""
    arena = fetch.ValueArena(1 << 20)
    parts = []
    for data in [*GOOD, *captured()]:
        outcome, columns = _read(data, arena)
        assert outcome == _pure_read(data)
        assert columns is not None
        parts.append(columns)
    expected = [row for part in parts for row in _batch([part])]
    assert _batch(parts) == expected and len(expected) > 500
    if NATIVE is not None:
        assert all(isinstance(p, fetch.PackedColumns) for p in parts)
        assert all(b.follows(a) for a, b in itertools.pairwise(parts))  # type: ignore[union-attr]
        batch = fetches_record_batch(parts, topic="t", partition_key="1:t:0", broker_id=1, partition_id=0,
                                     schema=arrow_schema(False))
        assert batch.column(0).buffers()[2].address == pa.py_buffer(parts[0].value_buffer).address  # type: ignore[union-attr]


@TWINS_FUZZ
@given(st.lists(byte_inputs([SHAPES["several texts"], SHAPES["mixed prefix"], SHAPES["1 KiB"],
                             *(d for d, _ in ERRORS.values())]), min_size=1, max_size=4),
       st.booleans())
def test_fuzz_answers_into_one_arena_read_alike(answers: list[bytes], verify: bool) -> None:
    """Fuzzed answers one after the other into one small arena (its buffer changes within a list): each reads as
    the pure-Python twin reads it, and no later answer, good or failing, changes the rows of an earlier one."""
    arena = fetch.ValueArena(4096)
    kept = []
    for data in answers:
        outcome, columns = _read(data, arena, verify)
        assert outcome == _pure_read(data, verify)
        if columns is not None:
            kept.append((columns, outcome[2]))
    assert [_rows(columns) for columns, _ in kept] == [rows for _, rows in kept]


@pytest.mark.parametrize("late", ["no checkSum", "truncated", "bad checksum", "bad prefix"])
def test_an_answer_that_fails_leaves_the_arena_as_it_was(late: str) -> None:
    """A walk that gives up half-way (a broken message after 5,000 good ones) keeps nothing of what it wrote: the
    rows before it read the same, the error is the one it always was, where it always was, and the next answer's
    values follow the last good one's as if the broken answer had never come."""
    good = [raw(k, b"v%d" % k, 0) for k in range(MANY)]
    broken = {"no checkSum": answer(*good) + b"\x22\x06\x08\x01\x1a\x00\x20\x00",
              "truncated": bpb.GetMessageResponseB2C(success=True, errCode=200, messages=[
                  *good, message(MANY, b"abcdef", msg_type="s")]).SerializeToString()[:-3],
              "bad checksum": answer(*good, raw(MANY, b"b", 0, crc=5)),
              "bad prefix": answer(*good, raw(MANY, b"abc", 1))}[late]
    arena = fetch.ValueArena(1 << 20)
    before = [_read(data, arena)[1] for data in GOOD[:3]]
    rows = [_rows(c) for c in before if c is not None]
    if late in ("no checkSum", "truncated"):
        with pytest.raises(ProtobufDecodeError):
            fetch.parse_fetch_reply(broken, arena=arena)
    else:
        outcome, _ = _read(broken, arena)
        assert outcome == _pure_read(broken) and outcome[0] == "error" and f"message {MANY}:" in outcome[2]
    _, after = _read(GOOD[3], arena)
    assert [_rows(c) for c in before if c is not None] == rows
    assert after is not None and _rows(after) == _pure_read(GOOD[3])[2]
    if NATIVE is not None:
        assert after.follows(before[-1])  # type: ignore[union-attr,arg-type]


def test_an_arena_moves_on_when_full_and_never_writes_what_is_held(monkeypatch: pytest.MonkeyPatch) -> None:
    """Answers that do not fit the arena's buffer go to a new one; a buffer that a batch or columns still hold is
    never written again, one that nothing holds is written again (its pages are warm): a few buffers serve any
    number of answers."""
    if NATIVE is None:
        return  # the pure-Python twin has no arena: its rows are lists
    made: list[int] = []
    new_buffer = NATIVE.new_buffer
    monkeypatch.setattr(NATIVE, "new_buffer", lambda size: made.append(size) or new_buffer(size))
    arena = fetch.ValueArena(3 * len(SHAPES["1 KiB"]))  # three answers a buffer
    first = [_read(SHAPES["1 KiB"], arena)[1] for _ in range(2)]
    held = fetches_record_batch(first, topic="t", partition_key="1:t:0", broker_id=1, partition_id=0,  # type: ignore[arg-type]
                                schema=arrow_schema(False))
    expected = held.to_pylist()
    del first
    for k in range(60):
        data = answer(*(message(i, os.urandom(1024), msg_type="s") for i in range(20)), currOffset=28 * k)
        outcome, columns = _read(data, arena)
        assert outcome == _pure_read(data)
        kept = columns  # the last answer's columns stay held while the next is walked, as a read task's do
    assert held.to_pylist() == expected  # the held buffer was not written again
    assert kept is not None and _rows(kept) == _pure_read(data)[2]
    assert 3 <= len(made) <= 5  # the held one and then a few, reused: not one every three answers (20)
