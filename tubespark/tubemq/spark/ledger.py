"""What a TubeMQ stream knows about each partition of its group, and the rules for where one starts.

The master assigns partitions to the group's members; a partition the query knows is in one of the
states of :class:`Assignment`, kept here explicitly rather than spread over the reader. The start
rules (docs/tubemq/guide.md#where-each-partition-starts):

(a) a partition in the checkpoint Spark restarts from resumes at the checkpoint's offset (the engine's);
(b) a new query's initial partitions, those the master assigns in its first rebalance (including ones a
    stale registration still occupies on the broker, held later), start at ``startingOffsets``;
(c) a partition assigned by a later rebalance starts at the group's committed offset (at-least-once: at
    most the batch in flight at the hand-over is read twice);
(d) a partition this query held, lost and got back resumes at the group's committed offset when that is
    ahead of the query's own last end, else at its own;
(e) ``startingOffsets=group`` uses the group's committed offsets for the initial partitions.

Nothing here talks to a broker: the reader passes what the group session reports and a resolver for
``startingOffsets``, so the rules are tested without a cluster. Each partition's :class:`Entry` is the TubeMQ
part of its one state record (:attr:`tubespark.spark.partition_state.PartitionState.extra`).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tubespark.spark.offset_rules import OffsetUnits
from tubespark.spark.offsets import Offsets
from tubespark.spark.partition_state import PartitionTable
from tubespark.tubemq.wire.constants import INDEX_RECORD_SIZE

log = logging.getLogger(__name__)

OFFSET_UNITS = OffsetUnits(INDEX_RECORD_SIZE, "max offset")
"""TubeMQ offsets are byte positions in the partition's index, one 28-byte record per message: a startingOffsets
or endingOffsets number must be a multiple of 28 (tubespark.spark.offset_rules)."""

PARTITION_LISTING = ("keys are brokerId:topic:partitionId; the master's web API lists a topic's partitions "
                     "(admin_query_topic_deploy_info), and a partition of a broker that is down is known only "
                     "from it, with masterWebUrl set")
"""How a user lists a TubeMQ topic's partitions, for an error that names a partition the topic does not have."""


class Assignment(enum.Enum):
    """Where a partition of the query stands this trigger."""

    UNRESOLVED = "its start is not known yet"  # initial partition (rule b) whose startingOffsets awaits its broker
    NOT_HELD = "assigned, not registered on its broker yet"
    HELD = "held: readable"
    OFFLINE = "its broker is offline"
    REVOKED = "assigned to another member of the group"


@dataclass
class Entry:
    state: Assignment
    initial: bool = False
    """Of the new query's first assignment and never held yet: it keeps its ``startingOffsets`` start even
    while the master moves it away (rule b)."""
    own_end: int | None = None
    """REVOKED: where this query had got to when it lost the partition (rule d)."""
    why: str = ""


Resolver = Callable[[str], "int | None"]
"""Where a new query starts a partition (``startingOffsets``, a start time); ``None``: not known yet."""


class PartitionLedger:
    """The query's partitions by key, with the start rules as methods."""

    def __init__(self, table: PartitionTable | None = None) -> None:
        self.table = table if table is not None else PartitionTable()
        self._awaiting_first = False  # a new query that saw no assignment yet: the first one is initial

    def entry(self, key: str) -> Entry | None:
        record = self.table.get(key)
        return None if record is None or not isinstance(record.extra, Entry) else record.extra

    def _set(self, key: str, entry: Entry) -> None:
        self.table[key].extra = entry

    def state(self, key: str) -> Assignment | None:
        entry = self.entry(key)
        return None if entry is None else entry.state

    def mark(self, key: str, state: Assignment, why: str = "") -> None:
        entry = self.entry(key)
        if entry is None:
            entry = Entry(state)
            self._set(key, entry)
        entry.state, entry.why = state, why or state.value
        if state is Assignment.HELD:
            entry.initial = False

    # --- rule (b)/(e): a new query -----------------------------------------------------------------

    def start_query(self, assigned: Iterable[str], held: Iterable[str], resolve: Resolver) -> Offsets:
        """A new query's initial partitions and their starts; unresolved ones are resolved when they join."""
        held = set(held)
        offsets: Offsets = {}
        assigned = sorted(assigned)
        self._awaiting_first = not assigned
        for key in assigned:
            start = resolve(key)
            self._set(key, Entry(Assignment.HELD if key in held else Assignment.NOT_HELD,
                                 initial=key not in held))
            if start is None:
                self.mark(key, Assignment.UNRESOLVED)
            else:
                offsets[key] = start
        return offsets

    def first_assignment(self, assigned: Iterable[str], start: Offsets) -> None:
        """The master's first assignment arrived after ``initialOffset``: its partitions are still initial."""
        if not self._awaiting_first:
            return
        assigned = [key for key in assigned if key not in start]
        if assigned:
            self._awaiting_first = False
            for key in assigned:
                self._set(key, Entry(Assignment.UNRESOLVED, initial=True))

    # --- partitions joining the query (rules b-e) ------------------------------------------------

    def join_offset(self, key: str, stored_offset: int | None, resolve: Resolver) -> int | None:
        """Where a partition not in the offsets yet starts: ``startingOffsets`` for an initial one (rule b),
        else the group's committed offset (rule c); ``None`` while that cannot be known."""
        entry = self.entry(key)
        if entry is not None and entry.state is Assignment.UNRESOLVED:
            first, rule = resolve(key), "startingOffsets (initial partition)"
        elif stored_offset is None:
            return None
        else:
            first, rule = stored_offset, "the group's committed offset (assigned by a later rebalance)"
        if first is not None:
            self.mark(key, Assignment.NOT_HELD if stored_offset is None else Assignment.HELD)
            log.info("partition %s joins the query at offset %d: %s", key, first, rule)
        return first

    # --- rule (d): lost and regained ------------------------------------------------------------

    def keeps_start(self, key: str) -> bool:
        """An unassigned partition whose offset stays as it is without asking the master: an initial one
        never held (rule b) or one already known to be with another member (rule d)."""
        entry = self.entry(key)
        return entry is not None and (entry.initial or entry.state is Assignment.REVOKED)

    def revoke(self, key: str, offset: int) -> None:
        self._set(key, Entry(Assignment.REVOKED, own_end=offset))
        log.info("partition %s is no longer assigned to this query at offset %d", key, offset)

    def regain(self, key: str, own: int, stored_offset: int) -> int | None:
        """A partition held again: the group's offset when another member read on past ``own`` (rule d)."""
        entry = self.entry(key)
        if entry is None or entry.state is not Assignment.REVOKED:
            return None
        self.mark(key, Assignment.HELD)
        if stored_offset > own:
            log.info("partition %s is back, and its group read on to %d: resuming there, not at this query's %d",
                     key, stored_offset, own)
            return stored_offset
        return None

    def forget(self, key: str) -> None:
        record = self.table.get(key)
        if record is not None:
            record.extra = None
