"""The pure planning step every broker's stream reader shares (tubespark/spark/planning.py), table by table,
and the offset marks of tubespark/spark/offsets.py that carry a plan through Spark's checkpoint."""

from __future__ import annotations

import pytest

from tubespark.spark.offsets import BatchOffsets
from tubespark.spark.planning import Admission, Bounds, BoundsPolicy, Resolution, plan_batch

B = Bounds


class WaitAbove(BoundsPolicy):
    """RocketMQ's rule: a serving replica behind the query is waited for, the offset never moves back."""

    def above(self, key: str, start: int, bounds: Bounds) -> Resolution:
        return Resolution(None, "replica behind")


CASES = [
    # id, start, bounds, kwargs, expected end, expected starts, expected losses [(key, offset, to)]
    ("reads everything", {"a": 0, "b": 5}, {"a": B(0, 10), "b": B(0, 5)}, {}, {"a": 10, "b": 5}, {}, []),
    ("max rows shared by backlog", {"a": 0, "b": 0}, {"a": B(0, 30), "b": B(0, 10)},
     {"admission": Admission(max_rows=8)}, {"a": 6, "b": 2}, {}, []),
    ("a partition without bounds stays and plans nothing", {"a": 3, "b": 0}, {"b": B(0, 4)}, {},
     {"a": 3, "b": 4}, {}, []),
    ("AvailableNow target caps the end", {"a": 0}, {"a": B(0, 50)}, {"target": {"a": 20}}, {"a": 20}, {}, []),
    ("a joining partition is recorded at its first offset, read from the next batch", {"a": 0},
     {"a": B(0, 1), "n": B(4, 9)}, {"joined": {"n": 4}}, {"a": 1, "n": 4}, {}, []),
    ("a jump skips to the group's offset and reads on", {"a": 10}, {"a": B(0, 40)}, {"jumps": {"a": 30}},
     {"a": 40}, {"a": 30}, []),
    ("retention: below the first offset is a loss", {"a": 2}, {"a": B(5, 9)}, {}, {"a": 9}, {"a": 5}, [("a", 2, 5)]),
    ("a broker that went back: above the end is a loss", {"a": 12}, {"a": B(0, 7)}, {}, {"a": 7}, {"a": 7},
     [("a", 12, 7)]),
    ("a policy that waits keeps the offset", {"a": 12}, {"a": B(0, 7)}, {"policy": WaitAbove()}, {"a": 12}, {}, []),
    ("record size: offsets advance 28 per message", {"a": 0}, {"a": B(0, 280)},
     {"admission": Admission(max_rows=4), "record_size": 28}, {"a": 112}, {}, []),
    ("minOffsetsPerTrigger waits while the delay has not passed", {"a": 0}, {"a": B(0, 3)},
     {"admission": Admission(min_rows=5, max_delay_s=60), "since_last_batch_s": 1}, {"a": 0}, {}, []),
    ("minOffsetsPerTrigger gives up waiting after maxTriggerDelay", {"a": 0}, {"a": B(0, 3)},
     {"admission": Admission(min_rows=5, max_delay_s=60), "since_last_batch_s": 61}, {"a": 3}, {}, []),
    ("AvailableNow never waits for minOffsetsPerTrigger", {"a": 0}, {"a": B(0, 3)},
     {"admission": Admission(min_rows=5, max_delay_s=60), "target": {"a": 3}}, {"a": 3}, {}, []),
    ("maxBytesPerTrigger turns bytes into messages", {"a": 0, "b": 0}, {"a": B(0, 100), "b": B(0, 100)},
     {"admission": Admission(max_bytes=1000), "sizes": lambda begin, backlog: {"a": 10.0, "b": 10.0}},
     {"a": 50, "b": 50}, {}, []),
    ("maxBytesPerTrigger admits one message at least", {"a": 0}, {"a": B(0, 10)},
     {"admission": Admission(max_bytes=1), "sizes": lambda begin, backlog: {"a": 500.0}}, {"a": 1}, {}, []),
    ("the smaller of rows and bytes wins", {"a": 0}, {"a": B(0, 100)},
     {"admission": Admission(max_rows=5, max_bytes=10_000), "sizes": lambda begin, backlog: {"a": 1.0}},
     {"a": 5}, {}, []),
]


@pytest.mark.parametrize(("start", "bounds", "kwargs", "end", "starts", "losses"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_plan_batch(start, bounds, kwargs, end, starts, losses):
    kwargs = {"admission": Admission(), **kwargs}
    plan = plan_batch(start, bounds, **kwargs)
    assert plan.end == end
    assert plan.starts == starts
    assert [(loss.key, loss.offset, loss.resumes_at) for loss in plan.losses] == losses


def test_a_plan_that_moves_nothing_says_so():
    assert not plan_batch({"a": 5}, {"a": B(0, 5)}, admission=Admission()).moves({"a": 5})
    assert plan_batch({"a": 5}, {"a": B(0, 6)}, admission=Admission()).moves({"a": 5})


def test_idle_partitions_say_why():
    plan = plan_batch({"a": 1, "b": 1}, {"b": B(0, 1)}, admission=Admission(), unavailable={"a": "broker down"})
    assert plan.idle == {"a": "broker down"}


def test_marks_round_trip_through_sparks_offsets():
    batch = BatchOffsets({"1:t:0": 56, "1:t:1": 28}, {"1:t:1": 0})
    raw = batch.to_spark()
    assert raw == {"1:t:0": 56, "1:t:1": 28, "1:t:1#from": 0}
    assert BatchOffsets.parse(raw) == batch


def test_last_read_fingerprints_round_trip_and_old_checkpoints_have_none():
    batch = BatchOffsets({"a": 56, "b": 28}, {"b": 0}, {"a": 123})
    raw = batch.to_spark()
    assert raw == {"a": 56, "b": 28, "b#from": 0, "a#last": 123}
    assert BatchOffsets.parse(raw) == batch
    assert BatchOffsets.parse({"a": 56, "b": 28}).fingerprints == {}  # a checkpoint from before #last
    assert BatchOffsets({"a": 1}, fingerprints={"gone": 5}).to_spark() == {"a": 1}  # only partitions it holds


def test_origin_marks_round_trip_and_are_no_partitions():
    batch = BatchOffsets({"1:t:0": 56}, {}, {"1:t:0": 9}, {"1:t": 20261125074442})
    raw = batch.to_spark()
    assert raw == {"1:t:0": 56, "1:t:0#last": 9, "1:t#origin": 20261125074442}
    assert BatchOffsets.parse(raw) == batch and BatchOffsets.parse(raw).positions == {"1:t:0": 56}
    assert BatchOffsets.parse({"1:t:0": 56}).origins == {}  # a checkpoint from before #origin


def test_ranges_start_at_the_mark_else_at_the_previous_end():
    batch = BatchOffsets({"a": 10, "b": 20, "c": 5, "d": 7}, {"b": 15, "d": 7})
    assert batch.ranges({"a": 4, "b": 2, "c": 5, "d": 3}) == {"a": (4, 10), "b": (15, 20)}


def test_an_older_checkpoints_skip_mark_skips_the_range():
    batch = BatchOffsets.parse({"a": 30, "a#skip": 30})
    assert batch.ranges({"a": 10}) == {}
    assert batch.to_spark() == {"a": 30, "a#from": 30}
