"""Free TCP ports on 127.0.0.1, for the local cluster's processes and for the unit tests' fake peers."""

from __future__ import annotations

import socket


def free_ports(count: int) -> list[int]:
    """Ask the kernel for ``count`` distinct free ports on 127.0.0.1.

    All sockets stay bound until every port is known, so the kernel cannot hand the same port out twice.
    Nothing listens on the ports afterwards, so connecting to one is refused at once. Another process
    may still grab one before its intended user binds it; a JVM then fails start-up with a clear
    "address in use" in its log, which is rare enough not to retry around.
    """
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
