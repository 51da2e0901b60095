"""Applications above the brokers: what runs on top of the data sources rather than inside one broker's folder.

* :mod:`~tubespark.apps.registry`: the formats tubespark registers in a Spark session (``tubespark.register``).
* :mod:`~tubespark.apps.backfill` (with :mod:`~tubespark.apps.progress`): ``tubespark backfill export|publish``.
* :mod:`~tubespark.apps.lag`: a query's per-partition lag from Spark's progress, for every tubespark format.
* :mod:`~tubespark.apps.group_lag`: a TubeMQ consumer group's lag from outside Spark (``tubespark lag``).

Applications may import any broker package and the shared layers; only the package root ``tubespark`` and the
command line (``tubespark.cli``) import them, so no broker ever depends on an application and no application on
the package root (``tests/unit/core/test_layers.py``). This module imports nothing: ``import tubespark`` loads it.
"""
