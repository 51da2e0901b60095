"""The partitions a batch read plans: those the master lists now, checked against its configuration.

The master lists only the partitions of brokers that serve (``docs/tubemq/brokers.md``, "Configured and
served partitions"), so a plan from that list alone silently leaves out every broker that is down. The
configuration (the master's web API) says what is missing; ``onUnavailablePartitions`` says what to do.
"""

from __future__ import annotations

import logging

from tubespark.errors import UnknownTopicError
from tubespark.spark.unavailable import count_keys
from tubespark.spark.unavailable import settle_unavailable as settle
from tubespark.tubemq.client.common import CHECK_TOPIC
from tubespark.tubemq.client.deployed import no_partition_listed
from tubespark.tubemq.client.metadata import topic_partitions
from tubespark.tubemq.client.placement import Placement, configured_partitions
from tubespark.tubemq.errors import AdminApiError
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.wire.errcodes import ErrCode
from tubespark.tubemq.wire.formats import PartitionRef

log = logging.getLogger(__name__)


def served_partitions(topics: tuple[str, ...], opts: TubeMQOptions
                      ) -> tuple[list[PartitionRef], dict[int, tuple[str, ...]]]:
    """``(partitions to plan, left out)``: the served partitions of ``topics``, sorted, and broker id -> the
    configured partitions that broker does not serve now (empty unless ``onUnavailablePartitions=skip``).

    Raises :class:`PartitionsUnavailableError` when some are left out and ``onUnavailablePartitions=fail``,
    :class:`UnknownTopicError` for a topic with no partition configured at all.
    """
    timeout_s = max(5.0, opts.request_timeout_ms / 1000 * 3)
    layouts = topic_partitions(opts.masters, topics, opts.client_settings(), timeout_s=timeout_s, missing_ok=True)
    listed = sorted(p for parts in layouts.values() for p in parts)
    placement = _placement(topics, opts)
    configured = placement.partitions if placement is not None else {}
    unlisted = [t for t, parts in layouts.items() if not parts and not configured.get(t)]
    if unlisted and placement is None:  # configuration unknown, but the master has it deployed (deployed.py)
        raise no_partition_listed(unlisted, ",".join(opts.masters), timeout_s)
    if unlisted:
        raise UnknownTopicError(ErrCode.FORBIDDEN, f"topic {', '.join(unlisted)} has no partition on the TubeMQ "
                                                   f"cluster of master {','.join(opts.masters)}: it is not "
                                                   f"deployed or was deleted; {CHECK_TOPIC}", broker="TubeMQ")
    if placement is None:
        return listed, {}
    missing = placement.missing_from(p.key for p in listed)
    reasons = {b: placement.describe_broker(b) for b in missing}
    return listed, settle_unavailable(topics, opts, missing, reasons, total=len(listed) + count_keys(missing))


def settle_unavailable(topics: tuple[str, ...], opts: TubeMQOptions, missing: dict[int, tuple[str, ...]],
                       reasons: dict[int, str], *, total: int) -> dict[int, tuple[str, ...]]:
    """:func:`tubespark.spark.unavailable.settle_unavailable` under this read's ``onUnavailablePartitions``."""
    return settle(topics, opts.on_unavailable_partitions, missing, reasons, total=total)


def _placement(topics: tuple[str, ...], opts: TubeMQOptions) -> Placement | None:
    """The topics' configuration, or None when no web API answers and ``masterWebUrl`` was not given."""
    try:
        return configured_partitions(opts.web_urls(), topics, timeout_s=opts.request_timeout_ms / 1000)
    except AdminApiError as exc:
        if opts.master_web_urls:
            raise  # the address was given: one that does not answer is a mistake to report
        log.warning("batch read of %s cannot check that every configured partition is served: %s. A broker that is "
                    "down would be left out without an error; set masterWebUrl to the masters' web API to check",
                    ", ".join(topics), exc)
        return None
