"""The committed protobuf modules: current with protos/, and faithful to docs/tubemq/protocol.md#message-fields."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import EncodeError

from tubespark.tubemq.wire.pb import broker_service_pb2, master_service_pb2, rpc_pb2

ROOT = Path(__file__).resolve().parents[3]
GEN_SCRIPT = ROOT / "scripts" / "gen_protos.py"


def pinned_grpcio_tools() -> str:
    spec = importlib.util.spec_from_file_location("gen_protos", GEN_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines constants and functions only; main() is guarded
    return module.PINNED_GRPCIO_TOOLS


def test_generated_modules_match_protos() -> None:
    pinned = pinned_grpcio_tools()
    try:
        installed = importlib.metadata.version("grpcio-tools")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"grpcio-tools is not installed (gen_protos.py needs grpcio-tools=={pinned})")
    if installed != pinned:
        pytest.skip(f"grpcio-tools {installed} is installed, gen_protos.py pins {pinned}: its output would differ")
    result = subprocess.run([sys.executable, str(GEN_SCRIPT), "--check"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "match" in result.stdout


# Field tables of docs/tubemq/protocol.md#message-fields: "number label type name", label R required, O optional,
# * repeated. Message-typed fields give the message name. Of the client-balance (V2) messages, only the
# register and partition-metadata calls, with the fields tubespark uses.
FACTS = {
    "RpcConnHeader": """
        1 R int32 flag, 2 O int64 traceId, 3 O int64 spanId, 4 O int64 parentId
    """,
    "RequestHeader": """
        1 O int32 serviceType, 2 O int32 protocolVer
    """,
    "RequestBody": """
        1 R int32 method, 2 O int64 timeout, 3 O bytes request
    """,
    "ResponseHeader": """
        1 R enum status, 2 O int32 serviceType, 3 O int32 protocolVer
    """,
    "RspExceptionBody": """
        1 R string exceptionName, 2 O string stackTrace
    """,
    "RspResponseBody": """
        1 R int32 method, 2 R bytes data
    """,
    "EventProto": """
        1 O int64 rebalanceId, 2 O int32 opType, 3 O int32 status, 4 * string subscribeInfo
    """,
    "AuthenticateInfo": """
        1 R string userName, 2 R int64 timestamp, 3 R int32 nonce, 4 R string othParams, 5 R string signature
    """,
    "MasterCertificateInfo": """
        1 O AuthenticateInfo authInfo, 2 O string authorizedToken
    """,
    "MasterAuthorizedInfo": """
        1 R int64 visitAuthorizedToken, 2 O string authAuthorizedToken
    """,
    "ApprovedClientConfig": """
        1 R int64 configId, 2 O int32 maxMsgSize
    """,
    "RegisterRequestP2M": """
        1 R string clientId, 2 * string topicList, 3 R int64 brokerCheckSum, 4 R string hostName, 5 O
        MasterCertificateInfo authInfo, 6 O string jdkVersion, 7 O ApprovedClientConfig appdConfig
    """,
    "RegisterResponseM2P": """
        1 R bool success, 2 R int32 errCode, 3 R string errMsg, 4 R int64 brokerCheckSum, 5 * string brokerInfos, 6 O
        MasterAuthorizedInfo authorizedInfo, 7 O ApprovedClientConfig appdConfig
    """,
    "HeartRequestP2M": """
        1 R string clientId, 2 R int64 brokerCheckSum, 3 R string hostName, 4 * string topicList, 5 O
        MasterCertificateInfo authInfo, 6 O ApprovedClientConfig appdConfig
    """,
    "HeartResponseM2P": """
        1 R bool success, 2 R int32 errCode, 3 R string errMsg, 4 R int64 brokerCheckSum, 5 * string topicInfos, 6 *
        string brokerInfos, 7 O bool requireAuth, 8 O MasterAuthorizedInfo authorizedInfo, 9 O ApprovedClientConfig
        appdConfig
    """,
    "CloseRequestP2M": """
        1 R string clientId, 2 O MasterCertificateInfo authInfo
    """,
    "RegisterRequestC2M": """
        1 R string clientId, 2 R string groupName, 3 R string hostName, 4 * string topicList, 5 * string
        subscribeInfo, 6 * string topicCondition, 7 O bool requireBound, 8 O int64 sessionTime, 9 O string sessionKey,
        10 O int32 totalCount, 11 O string requiredPartition, 12 O bool notAllocated, 13 O bool selectBig, 14 O int64
        groupFlowCheckId, 15 O int64 defFlowCheckId, 16 O int64 ssdStoreId, 17 O int32 qryPriorityId, 18 O
        MasterCertificateInfo authInfo, 19 O string jdkVersion
    """,
    "RegisterResponseM2C": """
        1 R bool success, 2 R int32 errCode, 3 R string errMsg, 4 * string topicInfo, 5 O bool notAllocated, 6 O int64
        defFlowCheckId, 7 O string defFlowControlInfo, 8 O int64 groupFlowCheckId, 9 O string groupFlowControlInfo, 10
        O int64 ssdStoreId, 11 O int32 qryPriorityId, 12 O MasterAuthorizedInfo authorizedInfo
    """,
    "HeartRequestC2M": """
        1 R string clientId, 2 R string groupName, 3 * string subscribeInfo, 4 R bool reportSubscribeInfo, 5 O
        EventProto event, 6 O int64 defFlowCheckId, 7 O int64 groupFlowCheckId, 8 O int64 ssdStoreId, 9 O int32
        qryPriorityId, 10 O MasterCertificateInfo authInfo
    """,
    "HeartResponseM2C": """
        1 R bool success, 2 R int32 errCode, 3 R string errMsg, 4 O EventProto event, 5 O bool notAllocated, 6 O int64
        defFlowCheckId, 7 O string defFlowControlInfo, 8 O int64 groupFlowCheckId, 9 O string groupFlowControlInfo, 10
        O int64 ssdStoreId, 11 O int32 qryPriorityId, 12 O bool requireAuth, 13 O MasterAuthorizedInfo authorizedInfo
    """,
    "CloseRequestC2M": """
        1 R string clientId, 2 R string groupName, 3 O MasterCertificateInfo authInfo
    """,
    "TransferedMessage": """
        1 R int64 messageId, 2 R int32 checkSum, 3 R bytes payLoadData, 4 R int32 flag
    """,
    "AuthorizedInfo": """
        1 R int64 visitAuthorizedToken, 2 O string authAuthorizedToken
    """,
    "SendMessageRequestP2B": """
        1 R string clientId, 2 R string topicName, 3 R int32 partitionId, 4 R bytes data, 5 R int32 flag, 6 R int32
        checkSum, 7 R int32 sentAddr, 8 O string msgType, 9 O string msgTime, 10 O AuthorizedInfo authInfo
    """,
    "SendMessageResponseB2P": """
        1 R bool success, 2 R int32 errCode, 3 R string errMsg, 4 O bool requireAuth, 5 O int64 messageId, 6 O int64
        appendTime, 7 O int64 appendOffset
    """,
    "RegisterRequestC2B": """
        1 R int32 opType, 2 R string clientId, 3 R string groupName, 4 R string topicName, 5 R int32 partitionId, 6 R
        int32 readStatus, 7 * string filterCondStr, 8 O int64 currOffset, 9 O string sessionKey, 10 O int64
        sessionTime, 11 O int64 ssdStoreId, 12 O int32 qryPriorityId, 13 O AuthorizedInfo authInfo
    """,
    "RegisterResponseB2C": """
        1 R bool success, 2 R int32 errCode, 3 R string errMsg, 4 O int64 currOffset, 5 O int64 maxOffset
    """,
    "HeartBeatRequestC2B": """
        1 R string clientId, 2 R string groupName, 3 R int32 readStatus, 4 * string partitionInfo, 5 O int64
        ssdStoreId, 6 O int32 qryPriorityId, 7 O AuthorizedInfo authInfo
    """,
    "HeartBeatResponseB2C": """
        1 R bool success, 2 R int32 errCode, 3 R string errMsg, 4 O bool hasPartFailure, 5 * string failureInfo, 6 O
        bool requireAuth
    """,
    "GetMessageRequestC2B": """
        1 R string clientId, 2 R int32 partitionId, 3 R string groupName, 4 R string topicName, 5 O bool
        lastPackConsumed, 6 O bool manualCommitOffset, 7 O bool escFlowCtrl
    """,
    "GetMessageResponseB2C": """
        1 R bool success, 2 R int32 errCode, 3 O string errMsg, 4 * TransferedMessage messages, 5 O int64 currOffset,
        6 O int32 minLimitTime, 7 O bool escFlowCtrl, 8 O int64 currDataDlt, 9 O bool requireSlow, 10 O int64
        maxOffset
    """,
    "CommitOffsetRequestC2B": """
        1 R string clientId, 2 R string topicName, 3 R int32 partitionId, 4 R string groupName, 5 O bool
        lastPackConsumed
    """,
    "CommitOffsetResponseB2C": """
        1 R bool success, 2 R int32 errCode, 3 R string errMsg, 4 O int64 currOffset, 5 O int64 maxOffset
    """,
    "CloseResponseM2P": """
        1 R bool success, 2 R int32 errCode, 3 R string errMsg
    """,
    "CloseResponseM2C": """
        1 R bool success, 2 R int32 errCode, 3 R string errMsg
    """,
    # client-balance (V2): only the fields tubespark sets or reads
    "RegisterRequestC2MV2": """
        1 R string clientId, 2 R string groupName, 3 R string hostName, 4 R int32 sourceCount, 5 R int32 nodeId, 6 *
        string topicList, 10 O MasterCertificateInfo authInfo, 11 O string jdkVersion
    """,
    "RegisterResponseM2CV2": """
        1 R int32 errCode, 2 R string errMsg, 3 O int64 brokerConfigId, 4 * string brokerConfigList, 6 O
        MasterAuthorizedInfo authorizedInfo
    """,
    "GetPartMetaRequestC2M": """
        1 R string clientId, 2 R string groupName, 3 R int64 brokerConfigId, 4 R int64 topicMetaInfoId, 5 O
        MasterCertificateInfo authInfo
    """,
    "GetPartMetaResponseM2C": """
        1 R int32 errCode, 2 R string errMsg, 3 O int64 brokerConfigId, 4 O int64 topicMetaInfoId, 5 * string
        topicMetaInfoList, 6 * string brokerConfigList
    """,
}

SCALARS = {
    FieldDescriptor.TYPE_INT32: "int32",
    FieldDescriptor.TYPE_INT64: "int64",
    FieldDescriptor.TYPE_BOOL: "bool",
    FieldDescriptor.TYPE_STRING: "string",
    FieldDescriptor.TYPE_BYTES: "bytes",
    FieldDescriptor.TYPE_ENUM: "enum",
}


def descriptors() -> dict[str, Descriptor]:
    found: dict[str, Descriptor] = {}
    for module in (rpc_pb2, master_service_pb2, broker_service_pb2):
        for name, desc in module.DESCRIPTOR.message_types_by_name.items():
            assert name not in found, f"{name} is defined twice"
            found[name] = desc
    return found


def expected_fields(spec: str) -> dict[str, tuple[int, str, str]]:
    fields = {}
    for item in spec.split(","):
        number, label, type_name, name = item.split()
        fields[name] = (int(number), label, type_name)
    return fields


def actual_fields(desc: Descriptor) -> dict[str, tuple[int, str, str]]:
    fields = {}
    for field in desc.fields:
        label = "R" if field.is_required else "*" if field.is_repeated else "O"
        type_name = field.message_type.name if field.message_type is not None else SCALARS[field.type]
        fields[field.name] = (field.number, label, type_name)
    return fields


@pytest.mark.parametrize("message", sorted(FACTS))
def test_message_fields_match_the_facts(message: str) -> None:
    desc = descriptors().get(message)
    assert desc is not None, f"{message} is missing from protos/"
    assert actual_fields(desc) == expected_fields(FACTS[message])


def test_every_generated_message_is_covered_by_the_facts() -> None:
    assert sorted(descriptors()) == sorted(FACTS)


@pytest.mark.parametrize(("message", "field", "number", "required"), [
    ("GetMessageResponseB2C", "maxOffset", 10, False),
    ("GetMessageResponseB2C", "currOffset", 5, False),
    ("GetMessageResponseB2C", "errMsg", 3, False),
    ("RegisterRequestC2B", "currOffset", 8, False),
    ("HeartRequestC2M", "reportSubscribeInfo", 4, True),
    ("RegisterRequestP2M", "brokerCheckSum", 3, True),
    ("SendMessageRequestP2B", "sentAddr", 7, True),
    ("RequestBody", "timeout", 2, False),
])
def test_critical_fields(message: str, field: str, number: int, required: bool) -> None:
    desc = descriptors()[message].fields_by_name[field]
    assert (desc.number, desc.is_required) == (number, required)


def test_response_status_values() -> None:
    status = rpc_pb2.ResponseHeader.Status
    assert (status.Value("SUCCESS"), status.Value("ERROR"), status.Value("FATAL")) == (0, 1, 2)


def test_required_fields_are_enforced_when_serialising() -> None:
    # docs/tubemq/protocol.md#required-fields: a request without a required field must never reach the server
    with pytest.raises(EncodeError, match="reportSubscribeInfo"):
        master_service_pb2.HeartRequestC2M(clientId="c", groupName="g").SerializeToString()
