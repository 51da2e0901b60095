"""The errors only RocketMQ raises: its name servers, its broker groups' permissions, pop offsets.

They subclass the broker-neutral kinds of :mod:`tubespark.errors` (and follow its rule for
``retriable``). This module sits below RocketMQ's layers (wire, net, client, spark may all import it)
and imports nothing but the shared errors; the response codes that become these errors are in
:mod:`tubespark.rocketmq.wire.codes` (docs/rocketmq/protocol.md#codes).
"""

from __future__ import annotations

from tubespark.errors import AuthError, BadRequestError, BrokerConnectionError, BrokerError


class NoNameServerAvailableError(BrokerConnectionError):
    """No configured name server answered a route request (each refused or broke the connection).

    Retriable like every connection failure: a name server that restarts answers again.
    """


class NoPermissionError(BrokerError):
    """The broker refused the operation for this broker group right now, typically a write to a read-only
    group (its master is down and a slave acts for it): the route changes, so trying again can help."""

    retriable = True


class OffsetOutOfRangeError(BrokerError):
    """An ack or invisible-time change named an offset the queue no longer (or not yet) holds."""


class FilterNotSupportedError(BadRequestError):
    """The broker refuses SQL92 (property) filters: its ``enablePropertyFilter`` is off (the default). Not
    retriable: every broker of a group answers so until the setting changes and the broker restarts."""


class AccessDeniedError(AuthError):
    """A broker with ACL (``authorizationEnabled``) knows the access key but its user may not do this (no
    policy allows the topic or group, or a policy denies it). Not retriable: policies change by an admin."""
