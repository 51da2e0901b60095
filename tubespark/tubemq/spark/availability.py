"""The partitions a batch read plans: those the master lists now, checked against its configuration.

The master lists only the partitions of brokers that serve (``docs/tubemq/brokers.md``, "Configured and
served partitions"), so a plan from that list alone silently leaves out every broker that is down. The
configuration says what is missing; ``onUnavailablePartitions`` says what to do.

Where the configuration comes from: the master's RPC port, which the read already uses
(:func:`~tubespark.tubemq.client.configured.configured_by_master`), so no option is needed. When that shows
partitions missing, or the master does not answer it, the web API (``masterWebUrl``, else the guess: port
8080 of each master host) is asked too: it says why a broker does not serve and knows a deployment being
deleted. ``masterWebUrl`` given: the web API alone, as the user said. When neither answers, the read cannot
tell a complete read from a partial one and fails with :class:`ConfigurationUnknownError`, unless
``onUnavailablePartitions=skip``, which reads what is listed and says, as a warning, that it could not check.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tubespark.errors import TubeSparkError, UnknownTopicError
from tubespark.spark.unavailable import SKIP
from tubespark.tubemq.client.common import CHECK_TOPIC
from tubespark.tubemq.client.configured import configured_by_master
from tubespark.tubemq.client.deployed import no_partition_listed
from tubespark.tubemq.client.metadata import topic_partitions
from tubespark.tubemq.client.placement import Placement, configured_partitions
from tubespark.tubemq.errors import AdminApiError, ConfigurationUnknownError
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.wire.errcodes import ErrCode
from tubespark.tubemq.wire.formats import PartitionRef

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Served:
    """What a batch read of some topics covers: the partitions the master lists (``listed``, sorted), broker id ->
    the configured partitions that broker does not serve now (``missing``, each broker in words in ``reasons``),
    and whether the configuration was known (``checked``; False only under ``onUnavailablePartitions=skip``: then
    what is missing is not known)."""

    listed: list[PartitionRef]
    missing: dict[int, tuple[str, ...]]
    reasons: dict[int, str]
    checked: bool


def served_partitions(topics: tuple[str, ...], opts: TubeMQOptions) -> Served:
    """The :class:`Served` partitions of ``topics``. Raises :class:`ConfigurationUnknownError` when it cannot learn
    the configuration at all (``onUnavailablePartitions=fail``), :class:`UnknownTopicError` for a topic with no
    partition configured at all.
    """
    timeout_s = max(5.0, opts.request_timeout_ms / 1000 * 3)
    layouts = topic_partitions(opts.masters, topics, opts.client_settings(), timeout_s=timeout_s, missing_ok=True)
    listed = sorted(p for parts in layouts.values() for p in parts)
    placement = _placement(topics, opts, [p.key for p in listed])
    configured = placement.partitions if placement is not None else {}
    unlisted = [t for t, parts in layouts.items() if not parts and not configured.get(t)]
    if unlisted and placement is None:  # configuration unknown (skip), but the master has it deployed (deployed.py)
        raise no_partition_listed(unlisted, ",".join(opts.masters), timeout_s)
    if unlisted:
        raise UnknownTopicError(ErrCode.FORBIDDEN, f"topic {', '.join(unlisted)} has no partition on the TubeMQ "
                                                   f"cluster of master {','.join(opts.masters)}: it is not "
                                                   f"deployed or was deleted; {CHECK_TOPIC}", broker="TubeMQ")
    if placement is None:
        return Served(listed, {}, {}, False)
    missing = placement.missing_from(p.key for p in listed)
    return Served(listed, missing, {b: placement.describe_broker(b) for b in missing}, True)


def _placement(topics: tuple[str, ...], opts: TubeMQOptions, listed: list[str]) -> Placement | None:
    """The topics' configuration (see the module docstring for the sources and their order), or None when no
    source answers and ``onUnavailablePartitions=skip`` (after a warning); ``listed``: the keys the master lists."""
    timeout_s = opts.request_timeout_ms / 1000
    if opts.master_web_urls:  # the address was given: one that does not answer is a mistake to report
        return configured_partitions(opts.master_web_urls, topics, timeout_s=timeout_s)
    rpc: Placement | None = None
    rpc_failure = ""
    try:
        rpc = configured_by_master(opts.masters, topics, opts.client_settings())
    except TubeSparkError as exc:
        rpc_failure = f"the master did not give its configuration over RPC ({exc})"
        log.debug("batch read of %s: %s", ", ".join(topics), rpc_failure)
    else:
        if not rpc.missing_from(listed):
            return rpc  # every configured partition is listed: nothing to explain
    try:  # partitions are missing (the web API says why) or the master did not answer: the web API
        return configured_partitions(opts.web_urls(), topics, timeout_s=timeout_s)
    except AdminApiError as exc:
        if rpc is not None:
            log.debug("batch read of %s: the web API does not say why partitions are not served: %s",
                      ", ".join(topics), exc)
            return rpc
        web_failure = str(exc)
    why = (f"batch read of {', '.join(topics)} cannot check that every configured partition is served: "
           f"{rpc_failure}, and {web_failure} (masterWebUrl is unset: tried port 8080 of each master host)")
    if opts.on_unavailable_partitions == SKIP:
        log.warning("%s. It reads the partitions the master lists now (onUnavailablePartitions=skip): a broker "
                    "that is down is left out without an error; set masterWebUrl to check", why)
        return None
    raise ConfigurationUnknownError(
        f"{why}. Without the configuration it cannot tell a complete read from one that leaves out a broker that "
        f"is down, so nothing was read. Set masterWebUrl to the masters' web API, http://<master host>:<webPort> "
        f"(webPort in the master's master.ini, 8080 by default; only the active master answers), or set "
        f"onUnavailablePartitions=skip to read what the master lists now without this check")
