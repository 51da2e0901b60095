"""Is a topic deployed? The master's consumer register answers at once; a producer's heartbeat never does.

A producer learns a topic's partitions only from heartbeat replies, and a reply without the topic means
"not deployed", "its brokers are down" and "closed to publishing" alike, so a producer can only wait and
then guess (the batch read, the sink, ``backfill export`` and ``tubespark lag`` all learn partitions as a
producer). The master checks a *consumer* registration against its configuration before anything else
but credentials (``docs/tubemq/protocol.md``, "Consumer register"): a topic it has no deployment of is
refused with 431 (TOPIC_NOT_DEPLOYED) in one round trip, while a deployed topic whose brokers are down
registers. So when a heartbeat lists no partition of a topic, :func:`check_deployed` registers a
throw-away member of a private group for it and leaves at once: every path then fails an unknown topic
in about a second with :func:`not_deployed`, the message the streaming read gives.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable

from tubespark.errors import TubeSparkError, UnknownTopicError
from tubespark.tubemq.client.common import CHECK_TOPIC, ClientSettings, check, local_ip, new_client_id
from tubespark.tubemq.net.master import MasterChannel
from tubespark.tubemq.wire.constants import Method
from tubespark.tubemq.wire.errcodes import ErrCode
from tubespark.tubemq.wire.pb import master_service_pb2 as mpb

log = logging.getLogger(__name__)

PROBE_GROUP_PREFIX = "tubespark-deploy-probe"
"""The private group of the probe member (a fresh suffix each time, so no real group is joined)."""


def not_deployed(topics: Iterable[str], master: str, server_message: str) -> UnknownTopicError:
    """The error for topics the master has no deployment of: one message on every path."""
    return UnknownTopicError(ErrCode.TOPIC_NOT_DEPLOYED,
                             f"topic {', '.join(topics)} is not deployed on the TubeMQ cluster of master {master} "
                             f"(the master says: {server_message}): {CHECK_TOPIC}", broker="TubeMQ")


def is_not_deployed(exc: BaseException) -> bool:
    """Whether ``exc`` is the master's "not deployed" (431) answer."""
    return isinstance(exc, UnknownTopicError) and exc.code == ErrCode.TOPIC_NOT_DEPLOYED


def elected_moments_ago(exc: BaseException, master: MasterChannel, settings: ClientSettings) -> bool:
    """Retry filter: "not deployed" (431) from a master ``master`` moved to within ``settings.master_election_s``.

    A master elected moments ago answers 431 for every topic until it has loaded the configuration (seen on
    2.4.0 after the active master's kill -9: a query restarted then stopped on it), so such an answer is asked
    again until that long after the move; a master that served all along is believed at once.
    """
    return is_not_deployed(exc) and master.moved_within(settings.master_election_s)


def no_partition_listed(topics: Iterable[str], master: str, timeout_s: float) -> UnknownTopicError:
    """The error for deployed topics the master lists no partition of (the probe found them deployed)."""
    return UnknownTopicError(ErrCode.FORBIDDEN,
                             f"topic {', '.join(topics)} has no partition to serve on the TubeMQ cluster of master "
                             f"{master} (none listed within {timeout_s:.0f} s), though the master has it deployed: "
                             f"its brokers are down or offline, or it is closed to publishing there (tubespark "
                             f"learns a topic's partitions as a producer does, for reads too); check that its "
                             f"brokers run and accept the topic", broker="TubeMQ")


def check_deployed(master: MasterChannel, topics: Iterable[str], settings: ClientSettings) -> None:
    """Raise :func:`not_deployed` when the master refuses ``topics`` as not deployed; return otherwise.

    Any other outcome (registered, refused by authorization, a master that does not answer) says nothing
    about deployment and returns: the caller goes on as it would have without asking.
    """
    topics = sorted(set(topics))
    group = f"{PROBE_GROUP_PREFIX}-{uuid.uuid4().hex[:12]}"
    client_id = new_client_id("probe")
    request = mpb.RegisterRequestC2M(clientId=client_id, groupName=group, hostName=local_ip(), topicList=topics,
                                     sessionTime=int(time.time() * 1000), jdkVersion="python")
    settings.add_master_auth(request)
    try:
        check(master.call(Method.CONSUMER_REGISTER, request, mpb.RegisterResponseM2C), f"probe register of {topics}")
    except UnknownTopicError as exc:
        if exc.code == ErrCode.TOPIC_NOT_DEPLOYED:
            raise not_deployed(topics, master.active_address, exc.server_message) from None
        return
    except TubeSparkError as exc:
        log.debug("the deployment probe of %s told nothing: %s", topics, exc)
        return
    close = mpb.CloseRequestC2M(clientId=client_id, groupName=group)
    settings.add_master_auth(close)
    try:  # leave at once; a member the master still counts only expires with its session
        master.call(Method.CONSUMER_CLOSE, close, mpb.CloseResponseM2C)
    except TubeSparkError as exc:
        log.debug("the deployment probe member %s could not leave: %s", client_id, exc)
