"""An export's files appear in ``--output`` whole or not at all: written beside it, then renamed into place.

Spark writes a job's files under ``<output>/_temporary/`` and moves them at the job's commit; a job cut short
(Ctrl-C, a failed task) leaves that folder, and ``overwrite`` deletes the old files before the job even starts.
:class:`StagedOutput` has Spark write to a hidden sibling (``.<name>.tubespark-staging-<id>``, same file system,
so the final rename is a move, not a copy) and only :meth:`StagedOutput.commit` touches ``--output``: the old
output is moved aside, the staged one renamed into place, the old one deleted (put back if the rename fails).
Leaving the block without a commit deletes the staging directory: ``--output`` is as it was.

The file system is Hadoop's (:class:`HadoopFiles`, through the session's JVM), so an ``hdfs://`` or ``s3a://``
output is staged as a local one is; :class:`Files` is what the staging needs of it.
"""

from __future__ import annotations

import uuid
from types import TracebackType
from typing import Any, Protocol

from tubespark.errors import OptionError


class Files(Protocol):
    """The file-system calls staging needs; paths as Spark takes them (local paths or URIs)."""

    def exists(self, path: str) -> bool: ...

    def delete(self, path: str) -> None:
        """Delete ``path`` and everything under it (nothing if it does not exist)."""

    def rename(self, source: str, target: str) -> None:
        """Move ``source`` to ``target``, which does not exist; raises OSError when the file system refused."""


def staging_path(output: str, token: str) -> str:
    """The hidden sibling of ``output`` the job writes to (``token`` keeps two runs apart)."""
    trimmed = output.rstrip("/") or output
    parent, sep, name = trimmed.rpartition("/")
    return f"{parent}{sep}.{name}.tubespark-staging-{token}"


class StagedOutput:
    """``with StagedOutput(files, output, replace=...) as staged:`` write to ``staged.path``, then
    ``staged.commit()``. Refuses an existing ``output`` unless ``replace`` (``--mode overwrite``)."""

    def __init__(self, files: Files, output: str, *, replace: bool, token: str | None = None) -> None:
        self.files, self.output, self.replace = files, output, replace
        self.path = staging_path(output, token or uuid.uuid4().hex[:12])
        self.committed = False

    def check(self) -> None:
        """Refuse an existing ``output`` unless ``replace``: before any work, not after it."""
        if not self.replace and self.files.exists(self.output):
            raise OptionError(f"option --output: {self.output} exists; pass --mode overwrite to replace it, or "
                              f"give a path that does not exist")

    def __enter__(self) -> StagedOutput:
        self.check()
        return self

    def commit(self) -> None:
        """Put the staged files in place of ``output`` (whatever it held before goes)."""
        aside = staging_path(self.output, f"{uuid.uuid4().hex[:12]}-old")
        had_old = self.files.exists(self.output)
        if had_old:
            self.files.rename(self.output, aside)
        try:
            self.files.rename(self.path, self.output)
        except BaseException:
            if had_old:
                self.files.rename(aside, self.output)
            raise
        self.committed = True
        if had_old:
            self.files.delete(aside)

    def discard(self) -> None:
        """Delete what the job wrote (``output`` untouched)."""
        self.files.delete(self.path)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if not self.committed:
            self.discard()


class HadoopFiles:
    """:class:`Files` on Hadoop's ``FileSystem`` of ``spark``'s JVM: whatever file system Spark writes to."""

    def __init__(self, spark: Any) -> None:
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _fs(self, path: str) -> tuple[Any, Any]:
        hadoop_path = self._jvm.org.apache.hadoop.fs.Path(path)
        return hadoop_path.getFileSystem(self._conf), hadoop_path

    def exists(self, path: str) -> bool:
        fs, where = self._fs(path)
        return bool(fs.exists(where))

    def delete(self, path: str) -> None:
        fs, where = self._fs(path)
        fs.delete(where, True)

    def rename(self, source: str, target: str) -> None:
        fs, where = self._fs(source)
        if not fs.rename(where, self._jvm.org.apache.hadoop.fs.Path(target)):
            raise OSError(f"could not rename {source} to {target}")
