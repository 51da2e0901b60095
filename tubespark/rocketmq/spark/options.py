"""Every option of the ``rocketmq`` data source, defined once (docs/reference/options.md's table is generated from it).

Attributes are the option names in snake_case, except list-valued ones, which are plural
(``namesrv`` -> ``namesrvs``, ``topic`` -> ``topics``). Parsing happens before any network call. The
options every broker shares, and ``commitToGroup`` and ``verifyChecksums`` (shared with TubeMQ), are
defined once in :mod:`tubespark.spark.options`; :data:`TERMS` says what they need to know of RocketMQ.
``commitToGroup`` was called ``commitOffsets`` here; the old name still works, with a warning.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from tubespark.core.options import (
    BOTH,
    READ,
    WRITE,
    OptionSpec,
    choice,
    comma_list,
    int_between,
    parse_bool,
    parse_host_ports,
    parse_positive_int,
    parse_text,
)
from tubespark.core.shared_dir import parse_shared_directory
from tubespark.errors import OptionError
from tubespark.rocketmq.client.client import ClientSettings
from tubespark.rocketmq.client.keeper import MIN_INVISIBLE_MS
from tubespark.rocketmq.wire.acl import Credentials
from tubespark.rocketmq.wire.filter import SQL92, SUB_ALL, TAG, Filter
from tubespark.rocketmq.wire.route import MessageQueue
from tubespark.spark.options import (
    COMMIT_TO_GROUP,
    GROUP,
    VERIFY_CHECKSUMS,
    BrokerTerms,
    SharedOptions,
    every_broker_specs,
    own_option_table,
)
from tubespark.spark.tls_options import TlsOptions, tls_specs

__all__ = ["OPTIONS", "TERMS", "RocketMQOptions", "option_table"]

_NAME_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")  # the server's rule for topic and group names
PULL, POP = "pull", "pop"
KEY_FORM = "topic:brokerName:queueId"
KEY_EXAMPLE = '{"mytopic:broker-a:0": 280}'
MAX_INVISIBLE_MS = 12 * 3600 * 1000  # RocketMQ's proxy refuses more (maxInvisibleTimeMills); so do we
QUEUE_LISTING = f"keys are {KEY_FORM}; `mqadmin topicRoute -t <topic>` lists a topic's broker groups and queues"
"""How a user lists a topic's queues, for an error that names a queue the topic does not have."""


def _names(kind: str) -> Callable[[str, str], tuple[str, ...]]:
    def parse(name: str, value: str) -> tuple[str, ...]:
        items = comma_list(value)
        bad = [v for v in items if not _NAME_RE.match(v) or len(v) > 127]
        if not items or bad:
            raise OptionError(f"option {name}={value!r}: expected {kind} names (letters, digits, '_', '-', '%', "
                              f"'|'; at most 127 chars)" + (f"; bad: {', '.join(bad)}" if bad else ""))
        return tuple(sorted(set(items)))

    return parse


def _group(name: str, value: str) -> str:
    value = value.strip()
    if not _NAME_RE.match(value) or len(value) > 120:
        raise OptionError(f"option {name}={value!r}: expected a group name of letters, digits, '_', '-', '%' or "
                          f"'|' (at most 120 chars)")
    return value


def _expression(name: str, value: str) -> str:
    value = value.strip()
    if not value:
        raise OptionError(f"option {name} is empty: set it to `*` (every message), `TagA || TagB` (some tags), or "
                          f"an SQL92 expression with expressionType=SQL92")
    return value


def _invisible_time(name: str, value: str) -> int:
    """``popInvisibleTimeMs``: at least :data:`MIN_INVISIBLE_MS`, at most RocketMQ's 12 h."""
    number: int = int_between(1, MAX_INVISIBLE_MS)(name, value)
    if number < MIN_INVISIBLE_MS:
        raise OptionError(f"option {name}={value!r} is too short: at least {MIN_INVISIBLE_MS} "
                          f"({MIN_INVISIBLE_MS // 1000} s). Popped messages are kept hidden by extending their "
                          f"invisible time once half of it is left, and that half is the margin a renewal of "
                          f"thousands of messages needs on a busy machine: with less, a batch that runs longer "
                          f"than {name} is delivered again while it runs")
    return number


def is_queue_key(key: str) -> bool:
    try:
        mq = MessageQueue.parse_key(key)
    except ValueError:
        return False
    return bool(_NAME_RE.match(mq.topic))


_PULL_ONLY = "Pull mode only."

TERMS = BrokerTerms(
    "RocketMQ", KEY_FORM, KEY_EXAMPLE, is_queue_key, _names("topic"), ClientSettings,
    start_words=("earliest", "latest", "group"),
    defaults={"verifyChecksums": "false"},
    parsers={"group": _group},
    notes={
        "group": "Pull: where committed offsets are stored on commit (optional; needed for "
                 "`startingOffsets=group`). Pop: required, the group the broker balances.",
        "onUnavailablePartitions": "The partitions are queues, the brokers broker groups: queues of a broker "
                                   "group that is not registered at the name server now (stopped or down; the "
                                   "name server forgets such a group, so only queues this process was routed to "
                                   "before or that the offsets options name are known).",
        "startingOffsets": "Also `group`: the group's committed offsets (needs `group`). Pop mode: only "
                           "`earliest` or `latest`, where a group that never consumed starts (the broker keeps "
                           "the group's position).",
        "maxOffsetsPerTrigger": "Pull mode only: a pop micro-batch is bounded by `popPartitions` times "
                                "`popMaxMessages` instead. With a `subExpression` it counts offsets, so every "
                                "message the filter skips too: a batch may have far fewer rows.",
        "minOffsetsPerTrigger": _PULL_ONLY,
        "maxTriggerDelay": _PULL_ONLY,
        "maxBytesPerTrigger": _PULL_ONLY,
        "deferOnOutage": "Pull mode only (a pop task reads no range).",
        "deferredRangesPath": "Pull mode only.",
        "maxInFlight": "Batch sends, per task.",
        "commitToGroup": "Pull mode (pop mode acks what it read instead).",
    },
    deprecated={"commitToGroup": ("commitOffsets",)},
)
"""What the shared options (:mod:`tubespark.spark.options`) need to know of RocketMQ: offsets are queue
offsets keyed ``topic:brokerName:queueId``; the read limits apply to pull mode."""

OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("namesrv", None, parse_host_ports, "Name server addresses, `host:port[,host:port]`.", True,
               BOTH, attr="namesrvs"),
    *every_broker_specs(TERMS),
    GROUP.spec(TERMS),
    COMMIT_TO_GROUP.spec(TERMS),
    VERIFY_CHECKSUMS.spec(TERMS),
    OptionSpec("consumeMode", PULL, choice(PULL, POP), "`pull`: one Spark partition per message queue, exact "
               "offset ranges, exactly-once with the checkpoint. `pop`: executors pop messages (the broker "
               "balances queues), rows carry `receiptHandle`; streams ack after Spark's commit of the batch "
               "(at-least-once, `Trigger.AvailableNow` reads what was there at the start), a batch read acks "
               "what each task read (a consuming read)."),
    OptionSpec("includeProperties", "false", parse_bool, "Add a `properties` map<string,string> column with "
               "every message property."),
    OptionSpec("subExpression", SUB_ALL, _expression, "Which messages to read, filtered by the broker (pull and "
               "pop). `expressionType=TAG`: `*` (all) or tags joined by `||` (`TagA || TagB`); a message without "
               "tags matches only `*`. `expressionType=SQL92`: a condition on message properties (`a > 5 AND "
               "TAGS IN ('x')`), on a broker with `enablePropertyFilter=true` (else the read fails on the driver "
               "with FilterNotSupportedError). Offsets still count every message, the skipped ones included "
               "(see `maxOffsetsPerTrigger`)."),
    OptionSpec("expressionType", TAG.lower(), choice(TAG.lower(), SQL92.lower()), "How `subExpression` is read: "
               "`tag` or `sql92`."),
    OptionSpec("popPartitions", "2", int_between(1, 1024), "Pop: Spark tasks per micro-batch, each popping on "
               "its own."),
    OptionSpec("popMaxMessages", "10000", parse_positive_int, "Pop: most messages one task pops per "
               "micro-batch."),
    OptionSpec("popInvisibleTimeMs", "120000", _invisible_time, "Pop: how long popped "
               "messages stay hidden at a time, 30000 (30 s) to 43200000 (12 h). Tasks, from each pop on, and the "
               "driver while receipts wait for the commit, extend it (changeInvisibleTime) once half of it is "
               "left, so a batch may run longer; half of the least value is the margin a renewal of thousands of "
               "messages needs on a busy machine (less is refused). It bounds how long a driver may be down "
               "between a batch's commit and its acks without that batch coming back."),
    OptionSpec("popPollMs", "1000", int_between(1, 20000), "Pop: how long one pop waits on the broker for "
               "messages; a task ends after a round of pops returned nothing."),
    OptionSpec("popReceiptsPath", None, parse_shared_directory, "Pop: directory where tasks leave the receipts "
               "the driver acks after the commit: a local path (local mode, or a mount every node shares) or a URI "
               "of a filesystem driver and executors reach: `hdfs://namenode/dir`, `webhdfs://namenode:9870/dir`, "
               "`s3a://bucket/dir` (extra `tubespark[s3]`), `file:///dir`. Checked (written and deleted) when the "
               "query starts. Default: a directory under the system temp dir (local mode only)."),
    OptionSpec("batchMaxMessages", "256", parse_positive_int, "Writing: most messages in one batch send.", False,
               WRITE),
    OptionSpec("batchMaxBytes", "1048576", int_between(1024, 4 * 1024 * 1024), "Writing: most bytes in one batch "
               "send (the broker refuses more than its 4 MiB max message size).", False, WRITE),
    OptionSpec("producerGroup", "tubespark_producer", _group, "Writing: producer group named in sends.", False,
               WRITE),
    OptionSpec("autoCreateTopic", "false", parse_bool, "Writing: a topic the name server has no route for is "
               "sent to anyway, over the route of the brokers' template topic `TBW102`, and a broker with "
               "`autoCreateTopicEnable=true` creates it on the first send (4 queues or `TBW102`'s count, if "
               "lower, on each broker), as RocketMQ's Java producer does. `false`: such a topic fails the write "
               "with UnknownTopicError, so a misspelt topic never becomes a new one.", False, WRITE),
    OptionSpec("failoverTimeoutMs", ClientSettings.default_ms("failover_s"), parse_positive_int, "How long a read "
               "keeps following the route around a dead broker (the name server needs ~15 s to substitute an "
               "acting master).", False, BOTH),
    OptionSpec("accessKey", None, parse_text, "Access key (user name) for brokers with ACL (RocketMQ 5 "
               "`authenticationEnabled=true`): every request is signed with it and `secretKey`, as the Java "
               "client's `AclClientRPCHook` does. A wrong key or secret fails with AuthError, an operation the "
               "user has no policy for with AccessDeniedError.", False, BOTH),
    OptionSpec("secretKey", None, parse_text, "Secret of `accessKey` (the user's password). Only its signatures "
               "travel; it is kept out of logs, messages and the options' repr.", False, BOTH),
    *tls_specs("", enable="Connect with TLS, to the name servers and to the brokers alike, on the same ports "
               "(a RocketMQ 5 server takes TLS on its port unless its `tls.server.mode` is `disabled`; `enforcing` "
               "takes nothing else). See [RocketMQ's TLS](../rocketmq/tls.md).", cert="For servers with "
               "`tls.server.need.client.auth=require`.",
               hosts="the `namesrv` address given, the broker addresses the name server lists"),
)

PROTECTED = {"rocketmq.namesrvaddr": "namesrv", "namesrvaddr": "namesrv", "consumergroup": "group"}


@dataclass(frozen=True)
class RocketMQOptions(TlsOptions, SharedOptions):
    """Validated ``rocketmq`` options, one typed attribute per entry of :data:`OPTIONS`."""

    SPECS = OPTIONS
    PROTECTED = PROTECTED
    SOURCE = "rocketmq"

    namesrvs: tuple[str, ...]
    consume_mode: str
    group: str | None
    commit_to_group: bool
    include_properties: bool
    verify_checksums: bool
    sub_expression: str
    expression_type: str
    pop_partitions: int
    pop_max_messages: int
    pop_invisible_time_ms: int
    pop_poll_ms: int
    pop_receipts_path: str | None
    batch_max_messages: int
    batch_max_bytes: int
    producer_group: str
    auto_create_topic: bool
    failover_timeout_ms: int
    access_key: str | None
    secret_key: str | None = field(repr=False)  # a parsed options object is printed, logged and pickled

    def check(self, mode: str) -> None:
        super().check(mode)
        if bool(self.access_key) != bool(self.secret_key):
            raise OptionError("options accessKey and secretKey go together: set both (brokers with ACL) or neither")
        self.check_tls()
        if mode == WRITE:
            return
        if mode == READ and not self.topics:
            raise OptionError("option topic is required for reading: set it to the topic (or topics) to read")
        if self.expression_type == SQL92.lower() and self.sub_expression == SUB_ALL:
            raise OptionError("expressionType=sql92 needs option subExpression: an SQL92 condition on message "
                              "properties, such as `a > 5`")
        try:
            self.filter  # noqa: B018  # built here so a bad expression fails before any network call
        except ValueError as exc:
            raise OptionError(f"option subExpression: {exc}; set tags joined by '||' (or `*`), or an SQL92 "
                              f"condition with expressionType=sql92") from None
        if self.pop:
            if not self.group:
                raise OptionError("consumeMode=pop needs option group (the consumer group the broker balances)")
            if self.starting_offsets not in ("earliest", "latest"):
                raise OptionError("consumeMode=pop takes startingOffsets earliest or latest (where a group that "
                                  "never consumed starts); the broker keeps the group's position")
        elif self.starting_offsets == "group" and not self.group:
            raise OptionError("startingOffsets=group needs option group")

    @property
    def filter(self) -> Filter:
        """The subscription of reads: :data:`~tubespark.rocketmq.wire.filter.ALL` unless ``subExpression``."""
        return Filter(self.sub_expression, self.expression_type.upper())

    @property
    def pop(self) -> bool:
        return self.consume_mode == POP

    def client_settings(self) -> ClientSettings:
        return ClientSettings(connect_timeout_s=self.connect_timeout_ms / 1000,
                              request_timeout_s=self.request_timeout_ms / 1000,
                              failover_s=self.failover_timeout_ms / 1000,
                              credentials=Credentials(self.access_key, self.secret_key)
                              if self.access_key and self.secret_key else None,
                              ssl_context=self.ssl_context())


def option_table(mode: str | None = None) -> str:
    """Markdown table of RocketMQ's own options (docs/reference/options.md embeds it)."""
    return own_option_table(OPTIONS, mode)
