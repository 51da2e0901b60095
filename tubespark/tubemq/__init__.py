"""Apache InLong TubeMQ: wire codec, connection, clients and the ``tubemq`` Spark data source.

Layers, lowest first (each imports only those below it and :mod:`tubespark.core`):
``wire`` (bytes <-> messages) | ``net`` (connections) | ``client`` (producer, group, ranges) | ``spark``.
"""
