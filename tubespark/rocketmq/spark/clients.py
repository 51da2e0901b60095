"""One :class:`RocketMQClient` per executor process and cluster, shared by read tasks and sink tasks.

Python workers are reused across tasks, so connections outlive a task.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace

from tubespark.rocketmq.client.client import RocketMQClient
from tubespark.rocketmq.spark.options import RocketMQOptions

_clients: dict[Hashable, RocketMQClient] = {}  # by what makes a cluster's client


def shared_client(options: RocketMQOptions) -> RocketMQClient:
    """One client per executor process and cluster (workers are reused across tasks)."""
    settings = options.client_settings()
    # a TLS context compares by identity and each call makes a new one: the key holds the options it came from
    key = (options.namesrvs, replace(settings, ssl_context=None), options.tls_identity())
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = RocketMQClient(list(options.namesrvs), settings)
    return client


# --- pull ---------------------------------------------------------------------------------------------
