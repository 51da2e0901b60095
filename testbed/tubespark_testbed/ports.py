"""Free TCP ports on 127.0.0.1, for the local clusters' processes and for the unit tests' fake peers.

Why not the kernel's choice (``bind(("127.0.0.1", 0))``): it hands out ports from the ephemeral range, the one
every outgoing connection takes its local port from. A cluster writes its ports into its configuration and its
JVMs bind them seconds later; on a busy machine (three lanes of tests, Spark and its workers opening
connections) an outgoing connection took a broker's web port in that window, and the broker failed with
"Address already in use" (a CI run's bench smoke). So ports come from below the ephemeral range, where no
outgoing connection lands, and each one picked is reserved for :data:`RESERVATION_S` by a file under
:data:`RESERVED_DIR`, so that two test processes starting clusters at once never pick the same port.
Where the ephemeral range leaves no room below it, the kernel chooses as before.
"""

from __future__ import annotations

import os
import random
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

RESERVED_DIR = Path(tempfile.gettempdir()) / "tubespark-ports"
RESERVATION_S = 900.0
"""How long a picked port stays reserved: longer than any process takes to bind the port it was given (once it
listens, the kernel refuses the port to everyone else anyway)."""
LOWEST = 16000
"""Above the well-known ports a test may meet (Spark Connect's 15002, Spark's UI 4040, RocketMQ's 10911)."""
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _pick_range() -> range:
    """The ports to pick from: ``LOWEST`` up to the ephemeral range's start (Linux's default: 32768)."""
    try:
        start = int(_EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        start = 32768  # Linux's default; other systems start theirs higher (macOS: 49152)
    return range(LOWEST, start) if start - LOWEST >= 2000 else range(0)


def _bindable(port: int) -> bool:
    """Whether nothing holds ``port``: the wildcard address, as the JVMs' web servers bind it (a port bound on
    127.0.0.1 alone fails this too)."""
    with socket.socket() as probe:
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _reserve(port: int) -> bool:
    """Take ``port``'s reservation file, or a stale one; False while another process's is fresh."""
    RESERVED_DIR.mkdir(exist_ok=True)
    path = RESERVED_DIR / str(port)
    for _ in range(2):
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            return True
        except FileExistsError:
            try:
                if time.time() - path.stat().st_mtime < RESERVATION_S:
                    return False
                path.unlink()
            except FileNotFoundError:
                pass
    return False


def free_port_block(offsets: Sequence[int]) -> int:
    """A port ``p`` with ``p + o`` free and reserved for every ``o`` of ``offsets`` (e.g. a RocketMQ broker's
    listen port with its fast port ``p - 2`` and HA port ``p + 1``)."""
    pick = _pick_range()
    span = range(pick.start - min(offsets, default=0), pick.stop - max(offsets, default=0))
    if len(span) > 0:
        for _ in range(500):
            port = random.choice(span)
            wanted = [port + o for o in offsets]
            if all(_bindable(p) for p in wanted) and all(_reserve(p) for p in wanted):
                return port
    for _ in range(200):  # no room below the ephemeral range: the kernel's choice, as before
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if all(1024 < port + o < 65536 and _bindable(port + o) for o in offsets):
            return int(port)
    raise OSError(f"no free ports at offsets {list(offsets)} of one port")


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports on 127.0.0.1, each reserved (module docstring). Nothing listens on them, so
    connecting to one is refused at once."""
    picked: list[int] = []
    while len(picked) < count:
        port = free_port_block([0])
        if port not in picked:
            picked.append(port)
    return picked
