"""Which twin of TubeMQ's hot wire paths runs: the compiled one (``_native.c``) or pure Python.

The compiled module is loaded once, at import, unless ``TUBESPARK_NO_EXTENSIONS=1`` (see
:mod:`tubespark.core.native`) or it is not there (no wheel for this platform, Spark Connect's by-value
shipping, a ``--py-files`` zip). Its users (:mod:`~tubespark.tubemq.wire.frame`,
:mod:`~tubespark.tubemq.wire.fetch`, :mod:`~tubespark.tubemq.wire.envelope`,
:mod:`~tubespark.tubemq.wire.send`) ask :func:`native` on every call, so :func:`pure_python` can switch
the whole process for a while.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType

from tubespark.core.native import describe, extensions_disabled


def _load() -> tuple[ModuleType | None, str]:
    if extensions_disabled():
        return None, "TUBESPARK_NO_EXTENSIONS is set"
    try:
        from tubespark.tubemq.wire import _native
    except ImportError as exc:  # no wheel for this platform, by-value shipping, a --py-files zip
        return None, f"no compiled module: {exc}"
    return _native, ""


_loaded, _WHY_NOT = _load()
_active = _loaded
HOT_PATH = describe(_loaded, _WHY_NOT)
"""Which twin this process uses: ``compiled (<file>)`` or ``pure-python (<why>)``."""


def native() -> ModuleType | None:
    """The compiled module when it is loaded and not switched off, else None."""
    return _active


def loaded() -> ModuleType | None:
    """The compiled module loaded at import (also inside :func:`pure_python`), else None."""
    return _loaded


@contextlib.contextmanager
def pure_python() -> Iterator[None]:
    """Run the pure-Python twins inside the block (the whole process: every thread). For the differential
    tests and the benchmark, which compare both twins in one process; users switch with
    ``TUBESPARK_NO_EXTENSIONS=1``."""
    global _active  # noqa: PLW0603 - the one switch every twin reads
    saved, _active = _active, None
    try:
        yield
    finally:
        _active = saved
