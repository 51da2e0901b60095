"""The README's examples and the guides' walk-through, run exactly as written, on the clusters they name.

Which blocks: every fenced block of README.md and the pages in ``PAGES`` whose marker says
``<!-- run by: tests/integration/core/test_readme_example.py -->`` (tests/doc_blocks.py; the marker rule is
checked by tests/unit/tooling/test_docs_site.py). They run in reading order, README first, as one script in
one Python session (a reader pasting them one by one); a guide block that repeats a README block word for
word (the TubeMQ guide opens with the README's example) runs once. The README's TubeMQ example writes and
streams back ``demo_events``; the guide goes on to a copy stream into ``demo_copy`` and the monitoring
page's lag blocks; the README's TANK example runs against the TANK test double (tests/doubles/tank_broker.py,
in this process) and its RocketMQ example against the session's RocketMQ 5.3.3 stack, each followed by its
guide's backfill block.

Issue 25 item 2: the write block copied a stream to ``demo_copy``, a topic the README's cluster command
never deployed, so it failed as written; the cluster command's topics are checked against the blocks.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.doc_blocks import ROOT, run_by
from tests.doubles.tank_broker import TankBroker
from tests.integration.conftest import README_TOPICS

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ME = "tests/integration/core/test_readme_example.py"
README = ROOT / "README.md"
PAGES = [ROOT / "docs" / page for page in
         ("tubemq/guide.md", "operations/monitoring.md", "tank/guide.md", "rocketmq/guide.md")]
"""The site's pages whose marked blocks run here, after the README's, in this order."""
TANK_TOPIC = "events"
ROCKETMQ_TOPIC = "demo_orders"
"""The topics the README's TANK and RocketMQ examples name (created here, as the README asks the reader to)."""

EPILOGUE = '''
for running in spark.streams.active:   # the test's own end: the guide leaves the copy stream running
    running.processAllAvailable()
    running.stop()
print(spark.read.format("tubemq").option("master", master).option("topic", "demo_copy").load().count(), "copied")
'''


def walkthrough() -> list[str]:
    """Every block this test runs, in reading order, a block repeated word for word kept once."""
    blocks: list[str] = []
    for page in [README, *PAGES]:
        blocks += [code for code in run_by(page, ME) if code not in blocks]
    return blocks


def cluster_command_topics() -> set[str]:
    """The topics the README's ``tubespark_testbed start`` command deploys."""
    command = re.search(r"^python -m tubespark_testbed start (.*)$", README.read_text(), re.M).group(1)
    return {spec.split(":")[0] for spec in re.findall(r"--topic (\S+)", command)}


def test_the_readme_cluster_command_deploys_every_topic_the_blocks_use():
    """Fails on the README before issue 25 item 2: ``demo_copy`` was written to, never deployed."""
    tubemq = [block for block in walkthrough() if 'format("tank")' not in block and 'format("rocketmq")' not in block]
    used = {name for block in tubemq for name in re.findall(r'option\("topic", "(\w+)"\)', block)}
    assert used == {"demo_events", "demo_copy"}, used
    assert used <= cluster_command_topics(), cluster_command_topics()
    assert used <= set(README_TOPICS)


def test_readme_walkthrough_runs_as_written(tubemq_cluster, rocketmq_stack, tmp_path):
    blocks = walkthrough()
    readme = run_by(README, ME)
    assert len(readme) == 4, "the README's TubeMQ write and read blocks, its TANK and its RocketMQ example"
    assert len(blocks) >= 9, "+ the guide's writes, the monitoring page's two, the TANK and RocketMQ backfills"
    shutil.rmtree("/tmp/tubespark-example", ignore_errors=True)
    rocketmq_stack.create_topic(ROCKETMQ_TOPIC, 4)
    script = tmp_path / "walkthrough.py"
    script.write_text("\n".join(blocks) + EPILOGUE)
    with TankBroker({TANK_TOPIC: 2}) as tank:
        env = {**os.environ, "TUBEMQ_MASTER": tubemq_cluster.master_address,
               "TUBEMQ_MASTER_WEB_URL": tubemq_cluster.master_web_url, "TANK_BROKER": tank.address,
               "ROCKETMQ_NAMESRV": rocketmq_stack.namesrv_address}
        # the test bed's start-up script when set (tubespark_testbed/sparkpython.py), as the README's busy-machine
        # line advises: plain python compiled pyspark.zip in the lag stream's process, which missed Spark's 10 s
        # connect-back in a CI run ("Python worker failed to connect back")
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=400, env=env,
                              cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]

    def printed(label: str) -> int:
        return int(re.search(rf"^(\d+) {label}$", done.stdout, re.M).group(1))

    assert printed("events so far") == 1000, done.stdout  # the sample block's events, read back by the read block
    assert printed("copied") > 0, done.stdout  # the guide's copy stream reached demo_copy
    assert printed("TANK events") == 1000, done.stdout
    assert printed("TANK messages backfilled") == 1000, done.stdout
    assert printed("RocketMQ messages") == 1000, done.stdout
    assert printed("RocketMQ messages backfilled") == 1000, done.stdout

