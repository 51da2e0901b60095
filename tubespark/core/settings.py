"""The connection settings every broker's client shares, and the one way option defaults derive from them.

Each broker's ``ClientSettings`` is a frozen dataclass extending :class:`ConnectionSettings` with what
only that broker needs (TubeMQ's heartbeats and credentials, TANK's client id, RocketMQ's route cache
and fail-over window). The two timeouts every client bounds its waits by are declared here once, with
one name each: ``connect_timeout_s`` (opening a TCP connection, TLS included) and ``request_timeout_s``
(waiting for any one request's answer).

A field's default is the only default of that setting: the data source options that set it
(``connectTimeoutMs``, ``requestTimeoutMs``, ``heartbeatIntervalMs``, ...) take their default text from
:meth:`ConnectionSettings.default_ms`, so the Options page, the option parser and a client built without
options agree.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any

from tubespark.core.framed import DEFAULT_CALL_TIMEOUT_S, DEFAULT_CONNECT_TIMEOUT_S

__all__ = ["ConnectionSettings"]


@dataclass(frozen=True)
class ConnectionSettings:
    """Timeouts (seconds) every broker client bounds its network waits by."""

    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S  # 3 s
    request_timeout_s: float = DEFAULT_CALL_TIMEOUT_S  # 10 s

    @classmethod
    def default(cls, name: str) -> Any:
        """The default of field ``name`` (of this class or a subclass)."""
        for item in fields(cls):
            if item.name == name:
                if item.default is MISSING:
                    raise ValueError(f"{cls.__name__}.{name} has no default")
                return item.default
        raise ValueError(f"{cls.__name__} has no field {name!r}")

    @classmethod
    def default_ms(cls, name: str) -> str:
        """The default of the seconds field ``name`` as option text in milliseconds (``3.0`` -> ``"3000"``)."""
        return str(round(float(cls.default(name)) * 1000))
