"""bench/scale.py counts a process's TCP connections and connects, and states growth against its baseline."""

from __future__ import annotations

import socket

from bench.scale import ConnectCounter, SizeResult, established_tcp, report


def test_established_connections_and_connects_are_counted_per_address() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    counter = ConnectCounter()
    before = established_tcp().count(f"127.0.0.1:{port}")
    clients = []
    try:
        counter.on = True
        for _ in range(3):
            clients.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        counter.on = False
        socket.create_connection(("127.0.0.1", port), timeout=5).close()  # not counted: the counter is off
        assert counter.counts[f"127.0.0.1:{port}"] == 3
        assert established_tcp().count(f"127.0.0.1:{port}") - before == 3
        for client in clients:
            client.close()
        assert f"127.0.0.1:{port}" not in established_tcp()
    finally:
        server.close()


def _result(partitions: int, plan_ms: float, connects: int, rss: float) -> SizeResult:
    return SizeResult(partitions, start_s=1.0, plan_ms=[plan_ms] * 3, latest_offset_ms=[plan_ms] * 3,
                      commit_ms=[1.0] * 3,
                      driver={"held_connections": 4, "steady_connects": 0, "steady_rpcs": {"X": 3}, "start_connects": 1,
                              "rss_end_mib": 100.0, "rss_peak_mib": 101.0, "traced_kib": rss},
                      executor={"connects": connects, "tasks": partitions, "peak_open": 1})


def test_the_table_gives_growth_against_the_smallest_size() -> None:
    text = report([_result(12, 10.0, 12, 2.0), _result(96, 80.0, 96, 4.0)],
                  {"triggers": 3, "warmup": 1, "per_trigger": 2})
    assert "baseline = 12 partitions" in text
    row = next(line for line in text.splitlines() if line.split() and line.split()[0] == "96")
    cols = row.split()
    assert cols[1:5] == ["80.0", "80.0", "0.83", "8.00x"]  # plan median, p95, ms per partition, growth
    assert cols[-3:] == ["4", "2.00x", "0.0"]  # heap 4 KiB, 2x the baseline's, 2/84 KiB per extra partition
