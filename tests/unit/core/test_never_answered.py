"""Issue 37 part 4: an address option never seen alive in this process fails within seconds, typed and naming the
option; one seen alive that goes down is waited for (``outageTimeoutMs``). The rule's one place is
``tubespark/core/outage.py``; these tests drive it with a clock that moves only when the code sleeps."""

from __future__ import annotations

import pickle

import pytest

from tests.unit.core.test_outage import Clock
from tubespark.core import outage
from tubespark.core.framed_io import open_socket
from tubespark.core.outage import OutageWindow, declare, never_answered, ride_out, saw_alive, vouch
from tubespark.errors import BrokerConnectionError, BrokerUnavailableError, NeverAnsweredError, TubeSparkError

ADDRESS = "127.0.0.1:11011"


def refused(address: str = ADDRESS) -> BrokerConnectionError:
    """What :func:`open_socket` raises for a port nothing listens on."""
    error = BrokerConnectionError(f"cannot connect to {address}: [Errno 111] Connection refused")
    error.address = address
    return error


def always(error_of):
    def call() -> None:
        raise error_of()
    return call


def test_an_entry_point_never_seen_alive_fails_within_seconds_naming_its_option():
    declare("broker", (ADDRESS,), "TANK broker")
    clock = Clock()
    with pytest.raises(NeverAnsweredError, match=r"the TANK broker at 127\.0\.0\.1:11011 \(option `broker`\) never "
                                                 r"answered in this process .*check the `broker` option") as caught:
        ride_out(always(refused), outage_s=900, what="the TANK sink's check", sleep=clock.sleep, clock=clock)
    assert clock.now - 100.0 <= outage.FIRST_CONTACT_S + 2.0  # not the 900 s of outageTimeoutMs
    assert caught.value.option == "broker" and caught.value.addresses == (ADDRESS,)
    assert not caught.value.retriable and not isinstance(caught.value, BrokerConnectionError)


def test_the_same_address_seen_alive_once_is_waited_for_the_whole_outage_window():
    declare("broker", (ADDRESS,), "TANK broker")
    saw_alive(ADDRESS)
    clock = Clock()
    with pytest.raises(BrokerUnavailableError, match="still unreachable after 60 s"):
        ride_out(always(refused), outage_s=60, what="send", sleep=clock.sleep, clock=clock)
    assert clock.now - 100.0 >= 60


def test_evidence_from_the_driver_counts_as_seen_alive():
    declare("namesrv", (ADDRESS,), "RocketMQ name server")
    vouch(frozenset({ADDRESS}))
    assert never_answered(refused()) is None


def test_any_address_of_a_list_seen_alive_vouches_for_the_option():
    declare("master", ("127.0.0.1:1", "127.0.0.1:2"), "TubeMQ master")
    assert never_answered(refused("127.0.0.1:2")) is not None
    saw_alive("127.0.0.1:1")
    assert never_answered(refused("127.0.0.1:2")) is None


def test_an_address_the_entry_point_led_to_is_always_waited_for():
    """A broker a master listed (or a route named) is known to the deployment: never the fast rule."""
    declare("master", ("127.0.0.1:1",), "TubeMQ master")
    assert never_answered(refused("127.0.0.1:9999")) is None


def test_the_rule_looks_through_a_brokers_own_error_raised_from_the_failed_connect():
    declare("master", (ADDRESS,), "TubeMQ master")
    wrapped = BrokerConnectionError("no TubeMQ master answers")
    wrapped.__cause__ = refused()
    assert never_answered(wrapped) is not None


def test_a_window_with_no_wait_asked_keeps_the_error_as_it_came():
    declare("broker", (ADDRESS,), "TANK broker")
    window = OutageWindow(0)
    error = refused()
    assert not window.allows(error) and window.error(error, "send") is error


def test_an_accepted_connection_is_no_answer_and_open_socket_names_the_address_it_could_not_open():
    """Issue 37's rule: a port that accepts (here: the kernel's backlog, nobody speaks) has not answered; only a
    well-formed answer of the protocol makes an address alive (core.framed, test_framed)."""
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        declare("broker", (address,), "TANK broker")
        assert never_answered(refused(address)) is not None
        open_socket(address, connect_timeout_s=1, io_timeout_s=1).close()
        assert never_answered(refused(address)) is not None
    from tests.doubles.fakepeer import closed_port_address

    dead = closed_port_address()
    with pytest.raises(BrokerConnectionError) as caught:
        open_socket(dead, connect_timeout_s=1, io_timeout_s=1)
    assert caught.value.address == dead


def test_the_error_pickles_with_its_option():
    error = NeverAnsweredError("x", option="namesrv", addresses=("a:1",))
    back = pickle.loads(pickle.dumps(error))
    assert isinstance(back, TubeSparkError) and back.option == "namesrv" and back.addresses == ("a:1",)
