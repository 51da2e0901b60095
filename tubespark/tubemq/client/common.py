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
from dataclasses import dataclass

from google.protobuf.message import Message

from tubespark.tubemq.net.connection import ConnectionPool
from tubespark.tubemq.net.master import MasterChannel
from tubespark.tubemq.wire.errcodes import ErrCode, error_for_code
from tubespark.tubemq.wire.pb import broker_service_pb2 as bpb
from tubespark.tubemq.wire.pb import master_service_pb2 as mpb

CLIENT_VERSION = "tubespark-0.1.0"
_counter = itertools.count(1)


@dataclass(frozen=True)
class Credentials:
    """TubeMQ user name and password for authenticated clusters (the signature is HMAC-SHA1)."""

    user: str
    password: str

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
class ClientSettings:
    """Timeouts and security shared by producers and consumers. Every network wait is bounded by these."""

    connect_timeout_s: float = 3.0
    call_timeout_s: float = 10.0
    heartbeat_interval_s: float = 13.0
    credentials: Credentials | None = None
    ssl_context: ssl.SSLContext | None = None

    def connection_pool(self) -> ConnectionPool:
        return ConnectionPool(connect_timeout_s=self.connect_timeout_s, io_timeout_s=self.call_timeout_s,
                              ssl_context=self.ssl_context)

    def master_channel(self, masters: str | list[str]) -> MasterChannel:
        return MasterChannel(masters, connect_timeout_s=self.connect_timeout_s,
                             call_timeout_s=self.call_timeout_s, ssl_context=self.ssl_context)

    def broker_auth(self, visit_token: int) -> bpb.AuthorizedInfo | None:
        if self.credentials is None and not visit_token:
            return None
        token = self.credentials.broker_token() if self.credentials else ""
        return bpb.AuthorizedInfo(visitAuthorizedToken=visit_token, authAuthorizedToken=token)


def check(response: Message, context: str) -> Message:
    """Raise the typed TubeMQ error for ``success=false`` (or a non-200 errCode) responses."""
    if not response.success or response.errCode not in (0, ErrCode.SUCCESS):
        raise error_for_code(response.errCode, getattr(response, "errMsg", ""), context=context)
    return response


def local_ip() -> str:
    """The address the master sees us by (as the Java client reports it)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            return s.getsockname()[0]
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
