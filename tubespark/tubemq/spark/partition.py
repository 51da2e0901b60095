"""What the driver ships to an executor for one Spark task: one queue and one offset range."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from tubespark.errors import DataLossError, UnknownTopicError
from tubespark.spark.dedupe import ReplayFilter
from tubespark.tubemq.client.broker import BrokerClient
from tubespark.tubemq.client.ranges import RangeReader
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.spark.schema import arrow_schema, to_record_batch
from tubespark.tubemq.wire.formats import PartitionRef

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """Read ``[start, end)`` of one partition under ``read_group`` as ``client_id``. Small and picklable."""

    broker_id: int
    host: str
    port: int
    topic: str
    partition_id: int
    start: int
    end: int
    read_group: str
    client_id: str

    @property
    def ref(self) -> PartitionRef:
        return PartitionRef(self.broker_id, self.topic, self.partition_id, self.host, self.port)


def read_range(task: QueueRange, options: TubeMQOptions) -> Iterator[pa.RecordBatch]:
    """Executor side: read the task's range from its broker, one Arrow batch per fetch, then let go."""
    schema = arrow_schema(options.include_attributes)
    ref = task.ref
    broker = BrokerClient(task.client_id, options.client_settings())
    reader = RangeReader(broker, task.read_group, filters=options.stream_ids,
                         fail_on_data_loss=options.fail_on_data_loss, verify_checksums=options.verify_checksums,
                         retry_s=options.request_timeout_ms / 1000 * 6)
    dedup_attribute = options.dedup_attribute if options.dedupe else None
    replays = ReplayFilter()
    try:
        for messages in reader.read_batches(ref, task.start, task.end):
            if dedup_attribute:
                messages = replays.keep(messages, lambda m: m.attributes.get(dedup_attribute))
            if messages:
                yield to_record_batch(messages, topic=task.topic, partition_key=ref.key, broker_id=task.broker_id,
                                      partition_id=task.partition_id, schema=schema)
    except UnknownTopicError as exc:
        if options.fail_on_data_loss:
            raise DataLossError(f"partition {ref.key} vanished while offsets [{task.start}, {task.end}) were "
                                f"planned: {exc}; set failOnDataLoss=false to skip it") from exc
        log.warning("partition %s vanished (%s); skipping offsets [%d, %d)", ref.key, exc, task.start, task.end)
    finally:
        broker.close()
