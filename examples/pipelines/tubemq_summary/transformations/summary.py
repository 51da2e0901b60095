"""Every message of a TubeMQ topic into the streaming table ``events``; per minute and stream id, the count
of the table's rows sent back to another TubeMQ topic through the sink ``tubemq_summary``."""

import os

from pyspark import pipelines as dp
from pyspark.sql import DataFrame

master = os.environ.get("TUBEMQ_MASTER", "127.0.0.1:8715")
source_topic = os.environ.get("PIPELINE_SOURCE_TOPIC", "demo_events")
summary_topic = os.environ.get("PIPELINE_SUMMARY_TOPIC", "demo_summary")


@dp.table(comment="The source topic's messages: stream id, message time, body")
def events() -> DataFrame:
    return (spark.readStream.format("tubemq")
            .option("master", master)
            .option("topic", source_topic)
            .option("group", "pipeline_summary")
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("streamId", "msgTime", "CAST(value AS STRING) AS body"))


dp.create_sink("tubemq_summary", format="tubemq", options={"master": master, "topic": summary_topic})


@dp.append_flow(target="tubemq_summary")
def per_minute_counts() -> DataFrame:
    # SQL for the watermark: DataFrame.withWatermark on `events` fails on Spark Connect (docs/guide/pipelines.md)
    return spark.sql("""
        SELECT to_json(named_struct('minute', window.start, 'streamId', streamId, 'count', count(*))) AS value,
               streamId, window.start AS msgTime
        FROM STREAM(events) WATERMARK msgTime DELAY OF INTERVAL 1 MINUTE
        GROUP BY window(msgTime, '1 minute'), streamId
    """)
