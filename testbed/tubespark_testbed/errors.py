"""The test bed's one error: a local cluster that could not be set up, started or reached."""

from __future__ import annotations

from tubespark.errors import TubeSparkError


class ClusterError(TubeSparkError):
    """The local TubeMQ cluster could not be set up, started or reached (the message says which step)."""
