"""Every option of the ``tubemq`` data source, defined once: name, default, parser and documentation.

Parsing happens before any network call, so a typo fails the query at once with a message naming
the option and the value. Unknown options are warned about (Spark passes user options through
verbatim, so a misspelt one would otherwise be silently ignored). The README's option table is
generated from :data:`OPTIONS`.
"""

from __future__ import annotations

import json
import logging
import re
import ssl
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tubespark.errors import OptionError
from tubespark.tubemq.client.common import ClientSettings, Credentials

log = logging.getLogger(__name__)

EARLIEST, LATEST = -2, -1
_GROUP_RE = re.compile(r"^[a-zA-Z][\w-]+$")
_TOPIC_RE = re.compile(r"^[a-zA-Z]\w+$")
_ADDRESS_RE = re.compile(r"^[^\s:,]+:\d{1,5}$")


def _bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name}={value!r}: expected true or false")


def _positive_int(name: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise OptionError(f"option {name}={value!r}: expected a positive integer")
    return number


def _masters(name: str, value: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if not _ADDRESS_RE.match(v) or not 0 < int(v.rsplit(":", 1)[1]) < 65536]
    if not items or bad:
        raise OptionError(f"option {name}={value!r}: expected host:port[,host:port...]"
                          + (f" (bad: {', '.join(bad)})" if bad else ""))
    return items


def _topics(name: str, value: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if not _TOPIC_RE.match(v) or len(v) > 64]
    if not items or bad:
        raise OptionError(f"option {name}={value!r}: expected topic names (letter first, then letters, digits or "
                          f"_; 2 to 64 chars)" + (f"; bad: {', '.join(bad)}" if bad else ""))
    return sorted(set(items))


def _group(name: str, value: str) -> str:
    value = value.strip()
    if not _GROUP_RE.match(value) or len(value) > 200:
        raise OptionError(f"option {name}={value!r}: a group name starts with a letter, then letters, digits, "
                          f"'_' or '-' (2 to 200 chars)")
    return value


def _stream_ids(name: str, value: str) -> list[str]:
    items = sorted({v.strip() for v in value.split(",") if v.strip()})
    bad = [v for v in items if not re.match(r"^[_A-Za-z0-9\-]+$", v) or len(v) > 256]
    if bad or len(items) > 500:
        raise OptionError(f"option {name}={value!r}: streamIds are at most 500 names of letters, digits, '_' "
                          f"or '-'" + (f"; bad: {', '.join(bad)}" if bad else ""))
    return items


def _attribute_name(name: str, value: str) -> str:
    value = value.strip()
    if not re.match(r"^[A-Za-z_][\w.-]{0,63}$", value) or value.startswith("$"):
        raise OptionError(f"option {name}={value!r}: expected an attribute name (letters, digits, '_', '.', '-')")
    return value


def parse_offset_spec(name: str, value: str, *, allow: tuple[str, ...]) -> str | dict[str, int]:
    """``earliest`` | ``latest`` | ``group`` (as allowed) or JSON ``{"brokerId:topic:partitionId": offset}``.

    In the JSON, -2 means earliest and -1 latest; other offsets must be non-negative multiples of 28.
    """
    text = value.strip()
    if text.lower() in allow:
        return text.lower()
    if not text.startswith("{"):
        raise OptionError(f"option {name}={value!r}: expected {' | '.join(allow)} or a JSON object "
                          f'like {{"1:mytopic:0": 280}}')
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {name}: invalid JSON ({exc.msg} at position {exc.pos}): {value!r}") from None
    if not isinstance(spec, dict) or not spec:
        raise OptionError(f"option {name}: the JSON must be a non-empty object of partition key -> offset")
    result: dict[str, int] = {}
    for key, offset in spec.items():
        parts = key.split(":")
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2].isdigit() or not _TOPIC_RE.match(parts[1]):
            raise OptionError(f"option {name}: bad partition key {key!r}, expected brokerId:topic:partitionId")
        if not isinstance(offset, int) or isinstance(offset, bool) or (offset < 0 and offset not in (EARLIEST, LATEST)):
            raise OptionError(f"option {name}: offset for {key} must be -2 (earliest), -1 (latest) or >= 0, "
                              f"got {offset!r}")
        result[key] = offset
    return result


@dataclass(frozen=True)
class Option:
    name: str
    default: str | None
    parse: Callable[[str, str], Any]
    doc: str
    required: bool = False
    applies: str = "read"  # read | write | both


def _starting(name: str, value: str) -> str | dict[str, int]:
    return parse_offset_spec(name, value, allow=("earliest", "latest", "group"))


def _ending(name: str, value: str) -> str | dict[str, int]:
    return parse_offset_spec(name, value, allow=("latest",))


OPTIONS: tuple[Option, ...] = (
    Option("master", None, _masters, "TubeMQ master RPC addresses, `host:port[,host:port]`.", True, "both"),
    Option("topic", None, _topics, "Topic(s) to read, comma separated. For writing, the default topic "
           "(a `topic` column is used when this is absent).", False, "both"),
    Option("group", None, _group, "Consumer group. The master balances the topic's partitions over the "
           "group's members; committed offsets are stored for it on the brokers. Required for streaming reads."),
    Option("startingOffsets", "latest", _starting, "Where a new query starts: `earliest`, `latest`, `group` "
           "(the group's committed offsets on the brokers) or JSON `{\"brokerId:topic:partitionId\": offset}` "
           "with -2 = earliest, -1 = latest. A restarted query resumes from its checkpoint instead. "
           "Batch reads default to `earliest`."),
    Option("endingOffsets", "latest", _ending, "Batch reads only: where to stop, `latest` or JSON as above "
           "(-1 = latest)."),
    Option("maxRecordsPerPartition", None, _positive_int, "Batch reads: split a partition's range into Spark "
           "tasks of at most this many messages, so a backfill uses every core."),
    Option("maxOffsetsPerTrigger", None, _positive_int, "Most messages per micro-batch, shared across "
           "partitions in proportion to their backlog. Unset: everything available."),
    Option("streamIds", None, _stream_ids, "Only messages whose streamId (TubeMQ msgType) is one of these, "
           "comma separated. Filtered on the broker."),
    Option("failOnDataLoss", "true", _bool, "Fail the query when data it planned to read is gone (retention "
           "removed it, a partition vanished). `false`: log it and go on."),
    Option("commitToGroup", "true", _bool, "When a micro-batch commits, store its end offsets as the group's "
           "offsets on the brokers, so TubeMQ's admin tools show the group's lag."),
    Option("includeAttributes", "false", _bool, "Add an `attributes` map<string,string> column with each "
           "message's attributes."),
    Option("verifyChecksums", "true", _bool, "Check every message's CRC. A mismatch fails the task."),
    Option("dedupAttribute", None, _attribute_name,
           "Writing: stamp every message with this attribute holding a stable id (write or query+batch, task, "
           "row), so replays of a retried task can be recognised. Reading: the attribute `dedupe` looks at.",
           False, "both"),
    Option("dedupe", "false", _bool, "Drop messages whose `dedupAttribute` id was already read in the same "
           "task (replays from a retried tubespark write task). Needs `dedupAttribute`."),
    Option("maxInFlight", "64", _positive_int, "Writing: SendMessage requests awaiting acknowledgement per "
           "broker connection.", False, "write"),
    Option("sendRetries", "3", _positive_int, "Writing: re-sends of a message after a retriable error before "
           "the task fails.", False, "write"),
    Option("connectTimeoutMs", "3000", _positive_int, "TCP connect timeout.", False, "both"),
    Option("requestTimeoutMs", "10000", _positive_int, "Time to wait for any one request's answer.", False, "both"),
    Option("heartbeatIntervalMs", "3000", _positive_int, "Heartbeat period to the master and brokers "
           "(keep well below the server's 30 s session timeout).", False, "both"),
    Option("assignmentTimeoutMs", "60000", _positive_int, "How long the driver waits for the master to assign "
           "partitions when a query starts."),
    Option("auth.user", None, lambda n, v: v, "User name for an authenticating TubeMQ cluster.", False, "both"),
    Option("auth.password", None, lambda n, v: v, "Password for `auth.user`.", False, "both"),
    Option("tubemq.tlsEnable", "false", _bool, "Connect with TLS (to the masters' and brokers' TLS ports).",
           False, "both"),
    Option("tubemq.tlsCaFile", None, lambda n, v: v, "PEM file of CAs to trust for TLS (default: system CAs).",
           False, "both"),
)
_BY_NAME = {o.name.lower(): o for o in OPTIONS}

PROTECTED = {
    "tubemq.group": "group", "tubemq.groupname": "group", "tubemq.consumergroup": "group",
    "tubemq.topic": "topic", "tubemq.masterinfo": "master", "tubemq.masterhostandportlist": "master",
    "tubemq.sessionkey": "startingOffsets", "tubemq.consumeposition": "startingOffsets",
    "tubemq.partoffsetmap": "startingOffsets", "tubemq.clientid": "(generated by tubespark)",
}


@dataclass(frozen=True)
class TubeOptions:
    """Validated options. ``values`` holds every known option, parsed, defaults filled in."""

    values: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def get(self, name: str, default: Any = None) -> Any:
        value = self.values.get(name)
        return default if value is None else value

    def client_settings(self) -> ClientSettings:
        credentials = None
        if self.get("auth.user"):
            credentials = Credentials(self["auth.user"], self.get("auth.password", ""))
        context = None
        if self["tubemq.tlsEnable"]:
            context = ssl.create_default_context(cafile=self.get("tubemq.tlsCaFile"))
        return ClientSettings(connect_timeout_s=self["connectTimeoutMs"] / 1000,
                              call_timeout_s=self["requestTimeoutMs"] / 1000,
                              heartbeat_interval_s=self["heartbeatIntervalMs"] / 1000,
                              credentials=credentials, ssl_context=context)


def parse_options(raw: Mapping[str, str], *, mode: str, required: tuple[str, ...] = ()) -> TubeOptions:
    """Validate ``raw`` (Spark's case-insensitive option map) for ``mode`` ``read`` or ``write``.

    Raises OptionError for a missing required option, a bad value or a protected passthrough key;
    warns about unknown options.
    """
    given = {k.lower(): (k, v) for k, v in raw.items()}
    values: dict[str, Any] = {}
    for key, (original, _value) in given.items():
        if key in PROTECTED:
            raise OptionError(f"option {original} cannot be passed through: tubespark sets it itself; "
                              f"use {PROTECTED[key]} instead")
        if key not in _BY_NAME:
            warnings.warn(f"tubemq: unknown option {original!r} is ignored", stacklevel=3)
            log.warning("tubemq: unknown option %r is ignored", original)
    for option in OPTIONS:
        if option.applies not in (mode, "both"):
            continue
        _key, text = given.get(option.name.lower(), (option.name, None))
        if text is None:
            if option.required or option.name in required:
                raise OptionError(f"option {option.name} is required: {option.doc}")
            text = option.default
        values[option.name] = option.parse(option.name, str(text)) if text is not None else None
    if mode == "write" and values.get("topic") and len(values["topic"]) > 1:
        raise OptionError("option topic: the sink writes to one topic; use a 'topic' column to write to several")
    if values.get("dedupe") and not values.get("dedupAttribute"):
        raise OptionError("option dedupe=true needs dedupAttribute (the attribute the writer stamped)")
    if values.get("auth.password") and not values.get("auth.user"):
        raise OptionError("option auth.password is set but auth.user is not")
    return TubeOptions(values)


def option_table(mode: str | None = None) -> str:
    """Markdown table of the options (the README embeds it)."""
    rows = ["| option | default | applies to | meaning |", "|---|---|---|---|"]
    for option in OPTIONS:
        if mode and option.applies not in (mode, "both"):
            continue
        default = "**required**" if option.required else (f"`{option.default}`" if option.default else "")
        rows.append(f"| `{option.name}` | {default} | {option.applies} | {option.doc} |")
    return "\n".join(rows)
