"""Calls to the TubeMQ master with fail-over across the configured addresses.

Only the active master serves clients; a standby answers with StandbyException. Like the Java
client, a connect failure, a timeout, an undecodable reply, an IOException-type reply or a standby
reply moves on to the next address, one pass over the list per call. Other replies go back to the caller.
"""

from __future__ import annotations

import ssl
import threading
from typing import TypeVar

from google.protobuf.message import Message

from tubespark.errors import BrokerConnectionError, CodecError, NoMasterAvailableError, RpcError, StandbyMasterError
from tubespark.tubemq.net.connection import (
    DEFAULT_CALL_TIMEOUT_S,
    DEFAULT_CONNECT_TIMEOUT_S,
    Connection,
    parse_address,
)
from tubespark.tubemq.wire.constants import ServiceType

M = TypeVar("M", bound=Message)


def parse_master_list(masters: str | list[str]) -> list[str]:
    """``host:port,host:port`` -> a de-duplicated, sorted address list (the Java client's order)."""
    items = masters.split(",") if isinstance(masters, str) else list(masters)
    addresses = sorted({a.strip() for a in items if a.strip()})
    if not addresses:
        raise ValueError("no master address given")
    for address in addresses:
        parse_address(address)
    return addresses


class MasterChannel:
    """A connection to whichever master is active right now."""

    def __init__(self, masters: str | list[str], *, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.addresses = parse_master_list(masters)
        self.connect_timeout_s = connect_timeout_s
        self.call_timeout_s = call_timeout_s
        self._ssl = ssl_context
        self._index = 0
        self._conn: Connection | None = None
        self._lock = threading.Lock()

    @property
    def active_address(self) -> str:
        return self.addresses[self._index]

    def call(self, method: int, request: Message, response_cls: type[M]) -> M:
        errors: list[str] = []
        standby = False
        with self._lock:
            for _ in range(len(self.addresses)):
                address = self.addresses[self._index]
                try:
                    if self._conn is None or self._conn.closed:
                        self._conn = Connection.open(address, connect_timeout_s=self.connect_timeout_s,
                                                     ssl_context=self._ssl)
                    return self._conn.call(method, ServiceType.MASTER, request, response_cls,
                                           self.call_timeout_s)
                except (BrokerConnectionError, StandbyMasterError, CodecError) as exc:
                    standby = standby or isinstance(exc, StandbyMasterError)
                    # CodecError: the reply was garbage and the connection is gone, a local failure like a
                    # closed channel, which the Java invoker also answers by trying the next master
                    errors.append(f"{address}: {exc}")
                except RpcError as exc:
                    if not exc.exception_name.endswith("IOException"):
                        raise
                    errors.append(f"{address}: {exc}")
                self._drop_connection()
                self._index = (self._index + 1) % len(self.addresses)
        raise NoMasterAvailableError("no active TubeMQ master answered: " + "; ".join(errors), electing=standby)

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        with self._lock:
            self._drop_connection()
