"""The small per-broker object the planners hold: what a broker must answer so Spark can read it.

Spark's Kafka source plans micro-batches and batch reads from one offset reader; here the stream engine
(:class:`tubespark.spark.stream_engine.StreamEngine`) and the batch engine
(:class:`tubespark.spark.batch_engine.BatchEngine`) both hold one :class:`Broker` and ask it only facts:

* which partitions exist and their bounds: :meth:`Broker.survey` (a running stream's partitions, each trigger)
  and :meth:`Broker.catalog` (every partition of the topics, for a batch read and a new query's start);
* how a start is resolved where the shared rules (:mod:`tubespark.spark.offset_rules`) cannot: a consumer
  group's offset, a start time (:meth:`Broker.start_offsets`, :meth:`Broker.position_at`);
* whether a start that no longer fits its partition is data loss or a wait: :attr:`Broker.policy`;
* the read task of ``[start, end)`` and what an executor does with it: :meth:`Broker.read_tasks`,
  :meth:`Broker.read`;
* storing a position: :meth:`Broker.store_offsets` (a group's offsets where the broker keeps them).

Everything else has a default here, for a broker with more to say: fingerprints of the message below an offset
(``#last`` marks: :meth:`Broker.fingerprint`, :meth:`Broker.incarnation`), the origin of a topic's deployment
(``#origin`` marks: :attr:`Broker.origins`), a cheaper message-size sample, a wait for the broker's view to change.
The engines are never subclassed: every rule of planning lives in them once, for every broker.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from tubespark.spark.offset_rules import MESSAGES, OffsetUnits
from tubespark.spark.offsets import Offsets
from tubespark.spark.options import SharedOptions
from tubespark.spark.origins import OriginSource
from tubespark.spark.partition_state import PartitionTable
from tubespark.spark.planning import Bounds, BoundsPolicy
from tubespark.spark.pushdown import Columns

Range = tuple[str, int, int]
"""``(partition key, low, high)``: one read task's offsets ``[low, high)``."""

Deferring = tuple[str, int, str] | None
"""What a stream's read task carries to defer the rest of its range (:meth:`StreamEngine.task_deferral`)."""


@dataclass
class Survey:
    """A broker's view of a stream's partitions this trigger (see :func:`plan_batch` for each field)."""

    bounds: dict[str, Bounds] = field(default_factory=dict)
    joined: dict[str, int] = field(default_factory=dict)
    jumps: dict[str, int] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    """Partitions the query should read but cannot this trigger (why): a Trigger.AvailableNow run waits for
    them. A partition of the start that is in none of these fields is parked: it keeps its offset."""
    gone: dict[str, str] = field(default_factory=dict)
    """Partitions removed for good (a deleted topic, a partition the configuration no longer has): why."""


@dataclass
class Catalog:
    """Every partition of the topics as the broker knows them now: what a batch read covers.

    ``bounds``: the partitions that can be read; ``unavailable``: server (a broker id, a broker group, an
    address) -> the partitions it should serve and does not now (its keys may be empty where the broker cannot
    list them while it is down); ``reasons``: what is known of each such server, in words."""

    bounds: dict[str, Bounds] = field(default_factory=dict)
    unavailable: dict[Any, tuple[str, ...]] = field(default_factory=dict)
    reasons: dict[Any, str] = field(default_factory=dict)
    topics: tuple[str, ...] = ()
    """The topics covered (a pattern resolved); empty: the ``topic`` option's."""
    checked: bool = True
    """Whether the broker could tell every partition the topics have (``unavailable`` is complete)."""
    unasked: tuple[str, ...] = ()
    """Readable partitions whose bounds were not asked: the read fails for the unavailable ones anyway."""

    def known(self) -> set[str]:
        """Every partition the topics have, readable or not."""
        return {*self.bounds, *self.unasked, *(key for keys in self.unavailable.values() for key in keys)}


def row_fingerprint(row: pa.RecordBatch, columns: Sequence[str]) -> int:
    """CRC-32 (31 bits: a positive JSON number) of ``columns`` of a one-row batch (those it has)."""
    crc = 0
    for name in columns:
        if name in row.schema.names:
            value = row.column(name)[0].as_py()
            crc = zlib.crc32(value if isinstance(value, bytes) else repr(value).encode(), crc)
            crc = zlib.crc32(b"\0", crc)
    return crc & 0x7FFFFFFF


class Broker:
    """One broker's answers to the planners. Construct it with the parsed options; ``batch`` says which engine
    holds it (a stream joins groups, a batch read never does). It is pickled to the executors with the options
    only: :meth:`read` must not need anything the driver learnt."""

    name: ClassVar[str] = "broker"
    """The format name, for logs and messages."""
    units: ClassVar[OffsetUnits] = MESSAGES
    """How the broker's offsets count (its ``record_size`` units per message) and what users call them."""
    listing: ClassVar[str] = ""
    """How a user lists the topics' partitions, for an error naming one they do not have."""
    fingerprint_columns: ClassVar[tuple[str, ...]] = ()
    """Columns of a read row that tell one message from another at the same offset: the default
    :meth:`fingerprint` hashes them; none, no fingerprints (reused offsets are not checked)."""
    policy: BoundsPolicy = BoundsPolicy()
    """What a running stream's start outside its partition's bounds is: a loss or a wait (may change per
    trigger)."""
    origins: OriginSource | None = None
    """Where a partition's ``#origin`` mark comes from (a broker whose topics have incarnations); ``None``: none."""

    def __init__(self, options: SharedOptions, *, batch: bool = False) -> None:
        self.options = options
        self.batch = batch
        self.states = PartitionTable()
        """One :class:`~tubespark.spark.partition_state.PartitionState` per partition, shared with the stream engine
        (a broker keeps its own record of a partition in the state's ``extra``)."""
        self.on_terminate: Callable[[], None] = lambda: None
        """What the process must do when Spark ends it without stopping the query (SIGTERM): the stream engine's
        stop, set by the engine; a broker that installs shutdown hooks (a group member) calls it."""

    @property
    def record_size(self) -> int:
        return self.units.record_size

    # --- the six questions ----------------------------------------------------------------------------

    def catalog(self) -> Catalog:
        """Every partition of the topics, its bounds, and the ones a server should serve but does not now."""
        raise NotImplementedError

    def start_offsets(self) -> Offsets:
        """A new stream's partitions and where each starts (``startingOffsets`` resolved by
        :func:`tubespark.spark.offset_rules.resolve_start`); a partition whose start cannot be known yet may be
        left out and join later through :attr:`Survey.joined`."""
        raise NotImplementedError

    def survey(self, start: Offsets) -> Survey:
        """The partitions of ``start`` (and any joining) as the broker sees them now."""
        raise NotImplementedError

    def read_tasks(self, ranges: Sequence[Range], defer: Deferring = None) -> Sequence[InputPartition]:
        """The Spark tasks reading each of ``ranges`` exactly (a key may come in several pieces in a batch read).
        ``defer``: what each task of a stream carries to report the unread rest of its range when its broker goes
        down (:mod:`tubespark.core.deferred`; ``None``: the task waits for its broker)."""
        raise NotImplementedError

    def read(self, task: InputPartition, *, driver: bool = False) -> Iterator[pa.RecordBatch]:
        """The rows of one task: on an executor, or (``driver``) a read the driver makes for itself, a fingerprint
        or a size sample, which must not wait out a broker's outage: every trigger of the query would wait."""
        raise NotImplementedError

    def store_offsets(self, offsets: Offsets) -> None:
        """Store a committed batch's end where the broker keeps a group's offsets, best effort; none by default."""

    # --- defaults a broker may answer better -------------------------------------------------------------

    def position_at(self, key: str, bounds: Bounds, option: str) -> int | None:
        """Where ``option`` (``startingOffsets`` / ``endingOffsets``) puts ``key`` by the broker's own means (a
        time), or ``None``: the shared rules resolve the option's spec."""
        return None

    def pushdown_columns(self) -> Columns:
        """The read columns whose WHERE filters this broker can use (:mod:`tubespark.spark.pushdown`); none by
        default (every filter is left to Spark)."""
        return {}

    def partition_values(self, key: str) -> Mapping[str, object]:
        """The PARTITION columns' values every row of partition ``key`` has (what a pushed filter selects)."""
        return {}

    def time_position(self, key: str, bounds: Bounds, column: str, when_ms: int) -> int:
        """The first offset of ``key`` whose message has ``column`` at or after ``when_ms`` (the partition's end
        when none has): for a TIME column the broker declared in :meth:`pushdown_columns`."""
        raise NotImplementedError

    def use_tags(self, column: str, values: frozenset[object]) -> frozenset[object]:
        """Read only messages whose TAG ``column`` is one of ``values`` (the broker filters them when it sends);
        returns the values the read now keeps (fewer where an option of the read already narrowed them; empty:
        no message can match)."""
        raise NotImplementedError

    def gone(self, keys: Collection[str]) -> dict[str, str]:
        """Those of ``keys`` (a batch Spark replays after a restart) that no longer exist, and why; none by
        default (a broker's read task then finds a removed partition itself)."""
        return {}

    def available_now_target(self) -> Offsets:
        """Each partition's end now: a Trigger.AvailableNow run reads up to it and stops."""
        return {key: found.high for key, found in self.catalog().bounds.items()}

    def available_now_wait_s(self) -> float:
        """How long a Trigger.AvailableNow run waits for a partition it cannot read yet before failing."""
        return 60.0

    def wait_for_change(self, timeout_s: float) -> None:
        """Block until the broker's view may have changed (at most ``timeout_s``)."""
        time.sleep(timeout_s)

    def fingerprint(self, key: str, offset: int) -> int | None:
        """A number identifying the last message of ``key`` below ``offset`` (what a batch ending there read
        last), or ``None`` where there is none to tell. Raises a :class:`TubeSparkError` when it cannot be read
        now. By default: the driver's read of the one message below ``offset``, its :attr:`fingerprint_columns`
        hashed."""
        size = self.record_size
        if not self.fingerprint_columns or offset < size:
            return None
        last: pa.RecordBatch | None = None
        for task in self.read_tasks([(key, offset - size, offset)]):
            for batch in self.read(task, driver=True):
                if batch.num_rows:
                    last = batch.slice(batch.num_rows - 1)
        return None if last is None else row_fingerprint(last, self.fingerprint_columns)

    def incarnation(self, key: str) -> object:
        """Anything that changes when ``key``'s broker may have restarted since the last trigger: a start is
        checked against its ``#last`` fingerprint again then."""
        return None

    def sample_sizes(self, key: str, low: int, high: int) -> list[int]:
        """Value sizes of the messages in ``[low, high)`` (``maxBytesPerTrigger``), read by the driver."""
        import pyarrow.compute as pc  # ~0.1 CPU-s at import, needed only here (docs/troubleshooting/busy-machine.md)

        return [size for task in self.read_tasks([(key, low, high)]) for batch in self.read(task, driver=True)
                for size in pc.binary_length(batch.column("value")).to_pylist() if size is not None]

    def close(self) -> None:
        """Release the driver's connections."""

    # --- pickling: executors get the options, never sockets or threads ----------------------------------

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "batch": self.batch}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"], batch=state["batch"])  # type: ignore[misc]  # a driver-free copy


def ranges_of(positions: Mapping[str, tuple[int, int]]) -> list[Range]:
    """``{key: (low, high)}`` as :data:`Range` s, in key order."""
    return [(key, low, high) for key, (low, high) in sorted(positions.items())]
