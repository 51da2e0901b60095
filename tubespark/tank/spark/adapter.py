"""TANK's answers to the shared planners (:class:`tubespark.spark.broker.Broker`): streams and batch reads.

TANK has no consumer groups and no offset commit (docs/tank/protocol.md#no-consumer-groups), so there is
nothing to join, balance or store on the broker: every query reads every partition of its topics, and
its offsets ``{"topic:partition": next sequence number}`` live in Spark's checkpoint. A restart resumes
exactly there; each micro-batch reads exact ``[start, end)`` ranges that Spark logged before running it.

Each trigger asks DiscoverPartitions: ``earliest`` = first available, ``latest`` = high-water mark + 1. A
partition that appears later (a topic grew) joins at its first available number. A broker that does not
answer plans nothing this trigger and the stream goes on (its restart must not stop the query); a
partition its topic no longer lists is a vanished partition (``failOnDataLoss``). A new query whose broker is down
waits for it when this process saw it answer, and fails within seconds naming the ``broker`` option when it never
did (:mod:`tubespark.core.outage`). A batch read whose broker is down (it answered before in this process) covers
partitions it cannot list: ``onUnavailablePartitions`` fails it (the default) or reads nothing, with a warning.

Numbers that vanish: a start below the partition's first available number (retention) is data loss when
this query had seen messages at or above it, or does not know (after a restart); a gap below the first
message of a partition this query saw empty (a producer that chose its numbers, ProduceWithSeqnum) is
not. A high-water mark that went back below the query's position means the broker lost acknowledged
messages: fail, or continue from the broker's number.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from tubespark.core.outage import never_answered
from tubespark.errors import TubeSparkError
from tubespark.spark.broker import Broker, Catalog, Deferring, Range, Survey
from tubespark.spark.offset_rules import check_named_partitions, resolve_start
from tubespark.spark.offsets import EARLIEST, Offsets
from tubespark.spark.planning import Bounds, BoundsPolicy, Resolution
from tubespark.spark.pushdown import Column, Columns, Kind
from tubespark.tank.client.broker import TankClient
from tubespark.tank.spark.bounds import PARTITION_LISTING, UNITS, discover, known_partitions
from tubespark.tank.spark.bounds import Bounds as TankBounds
from tubespark.tank.spark.options import TankOptions, split_key
from tubespark.tank.spark.read_task import SeqRange, read_range

log = logging.getLogger(__name__)


class _SequencePolicy(BoundsPolicy):
    """Numbers below the first available one are a loss unless this query saw the partition end below them."""

    def __init__(self, seen_next: Mapping[str, int]) -> None:
        self.seen_next = dict(seen_next)  # partition -> the largest high-water mark + 1 seen before this trigger

    def below(self, key: str, start: int, bounds: Bounds) -> Resolution:
        first = bounds.low if bounds.low is not None else start
        if self.seen_next.get(key, start + 1) > start:
            return Resolution(first, f"retention removed numbers this query had not read (query at {start}, broker "
                                     f"at {first})")
        log.info("partition %s: numbers [%d, %d) were never produced", key, start, first)
        return Resolution(first)

    def above(self, key: str, start: int, bounds: Bounds) -> Resolution:
        return Resolution(bounds.high, f"the broker's high-water mark went back below this query's position: it "
                                       f"lost acknowledged messages (query at {start}, broker at {bounds.high})")


PUSHDOWN_COLUMNS: Mapping[str, Column] = {
    "topic": Column(Kind.PARTITION, str, never_null=True),
    "partition": Column(Kind.PARTITION, int, never_null=True),
    "offset": Column(Kind.OFFSET, int, never_null=True),
}


class TankAdapter(Broker):
    """The ``tank`` format's broker object."""

    name = "tank"
    units = UNITS
    listing = PARTITION_LISTING
    fingerprint_columns = ("offset", "timestamp", "key", "value")

    def __init__(self, options: TankOptions, *, batch: bool = False) -> None:
        super().__init__(options, batch=batch)
        self.options: TankOptions = options
        self._client: TankClient | None = None
        self._seen_next: dict[str, int] = {}  # partition -> the largest high-water mark + 1 this process saw
        self.policy = _SequencePolicy(self._seen_next)

    def _discover(self) -> dict[str, TankBounds]:
        if self._client is None:
            self._client = TankClient(self.options.broker, self.options.client_settings())
        try:
            return discover(self.options, self._client)
        except Exception:
            self.close()
            raise

    def catalog(self) -> Catalog:
        """Every partition of the topics; a broker that answered before in this process and does not now covers
        partitions it cannot list (one that never answered fails naming the ``broker`` option)."""
        broker = self.options.broker
        try:
            found = self._discover()
        except TubeSparkError as exc:
            if not exc.retriable or never_answered(exc) is not None:
                raise
            known = known_partitions(self.options)
            listed = "" if known else "; its partitions cannot be listed"
            return Catalog(unavailable={broker: known},
                           reasons={broker: f"TANK broker {broker} does not answer ({exc}){listed}"})
        return Catalog(bounds={key: Bounds(b.first, b.next) for key, b in found.items()})

    def start_offsets(self) -> Offsets:
        """A new query's start (the engine waits for a broker this process saw, and fails within seconds naming
        ``broker`` for one that never answered)."""
        found = self._discover()
        check_named_partitions("startingOffsets", self.options.starting_offsets, found, listing=PARTITION_LISTING)
        offsets: Offsets = {}
        for key, bounds in sorted(found.items()):
            offsets[key] = resolve_start("startingOffsets", self.options.starting_offsets, key, low=bounds.first,
                                         high=bounds.next, default=EARLIEST, units=UNITS,
                                         fail_on_data_loss=self.options.fail_on_data_loss)
            self._seen_next[key] = bounds.next
        return offsets
    def survey(self, start: Offsets) -> Survey:
        try:
            found = self._discover()
        except TubeSparkError as exc:
            if not exc.retriable:
                raise
            log.warning("TANK broker %s did not answer (no new data this trigger; the stream goes on): %s",
                        self.options.broker, exc)
            return Survey(unavailable=dict.fromkeys(start, f"broker {self.options.broker} unreachable"))
        survey = Survey(bounds={key: Bounds(b.first, b.next) for key, b in found.items()})
        survey.gone = {key: "its topic no longer lists it" for key in start if key not in found}
        for key, bounds in found.items():
            if key not in start:
                log.info("partition %s joins the query at its first available number %d", key, bounds.first)
                survey.joined[key] = bounds.first
        # this trigger's starts are judged by what earlier triggers saw; what this one sees counts next time
        self.policy = _SequencePolicy(self._seen_next)
        for key, bounds in found.items():
            self._seen_next[key] = max(self._seen_next.get(key, 0), bounds.next)
        return survey

    def available_now_target(self) -> Offsets:
        return {key: bounds.next for key, bounds in self._discover().items()}

    def pushdown_columns(self) -> Columns:
        """A pushed WHERE on the partition columns selects partitions; on ``offset`` (sequence numbers) it cuts
        each partition's range (:mod:`tubespark.spark.pushdown`)."""
        return PUSHDOWN_COLUMNS

    def partition_values(self, key: str) -> Mapping[str, object]:
        topic, partition = split_key(key)
        return {"topic": topic, "partition": partition}

    def read_tasks(self, ranges: Sequence[Range], defer: Deferring = None) -> Sequence[InputPartition]:
        return [SeqRange(self.options.broker, *split_key(key), low, high, defer) for key, low, high in ranges]

    def read(self, task: InputPartition, *, driver: bool = False) -> Iterator[pa.RecordBatch]:
        """A driver's read does not wait out an outage (it is tried again at a later trigger)."""
        if not isinstance(task, SeqRange):
            raise TypeError(f"a tank read task is a SeqRange, not {type(task).__name__}")
        return read_range(task, self.options, outage_s=0, defer=False) if driver else read_range(task, self.options)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
