"""The README's first command: the demo on its own embedded cluster, stopped after a few seconds."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_demo_streams_events_and_shuts_down_cleanly():
    done = subprocess.run([sys.executable, "-m", "tubespark_testbed", "demo", "--seconds", "30"],
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "group lag (messages): p0=" in done.stdout
    read = int(re.search(r"Demo finished: the stream read (\d+) events", done.stdout).group(1))
    assert read > 0
