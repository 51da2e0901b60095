"""``python -m bench.rocketmq``: tubespark's RocketMQ client rates against RocketMQ's own Java client.

One local name server + broker (the testbed's, JVM flags for a 2-core box), then, alternating runs of the
two sides ``--repeats`` times and reporting medians and their ratio (tubespark / Java):

* write: ``--messages`` messages of ``--size`` bytes as batch sends (tubespark's :class:`BatchProducer`,
  64 batches in flight; Java's ``DefaultMQProducer.send(Collection)`` of the same batch size, synchronous,
  as its API offers batches);
* pull read: every queue from its start (tubespark's pipelined :class:`RangeReader`, one thread per queue;
  Java's ``DefaultLitePullConsumer`` assigned every queue);
* pop read: tubespark's :class:`PopConsumer` (one fresh group per run, 32 messages per pop, batch acks),
  against the same Java pull reader (the Java remoting client's pop path needs a broker-side request mode
  switch per group; the ratio says how pop compares with the fastest Java read).

Client level, no Spark: what is compared is the protocol implementation. Output: one JSON document
(``--out``, default ``bench/results/rocketmq.json``) and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tubespark_testbed.rocketmq import RocketMQStack

from tests.interop.rocketmqjava import RocketMQJava
from tubespark.rocketmq.client.client import RocketMQClient, all_queues
from tubespark.rocketmq.client.pop import PopConsumer, pop_until
from tubespark.rocketmq.client.producer import BatchProducer
from tubespark.rocketmq.client.ranges import RangeReader

QUEUES = 4


def _settle(client: RocketMQClient, topic: str, total: int) -> None:
    deadline = time.monotonic() + 60
    while sum(h - lo for lo, h in client.bounds(all_queues(client, [topic])).values()) < total:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic} did not reach {total} messages")
        time.sleep(0.1)


def py_write(client: RocketMQClient, topic: str, n: int, size: int, batch: int) -> float:
    body = b"x" * size
    producer = BatchProducer(client, batch_messages=batch, batch_bytes=4 * 1024 * 1024 - 1024)
    start = time.perf_counter()
    for i in range(n):
        producer.add(topic, body, {"KEYS": f"k{i}"})
    producer.flush()
    return n / (time.perf_counter() - start)


def py_pull(client: RocketMQClient, topic: str) -> float:
    queues = all_queues(client, [topic])
    bounds = client.bounds(queues)
    reader = RangeReader(client, "bench_pull")

    def one(mq) -> int:
        low, high = bounds[mq.key]
        return sum(len(batch) for batch in reader.read(mq, low, high))

    start = time.perf_counter()
    with ThreadPoolExecutor(len(queues)) as pool:
        total = sum(pool.map(one, queues))
    return total / (time.perf_counter() - start)


def py_pop(client: RocketMQClient, topic: str, n: int) -> float:
    consumer = PopConsumer(client, "bench_pop_" + uuid.uuid4().hex[:8], topic, invisible_ms=120000, poll_ms=200)
    start = time.perf_counter()
    got = 0
    while got < n:
        popped = pop_until(consumer, min(2000, n - got))
        if not popped:
            raise RuntimeError(f"pop stalled at {got} of {n}")
        consumer.ack([p.receipt for p in popped])
        got += len(popped)
    return got / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rocketmq", description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "rocketmq.json"))
    args = parser.parse_args(argv)
    java = RocketMQJava()
    java.build()
    results: dict[str, dict[str, list[float]]] = {k: {"tubespark": [], "java": []} for k in ("write", "pull", "pop")}
    with RocketMQStack.single() as stack:
        ns = stack.namesrv_address
        with RocketMQClient([ns]) as client:
            for _ in range(args.repeats):
                t_py = stack.create_topic("bench_py_" + uuid.uuid4().hex[:8], QUEUES)
                t_java = stack.create_topic("bench_java_" + uuid.uuid4().hex[:8], QUEUES)
                results["write"]["tubespark"].append(py_write(client, t_py, args.messages, args.size, args.batch))
                sent = java.produce(ns, t_java, args.messages, size=args.size, batch=args.batch)
                results["write"]["java"].append(sent["sent"] / sent["seconds"])
                _settle(client, t_py, args.messages)
                _settle(client, t_java, args.messages)
                results["pull"]["tubespark"].append(py_pull(client, t_py))
                _lines, summary = java.consume(ns, t_java, args.messages, print_bodies=False)
                java_rate = summary["received"] / summary["seconds"]
                results["pull"]["java"].append(java_rate)
                results["pop"]["tubespark"].append(py_pop(client, t_py, args.messages))
                results["pop"]["java"].append(java_rate)
    report = {"messages": args.messages, "size": args.size, "batch": args.batch, "repeats": args.repeats,
              "cases": {}}
    print(f"{'case':8} {'tubespark msg/s':>16} {'java msg/s':>12} {'ratio':>7}")
    for case, sides in results.items():
        ours, theirs = statistics.median(sides["tubespark"]), statistics.median(sides["java"])
        report["cases"][case] = {"tubespark": ours, "java": theirs, "ratio": ours / theirs, "runs": sides}
        print(f"{case:8} {ours:16,.0f} {theirs:12,.0f} {ours / theirs:7.2f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
