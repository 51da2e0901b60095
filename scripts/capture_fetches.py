"""Capture real GetMessage answers from a local TubeMQ 2.4.0 broker for tests/unit/tubemq/test_fetch_twins.py.

Starts the test bed's cluster, publishes a mix of messages (one producer's shared attributes, per-message
attributes, non-ASCII text, no attributes, an empty body, 1 KiB and 64 KiB bodies), reads every partition
from its start with a plain and a msgType-filtered registration and writes each answer's
GetMessageResponseB2C bytes, as the broker sent them, to ``tests/unit/tubemq/captured/<n>.bin``.

    PYTHONPATH=.:testbed python scripts/capture_fetches.py   # needs Java and the cached TubeMQ jars
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.common import new_client_id
from tubespark.tubemq.client.producer import Producer
from tubespark.tubemq.wire.constants import Method, ServiceType
from tubespark.tubemq.wire.errcodes import ErrCode
from tubespark.tubemq.wire.message import OutgoingMessage
from tubespark.tubemq.wire.pb import broker_service_pb2 as bpb

OUT = Path(__file__).resolve().parent.parent / "tests" / "unit" / "tubemq" / "captured"
TOPIC = "capture"


def messages() -> list[OutgoingMessage]:
    out = [OutgoingMessage(os.urandom(100), msg_type="orders", msg_time="202401021530") for _ in range(300)]
    out += [OutgoingMessage(b"row %d" % k, msg_type="orders", msg_time=f"2024010215{k % 60:02d}",
                            attributes={"dedupId": f"q-0-{k}", "city": "M\u00fcnchen \U0001f600"}) for k in range(100)]
    out += [OutgoingMessage(b"plain %d" % k) for k in range(50)]
    out += [OutgoingMessage(b"", msg_type="empty-body"), OutgoingMessage(os.urandom(65536), msg_type="big")]
    out += [OutgoingMessage(os.urandom(1024), msg_type="kib", attributes={"k": "v"}) for _ in range(20)]
    return out


def capture(master: str) -> int:
    with Producer(master) as producer:
        producer.publish([TOPIC], timeout_s=240.0)
        for message in messages():
            producer.send_async(TOPIC, message)
        producer.flush()
        parts = producer.partitions(TOPIC)
    broker = BrokerClient(new_client_id("capture"))
    saved = 0
    try:
        for filters in ((), ("orders",)):
            for part in parts:
                group = f"capture_{part.partition_id}_{len(filters)}"
                broker.register(part, group, offset=0, filters=filters)
                while True:
                    request = bpb.GetMessageRequestC2B(
                        clientId=broker.client_id, partitionId=part.partition_id, groupName=group, topicName=TOPIC,
                        lastPackConsumed=True, manualCommitOffset=False)
                    data = broker.pool.get(part.broker.address).call_async_parsed(  # the bytes, as they came
                        Method.GET_MESSAGE, ServiceType.BROKER_READ, request, bytes, 10.0).result(timeout=10)
                    response = bpb.GetMessageResponseB2C.FromString(data)
                    if not response.success:
                        if response.errCode == ErrCode.NOT_FOUND:  # no more messages
                            break
                        raise SystemExit(f"fetch failed: {response.errCode} {response.errMsg}")
                    (OUT / f"{saved:02d}.bin").write_bytes(data)
                    saved += 1
                broker.unregister(part, group)
    finally:
        broker.close()
    return saved


def main() -> None:
    from tubespark_testbed import LocalCluster

    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.bin"):
        old.unlink()
    with LocalCluster(topics=[(TOPIC, 1, 2)]) as cluster:
        print(f"captured {capture(cluster.master_address)} answers into {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
