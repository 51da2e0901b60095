"""tubespark.core.shared_dir on the local filesystem and against closed ports (the real HDFS cases:
tests/integration/spark/test_shared_dirs.py)."""

from __future__ import annotations

import importlib.util
import socket
import time

import pytest

from tubespark.core.shared_dir import WEBHDFS_DEFAULT_PORT, SharedDir, SharedDirError, _open, parse_shared_directory
from tubespark.errors import OptionError, TubeSparkError


@pytest.mark.parametrize("value", ["/tmp/x", "relative/dir", "file:///tmp/x", "hdfs://nn/dir",
                                   "webhdfs://nn:9870/dir", "s3a://bucket/dir", "s3://bucket/dir"])
def test_paths_and_known_uris_parse_without_network(value):
    assert parse_shared_directory("popReceiptsPath", f" {value} ") == value


@pytest.mark.parametrize(("value", "message"), [("", "expected a directory path or a URI"),
                                                ("://x", "expected a directory path or a URI"),
                                                ("nosuchfs://h/x", "unknown filesystem 'nosuchfs'")])
def test_bad_locations_are_option_errors_naming_the_option(value, message):
    with pytest.raises(OptionError, match=rf"option skippedBundlesPath=.*{message}"):
        parse_shared_directory("skippedBundlesPath", value)


def test_an_existing_file_is_not_a_directory(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(OptionError, match="exists and is not a directory"):
        parse_shared_directory("popReceiptsPath", str(tmp_path / "f"))


@pytest.mark.parametrize("scheme", ["", "file://"])
def test_publish_list_read_remove_on_a_local_directory(tmp_path, scheme):
    root = SharedDir(f"{scheme}{tmp_path}/shared", "popReceiptsPath")
    root.check()
    batch = root.child("batch-1")
    batch.publish("b.json", b"1")
    batch.publish("a.json", b"old")
    batch.publish("a.json", b"new")  # replaced whole
    (tmp_path / "shared" / "batch-1" / ".a.json.123.tmp").write_bytes(b"half")  # a write in progress
    assert batch.names("*.json") == ["a.json", "b.json"]
    assert batch.read("a.json") == b"new"
    assert root.names() == ["batch-1"]  # the probe of check() is gone
    assert sorted(p.name for p in (tmp_path / "shared" / "batch-1").iterdir() if not p.name.startswith(".")) == \
        ["a.json", "b.json"]
    batch.remove()
    assert root.names() == [] and batch.names() == []
    batch.remove()  # gone already: nothing to do


def test_a_location_that_cannot_be_written_is_a_typed_error_naming_the_option(tmp_path):
    (tmp_path / "file").write_text("x")
    shared = SharedDir(str(tmp_path / "file" / "below"), "skippedBundlesPath")
    with pytest.raises(SharedDirError, match=r"option skippedBundlesPath=.*cannot write") as failure:
        shared.check()
    assert isinstance(failure.value, TubeSparkError)
    assert failure.value.option == "skippedBundlesPath"


def test_an_unreachable_webhdfs_fails_fast_naming_the_option():
    pytest.importorskip("requests")
    with socket.socket() as probe:  # closed once the block ends: connection refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(SharedDirError, match=rf"option popReceiptsPath='webhdfs://127.0.0.1:{port}/r'.*ConnectionError"):
        SharedDir(f"webhdfs://127.0.0.1:{port}/r", "popReceiptsPath").check()
    assert time.monotonic() - started < 10


def test_hdfs_without_libhdfs_goes_through_webhdfs_on_the_namenode_http_port():
    fs, path, _ = _open("hdfs://127.0.0.1/data/receipts")
    if fs.protocol != "webhdfs" and "webhdfs" not in fs.protocol:
        pytest.skip("pyarrow's libhdfs loads here: hdfs:// uses it")
    assert path == "/data/receipts"
    assert fs.url == f"http://127.0.0.1:{WEBHDFS_DEFAULT_PORT}/webhdfs/v1"


@pytest.mark.skipif(importlib.util.find_spec("s3fs") is not None, reason="s3fs is installed")
def test_s3a_without_s3fs_names_the_extra():
    with pytest.raises(SharedDirError, match=r"option popReceiptsPath=.*tubespark\[s3\]"):
        SharedDir("s3a://bucket/receipts", "popReceiptsPath").names()
