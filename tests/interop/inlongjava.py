"""Drive InLong's own ``InLongMsg`` class (inlong-common 1.11.0) from the tests.

``tests/interop/inlong`` holds a one-file Java CLI (``org.tubespark.interop.inlong.InLongMsgVectors``):
``encode OUTDIR`` writes bundles of every version InLongMsg can write, ``parse FILE...`` prints what
``InLongMsg.parseFrom`` + ``getAttrs()`` + ``getIterator(attr)`` make of each file, as JSON lines.
:class:`InLongJava` builds it once per source version into ``~/.cache/tubespark/inlongmsg-<hash>/``
(root overridable with ``TUBESPARK_CACHE``) with :class:`tubespark_testbed.javatool.JavaTool`, as
:mod:`tests.interop.javaclient` builds the TubeMQ client CLI.

The JVM runs with ``-Dfile.encoding=UTF-8``: InLongMsg decodes v3 per-record and v4 attributes with
the platform charset, which is UTF-8 wherever InLong runs in practice.
"""

from __future__ import annotations

import base64
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tubespark_testbed.javatool import JavaTool, tail

from tests.interop.javaclient import QUICK_JVM, JavaClientError

JAVA_DIR = Path(__file__).resolve().parent / "inlong"
MAIN_CLASS = "org.tubespark.interop.inlong.InLongMsgVectors"
RUN_TIMEOUT_S = 120


class InLongJava:
    """Build-once, run-many wrapper around the InLongMsg CLI."""

    def __init__(self) -> None:
        self.tool = JavaTool(JAVA_DIR, "inlongmsg", MAIN_CLASS, required_jars=("inlong-common-1.11.0", "snappy-java"))

    def build(self) -> None:
        self.tool.build()

    def _run(self, *args: str) -> list[dict[str, Any]]:
        cmd = self.tool.command(*args, jvm_flags=[*QUICK_JVM, "-Dfile.encoding=UTF-8"])
        try:
            proc = subprocess.run(cmd, capture_output=True, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            raise JavaClientError(f"InLongMsg CLI still running after {RUN_TIMEOUT_S} s\n{tail(e.stderr)}") from None
        if proc.returncode != 0:
            raise JavaClientError(f"InLongMsg CLI failed (exit {proc.returncode})\n{tail(proc.stderr)}")
        return [json.loads(line) for line in proc.stdout.decode("utf-8").splitlines() if line.strip()]

    def encode_vectors(self, outdir: Path) -> list[dict[str, Any]]:
        """Let InLongMsg write its bundles into ``outdir``: ``[{"name", "file", "size"}]``."""
        return self._run("encode", str(outdir))

    def parse(self, paths: list[Path]) -> list[dict[str, Any]]:
        """InLongMsg's view of each file: ``{"ok", "version", "createtime", "msgcnt", "groups": [{"attr",
        "records": [bytes]}]}`` or ``{"ok": False, "error"}``, in the order of ``paths``."""
        lines = self._run("parse", *map(str, paths))
        if len(lines) != len(paths):
            raise JavaClientError(f"parse printed {len(lines)} lines for {len(paths)} files")
        for line in lines:
            for group in line.get("groups", []):
                group["records"] = [base64.b64decode(r) for r in group["records"]]
        return lines

    def parse_bytes(self, payloads: list[bytes]) -> list[dict[str, Any]]:
        with tempfile.TemporaryDirectory(prefix="tubespark-inlongmsg-") as tmp:
            paths = []
            for i, payload in enumerate(payloads):
                path = Path(tmp) / f"{i:04d}.bin"
                path.write_bytes(payload)
                paths.append(path)
            return self.parse(paths)


_shared: InLongJava | None = None


def shared_inlong_java() -> InLongJava:
    global _shared
    if _shared is None:
        _shared = InLongJava()
    return _shared
