"""Connection, ConnectionPool and MasterChannel against a scripted fake peer (see fakepeer.py)."""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Iterator

import pytest

from tests.doubles.fakepeer import FakePeer, Link, closed_port_address, free_ports
from tubespark.errors import BrokerConnectionError, FrameTooLargeError, RpcTimeoutError
from tubespark.tubemq.errors import (
    BadTokenError,
    NoMasterAvailableError,
    NotAMasterError,
    ProtobufDecodeError,
    RpcError,
    StandbyMasterError,
)
from tubespark.tubemq.net.connection import Connection, ConnectionPool, parse_address
from tubespark.tubemq.net.master import CHECK_MASTER, MasterChannel, parse_master_list
from tubespark.tubemq.wire.constants import Method, ServiceType
from tubespark.tubemq.wire.envelope import DecodedRequest, parse_message
from tubespark.tubemq.wire.frame import encode_frame
from tubespark.tubemq.wire.pb import master_service_pb2 as mpb

STANDBY = "org.apache.inlong.tubemq.corerpc.exception.StandbyException"
CLOSE = Method.PRODUCER_CLOSE


def close_request(tag: str) -> mpb.CloseRequestP2M:
    return mpb.CloseRequestP2M(clientId=tag)


def echo_response(request: DecodedRequest) -> mpb.CloseResponseM2P:
    """The peer's answer names the request it answers (the clientId comes back as errMsg)."""
    tag = parse_message(mpb.CloseRequestP2M, request.request).clientId
    return mpb.CloseResponseM2P(success=True, errCode=200, errMsg=tag)


def echo(link: Link, serial: int, request: DecodedRequest) -> None:
    link.reply(serial, request.method, echo_response(request))


def call(conn: Connection, tag: str, timeout_s: float = 1.0) -> str:
    return conn.call(CLOSE, ServiceType.MASTER, close_request(tag), mpb.CloseResponseM2P, timeout_s).errMsg


@pytest.fixture
def peer() -> Iterator[FakePeer]:
    with FakePeer(echo) as p:
        yield p


@pytest.fixture
def conn(peer: FakePeer) -> Iterator[Connection]:
    c = Connection.open(peer.address, connect_timeout_s=1.0, io_timeout_s=1.0)
    yield c
    c.close()


# --- Connection -------------------------------------------------------------------------------------


def test_call_round_trip_sends_what_the_server_expects(peer: FakePeer, conn: Connection) -> None:
    assert call(conn, "hello") == "hello"
    serial, request = peer.requests[0]
    assert serial >= 1
    assert (request.service_type, request.method) == (ServiceType.MASTER, CLOSE)
    assert request.timeout_ms == 1000  # the timeout we wait is the timeout the server honours


def test_concurrent_calls_are_matched_by_serial_when_answered_out_of_order(peer: FakePeer) -> None:
    n = 6
    held: list[tuple[int, DecodedRequest]] = []

    def reverse_after_all(link: Link, serial: int, request: DecodedRequest) -> None:
        held.append((serial, request))
        if len(held) == n:
            for s, r in reversed(held):
                echo(link, s, r)

    peer.script = reverse_after_all
    results: dict[str, str] = {}
    with Connection.open(peer.address, io_timeout_s=1.0) as conn:
        threads = [threading.Thread(target=lambda t=f"call-{i}": results.__setitem__(t, call(conn, t, 2.0)))
                   for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(3.0)
    assert results == {f"call-{i}": f"call-{i}" for i in range(n)}
    assert len({serial for serial, _ in held}) == n


def test_pipelined_async_calls_resolve_independently(peer: FakePeer, conn: Connection) -> None:
    futures = [conn.call_async(CLOSE, ServiceType.MASTER, close_request(f"r{i}"), mpb.CloseResponseM2P, 1.0)
               for i in range(20)]
    assert [f.result(2.0).errMsg for f in futures] == [f"r{i}" for i in range(20)]


def test_unanswered_call_times_out_and_the_connection_stays_usable(peer: FakePeer, conn: Connection) -> None:
    peer.script = lambda link, serial, request: (
        None if parse_message(mpb.CloseRequestP2M, request.request).clientId == "ignored"
        else echo(link, serial, request))
    start = time.monotonic()
    with pytest.raises(RpcTimeoutError):
        call(conn, "ignored", timeout_s=0.3)
    assert time.monotonic() - start < 0.3 + 1.0
    assert not conn.closed
    assert call(conn, "next") == "next"


def test_late_answer_after_a_timeout_is_dropped_and_the_connection_survives(peer: FakePeer,
                                                                          conn: Connection) -> None:
    def late_for_slow(link: Link, serial: int, request: DecodedRequest) -> None:
        if parse_message(mpb.CloseRequestP2M, request.request).clientId == "slow":
            link.reply_later(0.4, serial, request.method, echo_response(request))
        else:
            echo(link, serial, request)

    peer.script = late_for_slow
    with pytest.raises(RpcTimeoutError):
        call(conn, "slow", timeout_s=0.2)
    time.sleep(0.4)  # the late answer arrives for a caller that gave up
    assert not conn.closed
    assert call(conn, "after") == "after"


def test_response_for_an_unknown_serial_is_ignored(peer: FakePeer, conn: Connection) -> None:
    def stray_first(link: Link, serial: int, request: DecodedRequest) -> None:
        link.reply(serial + 1000, request.method, mpb.CloseResponseM2P(success=True, errCode=200, errMsg="stray"))
        echo(link, serial, request)

    peer.script = stray_first
    assert call(conn, "mine") == "mine"
    assert not conn.closed


def test_wrong_token_fails_the_pending_call_and_closes(peer: FakePeer, conn: Connection) -> None:
    peer.script = lambda link, serial, request: link.send_raw(struct.pack(">III", 0xCAFEBABE, serial, 1))
    with pytest.raises(BadTokenError):
        call(conn, "x")
    assert conn.closed
    with pytest.raises(BrokerConnectionError):  # later calls: a retriable connection error
        call(conn, "y")


def test_all_pending_calls_fail_on_a_bad_frame(peer: FakePeer, conn: Connection) -> None:
    seen: list[int] = []

    def garbage_on_third(link: Link, serial: int, request: DecodedRequest) -> None:
        seen.append(serial)
        if len(seen) == 3:
            link.send_raw(struct.pack(">IIII", 0xFF7FF4FE, serial, 1, 2**31 - 1))

    peer.script = garbage_on_third
    futures = [conn.call_async(CLOSE, ServiceType.MASTER, close_request(str(i)), mpb.CloseResponseM2P, 2.0)
               for i in range(3)]
    for future in futures:
        with pytest.raises(FrameTooLargeError):
            future.result(1.0)
    assert conn.closed


def test_peer_closing_fails_the_pending_call_quickly(peer: FakePeer, conn: Connection) -> None:
    peer.script = lambda link, serial, request: link.close()
    start = time.monotonic()
    with pytest.raises(BrokerConnectionError):
        call(conn, "x", timeout_s=5.0)
    assert time.monotonic() - start < 1.0
    assert conn.closed


def test_peer_closing_mid_frame_fails_the_pending_call(peer: FakePeer, conn: Connection) -> None:
    def half_frame(link: Link, serial: int, request: DecodedRequest) -> None:
        link.send_raw(encode_frame(serial, b"x" * 100)[:50])
        link.close()

    peer.script = half_frame
    with pytest.raises(BrokerConnectionError):
        call(conn, "x", timeout_s=5.0)


def test_connect_to_a_closed_port_fails_fast() -> None:
    start = time.monotonic()
    with pytest.raises(BrokerConnectionError, match="cannot connect"):
        Connection.open(closed_port_address(), connect_timeout_s=1.0)
    assert time.monotonic() - start < 1.0


def test_rpc_exception_fails_the_call_and_keeps_the_connection(peer: FakePeer, conn: Connection) -> None:
    def refuse_first(link: Link, serial: int, request: DecodedRequest) -> None:
        if parse_message(mpb.CloseRequestP2M, request.request).clientId == "bad":
            link.reply_exception(serial, "java.lang.IllegalArgumentException", "clientId is blank")
        else:
            echo(link, serial, request)

    peer.script = refuse_first
    with pytest.raises(RpcError) as info:
        call(conn, "bad")
    assert info.value.exception_name == "java.lang.IllegalArgumentException"
    assert info.value.server_message == "clientId is blank"
    assert not info.value.fatal
    assert not conn.closed
    assert call(conn, "good") == "good"


def test_fatal_rpc_exception(peer: FakePeer, conn: Connection) -> None:
    peer.script = lambda link, serial, request: link.reply_exception(
        serial, "java.lang.Exception", "IPC server unable to read call parameters", fatal=True)
    with pytest.raises(RpcError) as info:
        call(conn, "x")
    assert info.value.fatal


def test_undecodable_response_message_fails_the_call(peer: FakePeer, conn: Connection) -> None:
    peer.script = lambda link, serial, request: link.reply_data(serial, request.method, b"\x08\x01")  # no errCode
    with pytest.raises(ProtobufDecodeError):
        call(conn, "x")
    assert conn.closed


def test_close_fails_pending_calls_at_once(peer: FakePeer, conn: Connection) -> None:
    peer.script = None  # never answers
    future = conn.call_async(CLOSE, ServiceType.MASTER, close_request("x"), mpb.CloseResponseM2P, 5.0)
    peer.wait_for_requests(1)
    conn.close()
    with pytest.raises(BrokerConnectionError):
        future.result(1.0)
    with pytest.raises(BrokerConnectionError):
        call(conn, "after close")


@pytest.mark.parametrize("address", ["", "host", "host:", ":8123", "host:0", "host:65536", "host:x"])
def test_bad_addresses_are_rejected(address: str) -> None:
    with pytest.raises(ValueError, match="bad address"):
        parse_address(address)


def test_parse_address() -> None:
    assert parse_address(" broker-1:8123 ") == ("broker-1", 8123)


# --- ConnectionPool ---------------------------------------------------------------------------------


def test_pool_reuses_a_live_connection_and_reopens_after_failure(peer: FakePeer) -> None:
    pool = ConnectionPool(connect_timeout_s=1.0, io_timeout_s=1.0)
    try:
        first = pool.get(peer.address)
        assert pool.get(peer.address) is first
        # answered once, so its close below is a lost connection (an unanswered one would be probed for TLS)
        assert call(first, "hello") == "hello"
        peer.script = lambda link, serial, request: link.close()
        with pytest.raises(BrokerConnectionError):
            call(first, "dies")
        peer.script = echo
        second = pool.get(peer.address)
        assert second is not first
        assert call(second, "again") == "again"
        assert peer.accepted == 2
    finally:
        pool.close()
    assert second.closed


def test_pool_drop_closes_and_forgets(peer: FakePeer) -> None:
    pool = ConnectionPool(connect_timeout_s=1.0, io_timeout_s=1.0)
    try:
        first = pool.get(peer.address)
        pool.drop(peer.address)
        assert first.closed
        assert pool.get(peer.address) is not first
    finally:
        pool.close()


# --- MasterChannel ----------------------------------------------------------------------------------


def standby(link: Link, serial: int, request: DecodedRequest) -> None:
    link.reply_exception(serial, STANDBY, "127.0.0.1:8715 is not master now")


@pytest.fixture
def two_peers() -> Iterator[tuple[FakePeer, FakePeer]]:
    """Two peers ordered as MasterChannel will try them (it sorts the address list)."""
    with FakePeer() as a, FakePeer() as b:
        yield (a, b) if a.address < b.address else (b, a)


def dead_then_live() -> tuple[str, FakePeer]:
    """A refusing address and a peer, the refusing one first in MasterChannel's (sorted) order."""
    dead, live = sorted(free_ports(2), key=lambda port: f"127.0.0.1:{port}")
    return f"127.0.0.1:{dead}", FakePeer(echo, port=live)


def channel(*addresses: str) -> MasterChannel:
    return MasterChannel(",".join(addresses), connect_timeout_s=1.0, request_timeout_s=1.0)


def master_call(ch: MasterChannel, tag: str = "x") -> str:
    return ch.call(CLOSE, close_request(tag), mpb.CloseResponseM2P).errMsg


def test_master_fails_over_from_a_refused_address() -> None:
    dead, peer = dead_then_live()
    ch = channel(peer.address, dead)
    try:
        assert ch.addresses[0] == dead
        assert master_call(ch, "hi") == "hi"
        assert ch.active_address == peer.address
    finally:
        ch.close()
        peer.close()


def test_master_fails_over_from_a_standby(two_peers: tuple[FakePeer, FakePeer]) -> None:
    first, second = two_peers
    first.script, second.script = standby, echo
    ch = channel(second.address, first.address)
    try:
        assert master_call(ch, "one") == "one"
        assert master_call(ch, "two") == "two"  # sticks to the active master
    finally:
        ch.close()
    assert len(first.requests) == 1
    assert len(second.requests) == 2


@pytest.mark.parametrize("misbehaviour", [
    pytest.param(lambda link, serial, request: link.reply_exception(serial, "java.io.IOException", "reset"),
                 id="io-exception-reply"),
    pytest.param(lambda link, serial, request: link.send_raw(b"HTTP/1.1 400 Bad Request\r\n\r\n"), id="garbage"),
])
def test_master_fails_over_when_the_first_master_misbehaves(two_peers: tuple[FakePeer, FakePeer],
                                                            misbehaviour) -> None:
    first, second = two_peers
    first.script, second.script = misbehaviour, echo
    ch = channel(first.address, second.address)
    try:
        assert master_call(ch) == "x"
    finally:
        ch.close()


NOT_READY = "org.apache.inlong.tubemq.corerpc.exception.ServerNotReadyException"


def not_ready(link: Link, serial: int, request: DecodedRequest) -> None:
    link.reply_exception(serial, NOT_READY, "IPC server unable to read call parameters:RpcServer is not running yet")


def test_a_master_whose_rpc_server_is_not_running_yet_is_passed_over(two_peers: tuple[FakePeer, FakePeer]) -> None:
    """A master restarted a moment ago answers ServerNotReadyException: the call goes to the next master (it
    raised at once before), and with no other master it is a retriable wait, as during an election."""
    first, second = two_peers
    first.script, second.script = not_ready, echo
    ch = channel(first.address, second.address)
    try:
        assert master_call(ch) == "x"
    finally:
        ch.close()
    only = channel(first.address)
    try:
        with pytest.raises(NoMasterAvailableError) as info:
            master_call(only)
    finally:
        only.close()
    assert info.value.retriable and info.value.electing and "starting" in str(info.value)


def test_master_fails_over_on_timeout(two_peers: tuple[FakePeer, FakePeer]) -> None:
    first, second = two_peers
    first.script, second.script = None, echo
    ch = MasterChannel([first.address, second.address], connect_timeout_s=1.0, request_timeout_s=0.3)
    try:
        start = time.monotonic()
        assert master_call(ch) == "x"
        assert time.monotonic() - start < 1.3
    finally:
        ch.close()


def test_no_master_available_lists_every_address(two_peers: tuple[FakePeer, FakePeer]) -> None:
    first, _second = two_peers
    first.script = standby
    dead = closed_port_address()
    ch = channel(first.address, dead)
    try:
        with pytest.raises(NoMasterAvailableError) as info:
            master_call(ch)
    finally:
        ch.close()
    text = str(info.value)
    assert f"{first.address} (a standby master)" in text and f"{dead} (connection refused" in text
    assert "electing" in text
    assert info.value.retriable
    assert info.value.electing  # a standby answered: the group is electing, waiting can help


def test_no_master_at_all_is_not_an_election() -> None:
    ch = channel(closed_port_address(), closed_port_address())
    try:
        with pytest.raises(NoMasterAvailableError) as info:
            master_call(ch)
    finally:
        ch.close()
    assert not info.value.electing


def test_nothing_listening_names_the_address_why_and_the_fix() -> None:
    dead = closed_port_address()
    ch = channel(dead)
    try:
        with pytest.raises(NoMasterAvailableError) as info:
            master_call(ch)
    finally:
        ch.close()
    assert str(info.value) == (f"no TubeMQ master answers at {dead} (connection refused: nothing listens there): "
                               f"{CHECK_MASTER}")
    assert info.value.retriable  # a master that is (re)starting refuses too


@pytest.mark.parametrize(("answer", "what"), [
    pytest.param(lambda link, serial, request: link.send_raw(b"HTTP/1.1 400 Bad Request\r\n\r\n"),
                 "an HTTP server answered, not TubeMQ's RPC protocol: a web port", id="web-port"),
    pytest.param(lambda link, serial, request: link.reply_exception(serial, "java.lang.Exception",
                                                                    "No service 1 found on the server"),
                 "a TubeMQ broker answered, not a master", id="broker-port"),
])
def test_an_address_that_is_no_master_fails_at_once_saying_what_answered(answer, what) -> None:
    with FakePeer(answer) as peer:
        ch = channel(peer.address)
        try:
            with pytest.raises(NotAMasterError) as info:
                master_call(ch)
        finally:
            ch.close()
    assert str(info.value) == f"no TubeMQ master at {peer.address} ({what}): {CHECK_MASTER}"
    assert not info.value.retriable  # waiting does not turn it into a master


def test_a_broker_address_in_the_list_is_skipped_for_the_master(two_peers: tuple[FakePeer, FakePeer]) -> None:
    first, second = two_peers
    first.script = lambda link, serial, request: link.reply_exception(serial, "java.lang.Exception",
                                                                      "No service 1 found on the server")
    second.script = echo
    ch = channel(first.address, second.address)
    try:
        assert master_call(ch) == "x"
    finally:
        ch.close()


def test_other_rpc_errors_reach_the_caller_without_fail_over(two_peers: tuple[FakePeer, FakePeer]) -> None:
    first, second = two_peers
    first.script = lambda link, serial, request: link.reply_exception(serial, "java.lang.NullPointerException", "")
    second.script = echo
    ch = channel(first.address, second.address)
    try:
        with pytest.raises(RpcError) as info:
            master_call(ch)
    finally:
        ch.close()
    assert not isinstance(info.value, StandbyMasterError)
    assert info.value.exception_name == "java.lang.NullPointerException"
    assert second.requests == []


def test_parse_master_list_sorts_and_deduplicates() -> None:
    assert parse_master_list(" m2:8715, m1:8715,m2:8715,, ") == ["m1:8715", "m2:8715"]
    assert parse_master_list(["b:1", "a:2", "b:1"]) == ["a:2", "b:1"]


@pytest.mark.parametrize("masters", ["", " , ", "m1", "m1:8715,m2", "m1:port", "m1:99999"])
def test_parse_master_list_rejects_bad_addresses(masters: str) -> None:
    with pytest.raises(ValueError, match="address"):
        parse_master_list(masters)
