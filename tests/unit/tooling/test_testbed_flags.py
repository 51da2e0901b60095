"""The local cluster's JVM flags: start-up tuning for tests, Java's defaults for a benchmarked broker."""

from __future__ import annotations

import pytest
from tubespark_testbed import LocalCluster
from tubespark_testbed.errors import ClusterError
from tubespark_testbed.local import REQUIRED_JVM_FLAGS


def test_test_clusters_tune_every_jvm_for_start_up():
    cluster = LocalCluster()
    for name in ("zookeeper", "master", "master-2", "broker"):
        flags = cluster.jvm_flags(name)
        assert "-XX:TieredStopAtLevel=1" in flags and set(REQUIRED_JVM_FLAGS) <= set(flags), name
    assert "-Xmx1g" in cluster.jvm_flags("broker") and "-Xmx512m" in cluster.jvm_flags("master")


def test_a_default_jvm_broker_gets_only_what_tubemq_needs():
    cluster = LocalCluster(broker_jvm="default")
    assert cluster.jvm_flags("broker") == list(REQUIRED_JVM_FLAGS)
    assert "-XX:TieredStopAtLevel=1" in cluster.jvm_flags("master")  # only the broker is on the data path


def test_an_unknown_broker_jvm_is_refused():
    with pytest.raises(ClusterError, match="broker_jvm"):
        LocalCluster(broker_jvm="fast")
