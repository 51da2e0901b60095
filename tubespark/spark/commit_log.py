"""Spark's checkpoint, read only: the source offsets of the newest batch in its commit log.

Why: Spark tells a Python stream reader that batch N completed only when it plans batch N+1 (``latestOffset``
from N's end); when the query stops first (a ``processingTime`` trigger between two triggers, the one batch of
``Trigger.Once``), nothing ever tells it. The checkpoint does: ``offsets/<N>`` holds the ends Spark planned for
batch N before running it, ``commits/<N>`` appears once batch N completed. When the reader is given the query's
``checkpointLocation`` too, its ``stop()`` reads them to learn whether the last batch it ran was committed
(docs/spark/commit-timing.md).

Layout (Spark 4.x ``OffsetSeqLog`` and ``CommitLog``, one file per batch named by its decimal id, hidden
``.N.crc`` companions): an offsets file is a version line (``v1``), the batch's metadata (JSON), then one line
per source of the query in plan order, each the JSON the source returned (``-`` for a source without one).
"""

from __future__ import annotations

import json
from typing import Any

from tubespark.core.shared_dir import SharedDir, parse_shared_directory

OPTION = "checkpointLocation"
"""Spark's own key: given to the reader as well as to the writer, the reader reads the checkpoint (never writes)."""


def parse_checkpoint_location(value: str) -> str:
    """A ``checkpointLocation`` as Spark takes it, as a location :class:`SharedDir` opens: Hadoop's ``file:/dir``
    (one slash) is the local path ``/dir``; paths and URIs otherwise as for the shared directories."""
    value = value.strip()
    if value.startswith("file:") and not value.startswith("file://"):
        value = value[len("file:"):]
    return parse_shared_directory(OPTION, value)


def committed_batches(location: str) -> list[int]:
    """The ids of the batches in the commit log at ``location``, in order. Raises :class:`SharedDirError` when the
    checkpoint cannot be read."""
    return sorted(int(name) for name in SharedDir(location, OPTION).child("commits").names() if name.isdigit())


def newest_committed_offsets(location: str) -> list[dict[str, Any]]:
    """The source offsets of the newest batch in the commit log at ``location`` (one per source that had one);
    none before the first commit. Raises :class:`SharedDirError` when the checkpoint cannot be read."""
    batches = committed_batches(location)
    if not batches:
        return []
    text = SharedDir(location, OPTION).child("offsets").read(str(batches[-1])).decode("utf-8", "replace")
    found: list[dict[str, Any]] = []
    for line in text.splitlines()[2:]:  # the version and the batch's metadata come first
        try:
            offset = json.loads(line)
        except ValueError:  # "-": a source with no offset in this batch
            continue
        if isinstance(offset, dict):
            found.append(offset)
    return found
