"""Every option of the ``rocketmq`` data source, defined once (the README table is generated from it).

Attributes are the option names in snake_case, except list-valued ones, which are plural
(``namesrv`` -> ``namesrvs``, ``topic`` -> ``topics``). Parsing happens before any network call.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from tubespark.core.options import (
    BOTH,
    READ,
    WRITE,
    OptionSpec,
    ParsedOptions,
    choice,
    comma_list,
    int_between,
    parse_bool,
    parse_host_ports,
    parse_local_directory,
    parse_positive_int,
    render_table,
)
from tubespark.errors import OptionError
from tubespark.rocketmq.client.client import ClientSettings
from tubespark.rocketmq.wire.route import MessageQueue
from tubespark.spark.offsets import OffsetSpec, parse_offset_spec

__all__ = ["OPTIONS", "RocketMQOptions", "option_table"]

_NAME_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")  # the server's rule for topic and group names
PULL, POP = "pull", "pop"
KEY_FORM = "topic:brokerName:queueId"
KEY_EXAMPLE = '{"mytopic:broker-a:0": 280}'


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
        raise OptionError(f"option {name}={value!r}: a group name is letters, digits, '_', '-', '%' or '|' "
                          f"(at most 120 chars)")
    return value


def is_queue_key(key: str) -> bool:
    try:
        mq = MessageQueue.parse_key(key)
    except ValueError:
        return False
    return bool(_NAME_RE.match(mq.topic))


def _starting(name: str, value: str) -> OffsetSpec:
    return parse_offset_spec(name, value, allow=("earliest", "latest", "group"), check_key=is_queue_key,
                             key_form=KEY_FORM, example=KEY_EXAMPLE)


def _ending(name: str, value: str) -> OffsetSpec:
    return parse_offset_spec(name, value, allow=("latest",), check_key=is_queue_key, key_form=KEY_FORM,
                             example=KEY_EXAMPLE)


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("namesrv", None, parse_host_ports, "Name server addresses, `host:port[,host:port]`.", True,
               BOTH, attr="namesrvs"),
    OptionSpec("topic", None, _names("topic"), "Topic(s) to read, comma separated. For writing, the default "
               "topic (a `topic` column is used when this is absent).", False, BOTH, attr="topics"),
    OptionSpec("consumeMode", PULL, choice(PULL, POP), "`pull`: one Spark partition per message queue, exact "
               "offset ranges, exactly-once with the checkpoint. `pop`: executors pop messages (the broker "
               "balances queues), rows carry `receiptHandle`, acks follow Spark's commit of the batch; "
               "at-least-once (streaming only)."),
    OptionSpec("group", None, _group, "Consumer group. Pull: where committed offsets are stored on commit "
               "(optional; needed for `startingOffsets=group`). Pop: required, the group the broker balances."),
    OptionSpec("startingOffsets", "latest", _starting, "Pull: where a new query starts, `earliest`, `latest`, "
               "`group` or JSON `{\"topic:brokerName:queueId\": offset}` (-2 earliest, -1 latest); a restart "
               "resumes from the checkpoint. Pop: `earliest` or `latest` for a group that never consumed. Batch "
               "reads default to `earliest`."),
    OptionSpec("endingOffsets", "latest", _ending, "Batch reads: where to stop, `latest` or JSON as above."),
    OptionSpec("maxOffsetsPerTrigger", None, parse_positive_int, "Pull streams: most messages per micro-batch, "
               "shared by backlog. Unset: everything available."),
    OptionSpec("maxRecordsPerPartition", None, parse_positive_int, "Batch reads: split a queue's range into "
               "Spark tasks of at most this many messages."),
    OptionSpec("failOnDataLoss", "true", parse_bool, "Fail when planned offsets are gone (retention). `false`: "
               "log and skip them."),
    OptionSpec("commitOffsets", "true", parse_bool, "Pull streams with `group`: store each committed batch's end "
               "as the group's offsets on the brokers (monitoring, hand-over)."),
    OptionSpec("includeProperties", "false", parse_bool, "Add a `properties` map<string,string> column with "
               "every message property."),
    OptionSpec("verifyChecksums", "false", parse_bool, "Check every message body's CRC32 against the stored "
               "one; a mismatch fails the task."),
    OptionSpec("popPartitions", "2", int_between(1, 1024), "Pop: Spark tasks per micro-batch, each popping on "
               "its own."),
    OptionSpec("popMaxMessages", "10000", parse_positive_int, "Pop: most messages one task pops per "
               "micro-batch."),
    OptionSpec("popInvisibleTimeMs", "120000", int_between(1000, 12 * 3600 * 1000), "Pop: how long popped "
               "messages stay hidden. Keep it above a micro-batch's duration: messages not acked in time are "
               "delivered again."),
    OptionSpec("popPollMs", "1000", int_between(1, 20000), "Pop: how long one pop waits on the broker for "
               "messages; a task ends after a round of pops returned nothing."),
    OptionSpec("popReceiptsPath", None, parse_local_directory, "Pop: directory where tasks leave the receipts the "
               "driver acks after the commit (local path in local mode, a shared mount on a cluster). Default: a "
               "directory under the system temp dir (local mode only)."),
    OptionSpec("maxInFlight", "64", parse_positive_int, "Writing: batch sends awaiting acknowledgement per task.",
               False, WRITE),
    OptionSpec("batchMaxMessages", "256", parse_positive_int, "Writing: most messages in one batch send.", False,
               WRITE),
    OptionSpec("batchMaxBytes", "1048576", int_between(1024, 4 * 1024 * 1024), "Writing: most bytes in one batch "
               "send (the broker refuses more than its 4 MiB max message size).", False, WRITE),
    OptionSpec("sendRetries", "3", parse_positive_int, "Writing: re-sends of a batch after a retriable error.",
               False, WRITE),
    OptionSpec("producerGroup", "tubespark_producer", _group, "Writing: producer group named in sends.", False,
               WRITE),
    OptionSpec("connectTimeoutMs", "3000", parse_positive_int, "TCP connect timeout.", False, BOTH),
    OptionSpec("requestTimeoutMs", "10000", parse_positive_int, "Time to wait for any one request's answer.",
               False, BOTH),
    OptionSpec("failoverTimeoutMs", "45000", parse_positive_int, "How long a read keeps following the route "
               "around a dead broker (the name server needs ~15 s to substitute an acting master).", False, BOTH),
)

PROTECTED = {"rocketmq.namesrvaddr": "namesrv", "namesrvaddr": "namesrv", "consumergroup": "group"}


@dataclass(frozen=True)
class RocketMQOptions(ParsedOptions):
    """Validated ``rocketmq`` options, one typed attribute per entry of :data:`OPTIONS`."""

    SPECS = OPTIONS
    PROTECTED = PROTECTED
    SOURCE = "rocketmq"

    namesrvs: tuple[str, ...]
    topics: tuple[str, ...] | None
    consume_mode: str
    group: str | None
    starting_offsets: OffsetSpec
    ending_offsets: OffsetSpec
    max_offsets_per_trigger: int | None
    max_records_per_partition: int | None
    fail_on_data_loss: bool
    commit_offsets: bool
    include_properties: bool
    verify_checksums: bool
    pop_partitions: int
    pop_max_messages: int
    pop_invisible_time_ms: int
    pop_poll_ms: int
    pop_receipts_path: str | None
    max_in_flight: int
    batch_max_messages: int
    batch_max_bytes: int
    send_retries: int
    producer_group: str
    connect_timeout_ms: int
    request_timeout_ms: int
    failover_timeout_ms: int

    def check(self, mode: str) -> None:
        if mode == WRITE:
            if self.topics and len(self.topics) > 1:
                raise OptionError("option topic: the sink writes to one topic; use a 'topic' column for several")
            return
        if mode == READ and not self.topics:
            raise OptionError("option topic is required for reading")
        if self.pop:
            if not self.group:
                raise OptionError("consumeMode=pop needs option group (the consumer group the broker balances)")
            if self.starting_offsets not in ("earliest", "latest"):
                raise OptionError("consumeMode=pop takes startingOffsets earliest or latest (where a group that "
                                  "never consumed starts); the broker keeps the group's position")
        elif self.starting_offsets == "group" and not self.group:
            raise OptionError("startingOffsets=group needs option group")

    @property
    def pop(self) -> bool:
        return self.consume_mode == POP

    def client_settings(self) -> ClientSettings:
        return ClientSettings(connect_timeout_s=self.connect_timeout_ms / 1000,
                              request_timeout_s=self.request_timeout_ms / 1000,
                              failover_s=self.failover_timeout_ms / 1000)


def option_table(mode: str | None = None) -> str:
    return render_table(OPTIONS, mode)
