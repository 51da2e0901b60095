"""What a batch read does with partitions it should cover but cannot read now (their broker is down).

A batch read that planned only what its brokers serve at this moment would return part of the data
without a word (issue 23 part 2). Each broker's reader finds the partitions that are missing from its
own evidence (TubeMQ: the master's configuration; RocketMQ: the routes this process was given and the
offsets the user named); this module is the one rule for what follows, ``onUnavailablePartitions``:
``fail`` raises :class:`~tubespark.errors.PartitionsUnavailableError` naming each broker and its
partitions before anything is read, ``skip`` logs them as left out and lets the read go on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TypeVar

from tubespark.errors import PartitionsUnavailableError

log = logging.getLogger(__name__)

BrokerId = TypeVar("BrokerId", int, str)
"""How a broker names its brokers: TubeMQ by id, RocketMQ by broker group name."""

FAIL, SKIP = "fail", "skip"
CHOICES = (FAIL, SKIP)


def settle_unavailable(topics: tuple[str, ...], on_unavailable: str, missing: Mapping[BrokerId, tuple[str, ...]],
                       reasons: Mapping[BrokerId, str], *, total: int,
                       describe: str = "broker") -> dict[BrokerId, tuple[str, ...]]:
    """Partitions a batch read cannot read (broker -> keys; ``reasons``: what is known of each broker):
    raise :class:`PartitionsUnavailableError` under ``on_unavailable == "fail"``, else log them as left out
    and return them. ``total``: how many partitions the read covers, those included; ``describe``: what a
    broker is called when no reason is known."""
    if not missing:
        return {}
    detail = "; ".join(f"{reasons.get(b, f'{describe} {b}')}" + (f": {', '.join(keys)}" if keys else "")
                       for b, keys in sorted(missing.items()))
    count = count_keys(missing)
    how_many = (f"{count} of its {total} partitions are" if count else
                "partitions it cannot count (their broker cannot list them now) are")
    if on_unavailable == FAIL:
        raise PartitionsUnavailableError(
            f"batch read of {', '.join(topics)}: {how_many} on brokers that do not serve them now, so the read would "
            f"return part of the data; nothing was read. {detail}. Wait until the "
            f"broker serves again, or set onUnavailablePartitions=skip to read the other partitions and leave "
            f"these out", dict(missing), {b: reasons.get(b, f"{describe} {b}") for b in missing})
    log.warning("batch read of %s LEAVES OUT %s (onUnavailablePartitions=skip), on brokers that do not serve them "
                "now: %s", ", ".join(topics), f"{count} of its {total} partitions" if count else "partitions it cannot "
                "count", detail)
    return dict(missing)


def count_keys(missing: Mapping[BrokerId, tuple[str, ...]]) -> int:
    return sum(len(keys) for keys in missing.values())
