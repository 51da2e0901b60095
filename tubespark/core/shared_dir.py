"""A directory of small files that Spark's read tasks write and the driver reads, on any filesystem both reach.

Why: pop receipts (RocketMQ ``popReceiptsPath``) and skipped-bundle reports (TubeMQ ``skippedBundlesPath``)
travel from executors to the driver as files, because a Python data source has no other channel back. A
local path works in local mode; a cluster rarely shares a mount, but always has the filesystem its
checkpoints live on. So a location is a plain path (the local filesystem, as before) or a URI that fsspec
opens: ``file://``, ``webhdfs://namenode:9870/dir`` (HDFS over HTTP: no JVM in the Python worker),
``hdfs://namenode/dir`` (pyarrow's libhdfs when it loads, else WebHDFS on the namenode's default HTTP port
9870), ``s3://`` / ``s3a://`` (s3fs: ``pip install tubespark[s3]``) and whatever else fsspec knows.

Publication is atomic, so a reader never sees half a file: write a hidden temporary name in the same
directory, then rename it (local files, HDFS), or one PUT where objects appear whole and renames are copies
(object stores). Listings skip hidden names. Every failure is a :class:`SharedDirError` naming the option.
"""

from __future__ import annotations

import fnmatch
import functools
import logging
import os
import posixpath
import re
import uuid
from typing import Any

from tubespark.errors import OptionError, SharedDirError

__all__ = ["SharedDir", "SharedDirError", "parse_shared_directory"]

log = logging.getLogger(__name__)

HTTP_TIMEOUT_S = 30.0
"""Every WebHDFS request (connect and each read) gives up after this long: a dead namenode fails the call."""
WEBHDFS_DEFAULT_PORT = 9870  # Hadoop 3's namenode HTTP port (dfs.namenode.http-address)
_SCHEME_RE = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
_OBJECT_STORES = frozenset({"s3", "gcs", "gs", "abfs", "az", "adl", "oss"})  # no atomic rename; a PUT is whole
_ALIASES = {"s3a": "s3", "s3n": "s3"}  # Hadoop's names for the same buckets


def scheme_of(location: str) -> str | None:
    """The URI scheme of ``location`` (lower case), or ``None`` for a plain path."""
    match = _SCHEME_RE.match(location)
    return match.group(1).lower() if match else None


def parse_shared_directory(name: str, value: str) -> str:
    """Option parser: a plain directory path or a filesystem URI (no network here; see :meth:`SharedDir.check`)."""
    value = value.strip()
    scheme = scheme_of(value)
    if not value or (scheme is None and "://" in value):
        raise OptionError(f"option {name}={value!r}: expected a directory path or a URI such as "
                          "hdfs://namenode/dir, webhdfs://namenode:9870/dir, s3a://bucket/dir, file:///dir")
    if scheme is None:
        if os.path.exists(value) and not os.path.isdir(value):
            raise OptionError(f"option {name}={value!r}: exists and is not a directory; name a directory")
        return value
    from fsspec.registry import known_implementations

    if scheme not in known_implementations and scheme not in _ALIASES:
        raise OptionError(f"option {name}={value!r}: unknown filesystem {scheme!r}; use file, hdfs, webhdfs, s3, "
                          "s3a or another fsspec protocol")
    return value


def _webhdfs(host: str, port: int, user: str | None) -> Any:
    import fsspec

    try:
        fs = fsspec.filesystem("webhdfs", host=host, port=port, user=user or os.environ.get("HADOOP_USER_NAME"))
    except ImportError as exc:  # fsspec's WebHDFS speaks HTTP through requests
        raise ImportError(f"WebHDFS needs the requests package ({exc})") from exc
    session = fs.session
    if not getattr(session, "_tubespark_timeout", False):  # fsspec reuses instances: wrap once
        session.request = functools.partial(_timed_request, session.request)
        session._tubespark_timeout = True
    return fs


def _timed_request(request: Any, method: str, url: str, **kwargs: Any) -> Any:
    kwargs.setdefault("timeout", HTTP_TIMEOUT_S)  # fsspec's WebHDFS sets none: a hung namenode would hang us
    return request(method, url, **kwargs)


def _libhdfs(host: str, port: int | None, user: str | None) -> Any | None:
    """pyarrow's HDFS client (JNI libhdfs) when it loads here, else ``None``."""
    try:
        import fsspec

        return fsspec.filesystem("hdfs", host=host, port=port or 8020, user=user)
    except (ImportError, OSError, RuntimeError) as exc:  # no libhdfs, no JVM or no HADOOP_HOME / CLASSPATH
        log.info("libhdfs unavailable (%s): hdfs://%s goes through WebHDFS on port %d", exc, host,
                 WEBHDFS_DEFAULT_PORT)
        return None


LOCAL, RENAME, PUT = "local", "rename", "put"  # how a file is published: os.replace, rename, one PUT


@functools.lru_cache(maxsize=32)
def _open(location: str) -> tuple[Any, str, str]:
    """``(filesystem, root path, publication)`` for a location (cached per process: tasks reuse them)."""
    import fsspec
    from fsspec.utils import infer_storage_options

    scheme = scheme_of(location)
    if scheme is None:
        return fsspec.filesystem("file"), os.path.abspath(location), LOCAL
    scheme = _ALIASES.get(scheme, scheme)
    uri = scheme + location[location.index("://"):]
    if scheme in ("hdfs", "webhdfs"):
        parts = infer_storage_options(uri)
        host, port, user = parts.get("host") or "localhost", parts.get("port"), parts.get("username")
        fs = _libhdfs(host, port, user) if scheme == "hdfs" else None
        if fs is None:
            fs = _webhdfs(host, port if scheme == "webhdfs" and port else WEBHDFS_DEFAULT_PORT, user)
        return fs, parts["path"] or "/", RENAME
    fs, path = fsspec.core.url_to_fs(uri)
    return fs, path, LOCAL if scheme == "file" else PUT if scheme in _OBJECT_STORES else RENAME


class SharedDir:
    """A directory at ``location`` (path or URI), named by the option that set it in every error."""

    def __init__(self, location: str, option: str, *parts: str) -> None:
        self.location = location
        self.option = option
        self.parts = parts

    def child(self, *parts: str) -> SharedDir:
        """The directory ``parts`` below this one."""
        return SharedDir(self.location, self.option, *self.parts, *parts)

    def __repr__(self) -> str:
        return "/".join([self.location.rstrip("/"), *self.parts])

    def _error(self, what: str, exc: BaseException) -> SharedDirError:
        return SharedDirError(f"option {self.option}={self.location!r}: cannot {what} {self!r}: "
                              f"{type(exc).__name__}: {exc}", option=self.option, location=self.location)

    def _fs(self) -> tuple[Any, str, str]:
        try:
            fs, root, publication = _open(self.location)
        except ImportError as exc:
            extra = " (pip install 'tubespark[s3]')" if scheme_of(self.location) in ("s3", "s3a", "s3n") else ""
            raise self._error(f"open the filesystem{extra} of", exc) from exc
        except Exception as exc:
            raise self._error("open the filesystem of", exc) from exc
        return fs, posixpath.join(root, *self.parts) if self.parts else root, publication

    def check(self) -> None:
        """Driver side, before any task runs: create the directory and publish, read and delete a probe file,
        so an unreachable or read-only location fails the query at its start, not in a task's last step."""
        name = f"probe-{uuid.uuid4().hex}"
        self.publish(name, b"{}")
        if self.read(name) != b"{}":
            raise SharedDirError(f"option {self.option}={self.location!r}: a probe file read back differently "
                                 f"from {self!r}", option=self.option, location=self.location)
        fs, path, _ = self._fs()
        try:
            fs.rm_file(posixpath.join(path, name))
        except Exception as exc:
            raise self._error("delete a probe file in", exc) from exc

    def publish(self, name: str, data: bytes) -> None:
        """Make ``name`` hold ``data`` at once (replacing an older one): readers see all of it or none."""
        fs, path, publication = self._fs()
        target = posixpath.join(path, name)
        try:
            fs.makedirs(path, exist_ok=True)
            if publication == PUT:
                fs.pipe_file(target, data)
                return
            temp = posixpath.join(path, f".{name}.{uuid.uuid4().hex}.tmp")
            fs.pipe_file(temp, data)
            try:
                if publication == RENAME and fs.exists(target):  # HDFS refuses to rename onto a file
                    fs.rm_file(target)
                fs.mv(temp, target)  # local: os.rename, which replaces the target atomically
                if publication == RENAME and not fs.exists(target):  # WebHDFS answers a failed rename false
                    raise OSError(f"renaming {temp} to {target} did not happen")
            except BaseException:
                if fs.exists(temp):
                    fs.rm_file(temp)
                raise
        except Exception as exc:
            raise self._error(f"write {name} in", exc) from exc

    def names(self, pattern: str = "*") -> list[str]:
        """The sorted names of published files matching ``pattern``; none when the directory does not exist."""
        fs, path, _ = self._fs()
        try:
            if not fs.isdir(path):
                return []
            listed = fs.ls(path, detail=False)
        except FileNotFoundError:
            return []
        except Exception as exc:
            raise self._error("list", exc) from exc
        names = (posixpath.basename(str(p).rstrip("/")) for p in listed)
        return sorted(n for n in names if not n.startswith(".") and fnmatch.fnmatchcase(n, pattern))

    def read(self, name: str) -> bytes:
        """The bytes of a published file."""
        fs, path, _ = self._fs()
        try:
            return bytes(fs.cat_file(posixpath.join(path, name)))
        except Exception as exc:
            raise self._error(f"read {name} in", exc) from exc

    def discard(self, name: str) -> None:
        """Delete the published file ``name`` (nothing when there is none)."""
        fs, path, _ = self._fs()
        try:
            fs.rm_file(posixpath.join(path, name))
        except FileNotFoundError:
            return
        except Exception as exc:
            if isinstance(exc, OSError) and not fs.exists(posixpath.join(path, name)):
                return  # some filesystems say "not found" in their own words
            raise self._error(f"delete {name} in", exc) from exc

    def remove(self) -> None:
        """Delete the directory and everything in it (nothing when it is gone already)."""
        fs, path, _ = self._fs()
        try:
            if fs.exists(path):
                fs.rm(path, recursive=True)
        except FileNotFoundError:
            return
        except Exception as exc:
            raise self._error("delete", exc) from exc
