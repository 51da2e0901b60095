"""``python -m bench.wire_micro``: CPU per row of the TubeMQ wire hot paths in this process, both twins.

No broker, no Spark: a GetMessage answer of N messages (100 B and 1 KiB bodies with one producer's
attributes, as the bench topics hold) is framed, read back, decoded and turned into the Arrow batch the
executor hands to Spark, as ``read_range`` does; a SendMessage is encoded with its frame and its answer
decoded, as the producer does. Each step is timed alone with the compiled twin and with the pure-Python
one (``twin.pure_python()``), so the table says where a row's microseconds go and what the twin saves.

    PYTHONPATH=. python -m bench.wire_micro [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import timeit
from collections.abc import Callable

from tubespark.core.framed_io import BytesReader
from tubespark.tubemq.client.common import check
from tubespark.tubemq.spark.schema import arrow_schema, to_record_batch
from tubespark.tubemq.wire import twin
from tubespark.tubemq.wire.envelope import decode_response, encode_response
from tubespark.tubemq.wire.fetch import parse_fetch_reply
from tubespark.tubemq.wire.frame import encode_frame, read_frame
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


def _per_call_us(fn: Callable[[], object], min_s: float = 0.3) -> float:
    number, elapsed = 1, 0.0
    while elapsed < min_s:
        number *= 2
        elapsed = min(timeit.repeat(fn, number=number, repeat=3))
    return elapsed / number * 1e6


def read_steps(size: int, count: int) -> dict[str, float]:
    """Microseconds per row of each step of the executor's read of one fetch, and their sum."""
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
        "decode_columns": lambda: reply.columns(0, step=28),
        "arrow_batch": lambda: to_record_batch(columns, topic="t", partition_key="1:t:0", broker_id=1,
                                               partition_id=0, schema=schema),
    }
    out = {name: round(_per_call_us(fn) / count, 3) for name, fn in steps.items()}
    out["total"] = round(sum(out.values()), 3)
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


def measure() -> dict[str, object]:
    result: dict[str, object] = {"hot_path": twin.HOT_PATH, "read_us_per_row": {}, "send_us_per_message": {}}
    for name, ctx in (("compiled", contextlib.nullcontext), ("pure-python", twin.pure_python)):
        if name == "compiled" and twin.loaded() is None:
            continue
        with ctx():
            result["read_us_per_row"][name] = {size: read_steps(size, n) for size, n in FETCHES.items()}  # type: ignore[index]
            result["send_us_per_message"][name] = {100: send_steps(100)}  # type: ignore[index]
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.wire_micro", description=__doc__.split("\n")[0])
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    result = measure()
    print(f"hot path: {result['hot_path']}")
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
