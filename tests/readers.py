"""The readers of each format as tests build them: the shared engines over each broker's object.

Spark builds them through each data source (``streamReader``, ``reader``); these functions build the same from
parsed options, for tests that drive a reader's calls one by one.
"""

from __future__ import annotations

from typing import Any

from tubespark.rocketmq.spark.adapter import PullAdapter
from tubespark.spark.batch_engine import BatchEngine
from tubespark.spark.stream_engine import StreamEngine
from tubespark.tank.spark.adapter import TankAdapter
from tubespark.tubemq.spark.adapter import TubeAdapter


def TubeStreamReader(options: Any) -> StreamEngine:  # noqa: N802  # reads like the class it builds
    return StreamEngine(TubeAdapter(options))


def TankStreamReader(options: Any) -> StreamEngine:  # noqa: N802
    return StreamEngine(TankAdapter(options))


def PullStreamReader(options: Any) -> StreamEngine:  # noqa: N802
    return StreamEngine(PullAdapter(options))


def TubeBatchReader(options: Any) -> BatchEngine:  # noqa: N802
    return BatchEngine(TubeAdapter(options, batch=True))


def TankBatchReader(options: Any) -> BatchEngine:  # noqa: N802
    return BatchEngine(TankAdapter(options, batch=True))


def RocketMQBatchReader(options: Any) -> BatchEngine:  # noqa: N802
    return BatchEngine(PullAdapter(options, batch=True))
