"""The ``rocketmq`` Spark data source: options, pull and pop readers, batch-send writer."""
