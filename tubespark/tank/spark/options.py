"""Every option of the ``tank`` data source, defined once: name, default, parser and documentation.

:data:`OPTIONS` is the table (docs/reference/options.md's TANK table is generated from it, see
:func:`option_table`); :class:`TankOptions` is the parsed, typed, frozen result, built with core's
framework (:mod:`tubespark.core.options`) before any network call: a bad value fails naming the
option and the value. Offsets are TANK sequence numbers, keyed ``"topic:partition"``. The options every
broker shares (``onUnavailablePartitions`` among them), and the ``bundle*`` options TANK shares with TubeMQ,
are defined once in :mod:`tubespark.spark.options`; :data:`TERMS` says what they need to know of TANK.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tubespark.core.options import (
    BOTH,
    OptionSpec,
    choice,
    comma_list,
    int_between,
    parse_host_ports,
)
from tubespark.errors import OptionError
from tubespark.spark.options import (
    BUNDLE_COMPRESSION,
    BUNDLE_LINGER_MS,
    BUNDLE_MAX_BYTES,
    BUNDLE_MAX_ROWS,
    BrokerTerms,
    SharedOptions,
    every_broker_specs,
    own_option_table,
)
from tubespark.tank.client.broker import ClientSettings
from tubespark.tank.wire.bundle import COMPRESSIONS
from tubespark.tank.wire.requests import MAX_FETCH_SIZE

__all__ = ["OPTIONS", "TERMS", "TankOptions", "is_partition_key", "option_table", "partition_key", "split_key"]

_TOPIC_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_CLIENT_ID_RE = re.compile(r"^[\w.\-]{1,200}$")


def partition_key(topic: str, partition: int) -> str:
    """The offset key of a partition: ``topic:partition``."""
    return f"{topic}:{partition}"


def split_key(key: str) -> tuple[str, int]:
    topic, _, partition = key.rpartition(":")
    return topic, int(partition)


def is_partition_key(key: str) -> bool:
    """``topic:partition`` with a valid topic name and a plain partition number (no sign, no leading zero)."""
    topic, sep, partition = key.rpartition(":")
    return bool(sep and _TOPIC_RE.match(topic) and partition.isdigit() and str(int(partition)) == partition
                and int(partition) < 0xFFFF)


def _topics(name: str, value: str) -> tuple[str, ...]:
    items = comma_list(value)
    bad = [v for v in items if not _TOPIC_RE.match(v)]
    if not items or bad:
        raise OptionError(f"option {name}={value!r}: expected TANK topic names (1 to 64 letters, digits, '_', '.' "
                          f"or '-'), comma separated" + (f"; bad: {', '.join(bad)}" if bad else ""))
    return tuple(sorted(set(items)))


def _broker(name: str, value: str) -> str:
    addresses = parse_host_ports(name, value)
    if len(addresses) != 1:
        raise OptionError(f"option {name}={value!r}: expected one TANK broker, host:port")
    return addresses[0]


def _client_id(name: str, value: str) -> str:
    if not _CLIENT_ID_RE.match(value):
        raise OptionError(f"option {name}={value!r}: expected 1 to 200 letters, digits, '_', '.' or '-'")
    return value


TERMS = BrokerTerms(
    "TANK", "topic:partition", '{"events:0": 42}', is_partition_key, _topics, ClientSettings,
    defaults={"maxInFlight": "16", "bundleMaxBytes": "1048576", "bundleCompression": "auto"},
    parsers={"bundleMaxBytes": int_between(1, MAX_FETCH_SIZE // 2), "bundleCompression": choice(*COMPRESSIONS)},
    notes={
        "topic": "Reading takes every partition of each.",
        "onUnavailablePartitions": "Unavailable is a broker that answered before in this process and does not "
                                   "now (its partitions cannot even be listed): `skip` then reads nothing and says "
                                   "so.",
        "connectTimeoutMs": "Until the broker's greeting Ping.",
        "requestTimeoutMs": "A read task retries a failing fetch for 6 times this long.",
        "maxInFlight": "Produce requests, per task.",
        "bundleMaxBytes": "Keys and values count; a larger single message gets a bundle of its own.",
        "bundleCompression": "`auto` (Snappy for more than 512 messages or 1 KiB of keys and values, as TANK's "
                             "own client does, unless it does not shrink the bundle), `snappy` or `none`.",
    },
)
"""What the shared options (:mod:`tubespark.spark.options`) need to know of TANK: offsets are sequence
numbers keyed ``topic:partition``; a bundle is TANK's unit of storage."""

OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("broker", None, _broker, "The TANK broker, `host:port`.", True, BOTH),
    *every_broker_specs(TERMS),
    BUNDLE_MAX_ROWS.spec(TERMS),
    BUNDLE_MAX_BYTES.spec(TERMS),
    BUNDLE_LINGER_MS.spec(TERMS),
    BUNDLE_COMPRESSION.spec(TERMS),
    OptionSpec("fetchSizeBytes", "1048576", int_between(64, MAX_FETCH_SIZE), "Bytes asked for per fetch. "
               "The broker may send more (whole bundles); a bundle larger than this is fetched again whole."),
    OptionSpec("clientId", ClientSettings.default("client_id"), _client_id, "Client id sent with fetch and "
               "produce requests (a random suffix is added per connection).", False, BOTH),
)


@dataclass(frozen=True)
class TankOptions(SharedOptions):
    """Validated ``tank`` options, one typed attribute per entry of :data:`OPTIONS`, defaults filled in."""

    SPECS = OPTIONS
    SOURCE = "tank"

    broker: str
    fetch_size_bytes: int
    client_id: str
    bundle_max_rows: int
    bundle_max_bytes: int
    bundle_linger_ms: int
    bundle_compression: str

    def check(self, mode: str) -> None:
        super().check(mode)
        for spec_name, spec in (("startingOffsets", self.starting_offsets), ("endingOffsets", self.ending_offsets)):
            if isinstance(spec, dict) and self.topics:
                stray = sorted(k for k in spec if split_key(k)[0] not in self.topics)
                if stray:
                    raise OptionError(f"option {spec_name} names partitions of topics not read: "
                                      f"{', '.join(stray)}; remove them, or add their topics to the topic option")

    def client_settings(self) -> ClientSettings:
        return ClientSettings(connect_timeout_s=self.connect_timeout_ms / 1000,
                              request_timeout_s=self.request_timeout_ms / 1000, client_id=self.client_id)

    @property
    def retry_s(self) -> float:
        """How long a read task retries a failing fetch before it fails."""
        return self.request_timeout_ms / 1000 * 6


def option_table(mode: str | None = None) -> str:
    """Markdown table of TANK's own options (docs/reference/options.md embeds it)."""
    return own_option_table(OPTIONS, mode)
