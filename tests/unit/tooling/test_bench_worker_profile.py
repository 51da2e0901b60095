"""bench/worker_profile.py sorts a py-spy sample by its leaf-most frame that names a step of the read."""

from __future__ import annotations

from pathlib import Path

from bench.worker_profile import classify, read_raw

ROOT = "<module> (daemon.py);manager (daemon.py);worker (daemon.py);main (worker.py)"


def test_the_leaf_most_named_frame_decides() -> None:
    # every worker stack starts in daemon.py's manager: only a stack that ends there is its gc.collect()
    assert classify("<module> (daemon.py);manager (daemon.py)") == "pyspark daemon: gc.collect() after each task"
    assert classify(f"{ROOT};process (worker.py);ArrowStreamSerializer.dump_stream (serializers.py)") == \
        "pyspark: Arrow IPC write to the JVM"
    # the task's read under the serializer: the decode, not the serializer that pulled the batch
    assert classify(f"{ROOT};dump_stream (serializers.py);read_range (tubespark/tubemq/spark/read_task.py);"
                    "decode_packed (tubespark/tubemq/wire/fetch.py)") == "compiled decode + CRC"
    # the compiled twin decodes the answer's messages in the walk that checks it when it arrives
    assert classify(f"{ROOT};PendingFetch.result (tubespark/tubemq/client/broker.py);"
                    "parse_fetch_reply (tubespark/tubemq/wire/fetch.py)") == "compiled decode + CRC"
    assert classify("Thread.run (threading.py);FramedConnection._read_loop (tubespark/core/framed.py);"
                    "read_frames (tubespark/tubemq/wire/frame.py);SocketReader.peek "
                    "(tubespark/core/framed_io.py);SocketReader._receive (tubespark/core/framed_io.py)") == \
        "socket recv (framed_io)"
    assert classify("somewhere (elsewhere.py)") == "other"


def test_raw_files_are_summed_per_step(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("<module> (daemon.py);manager (daemon.py) 7\n"
                                    f"{ROOT};to_record_batch (tubespark/tubemq/spark/schema.py) 3\n")
    (tmp_path / "b.txt").write_text("<module> (daemon.py);manager (daemon.py) 2\n")
    steps, leaves = read_raw([tmp_path / "a.txt", tmp_path / "b.txt"])
    assert steps == {"pyspark daemon: gc.collect() after each task": 9, "Arrow batch building (to_record_batch)": 3}
    assert leaves["manager (daemon.py)"] == 9
