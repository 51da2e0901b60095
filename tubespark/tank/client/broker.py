"""Calls to one TANK broker, with typed results and typed errors.

A :class:`TankClient` holds one pipelined connection to the broker (reopened after a failure) and turns
the broker's codes into the shared error hierarchy (docs/tank/protocol.md#fetch, #produce,
#discoverpartitions, #createtopic), so the layers above branch on ``retriable`` and error classes. TANK
has no consumer groups (docs/tank/protocol.md#no-consumer-groups): nothing here registers, joins or
commits; a reader states the sequence number it wants on every fetch.
"""

from __future__ import annotations

import uuid
from concurrent.futures import Future
from dataclasses import dataclass

from tubespark.core.outage import declare
from tubespark.core.settings import ConnectionSettings
from tubespark.errors import BadRequestError, ServerBusyError, UnknownTopicError
from tubespark.tank.errors import BoundaryFaultError, TankProtocolError
from tubespark.tank.net.connection import Connection, ConnectionPool
from tubespark.tank.wire.codes import CREATE_EXISTS, CREATE_MESSAGES, FETCH_BOUNDARY, FETCH_OK, fetch_error
from tubespark.tank.wire.requests import (
    BrokerStatus,
    CreateTopicRequest,
    DiscoverPartitionsRequest,
    DiscoverTopicsRequest,
    FetchedPartition,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    PartitionInfo,
    ProduceRequest,
    ProduceResult,
    StatusRequest,
    TopicInfo,
)

UNKNOWN_TOPIC = "unknown topic: check the `topic` option, or create the topic on the TANK broker first"
"""What a broker that does not have a topic tells the user (the message says what to do)."""


@dataclass(frozen=True)
class ClientSettings(ConnectionSettings):
    """Timeouts (seconds, :class:`ConnectionSettings`) and the client id sent in fetch and produce requests."""

    client_id: str = "tubespark"


class TankClient:
    """One broker (``host:port``). Thread-safe: calls from several threads pipeline on one connection."""

    def __init__(self, address: str, settings: ClientSettings | None = None, *, entry_point: bool = True) -> None:
        """``entry_point``: ``address`` is the user's ``broker`` option (:func:`tubespark.core.outage.declare`: if it
        never answered in this process, an outage of it is not waited for); false for a leader a broker named."""
        self.address = address
        if entry_point:
            declare("broker", (address,), "TANK broker")
        self.settings = settings or ClientSettings()
        self._pool = ConnectionPool(connect_timeout_s=self.settings.connect_timeout_s,
                                    io_timeout_s=self.settings.request_timeout_s)
        self.client_id = f"{self.settings.client_id}-{uuid.uuid4().hex[:8]}"[:255]

    def connection(self) -> Connection:
        return self._pool.get(self.address)

    def reset(self) -> None:
        """Drop the connection (after a timeout or a broken stream); the next call opens a new one."""
        self._pool.drop(self.address)

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> TankClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- metadata -------------------------------------------------------------------------------

    def partitions(self, topic: str) -> tuple[PartitionInfo, ...]:
        """Every partition of ``topic`` with its first available sequence number and high-water mark.

        Raises UnknownTopicError for a topic the broker does not have; a partition the broker cannot
        serve right now (no leader, system error) raises a retriable ServerBusyError naming it.
        """
        infos = self.connection().call(DiscoverPartitionsRequest(topic), self.settings.request_timeout_s)
        if infos is None:
            raise UnknownTopicError(0, UNKNOWN_TOPIC, context=topic, broker=self.address)
        for info in infos:
            if info.error:
                raise fetch_error(info.error, f"{topic}/{info.partition}", leader=info.leader, broker=self.address)
        return infos

    def topics(self) -> tuple[TopicInfo, ...]:
        return self.connection().call(DiscoverTopicsRequest(), self.settings.request_timeout_s)

    def status(self) -> BrokerStatus:
        return self.connection().call(StatusRequest(), self.settings.request_timeout_s)

    def create_topic(self, topic: str, partitions: int, config: dict[str, str] | None = None) -> bool:
        """Create ``topic``; ``True`` when created, ``False`` when it already existed; else a typed error."""
        text = "".join(f"{k}={v}\n" for k, v in (config or {}).items())
        code = self.connection().call(CreateTopicRequest(topic, partitions, text), self.settings.request_timeout_s)
        if code == 0:
            return True
        if code == CREATE_EXISTS:
            return False
        error = ServerBusyError if code == 2 else BadRequestError
        raise error(code, CREATE_MESSAGES.get(code, "unknown CreateTopic code"), context=topic, broker=self.address)

    # --- data -----------------------------------------------------------------------------------

    def fetch(self, topic: str, partition: int, seq: int, fetch_size: int, *, max_wait_ms: int = 0,
              min_bytes: int = 0, timeout_s: float | None = None) -> FetchedPartition:
        """One partition's chunk from ``seq`` (docs/tank/protocol.md#fetch).

        Raises BoundaryFaultError (``seq`` outside what the broker holds), UnknownTopicError, or the
        retriable errors of a partition the broker cannot serve (LeaderMovedError names the leader).
        """
        request = FetchRequest([(topic, [FetchPartition(partition, seq, fetch_size)])], self.client_id,
                               max_wait_ms, min_bytes)
        wait_s = (timeout_s or self.settings.request_timeout_s) + max_wait_ms / 1000
        response: FetchResponse = self.connection().call(request, wait_s)
        where = f"{topic}/{partition}"
        if topic in response.unknown_topics:
            raise UnknownTopicError(0, UNKNOWN_TOPIC, context=where, broker=self.address)
        if len(response.partitions) != 1 or response.partitions[0].partition != partition:
            raise TankProtocolError(f"fetch of {where} was answered for {[p.partition for p in response.partitions]}")
        part = response.partitions[0]
        if part.error == FETCH_OK:
            return part
        if part.error == FETCH_BOUNDARY:
            raise BoundaryFaultError(FETCH_BOUNDARY, first_available=part.first_available or 0,
                                     high_water_mark=part.high_water_mark, requested=seq, context=where,
                                     broker=self.address)
        raise fetch_error(part.error, where, leader=part.leader, broker=self.address)

    def produce_async(self, request: ProduceRequest) -> Future[tuple[ProduceResult, ...]]:
        """Send a produce request without waiting (the caller settles the future; see the producer)."""
        return self.connection().call_async(request)
