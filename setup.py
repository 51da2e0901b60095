"""Setuptools shim for tools that still call ``setup.py``.

All metadata (name, version source, dependencies, extras, entry points, data files) and the tool
configuration (pytest, ruff, mypy) live in ``pyproject.toml``; do not add any here.
"""

from setuptools import setup

setup()
