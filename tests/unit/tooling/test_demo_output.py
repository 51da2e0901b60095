"""The demo's lag line (issue 25 item 11: ``p0=3, p10000=0`` named partitions nobody had explained)."""

from __future__ import annotations

from tubespark_testbed.demo import format_group_lag


def test_lag_line_totals_and_explains_partition_ids() -> None:
    answer = {"result": True, "dataSet": [{"topicName": "demo_events", "subInfo": [{"offsets": [
        {"partitionId": 10000, "offsetLag": 0}, {"partitionId": 0, "offsetLag": 84},
        {"partitionId": 30000, "offsetLag": 28}, {"partitionId": 20000, "offsetLag": 0}]}]}]}
    assert format_group_lag(answer) == ("group lag: 4 messages behind (by partition id, store*10000+partition: "
                                        "0: 3, 10000: 0, 20000: 0, 30000: 1)")


def test_a_group_that_never_committed() -> None:
    assert format_group_lag({"result": True, "dataSet": []}) == "group lag: not committed yet"
