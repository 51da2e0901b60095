"""The shared origin marks (tubespark/spark/origins.py): when a checkpoint's topic incarnation is compared,
how often a broker is asked, and what a loss says when the incarnation cannot be compared."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import pytest

from tubespark.errors import BrokerConnectionError, ForeignCheckpointError
from tubespark.spark import origins
from tubespark.spark.origins import Origin, OriginMarks
from tubespark.spark.planning import Bounds


class _Cluster:
    """What a broker's ``origins`` hook answers: scope -> mark, or an error; counts the asks."""

    def __init__(self, marks: dict[str, int]) -> None:
        self.marks = marks
        self.down = False
        self.asked: list[list[str]] = []

    def ask(self, scopes: Collection[str]) -> Mapping[str, Origin]:
        self.asked.append(sorted(scopes))
        if self.down:
            raise BrokerConnectionError("web API down")
        return {s: Origin(m, f"at {m}") for s, m in self.marks.items() if s in scopes}


    advice = "Set the web API to tell."

    def scope(self, key: str) -> str | None:
        return key.rsplit(":", 1)[0]

    def describe(self, mark: int) -> str:
        return f"at {mark}"

    def name(self, scope: str) -> str:
        return f"topic {scope}"


def _marks(cluster: _Cluster) -> OriginMarks:
    return OriginMarks(cluster)


def test_recorded_marks_are_compared_once_per_process_and_carried():
    cluster = _Cluster({"1:t": 5, "1:u": 7})
    marks = _marks(cluster)
    marks.check(["1:t:0", "1:t:1", "1:u:0"], {"1:t": 5, "1:u": 7})
    marks.check(["1:t:0", "1:t:1", "1:u:0"], {"1:t": 5, "1:u": 7})
    assert cluster.asked == [["1:t", "1:u"]]  # one ask for both scopes, not again once verified
    assert marks.marks(["1:t:0", "1:u:0"], {"1:t": 5, "1:u": 7}) == {"1:t": 5, "1:u": 7}
    assert len(cluster.asked) == 1


def test_a_different_mark_is_a_foreign_checkpoint_naming_both_times():
    marks = _marks(_Cluster({"1:t": 6}))
    with pytest.raises(ForeignCheckpointError, match=r"^use a new checkpointLocation: .*\(topic 1:t: the "
                                                     r"checkpoint's was created at 5, the one there now at 6\)"):
        marks.check(["1:t:0"], {"1:t": 5})


def test_a_scope_that_cannot_be_learnt_is_asked_again_only_after_a_while(monkeypatch):
    cluster = _Cluster({"1:t": 5})
    cluster.down = True
    marks = _marks(cluster)
    clock = [1000.0]
    monkeypatch.setattr(origins.time, "monotonic", lambda: clock[0])
    marks.check(["1:t:0"], {"1:t": 5})
    assert marks.marks(["1:t:0", "2:t:0"], {"1:t": 5}) == {"1:t": 5}  # carried; 2:t asked once, failed
    marks.check(["1:t:0"], {"1:t": 5})
    assert marks.marks(["2:t:0"], {}) == {}
    assert cluster.asked == [["1:t"], ["2:t"]]
    cluster.down = False
    clock[0] += origins.RETRY_S
    assert marks.marks(["2:t:0"], {}) == {}  # asked again: the cluster does not know 2:t
    cluster.marks["2:t"] = 8
    assert marks.marks(["2:t:0"], {}) == {}  # not asked again so soon
    clock[0] += origins.RETRY_S
    assert marks.marks(["2:t:0"], {}) == {"2:t": 8}
    assert cluster.asked == [["1:t"], ["2:t"], ["2:t"], ["2:t"]]


def test_a_loss_note_asks_afresh_and_says_how_to_tell_when_it_cannot():
    cluster = _Cluster({"1:t": 5})
    marks = _marks(cluster)
    marks.check(["1:t:0"], {"1:t": 5})
    empty = {"1:t:0": Bounds(None, 0), "1:t:1": Bounds(0, 0)}
    assert marks.loss_note("1:t:0", {"1:t": 5}, empty) == ("", "")  # the same incarnation: a real loss
    cluster.marks["1:t"] = 6  # re-created under the running query: asked again at the loss
    with pytest.raises(ForeignCheckpointError):
        marks.loss_note("1:t:0", {"1:t": 5}, empty)
    cluster.down = True
    lead, note = marks.loss_note("1:t:0", {"1:t": 5}, empty)
    assert lead.startswith("every partition of topic 1:t is empty") and note == ""
    assert "its origin cannot be learnt now (web API down). Set the web API to tell." in lead
    lead, note = marks.loss_note("1:t:0", {}, {**empty, "1:t:1": Bounds(None, 28)})  # not all empty, no mark
    assert lead == "" and note.startswith(" A checkpoint written against another cluster")
    assert "this checkpoint records no origin for it" in note


def test_a_broker_without_scopes_keeps_no_marks_and_adds_nothing_to_a_loss():
    marks = OriginMarks(None)
    marks.check(["1:t:0"], {"1:t": 5})
    assert marks.marks(["1:t:0"], {}) == {} and marks.loss_note("1:t:0", {}, {"1:t:0": Bounds(None, 0)}) == ("", "")
