"""How big each case is at ``--size smoke`` and ``--size full``.

Why these sizes: ``steady`` is the quick way to the read figures at steady state (every run >= 2 s, the
cases alternating in one session: ``--cases tubespark_batch,tubespark_batch_pure,kafka_batch,kafka_batch_tuned``);
``smoke`` proves the harness end to end in a couple of minutes (its figures mean
nothing); ``full`` is sized so a timed run lasts at least ~5 s on a 2-core machine for all but the fastest
cases (estimated from smoke rates; runs shorter than ``MIN_RUN_S`` are flagged ``short_runs`` in the
output: raise ``--rows-scale`` then) while the slowest stay near a minute. The memory
case's backlog at full size is 20 x 256 MiB of 1 KiB messages, drained with ``maxOffsetsPerTrigger``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MIN_RUN_S = 5.0
MESSAGE_SIZES = (100, 1024)


@dataclass(frozen=True)
class Profile:
    name: str
    read_rows: dict[int, int]            # backlog per message size, read by every read case
    write_rows: dict[int, int]           # rows per write run
    ceiling_factor: int                  # the in-memory ceiling reads this many times the backlog
    repeats: int                         # measured rounds of each alternating group
    warmup: int                          # unmeasured rounds first (JIT, imports, connections)
    latency_rate: float                  # msgs/s of the steady producer
    latency_seconds: float
    latency_warmup_s: float              # messages sent this early are not counted (workers starting)
    memory_rows: int                     # backlog of 1 KiB messages for the memory case
    memory_max_offsets: int              # maxOffsetsPerTrigger while draining it
    topic_shape: tuple[int, int] = field(default=(1, 4))  # TubeMQ partitions x stores; Kafka gets the product
    bulk_write_factor: int = 1           # the sinks that batch many rows per message or request (InLong bundles,
    # Kafka's) write this many times ``write_rows``: some ten times faster per row, they ran under 2 s at 600k rows


PROFILES: dict[str, Profile] = {
    "smoke": Profile(
        name="smoke",
        read_rows={100: 20_000, 1024: 5_000},
        write_rows={100: 10_000, 1024: 5_000},
        ceiling_factor=1,
        repeats=2,
        warmup=1,
        latency_rate=200.0,
        latency_seconds=10.0,
        latency_warmup_s=4.0,
        memory_rows=5_000,
        memory_max_offsets=1_000,
    ),
    "steady": Profile(  # the read figures of issue 24: every run >= 2 s, pure-Python and compiled, Kafka both ways
        name="steady",
        read_rows={100: 3_000_000, 1024: 1_000_000},
        write_rows={100: 600_000, 1024: 300_000},
        ceiling_factor=2,
        repeats=3,
        warmup=1,
        latency_rate=2_000.0,
        latency_seconds=30.0,
        latency_warmup_s=10.0,
        memory_rows=4 * 256 * 1024,
        memory_max_offsets=100_000,
        bulk_write_factor=4,
    ),
    "full": Profile(
        name="full",
        read_rows={100: 4_000_000, 1024: 1_500_000},  # 2 M / 750 k ran 2-3 s once the read path got faster
        write_rows={100: 600_000, 1024: 300_000},
        ceiling_factor=6,
        repeats=5,
        warmup=1,
        latency_rate=2_000.0,
        latency_seconds=70.0,
        latency_warmup_s=10.0,
        memory_rows=20 * 256 * 1024,  # 20 x 256 MiB of 1 KiB bodies
        memory_max_offsets=100_000,
        bulk_write_factor=4,
    ),
}


def scaled(profile: Profile, factor: float) -> Profile:
    """The profile with every row count multiplied by ``factor`` (``--rows-scale``)."""
    if factor == 1:
        return profile
    from dataclasses import replace

    return replace(profile,
                   read_rows={k: max(1, int(v * factor)) for k, v in profile.read_rows.items()},
                   write_rows={k: max(1, int(v * factor)) for k, v in profile.write_rows.items()},
                   memory_rows=max(1, int(profile.memory_rows * factor)))
