"""Pieces every client shares: settings, business-error checks, client ids, authentication."""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import os
import random
import socket
import ssl
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from tubespark.core.settings import ConnectionSettings
from tubespark.tubemq.errors import NoMasterAvailableError
from tubespark.tubemq.net.connection import ConnectionPool
from tubespark.tubemq.net.master import MasterChannel
from tubespark.tubemq.wire.errcodes import ErrCode, error_for_code
from tubespark.tubemq.wire.formats import DEFAULT_BROKER_PORT, DEFAULT_BROKER_TLS_PORT
from tubespark.tubemq.wire.pb import broker_service_pb2 as bpb
from tubespark.tubemq.wire.pb import master_service_pb2 as mpb
from tubespark.version import __version__

CLIENT_VERSION = f"tubespark-{__version__}"
_counter = itertools.count(1)


class Reply(Protocol):
    """What every TubeMQ response message says about its outcome (protos/*.proto): :func:`check` reads it."""

    @property
    def success(self) -> bool: ...

    @property
    def errCode(self) -> int: ...  # noqa: N802 - the proto field's name


R = TypeVar("R", bound=Reply)


class MasterRequest(Protocol):
    """A request to the master: it carries a signature when the cluster needs credentials."""

    @property
    def authInfo(self) -> mpb.MasterCertificateInfo: ...  # noqa: N802 - the proto field's name


class BrokerRequest(Protocol):
    """A request to a broker: it carries the master's visit token (and a signed token with credentials)."""

    @property
    def authInfo(self) -> bpb.AuthorizedInfo: ...  # noqa: N802 - the proto field's name


@dataclass(frozen=True)
class Credentials:
    """TubeMQ user name and password for authenticated clusters (the signature is HMAC-SHA1).

    The password is left out of ``repr`` (and so of ``ClientSettings``' repr), because settings and
    the objects holding them end up in log lines, tracebacks and debugger output.
    """

    user: str
    password: str = field(repr=False)

    def signature(self, timestamp_ms: int, nonce: int) -> str:
        mac = hmac.new(self.password.encode(), f"{self.user}{timestamp_ms}{nonce}".encode(), hashlib.sha1)
        return urllib.parse.quote_plus(base64.b64encode(mac.digest()).decode())

    def master_cert(self) -> mpb.MasterCertificateInfo:
        ts, nonce = int(time.time() * 1000), random.randint(1, 2**31 - 1)
        return mpb.MasterCertificateInfo(authInfo=mpb.AuthenticateInfo(
            userName=self.user, timestamp=ts, nonce=nonce, othParams="", signature=self.signature(ts, nonce)))

    def broker_token(self) -> str:
        ts, nonce = int(time.time() * 1000), random.randint(1, 2**31 - 1)
        return f"{self.user} {ts} {nonce} {self.signature(ts, nonce)}"


@dataclass(frozen=True)
class ClientSettings(ConnectionSettings):
    """Timeouts and security shared by producers and consumers. Every network wait is bounded by these.

    The two timeouts every broker shares come from :class:`~tubespark.core.settings.ConnectionSettings`.
    These field defaults are the only defaults of the settings: the data source options
    (``connectTimeoutMs``, ``requestTimeoutMs``, ``heartbeatIntervalMs``) take theirs from here. The
    heartbeat stays well below the servers' 30 s session timeout, so one lost heartbeat is harmless.
    """

    heartbeat_interval_s: float = 3.0
    # A master group needs its ZooKeeper session timeout plus the selector period to elect the next
    # active master (30 s + 5 s on a default server); a client that meets only standbys waits that long.
    master_election_s: float = 40.0
    credentials: Credentials | None = None
    ssl_context: ssl.SSLContext | None = None
    broker_address_map: tuple[tuple[str, str], ...] = ()
    """``(listed, reachable)`` address pairs: a broker the master lists as ``listed`` (``ip:port``) is connected
    to at ``reachable`` instead (NAT, a port forward, the testbed's fault proxy). Everything else (partition keys,
    log lines, shielding) keeps the listed address; see docs/tubemq/brokers.md."""
    caller_reads: bool = False
    """Broker connections without a reader thread: the thread waiting for an answer reads it (an executor's range
    read, one call at a time: no hand-over between threads per fetch; see :mod:`tubespark.core.framed`)."""

    @property
    def default_broker_port(self) -> int:
        """The port a broker listed with a blank one listens on: its TLS port when we talk TLS."""
        return DEFAULT_BROKER_TLS_PORT if self.ssl_context is not None else DEFAULT_BROKER_PORT

    def connection_pool(self) -> ConnectionPool:
        """The pool of broker connections, keyed by the address the master lists, reaching each through
        :attr:`broker_address_map`."""
        return ConnectionPool(connect_timeout_s=self.connect_timeout_s, io_timeout_s=self.request_timeout_s,
                              ssl_context=self.ssl_context, address_map=dict(self.broker_address_map),
                              caller_reads=self.caller_reads)

    def master_channel(self, masters: str | Sequence[str]) -> MasterChannel:
        return MasterChannel(masters, connect_timeout_s=self.connect_timeout_s,
                             request_timeout_s=self.request_timeout_s, ssl_context=self.ssl_context)

    def add_master_auth(self, request: MasterRequest) -> None:
        """Sign a request to the master (``authInfo``) when the cluster needs credentials."""
        if self.credentials is not None:
            request.authInfo.CopyFrom(self.credentials.master_cert())

    def broker_auth(self, visit_token: int) -> tuple[int, str] | None:
        """A broker request's ``authInfo`` as (visit token, signed token): the master's visit token and, with
        credentials, a signed token; None when the request carries none."""
        if self.credentials is None and not visit_token:
            return None
        return visit_token, self.credentials.broker_token() if self.credentials else ""

    def add_broker_auth(self, request: BrokerRequest, visit_token: int) -> None:
        """Set a broker request's ``authInfo`` (see :meth:`broker_auth`)."""
        auth = self.broker_auth(visit_token)
        if auth is not None:
            request.authInfo.CopyFrom(bpb.AuthorizedInfo(visitAuthorizedToken=auth[0], authAuthorizedToken=auth[1]))


def during_election(exc: BaseException) -> bool:
    """Retry filter: the masters are between two active ones (only standbys answered)."""
    return isinstance(exc, NoMasterAvailableError) and exc.electing


CHECK_TOPIC = ("check the `topic` option, or deploy the topic on the cluster first (the master serves a new "
               "topic to clients about 30 s after it is added)")
"""How every "no such topic" error ends: the two fixes, and the wait a just-created topic needs."""

_GROUP_SETTINGS = ("use the settings the group's running members use (topics, streamIds, session), or another "
                   "group (the `group` option)")
ADVICE = {
    ErrCode.FORBIDDEN: CHECK_TOPIC,
    ErrCode.TOPIC_NOT_DEPLOYED: CHECK_TOPIC,
    ErrCode.PARTITION_UNSUBSCRIBABLE: "check the topic's acceptSubscribe setting on the master",
    ErrCode.PARTITION_UNPUBLISHABLE: "check the topic's acceptPublish setting on the master",
    ErrCode.CERTIFICATE_FAILURE: "authentication refused: check the auth.user / auth.password options "
                                 "(docs/tubemq/auth.md)",
    ErrCode.CONSUME_GROUP_FORBIDDEN: "use a group the topic allows (the `group` option), or ask the cluster's "
                                     "admin to allow this one (docs/tubemq/auth.md)",
    ErrCode.CONSUME_CONTENT_FORBIDDEN: "check the streamIds option against the filters the master allows this "
                                       "group (docs/tubemq/auth.md)",
    **dict.fromkeys(range(ErrCode.CLIENT_INCONSISTENT_CONSUMETYPE, ErrCode.CLIENT_DUPLICATE_INDEXID + 1),
                    _GROUP_SETTINGS),
}
"""What to do about the answers a user can fix, added to the error's message: the server's texts
("authInfo.userName is Blank!") name a protocol field at best, not what to change."""


def check(response: R, context: str) -> R:
    """Raise the typed TubeMQ error for ``success=false`` (or a non-200 errCode) responses."""
    if not response.success or response.errCode not in (0, ErrCode.SUCCESS):
        raise error_for_code(response.errCode, getattr(response, "errMsg", ""), context=context,
                             advice=ADVICE.get(response.errCode, ""))
    return response


def local_ip() -> str:
    """The address the master sees us by (as the Java client reports it)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            return str(s.getsockname()[0])  # (host, port) for AF_INET
    except OSError:
        return "127.0.0.1"


def ipv4_as_int32(address: str) -> int:
    """``sentAddr``: the IPv4 address as a big-endian, signed 32-bit int."""
    try:
        value = int.from_bytes(socket.inet_aton(address), "big")
    except OSError:
        value = 0x7F000001
    return value - 2**32 if value >= 2**31 else value


def new_client_id(prefix: str) -> str:
    """A unique id in the server's allowed alphabet: ``prefix_ip-pid-ms-n-version``."""
    ip = local_ip()
    return f"{prefix}_{ip}-{os.getpid()}-{int(time.time() * 1000)}-{next(_counter)}-{CLIENT_VERSION}"
