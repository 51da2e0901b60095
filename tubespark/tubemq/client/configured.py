"""The master's configuration of some topics over RPC: every deployment, its broker running or not.

A producer heartbeat lists only the partitions of brokers that serve now, so a batch read planned from it
alone would leave out a broker that is down without a word. The master's web API shows the configuration,
but its address is a guess unless ``masterWebUrl`` is given (port 8080 of the master host; a cluster's
``webPort`` may be another). The master also answers a *client-balance* consumer's partition-metadata call
(method 22) from the configuration itself: ``topicMetaInfoList`` names every deployment of the member's
topics, ``brokerId:numTopicStores:numPartitions:statusId``, with statusId 1 only while that broker runs and
the topic is open to consumers there (``docs/tubemq/brokers.md``, "Configured and served partitions"). So
:func:`configured_by_master` registers a throw-away client-balance member of a private group on the RPC
port the read already uses, asks once and leaves: no option, no second port.

What it cannot tell that the web API can: why a deployment is not served, and a deployment deleted but not
yet removed (it is still listed, not served). A caller that finds partitions missing may ask the web API
for that, and fails (or, asked to, skips) with this answer when the web API is silent.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from tubespark.errors import TubeSparkError
from tubespark.tubemq.client.common import ADVICE, ClientSettings, local_ip, new_client_id
from tubespark.tubemq.client.placement import TOPIC_STATUS_NORMAL, Deployment, Placement
from tubespark.tubemq.net.master import MasterChannel
from tubespark.tubemq.wire.constants import Method
from tubespark.tubemq.wire.errcodes import ErrCode, error_for_code
from tubespark.tubemq.wire.formats import BrokerInfo, ConfiguredDeployment
from tubespark.tubemq.wire.pb import master_service_pb2 as mpb

log = logging.getLogger(__name__)

CONFIG_PROBE_GROUP_PREFIX = "tubespark-config-probe"
"""The private group of the member (a fresh suffix each time: no real group is joined, and a client-balance
group cannot be mixed with a server-balance one of the same name)."""

MAX_TOPICS_PER_MEMBER = 1024
"""Most topics the master lets one consumer subscribe to (more are refused with 400): more are asked in turns."""

NO_META_ID = -2
"""``brokerConfigId`` / ``topicMetaInfoId`` of a member that has none yet: the master then sends both lists."""


def configured_by_master(masters: str | Iterable[str], topics: Iterable[str], settings: ClientSettings) -> Placement:
    """The master's configuration of ``topics`` from its RPC port: every deployment, served or not
    (:attr:`Deployment.run_known` False: only served-or-not is known).

    Raises a :class:`TubeSparkError` when the master does not answer it: one without client-balance calls
    (``RpcError`` "Unsupported method ID"), a refusal (authorization, a topic it has no deployment of), or no
    master reachable. The caller then has to learn the configuration elsewhere or say it cannot.
    """
    names = sorted(set(topics))
    master = settings.master_channel(masters if isinstance(masters, str) else list(masters))
    try:
        deployments: list[Deployment] = []
        for first in range(0, len(names), MAX_TOPICS_PER_MEMBER):
            deployments.extend(_ask(master, names[first:first + MAX_TOPICS_PER_MEMBER], settings))
        return Placement(tuple(deployments))
    finally:
        master.close()


def _ask(master: MasterChannel, topics: list[str], settings: ClientSettings) -> tuple[Deployment, ...]:
    """Register a member of a private group for ``topics``, ask the partition metadata once, leave."""
    group = f"{CONFIG_PROBE_GROUP_PREFIX}-{uuid.uuid4().hex[:12]}"
    client_id = new_client_id("config")
    register = mpb.RegisterRequestC2MV2(clientId=client_id, groupName=group, hostName=local_ip(), sourceCount=1,
                                        nodeId=0, topicList=topics, jdkVersion="python")
    settings.add_master_auth(register)
    registered = master.call(Method.CONSUMER_REGISTER_V2, register, mpb.RegisterResponseM2CV2)
    _check(registered.errCode, registered.errMsg, f"client-balance register of {', '.join(topics)}")
    try:
        ask = mpb.GetPartMetaRequestC2M(clientId=client_id, groupName=group, brokerConfigId=NO_META_ID,
                                        topicMetaInfoId=NO_META_ID)
        settings.add_master_auth(ask)
        meta = master.call(Method.CONSUMER_GET_PART_META, ask, mpb.GetPartMetaResponseM2C)
        _check(meta.errCode, meta.errMsg, f"partition metadata of {', '.join(topics)}")
        brokers = [*registered.brokerConfigList, *meta.brokerConfigList]
        return placement_of(meta.topicMetaInfoList, brokers, topics, settings.default_broker_port).deployments
    finally:
        _leave(master, client_id, group, settings)


def placement_of(meta_infos: Iterable[str], broker_infos: Iterable[str], topics: Iterable[str],
                 default_port: int) -> Placement:
    """A :class:`Placement` from a ``topicMetaInfoList`` and the ``brokerConfigList`` naming its brokers."""
    wanted = set(topics)
    addresses = {}
    for text in broker_infos:
        broker = BrokerInfo.parse(text, default_port)
        addresses[broker.broker_id] = broker.address
    deployments = []
    for text in meta_infos:
        for item in ConfiguredDeployment.parse_all(text):
            if item.topic not in wanted:
                continue
            deployments.append(Deployment(
                topic=item.topic, broker_id=item.broker_id,
                broker_address=addresses.get(item.broker_id, "?"), num_partitions=item.num_partitions,
                num_stores=item.num_stores, status_id=TOPIC_STATUS_NORMAL, running=item.subscribable,
                accept_subscribe=item.subscribable, manage_status="-", run_known=False))
    return Placement(tuple(deployments))


def _check(code: int, message: str, context: str) -> None:
    """V2 replies carry no ``success`` field: errCode 200 is success, anything else the typed error."""
    if code not in (0, ErrCode.SUCCESS):
        raise error_for_code(code, message, context=context, advice=ADVICE.get(code, ""))


def _leave(master: MasterChannel, client_id: str, group: str, settings: ClientSettings) -> None:
    """Leave at once (method 6, as the Java client-balance consumer does); a member that could not leave
    expires with its session at the master and holds nothing meanwhile."""
    close = mpb.CloseRequestC2M(clientId=client_id, groupName=group)
    settings.add_master_auth(close)
    try:
        master.call(Method.CONSUMER_CLOSE, close, mpb.CloseResponseM2C)
    except TubeSparkError as exc:
        log.debug("the configuration probe member %s could not leave: %s", client_id, exc)
