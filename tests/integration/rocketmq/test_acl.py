"""``accessKey``/``secretKey`` against a real RocketMQ 5.3.3 broker with ACL 2.0 on (authentication and
authorization): the sink and a batch read work signed by a user the broker knows; a wrong secret fails with
AuthError, a user without a policy for the topic with AccessDeniedError, neither retried, and the secret
appears in no error text and no repr. The stack starts ahead of the module (tubespark_testbed/prestart.py).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.readers import RocketMQBatchReader
from tubespark.errors import AuthError
from tubespark.rocketmq.errors import AccessDeniedError
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.rocketmq.wire.acl import Credentials

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ADMIN = Credentials("tubespark-admin", "admin-secret-8c1f")
READER = Credentials("reader", "reader-secret-5e2a")  # authenticates, has no policy


@contextlib.contextmanager
def _acl_stack(_tmp: Path) -> Iterator[object]:
    from tubespark_testbed.rocketmq import RocketMQStack

    stack = RocketMQStack.with_acl(ADMIN)
    try:
        stack.start()
        stack.create_user(READER)
        yield stack
    finally:
        stack.stop()


PRESTART = {"acl_stack": _acl_stack}
PRESTART_LIGHT = True  # a broker: mostly waiting while it starts, so it may start beside another


@pytest.fixture(scope="module")
def acl_stack(prestarted):
    return prestarted("acl_stack")


def options(stack, topic: str, credentials: Credentials | None, **extra: str) -> dict[str, str]:
    raw = {"namesrv": stack.namesrv_address, "topic": topic, **extra}
    if credentials is not None:
        raw |= {"accessKey": credentials.access_key, "secretKey": credentials.secret_key}
    return raw


def plan(stack, topic: str, credentials: Credentials | None) -> list[object]:
    return RocketMQBatchReader(RocketMQOptions.from_raw(options(stack, topic, credentials), mode="read")).partitions()


def test_signed_writes_and_reads_and_the_typed_refusals(spark, acl_stack):
    topic = acl_stack.create_topic("acl" + uuid.uuid4().hex[:8], 2)
    (spark.createDataFrame([(f"v{i}", "t") for i in range(50)], "value string, tags string").write
     .format("rocketmq").options(**options(acl_stack, topic, ADMIN)).mode("append").save())
    rows = spark.read.format("rocketmq").options(**options(acl_stack, topic, ADMIN)).load().collect()
    assert sorted(r.value for r in rows) == sorted(f"v{i}".encode() for i in range(50))

    wrong = Credentials(ADMIN.access_key, "not-the-secret-0000")
    failures = []
    for credentials, kind, text in [(wrong, AuthError, "check signature failed"),
                                    (Credentials("nobody", "nobody-secret-1"), AuthError, "nobody"),
                                    (None, AuthError, "username cannot be null"),
                                    (READER, AccessDeniedError, "has no permission")]:
        with pytest.raises(kind, match=text) as error:
            plan(acl_stack, topic, credentials)
        assert not error.value.retriable
        failures.append(error.value)
    assert not isinstance(failures[0], AccessDeniedError)
    parsed = RocketMQOptions.from_raw(options(acl_stack, topic, wrong), mode="read")
    shown = " ".join([*(str(f) for f in failures), repr(parsed), repr(parsed.client_settings())])
    assert wrong.secret_key not in shown and READER.secret_key not in shown and ADMIN.secret_key not in shown
