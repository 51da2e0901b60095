"""The ``tank`` Spark data source: typed options, stream and batch readers, batch and stream writers."""
