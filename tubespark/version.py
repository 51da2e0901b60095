"""tubespark's version: the one place it is written.

A module of its own, so that any layer can name the version (TubeMQ sends it as part of its client
version) without importing the package root, which sits above every layer; setuptools reads it
without importing anything (``[tool.setuptools.dynamic] version = { attr = "tubespark.version.__version__" }``).
"""

from __future__ import annotations

__version__ = "0.1.0"
