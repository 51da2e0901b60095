"""The shared Spark layer: what every broker's data source uses and no broker owns.

* :mod:`~tubespark.spark.offsets`: offset maps ``{partition key: offset}``, ``startingOffsets`` /
  ``endingOffsets`` specs (``earliest``, ``latest``, JSON), Spark's reported offsets;
* :mod:`~tubespark.spark.planning`: sharing a micro-batch limit by backlog, splitting ranges into tasks;
* :mod:`~tubespark.spark.arrow`: Spark schema -> Arrow schema, columns -> RecordBatch;
* :mod:`~tubespark.spark.dedupe`: dropping replays of a retried write task on read;
* :mod:`~tubespark.spark.writers`: batch and streaming Arrow writers (stamps, commit messages, logs);
* :mod:`~tubespark.spark.shutdown`: leaving cleanly when Spark ends the driver-side reader process.

It imports pyspark/pyarrow and :mod:`tubespark.core`, never a broker package.
"""
