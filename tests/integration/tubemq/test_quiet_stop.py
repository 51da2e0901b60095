"""A tubemq query that ends normally prints no error, warning or stack trace (issue 16).

What a user sees is the job's whole console: Spark's log4j output at the level ``conf/spark`` sets
(WARN; set explicitly, since PySpark's interactive default hides WARN), PySpark's workers' stderr, and
the driver-side Python process that hosts the stream reader (Spark ends it with SIGTERM). So the job runs
as its own process and the test reads everything it printed: an AvailableNow run to its end, then a
processing-time query stopped with ``query.stop()`` between two batches, then ``spark.stop()``.

``query.stop()`` in the middle of a batch is not covered: Spark then cancels the batch's tasks and logs the
aborted write (ERROR), and PySpark's worker daemon prints BrokenPipeError tracebacks for the tasks whose
sockets it closed, for any source. ``tubespark_testbed.demo`` stops between batches for that reason.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.integration.helpers import bodies, produce

pytestmark = [pytest.mark.integration, pytest.mark.spark]

LOG4J = Path(__file__).resolve().parents[3] / "conf" / "spark" / "log4j2.properties"
NOISE = re.compile(r"Traceback|\bERROR\b|\bWARN\b|WARNING|Exception")
SPARK_BANNER = ('Setting default log level to "ERROR".', "WARNING: Using incubator modules")
"""Lines every PySpark start prints, whatever happens next."""

JOB = textwrap.dedent('''
    import os, sys, time, uuid
    from pyspark.sql import SparkSession
    import tubespark

    master, topic, log4j = sys.argv[1:4]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("quiet-stop")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    tubespark.register(spark)

    def stream(group):
        return (spark.readStream.format("tubemq").option("master", master).option("topic", topic)
                .option("group", group).option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", "40").load())

    drained = stream("quiet_drain").writeStream.format("noop").trigger(availableNow=True).start()
    drained.awaitTermination()
    print("RESULT drained", sum(p["numInputRows"] for p in drained.recentProgress), flush=True)

    running = stream("quiet_run").writeStream.format("noop").trigger(processingTime="1 second").start()
    while sum(p["numInputRows"] for p in running.recentProgress) < 100:
        time.sleep(0.2)
    while running.status["isTriggerActive"]:
        time.sleep(0.02)
    running.stop()
    print("RESULT stopped", running.exception(), flush=True)
    spark.stop()
    time.sleep(2)  # let the source's process finish leaving the group, where a late error would print
    print("RESULT done", flush=True)
''')


def test_a_drained_and_a_stopped_query_print_nothing_alarming(tubemq_cluster, topic_factory, tmp_path):
    topic = topic_factory(4, 1)
    produce(tubemq_cluster.master_address, topic, bodies([b"q%d" % i for i in range(200)]))
    job = tmp_path / "quiet_job.py"
    job.write_text(JOB)
    done = subprocess.run([sys.executable, str(job), tubemq_cluster.master_address, topic, str(LOG4J)],
                          capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "RESULT drained 200" in done.stdout and "RESULT stopped None" in done.stdout, output[-4000:]
    assert "RESULT done" in done.stdout
    alarming = [line for line in output.splitlines() if NOISE.search(line) and not line.startswith(SPARK_BANNER)]
    assert not alarming, output[-4000:]
