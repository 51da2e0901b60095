"""The options the brokers' data sources share, each defined once: name, default, parser, documentation.

Why here, in the shared Spark layer, and not in ``tubespark.core``: these options are about reading and
writing with Spark (micro-batches, triggers, batch splits, offset specs parsed by
:mod:`tubespark.spark.offsets`), which core knows nothing of; core keeps the broker- and Spark-neutral
framework (:class:`~tubespark.core.options.OptionSpec`, parsers, :func:`~tubespark.core.options.render_table`).

A :class:`SharedOption` is one option written once. A broker states what the shared options need to
know of it in one :class:`BrokerTerms` (its name, partition key form, topic name rules, the client
settings its timeout defaults come from, and the few places it differs: a default, a parser, a note on
its own behaviour, an old name) and composes :func:`every_broker_specs` plus the shared options it
also has (:data:`COMMIT_TO_GROUP`, the ``bundle*`` options, ...) with its own specs. Its parsed options
class derives from :class:`SharedOptions`, so every broker's options object carries the same attributes
for the same options (``max_offsets_per_trigger``, ``max_bytes_per_trigger``, ``min_offsets_per_trigger``,
``max_trigger_delay_ms``, ``fail_on_data_loss``, ...), which the shared stream engine reads.

The Options page (docs/reference/options.md) shows each shared option once (:func:`shared_option_table`); a
broker's own table (:func:`own_option_table`) lists only the options it alone has.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tubespark.core.options import (
    READ,
    WRITE,
    OptionSpec,
    ParsedOptions,
    Parser,
    choice,
    parse_bool,
    parse_byte_size,
    parse_duration_ms,
    parse_non_negative_int,
    parse_non_negative_ms,
    parse_positive_int,
    render_table,
)
from tubespark.core.settings import ConnectionSettings
from tubespark.core.shared_dir import parse_shared_directory
from tubespark.errors import OptionError
from tubespark.spark.offsets import OffsetSpec, parse_offset_spec
from tubespark.spark.unavailable import CHOICES as UNAVAILABLE_CHOICES
from tubespark.spark.unavailable import FAIL

__all__ = [
    "COMMIT_TO_GROUP", "EVERY_BROKER", "GROUP", "ON_UNAVAILABLE_PARTITIONS", "SHARED", "BrokerTerms", "SharedOption",
    "SharedOptions", "SharedSpec", "every_broker_specs", "own_option_table", "shared_option_table",
]

KEY = "<key>"
"""Stands for the broker's partition key form in a shared option's documentation."""


@dataclass(frozen=True)
class BrokerTerms:
    """What the shared options need to know of one broker, and where the broker departs from them.

    ``defaults``, ``parsers``, ``notes`` and ``deprecated`` are keyed by option name: a default or parser
    of this broker's own (where its protocol differs, e.g. TANK's bundle size limit), a sentence on its
    own behaviour appended to the shared documentation, old names that still work with a warning.
    """

    name: str  # as the documentation names the broker: "TubeMQ"
    partition_key: str  # the key form of offset JSON: "topic:partition"
    example: str  # an offset JSON error messages show: '{"events:0": 42}'
    is_partition_key: Callable[[str], bool]
    topics: Parser  # topic names: the broker's rules, a sorted tuple of distinct names
    settings: type[ConnectionSettings]  # the timeout defaults come from its field defaults
    start_words: tuple[str, ...] = ("earliest", "latest")  # plus "group" where a group's offsets are stored
    defaults: Mapping[str, str | None] = field(default_factory=dict)
    parsers: Mapping[str, Parser] = field(default_factory=dict)
    notes: Mapping[str, str] = field(default_factory=dict)
    deprecated: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        known = {option.name for option in SHARED}
        for what, mapping in (("defaults", self.defaults), ("parsers", self.parsers), ("notes", self.notes),
                              ("deprecated", self.deprecated)):
            unknown = sorted(set(mapping) - known)
            if unknown:  # a misspelt name would silently not apply
                raise ValueError(f"{self.name} {what} name options that are not shared: {', '.join(unknown)}")


@dataclass(frozen=True)
class SharedSpec(OptionSpec):
    """The spec of a shared option for one broker; remembers which option and broker it comes from."""

    template: SharedOption | None = field(default=None, compare=False, repr=False)
    terms: BrokerTerms | None = field(default=None, compare=False, repr=False)
    note: str = ""

    @property
    def broker(self) -> BrokerTerms:
        """The terms of the broker this spec is for (set by :meth:`SharedOption.spec`, which makes every one)."""
        if self.terms is None:
            raise ValueError(f"option {self.name}: a SharedSpec is made by SharedOption.spec(terms)")
        return self.terms


@dataclass(frozen=True)
class SharedOption:
    """One option several brokers have, written once. ``doc`` may name ``<key>``, the partition key form.

    ``default_from`` / ``parser_from`` derive the default / parser from the broker's terms where they
    depend on it (timeouts from its client settings, offset JSON from its partition keys); ``parse`` is
    ``None`` when every broker must give its own (``BrokerTerms.parsers``).
    """

    name: str
    default: str | None
    parse: Parser | None
    doc: str
    applies: str = READ
    attr: str = ""
    default_from: Callable[[BrokerTerms], str | None] | None = None
    parser_from: Callable[[BrokerTerms], Parser] | None = None

    def spec(self, terms: BrokerTerms) -> SharedSpec:
        """This option as ``terms``' broker has it."""
        parse = terms.parsers.get(self.name) or (self.parser_from(terms) if self.parser_from else self.parse)
        if parse is None:
            raise ValueError(f"option {self.name}: {terms.name} must give its parser (BrokerTerms.parsers)")
        if self.name in terms.defaults:
            default = terms.defaults[self.name]
        else:
            default = self.default_from(terms) if self.default_from else self.default
        note = terms.notes.get(self.name, "")
        doc = " ".join(filter(None, (self.doc.replace(KEY, terms.partition_key), note)))
        return SharedSpec(self.name, default, parse, doc, applies=self.applies, attr=self.attr,
                          deprecated=terms.deprecated.get(self.name, ()), template=self, terms=terms, note=note)


def _starting(terms: BrokerTerms) -> Parser:
    def parse(name: str, value: str) -> OffsetSpec:
        return parse_offset_spec(name, value, allow=terms.start_words, check_key=terms.is_partition_key,
                                 key_form=terms.partition_key, example=terms.example)

    return parse


def _ending(terms: BrokerTerms) -> Parser:
    def parse(name: str, value: str) -> OffsetSpec:
        return parse_offset_spec(name, value, allow=("latest",), check_key=terms.is_partition_key,
                                 key_form=terms.partition_key, example=terms.example)

    return parse


# --- every broker --------------------------------------------------------------------------------

TOPIC = SharedOption(
    "topic", None, None, "Topic(s) to read, comma separated. For writing, the default topic (a `topic` column "
    "is used when this is absent).", applies="both", attr="topics", parser_from=lambda terms: terms.topics)
STARTING_OFFSETS = SharedOption(
    "startingOffsets", "latest", None, "Where a new query starts: `earliest` (each partition's first available "
    f"message), `latest` (the next message produced) or JSON `{{\"{KEY}\": offset}}` with -2 = earliest, "
    "-1 = latest. A restarted query resumes from its checkpoint instead. Batch reads default to `earliest`.",
    parser_from=_starting)
ENDING_OFFSETS = SharedOption(
    "endingOffsets", "latest", None, "Batch reads only: where to stop (exclusive), `latest` (each partition's "
    "end when the read is planned) or JSON as above (-1 = latest).", parser_from=_ending)
MAX_RECORDS_PER_PARTITION = SharedOption(
    "maxRecordsPerPartition", None, parse_positive_int, "Batch reads: split a partition's range into Spark "
    "tasks of at most this many messages, so a backfill uses every core.")
MAX_OFFSETS_PER_TRIGGER = SharedOption(
    "maxOffsetsPerTrigger", None, parse_positive_int, "Most messages per micro-batch, shared across partitions "
    "in proportion to their backlog. Unset: everything available.")
MIN_OFFSETS_PER_TRIGGER = SharedOption(
    "minOffsetsPerTrigger", None, parse_positive_int, "Fewest new messages a micro-batch waits for (no tiny "
    "batches from a trickle), until `maxTriggerDelay` has passed since the last batch. At most "
    "`maxOffsetsPerTrigger`. `Trigger.AvailableNow` never waits: its last batch takes what is left.")
MAX_TRIGGER_DELAY = SharedOption(
    "maxTriggerDelay", "15m", parse_duration_ms, "With `minOffsetsPerTrigger`: the longest a query waits for "
    "that many messages before it reads what there is (`30s`, `15m`, `1h`; a bare number is ms).",
    attr="max_trigger_delay_ms")
MAX_BYTES_PER_TRIGGER = SharedOption(
    "maxBytesPerTrigger", None, parse_byte_size, "Most bytes of message values per micro-batch (`64m`, `1g`, or "
    "a number of bytes), shared like `maxOffsetsPerTrigger`, which it composes with (the smaller wins). "
    "Estimated from a sample of each partition's next messages; a batch reads at least one message.")
FAIL_ON_DATA_LOSS = SharedOption(
    "failOnDataLoss", "true", parse_bool, "Fail the query when data it planned to read is gone (retention "
    "removed it, a partition vanished, a partition's end went back or its offsets were reused). `false`: log it "
    "and read what is left; after a broker lost acknowledged messages, the query resumes where the broker's "
    "offsets diverge from what it read (the offsets' `#last@` marks), so every message written at the reused "
    "offsets is read.")
ON_UNAVAILABLE_PARTITIONS = SharedOption(
    "onUnavailablePartitions", FAIL, choice(*UNAVAILABLE_CHOICES), "Batch reads: partitions the read should "
    "cover whose broker does not serve them now (down or stopped). `fail`: fail before reading anything, naming "
    "each broker and its partitions (`PartitionsUnavailableError`). `skip`: read what is served and log, as a "
    "warning, what was left out.")
"""What counts as unavailable is each broker's own evidence, which its note says (the meaning differs there)."""
CONNECT_TIMEOUT = SharedOption(
    "connectTimeoutMs", None, parse_positive_int, "TCP connect timeout.", applies="both",
    default_from=lambda terms: terms.settings.default_ms("connect_timeout_s"))
REQUEST_TIMEOUT = SharedOption(
    "requestTimeoutMs", None, parse_positive_int, "Time to wait for any one request's answer.", applies="both",
    default_from=lambda terms: terms.settings.default_ms("request_timeout_s"))
MAX_IN_FLIGHT = SharedOption(
    "maxInFlight", "64", parse_positive_int, "Writing: send requests awaiting the broker's acknowledgement at "
    "once.", applies=WRITE)
SEND_RETRIES = SharedOption(
    "sendRetries", "3", parse_non_negative_int, "Writing: re-sends of a message (or of a batch of them) after a "
    "retriable error before the task fails.", applies=WRITE)
OUTAGE_TIMEOUT = SharedOption(
    "outageTimeoutMs", "900000", parse_non_negative_ms, "How long a broker that is down or restarting (its port "
    "refuses connections or does not answer, no broker serves the topic that exists) is waited for before the "
    "task fails with the retriable `BrokerUnavailableError` (15 minutes: a broker down for 10 minutes stops "
    "no query). Reading: a read task whose range is on that broker (a micro-batch planned just before it went "
    "down, or replayed after a restart) waits, logging a WARNING naming broker, partition and range every "
    "30 s, and reads on from where it stood once the broker is back. Writing: sends are retried within it, "
    "`sendRetries` counts the other retriable errors. `0`: reads fail after 6 times `requestTimeoutMs` of retries "
    "(RocketMQ: `failoverTimeoutMs`) with `RangeReadError`, writes at the first such error. A topic or "
    "partition removed from the configuration is no outage and is never waited for. Only an address that "
    "answered once in this process (or that the driver or the checkpoint vouches for) is waited for: an address "
    "option (`master`, `broker`, `namesrv`) that never answered fails within seconds with `NeverAnsweredError` "
    "naming it.", applies="both")

DEFER_ON_OUTAGE = SharedOption(
    "deferOnOutage", "true", parse_bool, "Streaming, with `deferredRangesPath` set: a read task whose broker goes "
    "down mid-batch returns what it read after one short try (2 s; one that does not answer: one "
    "`requestTimeoutMs`) and leaves the rest of its range to the next micro-batches, which read on from there once "
    "the broker is back, so the other brokers' partitions keep flowing. `false`, or no `deferredRangesPath`: the "
    "task waits for its broker (up to `outageTimeoutMs`), and with it the whole query. Either way nothing is lost.")
DEFERRED_RANGES_PATH = SharedOption(
    "deferredRangesPath", None, parse_shared_directory, "Streaming: the directory where read tasks report the "
    "unread rest of a range whose broker is down (`deferOnOutage`) and the driver reads it, one small file per "
    "such range. Unset (the default), tasks wait for their broker instead. It must outlive the driver as "
    "`checkpointLocation` does and be reached by the driver and every executor: a local path in local mode, "
    "else a URI such as `hdfs://namenode/dir`, `webhdfs://namenode:9870/dir`, `s3a://bucket/dir` (extra "
    "`tubespark[s3]`), `file:///dir` (an executor that cannot see it waits for its broker, and says so once). Each "
    "query keeps its reports in a directory of its own (`query-<token>`, the token in its checkpoint), so any "
    "number of queries may share it; a restart must find it there, else the query stops with `DataLossError` "
    "rather than take its last batch as read.")

EVERY_BROKER: tuple[SharedOption, ...] = (
    TOPIC, STARTING_OFFSETS, ENDING_OFFSETS, MAX_RECORDS_PER_PARTITION, MAX_OFFSETS_PER_TRIGGER,
    MIN_OFFSETS_PER_TRIGGER, MAX_TRIGGER_DELAY, MAX_BYTES_PER_TRIGGER, FAIL_ON_DATA_LOSS, ON_UNAVAILABLE_PARTITIONS,
    CONNECT_TIMEOUT, REQUEST_TIMEOUT, MAX_IN_FLIGHT, SEND_RETRIES, OUTAGE_TIMEOUT, DEFER_ON_OUTAGE,
    DEFERRED_RANGES_PATH,
)
"""The options every broker's data source has, parsed into the attributes of :class:`SharedOptions`."""

# --- some brokers -------------------------------------------------------------------------------

GROUP = SharedOption(
    "group", None, None, "Consumer group.")
"""Each broker gives its parser (its own rules for group names) and says, in its note, what the group does
there: the brokers balance and store offsets differently, so that part of the meaning truly differs."""
COMMIT_TO_GROUP = SharedOption(
    "commitToGroup", "true", parse_bool, "Streams with a `group`: when a micro-batch commits, store its end "
    "offsets as the group's offsets on the brokers, so the broker's admin tools show the group's lag and "
    "`startingOffsets=group` continues from there.")
VERIFY_CHECKSUMS = SharedOption(
    "verifyChecksums", "true", parse_bool, "Check every message's stored CRC; a mismatch fails the task.")
BUNDLE_MAX_ROWS = SharedOption(
    "bundleMaxRows", "1000", parse_positive_int, "Writing: most rows in one bundle.", applies=WRITE)
BUNDLE_MAX_BYTES = SharedOption(
    "bundleMaxBytes", None, parse_positive_int, "Writing: most bytes of rows (before compression) in one bundle.",
    applies=WRITE)
BUNDLE_LINGER_MS = SharedOption(
    "bundleLingerMs", "200", parse_non_negative_ms, "Writing: a bundle open this long is sent when the next rows "
    "arrive, full or not (the end of a task sends every bundle).", applies=WRITE)
BUNDLE_COMPRESSION = SharedOption(
    "bundleCompression", None, None, "Writing: how each bundle's rows are compressed.", applies=WRITE)

SHARED: tuple[SharedOption, ...] = (
    *EVERY_BROKER, GROUP, COMMIT_TO_GROUP, VERIFY_CHECKSUMS, BUNDLE_MAX_ROWS, BUNDLE_MAX_BYTES, BUNDLE_LINGER_MS,
    BUNDLE_COMPRESSION,
)
"""Every shared option, in the order the Options page's shared table lists them."""


def every_broker_specs(terms: BrokerTerms) -> tuple[SharedSpec, ...]:
    """The specs of :data:`EVERY_BROKER` for one broker."""
    return tuple(option.spec(terms) for option in EVERY_BROKER)


@dataclass(frozen=True)
class SharedOptions(ParsedOptions):
    """Base of every broker's parsed options: the attributes of :data:`EVERY_BROKER`, and their rules.

    A broker's options class derives from this and adds its own attributes; its ``SPECS`` hold
    :func:`every_broker_specs` plus its own. A broker's :meth:`check` calls this one first.
    """

    topics: tuple[str, ...] | None
    starting_offsets: OffsetSpec
    ending_offsets: OffsetSpec
    max_records_per_partition: int | None
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    max_bytes_per_trigger: int | None
    fail_on_data_loss: bool
    on_unavailable_partitions: str
    connect_timeout_ms: int
    request_timeout_ms: int
    max_in_flight: int
    send_retries: int
    outage_timeout_ms: int
    defer_on_outage: bool
    deferred_ranges_path: str | None

    def check(self, mode: str) -> None:
        if mode == WRITE and self.topics and len(self.topics) > 1:
            raise OptionError("option topic: the sink writes to one topic; use a 'topic' column to write to several")
        if (self.min_offsets_per_trigger and self.max_offsets_per_trigger
                and self.min_offsets_per_trigger > self.max_offsets_per_trigger):
            raise OptionError(f"option minOffsetsPerTrigger={self.min_offsets_per_trigger} is above "
                              f"maxOffsetsPerTrigger={self.max_offsets_per_trigger}; lower the one or raise the other")


# --- the Options page ----------------------------------------------------------------------------


def own_option_table(specs: Iterable[OptionSpec], mode: str | None = None) -> str:
    """Markdown table of a broker's own options: ``specs`` without the shared ones (listed once elsewhere)."""
    return render_table((spec for spec in specs if not isinstance(spec, SharedSpec)), mode)


def shared_option_table(brokers: Sequence[Iterable[OptionSpec]]) -> str:
    """Markdown table of the shared options, each once, from the specs of ``brokers`` (each broker's SPECS).

    An option only some brokers have says which; a default that differs names each broker's; a broker's
    note and old names follow the shared text, prefixed with the broker's name.
    """
    found: dict[str, list[SharedSpec]] = {}
    for specs in brokers:
        for spec in specs:
            if isinstance(spec, SharedSpec):
                found.setdefault(spec.name, []).append(spec)
    rows = ["| option | default | applies to | meaning |", "|---|---|---|---|"]
    for option in SHARED:
        specs = found.get(option.name, [])
        if not specs:
            continue
        names = [spec.broker.name for spec in specs]
        if len({spec.default for spec in specs}) == 1:
            default = f"`{specs[0].default}`" if specs[0].default else ""
        else:
            default = ", ".join(f"{name} {f'`{spec.default}`' if spec.default else 'unset'}"
                                for name, spec in zip(names, specs, strict=True))
        parts = [f"{' and '.join(names)} only." if len(specs) < len(brokers) else "", option.doc]
        if KEY in option.doc:
            forms = (f"{spec.broker.name} `{spec.broker.partition_key}`" for spec in specs)
            parts.append(f"`{KEY}`: {', '.join(forms)}.")
        parts += [f"{spec.broker.name}: {spec.note}" for spec in specs if spec.note]
        parts += [f"{spec.broker.name}: {spec.deprecation_note()}" for spec in specs if spec.deprecated]
        rows.append(f"| `{option.name}` | {default} | {option.applies} | {' '.join(filter(None, parts))} |")
    return "\n".join(rows)


