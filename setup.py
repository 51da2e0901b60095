"""Setuptools shim: the one thing ``pyproject.toml`` cannot declare, the compiled hot path.

All metadata (name, version source, dependencies, extras, entry points, data files) and the tool
configuration (pytest, ruff, mypy) live in ``pyproject.toml``; do not add any here.

``tubespark.tubemq.wire._native`` is the C twin of the TubeMQ fetch decoder (see
``tubespark/tubemq/wire/fetch.py``). It is ``optional``: where no C compiler is found the build says so
and installs the pure-Python package, which gives the same rows and errors, only slower. Set
``TUBESPARK_NO_EXTENSIONS=1`` at build time to build without it on purpose (and at run time to not use it).
"""

import os

from setuptools import Extension, setup

NATIVE = [
    Extension("tubespark.tubemq.wire._native", ["tubespark/tubemq/wire/_native.c"], optional=True,
              extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wno-unused-function"]),
]

setup(ext_modules=[] if os.environ.get("TUBESPARK_NO_EXTENSIONS", "").strip() not in ("", "0") else NATIVE)
