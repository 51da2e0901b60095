"""Spark layer: the ``tubemq`` Python data source (readers, writers, offsets)."""
