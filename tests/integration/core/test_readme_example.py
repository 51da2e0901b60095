"""The README's streaming example, run exactly as written against the local test cluster."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import bodies, produce

pytestmark = [pytest.mark.integration, pytest.mark.spark]

README = Path(__file__).parents[3] / "README.md"


def readme_example() -> str:
    section = README.read_text().split("## Reading a stream", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_streaming_example_runs_as_written(tubemq_cluster, tmp_path):
    produce(tubemq_cluster.master_address, "demo_events",
            bodies([f'{{"n": {i}}}'.encode() for i in range(25)], msg_type="demo"))
    shutil.rmtree("/tmp/tubespark-example", ignore_errors=True)
    script = tmp_path / "example.py"
    script.write_text(readme_example())
    env = {**os.environ, "TUBEMQ_MASTER": tubemq_cluster.master_address, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    count = int(re.search(r"^(\d+) events so far$", done.stdout, re.M).group(1))
    assert count >= 25
