"""TubeMQ's business error codes, in one table: each code, its name and the error class it raises.

Code values are from docs/tubemq/protocol.md (error codes); the classes are tubespark's shared
broker errors (:mod:`tubespark.errors`), so callers branch on ``retriable`` and the class.
"""

from __future__ import annotations

import enum

from tubespark.errors import AuthError, BadRequestError, BrokerError, NoDataError, ServerBusyError, UnknownTopicError
from tubespark.tubemq.errors import GroupConflictError, NotRegisteredError, PartitionOccupiedError, ServiceStoppedError


class ErrCode(enum.IntEnum):
    """Server-sent codes (docs/tubemq/protocol.md, "Error codes")."""

    SUCCESS = 200
    NOT_READY = 201
    MOVED = 301
    BAD_REQUEST = 400
    UNAUTHORIZED = 401
    FORBIDDEN = 403
    NOT_FOUND = 404
    PARTITION_OCCUPIED = 410
    HB_NO_NODE = 411
    DUPLICATE_PARTITION = 412
    CERTIFICATE_FAILURE = 415
    SERVER_RECEIVE_OVERFLOW = 419
    CLIENT_HIGH_FREQUENCY_REQUEST = 421
    PARTITION_UNSUBSCRIBABLE = 422
    PARTITION_UNPUBLISHABLE = 423
    CLIENT_INCONSISTENT_CONSUMETYPE = 424
    CLIENT_DUPLICATE_INDEXID = 430
    TOPIC_NOT_DEPLOYED = 431
    CONSUME_GROUP_FORBIDDEN = 450
    SERVER_CONSUME_SPEED_LIMIT = 452
    CONSUME_CONTENT_FORBIDDEN = 455
    INTERNAL_SERVER_ERROR = 500
    SERVICE_UNAVAILABLE = 503


_CLASSES: dict[int, type[BrokerError]] = {
    ErrCode.MOVED: ServerBusyError,
    ErrCode.BAD_REQUEST: BadRequestError,
    ErrCode.UNAUTHORIZED: NotRegisteredError,  # 401 on commit: the registration is gone
    ErrCode.FORBIDDEN: UnknownTopicError,
    ErrCode.NOT_FOUND: NoDataError,
    ErrCode.PARTITION_OCCUPIED: PartitionOccupiedError,
    ErrCode.HB_NO_NODE: NotRegisteredError,
    ErrCode.DUPLICATE_PARTITION: PartitionOccupiedError,
    ErrCode.CERTIFICATE_FAILURE: AuthError,
    ErrCode.SERVER_RECEIVE_OVERFLOW: ServerBusyError,
    ErrCode.CLIENT_HIGH_FREQUENCY_REQUEST: ServerBusyError,
    ErrCode.PARTITION_UNSUBSCRIBABLE: UnknownTopicError,
    ErrCode.PARTITION_UNPUBLISHABLE: UnknownTopicError,
    ErrCode.TOPIC_NOT_DEPLOYED: UnknownTopicError,
    ErrCode.CONSUME_GROUP_FORBIDDEN: AuthError,
    ErrCode.SERVER_CONSUME_SPEED_LIMIT: ServerBusyError,
    ErrCode.CONSUME_CONTENT_FORBIDDEN: AuthError,
    ErrCode.INTERNAL_SERVER_ERROR: ServerBusyError,
    ErrCode.SERVICE_UNAVAILABLE: ServiceStoppedError,
}
_CLASSES.update(dict.fromkeys(range(ErrCode.CLIENT_INCONSISTENT_CONSUMETYPE, ErrCode.CLIENT_DUPLICATE_INDEXID + 1),
                              GroupConflictError))


def error_for_code(code: int, message: str, *, context: str = "", advice: str = "") -> BrokerError:
    """Build the error that matches a TubeMQ ``errCode`` (a plain :class:`BrokerError` for unknown codes);
    ``advice``: what the user can do about it (see :class:`~tubespark.errors.BrokerError`)."""
    return _CLASSES.get(code, BrokerError)(code, message, context=context, broker="TubeMQ", advice=advice)
