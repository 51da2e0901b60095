"""The file-system calls of an export's staging (tubespark.apps.staging.Files) on local directories."""

from __future__ import annotations

import shutil
from pathlib import Path


class LocalFiles:
    """``Files`` on the local file system; ``fail_rename_to``: a target the file system refuses a rename to, once
    (as a full disk or a permission would; the next rename there works)."""

    def __init__(self, fail_rename_to: str | None = None) -> None:
        self.fail_rename_to = fail_rename_to

    def exists(self, path: str) -> bool:
        return Path(path).exists()

    def delete(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def rename(self, source: str, target: str) -> None:
        if target == self.fail_rename_to:
            self.fail_rename_to = None
            raise OSError(f"could not rename {source} to {target}")
        Path(source).rename(target)
