"""A real local Apache InLong TubeMQ cluster for integration tests, CI and demos.

``LocalCluster`` resolves the TubeMQ 2.4.0 server from Maven Central once (see
:mod:`tubespark_testbed.artifacts`), then runs ZooKeeper, a master and a broker as child JVMs on free
ports of 127.0.0.1; ``FaultProxy`` puts network faults between a client and one of them. Infrastructure
only: it imports nothing from the client, wire or Spark layers.
"""

from tubespark_testbed.config import ClusterPorts, ClusterSettings
from tubespark_testbed.faultproxy import FaultProxy
from tubespark_testbed.local import LocalCluster

__all__ = ["ClusterPorts", "ClusterSettings", "FaultProxy", "LocalCluster"]
