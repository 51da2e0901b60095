"""Python data sources on Spark Connect, when the server's Python cannot import tubespark.

On Spark Connect the client sends the data source *class*, cloudpickled, and the server runs it in
Python processes of its own. Whether those processes see the session's ``spark.addArtifacts(...,
pyfile=True)`` zips depends on the process (Spark 4.2/4.3, read in ``sql/core/.../python`` and
``core/.../JobArtifactSet.scala``, and seen on a local Connect server):

* the driver-side planners (``PythonPlannerRunner``: schema, batch planning, writes, commits) and the
  executors of a *batch* query are sent the session's job-artifact directory ``SparkFiles/<session
  uuid>``: they see the zips;
* the streaming source's process (``PythonStreamingSourceRunner``) is sent the fixed directory
  ``SparkFiles/streaming_job`` with the same file names, so it looks where the zips are not and fails
  to unpickle the class with ``ModuleNotFoundError``;
* the executors of a *streaming* query see no session artifacts either: the artifact state is a plain
  ``ThreadLocal`` of the thread that starts a job, and a streaming query runs its batches on a thread of
  its own, so their tasks carry none.

So on a Connect session tubespark registers a stand-in class instead of its own. It is defined inside
a function, which makes cloudpickle send it by value, with tubespark's code as zip bytes in its
closure; each method imports the real class, from the server's own installation or pyfile artifacts
when those are importable and otherwise from the zip it carries (written once to the temp directory,
named by its content, and put on ``sys.path``). The readers and writers it returns pickle themselves
behind the same loader, so an executor makes tubespark importable before it meets a tubespark class,
and the partitions and commit messages that follow them load as usual. The server still needs
tubespark's dependencies (protobuf, cramjam) next to PySpark's: those are compiled, not shipped.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
import zipfile
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # pyspark is imported when a stand-in is made: `import tubespark` works without it
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType

T = TypeVar("T")

# Fixed entry times make the zip a function of the code alone: the same code, the same bytes and name.
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def is_connect_session(spark: Any) -> bool:
    """True for a Spark Connect session (``SparkSession.builder.remote(...)``, ``spark.api.mode=connect``).

    By the class's module rather than ``isinstance``: importing ``pyspark.sql.connect`` needs grpc,
    which a classic installation may not have.
    """
    return type(spark).__module__.startswith("pyspark.sql.connect.")


@cache
def package_zip_bytes() -> bytes:
    """The installed ``tubespark`` package's Python sources as a zip that ``zipimport`` can load."""
    root = Path(__file__).resolve().parents[1]  # the tubespark package this module belongs to
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            info = zipfile.ZipInfo(str(Path("tubespark") / path.relative_to(root)), _ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def write_package_zip(directory: str | os.PathLike[str] | None = None) -> str:
    """Write the installed tubespark as ``tubespark-<hash>.zip`` and return its path.

    The zip to ship with ``spark.addArtifacts(path, pyfile=True)`` (Connect) or ``--py-files``. Its name
    carries a hash of the content because a Connect session refuses a second artifact of the same name
    with other bytes; the same code gives the same name, which the session accepts again.
    """
    data = package_zip_bytes()
    target = Path(directory) if directory is not None else Path(tempfile.gettempdir())
    target.mkdir(parents=True, exist_ok=True)
    path = target / f"tubespark-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    if not path.exists() or path.read_bytes() != data:
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return str(path)


def portable_data_source(source_cls: type[DataSource]) -> type[DataSource]:
    """A stand-in for ``source_cls`` (a ``DataSource`` subclass) that a Connect server can always load.

    Same name, same options, and each method delegates to a fresh ``source_cls(options)``. Nothing in
    it refers to a tubespark module by name until a method runs, and the first thing a method does is
    make tubespark importable (see the module docstring). The readers and writers it returns pickle
    themselves with the same loader in front, so executors need no installed tubespark either.
    """
    from pyspark.sql.datasource import DataSource

    module, qualname = source_cls.__module__, source_cls.__qualname__
    source_name = source_cls.name()
    payload = package_zip_bytes()
    zip_name = f"tubespark-{hashlib.sha256(payload).hexdigest()[:16]}.zip"

    # Everything the stand-in uses at run time is local to this function: cloudpickle sends closures by
    # value, but a module-level helper by reference, which the server could not import.
    def importable(module_name: str) -> Any:
        """``import module_name``; from the zip carried here when this Python has no tubespark."""
        import importlib
        import os as _os
        import sys
        import tempfile as _tempfile

        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] != "tubespark":
                raise
        path = _os.path.join(_tempfile.gettempdir(), zip_name)
        if not _os.path.exists(path):
            tmp = f"{path}.{_os.getpid()}.tmp"
            with open(tmp, "wb") as out:
                out.write(payload)
            _os.replace(tmp, path)  # atomic: concurrent processes write the same bytes
        if path not in sys.path:
            sys.path.insert(0, path)
        importlib.invalidate_caches()
        return importlib.import_module(module_name)

    def load_source() -> type[DataSource]:
        found: Any = importable(module)
        for part in qualname.split("."):
            found = getattr(found, part)
        source: type[DataSource] = found  # the class named like source_cls, loaded where this runs
        return source

    def rebuild(module_name: str, data: bytes) -> Any:
        import pickle

        importable(module_name)
        return pickle.loads(data)

    def ship(obj: T) -> T:
        """Make ``obj`` pickle as ``rebuild(its module, its usual pickle)``: the unpickling process
        (an executor, a commit process) gets tubespark importable before it meets a tubespark class.
        The object keeps its behaviour: its class becomes a subclass that only adds ``__reduce_ex__``.
        No cache of these subclasses: this class is pickled again on the server (a planner sends it to
        the executors inside the read function), and a cache in a closure would travel with it and
        name tubespark's classes by reference."""
        real = type(obj)

        def reduce_ex(self: Any, protocol: int) -> Any:
            from pyspark import cloudpickle

            own = type(self)
            self.__class__ = real  # pickled as what it really is, with that class's own state rules
            try:
                data = cloudpickle.dumps(self, protocol)
            finally:
                self.__class__ = own
            return rebuild, (real.__module__, data)

        obj.__class__ = type(real.__name__, (real,), {
            "__reduce_ex__": reduce_ex, "__module__": real.__module__, "__doc__": real.__doc__})
        return obj

    class PortableDataSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return source_name

        def schema(self) -> StructType | str:
            return load_source()(self.options).schema()

        def reader(self, schema: StructType) -> DataSourceReader:
            return ship(load_source()(self.options).reader(schema))

        def streamReader(self, schema: StructType) -> DataSourceStreamReader:
            return ship(load_source()(self.options).streamReader(schema))

        def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
            return ship(load_source()(self.options).writer(schema, overwrite))

        def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
            return ship(load_source()(self.options).streamWriter(schema, overwrite))

    PortableDataSource.__doc__ = f"Spark Connect stand-in for {module}.{qualname} (see tubespark.spark.connect)."
    return PortableDataSource
