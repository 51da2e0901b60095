"""Every option of the ``tubemq`` data source, defined once: name, default, parser and documentation.

:data:`OPTIONS` is the table (docs/reference/options.md's TubeMQ table is generated from it);
:class:`TubeMQOptions` is the parsed, typed, frozen result with one attribute per option, named by the option
in snake_case (``maxOffsetsPerTrigger`` -> ``max_offsets_per_trigger``) except that list-valued options are plural
(``master`` -> ``masters``, ``topic`` -> ``topics``) and the ``tubemq.`` prefix is dropped
(``tubemq.tlsEnable`` -> ``tls_enable``). Option names are case-insensitive, like Spark's option map.

The options every broker shares (``topic``, ``startingOffsets``, the admission options, timeouts, ...)
and those TubeMQ shares with some (``commitToGroup``, ``verifyChecksums``, ``bundle*``) are defined once in
:mod:`tubespark.spark.options`; :data:`TERMS` says what they need to know of TubeMQ. Timeout defaults come
from :class:`~tubespark.tubemq.client.common.ClientSettings`' field defaults, so each setting has one
default. Parsing happens before any network call; see :mod:`tubespark.core.options`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tubespark.core.options import (
    BOTH,
    READ,
    OptionSpec,
    choice,
    comma_list,
    parse_attribute_name,
    parse_bool,
    parse_host_ports,
    parse_positive_int,
    parse_text,
)
from tubespark.core.shared_dir import parse_shared_directory
from tubespark.errors import MessageFormatError, OptionError
from tubespark.spark.offsets import EARLIEST, LATEST, parse_timestamp, parse_timestamp_map
from tubespark.spark.options import (
    BUNDLE_COMPRESSION,
    BUNDLE_LINGER_MS,
    BUNDLE_MAX_BYTES,
    BUNDLE_MAX_ROWS,
    COMMIT_TO_GROUP,
    GROUP,
    VERIFY_CHECKSUMS,
    BrokerTerms,
    SharedOptions,
    every_broker_specs,
    own_option_table,
)
from tubespark.spark.tls_options import TlsOptions, tls_specs
from tubespark.tubemq.client.common import ClientSettings, Credentials
from tubespark.tubemq.wire.formats import PartitionRef

__all__ = ["EARLIEST", "LATEST", "OPTIONS", "PROTECTED", "TERMS", "TubeMQOptions", "option_table"]

_GROUP_RE = re.compile(r"^[a-zA-Z][\w-]+$")
_TOPIC_RE = re.compile(r"^[a-zA-Z]\w+$")
STREAM_ID_RE = re.compile(r"^[_A-Za-z0-9\-]+$")


def _topics(name: str, value: str) -> tuple[str, ...]:
    items = comma_list(value)
    bad = [v for v in items if not _TOPIC_RE.match(v) or len(v) > 64]
    if not items or bad:
        raise OptionError(f"option {name}={value!r}: expected topic names (letter first, then letters, digits or "
                          f"_; 2 to 64 chars)" + (f"; bad: {', '.join(bad)}" if bad else ""))
    return tuple(sorted(set(items)))


def _pattern(name: str, value: str) -> re.Pattern[str]:
    try:
        return re.compile(value)
    except re.error as exc:
        raise OptionError(f"option {name}={value!r}: expected a regular expression ({exc})") from None


def _web_urls(name: str, value: str) -> tuple[str, ...]:
    items = comma_list(value)
    bad = [v for v in items if not re.match(r"^https?://[^\s/:]+(:\d{1,5})?/?$", v)]
    if not items or bad:
        raise OptionError(f"option {name}={value!r}: expected http://host:port[,http://host:port...] (the masters' "
                          f"web API, port 8080 by default)" + (f"; bad: {', '.join(bad)}" if bad else ""))
    return tuple(items)


def _group(name: str, value: str) -> str:
    value = value.strip()
    if not _GROUP_RE.match(value) or len(value) > 200:
        raise OptionError(f"option {name}={value!r}: expected a group name: a letter, then letters, digits, "
                          f"'_' or '-' (2 to 200 chars)")
    return value


MAX_STREAM_IDS = 500
"""The most msgTypes a TubeMQ broker filters by (docs/tubemq/protocol.md "Filtering by msgType")."""


def stream_id_ok(value: object) -> bool:
    """Whether ``value`` is a streamId a broker can filter by: 1 to 256 letters, digits, '_' or '-'."""
    return isinstance(value, str) and len(value) <= 256 and STREAM_ID_RE.match(value) is not None


def _stream_ids(name: str, value: str) -> tuple[str, ...]:
    items = sorted(set(comma_list(value)))
    bad = [v for v in items if not stream_id_ok(v)]
    if bad or len(items) > MAX_STREAM_IDS:
        raise OptionError(f"option {name}={value!r}: expected at most 500 streamIds of letters, digits, '_' "
                          f"or '-'" + (f"; bad: {', '.join(bad)}" if bad else ""))
    return tuple(items)


def is_partition_key(key: str) -> bool:
    """``brokerId:topic:partitionId`` as TubeMQ writes it: plain non-negative ids, a valid topic name."""
    try:
        broker_id, topic, partition_id = PartitionRef.parse_key(key)
    except MessageFormatError:
        return False
    canonical = PartitionRef(broker_id, topic, partition_id).key == key  # no signs, spaces or leading zeros
    return canonical and broker_id >= 0 and partition_id >= 0 and bool(_TOPIC_RE.match(topic))


def _timestamps(name: str, value: str) -> dict[str, int]:
    return parse_timestamp_map(name, value, check_key=is_partition_key)


def _user(name: str, value: str) -> str:
    if not value.strip() or value != value.strip():
        raise OptionError(f"option {name}={value!r}: expected a user name (not blank, no surrounding spaces)")
    return value


def _address_map(name: str, value: str) -> tuple[tuple[str, str], ...]:
    pairs: dict[str, str] = {}
    for item in comma_list(value):
        listed, sep, reachable = item.partition("=")
        try:
            listed, reachable = (parse_host_ports(name, part.strip())[0] for part in (listed, reachable))
        except OptionError:
            sep = ""
        if not sep:
            raise OptionError(f"option {name}={value!r}: expected listed=reachable[,...], each host:port "
                              f"(bad: {item})") from None
        if pairs.get(listed, reachable) != reachable:
            raise OptionError(f"option {name}={value!r}: {listed} is mapped twice; map each address once")
        pairs[listed] = reachable
    return tuple(sorted(pairs.items()))


PAYLOAD_FORMATS = ("raw", "inlongmsg")
MIN_BUNDLE_BYTES = 1024
"""The smallest ``bundleMaxBytes``: below it a bundle's framing dominates."""
BUNDLE_COMPRESSIONS = ("snappy", "none")


def _bundle_bytes(name: str, value: str) -> int:
    number = parse_positive_int(name, value)
    if number < MIN_BUNDLE_BYTES:
        raise OptionError(f"option {name}={value!r}: expected at least {MIN_BUNDLE_BYTES} bytes")
    return number


SESSION_TIMEOUT_MS = 30000
"""The servers' default consumer/producer session timeout; a heartbeat period must stay below it."""


def _heartbeat_ms(name: str, value: str) -> int:
    period = parse_positive_int(name, value)
    if period >= SESSION_TIMEOUT_MS:
        raise OptionError(f"option {name}={value!r}: expected a period below the servers' "
                          f"{SESSION_TIMEOUT_MS} ms session timeout, or registrations expire between heartbeats")
    return period


_INLONGMSG = "With `payloadFormat=inlongmsg` (InLong bundles of records)."

TERMS = BrokerTerms(
    "TubeMQ", "brokerId:topic:partitionId", '{"1:mytopic:0": 280}', is_partition_key, _topics, ClientSettings,
    start_words=("earliest", "latest", "group"),
    defaults={"bundleMaxRows": "500", "bundleCompression": "snappy"},
    parsers={"bundleMaxBytes": _bundle_bytes, "bundleCompression": choice(*BUNDLE_COMPRESSIONS), "group": _group},
    notes={
        "startingOffsets": "Also `group`: the group's committed offsets on the brokers.",
        "group": "The master balances the topic's partitions over the group's members; committed offsets are "
                 "stored for it on the brokers. Required for streaming reads.",
        "onUnavailablePartitions": "Also `backfill export`. The partitions are those the master's configuration "
                                   "puts on a broker that does not serve them now (down, stopped, offline, "
                                   "closed to consumers). Under `fail`, a read that cannot learn the "
                                   "configuration at all (the master does not give it over RPC, as on a topic "
                                   "under consumer-group authorization, and no web API answers at "
                                   "`masterWebUrl`) fails too, even with every broker up "
                                   "(`ConfigurationUnknownError`); under `skip` it logs that it could not check.",
        "maxInFlight": "SendMessage requests, per broker connection.",
        "bundleMaxRows": _INLONGMSG,
        "bundleMaxBytes": f"{_INLONGMSG} At least {MIN_BUNDLE_BYTES}; unset or larger: the topic's max message "
                          "size minus 1 KiB of headroom.",
        "bundleLingerMs": _INLONGMSG,
        "bundleCompression": f"{_INLONGMSG} `snappy` or `none`.",
    },
)
"""What the shared options (:mod:`tubespark.spark.options`) need to know of TubeMQ."""

OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("master", None, parse_host_ports, "TubeMQ master RPC addresses, `host:port[,host:port]`.", True,
               BOTH, attr="masters"),
    *every_broker_specs(TERMS),
    GROUP.spec(TERMS),
    COMMIT_TO_GROUP.spec(TERMS),
    VERIFY_CHECKSUMS.spec(TERMS),
    BUNDLE_MAX_ROWS.spec(TERMS),
    BUNDLE_MAX_BYTES.spec(TERMS),
    BUNDLE_LINGER_MS.spec(TERMS),
    BUNDLE_COMPRESSION.spec(TERMS),
    OptionSpec("topicPattern", None, _pattern, "Reading: every topic whose whole name matches this regular "
               "expression (like Kafka's `subscribePattern`), instead of `topic`. Topics come from the masters' "
               "web API (`masterWebUrl`); a stream picks up a new matching topic within `topicRefreshIntervalMs`, "
               "from its earliest offset."),
    OptionSpec("masterWebUrl", None, _web_urls, "The masters' web API, `http://host:port[,...]` (`webPort` in "
               "the master's master.ini): where `topicPattern` lists topics and where streams and the sink learn "
               "which partitions are configured, so a broker that is down is told from a partition or topic that "
               "is gone (`outageTimeoutMs`). Batch reads learn it from the master's RPC port and ask the web API "
               "only why a partition is not served (`onUnavailablePartitions`); set, they ask it alone. Unset: "
               "port 8080 of each `master` host.",
               applies="both", attr="master_web_urls"),
    OptionSpec("topicRefreshIntervalMs", "30000", parse_positive_int, "With `topicPattern`: how often a stream "
               "lists the topics again."),
    OptionSpec("startingTimestamp", None, parse_timestamp, "Start every partition at its first message whose "
               "`msgTime` minute is at or after this time (epoch ms; see "
               "[Reading by time](../tubemq/guide.md#reading-by-time)). Wins over `startingOffsetsByTimestamp` "
               "and `startingOffsets`."),
    OptionSpec("startingOffsetsByTimestamp", None, _timestamps, "JSON `{\"brokerId:topic:partitionId\": epoch "
               "ms}`: a start time per partition (as `startingTimestamp`); partitions not named follow "
               "`startingOffsets`."),
    OptionSpec("startingOffsetsByTimestampStrategy", "error", choice("error", "latest"), "A partition with no "
               "message at or after its start time: `error` fails naming it, `latest` starts it at its latest "
               "offset."),
    OptionSpec("endingTimestamp", None, parse_timestamp, "Batch reads: stop every partition before its first "
               "message whose `msgTime` minute is at or after this time (epoch ms); a partition with none is read "
               "to its latest offset. Wins over `endingOffsetsByTimestamp` and `endingOffsets`."),
    OptionSpec("endingOffsetsByTimestamp", None, _timestamps, "Batch reads: JSON `{\"brokerId:topic:partitionId\": "
               "epoch ms}`, an end time per partition (as `endingTimestamp`); others follow `endingOffsets`."),
    OptionSpec("streamIds", "", _stream_ids, "Only messages whose streamId (TubeMQ msgType) is one of these, "
               "comma separated. Filtered on the broker."),
    OptionSpec("streamIdPushdown", "false", parse_bool, "Batch reads with Spark's filter pushdown on "
               "(`spark.sql.python.filterPushdown.enabled=true`): `true` sends a WHERE on `streamId` (`=`, `IN`) to "
               "the brokers as their msgType filter, as `streamIds` does, so only those messages are fetched; the "
               "`offset` column of such a read is then a lower bound, not the exact index position (the broker "
               "skips messages inside a fetch). `false`: Spark filters `streamId`, the offsets stay exact."),
    OptionSpec("includeAttributes", "false", parse_bool, "Add an `attributes` map<string,string> column with each "
               "message's attributes."),
    OptionSpec("dedupAttribute", None, parse_attribute_name,
               "Writing: stamp every message with this attribute holding a stable id (write or query+batch, task, "
               "row), so replays of a retried task can be recognised. Reading: the attribute `dedupe` looks at.",
               False, BOTH),
    OptionSpec("dedupe", "false", parse_bool, "Drop messages whose `dedupAttribute` id was already read in the "
               "same task (replays from a retried tubespark write task). Needs `dedupAttribute`."),
    OptionSpec("heartbeatIntervalMs", ClientSettings.default_ms("heartbeat_interval_s"), _heartbeat_ms,
               "Heartbeat period to the master and brokers (keep well below the server's 30 s session timeout).",
               False, BOTH),
    OptionSpec("assignmentTimeoutMs", "60000", parse_positive_int, "How long the driver waits for the master to "
               "assign partitions when a query starts, and how long a `Trigger.AvailableNow` run waits for an "
               "assigned partition it cannot read yet (occupied by a stale registration, broker down) before "
               "failing with its name."),
    OptionSpec("payloadFormat", "raw", choice(*PAYLOAD_FORMATS), "`raw`: one row per TubeMQ message. `inlongmsg`: "
               "messages are InLong bundles (InLongMsg or MessageObjs, see [InLong message bundles]"
               "(../tubemq/bundles.md)); reading gives one row per record (plus a `recordIndex` column), "
               "writing packs rows into bundles.", False, BOTH),
    OptionSpec("ignoreParseErrors", "false", parse_bool, "With `payloadFormat=inlongmsg`: `false` fails the task "
               "on a message that is not a valid bundle, naming partition and offset; `true` skips it, logs it "
               "and counts it (see `skippedBundlesPath`)."),
    OptionSpec("skippedBundlesPath", None, parse_shared_directory, "With `ignoreParseErrors=true`: a directory "
               "the executors write and the driver reads: a local path (local mode, or a mount every node shares) "
               "or a URI such as `hdfs://namenode/dir`, `webhdfs://namenode:9870/dir`, `s3a://bucket/dir` (extra "
               "`tubespark[s3]`), `file:///dir`; checked when the query starts. Each task that "
               "skipped messages writes one JSON file named by its range; `skipped_bundles(path)` in "
               "`tubespark.tubemq.spark.read_task` sums them and a streaming driver logs the total."),
    OptionSpec("readStatsPath", None, parse_shared_directory, "A directory (as `skippedBundlesPath`) where each "
               "read task writes one JSON file with what it fetched from its broker: messages and bytes of message "
               "values; `read_stats(path)` in `tubespark.tubemq.spark.read_task` sums them. To measure what a "
               "filter pushed to the broker saved."),
    OptionSpec("auth.user", None, _user, "User name for an authenticating TubeMQ cluster.", False, BOTH),
    OptionSpec("auth.password", None, parse_text, "Password for `auth.user`.", False, BOTH),
    *tls_specs("tubemq.", enable="Connect with TLS: `master` then lists the masters' TLS ports, and the brokers' "
               "TLS ports come from the master. See [TLS](../operations/security.md#tls).",
               cert="TubeMQ 2.4.0 servers accept TLS only from clients with a certificate signed by a CA in "
               "their trust store.",
               hosts="the master address given, the broker address the master lists"),
    OptionSpec("brokerAddressMap", "", _address_map, "`listed=reachable[,...]` (each `host:port`): connect to a "
               "broker the master lists as `listed` at `reachable` instead, e.g. behind NAT or a port forward. "
               "Partition keys and log lines keep the listed address.", False, BOTH),
)

PROTECTED = {
    "tubemq.group": "group", "tubemq.groupname": "group", "tubemq.consumergroup": "group",
    "tubemq.topic": "topic", "tubemq.masterinfo": "master", "tubemq.masterhostandportlist": "master",
    "tubemq.sessionkey": "startingOffsets", "tubemq.consumeposition": "startingOffsets",
    "tubemq.partoffsetmap": "startingOffsets", "tubemq.clientid": "(generated by tubespark)",
}


@dataclass(frozen=True)
class TubeMQOptions(TlsOptions, SharedOptions):
    """Validated ``tubemq`` options, one typed attribute per entry of :data:`OPTIONS`, defaults filled in.

    Build with ``TubeMQOptions.from_raw(spark_options, mode="read" | "write")``. Options that do not
    apply to the mode hold their default. Plain values only: pickled to executors as is. The attributes
    of the options every broker shares come from :class:`~tubespark.spark.options.SharedOptions`, the TLS
    ones from :class:`~tubespark.spark.tls_options.TlsOptions`.
    """

    SPECS = OPTIONS
    PROTECTED = PROTECTED
    SOURCE = "tubemq"
    TLS_PREFIX = "tubemq."

    masters: tuple[str, ...]
    topic_pattern: re.Pattern[str] | None
    master_web_urls: tuple[str, ...] | None
    topic_refresh_interval_ms: int
    group: str | None
    starting_timestamp: int | None
    starting_offsets_by_timestamp: dict[str, int] | None
    starting_offsets_by_timestamp_strategy: str
    ending_timestamp: int | None
    ending_offsets_by_timestamp: dict[str, int] | None
    stream_ids: tuple[str, ...]
    stream_id_pushdown: bool
    commit_to_group: bool
    include_attributes: bool
    verify_checksums: bool
    dedup_attribute: str | None
    dedupe: bool
    heartbeat_interval_ms: int
    assignment_timeout_ms: int
    payload_format: str
    ignore_parse_errors: bool
    skipped_bundles_path: str | None
    read_stats_path: str | None
    bundle_max_bytes: int | None
    bundle_max_rows: int
    bundle_linger_ms: int
    bundle_compression: str
    auth_user: str | None
    auth_password: str | None = field(repr=False)  # a parsed options object is printed, logged and pickled
    broker_address_map: tuple[tuple[str, str], ...]

    def check(self, mode: str) -> None:
        super().check(mode)
        if self.dedupe and not self.dedup_attribute:
            raise OptionError("option dedupe=true needs dedupAttribute (the attribute the writer stamped)")
        if self.skipped_bundles_path and not (self.ignore_parse_errors and self.inlongmsg):
            raise OptionError("option skippedBundlesPath needs payloadFormat=inlongmsg and ignoreParseErrors=true")
        if mode == READ and bool(self.topics) == bool(self.topic_pattern):
            raise OptionError("reading needs exactly one of the options topic (names) and topicPattern (a regular "
                              "expression)")
        if self.auth_password and not self.auth_user:
            raise OptionError("option auth.password is set but auth.user is not: set auth.user too")
        self.check_tls()

    def web_urls(self) -> tuple[str, ...]:
        """The masters' web API addresses: ``masterWebUrl``, else port 8080 of each master host."""
        return self.master_web_urls or tuple(f"http://{m.rsplit(':', 1)[0]}:8080" for m in self.masters)

    @property
    def inlongmsg(self) -> bool:
        """``payloadFormat=inlongmsg``: messages are InLong bundles, a row is one of their records."""
        return self.payload_format == "inlongmsg"

    def client_settings(self) -> ClientSettings:
        credentials = Credentials(self.auth_user, self.auth_password or "") if self.auth_user else None
        context = self.ssl_context()
        return ClientSettings(connect_timeout_s=self.connect_timeout_ms / 1000,
                              request_timeout_s=self.request_timeout_ms / 1000,
                              heartbeat_interval_s=self.heartbeat_interval_ms / 1000,
                              credentials=credentials, ssl_context=context,
                              broker_address_map=self.broker_address_map)


def option_table(mode: str | None = None) -> str:
    """Markdown table of TubeMQ's own options (docs/reference/options.md embeds it; the shared ones have their own
    table)."""
    return own_option_table(OPTIONS, mode)
