"""Free ports for the local clusters (tubespark_testbed/ports.py): below the ephemeral range, distinct, reserved."""

from __future__ import annotations

import os
import socket
import time

from tubespark_testbed import ports


def test_ports_come_from_below_the_ephemeral_range_distinct_and_free():
    picked = ports.free_ports(20)
    span = ports._pick_range()
    assert len(set(picked)) == 20
    assert all(port in span for port in picked), (picked, span)  # no outgoing connection can take them meanwhile
    for port in picked:
        with socket.socket() as s:
            s.bind(("0.0.0.0", port))


def test_a_reserved_port_is_not_picked_again_until_its_reservation_is_stale(tmp_path, monkeypatch):
    monkeypatch.setattr(ports, "RESERVED_DIR", tmp_path)
    assert ports._reserve(23456)
    assert not ports._reserve(23456)  # another process's fresh reservation
    old = time.time() - ports.RESERVATION_S - 1
    os.utime(tmp_path / "23456", (old, old))
    assert ports._reserve(23456)  # stale: taken over


def test_a_block_of_ports_is_free_and_reserved_at_each_offset(tmp_path, monkeypatch):
    monkeypatch.setattr(ports, "RESERVED_DIR", tmp_path)
    port = ports.free_port_block((-2, 0, 1))
    assert {p.name for p in tmp_path.iterdir()} == {str(port - 2), str(port), str(port + 1)}
