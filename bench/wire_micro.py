"""``python -m bench.wire_micro``: CPU per row of the TubeMQ wire hot paths in this process, both twins.

No broker, no Spark: a GetMessage answer of N messages (100 B and 1 KiB bodies with one producer's
attributes, as the bench topics hold) is framed, read back, decoded and turned into the Arrow batch the
executor hands to Spark, as ``read_range`` does; a SendMessage is encoded with its frame and its answer
decoded, as the producer does. Each step is timed alone with the compiled twin and with the pure-Python
one (``twin.pure_python()``), so the table says where a row's microseconds go and what the twin saves.

    PYTHONPATH=. python -m bench.wire_micro [--cpu] [--detail] [--json FILE]
    PYTHONPATH=. python -m bench.wire_micro --cpu --ab OLD.so,NEW.so [--rounds 5] [--paired]
    PYTHONPATH=. python -m bench.wire_micro --cpu --join 1,2,4,8 [--rounds 5] [--ab OLD.so,NEW.so --paired]
    PYTHONPATH=. python -m bench.wire_micro --cpu --blocks [--rounds 15] [--ab OLD.so,NEW.so]

``--cpu`` times with the process's CPU clock (``time.process_time``) instead of the wall clock, so other
jobs on a shared machine distort the figures less. ``--detail`` adds what bounds a change of the read path
(docs/performance/breakdown.md): the decode without the CRC check, and a plain copy of the whole frame
(``bytes(bytearray)``, the memory speed one copy of every body costs at best). ``--ab`` times the read's
steps with two builds of the compiled module (before and after a change of ``_native.c``), alternating
them round by round in this one process, and prints each build's medians; with ``--paired`` only the
compiled answer's walk into columns, CRC on (``read_fetch``; a build from before it, ``scan_fetch`` +
``decode_fetch``, the two walks it replaced), the two builds back to back in
each of ``--rounds`` short rounds, and the median of the per-round ratios: a busy machine moves both halves of
a round alike, so the ratio shows a change of a few percent that the medians of whole steps hide. ``--join``
times one Arrow batch of K consecutive fetches (what a read task hands Spark) built and handed over, per K;
with ``--ab OLD.so,NEW.so --paired`` the K answers' walks and their batch, paired as above (a build before
``new_buffer``, without the arena, joins its fetches' buffers with ``pa.concat_arrays``, as the read did).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import itertools
import json
import os
import statistics
import time
import timeit
import types
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from tubespark.core.framed_io import BytesReader
from tubespark.tubemq.client.common import check
from tubespark.tubemq.spark.read_task import ARENA_BYTES
from tubespark.tubemq.spark.schema import arrow_schema, fetches_record_batch, to_record_batch
from tubespark.tubemq.wire import twin
from tubespark.tubemq.wire.blocks import Blocks
from tubespark.tubemq.wire.constants import BEGIN_TOKEN, MAX_BLOCK_SIZE, MAX_BLOCKS_PER_FRAME
from tubespark.tubemq.wire.envelope import decode_response, decode_response_view, encode_response
from tubespark.tubemq.wire.fetch import PackedColumns, ValueArena, packed_columns, parse_fetch_reply
from tubespark.tubemq.wire.frame import encode_frame, read_frame, read_frames
from tubespark.tubemq.wire.message import OutgoingMessage, checksum
from tubespark.tubemq.wire.pb import broker_service_pb2 as bpb
from tubespark.tubemq.wire.send import SendRequest, parse_send_answer

FETCHES = {100: 2000, 1024: 500}  # messages per answer: about what a broker returns per fetch at each size


def _fetch_frame(size: int, count: int) -> bytes:
    body = os.urandom(size)
    messages = []
    for k in range(count):
        payload, flag = OutgoingMessage(body, msg_type="t", msg_time="202401021530").encode()
        messages.append(bpb.TransferedMessage(messageId=k, checkSum=checksum(payload), payLoadData=payload, flag=flag))
    answer = bpb.GetMessageResponseB2C(success=True, errCode=200, messages=messages, currOffset=0, maxOffset=28 * count)
    return encode_frame(1, encode_response(10, answer.SerializeToString()))


_CLOCK: dict[str, Callable[[], float]] = {"timer": time.perf_counter}  # --cpu: time.process_time


def _per_call_us(fn: Callable[[], object], min_s: float = 0.3) -> float:
    number, elapsed = 1, 0.0
    while elapsed < min_s:
        number *= 2
        elapsed = min(timeit.repeat(fn, number=number, repeat=3, timer=_CLOCK["timer"]))
    return elapsed / number * 1e6


def read_steps(size: int, count: int, detail: bool = False) -> dict[str, float]:
    """Microseconds per row of each step of the executor's read of one fetch, and their sum (``detail``: and,
    outside the sum, the answer's parse and columns without the CRC check, and one plain copy of the frame).

    ``parse_answer`` is what runs when the answer arrives (``parse_fetch_reply``: with the compiled twin the one
    walk that checks the answer and decodes its messages), ``decode_columns`` what the batch's ``columns`` adds
    on a fresh reply (the answer parsed and its columns taken, less the parse alone), as the read asks: from the
    answer's currOffset, step 28, CRC on."""
    frame = _fetch_frame(size, count)
    schema = arrow_schema(False)
    _, payload = read_frame(BytesReader(frame))
    _, data = decode_response(payload)
    reply = parse_fetch_reply(data)
    columns = reply.columns(0, step=28)
    steps = {
        "read_frame": lambda: read_frame(BytesReader(frame)),
        "envelope": lambda: decode_response(payload),
        "parse_answer": lambda: parse_fetch_reply(data),
        "decode_columns": lambda: parse_fetch_reply(data).columns(0, step=28),  # less parse_answer, below
        "arrow_batch": lambda: to_record_batch(columns, topic="t", partition_key="1:t:0", broker_id=1,
                                               partition_id=0, schema=schema),
    }
    out = {name: round(_per_call_us(fn) / count, 3) for name, fn in steps.items()}
    out["decode_columns"] = round(max(0.0, out["decode_columns"] - out["parse_answer"]), 3)
    out["total"] = round(sum(out.values()), 3)
    if detail:
        held = bytearray(frame)
        batch = to_record_batch(columns, topic="t", partition_key="1:t:0", broker_id=1, partition_id=0, schema=schema)
        out["answer_no_crc"] = round(_per_call_us(  # parse_answer + decode_columns with the CRC off
            lambda: parse_fetch_reply(data, verify=False).columns(0, step=28, verify=False)) / count, 3)
        out["copy_frame_once"] = round(_per_call_us(lambda: bytes(held)) / count, 3)
        from bench.client_read import SparkHandover  # Spark's hand-over as client_read models it

        with SparkHandover() as handover:
            out["spark_handover"] = round(_per_call_us(lambda: handover.write(batch)) / count, 3)
    return out


def join_steps(joins: list[int], rounds: int) -> dict[int, dict[int, dict[str, float]]]:
    """``--join``: per size and per K in ``joins``, CPU us per row of walking K answers and making them one Arrow
    batch as a read task does (:func:`_answers_to_batch`, this build), and of handing the batch over (Spark's
    hand-over as ``bench/client_read.py`` models it), medians of ``rounds`` rounds with the K alternating in each."""
    from bench.client_read import SparkHandover

    out: dict[int, dict[int, dict[str, float]]] = {}
    with SparkHandover() as handover:
        for size, count in FETCHES.items():
            frame = _fetch_frame(size, count)
            _, payload = read_frame(BytesReader(frame))
            data = decode_response(payload)[1]
            runs: dict[int, dict[str, list[float]]] = {k: {"walk_and_batch": [], "spark_handover": []} for k in joins}
            calls = {k: _answers_to_batch(twin.loaded(), data, k) for k in joins}
            for r in range(rounds):
                for k in joins if r % 2 == 0 else joins[::-1]:
                    batch = calls[k]()
                    rows = count * k
                    runs[k]["walk_and_batch"].append(_per_call_us(calls[k], 0.1) / rows)
                    runs[k]["spark_handover"].append(_per_call_us(lambda b=batch: handover.write(b), 0.1) / rows)
            out[size] = {k: {step: round(statistics.median(v), 4) for step, v in runs[k].items()} for k in joins}
            for k in joins:
                out[size][k]["sum"] = round(out[size][k]["walk_and_batch"] + out[size][k]["spark_handover"], 4)
    return out


def send_steps(size: int) -> dict[str, float]:
    """Microseconds per message of the producer's wire work: the request with its frame, the answer."""
    body = os.urandom(size)
    client = "producer_10.0.0.1-4242-1700000000000-1-tubespark-0.1.0"

    def encode() -> bytes:
        payload, flag = OutgoingMessage(body, msg_type="s", msg_time="202401021530").encode()
        request = SendRequest(client, "t", 1, payload, flag, checksum(payload), 1, "s", "202401021530")
        return encode_frame(7, request.envelope(10_000))

    answer = encode_frame(7, encode_response(13, bpb.SendMessageResponseB2P(
        success=True, errCode=200, errMsg="OK", messageId=5, appendTime=1, appendOffset=28).SerializeToString()))

    def decode() -> object:
        _, payload = read_frame(BytesReader(answer))
        return check(parse_send_answer(decode_response(payload)[1]), "send")

    out = {"encode_request": round(_per_call_us(encode), 3), "decode_answer": round(_per_call_us(decode), 3)}
    out["total"] = round(out["encode_request"] + out["decode_answer"], 3)
    return out


def measure(detail: bool = False, scale: int = 1, compiled_only: bool = False) -> dict[str, object]:
    clock = "cpu" if _CLOCK["timer"] is time.process_time else "wall"
    result: dict[str, object] = {"hot_path": twin.HOT_PATH, "clock": clock, "read_us_per_row": {},
                                 "send_us_per_message": {}}
    for name, ctx in (("compiled", contextlib.nullcontext), ("pure-python", twin.pure_python)):
        if (name == "compiled" and twin.loaded() is None) or (name != "compiled" and compiled_only):
            continue
        with ctx():
            result["read_us_per_row"][name] = {size: read_steps(size, n * scale, detail) for size, n in FETCHES.items()}  # type: ignore[index]
            result["send_us_per_message"][name] = {100: send_steps(100)}  # type: ignore[index]
    return result


def _load_build(path: str) -> Any:
    """A build of ``_native.c`` at ``path``, loaded beside the one the package imported: a snapshot of its
    functions. Why a snapshot: CPython keeps one module object per name for a single-phase extension, and loading
    a path it loaded before (the package's own build) refills that object, the other build's included, with
    the functions of the first load, so two loads of two builds may end up as one object (``a is b``)."""
    spec = importlib.util.spec_from_file_location("tubespark.tubemq.wire._native", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return types.SimpleNamespace(**vars(module))


@contextlib.contextmanager
def _build(module: Any) -> Iterator[None]:
    """Every twin user calls ``twin.native()``: point it at ``module`` for a while (bench only)."""
    saved, twin._active = twin._active, module
    try:
        yield
    finally:
        twin._active = saved


def compare_builds(paths: list[str], rounds: int) -> dict[str, dict[int, dict[str, float]]]:
    """Medians over ``rounds`` alternating rounds of each build's read steps (us per row)."""
    builds = {path: _load_build(path) for path in paths}
    runs: dict[str, dict[int, list[dict[str, float]]]] = {p: {s: [] for s in FETCHES} for p in paths}
    for r in range(rounds):
        for path in paths if r % 2 == 0 else paths[::-1]:
            with _build(builds[path]):
                for size, n in FETCHES.items():
                    runs[path][size].append(read_steps(size, n))
    return {path: {size: {step: round(statistics.median(run[step] for run in runs[path][size]), 3)
                          for step in runs[path][size][0]} for size in FETCHES} for path in paths}


def _answer_to_columns(module: Any, data: bytes) -> Callable[[], object]:
    """The compiled answer's walk into columns, CRC on, as the read makes it with ``module``: ``read_fetch`` (one
    walk), or in a build from before it ``scan_fetch`` when the answer arrives and ``decode_fetch`` later (two)."""
    if hasattr(module, "read_fetch"):
        return lambda: module.read_fetch(data, 28, True)
    scanned = module.scan_fetch(data)[-1]

    def both() -> None:
        module.scan_fetch(data)
        module.decode_fetch(data, 0, 28, True, scanned)

    return both


def _answers_to_batch(module: Any, data: bytes, k: int) -> Callable[[], object]:
    """K answers walked and made one Arrow batch, as a read task does it with ``module``, CRC on: with a build that
    has ``new_buffer``, each walk writes its values after the last one's in the reader's ``ValueArena`` and the
    batch takes them as they are (one copy of each body); with a build from before it, each walk copies its
    values into a buffer of its own and a batch of several joins the value and offset arrays with
    ``pa.concat_arrays`` (what ``schema.fetches_record_batch`` did: a second copy). The rest is the same code.
    Each call keeps the last batch until the next is made, as a read task holds the fetch it has not handed over
    yet while the next answer is walked (so the memory each build writes into is as warm as in a read task)."""
    last: list[object] = []
    where = {"topic": "t", "partition_key": "1:t:0", "broker_id": 1, "partition_id": 0, "schema": arrow_schema(False)}
    if hasattr(module, "new_buffer"):
        arena = ValueArena(ARENA_BYTES)  # a read task's

        def arena_batch() -> object:
            parts = [packed_columns(arena.walk(module, data, 28, True)[5:]) for _ in range(k)]  # type: ignore[index]
            cuts = [0, *(i for i in range(1, k) if not parts[i].follows(parts[i - 1])), k]  # type: ignore[union-attr]
            # where the arena's buffer ended, a read task ends a batch too
            batches = [fetches_record_batch(parts[a:b], **where) for a, b in itertools.pairwise(cuts)]  # type: ignore[arg-type]
            last[:] = batches
            return batches[-1]

        return arena_batch

    def joined() -> object:
        parts = [packed_columns(module.read_fetch(data, 28, True)[5:]) for _ in range(k)]
        columns = parts[0]
        assert columns is not None
        if k > 1:
            value_array = pa.concat_arrays([pa.Array.from_buffers(pa.binary(), p.count, [  # type: ignore[union-attr]
                None, pa.py_buffer(p.value_offset_buffer), pa.py_buffer(p.value_buffer)]) for p in parts])  # type: ignore[union-attr]
            offset_array = pa.concat_arrays([pa.Array.from_buffers(pa.int64(), p.count, [  # type: ignore[union-attr]
                None, pa.py_buffer(p.offset_buffer)]) for p in parts])  # type: ignore[union-attr]
            _, value_offsets, values = value_array.buffers()
            columns = PackedColumns(len(value_array), b"", offset_array.buffers()[1], value_offsets, values, b"",
                                    columns.text_attributes, columns.text_msg_types, columns.text_msg_times,
                                    uniform_text=columns.uniform_text)
        last[:] = [to_record_batch(columns, **where)]  # type: ignore[arg-type]
        return last[0]

    return joined


def compare_batch_paired(paths: list[str], rounds: int, joins: list[str]) -> dict[int, dict[str, dict[str, float]]]:
    """``--paired --join``: :func:`_answers_to_batch` and the batch's hand-over (Spark's, as ``bench/client_read.py``
    models it) per row of two builds, back to back per round; ``joins`` entries ``K`` or ``K1:K2`` (fetches a
    batch with the first build and with the second: each read task's batching at its best)."""
    from bench.client_read import SparkHandover

    first, second = (_load_build(path) for path in paths)
    out: dict[int, dict[str, dict[str, float]]] = {}
    with SparkHandover() as handover:
        def handed(make: Callable[[], object]) -> Callable[[], object]:
            return lambda: handover.write(make())

        for size, count in FETCHES.items():
            _, payload = read_frame(BytesReader(_fetch_frame(size, count)))
            _, data = decode_response(payload)
            out[size] = {}
            for join in joins:
                k1, _, k2 = join.partition(":")
                ks = (int(k1), int(k2 or k1))
                calls = {"first": handed(_answers_to_batch(first, data, ks[0])),
                         "second": handed(_answers_to_batch(second, data, ks[1]))}
                out[size][join] = _paired(calls, rounds, count, 20, per_call_rows=(count * ks[0], count * ks[1]))
    return out


def _paired(calls: dict[str, Callable[[], object]], rounds: int, rows: int, number: int,
            per_call_rows: tuple[int, int] | None = None) -> dict[str, float]:
    """The medians per row of two calls timed back to back (best of 3 x ``number`` calls) in each round, the order
    alternating, and the median (and quartiles) of the per-round ratio second/first; each call makes ``rows``
    rows, or the first and second ``per_call_rows``."""
    made = dict(zip(("first", "second"), per_call_rows or (rows, rows), strict=True))
    times: dict[str, list[float]] = {"first": [], "second": []}
    ratios = []
    for r in range(rounds):
        got = {}
        for name in ("first", "second") if r % 2 == 0 else ("second", "first"):
            best = min(timeit.repeat(calls[name], number=number, repeat=3, timer=_CLOCK["timer"]))
            got[name] = best / number / made[name] * 1e6
            times[name].append(got[name])
        ratios.append(got["second"] / got["first"])
    quartiles = statistics.quantiles(ratios, n=4)
    return {"first_us": round(statistics.median(times["first"]), 4),
            "second_us": round(statistics.median(times["second"]), 4),
            "ratio": round(statistics.median(ratios), 3),
            "ratio_q1": round(quartiles[0], 3), "ratio_q3": round(quartiles[2], 3)}


def compare_decode_paired(paths: list[str], rounds: int) -> dict[int, dict[str, float]]:
    """The answer's walk into columns (:func:`_answer_to_columns`) per row of two builds, back to back per round:
    medians and the median (and quartiles) of the per-round ratio second/first."""
    first, second = (_load_build(path) for path in paths)
    out: dict[int, dict[str, float]] = {}
    for size, count in FETCHES.items():
        _, payload = read_frame(BytesReader(_fetch_frame(size, count)))
        _, data = decode_response(payload)
        calls = {"first": _answer_to_columns(first, data), "second": _answer_to_columns(second, data)}
        out[size] = _paired(calls, rounds, count, 50)
    return out


def compare_blocks_paired(rounds: int) -> dict[int, dict[str, float]]:
    """``--blocks``: a fetch answer's frame to the read's columns, as the connection reads it (``read_frames``, the
    envelope, ``parse_fetch_reply`` into an arena, the columns) with its blocks joined first (``first``) and left
    where they arrived (``second``, ``keep_blocks``: the walk reads them in place), back to back per round."""
    out: dict[int, dict[str, float]] = {}
    for size, count in FETCHES.items():
        frame = _fetch_frame(size, count)

        def read(keep: bool, arena: ValueArena, frame: bytes = frame) -> Callable[[], object]:
            def call() -> object:
                [(_serial, payload)] = read_frames(BytesReader(frame), keep_blocks=keep)
                reply = parse_fetch_reply(decode_response_view(payload)[1], arena=arena)
                return reply.columns(reply.currOffset, step=28)
            return call

        calls = {"first": read(False, ValueArena(ARENA_BYTES)), "second": read(True, ValueArena(ARENA_BYTES))}
        out[size] = _paired(calls, rounds, count, 50)
    return out


def _frame_to_values(module: Any, frame: bytes, blocks: bool) -> Callable[[], object]:
    """A fetch answer's frame to the read's buffers with ``module``'s compiled calls alone, CRC on, values into an
    arena buffer: its blocks joined (``take_frames``, ``locate_response``, ``read_fetch``: every build since the
    arena) or left where they arrived (``blocks``: ``take_frames`` with ``Blocks``, ``locate_blocks``,
    ``read_fetch_blocks``)."""
    into = module.new_buffer(ARENA_BYTES)
    view = memoryview(frame)
    limits = (BEGIN_TOKEN, MAX_BLOCK_SIZE, MAX_BLOCKS_PER_FRAME)
    if blocks:
        def in_place() -> object:
            kept = module.take_frames(view, *limits, Blocks)[0][0][1]
            _method, start, length = module.locate_blocks(kept.raw)
            return module.read_fetch_blocks(kept.raw, start, length, 28, True, into, 0)
        return in_place

    def joined() -> object:
        payload = module.take_frames(view, *limits)[0][0][1]
        _method, start, length = module.locate_response(payload)
        return module.read_fetch(memoryview(payload)[start:start + length], 28, True, None, into, 0)
    return joined


def compare_blocks_builds(paths: list[str], rounds: int) -> dict[int, dict[str, float]]:
    """``--blocks --ab OLD.so,NEW.so``: :func:`_frame_to_values` with the old build joining the blocks and the new
    one reading them in place, back to back per round."""
    old, new = (_load_build(path) for path in paths)
    out: dict[int, dict[str, float]] = {}
    for size, count in FETCHES.items():
        frame = _fetch_frame(size, count)
        calls = {"first": _frame_to_values(old, frame, False), "second": _frame_to_values(new, frame, True)}
        out[size] = _paired(calls, rounds, count, 50)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.wire_micro", description=__doc__.split("\n")[0])
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--cpu", action="store_true", help="time with the process's CPU clock, not the wall clock")
    parser.add_argument("--detail", action="store_true",
                        help="also the decode without CRC, one copy of the frame and Spark's hand-over of the batch")
    parser.add_argument("--scale", type=int, default=1,
                        help="messages per fetch answer (and Arrow batch) times this (fetch/batch sizing)")
    parser.add_argument("--compiled-only", action="store_true", help="skip the pure-Python twin")
    parser.add_argument("--ab", help="OLD.so,NEW.so: two builds of the compiled module, timed alternately")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of --ab")
    parser.add_argument("--paired", action="store_true",
                        help="--ab of the compiled answer's walk into columns only, ratio per round")
    parser.add_argument("--join", help="K,K,...: one Arrow batch of K fetches, built and handed over (us/row); with "
                                       "--ab --paired also K1:K2, fetches a batch with each build")
    parser.add_argument("--blocks", action="store_true",
                        help="the read of a fetch frame with its blocks joined, then read where they arrived, paired")
    args = parser.parse_args(argv)
    if args.cpu:
        _CLOCK["timer"] = time.process_time
    if args.blocks:
        compared = (compare_blocks_builds(args.ab.split(","), args.rounds) if args.ab
                    else compare_blocks_paired(args.rounds))
        for size, figures in compared.items():
            print(f"{size:5} B: frame to columns us/row, blocks joined {figures['first_us']:.4f} -> read in place "
                  f"{figures['second_us']:.4f}; per round {figures['ratio']:.3f} "
                  f"(quartiles {figures['ratio_q1']:.3f}-{figures['ratio_q3']:.3f})")
        return
    if args.ab and args.paired and args.join:
        batches = compare_batch_paired(args.ab.split(","), args.rounds, args.join.split(","))
        for size, ks in batches.items():
            for k, figures in ks.items():
                print(f"{size:5} B, {k} fetches a batch: answers to batch + hand-over us/row "
                      f"{figures['first_us']:.4f} -> {figures['second_us']:.4f}; per round {figures['ratio']:.3f} "
                      f"(quartiles {figures['ratio_q1']:.3f}-{figures['ratio_q3']:.3f})")
        return
    if args.join:
        for size, ks in join_steps([int(k) for k in args.join.split(",")], args.rounds).items():
            for k, figures in ks.items():
                print(f"{size:5} B, {k} fetches a batch: " + ", ".join(f"{n} {v:.4f}" for n, v in figures.items())
                      + " us/row")
        return
    if args.ab and args.paired:
        paired = compare_decode_paired(args.ab.split(","), args.rounds)
        for size, figures in paired.items():
            print(f"{size:5} B: answer to columns us/row {figures['first_us']:.4f} -> {figures['second_us']:.4f}; "
                  f"per round {figures['ratio']:.3f} (quartiles {figures['ratio_q1']:.3f}-{figures['ratio_q3']:.3f})")
        return
    if args.ab:
        paths = args.ab.split(",")
        medians = compare_builds(paths, args.rounds)
        for path, sizes in medians.items():
            for size, steps in sizes.items():
                print(f"{path}\n  {size:5} B: " + ", ".join(f"{k} {v:.3f}" for k, v in steps.items()) + " us/row")
        if args.json:
            with open(args.json, "w") as out:
                json.dump({"clock": "cpu" if args.cpu else "wall", "rounds": args.rounds, "medians": medians}, out,
                          indent=2)
        return
    result = measure(args.detail, args.scale, args.compiled_only)
    print(f"hot path: {result['hot_path']}, clock: {result['clock']}")
    for name, sizes in result["read_us_per_row"].items():  # type: ignore[union-attr]
        for size, steps in sizes.items():
            print(f"read  {name:11} {size:5} B: " + ", ".join(f"{k} {v:.3f}" for k, v in steps.items()) + " us/row")
    for name, sizes in result["send_us_per_message"].items():  # type: ignore[union-attr]
        for size, steps in sizes.items():
            print(f"send  {name:11} {size:5} B: " + ", ".join(f"{k} {v:.2f}" for k, v in steps.items()) + " us/msg")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)


if __name__ == "__main__":
    main()
