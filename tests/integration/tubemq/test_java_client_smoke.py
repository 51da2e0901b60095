"""Smoke test of the Java interop tool (tests/interop) against the real local cluster.

The official TubeMQ Java client produces messages and consumes them back (server-balance group and
bound "partition offset" range reads). Everything else in the interop suite compares our Python codec
with this tool, so this proves the tool itself first.
"""

from __future__ import annotations

import itertools
import os
import re
import uuid
from collections import defaultdict

import pytest

pytestmark = [pytest.mark.integration]

N = 24
INDEX_UNIT = 28
MSG_TIME = "202611221030"
# The Java consumer needs the master's rebalance (and its own heartbeat) before it holds partitions.
CONSUME_TIMEOUT_MS = 150_000


def _messages() -> list[dict]:
    out = []
    for i in range(N):
        out.append(
            {
                "data": f"java-smoke-{i}:".encode() + os.urandom(i * 7) + bytes([0, 255, i]),
                "attrs": {"seq": str(i), "src": "smoke"} if i % 3 else None,
                "msgType": ("orders", "clicks", None)[i % 3],
                "msgTime": MSG_TIME if i % 2 == 0 else None,
            }
        )
    return out


def _expected_attribute(m: dict) -> str:
    items = []
    if m["msgType"]:
        items.append(f"$msgType$={m['msgType']}")
    if m["msgTime"]:
        items.append(f"$msgTime$={m['msgTime']}")
    items += [f"{k}={v}" for k, v in (m["attrs"] or {}).items()]
    return ",".join(items)


@pytest.fixture(scope="module")
def produced(tubemq_cluster, topic_factory, java):
    # A fresh topic with one partition per store (dense offsets) and 4 stores: partitions 0..30000.
    topic = topic_factory(partitions=1, stores=4)
    messages = _messages()
    results = java.produce(tubemq_cluster.master_address, topic, messages, timeout_ms=90_000)
    return topic, messages, results


def test_java_produce_reports_every_send(tubemq_cluster, produced):
    topic, messages, results = produced
    assert len(results) == len(messages)
    key = re.compile(rf"^{tubemq_cluster.broker_id}:{topic}:(\d+)$")
    for r in results:
        assert r["ok"] is True and r["errCode"] == 200, r
        match = key.match(r["partition"])
        assert match, r
        assert int(match.group(1)) == r["partitionId"]
        assert r["partitionId"] % 10000 == 0 and r["partitionId"] < 40000  # numPartitions=1, 4 stores
    # Round-robin over the 4 stores.
    assert len({r["partitionId"] for r in results}) == 4


def test_java_consume_reads_back_what_java_produced(tubemq_cluster, java, produced):
    topic, messages, results = produced
    group = f"jsmoke_g_{uuid.uuid4().hex[:10]}"
    got = java.consume(
        tubemq_cluster.master_address, group, topic, N, from_first=True, timeout_ms=CONSUME_TIMEOUT_MS
    )
    print("java consume stderr:", java.last_stderr.strip()[-500:])
    assert len(got) == N, [g["data"] for g in got]

    # Same payloads (order across partitions is not defined) and the Java attribute format.
    by_data = {m["data"]: m for m in messages}
    assert sorted(g["data"] for g in got) == sorted(by_data)
    for g in got:
        m = by_data[g["data"]]
        assert g["attribute"] == _expected_attribute(m), g
        assert g["msgType"] == m["msgType"]
        assert g["msgTime"] == m["msgTime"]

    # Each message came from the partition the producer reported for it.
    sent_partition = {m["data"]: r["partition"] for m, r in zip(messages, results, strict=True)}
    for g in got:
        assert g["partitionKey"] == sent_partition[g["data"]]

    # One partition per store: batches are dense, start at getCurrOffset and commit to its end.
    batches = defaultdict(list)
    for g in got:
        batches[(g["partitionKey"], g["batchOffset"])].append(g)
    per_partition = defaultdict(list)
    for (pkey, offset), lines in batches.items():
        assert [line["index"] for line in lines] == list(range(len(lines)))
        assert {line["confirmOffset"] for line in lines} == {offset + INDEX_UNIT * len(lines)}
        per_partition[pkey].append((offset, len(lines)))
    for pkey, spans in per_partition.items():
        spans.sort()
        assert spans[0][0] == 0, (pkey, spans)  # a fresh group with --from-first starts at the first offset
        for (o1, n1), (o2, _) in itertools.pairwise(spans):
            assert o2 == o1 + INDEX_UNIT * n1, (pkey, spans)

    # appendOffset of a send is the message's index offset (as seen by the consumer).
    consumed_offset = {g["data"]: g["batchOffset"] + INDEX_UNIT * g["index"] for g in got}
    for m, r in zip(messages, results, strict=True):
        assert r["appendOffset"] == consumed_offset[m["data"]], (r, consumed_offset[m["data"]])


def test_java_consume_with_filters(tubemq_cluster, java, produced):
    topic, messages, _ = produced
    group = f"jsmoke_f_{uuid.uuid4().hex[:10]}"
    wanted = [m for m in messages if m["msgType"] == "orders"]
    # With the default query priority (301) the broker serves filtered reads from its files only, so
    # these messages show up once the broker has flushed them (10-30 s after the send here).
    got = java.consume(
        tubemq_cluster.master_address,
        group,
        topic,
        len(wanted),
        filters=["orders"],
        from_first=True,
        timeout_ms=CONSUME_TIMEOUT_MS,
    )
    assert sorted(g["data"] for g in got) == sorted(m["data"] for m in wanted)
    assert {g["msgType"] for g in got} == {"orders"}


def test_java_range_reads_exact_offsets(tubemq_cluster, java, produced):
    topic, messages, results = produced
    # The partition that got the most messages; its offsets are 0, 28, 56, ...
    per_partition = defaultdict(list)
    for m, r in zip(messages, results, strict=True):
        per_partition[r["partition"]].append((r["appendOffset"], m["data"]))
    pkey, sent = max(per_partition.items(), key=lambda kv: len(kv[1]))
    sent.sort()
    assert [o for o, _ in sent] == [INDEX_UNIT * i for i in range(len(sent))]
    assert len(sent) >= 4

    start, end = INDEX_UNIT * 1, INDEX_UNIT * (len(sent) - 1)
    group = f"jsmoke_r_{uuid.uuid4().hex[:10]}"
    got = java.read_range(
        tubemq_cluster.master_address, group, topic, pkey, start, end, timeout_ms=CONSUME_TIMEOUT_MS
    )
    print("java range stderr:", java.last_stderr.strip()[-500:])
    assert [(g["offset"], g["data"]) for g in got] == [(o, d) for o, d in sent if start <= o < end]
    assert {g["partitionKey"] for g in got} == {pkey}
