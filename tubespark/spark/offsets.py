"""Offset maps and offset specs, as Spark sources exchange them: ``{"partition key": offset}``.

A spec is what ``startingOffsets`` / ``endingOffsets`` take: a word (``earliest``, ``latest``, and
whatever else a source allows) or a JSON object of partition key -> offset in which -2 means earliest
and -1 latest. The shape of a partition key belongs to the broker, which passes a checker.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tubespark.errors import OptionError

EARLIEST, LATEST = -2, -1

Offsets = dict[str, int]
OffsetSpec = str | dict[str, int]


def parse_offset_spec(name: str, value: str, *, allow: tuple[str, ...],
                      check_key: Callable[[str], bool], key_form: str = "brokerId:topic:partitionId",
                      example: str = '{"1:mytopic:0": 280}') -> OffsetSpec:
    """One of the words in ``allow`` (lower-cased) or JSON ``{key: offset}`` (option ``name``).

    Offsets must be -2 (earliest), -1 (latest) or >= 0; keys must pass ``check_key``. ``key_form`` and
    ``example`` show the broker's key shape in error messages (TubeMQ's by default).
    """
    text = value.strip()
    if text.lower() in allow:
        return text.lower()
    if not text.startswith("{"):
        raise OptionError(f"option {name}={value!r}: expected {' | '.join(allow)} or a JSON object "
                          f"like {example}")
    return _partition_map(name, text, check_key, key_form, "offset",
                          lambda offset: offset >= 0 or offset in (EARLIEST, LATEST),
                          "must be -2 (earliest), -1 (latest) or >= 0")


def _partition_map(name: str, text: str, check_key: Callable[[str], bool], key_form: str, what: str,
                   valid: Callable[[int], bool], rule: str) -> dict[str, int]:
    """A non-empty JSON object of partition key -> integer ``what``, each passing ``valid``."""
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {name}: invalid JSON ({exc.msg} at position {exc.pos}): {text!r}; expected a "
                          f"JSON object of partition key -> {what}") from None
    if not isinstance(spec, dict) or not spec:
        raise OptionError(f"option {name}: the JSON must be a non-empty object of partition key -> {what}")
    for key, number in spec.items():
        if not check_key(key):
            raise OptionError(f"option {name}: bad partition key {key!r}, expected {key_form}")
        if not isinstance(number, int) or isinstance(number, bool) or not valid(number):
            raise OptionError(f"option {name}: {what} for {key} {rule}, got {number!r}; fix it in the JSON")
    return dict(spec)


def parse_timestamp(name: str, value: str) -> int:
    """A time in milliseconds since the epoch (Kafka's ``startingTimestamp``)."""
    try:
        when = int(value)
    except ValueError:
        when = -1
    if when < 0:
        raise OptionError(f"option {name}={value!r}: expected a time in milliseconds since the epoch")
    return when


def parse_timestamp_map(name: str, value: str, *, check_key: Callable[[str], bool],
                        key_form: str = "brokerId:topic:partitionId") -> dict[str, int]:
    """JSON ``{partition key: epoch milliseconds}`` (Kafka's ``startingOffsetsByTimestamp``)."""
    return _partition_map(name, value.strip(), check_key, key_form, "time", lambda when: when >= 0,
                          "must be epoch milliseconds (>= 0)")


def wanted_time(timestamp: int | None, by_partition: Mapping[str, int] | None, key: str) -> int | None:
    """The time a partition starts (or ends) at, if any: one ``timestamp`` for all partitions wins over a
    per-partition map, as in Spark's Kafka source."""
    if timestamp is not None:
        return timestamp
    return None if by_partition is None else by_partition.get(key)


def wanted_offset(spec: OffsetSpec, key: str, *, default: int) -> str | int:
    """What ``spec`` asks for partition ``key``: ``"earliest"``, ``"latest"``, another word, or an offset.

    A JSON spec without ``key`` asks for ``default`` (``EARLIEST`` or ``LATEST``); -2 and -1 become words.
    """
    wanted = spec.get(key, default) if isinstance(spec, dict) else spec
    if wanted in ("earliest", EARLIEST):
        return "earliest"
    if wanted in ("latest", LATEST):
        return "latest"
    return wanted


def resolve_offset(spec: OffsetSpec, key: str, *, earliest: int, latest: int, default: int) -> int:
    """The offset ``spec`` means for ``key`` in a partition spanning ``[earliest, latest)``."""
    wanted = wanted_offset(spec, key, default=default)
    if wanted == "earliest":
        return earliest
    if wanted == "latest":
        return latest
    return int(wanted)


def parse_offsets(raw: Any, *, is_key: Callable[[str], bool] = lambda key: True) -> Offsets | None:
    """A source offset as Spark reports it (JSON text or dict) -> ``{partition key: offset}``.

    ``None`` for anything that is not such a map (empty, unparsable, a key ``is_key`` refuses, a
    value that is not an int), e.g. another source's offset in the same progress event.
    """
    if raw is None:
        return None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    if not isinstance(raw, Mapping) or not raw:
        return None
    out: Offsets = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not is_key(key) or isinstance(value, bool) or not isinstance(value, int):
            return None
        out[key] = value
    return out


FROM_MARK = "#from"
"""``end["<key>#from"]``: where a batch starts ``key`` when that is not the previous batch's end.

Spark logs only batch ends, so whatever moves a partition's start lives in the end offsets themselves and
a batch Spark replays after a restart reads exactly the ranges the first run planned: a new query's first
batch (Spark replays a batch 0 from a fresh ``initialOffset()``, whose answer can differ: ``latest`` has
moved on, a group may assign other partitions), a partition joining the query, a jump past offsets that
are gone, a regained partition jumping to its group's offset. Keys with ``#`` are no partitions: no
broker's topic names may contain it."""

SKIP_MARK = "#skip"
"""Older checkpoints' mark of a range skipped, not read: ``end["<key>#skip"] == end[key]``. Read as a
``#from`` mark equal to the end (the same meaning); never written any more."""

LAST_MARK = "#last"
"""``end["<key>#last"]``: the fingerprint of the last message of ``key`` below ``end[key]`` (the one this
query read last there), taken when the batch was planned, while the broker still held it.

A broker that loses acknowledged messages (TubeMQ after a kill -9 with its memory cache on) gives their offsets
to new messages; once it has been refilled past the query's offset, nothing in the offsets themselves shows it.
The fingerprint does: :class:`tubespark.spark.stream_engine.StreamEngine` reads the message there again after
a restart and when the broker may have restarted, and a different one means the offsets were reused. Old
checkpoints have no such mark: their partitions are checked from the first batch that records one."""

HISTORY_MARK = "#last@"
"""``end["<key>#last@<offset>"]``: an older ``#last`` fingerprint, of the last message below ``offset`` (an earlier
batch end of ``key``), or ``-1`` where the query began reading ``key`` (:data:`tubespark.spark.marks.START`).

A bounded, logarithmically spaced history (:mod:`tubespark.spark.marks`): after a broker lost acknowledged
messages and reused their offsets, the highest mark it still holds unchanged is where the query resumes with
failOnDataLoss=false, so the new messages at the reused offsets are read. Checkpoints written before these marks
load with none (and get them from their next batch on); code from before them ignores them (keys with ``#``)."""

ORIGIN_MARK = "#origin"
"""``end["<scope>#origin"]``: what identifies the incarnation of the partitions of ``scope`` this query reads
(TubeMQ: a topic's deployment on one broker, ``"<brokerId>:<topic>"``, marked by its creation time at the
master), taken when a batch was planned.

A checkpoint written against another cluster, or before its topic was deleted and re-created, holds offsets
that mean nothing there; to the partitions' bounds and ``#last`` fingerprints it looks exactly like a broker
that lost acknowledged messages. The mark tells the two apart: :mod:`tubespark.spark.origins` compares it with
the topic's origin now on a restart's first plan and before reporting any loss, and a different one fails
the query with :class:`tubespark.errors.ForeignCheckpointError`. Checkpoints without the mark load as before
(their scopes are marked from their next batch on); a scope is never a partition key (it holds ``#``)."""


DEFER_MARK = "#deferrals"
"""``end["#deferrals"]``: the token of the directory where this batch's read tasks may have reported a range they
left unread (:mod:`tubespark.core.deferred`); absent when they could not (no ``deferredRangesPath``). The next
plan takes those reports from there, and without the directory it cannot count the batch as read. A query keeps
one token for life (drawn at its first deferring plan), so a restarted driver finds the same directory and no
other query finds it. Older checkpoints have none: they never deferred into a directory of this kind."""


@dataclass(frozen=True)
class BatchOffsets:
    """A batch end as Spark checkpoints it: each partition's offset, plus the ``#from``, ``#last``, ``#last@``,
    ``#origin`` and ``#deferrals`` marks.

    ``positions`` holds every partition the query knows (where it stands on each); ``starts`` holds the
    partitions this batch reads from somewhere other than the previous end. :meth:`parse` and
    :meth:`to_spark` are the one place the marks are read and written.
    """

    positions: Offsets
    starts: Offsets = field(default_factory=dict)
    fingerprints: Offsets = field(default_factory=dict)
    """``{key: fingerprint}`` of the last message below each position (``#last``; see :data:`LAST_MARK`)."""
    origins: Offsets = field(default_factory=dict)
    """``{scope: mark}`` of the partitions' origins (``#origin``; see :data:`ORIGIN_MARK`)."""
    history: dict[str, dict[int, int]] = field(default_factory=dict)
    """``{key: {offset: fingerprint}}``, older marks below each position (``#last@``; see :data:`HISTORY_MARK`)."""
    deferrals: int | None = None
    """The token of the query's deferred-range reports (``#deferrals``; see :data:`DEFER_MARK`)."""

    @classmethod
    def parse(cls, raw: Mapping[str, int] | None) -> BatchOffsets:
        positions: Offsets = {}
        starts: Offsets = {}
        skips: Offsets = {}
        fingerprints: Offsets = {}
        origins: Offsets = {}
        deferrals: int | None = None
        history: dict[str, dict[int, int]] = {}
        for key, offset in (raw or {}).items():
            if key == DEFER_MARK:
                deferrals = offset
            elif HISTORY_MARK in key:
                base, _, at = key.rpartition(HISTORY_MARK)
                if at.isascii() and at.isdigit():  # anything else is no mark of ours: ignored like other unknown marks
                    history.setdefault(base, {})[int(at)] = offset
            elif key.endswith(ORIGIN_MARK):
                origins[key[:-len(ORIGIN_MARK)]] = offset
            elif key.endswith(LAST_MARK):
                fingerprints[key[:-len(LAST_MARK)]] = offset
            elif key.endswith(FROM_MARK):
                starts[key[:-len(FROM_MARK)]] = offset
            elif key.endswith(SKIP_MARK):
                skips[key[:-len(SKIP_MARK)]] = offset
            elif "#" not in key:
                positions[key] = offset
        return cls(positions, {**skips, **starts}, fingerprints, origins, history=history, deferrals=deferrals)

    def to_spark(self) -> Offsets:
        return {**self.positions, **{key + FROM_MARK: offset for key, offset in self.starts.items()},
                **{key + LAST_MARK: value for key, value in self.fingerprints.items() if key in self.positions},
                **{scope + ORIGIN_MARK: mark for scope, mark in self.origins.items()},
                **{f"{key}{HISTORY_MARK}{offset}": value for key, marks in self.history.items() if key in self.positions
                   for offset, value in sorted(marks.items())},
                **({} if self.deferrals is None else {DEFER_MARK: self.deferrals})}

    def ranges(self, previous: Mapping[str, int]) -> dict[str, tuple[int, int]]:
        """``{key: (low, high)}`` this batch reads after a batch ending at ``previous`` (positions only):
        each partition from its ``#from`` mark or its previous offset up to its position; empty ones left out."""
        out: dict[str, tuple[int, int]] = {}
        for key, high in sorted(self.positions.items()):
            low = self.starts.get(key, previous.get(key))
            if low is not None and high > low:
                out[key] = (low, high)
        return out
