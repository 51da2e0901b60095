"""Turn the measured cases into the JSON document, the printed table and ``bench/results/latest.png``.

Every figure is a median over the measured (alternating) runs; every comparison is a named ratio
``A/B`` of two medians from the same session, size and core count, so machine noise that slows both
cancels out. MB/s counts message bodies only (10^6 bytes).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from bench.cases import Case

# (A, B) pairs reported as A/B of median rows/s, when both were measured.
RATIOS: tuple[tuple[str, str], ...] = (
    ("tubespark_batch", "java_consume"),
    ("tubespark_batch", "ceiling"),
    ("tubespark_batch", "kafka_batch"),
    ("tubespark_batch", "kafka_batch_tuned"),
    ("tubespark_batch", "tubespark_batch_pure"),
    ("tubespark_batch_pure", "kafka_batch"),
    ("tubespark_stream", "tubespark_batch"),
    ("tubespark_stream", "java_consume"),
    ("ceiling", "kafka_batch"),
    ("tubespark_sink", "java_produce"),
    ("tubespark_sink", "kafka_sink"),
    ("tubespark_sink", "tubespark_sink_pure"),
)


# (A, B) pairs reported as A/B of median Spark-side CPU microseconds per row (Spark JVM + Python workers).
CPU_RATIOS: tuple[tuple[str, str], ...] = (
    ("tubespark_batch", "kafka_batch"),
    ("tubespark_batch", "kafka_batch_tuned"),
    ("tubespark_batch_pure", "kafka_batch"),
    ("tubespark_batch", "tubespark_batch_pure"),
    ("tubespark_sink", "kafka_sink"),
)
CPU_KEYS = ("spark_side_us_per_row", "spark_jvm_us_per_row", "python_workers_us_per_row", "broker_us_per_row")


def case_record(case: Case, min_run_s: float) -> dict[str, Any]:
    """One row of ``results``: medians, per-core rate, every run, and how many were shorter than wanted."""
    rows_per_s = case.median("rows_per_s")
    seconds = case.median("seconds")
    rows = case.runs[0].rows if case.runs else None
    mb_per_s = rows_per_s * case.size / 1e6 if rows_per_s is not None else None
    return {
        "case": case.name,
        "kind": case.kind,
        "system": case.system,
        "size": case.size,
        "cores": case.cores,
        "uses_spark": case.uses_spark,
        "rows": rows,
        "median_seconds": _r(seconds, 3),
        "rows_per_s": _r(rows_per_s, 1),
        "mb_per_s": _r(mb_per_s, 2),
        "rows_per_s_per_core": (_r(rows_per_s / case.cores, 1)
                                if rows_per_s is not None and case.uses_spark else None),
        "runs": [{"seconds": round(r.seconds, 4), "rows_per_s": round(r.rows_per_s, 1), **r.extra} for r in case.runs],
        "warmup_runs": [{"seconds": round(r.seconds, 4), "rows_per_s": round(r.rows_per_s, 1)} for r in case.warmups],
        "short_runs": sum(1 for r in case.runs if r.seconds < min_run_s),
        "cpu_us_per_row": {key: _median([r.extra.get(key) for r in case.runs]) for key in CPU_KEYS},
        "error": case.error,
    }


def ratios(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The named ratios of median rows/s, per (size, cores); and the AvailableNow drain without its start
    (``tubespark_stream_drain``: rows over the median of the runs' micro-batch time) against the batch read."""
    by_key = {(r["case"], r["size"], r["cores"]): r for r in records if r["rows_per_s"]}
    out = []
    for size, cores in sorted({(r["size"], r["cores"]) for r in records}):
        for a, b in RATIOS:
            ra, rb = by_key.get((a, size, cores)), by_key.get((b, size, cores))
            if ra and rb:
                out.append({"name": f"{a}/{b}", "size": size, "cores": cores,
                            "value": round(ra["rows_per_s"] / rb["rows_per_s"], 3)})
        stream, batch = by_key.get(("tubespark_stream", size, cores)), by_key.get(("tubespark_batch", size, cores))
        drains = [run["drain_seconds"] for run in stream["runs"] if run.get("drain_seconds")] if stream else []
        if stream and batch and drains:
            drain_rate = stream["rows"] / statistics.median(drains)
            out.append({"name": "tubespark_stream_drain/tubespark_batch", "size": size, "cores": cores,
                        "value": round(drain_rate / batch["rows_per_s"], 3)})
    return out


def cpu_ratios(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The named ratios of median Spark-side CPU per row, per (size, cores)."""
    by_key = {(r["case"], r["size"], r["cores"]): r for r in records
              if (r.get("cpu_us_per_row") or {}).get("spark_side_us_per_row")}
    out = []
    for size, cores in sorted({(r["size"], r["cores"]) for r in records}):
        for a, b in CPU_RATIOS:
            ra, rb = by_key.get((a, size, cores)), by_key.get((b, size, cores))
            if ra and rb:
                out.append({"name": f"cpu {a}/{b}", "size": size, "cores": cores,
                            "value": round(ra["cpu_us_per_row"]["spark_side_us_per_row"]
                                           / rb["cpu_us_per_row"]["spark_side_us_per_row"], 3)})
    return out


def _median(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def _r(value: float | None, digits: int) -> float | None:
    return round(value, digits) if value is not None else None


def _fmt(value: float | None, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def table(doc: dict[str, Any]) -> str:
    """The human-readable summary printed at the end of a run."""
    flags = " ".join(doc["tubemq"].get("broker_jvm_flags") or []) or "(none)"
    lines = [f"tubespark benchmark ({doc['profile']}) - medians of {doc['config']['repeats']} alternating runs",
             f"commit {doc.get('commit', '?')}, {doc['host'].get('cpu_model', '?')} x {doc['host'].get('cpus')}, "
             f"hot path {doc.get('hot_path', {}).get('tubespark_batch', '?')}",
             f"Spark JVM flags: {' '.join(doc['spark'].get('jvm_flags') or [])}",
             f"TubeMQ broker JVM ({doc['tubemq'].get('broker_jvm')}): {flags}",
             f"protobuf backend: {doc['host'].get('protobuf_backend', '?')}",
             ""]
    header = f"{'kind':5} {'case':23} {'size':>5} {'cores':>5} {'rows':>10} {'sec':>7} {'rows/s':>11} " \
             f"{'MB/s':>8} {'rows/s/core':>11} {'CPU us/row: Spark JVM+Py=side':>30} {'broker':>6} note"
    lines += [header, "-" * len(header)]
    for r in doc["results"]:
        note = r["error"][:60] if r["error"] else (f"{r['short_runs']} short run(s)" if r["short_runs"] else "")
        if not r["uses_spark"]:
            note = (note + " " if note else "") + "(no Spark)"
        rows = _fmt(r["rows"], "d") if r["rows"] else "-"
        cpu = r.get("cpu_us_per_row") or {}
        side = (f"{_fmt(cpu.get('spark_jvm_us_per_row'), '.2f')}+{_fmt(cpu.get('python_workers_us_per_row'), '.2f')}"
                f"={_fmt(cpu.get('spark_side_us_per_row'), '.2f')}")
        lines.append(f"{r['kind']:5} {r['case']:23} {r['size']:>5} {r['cores']:>5} {rows:>10} "
                     f"{_fmt(r['median_seconds'], '.2f'):>7} {_fmt(r['rows_per_s']):>11} "
                     f"{_fmt(r['mb_per_s'], '.2f'):>8} {_fmt(r['rows_per_s_per_core']):>11} {side:>30} "
                     f"{_fmt(cpu.get('broker_us_per_row'), '.2f'):>6} {note}")
    if doc["ratios"]:
        lines += ["", "ratios of medians (rows/s; 'cpu ...': Spark-side CPU per row):"]
        lines += [f"  {x['name']:34} size {x['size']:>5} cores {x['cores']}: {x['value']:.3f}" for x in doc["ratios"]]
    for lat in doc.get("latency", []):
        if "error" in lat:
            lines.append(f"\nlatency: failed: {lat['error'][:200]}")
        else:
            lines.append(f"\nlatency ({lat['size']} B at {lat['rate_msgs_per_s']:.0f} msgs/s, {lat['trigger']}, "
                         f"{lat['received']}/{lat['sent']} msgs received, {lat['counted']} counted after a "
                         f"{lat['warmup_s']:.0f} s warm-up): p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms, "
                         f"max {lat['max_ms']} ms")
    mem = doc.get("memory")
    if mem:
        if "error" in mem:
            lines.append(f"memory: failed: {mem['error'][:200]}")
        else:
            lines.append(f"memory (drain of {mem['backlog_mb']} MB, "
                         f"maxOffsetsPerTrigger {mem['max_offsets_per_trigger']}): "
                         f"python worker peak RSS {mem['python_worker_peak_rss_mb']} MB "
                         f"({mem['python_workers_seen']} seen), "
                         f"driver source process {mem['source_process_peak_rss_mb']} MB")
    lines.append(f"\nwall time {doc['durations']['total_s']:.0f} s (set-up {doc['durations']['setup_s']:.0f} s)")
    return "\n".join(lines)


def write_json(doc: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")


def chart(doc: dict[str, Any], path: Path) -> None:
    """Horizontal bars of median MB/s, one panel per (kind, size), one bar per case and core count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["kind"], r["size"]) for r in doc["results"] if r["rows_per_s"]})
    if not panels:
        return
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 1.2 + 0.45 * max(
        len([r for r in doc["results"] if (r["kind"], r["size"]) == p]) for p in panels) * len(panels)),
        squeeze=False)
    colors = {"tubespark": "#1f77b4", "java": "#ff7f0e", "ceiling": "#7f7f7f", "kafka": "#2ca02c"}
    for ax, (kind, size) in zip(axes[:, 0], panels, strict=True):
        recs = [r for r in doc["results"] if (r["kind"], r["size"]) == (kind, size) and r["rows_per_s"]]
        # Java runs in every core count's round too (alternation), but uses no Spark cores: say so.
        labels = [f"{r['case']} ({r['cores']}c)" if r["uses_spark"] else f"{r['case']} (in {r['cores']}c round)"
                  for r in recs]
        values = [r["mb_per_s"] for r in recs]
        ax.barh(labels, values, color=[colors.get(r["system"], "#9467bd") for r in recs])
        for y, r in enumerate(recs):
            ax.text(r["mb_per_s"], y, f" {r['rows_per_s']:,.0f} rows/s", va="center", fontsize=7)
        ax.set_title(f"{kind}, {size} B messages", fontsize=9)
        ax.set_xlabel("MB/s (median)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, max(values) * 1.35)
    fig.suptitle(f"tubespark benchmark ({doc['profile']}, {doc['started']}); "
                 f"TubeMQ broker JVM: {doc['tubemq'].get('broker_jvm')}", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
