"""Request signing for brokers with ACL (``AclClientRPCHook``), the typed errors of the broker's ACL answers,
and the secret kept out of every repr and message. The real broker: tests/integration/rocketmq/test_acl.py."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from tubespark.errors import AuthError, OptionError
from tubespark.rocketmq.errors import AccessDeniedError, NoPermissionError
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.wire import codes, headers
from tubespark.rocketmq.wire.acl import Credentials, sign, signature
from tubespark.rocketmq.wire.frame import FLAG_RESPONSE, Command, decode_command, encode_command

SECRET = "s3cr3t-value-71"


def test_signature_matches_the_java_signer() -> None:
    assert signature(b"RocketMQ", "12345678") == "IUc8rrO/0gDch8CjObLQsW2rsiA="  # AclSignerTest's vector


def test_a_request_is_signed_over_its_sorted_field_values_and_body() -> None:
    cmd = headers.pull_request(group="g", topic="t", queue_id=1, offset=7, max_messages=32, now_ms=5)
    signed = sign(cmd, Credentials("reader", SECRET))
    assert "AccessKey" not in cmd.ext and signed.ext["AccessKey"] == "reader"
    values = "".join(v for k, v in sorted(signed.ext.items()) if k != "Signature")
    expected = base64.b64encode(hmac.new(SECRET.encode(), values.encode(), hashlib.sha1).digest()).decode()
    assert signed.ext["Signature"] == expected
    with_body = sign(Command(320, {"b": "t"}, b"payload"), Credentials("reader", SECRET))
    assert with_body.ext["Signature"] == signature(b"reader" + b"t" + b"payload", SECRET)  # AccessKey < b
    # what travels: the fields as signed, never the secret
    frame = encode_command(signed, 3)
    assert SECRET.encode() not in frame and decode_command(frame[4:]).ext == signed.ext


def test_acl_answers_are_typed_and_a_read_only_group_stays_retriable() -> None:
    def error(remark: str) -> Exception:
        return codes.error_for_code(codes.NO_PERMISSION, remark, context="pull")

    signature_failed = error("check signature failed.")
    assert type(signature_failed) is AuthError and not signature_failed.retriable
    assert "secretKey" in str(signature_failed)
    assert type(error("User:nobody is not found.")) is AuthError
    assert type(error("username cannot be null.")) is AuthError
    denied = error("User:reader has no permission to access Topic:t from 127.0.0.1, detail: no acl")
    assert isinstance(denied, AccessDeniedError) and isinstance(denied, AuthError) and not denied.retriable
    read_only = error("the broker[broker-a] sending message is forbidden")
    assert isinstance(read_only, NoPermissionError) and read_only.retriable
    with pytest.raises(AuthError):
        headers.read_ok(Command(codes.NO_PERMISSION, remark="check signature failed.", flag=FLAG_RESPONSE), "x")


def test_options_take_both_keys_and_keep_the_secret_out_of_reprs() -> None:
    raw = {"namesrv": "h:1", "topic": "t", "accessKey": "reader", "secretKey": SECRET}
    options = RocketMQOptions.from_raw(raw, mode="read")
    settings = options.client_settings()
    assert settings.credentials == Credentials("reader", SECRET)
    assert SECRET not in repr(options) and SECRET not in repr(settings) and "reader" in repr(settings)
    assert RocketMQOptions.from_raw({"namesrv": "h:1", "topic": "t"}, mode="read").client_settings().credentials is None
    for half in ({"accessKey": "reader"}, {"secretKey": SECRET}):
        with pytest.raises(OptionError, match="go together") as error:
            RocketMQOptions.from_raw({"namesrv": "h:1", "topic": "t", **half}, mode="read")
        assert SECRET not in str(error.value)
