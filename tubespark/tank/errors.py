"""The errors only TANK raises: bytes that break its protocol, a moved leader, a fetch outside the
partition's numbers.

They subclass the broker-neutral kinds of :mod:`tubespark.errors` (and follow its rule for
``retriable``). This module sits below TANK's layers (wire, net, client, spark may all import it) and
imports nothing but the shared errors; the codes that become these errors are in
:mod:`tubespark.tank.wire.codes` (docs/tank/protocol.md#fetch, #produce).
"""

from __future__ import annotations

from tubespark.errors import BrokerError, MessageFormatError, ServerBusyError


class TankProtocolError(MessageFormatError):
    """Bytes that break docs/tank/protocol.md (a frame, a response, a bundle). The stream is unusable."""


class BundleFormatError(TankProtocolError):
    """A bundle or message inside a complete bundle that cannot be decoded (bad flags, overruns, Snappy)."""


class TruncatedFieldError(TankProtocolError):
    """A field runs past the end of the bytes at hand. Inside a complete payload that is a broken
    payload; at the end of a fetch chunk it is the cut last bundle the protocol allows."""


class LeaderMovedError(ServerBusyError):
    """Another node leads the partition (0xFC); ``address`` is where to go. Retriable there."""

    def __init__(self, code: int, message: str, *, address: str, context: str = "", broker: str = "") -> None:
        super().__init__(code, f"{message}; the leader is {address}", context=context, broker=broker)
        self.address = address


class BoundaryFaultError(BrokerError):
    """A fetch asked for a sequence number below the first available one or above high-water mark + 1.

    ``first_available`` and ``high_water_mark`` are the broker's; the reader decides whether that is
    data loss (retention removed what it planned to read) or a plan made against another broker.
    """

    def __init__(self, code: int, *, first_available: int, high_water_mark: int, requested: int, context: str = "",
                 broker: str = "") -> None:
        super().__init__(code, f"sequence number {requested} is outside the partition's "
                         f"[{first_available}, {high_water_mark + 1}]", context=context, broker=broker)
        self.first_available = first_available
        self.high_water_mark = high_water_mark
        self.requested = requested
