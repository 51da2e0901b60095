"""How a RocketMQ range read fails: the errors' one meaning of ``retriable`` (tubespark/errors.py).

A fault that may pass (no name server answers, a busy server) is retried for ``retry_s`` and then fails
as the shared, retriable :class:`RangeReadError` naming the queue, the range and where it stood, with
the last fault as its cause (before, the bare last fault escaped). A fault no retry can fix (an unknown
topic) fails at once with its own type. The name server here is a few lines over the production codec:
a real one cannot be made to answer "busy" on demand.
"""

from __future__ import annotations

import json
import logging
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from tests.doubles.fakepeer import closed_port_address
from tubespark.errors import BrokerUnavailableError, RangeReadError, ServerBusyError, UnknownTopicError
from tubespark.rocketmq.client.client import ClientSettings, RocketMQClient
from tubespark.rocketmq.client.ranges import PULL_BATCH, RangeReader
from tubespark.rocketmq.errors import NoNameServerAvailableError
from tubespark.rocketmq.wire import codes
from tubespark.rocketmq.wire.frame import FLAG_RESPONSE, Command, decode_command, encode_command
from tubespark.rocketmq.wire.message import StoredMessage, encode_stored
from tubespark.rocketmq.wire.route import MessageQueue

MQ = MessageQueue("events", "broker-a", 0)
# The name servers here run in this process and answer: a generous wait keeps a busy machine from timing them
# out (CI once missed a 0.5 s wait), and costs nothing when they answer.
LOCAL = ClientSettings(connect_timeout_s=5.0, request_timeout_s=5.0)


class AnsweringNameServer:
    """Answers every request with response ``code`` (and a remark), on 127.0.0.1."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.requests = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self._stop = threading.Event()
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(0.2)
        with conn:
            buffer = b""
            while not self._stop.is_set():
                try:
                    chunk = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not chunk:
                    return
                buffer += chunk
                while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack(">i", buffer[:4])[0]:
                    size = struct.unpack(">i", buffer[:4])[0]
                    frame, buffer = buffer[4:4 + size], buffer[4 + size:]
                    request = decode_command(frame)
                    self.requests += 1
                    conn.sendall(encode_command(self.answer(request), request.opaque))

    def answer(self, request: Command) -> Command:
        return Command(self.code, remark=f"scripted answer {self.code}", flag=FLAG_RESPONSE)

    def close(self) -> None:
        self._stop.set()
        self._server.close()


@pytest.fixture
def busy_name_server() -> Iterator[AnsweringNameServer]:
    server = AnsweringNameServer(codes.SYSTEM_BUSY)
    yield server
    server.close()


@pytest.fixture
def topic_less_name_server() -> Iterator[AnsweringNameServer]:
    server = AnsweringNameServer(codes.TOPIC_NOT_EXIST)
    yield server
    server.close()


def _read(namesrv: str, retry_s: float) -> list[object]:
    client = RocketMQClient([namesrv], LOCAL)
    try:
        return list(RangeReader(client, "tubespark_test", retry_s=retry_s).read(MQ, 3, 10))
    finally:
        client.close()


def test_no_name_server_fails_as_a_retriable_range_read_error_after_the_budget() -> None:
    started = time.monotonic()
    with pytest.raises(RangeReadError, match=r"events:broker-a:0: reading \[3, 10\) failed at 3") as error:
        _read(closed_port_address(), retry_s=1.0)
    assert 1.0 <= time.monotonic() - started < 4
    exc = error.value
    assert exc.retriable and isinstance(exc.__cause__, NoNameServerAvailableError)
    assert (exc.partition, exc.start, exc.end, exc.reached) == ("events:broker-a:0", 3, 10, 3)
    assert exc.tries is not None and exc.tries >= 2


def test_a_busy_server_fails_the_same_way_naming_its_answer(busy_name_server: AnsweringNameServer) -> None:
    with pytest.raises(RangeReadError, match="scripted answer 2") as error:
        _read(busy_name_server.address, retry_s=0.8)
    assert isinstance(error.value.__cause__, ServerBusyError) and error.value.retriable
    assert busy_name_server.requests >= 2, "retried before giving up"


def test_an_unknown_topic_fails_at_once_with_its_own_type(topic_less_name_server: AnsweringNameServer) -> None:
    started = time.monotonic()
    with pytest.raises(UnknownTopicError) as error:
        _read(topic_less_name_server.address, retry_s=30.0)
    assert time.monotonic() - started < 5 and not error.value.retriable
    assert topic_less_name_server.requests == 2  # the route, and whether any broker is registered: no retry


# --- a route that vanishes while its brokers restart (issue 22 part 7, issue 23 part 8) -------------

ROUTE = (b'{"queueDatas": [{"brokerName": "broker-a", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}], '
         b'"brokerDatas": [{"cluster": "c", "brokerName": "broker-a", "brokerAddrs": {"0": "127.0.0.1:1"}}]}')


class ScriptedNameServer(AnsweringNameServer):
    """Answers route requests with a route body while ``routed``, else with TOPIC_NOT_EXIST; cluster info with
    ``cluster`` (fastjson's form: unquoted integer map keys)."""

    routed = True
    cluster = b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:1"},"brokerName":"broker-a"}}}'

    def answer(self, request: Command) -> Command:
        if request.code == codes.GET_BROKER_CLUSTER_INFO:
            return Command(codes.SUCCESS, flag=FLAG_RESPONSE, body=self.cluster)
        if self.routed:
            return Command(codes.SUCCESS, flag=FLAG_RESPONSE, body=ROUTE)
        return Command(codes.TOPIC_NOT_EXIST, remark="No topic route info in name server", flag=FLAG_RESPONSE)


def test_a_route_the_name_server_gave_before_and_lost_is_an_outage_not_an_unknown_topic():
    """The name server drops a topic's route when its only broker stops (a restart): for a topic it routed
    before, or while no broker is registered at all (a fresh process during the outage), that is a
    retriable BrokerUnavailableError; a topic never routed while brokers run stays an UnknownTopicError."""
    server = ScriptedNameServer(codes.SUCCESS)
    client = RocketMQClient([server.address], LOCAL)
    try:
        assert [q.key for q in client.route("events").read_queues()] == ["events:broker-a:0", "events:broker-a:1"]
        server.routed = False
        with pytest.raises(BrokerUnavailableError, match="no route for topic events now, though it had one") as caught:
            client.route("events", refresh=True)
        assert caught.value.retriable
        with pytest.raises(UnknownTopicError):
            client.route("never_routed")
        server.cluster = b'{"brokerAddrTable":{},"clusterAddrTable":{}}'  # no broker registered at all
        with pytest.raises(BrokerUnavailableError, match="no broker is registered there at all"):
            RocketMQClient([server.address], LOCAL).route("never_seen_by_this_client")
        server.routed = True
        assert client.route("events", refresh=True).read_queues()
    finally:
        client.close()
        server.close()


class FlakyGroup(AnsweringNameServer):
    """Name server for topic ``events`` and, on the same socket, broker ``broker-a`` over ``n`` messages; a pull
    at an offset in ``busy`` answers SYSTEM_BUSY once (the offset is then taken out)."""

    def __init__(self, n: int, busy: set[int]) -> None:
        super().__init__(codes.SUCCESS)
        self.n = n
        self.busy = busy
        self.pulls = 0

    def answer(self, request: Command) -> Command:
        if request.code == codes.PULL_MESSAGE:
            offset, count = int(request.ext["queueOffset"]), int(request.ext["maxMsgNums"])
            self.pulls += 1
            if offset in self.busy:
                self.busy.discard(offset)
                return Command(codes.SYSTEM_BUSY, remark="scripted busy", flag=FLAG_RESPONSE)
            messages = [StoredMessage("events", 0, o, b"m%d" % o, {}, 1, 1)
                        for o in range(offset, min(offset + count, self.n))]
            return Command(codes.SUCCESS, flag=FLAG_RESPONSE, body=encode_stored(messages),
                           ext={"nextBeginOffset": str(offset + len(messages)), "minOffset": "0",
                                "maxOffset": str(self.n)})
        route = {"queueDatas": [{"brokerName": "broker-a", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}],
                 "brokerDatas": [{"cluster": "c", "brokerName": "broker-a", "brokerAddrs": {"0": self.address}}]}
        return Command(codes.SUCCESS, flag=FLAG_RESPONSE, body=json.dumps(route).encode())


def test_busy_pulls_are_retried_under_cores_policy_and_every_message_arrives_once_in_order(caplog) -> None:
    group = FlakyGroup(200, busy={0, 64, 160})
    client = RocketMQClient([group.address], LOCAL)
    try:
        with caplog.at_level(logging.INFO, logger="tubespark.core.retry"):
            reader = RangeReader(client, "tubespark_test", retry_s=5.0, depth=1)  # one pull at a time: one busy each
            got = [m.body for batch in reader.read(MQ, 0, 200) for m in batch]
    finally:
        client.close()
        group.close()
    assert got == [b"m%d" % o for o in range(200)]
    retried = [r.getMessage() for r in caplog.records if r.name == "tubespark.core.retry"]
    assert len(retried) == 3 and all("reading events:broker-a:0 at offset" in line for line in retried), retried


def test_the_retry_budget_counts_the_brokers_fault_not_the_time_the_caller_held_a_batch() -> None:
    """The caller (a Spark task writing rows out) may hold a batch longer than ``retry_s``; a fault met after
    that still gets its whole budget (before, the budget ran from the last answer and the read failed at once)."""
    group = FlakyGroup(2 * PULL_BATCH, busy={PULL_BATCH})
    client = RocketMQClient([group.address], LOCAL)
    got: list[bytes] = []
    try:
        for batch in RangeReader(client, "tubespark_test", retry_s=0.3).read(MQ, 0, 2 * PULL_BATCH):
            got += [m.body for m in batch]
            if len(got) == PULL_BATCH:
                time.sleep(0.6)  # the next window's pull, already answered busy, is looked at after this
    finally:
        client.close()
        group.close()
    assert got == [b"m%d" % o for o in range(2 * PULL_BATCH)]
