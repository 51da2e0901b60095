"""Apache RocketMQ: remoting codec, connections, clients and the ``rocketmq`` Spark data source.

Layers, lowest first (each imports only those below it and :mod:`tubespark.core`):
``wire`` (bytes <-> commands and messages) | ``net`` (connections) | ``client`` (routes, producer, pull
ranges, pop) | ``spark``. Protocol facts: ``docs/rocketmq/protocol.md``.
"""
