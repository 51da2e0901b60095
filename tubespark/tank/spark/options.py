"""Every option of the ``tank`` data source, defined once: name, default, parser and documentation.

:data:`OPTIONS` is the table (the README's TANK option table is generated from it, see
:func:`option_table`); :class:`TankOptions` is the parsed, typed, frozen result, built with core's
framework (:mod:`tubespark.core.options`) before any network call: a bad value fails naming the
option and the value. Offsets are TANK sequence numbers, keyed ``"topic:partition"``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tubespark.core.options import (
    BOTH,
    WRITE,
    OptionSpec,
    ParsedOptions,
    choice,
    comma_list,
    int_between,
    parse_bool,
    parse_host_ports,
    parse_non_negative_ms,
    parse_positive_int,
    render_table,
)
from tubespark.errors import OptionError
from tubespark.spark.offsets import OffsetSpec, parse_offset_spec
from tubespark.tank.client.broker import ClientSettings
from tubespark.tank.wire.bundle import COMPRESSIONS
from tubespark.tank.wire.requests import MAX_FETCH_SIZE

__all__ = ["OPTIONS", "TankOptions", "is_partition_key", "option_table", "partition_key", "split_key"]

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


def _starting(name: str, value: str) -> OffsetSpec:
    return parse_offset_spec(name, value, allow=("earliest", "latest"), check_key=is_partition_key,
                             key_form="topic:partition", example='{"events:0": 42}')


def _ending(name: str, value: str) -> OffsetSpec:
    return parse_offset_spec(name, value, allow=("latest",), check_key=is_partition_key,
                             key_form="topic:partition", example='{"events:0": 42}')


def _client_id(name: str, value: str) -> str:
    if not _CLIENT_ID_RE.match(value):
        raise OptionError(f"option {name}={value!r}: expected 1 to 200 letters, digits, '_', '.' or '-'")
    return value


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("broker", None, _broker, "The TANK broker, `host:port`.", True, BOTH),
    OptionSpec("topic", None, _topics, "Topic(s) to read, comma separated (every partition of each). For writing, "
               "the topic (a `topic` column is used when this is absent).", False, BOTH, attr="topics"),
    OptionSpec("startingOffsets", "latest", _starting, "Where a new query starts: `earliest` (each partition's "
               "first available message), `latest` (the next message produced) or JSON "
               "`{\"topic:partition\": seq}` with -2 = earliest, -1 = latest. A restarted query resumes from its "
               "checkpoint. Batch reads default to `earliest`."),
    OptionSpec("endingOffsets", "latest", _ending, "Batch reads only: where to stop (exclusive), `latest` (the "
               "high-water mark + 1 when the read is planned) or JSON as above."),
    OptionSpec("maxOffsetsPerTrigger", None, parse_positive_int, "Most messages per micro-batch, shared across "
               "partitions in proportion to their backlog. Unset: everything available."),
    OptionSpec("maxRecordsPerPartition", None, parse_positive_int, "Batch reads: split a partition's range into "
               "Spark tasks of at most this many sequence numbers."),
    OptionSpec("failOnDataLoss", "true", parse_bool, "Fail when sequence numbers a query planned are gone "
               "(retention removed them, the broker's high-water mark went back). `false`: log it and read what "
               "is left."),
    OptionSpec("fetchSizeBytes", "1048576", int_between(64, MAX_FETCH_SIZE), "Bytes asked for per fetch. "
               "The broker may send more (whole bundles); a bundle larger than this is fetched again whole."),
    OptionSpec("connectTimeoutMs", "3000", parse_positive_int, "TCP connect timeout (until the broker's greeting "
               "Ping).", False, BOTH),
    OptionSpec("requestTimeoutMs", "10000", parse_positive_int, "Time to wait for any one request's answer. A "
               "read task retries a failing fetch for 6 times this long.", False, BOTH),
    OptionSpec("clientId", "tubespark", _client_id, "Client id sent with fetch and produce requests (a random "
               "suffix is added per connection).", False, BOTH),
    OptionSpec("bundleMaxRows", "1000", parse_positive_int, "Writing: most messages in one bundle.", False, WRITE),
    OptionSpec("bundleMaxBytes", "1048576", int_between(1, MAX_FETCH_SIZE // 2), "Writing: most bytes of "
               "keys and values (before compression) in one bundle; a larger single message gets a bundle of its "
               "own.", False, WRITE),
    OptionSpec("bundleLingerMs", "200", parse_non_negative_ms, "Writing: a bundle open this long is sent when the "
               "next rows arrive, full or not (the end of a task sends every bundle).", False, WRITE),
    OptionSpec("bundleCompression", "auto", choice(*COMPRESSIONS), "Writing: `auto` (Snappy for more than 512 "
               "messages or 1 KiB of keys and values, as TANK's own client does, unless it does not shrink the "
               "bundle), `snappy` or `none`.", False, WRITE),
    OptionSpec("maxInFlight", "16", int_between(1, 1024), "Writing: Produce requests awaiting the "
               "broker's answer at once.", False, WRITE),
    OptionSpec("sendRetries", "3", int_between(0, 100), "Writing: re-sends of a bundle after a retriable error "
               "before the task fails.", False, WRITE),
)


@dataclass(frozen=True)
class TankOptions(ParsedOptions):
    """Validated ``tank`` options, one typed attribute per entry of :data:`OPTIONS`, defaults filled in."""

    SPECS = OPTIONS
    SOURCE = "tank"

    broker: str
    topics: tuple[str, ...] | None
    starting_offsets: OffsetSpec
    ending_offsets: OffsetSpec
    max_offsets_per_trigger: int | None
    max_records_per_partition: int | None
    fail_on_data_loss: bool
    fetch_size_bytes: int
    connect_timeout_ms: int
    request_timeout_ms: int
    client_id: str
    bundle_max_rows: int
    bundle_max_bytes: int
    bundle_linger_ms: int
    bundle_compression: str
    max_in_flight: int
    send_retries: int

    def check(self, mode: str) -> None:
        if mode == WRITE and self.topics and len(self.topics) > 1:
            raise OptionError("option topic: the sink writes to one topic; use a 'topic' column to write to several")
        for spec_name, spec in (("startingOffsets", self.starting_offsets), ("endingOffsets", self.ending_offsets)):
            if isinstance(spec, dict) and self.topics:
                stray = sorted(k for k in spec if split_key(k)[0] not in self.topics)
                if stray:
                    raise OptionError(f"option {spec_name} names partitions of topics not read: {', '.join(stray)}")

    def client_settings(self) -> ClientSettings:
        return ClientSettings(connect_timeout_s=self.connect_timeout_ms / 1000,
                              request_timeout_s=self.request_timeout_ms / 1000, client_id=self.client_id)

    @property
    def retry_s(self) -> float:
        """How long a read task retries a failing fetch before it fails."""
        return self.request_timeout_ms / 1000 * 6


def option_table(mode: str | None = None) -> str:
    """Markdown table of the options (the README's TANK section embeds it)."""
    return render_table(OPTIONS, mode)
