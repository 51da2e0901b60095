"""The README's walk-through, run exactly as written, block after block, on the cluster the README starts.

Issue 25 item 2: the write block copied a stream to ``demo_copy``, a topic the README's cluster command
never deployed, so it failed as written. The test takes the Python blocks from "Reading a stream" to
"From outside Spark" in reading order, runs them as one script in one Python session (a reader pasting
them one by one), and checks the README's cluster command deploys every topic they use, which is what
the session cluster deploys for them too.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import README_TOPICS

pytestmark = [pytest.mark.integration, pytest.mark.spark]

README = Path(__file__).parents[3] / "README.md"

EPILOGUE = '''
for running in spark.streams.active:   # the test's own end: the README leaves the copy stream running
    running.processAllAvailable()
    running.stop()
print(spark.read.format("tubemq").option("master", master).option("topic", "demo_copy").load().count(), "copied")
'''


def walkthrough() -> list[str]:
    """The README's Python blocks from "Reading a stream" up to "From outside Spark", in reading order."""
    section = README.read_text().split("## Reading a stream", 1)[1].split("### From outside Spark", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def cluster_command_topics() -> set[str]:
    """The topics the README's ``tubespark_testbed start`` command deploys."""
    section = README.read_text().split("## Reading a stream", 1)[1]
    command = re.search(r"^python -m tubespark_testbed start (.*)$", section, re.M).group(1)
    return {spec.split(":")[0] for spec in re.findall(r"--topic (\S+)", command)}


def test_the_readme_cluster_command_deploys_every_topic_the_blocks_use():
    """Fails on the README before issue 25 item 2: ``demo_copy`` was written to, never deployed."""
    used = {name for block in walkthrough() for name in re.findall(r'option\("topic", "(\w+)"\)', block)}
    assert used == {"demo_events", "demo_copy"}, used
    assert used <= cluster_command_topics(), cluster_command_topics()
    assert used <= set(README_TOPICS)


def test_readme_walkthrough_runs_as_written(tubemq_cluster, tmp_path):
    blocks = walkthrough()
    assert len(blocks) >= 5, "the read, write, progress and listener blocks"
    shutil.rmtree("/tmp/tubespark-example", ignore_errors=True)
    script = tmp_path / "walkthrough.py"
    script.write_text("\n".join(blocks) + EPILOGUE)
    env = {**os.environ, "TUBEMQ_MASTER": tubemq_cluster.master_address,
           "TUBEMQ_MASTER_WEB": tubemq_cluster.master_web_url, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    count = int(re.search(r"^(\d+) events so far$", done.stdout, re.M).group(1))
    assert count == 1000, done.stdout  # the sample block's events, read back by the read block
    copied = int(re.search(r"^(\d+) copied$", done.stdout, re.M).group(1))
    assert copied > 0, done.stdout  # the write block's copy stream reached demo_copy
