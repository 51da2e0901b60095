"""What a bench result records about the checkout it measured (every bench's JSON names its commit)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def git_commit() -> str:
    """``git describe`` of the checkout measured (``-dirty`` when it has uncommitted changes); ``?`` outside git."""
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=ROOT, capture_output=True,
                              text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
