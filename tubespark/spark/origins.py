"""A checkpoint from another cluster, or from an earlier incarnation of a topic, told apart from data loss.

A cluster restarted empty (or another cluster with the same topic names, or a topic deleted and re-created)
gives a restarted stream partitions whose bounds sit below the checkpoint's offsets, or past them with other
messages there: to the offsets and their ``#last`` fingerprints that is exactly a broker that lost
acknowledged messages. Calling it data loss would be wrong twice: nothing was lost, and the advice
(``failOnDataLoss=false``) would make the query read the new topic from wherever the old offsets point.

So each batch end records, per *scope* (a broker's unit of incarnation: TubeMQ's topic deployment on one
broker), a mark of the scope's origin (:data:`tubespark.spark.offsets.ORIGIN_MARK`; TubeMQ: the
deployment's creation time at the master). :class:`OriginMarks` compares the recorded marks with the
scopes' origins now: on a restart's first plan, and again, freshly asked, before any loss of a scope is
reported (a topic re-created under a running query). A different origin fails with
:class:`ForeignCheckpointError`, whatever ``failOnDataLoss`` says. Where the origin cannot be compared (the
checkpoint records none, or the broker cannot say now), a loss stays a loss, and its message says that a
foreign checkpoint looks the same and how to tell; when every partition of the scope is empty, that comes
first, as the likelier cause.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from tubespark.errors import ForeignCheckpointError, TubeSparkError
from tubespark.spark.offsets import Offsets
from tubespark.spark.planning import Bounds

log = logging.getLogger(__name__)

RETRY_S = 300.0
"""How long a scope whose origin could not be learnt waits before it is asked again (each ask may wait out a
web request timeout; a loss report asks regardless)."""


@dataclass(frozen=True)
class Origin:
    """One incarnation of a scope: ``mark`` goes into the offsets, ``created`` into messages."""

    mark: int
    created: str
    """When this incarnation was created, in words (``2026-11-25 07:40:12 (the master's clock)``)."""


class OriginSource(Protocol):
    """What a broker whose topics have incarnations tells the :class:`OriginMarks` (TubeMQ: a topic's deployment
    on one broker, created at the master at a known time)."""

    advice: str
    """How a user tells a foreign checkpoint from a loss when the marks cannot (what to set, what to compare)."""

    def scope(self, key: str) -> str | None:
        """A partition key's scope (what is created and deleted as one), ``None`` when it keeps no marks."""

    def ask(self, scopes: Collection[str]) -> Mapping[str, Origin]:
        """The current :class:`Origin` of each of ``scopes`` it can tell (one left out: unknown, e.g. not
        configured); raises a :class:`TubeSparkError` when it cannot ask now."""

    def describe(self, mark: int) -> str:
        """A recorded mark in words."""

    def name(self, scope: str) -> str:
        """A scope in words (``topic demo_events on broker 1``)."""


class _NoOrigins:
    """A broker without origins: no scope, so no marks and no checks."""

    advice = ""

    def scope(self, key: str) -> str | None:
        return None

    def ask(self, scopes: Collection[str]) -> Mapping[str, Origin]:
        return {}

    def describe(self, mark: int) -> str:
        return str(mark)

    def name(self, scope: str) -> str:
        return scope


class OriginMarks:
    """A stream's origin marks: which it records, and the checks that raise :class:`ForeignCheckpointError`,
    over a broker's :class:`OriginSource` (``None``: the broker keeps no marks)."""

    def __init__(self, source: OriginSource | None) -> None:
        source = source or _NoOrigins()
        self.scope_of = source.scope
        self.ask = source.ask
        self.describe = source.describe
        self.name = source.name
        self.advice = source.advice
        self.known: dict[str, Origin] = {}  # origins learnt in this process
        self.verified: set[str] = set()  # scopes whose recorded mark matched the origin now
        self._failed: dict[str, tuple[float, str]] = {}  # scope -> (when, why) its origin could not be learnt

    def scopes(self, keys: Iterable[str]) -> dict[str, list[str]]:
        """Scope -> its keys among ``keys`` (keys without a scope left out)."""
        out: dict[str, list[str]] = {}
        for key in keys:
            scope = self.scope_of(key)
            if scope is not None:
                out.setdefault(scope, []).append(key)
        return out

    def check(self, keys: Iterable[str], recorded: Mapping[str, int]) -> None:
        """A plan's start: each scope of ``keys`` with a recorded mark not yet verified in this process is
        compared with its origin now (once; again after :data:`RETRY_S` when it could not be learnt)."""
        now = time.monotonic()
        due = sorted(scope for scope in self.scopes(keys) if scope in recorded and scope not in self.verified
                     and now - self._failed.get(scope, (-RETRY_S, ""))[0] >= RETRY_S)
        if due:
            self._compare(due, recorded, self._learn(due))

    def marks(self, keys: Iterable[str], recorded: Mapping[str, int]) -> Offsets:
        """The marks of a batch end over ``keys``: a recorded mark is carried (it was checked, or cannot be
        yet); a scope without one is marked with its origin now, learnt once (asked again after
        :data:`RETRY_S` while it cannot be)."""
        out: Offsets = {}
        now = time.monotonic()
        wanted = []
        for scope in self.scopes(keys):
            if scope in recorded:
                out[scope] = recorded[scope]
            elif scope in self.known:
                out[scope] = self.known[scope].mark
            elif now - self._failed.get(scope, (-RETRY_S, ""))[0] >= RETRY_S:
                wanted.append(scope)
        if wanted:
            learnt = self._learn(sorted(wanted))
            out.update({scope: origin.mark for scope, origin in learnt.items()})
        return dict(sorted(out.items()))

    def loss_note(self, key: str, recorded: Mapping[str, int], bounds: Mapping[str, Bounds]) -> tuple[str, str]:
        """Before a loss of ``key`` is reported: raises :class:`ForeignCheckpointError` when its scope's origin
        differs from the recorded one (asked afresh: the topic may have been re-created under the running
        query). Otherwise ``(lead, note)`` for the loss message: both empty when the origin was compared and
        is the same (a real loss); else the note that a foreign checkpoint looks the same, as ``lead`` when
        every partition of the scope in ``bounds`` is empty (the likelier cause), else as ``note``."""
        scope = self.scope_of(key)
        if scope is None:
            return "", ""
        if scope in recorded:
            learnt = self._learn([scope])
            self._compare([scope], recorded, learnt)
            if scope in learnt:
                return "", ""
            why = f"its origin cannot be learnt now ({self._failed.get(scope, (0.0, 'unknown'))[1]})"
        else:
            why = ("this checkpoint records no origin for it (written by an older version, or while it could not "
                   "be learnt)")
        what = self.name(scope)
        told = f"tubespark cannot compare the checkpoint with {what} here: {why}. {self.advice}"
        keys = self.scopes(bounds).get(scope, [])
        if keys and all(bounds[k].high == 0 and bounds[k].low in (None, 0) for k in keys):
            return (f"every partition of {what} is empty while this query's checkpoint stands past their start. "
                    f"If the checkpoint was written against another cluster or before the topic was deleted and "
                    f"re-created (e.g. a local cluster restarted empty), nothing was lost: use a new "
                    f"checkpointLocation. {told} Otherwise the broker lost what it stored: "), ""
        return "", (f" A checkpoint written against another cluster or before the topic was deleted and re-created "
                    f"looks the same from here (then nothing was lost: use a new checkpointLocation); {told}")

    def _learn(self, scopes: Collection[str]) -> dict[str, Origin]:
        """The origins of ``scopes`` now (remembered); an error or a scope left out is remembered as failed."""
        try:
            learnt = {scope: origin for scope, origin in self.ask(scopes).items() if scope in scopes}
        except TubeSparkError as exc:
            log.info("cannot learn the origin of %s (checked later): %s", ", ".join(scopes), exc)
            learnt, why = {}, str(exc)
        else:
            why = "the cluster does not know it"
        now = time.monotonic()
        for scope in scopes:
            if scope in learnt:
                self.known[scope] = learnt[scope]
                self._failed.pop(scope, None)
            else:
                self._failed[scope] = (now, why)
        return learnt

    def _compare(self, scopes: Iterable[str], recorded: Mapping[str, int], learnt: Mapping[str, Origin]) -> None:
        foreign = [(scope, origin) for scope, origin in ((s, learnt.get(s)) for s in scopes)
                   if origin is not None and origin.mark != recorded[scope]]
        if foreign:
            detail = "; ".join(f"{self.name(scope)}: the checkpoint's was created {self.describe(recorded[scope])}, "
                               f"the one there now {origin.created}" for scope, origin in foreign)
            raise ForeignCheckpointError(
                f"use a new checkpointLocation: this query's checkpoint belongs to another cluster or to an "
                f"earlier incarnation of the topic ({detail}). The topic was deleted and re-created, or the "
                f"query now reads another cluster (a local cluster restarted empty) with the same topic names. "
                f"Its offsets mean nothing here and nothing was lost, so failOnDataLoss does not apply: start "
                f"with a new checkpointLocation (startingOffsets decides where), or point the query at the "
                f"cluster the checkpoint belongs to")
        self.verified.update(scope for scope in scopes if scope in learnt)
