"""RocketMQ's binding of :mod:`tubespark.core.framed`: one multiplexed remoting connection per address."""
