"""Request and response codes of the remoting protocol, and the errors the response codes become.

Callers branch on the error class (the shared kinds of :mod:`tubespark.errors` and RocketMQ's own in
:mod:`tubespark.rocketmq.errors`) and its ``retriable`` flag, never on a number
(docs/rocketmq/protocol.md, "Codes").
"""

from __future__ import annotations

import re

from tubespark.errors import (
    AuthError,
    BadRequestError,
    BrokerError,
    NoDataError,
    ServerBusyError,
    TubeSparkError,
    UnknownTopicError,
)
from tubespark.rocketmq.errors import (
    AccessDeniedError,
    FilterNotSupportedError,
    NoPermissionError,
    OffsetOutOfRangeError,
)

# --- request codes ---------------------------------------------------------------------------------
SEND_MESSAGE = 10
PULL_MESSAGE = 11
QUERY_CONSUMER_OFFSET = 14
UPDATE_CONSUMER_OFFSET = 15
UPDATE_AND_CREATE_TOPIC = 17
GET_MAX_OFFSET = 30
GET_MIN_OFFSET = 31
HEART_BEAT = 34
CHECK_CLIENT_CONFIG = 46
GET_ROUTEINFO_BY_TOPIC = 105
GET_BROKER_CLUSTER_INFO = 106
SEND_MESSAGE_V2 = 310
SEND_BATCH_MESSAGE = 320
POP_MESSAGE = 200050
ACK_MESSAGE = 200051
CHANGE_MESSAGE_INVISIBLETIME = 200053
BATCH_ACK_MESSAGE = 200151

BINARY_CODE_LIMIT = 0x7FFF
"""The binary header stores ``code`` in 16 signed bits: the pop family (2000xx) only travels in JSON."""

# --- response codes --------------------------------------------------------------------------------
SUCCESS = 0
SYSTEM_ERROR = 1
SYSTEM_BUSY = 2
REQUEST_CODE_NOT_SUPPORTED = 3
FLUSH_DISK_TIMEOUT = 10
SLAVE_NOT_AVAILABLE = 11
FLUSH_SLAVE_TIMEOUT = 12
MESSAGE_ILLEGAL = 13
SERVICE_NOT_AVAILABLE = 14
NO_PERMISSION = 16
TOPIC_NOT_EXIST = 17
PULL_NOT_FOUND = 19
PULL_RETRY_IMMEDIATELY = 20
PULL_OFFSET_MOVED = 21
QUERY_NOT_FOUND = 22
SUBSCRIPTION_PARSE_FAILED = 23
SUBSCRIPTION_NOT_EXIST = 24
SUBSCRIPTION_GROUP_NOT_EXIST = 26
INVALID_PARAMETER = 29
NO_MESSAGE = 208
POLLING_FULL = 209
POLLING_TIMEOUT = 210
FLOW_CONTROL = 215
GO_AWAY = 1500

STORED_NOT_CONFIRMED = frozenset({FLUSH_DISK_TIMEOUT, SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT})
"""Send answers meaning "stored on the master, but the flush or the slave copy was not confirmed": the
message *is* in the queue (the header carries its offset), so a sender counts it as sent."""


_BUSY = {SYSTEM_ERROR, SYSTEM_BUSY, SERVICE_NOT_AVAILABLE, POLLING_FULL, FLOW_CONTROL, GO_AWAY,
         PULL_RETRY_IMMEDIATELY}
_BAD = {REQUEST_CODE_NOT_SUPPORTED, MESSAGE_ILLEGAL, SUBSCRIPTION_PARSE_FAILED, SUBSCRIPTION_NOT_EXIST,
        SUBSCRIPTION_GROUP_NOT_EXIST, INVALID_PARAMETER}


PROPERTY_FILTER_OFF = "does not support consumer to filter message by"
"""The remark of the broker's SYSTEM_ERROR answer to an SQL92 filter while its ``enablePropertyFilter`` is off
(PULL_MESSAGE and CHECK_CLIENT_CONFIG alike): not a passing fault, so not the busy kind SYSTEM_ERROR is."""


AUTHENTICATION_REFUSED = ("check signature failed", "username cannot be null", "is not found", "not found.",
                          "is disabled")
AUTHORIZATION_REFUSED = "has no permission to access"
"""Remarks of a 5.x broker's NO_PERMISSION answers from its ACL 2.0 checks (``DefaultAuthenticationHandler``,
``AclAuthorizationHandler``): the same code as a write to a read-only group, which passes (the route
changes); these do not."""


# RocketMQ's servers end many remarks with a link to their FAQ on a line of its own (FAQUrl.suffixHelp), which
# would push our advice off the error's first line; the link tells a tubespark user nothing to do
_FAQ_LINK = re.compile(r"\s*See https?://\S*FAQ\S* for further details\.?", re.IGNORECASE)


def plain_remark(remark: str | None) -> str:
    """A server's remark without its FAQ link, fit for the first line of an error."""
    return _FAQ_LINK.sub("", remark or "").strip()


def error_for_code(code: int, remark: str | None, *, context: str = "", broker: str = "") -> TubeSparkError:
    """The typed error for a response ``code`` that is not the success the call expected."""
    message = plain_remark(remark) or "(no remark)"
    kind: type[BrokerError]
    if code == SYSTEM_ERROR and PROPERTY_FILTER_OFF in message:
        return FilterNotSupportedError(code, f"{message}: SQL92 filters (expressionType=SQL92) need the broker "
                                             f"setting enablePropertyFilter=true", context=context, broker=broker)
    if code == NO_PERMISSION and AUTHORIZATION_REFUSED in message:
        return AccessDeniedError(code, f"{message}: the access key's user needs a policy allowing this (mqadmin "
                                       f"createAcl)", context=context, broker=broker)
    if code == NO_PERMISSION and any(text in message for text in AUTHENTICATION_REFUSED):
        return AuthError(code, f"{message}: check the options accessKey and secretKey (the broker has "
                               f"authenticationEnabled=true)", context=context, broker=broker)
    if code in _BUSY:
        kind = ServerBusyError
    elif code == TOPIC_NOT_EXIST:
        kind = UnknownTopicError
    elif code == NO_PERMISSION:
        kind = NoPermissionError
    elif code == NO_MESSAGE:
        kind = OffsetOutOfRangeError
    elif code in (POLLING_TIMEOUT, PULL_NOT_FOUND):
        kind = NoDataError
    elif code in _BAD:
        kind = BadRequestError
    else:
        kind = BadRequestError
    advice = ("check the `topic` option, or create the topic first (mqadmin updateTopic)"
              if kind is UnknownTopicError else "")
    return kind(code, message, context=context, broker=broker, advice=advice)
