"""The one switch between compiled hot paths and pure Python.

Each broker may ship a compiled twin of its hottest decoders (built from C by ``setup.py``, optional: no
compiler, no twin) next to the pure-Python code, which stays complete and correct: Spark Connect's
by-value shipping, ``--py-files`` zips and platforms without a wheel run it. The twin is picked at import;
``TUBESPARK_NO_EXTENSIONS=1`` (read once, at import) turns every twin off, as ``AIOKAFKA_NO_EXTENSIONS``
does for aiokafka. Which path runs is said in one executor log line per process and by
``tubespark --version``.
"""

from __future__ import annotations

import logging
import os

NO_EXTENSIONS_ENV = "TUBESPARK_NO_EXTENSIONS"
COMPILED = "compiled"
PURE_PYTHON = "pure-python"


def extensions_disabled() -> bool:
    """Whether ``TUBESPARK_NO_EXTENSIONS`` asks for the pure-Python paths (any value but empty or ``0``)."""
    return os.environ.get(NO_EXTENSIONS_ENV, "").strip() not in ("", "0")


def describe(module: object | None, why_not: str) -> str:
    """``compiled (<file>)`` or ``pure-python (<why>)``: what a log line and ``--version`` say."""
    if module is not None:
        return f"{COMPILED} ({getattr(module, '__file__', module)})"
    return f"{PURE_PYTHON} ({why_not})"


_announced: set[str] = set()
_log = logging.getLogger("tubespark.hotpath")


def announce(what: str, path: str) -> None:
    """Log which path ``what`` uses, once per process (an executor's Python worker): one INFO line."""
    if what not in _announced:
        _announced.add(what)
        _log.info("tubespark %s: %s", what, path)
