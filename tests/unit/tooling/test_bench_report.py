"""The benchmark's ratios: medians of alternating runs, and the AvailableNow drain without its start."""

from __future__ import annotations

from bench.report import ratios


def record(case: str, rows_per_s: float, runs: list[dict] | None = None) -> dict:
    return {"case": case, "size": 100, "cores": 2, "rows": 1000, "rows_per_s": rows_per_s, "runs": runs or []}


def test_ratios_of_medians_and_the_drain_without_the_start():
    stream_runs = [{"seconds": 4.0, "drain_seconds": 1.0}, {"seconds": 5.0, "drain_seconds": 3.0},
                   {"seconds": 4.5, "drain_seconds": 2.0}]
    got = {r["name"]: r["value"] for r in ratios([record("tubespark_batch", 500.0), record("java_consume", 250.0),
                                                  record("tubespark_stream", 1000 / 4.5, stream_runs)])}
    assert got["tubespark_batch/java_consume"] == 2.0
    assert got["tubespark_stream/tubespark_batch"] == round(1000 / 4.5 / 500, 3)
    assert got["tubespark_stream_drain/tubespark_batch"] == 1.0  # 1000 rows / median drain 2 s = 500 rows/s


def test_no_ratio_without_both_sides():
    assert ratios([record("tubespark_batch", 500.0)]) == []
